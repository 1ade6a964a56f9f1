/* wrapper.c — a second interposer of the kind gmlake must stack with (a profiler, HAMi-core): it
 * wraps cudaMalloc, cudaFree and cuMemAlloc_v2, counts the calls that reach it, and finds the
 * next definition of each with dlsym(RTLD_NEXT, ...) on first use.  A lookup that gives nothing,
 * or the wrapper's own function (which would recurse forever), aborts with a message. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

static int calls_rt, calls_drv;

EXPORT int gmlwrap_runtime_calls(void) { return __atomic_load_n(&calls_rt, __ATOMIC_RELAXED); }
EXPORT int gmlwrap_driver_calls(void) { return __atomic_load_n(&calls_drv, __ATOMIC_RELAXED); }

static void *next(const char *name, void *self)
{
    void *p = dlsym(RTLD_NEXT, name);
    if (!p || p == self) {
        fprintf(stderr, "gmlwrap: dlsym(RTLD_NEXT, \"%s\") gave %s\n", name,
                p ? "the wrapper's own function" : "nothing");
        abort();
    }
    return p;
}

#define NEXT(fn) ((__typeof__(&fn))next(#fn, (void *)&fn))

EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    static __typeof__(&cudaMalloc) real;
    if (!real)
        real = NEXT(cudaMalloc);
    __atomic_fetch_add(&calls_rt, 1, __ATOMIC_RELAXED);
    return real(p, n);
}

EXPORT cudaError_t cudaFree(void *p)
{
    static __typeof__(&cudaFree) real;
    if (!real)
        real = NEXT(cudaFree);
    __atomic_fetch_add(&calls_rt, 1, __ATOMIC_RELAXED);
    return real(p);
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n)
{
    static __typeof__(&cuMemAlloc_v2) real;
    if (!real)
        real = NEXT(cuMemAlloc_v2);
    __atomic_fetch_add(&calls_drv, 1, __ATOMIC_RELAXED);
    return real(d, n);
}
