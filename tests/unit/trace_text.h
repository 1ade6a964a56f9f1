/* trace_text.h — traces written by a unit test: text to a temporary file, and loaded. */
#ifndef GML_TEST_TRACE_TEXT_H
#define GML_TEST_TRACE_TEXT_H

#include <stdio.h>
#include <unistd.h>
#include <zlib.h>

#include "helpers.h"
#include "tools/trace.h"

/* Writes text (gzip-compressed with gz) to a new temporary file; its path, valid until the next
 * call. */
static inline char *write_trace(const char *text, bool gz)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/gmlake-test-XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    if (gz) {
        gzFile g = gzopen(path, "wb");
        gzputs(g, text);
        gzclose(g);
    } else {
        FILE *f = fopen(path, "w");
        fputs(text, f);
        fclose(f);
    }
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
