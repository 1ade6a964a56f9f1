/* fuzz_trace.c — libFuzzer target for the trace reader (tools/trace.c, core/trace_format.c):
 * any bytes, plain or gzip, as a trace file's content must load or give one message naming the
 * input, never a crash, a hang or a leak; a trace that loads has only well-formed events (A, F,
 * and E, a cache release: core/trace_format.h). */
#include <stdlib.h>
#include <string.h>

#include "tools/trace.h"

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
    gml_trace t;
    char err[512];
    err[0] = 0;
    if (gml_trace_load_mem("fuzz", data, size, &t, err, sizeof err) == 0) {
        if (t.n == 0 || !t.ev)
            abort(); /* a trace without events was accepted */
        for (size_t i = 0; i < t.n; i++) {
            const gml_trace_event *e = &t.ev[i];
            if ((e->op != 'A' && e->op != 'F' && e->op != 'E') ||
                (e->op == 'A' && (!e->size || !e->ptr)) || (e->op == 'F' && e->size) ||
                (e->op == 'E' && (e->ptr || e->size)) || e->line < 2)
                abort(); /* a malformed event got in (line 1 is the header) */
        }
        gml_trace_free(&t);
    } else if (strncmp(err, "fuzz", 4) != 0 || memchr(err, '\n', strlen(err))) {
        abort(); /* a message that does not name the input, or is not one line */
    }
    return 0;
}
