/*
 * growth.c — the driver's cost of growing and releasing device memory, by handle size, and of
 * the other calls gmlake makes (address reserve/free, events, synchronize).  The measurements
 * behind core/cost.c.  Needs a GPU.  The calls go through gmlake's own device layer
 * (core/device_cuda.c over dlopen("libcuda.so.1")), so what is timed is what the pool pays.
 *
 * For each handle size (2, 8, 20, 32, 64, 128, 512 MiB; or those given) and REPS repetitions
 * (median reported), over the whole handles that fit in TOTAL bytes (1 GiB), in one reserved range:
 *   create       cuMemCreate of every handle
 *   map          cuMemMap of every handle at its offset
 *   set_access   one cuMemSetAccess over the whole range   (set_access_each: one per handle)
 *   unmap        one cuMemUnmap over the whole range        (unmap_each: one per handle)
 *   release      cuMemRelease of every handle
 * Times are normalised to ms per GiB.  The "_each" variants are measured
 * in a second pass over fresh handles.  Then the fixed-cost calls, mean us per call over many:
 * address reserve + free of 1 GiB and of 256 GiB, event create / record / query / synchronize /
 * destroy (CU_EVENT_DISABLE_TIMING, as gmlake creates them, on the idle default stream),
 * cuCtxSynchronize on an idle device.
 *
 * With --threads T1,T2,...: instead, whether the driver grows faster from several threads: for
 * each handle size and thread count T, the handles are split into T consecutive parts of the one
 * range, each thread creating, mapping and setting access on its part (one set_access over it),
 * then unmapping (one call) and releasing it; wall time from a barrier to the last thread's end,
 * median of REPS ("bench":"growth_threads").
 *
 * Output: JSON lines on stdout.  Exit status 1 with a message when the driver or a GPU is missing
 * or a call fails.
 *   gpu_growth [--reps N] [--total-mib M] [--threads T1,T2,...] [HANDLE_MIB...]
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"
#include "core/device.h"

#define MIB ((size_t)1 << 20)

static void *libcuda;
static gml_device *dev;

static void *resolve(const char *name) { return dlsym(libcuda, name); }

static double now_ms(void) { return bench_now_ns() * 1e-6; }

#define CHECK(call)                                                                               \
    do {                                                                                          \
        int r_ = (call);                                                                          \
        if (r_ != GMLAKE_OK) {                                                                    \
            fprintf(stderr, "gpu_growth: %s failed: %s (line %d)\n", #call, gmlake_strerror(r_),  \
                    __LINE__);                                                                    \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static int open_device(void)
{
    libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!libcuda) {
        fprintf(stderr, "gpu_growth: cannot open libcuda.so.1 (no NVIDIA driver here): %s\n", dlerror());
        return -1;
    }
    int (*cu_init)(unsigned int) = (int (*)(unsigned int))dlsym(libcuda, "cuInit");
    if (!cu_init || cu_init(0) != 0) {
        fprintf(stderr, "gpu_growth: cuInit failed (no GPU?)\n");
        return -1;
    }
    const char *err = NULL;
    dev = gml_cuda_device_create(0, resolve, &err);
    if (!dev) {
        fprintf(stderr, "gpu_growth: %s\n", err ? err : "cannot open device 0");
        return -1;
    }
    return 0;
}

enum { CREATE, MAP, SET_ACCESS, UNMAP, RELEASE, SET_ACCESS_EACH, UNMAP_EACH, NPHASES };
static const char *const phase_name[NPHASES] = {"create", "map", "set_access", "unmap", "release",
                                                "set_access_each", "unmap_each"};

/* ms for `op` (set_access or unmap) over n handles of hsize at va: one call over the range, or
 * (each) one per handle. */
static double over_range(int (*op)(gml_device *, uintptr_t, size_t), uintptr_t va, size_t hsize,
                         size_t n, int each)
{
    double t = now_ms();
    if (each)
        for (size_t i = 0; i < n; i++)
            CHECK(op(dev, va + i * hsize, hsize));
    else
        CHECK(op(dev, va, n * hsize));
    return now_ms() - t;
}

/* One grow + release of `total` bytes in handles of `hsize`; each: one call per handle for
 * set_access and unmap instead of one over the range. */
static void cycle(size_t hsize, size_t total, int each, double *ms, gml_handle *hs)
{
    size_t n = total / hsize;
    uintptr_t va;
    /* the driver wants a power-of-two alignment: a 20 MiB handle maps at any 2 MiB boundary */
    CHECK(gml_dev_va_reserve(dev, total, gml_dev_granularity(dev), &va));
    double t = now_ms();
    for (size_t i = 0; i < n; i++)
        CHECK(gml_dev_chunk_create(dev, hsize, &hs[i]));
    double t1 = now_ms();
    ms[CREATE] = t1 - t;
    for (size_t i = 0; i < n; i++)
        CHECK(gml_dev_map(dev, va + i * hsize, hsize, hs[i]));
    ms[MAP] = now_ms() - t1;
    ms[each ? SET_ACCESS_EACH : SET_ACCESS] = over_range(gml_dev_set_access, va, hsize, n, each);
    ms[each ? UNMAP_EACH : UNMAP] = over_range(gml_dev_unmap, va, hsize, n, each);
    double t4 = now_ms();
    for (size_t i = 0; i < n; i++)
        CHECK(gml_dev_chunk_release(dev, hs[i]));
    ms[RELEASE] = now_ms() - t4;
    CHECK(gml_dev_va_free(dev, va, total));
}

static void growth(size_t hsize, size_t total, int reps)
{
    size_t n = total / hsize;
    total = n * hsize; /* whole handles: 20 MiB handles grow 1020 MiB of a GiB */
    gml_handle *hs = calloc(n, sizeof *hs);
    double (*v)[NPHASES] = calloc((size_t)reps, sizeof *v);
    double ms[NPHASES], col[64];
    if (!hs || !v) {
        fprintf(stderr, "gpu_growth: out of host memory\n");
        exit(1);
    }
    cycle(hsize, total, 0, ms, hs); /* warm-up */
    for (int r = 0; r < reps; r++) {
        cycle(hsize, total, 0, ms, hs);
        for (int k = CREATE; k <= RELEASE; k++)
            v[r][k] = ms[k];
        cycle(hsize, total, 1, ms, hs);
        v[r][SET_ACCESS_EACH] = ms[SET_ACCESS_EACH];
        v[r][UNMAP_EACH] = ms[UNMAP_EACH];
    }
    double gib = (double)total / (double)(1024 * MIB), med[NPHASES];
    printf("{\"bench\":\"growth\",\"handle_mib\":%zu,\"handles\":%zu,\"total_mib\":%zu,\"reps\":%d",
           hsize / MIB, n, total / MIB, reps);
    for (int k = 0; k < NPHASES; k++) {
        for (int r = 0; r < reps; r++)
            col[r] = v[r][k];
        med[k] = bench_median(col, reps);
        printf(",\"%s_ms_per_gib\":%.4f", phase_name[k], med[k] / gib);
    }
    printf(",\"grow_total_ms_per_gib\":%.4f,\"release_total_ms_per_gib\":%.4f}\n",
           (med[CREATE] + med[MAP] + med[SET_ACCESS]) / gib, (med[UNMAP] + med[RELEASE]) / gib);
    fflush(stdout);
    free(hs);
    free(v);
}

enum { MAX_THREADS = 64 };

typedef struct part {
    uintptr_t va;
    size_t hsize, n;
    gml_handle *hs;
    int release; /* 0: create, map, set_access; 1: unmap, release */
    pthread_barrier_t *start, *end;
} part;

static void *part_main(void *arg)
{
    part *p = arg;
    pthread_barrier_wait(p->start);
    if (!p->release) {
        for (size_t i = 0; i < p->n; i++)
            CHECK(gml_dev_chunk_create(dev, p->hsize, &p->hs[i]));
        for (size_t i = 0; i < p->n; i++)
            CHECK(gml_dev_map(dev, p->va + i * p->hsize, p->hsize, p->hs[i]));
        CHECK(gml_dev_set_access(dev, p->va, p->n * p->hsize));
    } else {
        CHECK(gml_dev_unmap(dev, p->va, p->n * p->hsize));
        for (size_t i = 0; i < p->n; i++)
            CHECK(gml_dev_chunk_release(dev, p->hs[i]));
    }
    pthread_barrier_wait(p->end);
    return NULL;
}

/* ms for one phase (grow or release) of `total` in handles of hsize split over t threads. */
static double threaded_phase(uintptr_t va, size_t hsize, size_t n, int t, int release,
                             gml_handle *hs)
{
    pthread_barrier_t start, end;
    pthread_barrier_init(&start, NULL, (unsigned)t + 1);
    pthread_barrier_init(&end, NULL, (unsigned)t + 1);
    part parts[MAX_THREADS];
    pthread_t th[MAX_THREADS];
    for (int i = 0; i < t; i++) {
        size_t first = n * (size_t)i / (size_t)t, last = n * (size_t)(i + 1) / (size_t)t;
        parts[i] = (part){va + first * hsize, hsize, last - first, hs + first, release, &start, &end};
        if (pthread_create(&th[i], NULL, part_main, &parts[i])) {
            fprintf(stderr, "gpu_growth: cannot start a thread\n");
            exit(1);
        }
    }
    pthread_barrier_wait(&start);
    double t0 = now_ms();
    pthread_barrier_wait(&end);
    double ms = now_ms() - t0;
    for (int i = 0; i < t; i++)
        pthread_join(th[i], NULL);
    pthread_barrier_destroy(&start);
    pthread_barrier_destroy(&end);
    return ms;
}

static void growth_threads(size_t hsize, size_t total, int reps, int t)
{
    size_t n = total / hsize;
    total = n * hsize;
    if ((size_t)t > n)
        return; /* fewer handles than threads */
    gml_handle *hs = calloc(n, sizeof *hs);
    double g[64], r[64];
    uintptr_t va;
    if (!hs) {
        fprintf(stderr, "gpu_growth: out of host memory\n");
        exit(1);
    }
    CHECK(gml_dev_va_reserve(dev, total, gml_dev_granularity(dev), &va));
    for (int i = -1; i < reps; i++) { /* i = -1: warm-up */
        double gm = threaded_phase(va, hsize, n, t, 0, hs);
        double rm = threaded_phase(va, hsize, n, t, 1, hs);
        if (i >= 0) {
            g[i] = gm;
            r[i] = rm;
        }
    }
    CHECK(gml_dev_va_free(dev, va, total));
    double gib = (double)total / (double)(1024 * MIB);
    printf("{\"bench\":\"growth_threads\",\"handle_mib\":%zu,\"handles\":%zu,\"threads\":%d,"
           "\"reps\":%d,\"grow_ms_per_gib\":%.4f,\"release_ms_per_gib\":%.4f}\n",
           hsize / MIB, n, t, reps, bench_median(g, reps) / gib, bench_median(r, reps) / gib);
    fflush(stdout);
    free(hs);
}

static void call_costs(int reps)
{
    size_t sizes[2] = {(size_t)1 << 30, (size_t)256 << 30};
    const char *names[2] = {"1GiB", "256GiB"};
    for (int s = 0; s < 2; s++) {
        double reserve = 0, release = 0;
        for (int i = 0; i < reps; i++) {
            uintptr_t va;
            double t = now_ms();
            CHECK(gml_dev_va_reserve(dev, sizes[s], 0, &va));
            double t1 = now_ms();
            CHECK(gml_dev_va_free(dev, va, sizes[s]));
            reserve += t1 - t;
            release += now_ms() - t1;
        }
        printf("{\"bench\":\"call\",\"kind\":\"va_reserve\",\"size\":\"%s\",\"us\":%.3f}\n", names[s], 1e3 * reserve / reps);
        printf("{\"bench\":\"call\",\"kind\":\"va_free\",\"size\":\"%s\",\"us\":%.3f}\n", names[s], 1e3 * release / reps);
    }
    gml_event *ev = calloc((size_t)reps, sizeof *ev);
    double ms[6] = {0}, t;
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(gml_dev_event_create(dev, &ev[i]));
    ms[0] = now_ms() - t;
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(gml_dev_event_record(dev, ev[i], 0));
    ms[1] = now_ms() - t;
    CHECK(gml_dev_synchronize(dev));
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(gml_dev_event_query(dev, ev[i]));
    ms[2] = now_ms() - t;
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(gml_dev_event_sync(dev, ev[i]));
    ms[3] = now_ms() - t;
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(gml_dev_event_destroy(dev, ev[i]));
    ms[4] = now_ms() - t;
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(gml_dev_synchronize(dev));
    ms[5] = now_ms() - t;
    const char *kinds[6] = {"event_create", "event_record", "event_query", "event_sync", "event_destroy", "synchronize"};
    for (int k = 0; k < 6; k++)
        printf("{\"bench\":\"call\",\"kind\":\"%s\",\"us\":%.3f}\n", kinds[k], 1e3 * ms[k] / reps);
    free(ev);
}

int main(int argc, char **argv)
{
    int reps = 5;
    size_t total = 1024 * MIB;
    size_t handles[32];
    int nh = 0, threads[16], nt = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)strtol(argv[++i], &end, 10);
            if (*end || reps < 1 || reps > 64) {
                fprintf(stderr, "gpu_growth: --reps wants 1..64\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--total-mib") == 0 && i + 1 < argc) {
            long m = strtol(argv[++i], &end, 10);
            if (*end || m < 2) {
                fprintf(stderr, "gpu_growth: --total-mib wants a number of MiB >= 2\n");
                return 2;
            }
            total = (size_t)m * MIB;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(NULL, ",")) {
                long t = strtol(tok, &end, 10);
                if (*end || t < 1 || t > MAX_THREADS || nt == 16) {
                    fprintf(stderr, "gpu_growth: --threads wants up to 16 counts of 1..%d, "
                            "comma-separated\n", MAX_THREADS);
                    return 2;
                }
                threads[nt++] = (int)t;
            }
        } else {
            long m = strtol(argv[i], &end, 10);
            if (*end || m < 2 || nh == 32) {
                fprintf(stderr, "usage: gpu_growth [--reps N] [--total-mib M] [--threads T1,T2,...] "
                        "[HANDLE_MIB...] (up to 32 sizes >= 2)\n");
                return 2;
            }
            handles[nh++] = (size_t)m * MIB;
        }
    }
    if (nh == 0) {
        static const size_t def[] = {2, 8, 20, 32, 64, 128, 512};
        for (nh = 0; nh < 7; nh++)
            handles[nh] = def[nh] * MIB;
    }
    if (open_device())
        return 1;
    size_t gran = gml_dev_granularity(dev);
    printf("{\"bench\":\"device\",\"granularity\":%zu}\n", gran);
    for (int i = 0; i < nh; i++) {
        size_t h = handles[i];
        if (h % gran || h > total) {
            fprintf(stderr, "gpu_growth: handle of %zu MiB skipped (not a multiple of the granularity "
                    "or larger than %zu MiB)\n", h / MIB, total / MIB);
            continue;
        }
        if (nt == 0)
            growth(h, total, reps);
        for (int t = 0; t < nt; t++)
            growth_threads(h, total, reps, threads[t]);
    }
    if (nt == 0)
        call_costs(1000);
    gml_device_destroy(dev);
    return 0;
}
