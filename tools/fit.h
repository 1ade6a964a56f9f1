/*
 * fit.h — the smallest device on which a replay policy serves a whole trace (`gmlake replay
 * --fit`): what a user asks when a job dies of running out of memory, "on how much memory would
 * this job run under each allocator?".
 *
 * Contract
 *  - The answer is a whole number of 2 MiB chunks (the simulated device's grain): a capacity on
 *    which the policy served every allocation of the trace, one chunk less being one on which it
 *    failed at least one, found by bisection between the trace's peak active bytes (below them no
 *    policy can serve it) and the policy's peak reserved on the device given (where it served
 *    everything, the run on that many bytes is the same run).  A policy under memory pressure
 *    gives cached memory back, stitches or fails in ways that need not be monotone in the device's
 *    size, so the bisection finds one such boundary, not necessarily the lowest capacity that
 *    serves the trace; every capacity it reports was replayed and served the whole trace.
 *  - Each step is a fresh policy (gml_policy_create) replayed from the start with the same settings
 *    and GPU lag as the run it refines.
 */
#ifndef GML_FIT_H
#define GML_FIT_H

#include <stdint.h>

#include "policy.h"

typedef struct gml_fit {
    uint64_t bytes;    /* the capacity found; 0: the policy failed on the device given (no fit) */
    unsigned replays;  /* replays the search made */
} gml_fit;

/* For policy `name` on trace t, whose replay on a device of `capacity` bytes (a multiple of
 * 2 MiB) gave `full`.  0 with *out filled; -1 with a message in err where a replay failed (a
 * fault of the trace, host memory). */
int gml_fit_capacity(const char *name, const gml_trace *t, uint64_t capacity,
                     const gml_policy_result *full, const gml_pool_settings *pool,
                     const gml_model_options *model, uint64_t gpu_lag_us, gml_fit *out, char *err,
                     size_t errlen);

#endif /* GML_FIT_H */
