/* local_plugin.c — a library linked to libcudart (the fake), as plugins and ONNX Runtime- or
 * TensorRT-style loaders are, for test_rtld_local to load with dlopen(RTLD_LOCAL). */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "tests/fake/fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

#define MiB ((size_t)1 << 20)
#define STEP(c)                                                                                   \
    do {                                                                                          \
        if (!(c)) {                                                                               \
            snprintf(why, n, "%s", #c);                                                           \
            return 1;                                                                             \
        }                                                                                         \
    } while (0)

/* Allocates, writes, frees through the runtime it links; 0 on success, else 1 and why. */
EXPORT int plugin_run(char *why, size_t n)
{
    void *p = NULL, *q = NULL, *z = NULL;
    STEP(cudaMalloc(&p, 3 * MiB) == cudaSuccess);
    memset(p, 0x5a, 3 * MiB);
    STEP(cudaMallocAsync(&q, 4096, (cudaStream_t)0x10) == cudaSuccess);
    STEP(cudaMalloc(&z, 0) == cudaSuccess); /* never served by gmlake: passes to this runtime */
    STEP(cudaFree(z) == cudaSuccess);
    STEP(cudaFreeAsync(q, (cudaStream_t)0x10) == cudaSuccess);
    STEP(cudaFree(p) == cudaSuccess);
    size_t f = 0, t = 0;
    STEP(cudaMemGetInfo(&f, &t) == cudaSuccess && t == 256 * MiB);
    STEP(cudaMalloc(&p, 1024 * MiB) == cudaErrorMemoryAllocation);
    STEP(cudaGetLastError() == cudaErrorMemoryAllocation);
    STEP(cudaGetLastError() == cudaSuccess);
    /* the entry-point resolver, found only in this library's scope: the hook called its
     * global slot, NULL here, and crashed */
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q_st;
    STEP(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &q_st) == cudaSuccess && fn);
    return 0;
}

EXPORT fake_counts *plugin_fake_counts(void) { return fake_cuda_counts(); }
