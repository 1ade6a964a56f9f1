/*
 * fit.c — the smallest device on which a replay policy serves a whole trace, by bisection over
 * whole chunks (contract: fit.h).
 */
#include "fit.h"

#include <stdio.h>

#define FIT_CHUNK ((uint64_t)2 << 20)

/* What one probe replays with: the policy, the trace and the run's settings. */
typedef struct probe_args {
    const char *name;
    const gml_trace *t;
    const gml_pool_settings *pool;
    const gml_model_options *model;
    uint64_t gpu_lag_us;
} probe_args;

/* Replays the trace under a fresh policy on `at` chunks and moves the bound it decides there: hi
 * where it served every allocation, lo where it failed one.  0, or -1 with err set. */
static int probe(const probe_args *a, uint64_t at, uint64_t *lo, uint64_t *hi, gml_fit *out,
                 char *err, size_t errlen)
{
    gml_policy *p = gml_policy_create(a->name, at * FIT_CHUNK, a->pool, a->model, err, errlen);
    if (!p)
        return -1;
    p->gpu_lag_us = a->gpu_lag_us;
    gml_policy_result r;
    int rc = gml_policy_replay(p, a->t, 0, NULL, &r, err, errlen);
    gml_policy_destroy(p);
    out->replays++;
    if (rc)
        return -1;
    *(r.failed ? lo : hi) = at;
    return 0;
}

int gml_fit_capacity(const char *name, const gml_trace *t, uint64_t capacity,
                     const gml_policy_result *full, const gml_pool_settings *pool,
                     const gml_model_options *model, uint64_t gpu_lag_us, gml_fit *out, char *err,
                     size_t errlen)
{
    *out = (gml_fit){0};
    if (full->failed)
        return 0; /* not even the device given */
    const probe_args a = {name, t, pool, model, gpu_lag_us};
    /* hi: served (the device given); lo: fails (fewer bytes than were live at once), or 0.  The
     * policy's own peak is tried first: where it serves, as it should (the same run), the search
     * is left with the span between the peaks of active and reserved bytes. */
    uint64_t hi = capacity / FIT_CHUNK;
    uint64_t lo = (full->peak_active + FIT_CHUNK - 1) / FIT_CHUNK;
    lo = lo ? lo - 1 : 0;
    uint64_t at_peak = (full->peak_reserved + FIT_CHUNK - 1) / FIT_CHUNK;
    if (at_peak < hi && at_peak > lo && probe(&a, at_peak, &lo, &hi, out, err, errlen) != 0)
        return -1;
    while (hi - lo > 1)
        if (probe(&a, lo + (hi - lo) / 2, &lo, &hi, out, err, errlen) != 0)
            return -1;
    out->bytes = hi * FIT_CHUNK;
    return 0;
}
