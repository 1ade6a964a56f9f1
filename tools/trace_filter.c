/* trace_filter.c — leaving a trace's calls with no stream out of it (contract in trace.h). */
#include "trace.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <uthash.h>

#include "../core/device.h"

/* A pointer live at this point of the trace, and whether its allocation is left out. */
typedef struct live_ptr {
    uint64_t ptr;
    bool dropped;
    UT_hash_handle hh;
} live_ptr;

int gml_trace_keep_stream_ordered(gml_trace *t, size_t *dropped, char *err, size_t errlen)
{
    live_ptr *live = NULL, *d, *tmp;
    size_t out = 0;
    int rc = 0;
    for (size_t i = 0; i < t->n; i++) {
        gml_trace_event *e = &t->ev[i];
        if (e->op == 'A') {
            /* every live pointer is followed, kept or not: an allocation of one that is live is
             * the trace's fault, refused here as the replay refuses it (left to the replay, the
             * free would be matched to whichever allocation was kept) */
            HASH_FIND(hh, live, &e->ptr, sizeof e->ptr, d);
            if (d) {
                gml_trace_say_live_again(t, e, err, errlen);
                rc = -1;
                break;
            }
            if (!(d = malloc(sizeof *d))) {
                snprintf(err, errlen, "%s: out of memory", t->path);
                rc = -1;
                break;
            }
            d->ptr = e->ptr;
            d->dropped = e->stream == (uint64_t)GML_STREAM_NONE;
            HASH_ADD(hh, live, ptr, sizeof d->ptr, d);
            if (d->dropped)
                continue;
        } else if (e->op == 'F') {
            HASH_FIND(hh, live, &e->ptr, sizeof e->ptr, d);
            if (d) {
                bool was_dropped = d->dropped;
                HASH_DEL(live, d);
                free(d);
                if (was_dropped) /* the free of an allocation left out, whatever its stream */
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
