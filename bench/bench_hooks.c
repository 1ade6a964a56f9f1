/*
 * bench_hooks.c — the allocate+free pair through libgmlake's hooks: cudaMallocAsync +
 * cudaFreeAsync on one stream (what PyTorch's backend:cudaMallocAsync calls per tensor), over the
 * fake CUDA of tests/fake (no GPU), with libgmlake preloaded.  Mixed sizes after warm-up (every
 * request a cache hit): 70% small (512 B .. 64 KiB), 30% large (1 .. 4 MiB; the fake device has 256 MiB), 8 blocks kept live
 * per thread.  One thread, then THREADS threads each on its own stream at once.
 * Prints ns per pair (median of RUNS runs): for several threads, the wall time of one thread's
 * pair while the others run (latency) and wall time / all pairs (throughput).
 *   LD_PRELOAD=build/interpose/libgmlake.so build/bench/bench_hooks [PAIRS_PER_RUN] [RUNS] [THREADS]
 * Exits 1 when the allocations were not served by gmlake (not preloaded).
 */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "gmlake.h"

enum { NSIZES = 4096, KEEP = 8, MAXTHREADS = 16 };

static size_t sizes[NSIZES];
static long pairs;
static pthread_barrier_t start, stop;
static int failed;

/* pairs allocate+free pairs on stream s, sizes from offset off */
static int loop(cudaStream_t s, long n, int off)
{
    for (long i = 0; i < n; i++) {
        void *p;
        if (cudaMallocAsync(&p, sizes[(i + off) & (NSIZES - 1)], s) != cudaSuccess)
            return -1;
        if (cudaFreeAsync(p, s) != cudaSuccess)
            return -1;
    }
    return 0;
}

typedef struct worker {
    int id, runs;
    pthread_t th;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    cudaStream_t s = 0; /* a created stream: the fake records events only on streams it made */
    if (cudaStreamCreate(&s) != cudaSuccess)
        __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    void *keep[KEEP];
    for (int i = 0; i < KEEP; i++)
        if (cudaMallocAsync(&keep[i], sizes[(i * 7 + w->id * 131) & (NSIZES - 1)], s) != cudaSuccess)
            __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
    for (int run = -1; run < w->runs; run++) { /* run -1 warms up */
        pthread_barrier_wait(&start);
        if (loop(s, pairs, w->id * 1021))
            __atomic_store_n(&failed, 1, __ATOMIC_RELAXED);
        pthread_barrier_wait(&stop);
    }
    for (int i = 0; i < KEEP; i++)
        cudaFreeAsync(keep[i], s);
    if (s)
        cudaStreamDestroy(s);
    return NULL;
}

/* Runs nthreads workers `runs` times; res[run] = wall ns of one run. */
static int measure(int nthreads, int runs, double *res)
{
    worker w[MAXTHREADS];
    pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
    pthread_barrier_init(&stop, NULL, (unsigned)nthreads + 1);
    for (int i = 0; i < nthreads; i++) {
        w[i] = (worker){.id = i, .runs = runs};
        pthread_create(&w[i].th, NULL, work, &w[i]);
    }
    for (int run = -1; run < runs; run++) {
        pthread_barrier_wait(&start);
        double t0 = bench_now_ns();
        pthread_barrier_wait(&stop);
        if (run >= 0)
            res[run] = bench_now_ns() - t0;
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(w[i].th, NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&stop);
    bench_median(res, runs);
    return failed ? -1 : 0;
}

int main(int argc, char **argv)
{
    pairs = argc > 1 ? atol(argv[1]) : 1000000;
    int runs = argc > 2 ? atoi(argv[2]) : 7;
    int threads = argc > 3 ? atoi(argv[3]) : 2;
    if (pairs <= 0 || runs <= 0 || runs > 99 || threads < 2 || threads > MAXTHREADS) {
        fprintf(stderr, "usage: bench_hooks [PAIRS_PER_RUN>0] [RUNS 1..99] [THREADS 2..16]\n");
        return 2;
    }
    int (*get_stats)(int, gmlake_stats *) = (int (*)(int, gmlake_stats *))dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    const char *(*devcall_name)(int) = (const char *(*)(int))dlsym(RTLD_DEFAULT, "gmlake_devcall_name");
    if (!get_stats || !devcall_name) {
        fprintf(stderr, "bench_hooks: libgmlake is not loaded (run with LD_PRELOAD=.../libgmlake.so)\n");
        return 1;
    }
    bench_sizes(sizes, NSIZES, (size_t)3 << 20);
    double one[99], many[99];
    if (measure(1, runs, one) || measure(threads, runs, many)) {
        fprintf(stderr, "bench_hooks: an allocation or free failed\n");
        return 1;
    }
    gmlake_stats st;
    uint64_t expect = (uint64_t)pairs * (uint64_t)(runs + 1) * (uint64_t)(1 + threads);
    if (get_stats(0, &st) != GMLAKE_OK || st.allocations < expect) {
        fprintf(stderr, "bench_hooks: gmlake served %lu of %lu allocations: the hooks were bypassed\n",
                (unsigned long)st.allocations, (unsigned long)expect);
        return 1;
    }
    uint64_t calls = 0;
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        calls += st.device_calls[i];
    double n = (double)pairs;
    printf("hooks cudaMallocAsync+cudaFreeAsync pair, 1 thread: median %.1f ns (min %.1f, max %.1f)\n",
           one[runs / 2] / n, one[0] / n, one[runs - 1] / n);
    printf("hooks pair, %d threads on their own streams: median %.1f ns per pair per thread "
           "(min %.1f, max %.1f), %.1f ns per pair overall\n",
           threads, many[runs / 2] / n, many[0] / n, many[runs - 1] / n, many[runs / 2] / (n * threads));
    printf("%d runs of %ld pairs per thread; device calls in total %lu:", runs, pairs, (unsigned long)calls);
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        if (st.device_calls[i])
            printf(" %s %lu", devcall_name(i), (unsigned long)st.device_calls[i]);
    printf("\n");
    return 0;
}
