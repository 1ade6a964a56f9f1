/* trace_text.h — traces written by a unit test: text to a temporary file, and loaded. */
#ifndef GML_TEST_TRACE_TEXT_H
#define GML_TEST_TRACE_TEXT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "helpers.h"
#include "tools/trace.h"

/* Writes len bytes (gzip-compressed with gz) to a new temporary file as they are; its path,
 * valid until the next call. */
static inline char *write_trace_bytes(const void *data, size_t len, bool gz)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/gmlake-test-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    if (gz) {
        gzFile g = gzopen(path, "wb");
        gzwrite(g, data, (unsigned)len);
        gzclose(g);
    } else {
        FILE *f = fopen(path, "w");
        fwrite(data, 1, len, f);
        fclose(f);
    }
    return path;
}

#define TRACE_HEADER "# gmlake-trace v1: op ptr size stream t_us (written by a unit test)\n"

/* Writes the header line then text (unless text starts with a header of its own), gzip-compressed
 * with gz, to a new temporary file: the events of text are on its lines 2, 3, ... */
static inline char *write_trace(const char *text, bool gz)
{
    if (strncmp(text, "# gmlake-trace", 14) == 0)
        return write_trace_bytes(text, strlen(text), gz);
    size_t n = strlen(TRACE_HEADER) + strlen(text) + 1;
    char *all = malloc(n);
    snprintf(all, n, "%s%s", TRACE_HEADER, text);
    char *path = write_trace_bytes(all, n - 1, gz);
    free(all);
    return path;
}

/* Loads text as a trace into t (asserting that it loads); the file is removed. */
static inline void load_trace_text(const char *text, gml_trace *t)
{
    char *path = write_trace(text, false);
    char err[256];
    int rc = gml_trace_load(path, t, err, sizeof err);
    unlink(path);
    cr_assert_eq(rc, 0, "%s", err);
}

#endif
