/* trace_format.c — the gmlake-trace v1 line format (contract in trace_format.h). */
#include "trace_format.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void gml_trace_write_header(FILE *f, const char *origin)
{
    fprintf(f, "# gmlake-trace v1: op ptr size stream t_us (%s)\n", origin);
}

void gml_trace_write_line(FILE *f, const gml_trace_rec *r)
{
    fprintf(f, "%c %#llx %llu %#llx %llu\n", r->op, (unsigned long long)r->ptr,
            (unsigned long long)r->size, (unsigned long long)r->stream, (unsigned long long)r->t_us);
}

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

int gml_trace_parse_line(char *s, gml_trace_rec *e, const char **why)
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

