// context_end.cu — a driver-API program whose context ends while gmlake holds events of it, under
// LD_PRELOAD=libgmlake.so.  Modes (argv[1]): ctx (a context of its own, cuCtxCreate, destroyed
// with cuCtxDestroy), release (the primary context, retained and released to zero with
// cuDevicePrimaryCtxRelease, then retained again).  In the context: a block freed on a created
// stream behind long work, and a larger miss on the legacy stream that asks that stream's bin (an
// event of the context, not complete).  After the context ended, allocations in the primary
// context ask that bin again: gmlake must not touch the dead event (on an H200 a use crashes the
// process: bench/gpu/reset_probe.cu event), and the block serves again only if gmlake waited for
// the context.  Run with GMLAKE_ENABLE=0 too (the checks that need gmlake are skipped).
// Prints "N passed, M failed"; exits non-zero on any failure.
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmlake.h"

#define MiB ((size_t)1 << 20)
static int passed, failed;
#define CHECK(cond, ...) do { if (cond) passed++; else { failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define OK(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)

static bool on(void)
{
    const char *e = getenv("GMLAKE_ENABLE");
    return dlsym(RTLD_DEFAULT, "gmlake_get_stats") && !(e && !strcmp(e, "0"));
}

static int pool_check(void)
{
    typedef int (*check_fn)(int);
    check_fn f = (check_fn)dlsym(RTLD_DEFAULT, "gmlake_check");
    return f ? f(0) : 0;
}

// In the current context: a 64 MiB block freed on a created stream behind ~100 ms of memsets, and
// a 128 MiB miss on the legacy stream (asks the stream's bin).  Returns the block.
static CUdeviceptr use_the_context(CUdeviceptr big, size_t big_bytes)
{
    CUstream s;
    CUdeviceptr a = 0, b = 0;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    for (int i = 0; i < 60; i++)
        OK(cuMemsetD32Async(big, (unsigned)i, big_bytes / 4, s));
    OK(cuMemAllocAsync(&a, 64 * MiB, s));
    OK(cuMemsetD32Async(a, 7, 64 * MiB / 4, s));
    OK(cuMemFreeAsync(a, s));
    OK(cuMemAllocAsync(&b, 128 * MiB, 0)); // a miss: asks s's bin (an event of this context)
    CHECK(cuStreamQuery(s) == CUDA_ERROR_NOT_READY, "the stream's work still runs");
    OK(cuMemFreeAsync(b, 0));
    return a;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "ctx";
    bool release = !strcmp(mode, "release");
    if (!release && strcmp(mode, "ctx")) {
        fprintf(stderr, "context_end: unknown mode '%s' (ctx, release)\n", mode);
        return 2;
    }
    bool g = on();
    CUdevice dev;
    CUcontext c, pc;
    OK(cuInit(0));
    OK(cuDeviceGet(&dev, 0));
    OK(cuDevicePrimaryCtxRetain(&pc, dev));
    OK(cuCtxSetCurrent(pc));
    size_t big_bytes = 4096 * MiB;
    CUdeviceptr big = 0;
    if (release) {
        c = pc;
    } else { // cuCtxCreate's signature changed in CUDA 13: the _v2 one, by name
        typedef CUresult (*create_fn)(CUcontext *, unsigned int, CUdevice);
        create_fn create = (create_fn)dlsym(RTLD_DEFAULT, "cuCtxCreate_v2");
        CHECK(create && create(&c, 0, dev) == CUDA_SUCCESS, "cuCtxCreate_v2");
        OK(cuCtxSetCurrent(c));
    }
    OK(cuMemAlloc(&big, big_bytes));
    CUdeviceptr a = use_the_context(big, big_bytes);
    OK(cuCtxSetCurrent(NULL));
    if (release) {
        OK(cuDevicePrimaryCtxRelease(dev));
        unsigned int flags = 0;
        int active = 1;
        OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
        CHECK(!active, "the last release ended the primary context");
        OK(cuDevicePrimaryCtxRetain(&pc, dev));
    } else {
        OK(cuCtxDestroy(c));
    }
    OK(cuCtxSetCurrent(pc));
    CUdeviceptr x = 0, y = 0;
    CUstream t;
    OK(cuStreamCreate(&t, CU_STREAM_NON_BLOCKING));
    OK(cuMemAllocAsync(&x, 64 * MiB, t)); // a miss: asks the ended context's bins
    OK(cuMemAllocAsync(&y, 128 * MiB, t));
    OK(cuMemsetD32Async(x, 1, 64 * MiB / 4, t));
    OK(cuCtxSynchronize());
    if (g) {
        CHECK(x == a, "the ended context was waited for: its block serves again");
        CHECK(pool_check() == 0, "pool consistent");
    }
    OK(cuMemFreeAsync(x, t));
    OK(cuMemFreeAsync(y, t));
    OK(cuStreamDestroy(t));
    CUresult r = cuMemFree(big); // of the ended context: CUDA destroyed it, gmlake's outlives it
    CHECK(!g || r == CUDA_SUCCESS, "cuMemFree of the ended context's allocation: %d", (int)r);
    OK(cuCtxSynchronize());
    printf("context_end %s: %d passed, %d failed\n", mode, passed, failed);
    return failed ? 1 : 0;
}
