/*
 * bench_pool.c — allocate+free pairs on the sim device, after warm-up (every request a cache
 * hit), mixed sizes: 70% small (512 B .. 64 KiB), 30% large (1 .. 32 MiB), 16 live blocks kept
 * around so that frees merge and requests split.  Prints ns per pair: the median of RUNS runs.
 *   bench_pool [PAIRS_PER_RUN] [RUNS]
 */
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "stitch/pool.h"

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 1000000;
    int runs = argc > 2 ? atoi(argv[2]) : 7;
    if (pairs <= 0 || runs <= 0 || runs > 99) {
        fprintf(stderr, "usage: bench_pool [PAIRS_PER_RUN>0] [RUNS 1..99]\n");
        return 2;
    }
    const char *err = NULL;
    gml_pool *p = gml_sim_pool_create((size_t)8 << 30, false, NULL, &err);
    if (!p) {
        fprintf(stderr, "bench_pool: %s\n", err);
        return 1;
    }
    enum { NSIZES = 4096, KEEP = 16 };
    size_t *sizes = malloc(NSIZES * sizeof *sizes);
    bench_sizes(sizes, NSIZES, (size_t)31 << 20);
    uintptr_t keep[KEEP];
    for (int i = 0; i < KEEP; i++)
        gml_pool_alloc(p, sizes[i * 7], 0, &keep[i]);
    double res[99];
    for (int run = -1; run < runs; run++) { /* run -1 warms up */
        double t0 = bench_now_ns();
        for (long i = 0; i < pairs; i++) {
            uintptr_t x;
            if (gml_pool_alloc(p, sizes[i & (NSIZES - 1)], 0, &x) != GMLAKE_OK) {
                fprintf(stderr, "bench_pool: allocation failed\n");
                return 1;
            }
            gml_pool_free(p, x, 0);
        }
        if (run >= 0)
            res[run] = (bench_now_ns() - t0) / (double)pairs;
    }
    bench_median(res, runs);
    gmlake_stats st;
    gml_pool_stats(p, &st);
    uint64_t calls = 0;
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        calls += st.device_calls[i];
    printf("alloc+free pair: median %.1f ns (min %.1f, max %.1f) over %d runs of %ld pairs; "
           "device calls in total %lu\n",
           res[runs / 2], res[0], res[runs - 1], runs, pairs, (unsigned long)calls);
    for (int i = 0; i < KEEP; i++)
        gml_pool_free(p, keep[i], 0);
    gml_sim_pool_destroy(p);
    free(sizes);
    return 0;
}
