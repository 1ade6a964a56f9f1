/*
 * hooks.c — the allocation hooks of the CUDA runtime and driver (rules in interpose.h).
 *
 * Streams: cudaMalloc / cuMemAlloc take memory usable by every stream at once (the ready bin);
 * the *Async calls pass their stream's key (device.h): a created stream's handle; the calling
 * thread's per-thread default stream on the current device (CU_STREAM_PER_THREAD, or stream 0 in
 * the _ptsz entry points); the current context's legacy stream (stream 0, CU_STREAM_LEGACY).
 * cudaFree / cuMemFree of a gmlake pointer wait for the pointer's device first, as the real ones
 * do, so the block may serve any stream afterwards; if that wait fails, its error is returned
 * and the block stays allocated.  cudaStreamDestroy / cuStreamDestroy retire the stream's bin
 * in every pool before the real destroy; a thread's per-thread default stream bins are retired
 * when the thread exits.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "core/registry.h"
#include "interpose.h"

static _Atomic int capture_warned;

/* ---- shared steps ---- */

static int current_device_rt(void)
{
    int d = -1;
    if (!GML_REAL(cudaGetDevice) || gml_real.cudaGetDevice(&d) != cudaSuccess)
        return -1;
    return d;
}

static int current_device_drv(void)
{
    CUdevice d = -1;
    if (!GML_REAL(cuCtxGetDevice) || gml_real.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        return -1;
    return (int)d;
}

/* The context the legacy stream of `device` lives in for this thread: the current one, else the
 * device's primary context (the one the runtime makes current on first use). */
static uintptr_t legacy_context(int device)
{
    static _Atomic(CUcontext) primary[GML_MAX_DEVICES];
    CUcontext c = NULL;
    if (GML_REAL(cuCtxGetCurrent) && gml_real.cuCtxGetCurrent(&c) == CUDA_SUCCESS && c)
        return (uintptr_t)c;
    if (device < 0 || device >= GML_MAX_DEVICES)
        return 0;
    c = atomic_load(&primary[device]);
    if (!c && GML_REAL(cuDevicePrimaryCtxRetain) &&
        gml_real.cuDevicePrimaryCtxRetain(&c, device) == CUDA_SUCCESS)
        atomic_store(&primary[device], c); /* retained once for the process */
    return (uintptr_t)c;
}

/* A thread's per-thread default streams end with it: its bins are retired at thread exit. */
static pthread_key_t ptds_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;
static __thread bool ptds_noted;

static void ptds_thread_exit(void *unused)
{
    (void)unused;
    if (!gml_serving())
        return;
    gml_depth++;
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        if (p)
            gml_pool_stream_retire(p, gml_stream_ptds(d));
    }
    gml_depth--;
}

static void ptds_key_make(void) { pthread_key_create(&ptds_key, ptds_thread_exit); }

static gml_stream ptds_of(int device)
{
    if (__builtin_expect(!ptds_noted, 0)) {
        ptds_noted = true;
        pthread_once(&ptds_once, ptds_key_make);
        pthread_setspecific(ptds_key, &ptds_noted);
    }
    return gml_stream_ptds(device);
}

/* The key of stream s as the calling thread names it on `device` (ptsz: a _ptsz entry point,
 * where stream 0 is the per-thread default stream). */
static gml_stream stream_key(CUstream s, bool ptsz, int device)
{
    if (s == CU_STREAM_PER_THREAD || (!s && ptsz))
        return ptds_of(device);
    if (!s || s == CU_STREAM_LEGACY)
        return gml_stream_legacy(legacy_context(device));
    return (gml_stream)s;
}

static bool capturing_rt(cudaStream_t s)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (!GML_REAL(cudaStreamIsCapturing))
        return false;
    gml_depth++;
    cudaError_t r = gml_real.cudaStreamIsCapturing(s, &st);
    gml_depth--;
    return r != cudaSuccess || st != cudaStreamCaptureStatusNone;
}

static bool capturing_drv(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!GML_REAL(cuStreamIsCapturing))
        return false;
    gml_depth++;
    CUresult r = gml_real.cuStreamIsCapturing(s, &st);
    gml_depth--;
    return r != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* 0 served (*out set), 1 out of memory, 2 not served (pass through). */
static int serve_alloc(int device, size_t size, gml_stream stream, uintptr_t *out)
{
    gml_pool *p = device >= 0 ? gml_pool_of(device) : NULL;
    if (!p)
        return 2;
    gml_depth++;
    int rc = gml_pool_alloc(p, size, stream, out);
    gml_depth--;
    if (rc == GMLAKE_OK) {
        gml_trace_event('A', *out, size, stream);
        return 0;
    }
    if (rc == GMLAKE_ERR_NOMEM) {
        gml_log(GML_LOG_INFO, "device %d: out of memory for %zu bytes", device, size);
        return 1;
    }
    gml_log(GML_LOG_WARN, "device %d: allocation of %zu bytes failed (%s); passing it to CUDA",
            device, size, gmlake_strerror(rc));
    return 2;
}

/* The pool holding a live allocation that starts at ptr (one hash lookup per pool, no range
 * scan): the common case of every free. */
static gml_pool *live_owner(uintptr_t ptr, int *device)
{
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        if (p && gml_pool_alloc_size(p, ptr)) {
            *device = d;
            return p;
        }
    }
    return NULL;
}

/* 0 freed, 1 gmlake memory but not a live allocation (error), 2 not gmlake's (pass through),
 * 3 the synchronisation failed (*cu_err: the driver's error; the block stays allocated).
 * s, ptsz: the free's stream as in stream_key; sync: cudaFree (no stream, waits for the device). */
static int serve_free(uintptr_t ptr, CUstream s, bool ptsz, const char *api, bool sync, bool drv,
                      int *cu_err)
{
    int device = -1;
    gml_pool *p = live_owner(ptr, &device);
    if (!p) {
        if (!gml_owner(ptr, NULL))
            return 2;
        gml_log(GML_LOG_ERROR, "%s(%#lx): not the start of a live allocation (double free or "
                "interior pointer); the pool is unchanged", api, (unsigned long)ptr);
        return 1;
    }
    if (!sync && (drv ? capturing_drv(s) : capturing_rt((cudaStream_t)s))) {
        if (!atomic_exchange(&capture_warned, 1))
            gml_log(GML_LOG_WARN, "%s during graph capture: gmlake keeps such blocks allocated", api);
        return 0;
    }
    gml_depth++;
    gml_stream stream = GML_STREAM_NONE;
    int rc = GMLAKE_OK;
    if (sync) {
        rc = gml_pool_sync(p);
    } else {
        /* a per-thread stream is the one of the thread's current device, which may not be p's
         * (a legacy stream's key is the current context, whatever its device) */
        bool ptds = s == CU_STREAM_PER_THREAD || (!s && ptsz);
        int cur = ptds ? (drv ? current_device_drv() : current_device_rt()) : device;
        stream = stream_key(s, ptsz, cur >= 0 ? cur : device);
    }
    if (rc != GMLAKE_OK) {
        *cu_err = gml_cuda_last_error() ? gml_cuda_last_error() : CUDA_ERROR_UNKNOWN;
        gml_depth--;
        gml_log(GML_LOG_ERROR, "%s(%#lx): waiting for device %d failed (CUDA error %d); the block "
                "stays allocated", api, (unsigned long)ptr, device, *cu_err);
        return 3;
    }
    rc = gml_pool_free(p, ptr, stream);
    gml_depth--;
    if (rc != GMLAKE_OK)
        return 1;
    gml_trace_event('F', ptr, 0, stream);
    return 0;
}

/* ---- runtime ---- */

GML_HOOK cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    if (!gml_serving() || !devPtr || size == 0)
        return GML_REAL(cudaMalloc) ? gml_real.cudaMalloc(devPtr, size) : cudaErrorInitializationError;
    uintptr_t p;
    switch (serve_alloc(current_device_rt(), size, GML_STREAM_NONE, &p)) {
    case 0: *devPtr = (void *)p; return cudaSuccess;
    case 1: return cudaErrorMemoryAllocation;
    default:
        gml_depth++;
        cudaError_t r = GML_REAL(cudaMalloc)(devPtr, size);
        gml_depth--;
        return r;
    }
}

GML_HOOK cudaError_t cudaFree(void *devPtr)
{
    if (gml_serving() && devPtr) {
        int err = 0;
        int r = serve_free((uintptr_t)devPtr, NULL, false, "cudaFree", true, false, &err);
        if (r == 0)
            return cudaSuccess;
        if (r == 1)
            return cudaErrorInvalidValue;
        if (r == 3)
            return (cudaError_t)err; /* the runtime's code for a driver error has its number */
    }
    return GML_REAL(cudaFree) ? gml_real.cudaFree(devPtr) : cudaErrorInitializationError;
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t s, bool ptsz)
{
    if (!gml_serving() || !devPtr || size == 0 || capturing_rt(s))
        return GML_REAL(cudaMallocAsync) ? gml_real.cudaMallocAsync(devPtr, size, s)
                                         : cudaErrorInitializationError;
    uintptr_t p;
    int device = current_device_rt();
    switch (serve_alloc(device, size, stream_key((CUstream)s, ptsz, device), &p)) {
    case 0: *devPtr = (void *)p; return cudaSuccess;
    case 1: return cudaErrorMemoryAllocation;
    default:
        gml_depth++;
        cudaError_t r = GML_REAL(cudaMallocAsync)(devPtr, size, s);
        gml_depth--;
        return r;
    }
}

static cudaError_t free_async(void *devPtr, cudaStream_t s, bool ptsz)
{
    if (gml_serving() && devPtr) {
        int err = 0;
        int r = serve_free((uintptr_t)devPtr, (CUstream)s, ptsz, "cudaFreeAsync", false, false, &err);
        if (r == 0)
            return cudaSuccess;
        if (r == 1)
            return cudaErrorInvalidValue;
    }
    return GML_REAL(cudaFreeAsync) ? gml_real.cudaFreeAsync(devPtr, s) : cudaErrorInitializationError;
}

GML_HOOK cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s)
{
    return malloc_async(devPtr, size, s, false);
}

GML_HOOK cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t s)
{
    return free_async(devPtr, s, false);
}

/* The per-thread-default-stream variants: stream 0 means this thread's default stream. */
GML_HOOK cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t s)
{
    return malloc_async(devPtr, size, s ? s : cudaStreamPerThread, true);
}

GML_HOOK cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t s)
{
    return free_async(devPtr, s ? s : cudaStreamPerThread, true);
}

/* Free memory as the program can use it: the device's, plus what gmlake holds but is not live. */
static void add_cached(int device, size_t *free_b, size_t total)
{
    gml_pool *p = gml_registry_get(device);
    if (!p)
        return;
    gmlake_stats s;
    gml_pool_stats(p, &s);
    size_t cached = s.reserved_bytes > s.active_bytes ? s.reserved_bytes - s.active_bytes : 0;
    *free_b = *free_b + cached > total ? total : *free_b + cached;
}

GML_HOOK cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    if (!GML_REAL(cudaMemGetInfo))
        return cudaErrorInitializationError;
    cudaError_t r = gml_real.cudaMemGetInfo(free_b, total);
    if (r == cudaSuccess && gml_serving() && free_b && total)
        add_cached(current_device_rt(), free_b, *total);
    return r;
}

/* The device whose default memory pool `pool` is and whose gmlake pool exists, or -1. */
static int default_pool_device(cudaMemPool_t pool)
{
    if (!gml_serving() || !GML_REAL(cudaDeviceGetDefaultMemPool))
        return -1;
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        if (!gml_registry_get(d))
            continue;
        cudaMemPool_t dp = NULL;
        gml_depth++;
        cudaError_t r = gml_real.cudaDeviceGetDefaultMemPool(&dp, d);
        gml_depth--;
        if (r == cudaSuccess && dp == pool)
            return d;
    }
    return -1;
}

GML_HOOK cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    int d = value ? default_pool_device(pool) : -1;
    if (d >= 0 && (attr == cudaMemPoolAttrReservedMemCurrent || attr == cudaMemPoolAttrReservedMemHigh ||
                   attr == cudaMemPoolAttrUsedMemCurrent || attr == cudaMemPoolAttrUsedMemHigh)) {
        gmlake_stats s;
        gml_pool_stats(gml_registry_get(d), &s);
        uint64_t v = attr == cudaMemPoolAttrReservedMemCurrent ? s.reserved_bytes
                   : attr == cudaMemPoolAttrReservedMemHigh  ? s.peak_reserved_bytes
                   : attr == cudaMemPoolAttrUsedMemCurrent   ? s.active_bytes
                                                             : s.peak_active_bytes;
        *(uint64_t *)value = v;
        return cudaSuccess;
    }
    return GML_REAL(cudaMemPoolGetAttribute) ? gml_real.cudaMemPoolGetAttribute(pool, attr, value)
                                             : cudaErrorInitializationError;
}

GML_HOOK cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    int d = default_pool_device(pool);
    if (d >= 0 && (attr == cudaMemPoolAttrReservedMemHigh || attr == cudaMemPoolAttrUsedMemHigh))
        gml_pool_reset_peaks(gml_registry_get(d)); /* resets both highs, as PyTorch does */
    return GML_REAL(cudaMemPoolSetAttribute) ? gml_real.cudaMemPoolSetAttribute(pool, attr, value)
                                             : cudaErrorInitializationError;
}

GML_HOOK cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep)
{
    int d = default_pool_device(pool);
    if (d >= 0) {
        gml_depth++;
        gml_pool_empty_cache(gml_registry_get(d));
        gml_depth--;
    }
    return GML_REAL(cudaMemPoolTrimTo) ? gml_real.cudaMemPoolTrimTo(pool, minBytesToKeep)
                                       : cudaErrorInitializationError;
}

GML_HOOK cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    if (gml_serving() && devPtr && gml_owner((uintptr_t)devPtr, NULL)) {
        gml_log(GML_LOG_ERROR, "cudaIpcGetMemHandle(%p): gmlake memory cannot be shared by CUDA IPC; "
                "run the exporting allocation with GMLAKE_ENABLE=0", devPtr);
        return cudaErrorInvalidValue;
    }
    return GML_REAL(cudaIpcGetMemHandle) ? gml_real.cudaIpcGetMemHandle(handle, devPtr)
                                         : cudaErrorInitializationError;
}

/* ---- driver ---- */

GML_HOOK CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (!gml_serving() || !dptr || bytesize == 0)
        return GML_REAL(cuMemAlloc_v2) ? gml_real.cuMemAlloc_v2(dptr, bytesize) : CUDA_ERROR_NOT_INITIALIZED;
    uintptr_t p;
    switch (serve_alloc(current_device_drv(), bytesize, GML_STREAM_NONE, &p)) {
    case 0: *dptr = (CUdeviceptr)p; return CUDA_SUCCESS;
    case 1: return CUDA_ERROR_OUT_OF_MEMORY;
    default:
        gml_depth++;
        CUresult r = GML_REAL(cuMemAlloc_v2)(dptr, bytesize);
        gml_depth--;
        return r;
    }
}

GML_HOOK CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    if (gml_serving() && dptr) {
        int err = 0;
        int r = serve_free((uintptr_t)dptr, NULL, false, "cuMemFree", true, true, &err);
        if (r == 0)
            return CUDA_SUCCESS;
        if (r == 1)
            return CUDA_ERROR_INVALID_VALUE;
        if (r == 3)
            return (CUresult)err;
    }
    return GML_REAL(cuMemFree_v2) ? gml_real.cuMemFree_v2(dptr) : CUDA_ERROR_NOT_INITIALIZED;
}

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static CUresult drv_alloc_async(alloc_async_fn real, CUdeviceptr *dptr, size_t size, CUstream s,
                                bool ptsz)
{
    if (!gml_serving() || !dptr || size == 0 || capturing_drv(s))
        return real ? real(dptr, size, s) : CUDA_ERROR_NOT_INITIALIZED;
    uintptr_t p;
    int device = current_device_drv();
    switch (serve_alloc(device, size, stream_key(s, ptsz, device), &p)) {
    case 0: *dptr = (CUdeviceptr)p; return CUDA_SUCCESS;
    case 1: return CUDA_ERROR_OUT_OF_MEMORY;
    default:
        gml_depth++;
        CUresult r = real ? real(dptr, size, s) : CUDA_ERROR_NOT_INITIALIZED;
        gml_depth--;
        return r;
    }
}

static CUresult drv_free_async(free_async_fn real, CUdeviceptr dptr, CUstream s, bool ptsz)
{
    if (gml_serving() && dptr) {
        int err = 0;
        int r = serve_free((uintptr_t)dptr, s, ptsz, "cuMemFreeAsync", false, true, &err);
        if (r == 0)
            return CUDA_SUCCESS;
        if (r == 1)
            return CUDA_ERROR_INVALID_VALUE;
    }
    return real ? real(dptr, s) : CUDA_ERROR_NOT_INITIALIZED;
}

GML_HOOK CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return drv_alloc_async(GML_REAL(cuMemAllocAsync), dptr, bytesize, s, false);
}

GML_HOOK CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    return drv_free_async(GML_REAL(cuMemFreeAsync), dptr, s, false);
}

GML_HOOK CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return drv_alloc_async(GML_REAL(cuMemAllocAsync_ptsz), dptr, bytesize, s, true);
}

GML_HOOK CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    return drv_free_async(GML_REAL(cuMemFreeAsync_ptsz), dptr, s, true);
}

/* ---- streams ---- */

/* Ends the bins of a created stream the program destroys, in every pool (the stream belongs to
 * one device; the others find nothing).  Implicit streams cannot be destroyed. */
static void retire_stream(CUstream s)
{
    if (!gml_serving() || !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return;
    gml_depth++;
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        if (p)
            gml_pool_stream_retire(p, (gml_stream)s);
    }
    gml_depth--;
}

GML_HOOK cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    retire_stream((CUstream)s);
    if (!GML_REAL(cudaStreamDestroy))
        return cudaErrorInitializationError;
    gml_depth++; /* the runtime's own cuStreamDestroy passes through */
    cudaError_t r = gml_real.cudaStreamDestroy(s);
    gml_depth--;
    return r;
}

GML_HOOK CUresult cuStreamDestroy_v2(CUstream s)
{
    retire_stream(s);
    return GML_REAL(cuStreamDestroy_v2) ? gml_real.cuStreamDestroy_v2(s) : CUDA_ERROR_NOT_INITIALIZED;
}

#undef cuStreamDestroy
GML_HOOK CUresult cuStreamDestroy(CUstream s)
{
    retire_stream(s);
    return GML_REAL(cuStreamDestroy) ? gml_real.cuStreamDestroy(s) : CUDA_ERROR_NOT_INITIALIZED;
}

/* Only the device's default pool is served: other pools carry properties gmlake does not give
 * (IPC export, other locations, their own release thresholds). */
static bool is_default_pool(CUmemoryPool pool)
{
    int d = current_device_drv();
    CUmemoryPool dp = NULL;
    return d >= 0 && GML_REAL(cuDeviceGetDefaultMemPool) &&
           gml_real.cuDeviceGetDefaultMemPool(&dp, d) == CUDA_SUCCESS && dp == pool;
}

GML_HOOK CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
    if (gml_serving() && is_default_pool(pool))
        return cuMemAllocAsync(dptr, bytesize, s);
    if (!GML_REAL(cuMemAllocFromPoolAsync))
        return CUDA_ERROR_NOT_INITIALIZED;
    gml_depth++;
    CUresult r = gml_real.cuMemAllocFromPoolAsync(dptr, bytesize, pool, s);
    gml_depth--;
    return r;
}

GML_HOOK CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                               CUstream s)
{
    if (gml_serving() && is_default_pool(pool))
        return cuMemAllocAsync_ptsz(dptr, bytesize, s);
    if (!GML_REAL(cuMemAllocFromPoolAsync_ptsz))
        return CUDA_ERROR_NOT_INITIALIZED;
    gml_depth++;
    CUresult r = gml_real.cuMemAllocFromPoolAsync_ptsz(dptr, bytesize, pool, s);
    gml_depth--;
    return r;
}

GML_HOOK CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    if (!GML_REAL(cuMemGetInfo_v2))
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = gml_real.cuMemGetInfo_v2(free_b, total);
    if (r == CUDA_SUCCESS && gml_serving() && free_b && total)
        add_cached(current_device_drv(), free_b, *total);
    return r;
}

GML_CHECK_TYPE(cuMemAlloc_v2, PFN_cuMemAlloc_v3020);
GML_CHECK_TYPE(cuMemFree_v2, PFN_cuMemFree_v3020);
GML_CHECK_TYPE(cuMemAllocAsync, PFN_cuMemAllocAsync_v11020);
GML_CHECK_TYPE(cuMemFreeAsync, PFN_cuMemFreeAsync_v11020);
GML_CHECK_TYPE(cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz);
GML_CHECK_TYPE(cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz);
GML_CHECK_TYPE(cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020);
GML_CHECK_TYPE(cuMemAllocFromPoolAsync_ptsz, PFN_cuMemAllocFromPoolAsync_v11020_ptsz);
GML_CHECK_TYPE(cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020);
GML_CHECK_TYPE(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000);
GML_CHECK_TYPE(cuStreamDestroy, PFN_cuStreamDestroy_v4000);
