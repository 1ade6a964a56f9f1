/*
 * bench_trace_pool.c — the pool's own time per allocation and free on a recorded trace, with the
 * CPU caches as a framework leaves them.  In a training process the allocator runs between
 * kernels' launches and the framework's own bookkeeping, which evict its data: on the GPU the
 * pool took 0.6-0.8 us a pair (gmlake.stats' host seconds over train.py's timed steps, session
 * 21) where bench_pool, its data always in cache, takes ~0.06 us.  This replays TRACE through a
 * pool on the sim device (every stream's work complete at once, as `gmlake replay` does) and,
 * before each event, reads POLLUTE_KIB of a buffer of its own (64-byte stride, a different part
 * each time), then gives the pool's time (gml_pool_host_seconds: its alloc and free calls, lock
 * included) per allocation and per free, and the same run without pollution.  Events the pool
 * refuses count as failures; the trace's pointers are mapped to the pool's.
 *   bench_trace_pool TRACE [POLLUTE_KIB (default 4096)] [RUNS (default 3)]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "core/addrmap.h"
#include "stitch/pool.h"
#include "tools/trace.h"

typedef struct result {
    double alloc_ns, free_ns, pollute_ns;
    uint64_t allocs, frees, failed;
} result;

static volatile uint64_t sink;

/* Reads kib KiB of buf (of cap bytes) from *at on, one load per cache line. */
static void pollute(const uint8_t *buf, size_t cap, size_t kib, size_t *at)
{
    uint64_t s = 0;
    for (size_t i = 0; i < kib * 1024; i += 64) {
        s += buf[*at];
        *at = *at + 64 < cap ? *at + 64 : 0;
    }
    sink += s;
}

static int run(const gml_trace *t, const uint8_t *buf, size_t cap, size_t kib, result *r)
{
    const char *why = NULL;
    gml_pool *p = gml_sim_pool_create((size_t)140 << 30, false, NULL, &why);
    if (!p) {
        fprintf(stderr, "bench_trace_pool: %s\n", why);
        return -1;
    }
    gml_addrmap map = {0}; /* the trace's pointer -> the pool's */
    size_t at = 0;
    *r = (result){0};
    double spent = 0;
    for (size_t i = 0; i < t->n; i++) {
        const gml_trace_event *e = &t->ev[i];
        if (kib) {
            double t0 = bench_now_ns();
            pollute(buf, cap, kib, &at);
            spent += bench_now_ns() - t0;
        }
        if (e->op == 'A') {
            uintptr_t out;
            if (gml_addrmap_get(&map, e->ptr) || !gml_addrmap_reserve(&map, 1) ||
                gml_pool_alloc(p, e->size, (gml_stream)e->stream, &out) != GMLAKE_OK) {
                r->failed++;
                continue;
            }
            gml_addrmap_put(&map, e->ptr, (void *)out);
            r->allocs++;
        } else {
            void *ptr = gml_addrmap_del(&map, e->ptr);
            if (ptr) {
                gml_pool_free(p, (uintptr_t)ptr, (gml_stream)e->stream);
                r->frees++;
            }
        }
    }
    double a, f;
    gml_pool_host_seconds(p, &a, &f);
    r->alloc_ns = r->allocs ? 1e9 * a / (double)r->allocs : 0;
    r->free_ns = r->frees ? 1e9 * f / (double)r->frees : 0;
    r->pollute_ns = t->n ? spent / (double)t->n : 0;
    for (size_t i = 0; i < map.cap; i++)
        if (map.slot[i].key)
            gml_pool_free(p, (uintptr_t)map.slot[i].val, 0);
    gml_addrmap_free(&map);
    gml_sim_pool_destroy(p);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: bench_trace_pool TRACE [POLLUTE_KIB] [RUNS 1..99]\n");
        return 2;
    }
    long kib = argc > 2 ? atol(argv[2]) : 4096;
    int runs = argc > 3 ? atoi(argv[3]) : 3;
    if (kib < 0 || kib > (1 << 20) || runs <= 0 || runs > 99) {
        fprintf(stderr, "bench_trace_pool: POLLUTE_KIB must be 0..1048576 and RUNS 1..99\n");
        return 2;
    }
    gml_trace t;
    char err[512];
    if (gml_trace_load(argv[1], &t, err, sizeof err) != 0) {
        fprintf(stderr, "bench_trace_pool: %s\n", err);
        return 1;
    }
    size_t cap = (size_t)64 << 20; /* larger than any last-level cache it runs on */
    uint8_t *buf = malloc(cap);
    if (!buf) {
        fprintf(stderr, "bench_trace_pool: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < cap; i++)
        buf[i] = (uint8_t)i;
    for (int cold = 0; cold < (kib ? 2 : 1); cold++) {
        double an[99], fn[99];
        result r;
        for (int i = 0; i < runs; i++) {
            if (run(&t, buf, cap, cold ? (size_t)kib : 0, &r) != 0)
                return 1;
            an[i] = r.alloc_ns, fn[i] = r.free_ns;
        }
        printf("%s: alloc %.0f ns, free %.0f ns (median of %d runs; %" PRIu64 " allocations, %" PRIu64
               " frees, %" PRIu64 " refused)\n",
               cold ? "caches polluted" : "caches warm", bench_median(an, runs), bench_median(fn, runs),
               runs, r.allocs, r.frees, r.failed);
        if (cold)
            printf("  (%ld KiB read before each event, %.0f ns of it)\n", kib, r.pollute_ns);
    }
    free(buf);
    gml_trace_free(&t);
    return 0;
}
