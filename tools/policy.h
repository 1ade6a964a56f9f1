/*
 * policy.h — a replay policy: anything that serves a trace's allocations and frees and says how
 * much device memory it holds.  gmlake's pool (through pool.h) is one; the models of PyTorch's
 * own allocators (tools/models/) are others, so that one trace can be replayed under each and
 * the results compared side by side.
 *
 * Contract
 *  - alloc returns GMLAKE_OK with a non-zero address, GMLAKE_ERR_NOMEM when the policy cannot
 *    hold the request within its capacity (the replay counts it as failed and goes on), or
 *    another gmlake error (the replay stops).  free gets an address alloc returned.
 *  - After every call, `reserved` is the device memory the policy holds (bytes).  Device calls
 *    the policy would make are counted with gml_policy_call, one place, which also charges each
 *    its estimated driver time (core/cost.h) to `device_seconds`; gmlake's pool policies read
 *    both from the pool and its sim device instead.
 *  - The replay loop (gml_policy_replay) tracks active bytes (the sum of live request sizes),
 *    the peaks, and the series a plot needs; policies do not.
 */
#ifndef GML_POLICY_H
#define GML_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "../stitch/pool.h"
#include "trace.h"

/* Device-call kinds: gmlake's (enum gmlake_devcall) then the ones only PyTorch's allocators use. */
enum gml_call {
    GML_CALL_CUDA_MALLOC = GMLAKE_DC_COUNT, /* cudaMalloc */
    GML_CALL_CUDA_FREE,                     /* cudaFree */
    GML_CALL_STREAM_SYNC,                   /* cudaStreamSynchronize (before unmapping) */
    GML_CALL_COUNT
};

typedef struct gml_policy gml_policy;

typedef struct gml_policy_ops {
    int (*alloc)(gml_policy *p, uint64_t size, uint64_t stream, uint64_t *addr);
    int (*free)(gml_policy *p, uint64_t addr, uint64_t stream);
    /* Optional: a consistency check; GMLAKE_OK or an error with a message in why. */
    int (*check)(gml_policy *p, char *why, size_t whylen);
    /* The program gave the cache back (a trace's E event): what the allocator's empty_cache does. */
    void (*empty_cache)(gml_policy *p);
    void (*destroy)(gml_policy *p);
} gml_policy_ops;

struct gml_policy {
    const gml_policy_ops *ops;
    char name[32];
    uint64_t capacity;              /* device bytes */
    uint64_t reserved;              /* bytes held now (kept by the policy) */
    uint64_t calls[GML_CALL_COUNT]; /* device calls by kind (kept by the policy) */
    uint64_t stitches;
    double device_seconds;          /* estimated driver time of those calls (core/cost.h) */
    gml_pool *pool;                 /* gmlake policies: the pool replayed through */
    uint64_t gpu_lag_us;            /* gmlake policies: the GPU's lag behind the host (gpu_lag.h;
                                       0: every stream's work completes at once) */
};

/* Policies by name: gmlake, no-stitch, largest, bestfit (gmlake's pool with `pool` settings,
 * adjusted for the name), pytorch, expandable (models, each with its own settings of `model`;
 * NULL: the defaults).  NULL with a message in err for an unknown name or a failure. */
typedef struct gml_model_settings {
    uint64_t max_split_size;   /* bytes; UINT64_MAX: unlimited (PyTorch's default) */
    unsigned roundup_divisions; /* roundup_power2_divisions; 0 or 1: off */
} gml_model_settings;
/* Each model's settings its own: pytorch.* keys set `pytorch`, expandable.* keys `expandable`. */
typedef struct gml_model_options {
    gml_model_settings pytorch, expandable;
} gml_model_options;
void gml_model_options_default(gml_model_options *o);
/* Applies "pytorch.KEY=VALUE" / "expandable.KEY=VALUE" (KEY max_split_size_mb or
 * roundup_power2_divisions) to that model's settings only.  1 if key is not a model key, 0 on
 * success, -1 with err set. */
int gml_model_option_set(gml_model_options *o, const char *key, const char *value, char *err,
                         size_t errlen);
bool gml_policy_known(const char *name);
gml_policy *gml_policy_create(const char *name, uint64_t capacity, const gml_pool_settings *pool,
                              const gml_model_options *model, char *err, size_t errlen);
void gml_policy_destroy(gml_policy *p);

/* Memory over the replay, for plots: the maxima of active and reserved bytes within each of
 * `n` equal spans of the trace's events, and where each peak was reached. */
#define GML_SERIES_POINTS 800
typedef struct gml_series {
    size_t n;                       /* spans used (<= GML_SERIES_POINTS) */
    size_t events;                  /* events replayed */
    uint64_t active[GML_SERIES_POINTS], reserved[GML_SERIES_POINTS];
    size_t peak_active_event, peak_reserved_event;
} gml_series;

typedef struct gml_policy_result {
    uint64_t allocations, frees, failed;
    uint64_t peak_active, peak_reserved, end_reserved;
    uint64_t calls_total;                    /* made since the policy was created: sum of calls */
    uint64_t calls_second_half;              /* made in the second half of the trace */
    uint64_t calls[GML_CALL_COUNT];          /* made since the policy was created, by kind */
    uint64_t calls_first_half[GML_CALL_COUNT];
    uint64_t stitches;
    double device_seconds, device_seconds_second_half; /* estimated driver time, this replay */
    double seconds;
} gml_policy_result;

/* Replays t through p.  check_every > 0 runs p's check after every that many events; series may
 * be NULL.  0 on success; -1 with "PATH:LINE: what" in err. */
int gml_policy_replay(gml_policy *p, const gml_trace *t, size_t check_every, gml_series *series,
                      gml_policy_result *res, char *err, size_t errlen);

#endif /* GML_POLICY_H */
