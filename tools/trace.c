/* trace.c — the trace reader (contract in trace.h; the replay loop is in policy.c). */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int parse_u64(const char *tok, int base, uint64_t *out)
{
    if (!tok || !*tok || *tok == '-' || *tok == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(tok, &end, base);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

static int parse_line(char *s, gml_trace_event *e, const char **why)
{
    char *save, *tok[6];
    int n = 0;
    for (char *t = strtok_r(s, " \t\r\n", &save); t && n < 6; t = strtok_r(NULL, " \t\r\n", &save))
        tok[n++] = t;
    if (n > 5) {
        *why = "too many fields (want: OP PTR SIZE STREAM T_US)";
        return -1;
    }
    if (n != 5) {
        *why = "expected 5 fields: OP PTR SIZE STREAM T_US";
        return -1;
    }
    if (strcmp(tok[0], "A") && strcmp(tok[0], "F")) {
        *why = "the operation must be A or F";
        return -1;
    }
    e->op = tok[0][0];
    if (parse_u64(tok[1], 16, &e->ptr)) {
        *why = "the pointer is not a hexadecimal number";
        return -1;
    }
    if (parse_u64(tok[2], 10, &e->size)) {
        *why = "the size is not a decimal number";
        return -1;
    }
    if (parse_u64(tok[3], 16, &e->stream)) {
        *why = "the stream is not a hexadecimal number";
        return -1;
    }
    if (parse_u64(tok[4], 10, &e->t_us)) {
        *why = "the time is not a decimal number";
        return -1;
    }
    if (e->op == 'A' && (e->size == 0 || e->ptr == 0)) {
        *why = "an allocation needs a non-zero pointer and size";
        return -1;
    }
    if (e->op == 'F' && e->size != 0) {
        *why = "a free has size 0";
        return -1;
    }
    return 0;
}

int gml_trace_load(const char *path, gml_trace *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
        return -1;
    }
    int c0 = gzgetc(f);
    if (c0 == 0x80) { /* the pickle protocol opcode */
        snprintf(err, errlen, "%s: a Python pickle, not a gmlake trace: if it is a PyTorch memory "
                 "snapshot, replay it with `gmlake replay` or convert it with `gmlake "
                 "import-snapshot`", path);
        gzclose(f);
        return -1;
    }
    if (c0 != -1)
        gzungetc(c0, f);
    size_t cap = 0;
    char buf[512];
    uint32_t line = 0;
    int rc = 0;
    while (gzgets(f, buf, sizeof buf)) {
        line++;
        size_t len = strlen(buf);
        if (len == sizeof buf - 1 && buf[len - 1] != '\n') {
            snprintf(err, errlen, "%s:%u: line too long", path, line);
            rc = -1;
            break;
        }
        char *s = buf;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '#' || *s == '\n' || *s == '\r' || *s == 0)
            continue;
        if (out->n == cap) {
            cap = cap ? cap * 2 : 4096;
            gml_trace_event *ne = realloc(out->ev, cap * sizeof *ne);
            if (!ne) {
                snprintf(err, errlen, "%s:%u: out of memory", path, line);
                rc = -1;
                break;
            }
            out->ev = ne;
        }
        const char *why = NULL;
        gml_trace_event *e = &out->ev[out->n];
        if (parse_line(s, e, &why)) {
            snprintf(err, errlen, "%s:%u: %s", path, line, why);
            rc = -1;
            break;
        }
        e->line = line;
        out->n++;
    }
    int zerr = 0;
    const char *zmsg = gzerror(f, &zerr);
    if (rc == 0 && zerr != Z_OK && zerr != Z_STREAM_END) {
        snprintf(err, errlen, "%s:%u: read error: %s", path, line + 1, zmsg);
        rc = -1;
    }
    gzclose(f);
    if (rc == 0 && out->n == 0) {
        snprintf(err, errlen, "%s: no events", path);
        rc = -1;
    }
    if (rc) {
        free(out->ev);
        out->ev = NULL;
        out->n = 0;
        return -1;
    }
    out->path = strdup(path);
    return 0;
}

void gml_trace_free(gml_trace *t)
{
    free(t->ev);
    free(t->path);
    memset(t, 0, sizeof *t);
}
