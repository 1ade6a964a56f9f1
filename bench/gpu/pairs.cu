// pairs.cu — the cost of one allocate + free pair on a GPU, three patterns (issue 20):
//   one    cudaMallocAsync / cudaFreeAsync on one stream
//   cross  the same, but every other free is issued on a second stream after
//          cudaEventRecord(ev, s1) + cudaStreamWaitEvent(s2, ev) (the block was used on s1)
//   sync   cudaMalloc / cudaFree
// 512 allocations stay live; each pair frees a random one and allocates a new size, log-uniform
// 512 B .. 32 MiB, from a fixed seed (the same sequence under every allocator).  No kernels: the
// allocator's own cost.  Run it under LD_PRELOAD=libgmlake.so and with GMLAKE_ENABLE=0 (CUDA's
// own stream-ordered pool, and cudaMalloc) side by side.
//   pairs MODE PAIRS     prints one JSON line: mode, pairs, us_per_pair, gmlake (whether served),
//                        live_peak_mib (the most bytes asked for and live at once); under gmlake its
//                        peak reserved, stitches and device calls; under CUDA's stream-ordered pool
//                        (one, cross) the pool's reserved high-water mark, reserved_mib
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gmlake.h"

#define LIVE 512
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "pairs: %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static uint64_t rng = 88172645463325252ull;
static uint64_t next(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static size_t size_of(void) { return (size_t)exp(log(512.0) + (next() % 1000000) / 1e6 * (log(32.0 * (1 << 20)) - log(512.0))); }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: pairs one|cross|sync PAIRS\n"); return 2; }
    const char *mode = argv[1];
    long n = atol(argv[2]);
    int m = !strcmp(mode, "one") ? 0 : !strcmp(mode, "cross") ? 1 : !strcmp(mode, "sync") ? 2 : -1;
    if (m < 0 || n <= 0) { fprintf(stderr, "pairs: bad mode or count\n"); return 2; }
    cudaStream_t s1, s2;
    cudaEvent_t ev;
    CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    void *live[LIVE];
    size_t bytes[LIVE], now_live = 0, peak_live = 0;
    for (int i = 0; i < LIVE; i++) {
        bytes[i] = size_of();
        CK(m == 2 ? cudaMalloc(&live[i], bytes[i]) : cudaMallocAsync(&live[i], bytes[i], s1));
        now_live += bytes[i];
    }
    peak_live = now_live;
    CK(cudaDeviceSynchronize());
    double t0 = 0;
    for (long k = -n / 10; k < n; k++) { // a tenth of the pairs as warm-up
        if (k == 0) { CK(cudaDeviceSynchronize()); t0 = now(); }
        int i = (int)(next() % LIVE);
        now_live -= bytes[i];
        if (m == 2) {
            CK(cudaFree(live[i]));
            bytes[i] = size_of();
            CK(cudaMalloc(&live[i], bytes[i]));
        } else {
            if (m == 1 && (k & 1)) {
                CK(cudaEventRecord(ev, s1));
                CK(cudaStreamWaitEvent(s2, ev, 0));
                CK(cudaFreeAsync(live[i], s2));
            } else {
                CK(cudaFreeAsync(live[i], s1));
            }
            bytes[i] = size_of();
            CK(cudaMallocAsync(&live[i], bytes[i], s1));
        }
        now_live += bytes[i];
        if (now_live > peak_live)
            peak_live = now_live;
    }
    CK(cudaDeviceSynchronize());
    double us = (now() - t0) * 1e6 / n;
    int (*stats)(int, gmlake_stats *) = (int (*)(int, gmlake_stats *))dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    const char *(*name)(int) = (const char *(*)(int))dlsym(RTLD_DEFAULT, "gmlake_devcall_name");
    const char *en = getenv("GMLAKE_ENABLE");
    int served = stats && name && !(en && !strcmp(en, "0"));
    printf("{\"mode\":\"%s\",\"pairs\":%ld,\"us_per_pair\":%.3f,\"gmlake\":%s,\"live_peak_mib\":%.0f", mode, n, us,
           served ? "true" : "false", peak_live / 1048576.0);
    cudaMemPool_t pool;
    unsigned long long high = 0;
    if (!served && m != 2 && cudaDeviceGetMemPool(&pool, 0) == cudaSuccess &&
        cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &high) == cudaSuccess)
        printf(",\"reserved_mib\":%.0f", high / 1048576.0);
    gmlake_stats g;
    if (served && stats(0, &g) == 0) { // gmlake's own account of the run (warm-up included)
        printf(",\"reserved_mib\":%.0f,\"stitches\":%llu,\"calls\":{", g.peak_reserved_bytes / 1048576.0,
               (unsigned long long)g.stitches);
        for (int k = 0; k < GMLAKE_DC_COUNT; k++)
            printf("%s\"%s\":[%llu,%.4f]", k ? "," : "", name(k), (unsigned long long)g.device_calls[k],
                   g.device_seconds_by_call[k]);
        printf("}");
    }
    printf("}\n");
    for (int i = 0; i < LIVE; i++)
        CK(m == 2 ? cudaFree(live[i]) : cudaFreeAsync(live[i], s1));
    CK(cudaDeviceSynchronize());
    return 0;
}
