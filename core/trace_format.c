/* trace_format.c — the gmlake-trace v1 line format (contract in trace_format.h). */
#include "trace_format.h"

#include <errno.h>
#include <stdbool.h>
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

/* 0, or -1 with *why naming the field and the problem (messages are static strings). */
static int parse_u64(const char *tok, int base, uint64_t *out, const char *const msgs[3],
                     const char **why)
{
    /* msgs: not a number, negative, too large */
    if (*tok == '-') {
        *why = msgs[1];
        return -1;
    }
    const char *digits = tok;
    if (base == 16 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X'))
        digits += 2;
    bool any = false;
    for (const char *p = digits; *p; p++) {
        bool ok = base == 16 ? ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
                                (*p >= 'A' && *p <= 'F'))
                             : (*p >= '0' && *p <= '9');
        if (!ok) {
            *why = msgs[0];
            return -1;
        }
        any = true;
    }
    if (!any) {
        *why = msgs[0];
        return -1;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(tok, &end, base);
    if (errno == ERANGE) {
        *why = msgs[2];
        return -1;
    }
    if (errno || *end) {
        *why = msgs[0];
        return -1;
    }
    *out = v;
    return 0;
}

static const char *const ptr_msgs[3] = {
    "the pointer is not a hexadecimal number", "the pointer is negative",
    "the pointer is larger than 2^64-1 (0xffffffffffffffff)"};
static const char *const size_msgs[3] = {
    "the size is not a decimal number", "the size is negative",
    "the size is larger than 2^64-1 (18446744073709551615)"};
static const char *const stream_msgs[3] = {
    "the stream is not a hexadecimal number", "the stream is negative",
    "the stream is larger than 2^64-1 (0xffffffffffffffff)"};
static const char *const time_msgs[3] = {
    "the time is not a decimal number", "the time is negative",
    "the time is larger than 2^64-1 (18446744073709551615)"};

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
    if (strcmp(tok[0], "A") && strcmp(tok[0], "F") && strcmp(tok[0], "E")) {
        *why = "the operation must be A, F or E";
        return -1;
    }
    e->op = tok[0][0];
    if (parse_u64(tok[1], 16, &e->ptr, ptr_msgs, why) ||
        parse_u64(tok[2], 10, &e->size, size_msgs, why) ||
        parse_u64(tok[3], 16, &e->stream, stream_msgs, why) ||
        parse_u64(tok[4], 10, &e->t_us, time_msgs, why))
        return -1;
    if (e->op == 'A' && (e->size == 0 || e->ptr == 0)) {
        *why = "an allocation needs a non-zero pointer and size";
        return -1;
    }
    if (e->op == 'F' && e->size != 0) {
        *why = "a free has size 0";
        return -1;
    }
    if (e->op == 'E' && (e->size != 0 || e->ptr != 0)) {
        *why = "a cache release (E) has pointer 0 and size 0";
        return -1;
    }
    return 0;
}

