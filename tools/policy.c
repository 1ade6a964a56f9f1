/* policy.c — replay policies by name, gmlake's pool as a policy, and the replay loop
 * (contract in policy.h). */
#include "policy.h"
#include "gpu_lag.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uthash.h>

#include "../stitch/stitch.h"
#include "charge.h"
#include "models/models.h"

void gml_model_options_default(gml_model_options *o)
{
    o->pytorch = (gml_model_settings){.max_split_size = UINT64_MAX, .roundup_divisions = 0};
    o->expandable = o->pytorch;
}

static int parse_uint(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end)
        return -1;
    *out = v;
    return 0;
}

int gml_model_option_set(gml_model_options *o, const char *key, const char *value, char *err,
                         size_t errlen)
{
    const char *k;
    gml_model_settings *m;
    if (strncmp(key, "pytorch.", 8) == 0) {
        k = key + 8;
        m = &o->pytorch;
    } else if (strncmp(key, "expandable.", 11) == 0) {
        k = key + 11;
        m = &o->expandable;
    } else {
        return 1;
    }
    uint64_t v;
    if (strcmp(k, "max_split_size_mb") == 0) {
        /* PyTorch refuses values up to kLargeBuffer (20 MiB) */
        if (parse_uint(value, &v) || v <= 20 || v > (UINT64_MAX >> 20)) {
            snprintf(err, errlen, "%s: '%s' is not a whole number of MiB above 20", key, value);
            return -1;
        }
        m->max_split_size = v << 20;
        return 0;
    }
    if (strcmp(k, "roundup_power2_divisions") == 0) {
        if (parse_uint(value, &v) || v > 1024 || (v > 1 && (v & (v - 1)))) {
            snprintf(err, errlen, "%s: '%s' is not 0, 1 or a power of two up to 1024", key, value);
            return -1;
        }
        m->roundup_divisions = (unsigned)v;
        return 0;
    }
    snprintf(err, errlen, "%s: unknown model setting (known: max_split_size_mb, roundup_power2_divisions)",
             key);
    return -1;
}

/* gmlake's pool as a policy */

static void pool_refresh(gml_policy *p)
{
    gmlake_stats st;
    gml_pool_counters(p->pool, &st);
    p->reserved = st.reserved_bytes;
    p->stitches = st.stitches;
    memcpy(p->calls, st.device_calls, sizeof st.device_calls);
    p->device_seconds = gml_sim_device_seconds(gml_pool_device(p->pool));
}

static int pool_alloc(gml_policy *p, uint64_t size, uint64_t stream, uint64_t *addr)
{
    uintptr_t a = 0;
    int r = gml_pool_alloc(p->pool, size, (gml_stream)stream, &a);
    /* the pool refuses a size beyond any device (above 2^62) as invalid, and a trace holds no
     * size 0 (trace_format.c): to the replay that is a request no device could hold, out of
     * memory, as the models report it (counted as failed; the replay goes on) */
    if (r == GMLAKE_ERR_INVALID && size)
        r = GMLAKE_ERR_NOMEM;
    *addr = a;
    pool_refresh(p);
    return r;
}

static int pool_free(gml_policy *p, uint64_t addr, uint64_t stream)
{
    int r = gml_pool_free(p->pool, (uintptr_t)addr, (gml_stream)stream);
    pool_refresh(p);
    return r;
}

static int pool_check(gml_policy *p, char *why, size_t whylen)
{
    return gml_pool_check(p->pool, why, whylen);
}

static void pool_destroy(gml_policy *p)
{
    if (p->pool)
        gml_sim_pool_destroy(p->pool);
    free(p);
}

static void pool_empty_cache(gml_policy *p)
{
    gml_pool_empty_cache(p->pool);
    pool_refresh(p);
}

static const gml_policy_ops pool_ops = {pool_alloc, pool_free, pool_check, pool_empty_cache, pool_destroy};

/* Wraps an existing pool (which stays the caller's) or, with pool NULL, a new sim pool. */
static gml_policy *pool_policy(const char *name, gml_pool *pool, uint64_t capacity,
                               const gml_pool_settings *s, char *err, size_t errlen)
{
    gml_policy *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    p->ops = &pool_ops;
    snprintf(p->name, sizeof p->name, "%s", name);
    p->capacity = capacity;
    if (!pool) {
        const char *why = NULL;
        p->pool = gml_sim_pool_create(capacity, false, s, &why);
        if (!p->pool) {
            snprintf(err, errlen, "%s", why ? why : "cannot create the pool");
            free(p);
            return NULL;
        }
    } else {
        p->pool = pool;
    }
    pool_refresh(p);
    return p;
}

bool gml_policy_known(const char *name)
{
    return strcmp(name, "gmlake") == 0 || strcmp(name, "no-stitch") == 0 ||
           gml_stitch_strategy_from_name(name) >= 0 || strcmp(name, "pytorch") == 0 ||
           strcmp(name, "expandable") == 0;
}

gml_policy *gml_policy_create(const char *name, uint64_t capacity, const gml_pool_settings *pool,
                              const gml_model_options *model, char *err, size_t errlen)
{
    if (strcmp(name, "pytorch") == 0 || strcmp(name, "expandable") == 0) {
        bool expandable = strcmp(name, "expandable") == 0;
        gml_model_options defaults;
        if (!model) {
            gml_model_options_default(&defaults);
            model = &defaults;
        }
        return gml_model_caching_create(name, capacity,
                                        expandable ? &model->expandable : &model->pytorch,
                                        expandable, err, errlen);
    }
    gml_pool_settings s = *pool;
    if (strcmp(name, "no-stitch") == 0) {
        s.vmm_defragment = false;
    } else if (strcmp(name, "gmlake") != 0) {
        int st = gml_stitch_strategy_from_name(name);
        if (st < 0) {
            snprintf(err, errlen, "unknown policy '%s' (known: gmlake, no-stitch, largest, bestfit, "
                                  "pytorch, expandable)", name);
            return NULL;
        }
        s.strategy = (gml_stitch_strategy)st;
    }
    return pool_policy(name, NULL, capacity, &s, err, errlen);
}

void gml_policy_destroy(gml_policy *p)
{
    if (p)
        p->ops->destroy(p);
}

/* The replay loop */

typedef struct live_ptr {
    uint64_t trace_ptr;
    uint64_t addr; /* 0: the allocation failed */
    uint64_t size;
    UT_hash_handle hh;
} live_ptr;

static uint64_t sum_calls(const uint64_t *c)
{
    uint64_t n = 0;
    for (int i = 0; i < GML_CALL_COUNT; i++)
        n += c[i];
    return n;
}

int gml_policy_replay(gml_policy *p, const gml_trace *t, size_t check_every, gml_series *series,
                      gml_policy_result *res, char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    if (series) {
        memset(series, 0, sizeof *series);
        series->n = t->n < GML_SERIES_POINTS ? t->n : GML_SERIES_POINTS;
        series->events = t->n;
    }
    live_ptr *live = NULL, *slab = calloc(t->n ? t->n : 1, sizeof *slab);
    if (!slab) {
        snprintf(err, errlen, "%s: out of memory", t->path);
        return -1;
    }
    size_t nslab = 0;
    int rc = 0;
    uint64_t active = 0, calls0 = sum_calls(p->calls);
    uint64_t calls_at_start[GML_CALL_COUNT];
    memcpy(calls_at_start, p->calls, sizeof calls_at_start);
    double secs0 = p->device_seconds, secs_half = secs0;
    res->peak_reserved = p->reserved;
    gml_gpu_lag lag;
    bool lagging = p->pool && p->gpu_lag_us;
    if (lagging && gml_gpu_lag_init(&lag, gml_pool_device(p->pool), p->gpu_lag_us, t->n) != 0) {
        snprintf(err, errlen, "%s: out of memory", t->path);
        free(slab);
        return -1;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < t->n && rc == 0; i++) {
        const gml_trace_event *e = &t->ev[i];
        if (lagging)
            gml_gpu_lag_before(&lag, e);
        if (i == t->n / 2) {
            for (int k = 0; k < GML_CALL_COUNT; k++)
                res->calls_first_half[k] = p->calls[k] - calls_at_start[k];
            secs_half = p->device_seconds;
        }
        live_ptr *l = NULL;
        if (e->op != 'E')
            HASH_FIND(hh, live, &e->ptr, sizeof e->ptr, l);
        if (e->op == 'E') {
            p->ops->empty_cache(p);
        } else if (e->op == 'A') {
            if (l) {
                gml_trace_say_live_again(t, e, err, errlen);
                rc = -1;
                break;
            }
            l = &slab[nslab++];
            l->trace_ptr = e->ptr;
            l->size = e->size;
            int r = p->ops->alloc(p, e->size, e->stream, &l->addr);
            if (r == GMLAKE_OK) {
                res->allocations++;
                active += e->size;
            } else if (r == GMLAKE_ERR_NOMEM) {
                res->failed++;
                l->addr = 0;
            } else {
                snprintf(err, errlen, "%s:%u: allocation of %" PRIu64 " bytes failed: %s",
                         t->path, e->line, e->size, gmlake_strerror(r));
                rc = -1;
                break;
            }
            HASH_ADD(hh, live, trace_ptr, sizeof l->trace_ptr, l);
        } else {
            if (!l) {
                snprintf(err, errlen, "%s:%u: free of pointer %#" PRIx64 " that is not live",
                         t->path, e->line, e->ptr);
                rc = -1;
                break;
            }
            HASH_DEL(live, l);
            if (l->addr) {
                int r = p->ops->free(p, l->addr, e->stream);
                if (r != GMLAKE_OK) {
                    snprintf(err, errlen, "%s:%u: free failed: %s", t->path, e->line,
                             gmlake_strerror(r));
                    rc = -1;
                    break;
                }
                res->frees++;
                active -= l->size;
            }
        }
        if (lagging)
            gml_gpu_lag_after(&lag, e);
        if (active > res->peak_active) {
            res->peak_active = active;
            if (series)
                series->peak_active_event = i;
        }
        if (p->reserved > res->peak_reserved) {
            res->peak_reserved = p->reserved;
            if (series)
                series->peak_reserved_event = i;
        }
        if (series) {
            size_t b = (size_t)((unsigned __int128)i * series->n / t->n);
            if (active > series->active[b])
                series->active[b] = active;
            if (p->reserved > series->reserved[b])
                series->reserved[b] = p->reserved;
        }
        if (check_every && p->ops->check && (i + 1) % check_every == 0) {
            char why[256];
            if (p->ops->check(p, why, sizeof why) != GMLAKE_OK) {
                snprintf(err, errlen, "%s:%u: %s check failed after this event: %s", t->path,
                         e->line, p->name, why);
                rc = -1;
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    res->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    res->end_reserved = p->reserved;
    memcpy(res->calls, p->calls, sizeof res->calls);
    /* as res->calls: since the policy was created (a pool's first reservation of address space
     * included, as the pool's statistics on a GPU count it) */
    res->calls_total = sum_calls(p->calls);
    res->calls_second_half = res->calls_total - calls0 - sum_calls(res->calls_first_half);
    res->stitches = p->stitches;
    res->device_seconds = p->device_seconds - secs0;
    res->device_seconds_second_half = p->device_seconds - secs_half;
    HASH_CLEAR(hh, live);
    free(slab);
    if (lagging)
        gml_gpu_lag_free(&lag);
    return rc;
}

int gml_replay(gml_pool *pool, const gml_trace *t, size_t check_every, gml_replay_result *res,
               char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    gmlake_stats st;
    gml_pool_stats(pool, &st);
    gml_policy *p = pool_policy("gmlake", pool, st.reserved_bytes, NULL, err, errlen);
    if (!p)
        return -1;
    gml_policy_result r;
    int rc = gml_policy_replay(p, t, check_every, NULL, &r, err, errlen);
    res->allocations = r.allocations;
    res->frees = r.frees;
    res->failed = r.failed;
    res->calls_total = r.calls_total;
    res->calls_second_half = r.calls_second_half;
    memcpy(res->calls_first_half, r.calls_first_half, sizeof res->calls_first_half);
    res->device_seconds = r.device_seconds;
    res->device_seconds_second_half = r.device_seconds_second_half;
    res->seconds = r.seconds;
    gml_pool_stats(pool, &res->stats);
    free(p); /* the pool stays the caller's */
    return rc;
}
