/* fake_cudart.c — a fake libcudart.so.13 for the interposer tests.  Like the real runtime it
 * reaches the driver by symbol (here: direct calls into the fake libcuda, which the preloaded
 * gmlake interposes), and counts what reached it. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <string.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

/* The runtime's codes for what the driver said (the numbers agree for these). */
static cudaError_t rt(CUresult r, cudaError_t otherwise)
{
    if (r == CUDA_SUCCESS)
        return cudaSuccess;
    if (r == CUDA_ERROR_NOT_INITIALIZED)
        return cudaErrorInitializationError;
    return otherwise;
}

EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    fake_cuda_counts()->rt_malloc++;
    CUdeviceptr d;
    CUresult r = cuMemAlloc_v2(&d, n);
    if (r != CUDA_SUCCESS)
        return rt(r, cudaErrorMemoryAllocation);
    *p = (void *)d;
    return cudaSuccess;
}
EXPORT cudaError_t cudaFree(void *p)
{
    fake_cuda_counts()->rt_free++;
    if (!p)
        return cudaSuccess;
    return rt(cuMemFree_v2((CUdeviceptr)p), cudaErrorInvalidValue);
}
EXPORT cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
    fake_cuda_counts()->rt_malloc_async++;
    CUdeviceptr d;
    CUresult r = cuMemAllocAsync(&d, n, (CUstream)s);
    if (r != CUDA_SUCCESS)
        return rt(r, cudaErrorMemoryAllocation);
    *p = (void *)d;
    return cudaSuccess;
}
EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    fake_cuda_counts()->rt_free_async++;
    return rt(cuMemFreeAsync((CUdeviceptr)p, (CUstream)s), cudaErrorInvalidValue);
}
EXPORT cudaError_t cudaMemGetInfo(size_t *f, size_t *t) { return cuMemGetInfo_v2(f, t) == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown; }
EXPORT cudaError_t cudaGetDevice(int *d)
{
    CUdevice x = 0;
    cudaError_t r = rt(cuCtxGetDevice(&x), cudaErrorUnknown);
    *d = x;
    return r;
}
EXPORT cudaError_t cudaSetDevice(int d)
{
    if (fake_forked())
        return cudaErrorInitializationError;
    if (d < 0 || d >= FAKE_DEVICES)
        return cudaErrorInvalidDevice;
    fake_cuda_set_device(d);
    return cudaSuccess;
}
EXPORT cudaError_t cudaDeviceSynchronize(void) { return rt(cuCtxSynchronize(), cudaErrorUnknown); }
/* Stream functions reach the driver by symbol, as libcudart reaches it through cuGetProcAddress. */
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s) { return rt(cuStreamCreate((CUstream *)s, 0), cudaErrorUnknown); }
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s) { return rt(cuStreamDestroy_v2((CUstream)s), cudaErrorInvalidResourceHandle); }
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s) { return rt(cuStreamSynchronize((CUstream)s), cudaErrorInvalidResourceHandle); }
EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st)
{
    *st = (void *)s == FAKE_CAPTURING_STREAM ? cudaStreamCaptureStatusActive : cudaStreamCaptureStatusNone;
    return cudaSuccess;
}
EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *p, int d) { *p = (cudaMemPool_t)0x9001; return cudaSuccess; }
EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v) { *(uint64_t *)v = 777; return cudaSuccess; }
EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v) { return cudaSuccess; }
EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t p, size_t keep) { fake_cuda_counts()->rt_trim++; return cudaSuccess; }
EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p) { fake_cuda_counts()->rt_ipc++; memset(h, 0, sizeof *h); return cudaSuccess; }
EXPORT cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags, enum cudaDriverEntryPointQueryResult *st)
{
    CUresult r = cuGetProcAddress_v2(sym, fn, 13000, flags, NULL);
    if (st)
        *st = r == CUDA_SUCCESS ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorSymbolNotFound;
}
EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int v, unsigned long long flags, enum cudaDriverEntryPointQueryResult *st)
{
    return cudaGetDriverEntryPoint(sym, fn, flags, st);
}
