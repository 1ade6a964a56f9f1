/* trace.c — the trace reader (contract in trace.h; the replay loop is in policy.c). */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

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
        gml_trace_rec r;
        if (gml_trace_parse_line(s, &r, &why)) {
            snprintf(err, errlen, "%s:%u: %s", path, line, why);
            rc = -1;
            break;
        }
        *e = (gml_trace_event){.op = r.op, .ptr = r.ptr, .size = r.size, .stream = r.stream,
                               .t_us = r.t_us, .line = line};
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
