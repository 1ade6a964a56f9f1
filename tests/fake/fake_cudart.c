/* fake_cudart.c — a fake libcudart.so.13 for the interposer tests.  Like the real runtime it
 * reaches the driver by symbol (here: direct calls into the fake libcuda, which the preloaded
 * gmlake interposes), and counts what reached it.  It keeps a per-thread last error as CUDA does:
 * every failing call records its error, cudaGetLastError returns and clears it,
 * cudaPeekAtLastError returns it; after a sticky fault (fake_cuda_fault) every call but the
 * host-side queries fails with the fault once a synchronisation has seen it, and the last error
 * cannot be cleared.  In a child forked from a process that used CUDA every call fails with
 * cudaErrorInitializationError, as CUDA's do. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string.h>

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

static __thread cudaError_t last_error;
static _Atomic cudaError_t sticky;

/* Every entry point: marks the runtime as entered (fake_cuda.h: reentered) and, after fork or
 * once a sticky fault has been seen, fails. */
#define ENTER()                                                                                   \
    fake_runtime_enter();                                                                         \
    if (fake_forked() || sticky) {                                                                \
        fake_runtime_leave();                                                                     \
        return last_error = fake_forked() ? cudaErrorInitializationError : sticky;                \
    }
static cudaError_t leave(cudaError_t e)
{
    fake_runtime_leave();
    if (e != cudaSuccess)
        last_error = e;
    return e;
}

/* The runtime's code for a driver result (equal numbers, as in CUDA, for the ones used here). */
static cudaError_t rt(CUresult r)
{
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return cudaErrorMemoryAllocation;
    if (fake_cuda_faulted() && r == (CUresult)fake_cuda_faulted())
        sticky = (cudaError_t)r;
    return (cudaError_t)r;
}

EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = sticky;
    return e;
}
EXPORT cudaError_t cudaPeekAtLastError(void) { return last_error; }

EXPORT cudaError_t cudaMalloc(void **p, size_t n)
{
    ENTER();
    __atomic_fetch_add(&fake_cuda_counts()->rt_malloc, 1, __ATOMIC_RELAXED);
    CUdeviceptr d;
    cudaError_t e = rt(cuMemAlloc_v2(&d, n));
    if (e == cudaSuccess)
        *p = (void *)d;
    return leave(e);
}
EXPORT cudaError_t cudaFree(void *p)
{
    ENTER();
    __atomic_fetch_add(&fake_cuda_counts()->rt_free, 1, __ATOMIC_RELAXED);
    return leave(p ? (cuMemFree_v2((CUdeviceptr)p) == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue)
                   : cudaSuccess);
}
/* Like the real runtime: the device's current pool (cuMemAllocAsync uses it). */
EXPORT cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)
{
    ENTER();
    __atomic_fetch_add(&fake_cuda_counts()->rt_malloc_async, 1, __ATOMIC_RELAXED);
    CUdeviceptr d;
    cudaError_t e = rt(cuMemAllocAsync(&d, n, (CUstream)s));
    if (e == cudaSuccess)
        *p = (void *)d;
    return leave(e);
}
EXPORT cudaError_t cudaFreeAsync(void *p, cudaStream_t s)
{
    ENTER();
    __atomic_fetch_add(&fake_cuda_counts()->rt_free_async, 1, __ATOMIC_RELAXED);
    return leave(cuMemFreeAsync((CUdeviceptr)p, (CUstream)s) == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue);
}
EXPORT cudaError_t cudaMemGetInfo(size_t *f, size_t *t)
{
    ENTER();
    return leave(cuMemGetInfo_v2(f, t) == CUDA_SUCCESS ? cudaSuccess : cudaErrorUnknown);
}
/* a host-side query: answers even after a fault (not after fork) */
EXPORT cudaError_t cudaGetDevice(int *d)
{
    if (fake_forked())
        return last_error = cudaErrorInitializationError;
    *d = fake_current_device();
    return cudaSuccess;
}
EXPORT cudaError_t cudaSetDevice(int d)
{
    ENTER();
    if (d < 0 || d >= FAKE_DEVICES)
        return leave(cudaErrorInvalidDevice);
    fake_cuda_set_device(d);
    return leave(cudaSuccess);
}
EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
    ENTER();
    *n = FAKE_DEVICES;
    return leave(cudaSuccess);
}
EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    ENTER();
    return leave(rt(cuCtxSynchronize()));
}
/* As CUDA's runtime: the current device's primary context is reset through the driver, also
 * after a sticky fault (it returns success on the GPU then, and the fault stays). */
EXPORT cudaError_t cudaDeviceReset(void)
{
    fake_runtime_enter();
    if (fake_forked())
        return leave(cudaErrorInitializationError);
    return leave(rt(cuDevicePrimaryCtxReset_v2(fake_current_device())));
}
EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    ENTER();
    CUcontext c;
    if (peer < 0 || peer >= FAKE_DEVICES || cuDevicePrimaryCtxRetain(&c, peer) != CUDA_SUCCESS)
        return leave(cudaErrorInvalidDevice);
    return leave(rt(cuCtxEnablePeerAccess(c, flags)));
}
EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    ENTER();
    return leave(rt(cuStreamCreate((CUstream *)s, 0)));
}
EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    ENTER();
    CUresult r = cuStreamDestroy_v2((CUstream)s);
    return leave(r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidResourceHandle);
}
EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    ENTER();
    CUresult r = cuStreamSynchronize((CUstream)s);
    return leave(r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidResourceHandle);
}
EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *st)
{
    ENTER();
    int cs;
    CUresult r = (CUresult)fake_capture_status(s, &cs);
    *st = (enum cudaStreamCaptureStatus)cs;
    return leave(rt(r));
}
EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    ENTER();
    return leave(rt(cuStreamBeginCapture_v2((CUstream)s, (CUstreamCaptureMode)mode)));
}
EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    ENTER();
    return leave(rt(cuStreamEndCapture((CUstream)s, (CUgraph *)g)));
}
EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
    ENTER();
    return leave(rt(cuThreadExchangeStreamCaptureMode((CUstreamCaptureMode *)mode)));
}
EXPORT cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *p, int d)
{
    ENTER();
    return leave(rt((CUresult)fake_default_pool((void **)p, d)));
}
EXPORT cudaError_t cudaDeviceSetMemPool(int d, cudaMemPool_t p)
{
    ENTER();
    return leave(rt(cuDeviceSetMemPool(d, (CUmemoryPool)p)));
}
EXPORT cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *p, int d)
{
    ENTER();
    return leave(rt(cuDeviceGetMemPool((CUmemoryPool *)p, d)));
}
EXPORT cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v)
{
    ENTER();
    *(uint64_t *)v = 777;
    return leave(cudaSuccess);
}
/* As CUDA's: a high watermark can only be reset to zero. */
EXPORT cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t p, enum cudaMemPoolAttr a, void *v)
{
    ENTER();
    /* as CUDA: a high watermark can only be reset to zero */
    bool high = a == cudaMemPoolAttrReservedMemHigh || a == cudaMemPoolAttrUsedMemHigh;
    return leave(!v || (high && *(uint64_t *)v != 0) ? cudaErrorInvalidValue : cudaSuccess);
}
EXPORT cudaError_t cudaMemPoolTrimTo(cudaMemPool_t p, size_t keep)
{
    ENTER();
    __atomic_fetch_add(&fake_cuda_counts()->rt_trim, 1, __ATOMIC_RELAXED);
    return leave(cudaSuccess);
}
EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *p)
{
    ENTER();
    __atomic_fetch_add(&fake_cuda_counts()->rt_ipc, 1, __ATOMIC_RELAXED);
    memset(h, 0, sizeof *h);
    return leave(cudaSuccess);
}
/* CUDA's answers to handles and pointers that are not its own (no fake memory is exported). */
EXPORT cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int flags)
{
    ENTER();
    __atomic_fetch_add(&fake_cuda_counts()->rt_ipc, 1, __ATOMIC_RELAXED);
    return leave(cudaErrorInvalidResourceHandle);
}
EXPORT cudaError_t cudaIpcCloseMemHandle(void *p)
{
    ENTER();
    __atomic_fetch_add(&fake_cuda_counts()->rt_ipc, 1, __ATOMIC_RELAXED);
    return leave(cudaErrorInvalidValue);
}
/* The driver's resolver as the runtime reaches it: through a pointer of its own (the real runtime
 * keeps a table of the driver's functions; one resolved where no hook of an interposer saw it, as
 * when libcudart starts inside an interposer's call, is the driver's own), so that what it hands
 * out is the driver's pointer, which an interposer's hook of these resolvers must map. */
typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

static cudaError_t entry_point(const char *sym, void **fn, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *st)
{
    ENTER();
    get_proc_fn get_proc = (get_proc_fn)dlsym(RTLD_NEXT, "cuGetProcAddress_v2");
    CUresult r = get_proc ? get_proc(sym, fn, 13000, flags, NULL) : CUDA_ERROR_NOT_FOUND;
    if (st)
        *st = r == CUDA_SUCCESS ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return leave(r == CUDA_SUCCESS ? cudaSuccess : cudaErrorSymbolNotFound);
}

/* cudaEnableDefault: the legacy stream's functions, or in the _ptsz twins (a program built with
 * --default-stream per-thread) the per-thread stream's; the flags are the driver's numbers. */
_Static_assert((int)cudaEnablePerThreadDefaultStream == (int)CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
               "flags");
static unsigned long long per_thread(unsigned long long flags)
{
    return flags == cudaEnableDefault ? cudaEnablePerThreadDefaultStream : flags;
}

EXPORT cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn, unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult *st)
{
    return entry_point(sym, fn, flags, st);
}
EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn, unsigned int v,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *st)
{
    return entry_point(sym, fn, flags, st);
}
EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *sym, void **fn, unsigned long long flags,
                                                enum cudaDriverEntryPointQueryResult *st)
{
    return entry_point(sym, fn, per_thread(flags), st);
}
EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *sym, void **fn, unsigned int v,
                                                         unsigned long long flags,
                                                         enum cudaDriverEntryPointQueryResult *st)
{
    return entry_point(sym, fn, per_thread(flags), st);
}
