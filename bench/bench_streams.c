/*
 * bench_streams.c — many streams, cross-stream frees (issue 23): a server that makes a stream per
 * request.  Allocation i is made on its own stream (i + 1); a window of WINDOW live blocks is kept,
 * and each new allocation frees one random live block on another stream (the new one's), so every
 * free lands in the bin of a stream other than the allocating one and every allocation misses its
 * own (empty) bin: the pool promotes, asks events, refills and reclaims small chunks all the time.
 * Sizes: half small (512 B .. 300 KB), half large (1 .. 8 MiB).  The pool is gmlake's (default
 * settings) on the simulated device, as `gmlake-replay --policy gmlake` runs it.
 * For each N (default 10^4, 10^5, 10^6 allocations over as many streams) it prints the wall time
 * (the best of max(3, 10^6 / N) runs, each on a fresh pool: the machine's noise only adds), the time per
 * operation (allocations and frees) and the ratio to the previous N's time; it fails (exit 1) when
 * 10x the allocations cost more than 12x the time, or an allocation fails.
 *   bench_streams [N...]               N allocations each (>= 1000)
 *   bench_streams --trace FILE N       writes the workload as a gmlake-trace v1 file instead
 *                                      (for `gmlake-replay --policy gmlake FILE`)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "core/trace_format.h"
#include "stitch/pool.h"

enum { WINDOW = 1000 };

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t next(rng *r)
{
    r->s ^= r->s << 13, r->s ^= r->s >> 7, r->s ^= r->s << 17;
    return r->s;
}

static size_t size_of(rng *r)
{
    static const size_t small[] = {512, 4096, 65536, 300000};
    static const size_t large_mib[] = {1, 2, 3, 5, 8};
    uint64_t x = next(r);
    return x & 1 ? small[(x >> 8) % 4] : large_mib[(x >> 8) % 5] << 20;
}

typedef struct live {
    uint64_t id, stream;
} live;

/* Calls fn on each event in order ('A' id size stream, or 'F' id 0 stream); stops at the first
 * non-zero return and returns it. */
typedef int (*event_fn)(void *ctx, char op, uint64_t id, size_t size, uint64_t stream);

static int workload(long n, event_fn fn, void *ctx)
{
    rng r = {88172645463325252ull};
    live win[WINDOW];
    size_t nlive = 0;
    for (long i = 0; i < n; i++) {
        uint64_t stream = (uint64_t)i + 1;
        if (nlive == WINDOW) { /* free a random live block on this (another) stream */
            size_t j = next(&r) % nlive;
            int rc = fn(ctx, 'F', win[j].id, 0, stream);
            if (rc)
                return rc;
            win[j] = win[--nlive];
        }
        int rc = fn(ctx, 'A', (uint64_t)i, size_of(&r), stream);
        if (rc)
            return rc;
        win[nlive++] = (live){(uint64_t)i, stream};
    }
    for (size_t j = 0; j < nlive; j++) { /* the rest, each on the stream after its own */
        int rc = fn(ctx, 'F', win[j].id, 0, win[j].stream + 1);
        if (rc)
            return rc;
    }
    return 0;
}

typedef struct run {
    gml_pool *pool;
    uintptr_t *addr; /* by allocation id */
    long ops;
} run;

static int pool_event(void *ctx, char op, uint64_t id, size_t size, uint64_t stream)
{
    run *x = ctx;
    x->ops++;
    if (op == 'A') {
        if (gml_pool_alloc(x->pool, size, (gml_stream)stream, &x->addr[id]) != GMLAKE_OK) {
            fprintf(stderr, "bench_streams: allocation %lu of %zu bytes failed\n",
                    (unsigned long)id, size);
            return 1;
        }
        return 0;
    }
    return gml_pool_free(x->pool, x->addr[id], (gml_stream)stream) != GMLAKE_OK;
}

typedef struct writer {
    FILE *f;
    uint64_t t;
} writer;

static int trace_event(void *ctx, char op, uint64_t id, size_t size, uint64_t stream)
{
    writer *w = ctx;
    /* a distinct fake address per allocation (the replay maps trace pointers to its own) */
    gml_trace_rec rec = {op, UINT64_C(0x7f0000000000) + (id << 12), size, stream, w->t++};
    gml_trace_write_line(w->f, &rec);
    return ferror(w->f) ? 1 : 0;
}

static double time_one(long n, long *ops)
{
    const char *err = NULL;
    run x = {gml_sim_pool_create((size_t)140 << 30, false, NULL, &err), NULL, 0};
    if (!x.pool) {
        fprintf(stderr, "bench_streams: %s\n", err);
        return -1;
    }
    x.addr = malloc((size_t)n * sizeof *x.addr);
    if (!x.addr)
        return -1;
    double t0 = bench_now_ns();
    int rc = workload(n, pool_event, &x);
    double t = (bench_now_ns() - t0) / 1e9;
    gml_sim_pool_destroy(x.pool);
    free(x.addr);
    *ops = x.ops;
    return rc ? -1 : t;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[1], "--trace") == 0) {
        long n = atol(argv[3]);
        writer w = {fopen(argv[2], "w"), 0};
        if (n < 1 || !w.f) {
            fprintf(stderr, "usage: bench_streams --trace FILE N (N >= 1)\n");
            return 2;
        }
        gml_trace_write_header(w.f, "bench_streams: a stream per allocation, cross-stream frees");
        int rc = workload(n, trace_event, &w);
        return fclose(w.f) || rc ? 1 : 0;
    }
    long ns[16] = {10000, 100000, 1000000};
    int k = 3;
    if (argc > 1) {
        k = 0;
        for (int i = 1; i < argc && k < 16; i++)
            if ((ns[k++] = atol(argv[i])) < 1000) {
                fprintf(stderr, "usage: bench_streams [N >= 1000 ...] | --trace FILE N\n");
                return 2;
            }
    }
    int status = 0;
    double prev = 0;
    printf("%10s %10s %12s %12s %10s\n", "allocs", "ops", "seconds", "ns/op", "x time");
    for (int i = 0; i < k; i++) {
        long ops = 0;
        double t = -1;
        long reps = 1000000 / ns[i] > 3 ? 1000000 / ns[i] : 3;
        for (long rep = 0; rep < reps; rep++) {
            double r = time_one(ns[i], &ops);
            if (r < 0)
                return 1;
            t = t < 0 || r < t ? r : t;
        }
        double ratio = prev > 0 ? t / prev : 0;
        printf("%10ld %10ld %12.3f %12.1f", ns[i], ops, t, t * 1e9 / (double)ops);
        if (i > 0) {
            /* 10x the allocations may cost at most 12x the time (scaled for other steps) */
            double allowed = 1.2 * (double)ns[i] / (double)ns[i - 1];
            printf(" %10.2f%s", ratio, ratio > allowed ? "  (> 1.2 x the allocations: superlinear)" : "");
            if (ratio > allowed)
                status = 1;
        }
        printf("\n");
        prev = t;
    }
    return status;
}
