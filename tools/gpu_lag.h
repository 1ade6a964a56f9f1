/*
 * gpu_lag.h — the replay's model of a GPU that runs behind the host (`gmlake replay --gpu-lag`).
 * Without it, the simulated device completes every stream's work at once, so a block another
 * stream freed has always passed when a stream misses.  On a real GPU that work may still run:
 * gmlake then cannot reuse the block at once (it asks the stream's event, waits for it on the
 * GPU, or grows).  The model: each event of the trace on a stream submits one unit of work to
 * that stream of the simulated device at the event's time t (the kernels launched up to then),
 * which completes at t + lag; a free with no stream (cudaFree, which waits for the device)
 * completes all work.  The events gmlake records and queries then see the work as the GPU would,
 * a host-time lag behind.  One owner: this file; tools/policy.c calls it from its replay loop.
 */
#ifndef GML_GPU_LAG_H
#define GML_GPU_LAG_H

#include <stddef.h>
#include <stdint.h>

#include "../core/device.h"
#include "trace.h"

typedef struct gml_lag_unit {
    gml_stream stream;
    uint64_t unit, due_us;
} gml_lag_unit;

typedef struct gml_gpu_lag {
    gml_device *dev;
    uint64_t lag_us;
    gml_lag_unit *q; /* submitted units in order of their due time (FIFO: times never decrease) */
    size_t head, n, cap;
    bool queued; /* the event being served queued a unit (the last one) */
} gml_gpu_lag;

/* A model of lag_us microseconds on sim device dev, for a trace of `events` events; -1 on host
 * out of memory. */
int gml_gpu_lag_init(gml_gpu_lag *g, gml_device *dev, uint64_t lag_us, size_t events);
/* Before the replay serves trace event e: completes the work due by e's time, then submits e's
 * unit (or, for a free with no stream, completes all work). */
void gml_gpu_lag_before(gml_gpu_lag *g, const gml_trace_event *e);
/* After the replay served e: the work the pool added to e's stream while serving it (a wait on
 * the GPU for another stream's work, which the simulated device counts as a unit of e's stream)
 * joins e's unit, due at the same time. */
void gml_gpu_lag_after(gml_gpu_lag *g, const gml_trace_event *e);
void gml_gpu_lag_free(gml_gpu_lag *g);

#endif /* GML_GPU_LAG_H */
