/*
 * stall.c — how long one thread's growth stalls another thread's allocate and free on the same
 * pool (issue 10, "No stall for other threads").  A pool over device 0 (gmlake's own cuda device
 * layer, core/device_cuda.c over dlopen("libcuda.so.1")), or with --sim over the sim device (a
 * smoke run: its calls take no time).  The other thread first grows 64 MiB and frees it; then,
 * while the growing thread allocates GROW_MIB at once (one growth: creates, maps, one
 * set_access), it allocates and frees 1 MiB in a loop, timing every pair.  Then both blocks are
 * freed and the cache emptied; REPS times (the pool is created anew each time, so every
 * growth has the extent unit of an empty pool, one chunk; --extent-mib sets uniform extents).
 *
 * With --evict-extents K the stalling operation is a teardown instead: the growing thread first
 * makes a cached stitched block of K extents (extent_mib, default 2 MiB: K free extents between
 * live ones, stitched by one allocation, which is freed, then the K holes allocated again, so the
 * block is stale and release finds nothing to return), and the timed call is
 * gml_pool_empty_cache (K unmaps and one address free; no release).  The other thread keeps 63
 * MiB of a 64 MiB growth live and allocates and frees the 1 MiB beside it.
 *
 * Output: one JSON line per repetition: grow_ms (the growing allocation) or evict_ms (the
 * teardown), pairs (the other thread's allocate+free pairs during it), other_max_us (the longest
 * pair), other_p50_us.
 * Exit status 1 with a message when the driver or a GPU is missing or a call fails.
 *   gpu_stall [--sim] [--reps N] [--grow-mib M] [--extent-mib E] [--evict-extents K]
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "core/device.h"
#include "stitch/pool.h"

#define MIB ((size_t)1 << 20)
#define MAX_PAIRS (1 << 22)

static void *libcuda;

static void *resolve(const char *name) { return dlsym(libcuda, name); }

static gml_device *open_device(bool sim)
{
    if (sim) {
        gml_sim_config sc = {.capacity = (size_t)16 << 30};
        return gml_sim_create(&sc);
    }
    libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libcuda) {
        fprintf(stderr, "gpu_stall: cannot open libcuda.so.1 (no NVIDIA driver here): %s\n", dlerror());
        return NULL;
    }
    int (*cu_init)(unsigned int) = (int (*)(unsigned int))dlsym(libcuda, "cuInit");
    if (!cu_init || cu_init(0) != 0) {
        fprintf(stderr, "gpu_stall: cuInit failed (no GPU?)\n");
        return NULL;
    }
    const char *err = NULL;
    gml_device *dev = gml_cuda_device_create(0, resolve, &err);
    if (!dev)
        fprintf(stderr, "gpu_stall: %s\n", err ? err : "cannot open device 0");
    return dev;
}

typedef struct run {
    gml_pool *pool;
    size_t grow;
    bool evict;       /* the other thread keeps 63 MiB live and uses the 1 MiB beside it */
    atomic_int phase; /* 0: the other thread warms up, 1: growing, 2: the growth ended */
    double *pair_us;
    size_t pairs;
    int rc;
} run;

static void *other(void *arg)
{
    run *r = arg;
    uintptr_t p, kept = 0;
    if ((r->rc = gml_pool_alloc(r->pool, (r->evict ? 63 : 64) * MIB, GML_STREAM_NONE, &p)) !=
            GMLAKE_OK ||
        (!r->evict && (r->rc = gml_pool_free(r->pool, p, GML_STREAM_NONE)) != GMLAKE_OK)) {
        atomic_store(&r->phase, 2);
        return NULL;
    }
    if (r->evict)
        kept = p;
    atomic_store(&r->phase, 1);
    while (atomic_load(&r->phase) == 1 && r->pairs < MAX_PAIRS) {
        double t0 = bench_now_ns();
        if ((r->rc = gml_pool_alloc(r->pool, MIB, GML_STREAM_NONE, &p)) != GMLAKE_OK ||
            (r->rc = gml_pool_free(r->pool, p, GML_STREAM_NONE)) != GMLAKE_OK)
            return NULL;
        r->pair_us[r->pairs++] = (bench_now_ns() - t0) * 1e-3;
    }
    if (kept)
        r->rc = gml_pool_free(r->pool, kept, GML_STREAM_NONE);
    return NULL;
}

/* A cached, stale stitched block of k extents of `ext` bytes; its 2k live blocks in *held. */
static int stale_stitched_block(gml_pool *pool, size_t k, size_t ext, uintptr_t **held)
{
    uintptr_t *v = calloc(2 * k, sizeof *v), s;
    int rc = v ? GMLAKE_OK : GMLAKE_ERR_NOMEM;
    for (size_t i = 0; rc == GMLAKE_OK && i < 2 * k; i++)
        rc = gml_pool_alloc(pool, ext, GML_STREAM_NONE, &v[i]);
    for (size_t i = 0; rc == GMLAKE_OK && i < 2 * k; i += 2)
        rc = gml_pool_free(pool, v[i], GML_STREAM_NONE);
    if (rc == GMLAKE_OK && (rc = gml_pool_alloc(pool, k * ext, GML_STREAM_NONE, &s)) == GMLAKE_OK)
        rc = gml_pool_free(pool, s, GML_STREAM_NONE);
    for (size_t i = 0; rc == GMLAKE_OK && i < 2 * k; i += 2)
        rc = gml_pool_alloc(pool, ext, GML_STREAM_NONE, &v[i]);
    gmlake_stats st;
    gml_pool_counters(pool, &st);
    if (rc == GMLAKE_OK && (st.stitches != 1 || st.stitched_blocks != 1)) {
        fprintf(stderr, "gpu_stall: %lu stitches made, %lu cached, expected one\n",
                (unsigned long)st.stitches, (unsigned long)st.stitched_blocks);
        rc = GMLAKE_ERR_DEVICE;
    }
    *held = v;
    return rc;
}

int main(int argc, char **argv)
{
    bool sim = false;
    int reps = 3;
    size_t grow_mib = 4096, extent_mib = 0, evict_extents = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sim"))
            sim = true;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--grow-mib") && i + 1 < argc)
            grow_mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--extent-mib") && i + 1 < argc)
            extent_mib = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--evict-extents") && i + 1 < argc)
            evict_extents = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: gpu_stall [--sim] [--reps N] [--grow-mib M] [--extent-mib E] "
                            "[--evict-extents K]\n");
            return 1;
        }
    }
    if (reps < 1 || grow_mib == 0) {
        fprintf(stderr, "gpu_stall: --reps and --grow-mib must be positive\n");
        return 1;
    }
    gml_device *dev = open_device(sim);
    if (!dev)
        return 1;
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    if (evict_extents && !extent_mib)
        extent_mib = 2;
    if (extent_mib) {
        s.extent_share = 0;
        s.extent_size = extent_mib * MIB;
    }
    run r = {.grow = grow_mib * MIB, .evict = evict_extents > 0,
             .pair_us = malloc(MAX_PAIRS * sizeof(double))};
    if (!r.pair_us)
        return 1;
    for (int rep = 0; rep < reps; rep++) {
        const char *err = NULL;
        r.pool = gml_pool_create(dev, &s, &err);
        if (!r.pool) {
            fprintf(stderr, "gpu_stall: pool: %s\n", err ? err : "?");
            return 1;
        }
        r.pairs = 0;
        r.rc = GMLAKE_OK;
        uintptr_t *held = NULL;
        if (r.evict && stale_stitched_block(r.pool, evict_extents, extent_mib * MIB, &held) !=
                           GMLAKE_OK) {
            fprintf(stderr, "gpu_stall: cannot make a stitched block of %zu extents\n",
                    evict_extents);
            return 1;
        }
        atomic_store(&r.phase, 0);
        pthread_t t;
        if (pthread_create(&t, NULL, other, &r) != 0)
            return 1;
        while (atomic_load(&r.phase) == 0)
            ;
        uintptr_t p = 0;
        double t0 = bench_now_ns();
        int rc = r.evict ? gml_pool_empty_cache(r.pool)
                         : gml_pool_alloc(r.pool, r.grow, GML_STREAM_NONE, &p);
        double op_ms = (bench_now_ns() - t0) * 1e-6;
        atomic_store(&r.phase, 2);
        pthread_join(t, NULL);
        gmlake_stats st;
        gml_pool_counters(r.pool, &st);
        if (rc != GMLAKE_OK || r.rc != GMLAKE_OK || (r.evict && st.stitch_evictions != 1)) {
            fprintf(stderr, "gpu_stall: %s failed: %s (%lu evictions)\n",
                    r.evict ? "the teardown" : "the allocation",
                    gmlake_strerror(rc != GMLAKE_OK ? rc : r.rc),
                    (unsigned long)st.stitch_evictions);
            return 1;
        }
        if (p)
            gml_pool_free(r.pool, p, GML_STREAM_NONE);
        for (size_t i = 0; held && i < 2 * evict_extents; i++)
            gml_pool_free(r.pool, held[i], GML_STREAM_NONE);
        free(held);
        double max = 0;
        for (size_t i = 0; i < r.pairs; i++)
            max = r.pair_us[i] > max ? r.pair_us[i] : max;
        double p50 = r.pairs ? bench_median(r.pair_us, (int)r.pairs) : 0;
        if (r.evict)
            printf("{\"device\":\"%s\",\"evict_extents\":%zu,\"extent_mib\":%zu,\"rep\":%d,"
                   "\"evict_ms\":%.3f,", sim ? "sim" : "cuda", evict_extents, extent_mib, rep, op_ms);
        else
            printf("{\"device\":\"%s\",\"grow_mib\":%zu,\"extent_mib\":%zu,\"rep\":%d,"
                   "\"grow_ms\":%.3f,", sim ? "sim" : "cuda", grow_mib, extent_mib, rep, op_ms);
        printf("\"pairs\":%zu,\"other_max_us\":%.1f,\"other_p50_us\":%.2f}\n", r.pairs, max, p50);
        fflush(stdout);
        gml_pool_destroy(r.pool);
    }
    free(r.pair_us);
    gml_device_destroy(dev);
    return 0;
}
