/* trace.c — the trace reader (contract in trace.h; the replay loop is in policy.c).
 *
 * The bytes come from a file or from memory, plain or gzip (one or more members, as gzip
 * writes them); zlib's inflate is driven here rather than through gzFile, so that a stream cut
 * short, corrupt data and bytes after the last member are each told apart from a bad line. */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

enum { IN_SIZE = 1 << 16, OUT_SIZE = 1 << 16, LINE_MAX_LEN = 512 };

typedef struct reader {
    const char *path;
    FILE *f;                   /* or: */
    const unsigned char *mem;  /* the bytes in memory */
    size_t memlen, mempos;
    bool gz, raw_eof, member_done;
    z_stream z;
    unsigned char in[IN_SIZE];
    size_t in_pos, in_len;     /* plain and gzip: the raw bytes not consumed yet */
} reader;

/* Refills r->in behind what is left of it; false on a read error (err set). */
static bool refill(reader *r, char *err, size_t errlen)
{
    if (r->raw_eof)
        return true;
    if (r->in_pos > 0) {
        memmove(r->in, r->in + r->in_pos, r->in_len - r->in_pos);
        r->in_len -= r->in_pos;
        r->in_pos = 0;
    }
    size_t want = IN_SIZE - r->in_len, got;
    if (r->f) {
        got = fread(r->in + r->in_len, 1, want, r->f);
        if (got < want) {
            if (ferror(r->f)) {
                snprintf(err, errlen, "%s: read error: %s", r->path, strerror(errno ? errno : EIO));
                return false;
            }
            r->raw_eof = true;
        }
    } else {
        got = r->memlen - r->mempos < want ? r->memlen - r->mempos : want;
        memcpy(r->in + r->in_len, r->mem + r->mempos, got);
        r->mempos += got;
        if (r->mempos == r->memlen)
            r->raw_eof = true;
    }
    r->in_len += got;
    return true;
}

/* Up to cap bytes of the trace's text into out; *got 0 at the end.  -1 with err set. */
static int read_text(reader *r, unsigned char *out, size_t cap, size_t *got, char *err,
                     size_t errlen)
{
    *got = 0;
    if (!r->gz) {
        if (r->in_pos == r->in_len && !refill(r, err, errlen))
            return -1;
        size_t n = r->in_len - r->in_pos < cap ? r->in_len - r->in_pos : cap;
        memcpy(out, r->in + r->in_pos, n);
        r->in_pos += n;
        *got = n;
        return 0;
    }
    while (*got == 0) {
        if (r->member_done) {
            /* another gzip member, or the end: anything else is refused */
            if (r->in_len - r->in_pos < 2 && !refill(r, err, errlen))
                return -1;
            size_t left = r->in_len - r->in_pos;
            if (left == 0)
                return 0;
            if (left < 2 || r->in[r->in_pos] != 0x1f || r->in[r->in_pos + 1] != 0x8b) {
                snprintf(err, errlen, "%s: data after the end of the gzip stream (not a gzip "
                         "member): the file is corrupt or was appended to", r->path);
                return -1;
            }
            if (inflateReset(&r->z) != Z_OK) {
                snprintf(err, errlen, "%s: corrupt gzip data", r->path);
                return -1;
            }
            r->member_done = false;
        }
        if (r->in_pos == r->in_len && !refill(r, err, errlen))
            return -1;
        r->z.next_in = r->in + r->in_pos;
        r->z.avail_in = (uInt)(r->in_len - r->in_pos);
        r->z.next_out = out;
        r->z.avail_out = (uInt)cap;
        int zr = inflate(&r->z, Z_NO_FLUSH);
        r->in_pos = r->in_len - r->z.avail_in;
        *got = cap - r->z.avail_out;
        if (zr == Z_STREAM_END) {
            r->member_done = true;
        } else if (zr == Z_BUF_ERROR || (zr == Z_OK && *got == 0)) {
            if (r->in_pos == r->in_len && r->raw_eof) {
                snprintf(err, errlen, "%s: truncated: the gzip stream ends early (the file is cut "
                         "short or corrupt)", r->path);
                return -1;
            }
        } else if (zr != Z_OK) {
            snprintf(err, errlen, "%s: corrupt gzip data (%s): the file is damaged or not a "
                     "gmlake trace", r->path,
                     zr == Z_MEM_ERROR ? "out of memory" : r->z.msg ? r->z.msg : "inflate failed");
            return -1;
        }
    }
    return 0;
}

/* The first line: "# gmlake-trace v1" then ':', a blank or the end. */
static const char *header_problem(const char *s)
{
    static const char magic[] = "# gmlake-trace ";
    if (strncmp(s, magic, sizeof magic - 1) != 0)
        return "no '# gmlake-trace v1' header on the first line: not a gmlake trace";
    const char *v = s + sizeof magic - 1;
    if (v[0] == 'v' && v[1] == '1' && (v[2] == 0 || v[2] == ':' || v[2] == ' ' ||
                                       v[2] == '\t' || v[2] == '\r' || v[2] == '\n'))
        return NULL;
    return "unsupported trace format version (this reader reads gmlake-trace v1)";
}

/* One line (NUL-terminated, newline kept or not); 0, or -1 with err set. */
static int take_line(gml_trace *out, size_t *cap, char *buf, uint32_t line, const char *path,
                     char *err, size_t errlen)
{
    if (line == 1) {
        const char *why = header_problem(buf);
        if (why) {
            snprintf(err, errlen, "%s:1: %s", path, why);
            return -1;
        }
        return 0;
    }
    char *s = buf;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s == '#' || *s == '\n' || *s == '\r' || *s == 0)
        return 0;
    if (out->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4096;
        gml_trace_event *ne = realloc(out->ev, nc * sizeof *ne);
        if (!ne) {
            snprintf(err, errlen, "%s:%u: out of memory", path, line);
            return -1;
        }
        out->ev = ne;
        *cap = nc;
    }
    const char *why = NULL;
    gml_trace_rec r;
    if (gml_trace_parse_line(s, &r, &why)) {
        snprintf(err, errlen, "%s:%u: %s", path, line, why);
        return -1;
    }
    out->ev[out->n++] = (gml_trace_event){.op = r.op, .ptr = r.ptr, .size = r.size,
                                          .stream = r.stream, .t_us = r.t_us, .line = line};
    return 0;
}

static int load(reader *r, gml_trace *out, char *err, size_t errlen)
{
    const char *path = r->path;
    if (!refill(r, err, errlen))
        return -1;
    if (r->in_len >= 2 && r->in[0] == 0x1f && r->in[1] == 0x8b) {
        r->gz = true;
        if (inflateInit2(&r->z, 16 + MAX_WBITS) != Z_OK) {
            snprintf(err, errlen, "%s: out of memory", path);
            return -1;
        }
    }
    unsigned char *text = malloc(OUT_SIZE);
    if (!text) {
        snprintf(err, errlen, "%s: out of memory", path);
        if (r->gz)
            inflateEnd(&r->z);
        return -1;
    }
    char line_buf[LINE_MAX_LEN];
    size_t len = 0, cap = 0, got;
    uint32_t line = 1;
    bool first = true;
    int rc = 0;
    bool read_failed = false;
    while (rc == 0 && !(read_failed = read_text(r, text, OUT_SIZE, &got, err, errlen) != 0) && got) {
        if (first && text[0] == 0x80) { /* the pickle protocol opcode */
            snprintf(err, errlen, "%s: a Python pickle, not a gmlake trace: %s", path,
                     strcmp(path, "-") == 0
                         ? "standard input takes a trace only; give a PyTorch memory snapshot as a "
                           "file (gmlake replay FILE.pickle) or convert it with `gmlake import-snapshot`"
                         : "if it is a PyTorch memory snapshot, replay it with `gmlake replay` or "
                           "convert it with `gmlake import-snapshot`");
            rc = -1;
            break;
        }
        first = false;
        if (memchr(text, 0, got)) {
            /* the line of the NUL: count the newlines before it */
            const unsigned char *nul = memchr(text, 0, got);
            for (const unsigned char *p = text; p < nul; p++)
                line += *p == '\n';
            snprintf(err, errlen, "%s:%u: a NUL byte: binary data, not a text trace", path, line);
            rc = -1;
            break;
        }
        const unsigned char *p = text, *end = text + got;
        while (p < end) {
            const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
            size_t n = (size_t)((nl ? nl + 1 : end) - p);
            if (len + n >= sizeof line_buf) {
                snprintf(err, errlen, "%s:%u: line too long (more than %d bytes)", path, line,
                         LINE_MAX_LEN - 2);
                rc = -1;
                break;
            }
            memcpy(line_buf + len, p, n);
            len += n;
            p += n;
            if (nl) {
                line_buf[len] = 0;
                if (take_line(out, &cap, line_buf, line, path, err, errlen)) {
                    rc = -1;
                    break;
                }
                len = 0;
                line++;
            }
        }
    }
    if (read_failed)
        rc = -1;
    if (rc && !read_failed && r->gz) {
        /* a bad line in gzip data: corrupt data decompresses to garbage before its checksum
         * fails, so read to the end and say "corrupt" / "truncated" where that is the cause */
        char zerr[512];
        int zr;
        while ((zr = read_text(r, text, OUT_SIZE, &got, zerr, sizeof zerr)) == 0 && got)
            ;
        if (zr)
            snprintf(err, errlen, "%s", zerr);
    }
    if (rc == 0 && len) { /* the last line, without a newline */
        line_buf[len] = 0;
        rc = take_line(out, &cap, line_buf, line, path, err, errlen);
    }
    if (rc == 0 && first) {
        snprintf(err, errlen, "%s: empty: no '# gmlake-trace v1' header and no events", path);
        rc = -1;
    }
    if (rc == 0 && out->n == 0) {
        snprintf(err, errlen, "%s: no events", path);
        rc = -1;
    }
    free(text);
    if (r->gz)
        inflateEnd(&r->z);
    return rc;
}

static int finish(int rc, const char *path, gml_trace *out, char *err, size_t errlen)
{
    if (rc == 0 && !(out->path = strdup(path))) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -1;
    }
    if (rc) {
        free(out->ev);
        memset(out, 0, sizeof *out);
        return -1;
    }
    return 0;
}

/* Reads a trace from f, or from len bytes at mem where f is NULL, named `name` in messages. */
static int load_from(const char *name, FILE *f, const void *mem, size_t len, gml_trace *out,
                     char *err, size_t errlen)
{
    reader *r = calloc(1, sizeof *r);
    if (!r) {
        snprintf(err, errlen, "%s: out of memory", name);
        return finish(-1, name, out, err, errlen);
    }
    r->path = name;
    r->f = f;
    r->mem = mem;
    r->memlen = len;
    int rc = load(r, out, err, errlen);
    free(r);
    return finish(rc, name, out, err, errlen);
}

int gml_trace_load(const char *path, gml_trace *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    bool in = strcmp(path, "-") == 0; /* standard input (a copy: closing it leaves fd 0 alone) */
    int fd = in ? dup(STDIN_FILENO) : -1;
    FILE *f = in ? (fd >= 0 ? fdopen(fd, "rb") : NULL) : fopen(path, "rb");
    if (!f) {
        int e = errno ? errno : ENOENT;
        if (fd >= 0)
            close(fd);
        snprintf(err, errlen, "%s: cannot %s: %s", path, in ? "read standard input" : "open",
                 strerror(e));
        return -1;
    }
    int rc = load_from(path, f, NULL, 0, out, err, errlen);
    fclose(f);
    return rc;
}

int gml_trace_load_mem(const char *name, const void *data, size_t len, gml_trace *out, char *err,
                       size_t errlen)
{
    memset(out, 0, sizeof *out);
    return load_from(name, NULL, data, len, out, err, errlen);
}

void gml_trace_free(gml_trace *t)
{
    free(t->ev);
    free(t->path);
    memset(t, 0, sizeof *t);
}

void gml_trace_say_live_again(const gml_trace *t, const gml_trace_event *e, char *err,
                              size_t errlen)
{
    snprintf(err, errlen, "%s:%u: pointer %#" PRIx64 " is allocated while still live", t->path,
             e->line, e->ptr);
}
