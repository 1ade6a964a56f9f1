/* gpu_lag.c — the replay's model of a GPU behind the host (contract in gpu_lag.h). */
#include <stdlib.h>

#include "gpu_lag.h"

int gml_gpu_lag_init(gml_gpu_lag *g, gml_device *dev, uint64_t lag_us, size_t events)
{
    g->dev = dev;
    g->lag_us = lag_us;
    g->head = g->n = 0;
    g->cap = events ? events : 1;
    g->q = malloc(g->cap * sizeof *g->q);
    return g->q ? 0 : -1;
}

void gml_gpu_lag_before(gml_gpu_lag *g, const gml_trace_event *e)
{
    g->queued = false;
    /* host times may step back a little (threads): a unit is due no earlier than the last one */
    while (g->head < g->n && g->q[g->head].due_us <= e->t_us) {
        const gml_lag_unit *u = &g->q[g->head++];
        gml_sim_finish_to(g->dev, u->stream, u->unit);
    }
    if (e->stream == GML_STREAM_NONE) {
        if (e->op == 'F' || e->op == 'E') { /* cudaFree and empty_cache wait for the device */
            gml_sim_complete_events(g->dev);
            g->head = g->n;
        }
        return;
    }
    if (g->n == g->cap || gml_sim_launch(g->dev, e->stream) != GMLAKE_OK)
        return;
    uint64_t due = e->t_us > UINT64_MAX - g->lag_us ? UINT64_MAX : e->t_us + g->lag_us;
    if (g->n > g->head && g->q[g->n - 1].due_us > due)
        due = g->q[g->n - 1].due_us;
    g->q[g->n++] = (gml_lag_unit){e->stream, gml_sim_submitted(g->dev, e->stream), due};
    g->queued = true;
}

void gml_gpu_lag_after(gml_gpu_lag *g, const gml_trace_event *e)
{
    if (g->queued && g->n > g->head)
        g->q[g->n - 1].unit = gml_sim_submitted(g->dev, e->stream);
}

void gml_gpu_lag_free(gml_gpu_lag *g)
{
    free(g->q);
    g->q = NULL;
}
