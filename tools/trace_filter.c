/* trace_filter.c — leaving a trace's calls with no stream out of it (contract in trace.h). */
#include "trace.h"

#include <stdlib.h>
#include <uthash.h>

#include "../core/device.h"

typedef struct dropped_ptr {
    uint64_t ptr;
    UT_hash_handle hh;
} dropped_ptr;

int gml_trace_keep_stream_ordered(gml_trace *t, size_t *dropped)
{
    dropped_ptr *live = NULL, *d, *tmp;
    size_t out = 0;
    int rc = 0;
    for (size_t i = 0; i < t->n; i++) {
        gml_trace_event *e = &t->ev[i];
        if (e->op == 'A' && e->stream == (uint64_t)GML_STREAM_NONE) {
            if (!(d = malloc(sizeof *d))) {
                rc = -1;
                break;
            }
            d->ptr = e->ptr;
            HASH_ADD(hh, live, ptr, sizeof d->ptr, d);
            continue;
        }
        if (e->op == 'F') {
            HASH_FIND(hh, live, &e->ptr, sizeof e->ptr, d);
            if (d) { /* the free of an allocation left out, whatever its stream */
                HASH_DEL(live, d);
                free(d);
                continue;
            }
        }
        t->ev[out++] = *e;
    }
    HASH_ITER(hh, live, d, tmp) {
        HASH_DEL(live, d);
        free(d);
    }
    if (rc)
        return rc;
    *dropped = t->n - out;
    t->n = out;
    return 0;
}
