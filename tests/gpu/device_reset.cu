// device_reset.cu — a program that resets its device and goes on, under LD_PRELOAD=libgmlake.so.
// CUDA's contract (cudaDeviceReset, cuDevicePrimaryCtxReset): every allocation and object of the
// primary context is destroyed; the next runtime call makes a fresh context, in which the program
// allocates and computes again.  Many CUDA programs call cudaDeviceReset at the end of main, and
// test harnesses between cases.  gmlake must neither crash on its own objects of the old context
// (events, mappings) nor hand out memory the reset took away, and its books must start again.
// Modes (argv[1]): runtime (cudaDeviceReset), driver (cuDevicePrimaryCtxReset_v2 through
// libcuda), sticky (a kernel faults, then the program resets: CUDA's reset returns success but
// the fault stays and the process must end (CUDA's words); the pool's teardown runs in the
// faulted context, and nothing may crash or hang).  Run each with GMLAKE_ENABLE=0 too: the checks
// hold for CUDA itself.  After every reset of the first two modes the device's free memory is
// back to what it was before the first allocation (within 64 MiB): nothing of the pool is left.
// Prints "N passed, M failed"; exits non-zero on any failure.
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>
#include "gmlake.h"
#include "gpu_check.cuh"

#define MiB ((size_t)1 << 20)

typedef int (*stats_fn)(int, gmlake_stats *);
typedef int (*check_fn)(int);
static bool on(void)
{
    const char *e = getenv("GMLAKE_ENABLE");
    return dlsym(RTLD_DEFAULT, "gmlake_get_stats") && !(e && !strcmp(e, "0"));
}
static gmlake_stats stats(void)
{
    gmlake_stats s;
    memset(&s, 0, sizeof s);
    stats_fn f = (stats_fn)dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    if (f) f(0, &s);
    return s;
}
static int pool_check(void)
{
    check_fn f = (check_fn)dlsym(RTLD_DEFAULT, "gmlake_check");
    return f ? f(0) : 0;
}

__global__ void fault(int *p) { *(volatile int *)((uintptr_t)p ^ ((uintptr_t)1 << 46)) = 1; }

static size_t free_mib(void)
{
    size_t f = 0, t = 0;
    cudaMemGetInfo(&f, &t);
    return f / MiB;
}

static cudaError_t reset(const char *mode)
{
    if (!strcmp(mode, "driver")) {
        typedef CUresult (*reset_fn)(CUdevice);
        void *cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
        reset_fn f = cu ? (reset_fn)dlsym(cu, "cuDevicePrimaryCtxReset_v2") : NULL;
        if (!f) return cudaErrorUnknown;
        return f(0) == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown;
    }
    return cudaDeviceReset();
}

// One life of the program: allocations of every kind, some freed, some live, work on a stream.
static void *life(int round, size_t *live_bytes)
{
    void *a = NULL, *b = NULL, *c = NULL;
    cudaStream_t s;
    CHECK(cudaMalloc(&bad, sizeof *bad) == cudaSuccess, "round %d: counter", round);
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "round %d: stream", round);
    CHECK(cudaMalloc(&a, 64 * MiB) == cudaSuccess, "round %d: cudaMalloc 64 MiB", round);
    CHECK(cudaMalloc(&b, 32 * MiB) == cudaSuccess, "round %d: cudaMalloc 32 MiB", round);
    fill<<<256, 256>>>((uint32_t *)a, 64 * MiB / 4, 11 + round);
    fill<<<256, 256>>>((uint32_t *)b, 32 * MiB / 4, 22 + round);
    CHECK(ok_data(a, 64 * MiB, 11 + round) && ok_data(b, 32 * MiB, 22 + round), "round %d: data", round);
    CHECK(cudaFree(a) == cudaSuccess, "round %d: cudaFree", round);
    for (int i = 0; i < 20; i++) { // stream-ordered blocks: gmlake's events on this context
        CHECK(cudaMallocAsync(&c, (size_t)(1 + i) * MiB, s) == cudaSuccess, "round %d: cudaMallocAsync", round);
        fill<<<64, 256, 0, s>>>((uint32_t *)c, (1 + i) * MiB / 4, 33 + i);
        CHECK(ok_data(c, (1 + i) * MiB, 33 + i, s), "round %d: async data %d", round, i);
        CHECK(cudaFreeAsync(c, s) == cudaSuccess, "round %d: cudaFreeAsync", round);
    }
    CHECK(cudaStreamSynchronize(s) == cudaSuccess, "round %d: stream sync", round);
    *live_bytes = 32 * MiB + sizeof *bad;
    return b; // left live across the reset: the reset destroys it
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "runtime";
    if (strcmp(mode, "runtime") && strcmp(mode, "driver") && strcmp(mode, "sticky")) {
        fprintf(stderr, "device_reset: unknown mode '%s' (runtime, driver, sticky)\n", mode);
        return 2;
    }
    bool g = on();
    cudaFree(0);
    size_t base = free_mib();
    if (!strcmp(mode, "sticky")) {
        size_t live = 0;
        (void)life(0, &live);
        void *big = NULL;
        CHECK(cudaMalloc(&big, 256 * MiB) == cudaSuccess && cudaFree(big) == cudaSuccess, "256 MiB cached");
        int *x = NULL;
        cudaMalloc(&x, 4096);
        fault<<<1, 1>>>(x);
        cudaError_t e = cudaDeviceSynchronize();
        CHECK(e == cudaErrorIllegalAddress, "the kernel faulted: %s", cudaGetErrorName(e));
        e = cudaDeviceReset();
        CHECK(e == cudaSuccess, "the reset after the fault: %s", cudaGetErrorName(e));
        e = cudaMalloc(&big, MiB);
        printf("after the reset: cudaMalloc %s, last error %s\n", cudaGetErrorName(e),
               cudaGetErrorName(cudaGetLastError()));
        printf("device_reset %s: %d passed, %d failed\n", mode, passed, failed);
        return failed ? 1 : 0;
    }
    size_t live = 0;
    void *stale = NULL;
    for (int round = 0; round < 3; round++) {
        stale = life(round, &live);
        if (g) {
            gmlake_stats s = stats();
            CHECK(s.active_bytes >= live, "round %d: gmlake serves (active %zu)", round, (size_t)s.active_bytes);
        }
        if (g) { // memory the pool caches, beside what is live
            void *big = NULL;
            CHECK(cudaMalloc(&big, 256 * MiB) == cudaSuccess && cudaFree(big) == cudaSuccess,
                  "round %d: 256 MiB cached", round);
        }
        cudaError_t e = reset(mode);
        CHECK(e == cudaSuccess, "round %d: reset (%s): %s", round, mode, cudaGetErrorName(e));
        cudaFree(0);
        size_t now = free_mib();
        CHECK(now + 64 >= base, "round %d: the device's memory is back (%zu MiB free, %zu before)",
              round, now, base);
        if (g) {
            gmlake_stats s = stats();
            CHECK(s.active_bytes == 0 && s.reserved_bytes == 0,
                  "round %d: after the reset gmlake holds nothing (active %zu, reserved %zu)", round,
                  (size_t)s.active_bytes, (size_t)s.reserved_bytes);
            CHECK(pool_check() == 0, "round %d: pool consistent after the reset", round);
        }
    }
    // After the last reset: the old live pointer is gone (an error, not a crash), and the program
    // computes in the fresh context.
    cudaError_t e = cudaFree(stale);
    CHECK(e != cudaSuccess, "cudaFree of a pointer the reset destroyed fails: %s", cudaGetErrorName(e));
    cudaGetLastError();
    void *d = NULL;
    CHECK(cudaMalloc(&bad, sizeof *bad) == cudaSuccess, "counter after the resets");
    CHECK(cudaMalloc(&d, 200 * MiB) == cudaSuccess, "cudaMalloc 200 MiB after the resets");
    fill<<<256, 256>>>((uint32_t *)d, 200 * MiB / 4, 77);
    CHECK(ok_data(d, 200 * MiB, 77), "data after the resets");
    if (g) {
        gmlake_stats s = stats();
        CHECK(s.active_bytes >= 200 * MiB && s.active_bytes < 201 * MiB,
              "gmlake serves after the resets (active %zu)", (size_t)s.active_bytes);
        CHECK(pool_check() == 0, "pool consistent at the end");
    }
    CHECK(cudaFree(d) == cudaSuccess, "cudaFree after the resets");
    CHECK(cudaDeviceReset() == cudaSuccess, "a last reset, as CUDA's samples end");
    printf("device_reset %s: %d passed, %d failed\n", mode, passed, failed);
    return failed ? 1 : 0;
}
