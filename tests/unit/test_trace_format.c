/* test_trace_format.c — the gmlake-trace v1 line format (core/trace_format.h) through its own
 * API: what the writer writes, the parser reads back; the header is a comment line; every kind of
 * bad line is refused with a reason. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "core/trace_format.h"

static char *written(void (*write)(FILE *, const void *), const void *arg)
{
    static char buf[256];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    cr_assert_not_null(f);
    write(f, arg);
    fclose(f);
    return buf;
}

static void write_rec(FILE *f, const void *r) { gml_trace_write_line(f, r); }
static void write_header(FILE *f, const void *origin) { gml_trace_write_header(f, origin); }

Test(trace_format, what_is_written_parses_back)
{
    const gml_trace_rec recs[] = {
        {'A', 0x7f0000200000, 4096, 0x5000000, 12},
        {'F', 0x7f0000200000, 0, 0x5000000, 13},
        {'A', 0xffffffffff000000, 1ull << 40, UINT64_MAX, UINT64_MAX}, /* GML_STREAM_NONE */
        {'F', 1, 0, 0, 0},
        {'E', 0, 0, UINT64_MAX, 14}, /* a cache release (empty_cache) */
    };
    for (size_t i = 0; i < sizeof recs / sizeof recs[0]; i++) {
        char *line = written(write_rec, &recs[i]);
        cr_assert(strchr(line, '\n') && strchr(line, '\n')[1] == 0, "one whole line: %s", line);
        gml_trace_rec r;
        const char *why = NULL;
        cr_assert_eq(gml_trace_parse_line(line, &r, &why), 0, "record %zu: %s", i, why ? why : "");
        cr_assert(r.op == recs[i].op && r.ptr == recs[i].ptr && r.size == recs[i].size &&
                  r.stream == recs[i].stream && r.t_us == recs[i].t_us, "record %zu round trips", i);
    }
}

Test(trace_format, the_header_is_a_comment_naming_the_format)
{
    char *line = written(write_header, "recorded by a test");
    cr_assert_eq(strncmp(line, "# gmlake-trace v1: op ptr size stream t_us (recorded by a test)\n", 64), 0,
                 "%s", line);
}

Test(trace_format, bad_lines_are_refused_with_a_reason)
{
    const struct {
        const char *line, *why;
    } bad[] = {
        {"A 0x10 4096 0x0", "expected 5 fields"},
        {"A 0x10 4096 0x0 1 2", "too many fields"},
        {"X 0x10 4096 0x0 1", "the operation must be A, F or E"},
        {"E 0x10 0 0x0 1", "a cache release (E) has pointer 0 and size 0"},
        {"E 0x0 4096 0x0 1", "a cache release (E) has pointer 0 and size 0"},
        {"A zz 4096 0x0 1", "the pointer is not a hexadecimal number"},
        {"A 0x10 -4 0x0 1", "the size is negative"},
        {"A 0x10 -100 0x0 1", "the size is negative"},
        {"A 0x10 99999999999999999999 0x0 1", "the size is larger than 2^64-1"},
        {"A 0x10 12a 0x0 1", "the size is not a decimal number"},
        {"A 0x10 +5 0x0 1", "the size is not a decimal number"},
        {"A 0x10000000000000000 4 0x0 1", "the pointer is larger than 2^64-1"},
        {"A -0x10 4 0x0 1", "the pointer is negative"},
        {"A 0x 4 0x0 1", "the pointer is not a hexadecimal number"},
        {"A 0x10 4 0x10000000000000000 1", "the stream is larger than 2^64-1"},
        {"A 0x10 4 0x0 -1", "the time is negative"},
        {"A 0x10 4 0x0 18446744073709551616", "the time is larger than 2^64-1"},
        {"A 0x10 4096 0xq 1", "the stream is not a hexadecimal number"},
        {"A 0x10 4096 0x0 1.5", "the time is not a decimal number"},
        {"A 0x0 4096 0x0 1", "an allocation needs a non-zero pointer and size"},
        {"A 0x10 0 0x0 1", "an allocation needs a non-zero pointer and size"},
        {"F 0x10 8 0x0 1", "a free has size 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char line[64];
        snprintf(line, sizeof line, "%s", bad[i].line);
        gml_trace_rec r;
        const char *why = NULL;
        cr_assert_eq(gml_trace_parse_line(line, &r, &why), -1, "%s is refused", bad[i].line);
        cr_assert_not_null(why);
        cr_assert_eq(strncmp(why, bad[i].why, strlen(bad[i].why)), 0, "%s: %s", bad[i].line, why);
    }
}
