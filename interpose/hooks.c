/*
 * hooks.c — the allocation hooks of the CUDA runtime and driver (rules in interpose.h).
 *
 * Streams: cudaMalloc / cuMemAlloc take memory usable by every stream at once (the ready bin);
 * the *Async calls pass their stream's key (device.h): a created stream's handle; the calling
 * thread's per-thread default stream on the current device (CU_STREAM_PER_THREAD, or stream 0 in
 * the _ptsz entry points); the current context's legacy stream (stream 0, CU_STREAM_LEGACY).
 * cudaFree / cuMemFree of a gmlake pointer wait for the pointer's device first (gml_pool_sync), as
 * the real ones do, so the block may serve any stream afterwards; if that wait fails, its error
 * is returned and the block stays allocated.  cudaStreamDestroy / cuStreamDestroy retire the
 * stream's bin in every pool before the real destroy; a thread's per-thread default stream bins
 * are retired when the thread exits.
 *
 * Every real function is called through PASS (routing off for what it calls, a clean error where
 * no real function exists).  Runtime hooks note their caller first (GML_RT_ENTRY), so that a
 * runtime loaded RTLD_LOCAL is found in the caller's scope (resolve.c).
 */
#include <pthread.h>
#include <stdatomic.h>

#include "stitch/registry.h"
#include "interpose.h"

static _Atomic int capture_warned;

/* The real `fn` called with routing off: a hooked function it reaches passes straight through
 * (the real cudaMemGetInfo reaches the hooked cuMemGetInfo, which must not add gmlake's cache a
 * second time).  `err` where no real function exists at all. */
#define PASS(fn, err, ...)                                                                        \
    ({                                                                                            \
        __typeof__(gml_real.fn) f_ = GML_REAL(fn);                                                \
        __typeof__(err) r_ = (err);                                                               \
        if (f_) {                                                                                 \
            gml_depth++;                                                                          \
            r_ = f_(__VA_ARGS__);                                                                 \
            gml_depth--;                                                                          \
        }                                                                                         \
        r_;                                                                                       \
    })
#define NO_RT cudaErrorInitializationError
#define NO_DRV CUDA_ERROR_NOT_INITIALIZED

/* ---- shared steps ---- */

static int current_device_rt(void)
{
    int d = -1;
    return PASS(cudaGetDevice, NO_RT, &d) == cudaSuccess ? d : -1;
}

static int current_device_drv(void)
{
    CUdevice d = -1;
    return PASS(cuCtxGetDevice, NO_DRV, &d) == CUDA_SUCCESS ? (int)d : -1;
}

/* The context the legacy stream of `device` lives in for this thread: the current one, else the
 * device's primary context (the one the runtime makes current on first use). */
static uintptr_t legacy_context(int device)
{
    static _Atomic(CUcontext) primary[GML_MAX_DEVICES];
    CUcontext c = NULL;
    if (PASS(cuCtxGetCurrent, NO_DRV, &c) == CUDA_SUCCESS && c)
        return (uintptr_t)c;
    if (device < 0 || device >= GML_MAX_DEVICES)
        return 0;
    c = atomic_load(&primary[device]);
    if (!c && PASS(cuDevicePrimaryCtxRetain, NO_DRV, &c, device) == CUDA_SUCCESS)
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

/* Stream 0 of a _ptsz entry point is the per-thread default stream. */
static CUstream named(CUstream s, bool ptsz) { return !s && ptsz ? CU_STREAM_PER_THREAD : s; }

/* The key of stream s as the calling thread names it on `device` (ptsz: a _ptsz entry point). */
static gml_stream stream_key(CUstream s, bool ptsz, int device)
{
    s = named(s, ptsz);
    if (s == CU_STREAM_PER_THREAD)
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
    return PASS(cudaStreamIsCapturing, NO_RT, s, &st) != cudaSuccess || st != cudaStreamCaptureStatusNone;
}

static bool capturing_drv(CUstream s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!GML_REAL(cuStreamIsCapturing))
        return false;
    return PASS(cuStreamIsCapturing, NO_DRV, s, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ---- the runtime's last error ----
 * The runtime keeps a per-thread last error inside libcudart, which gmlake cannot write.  When a
 * runtime hook answers an error itself, gmlake consumes the runtime's pending error (the new one
 * supersedes it: CUDA keeps only the last) and keeps its own in gml_rt_error.  The hooked
 * cudaGetLastError / cudaPeekAtLastError return the runtime's error if it has one (it came after
 * gmlake's, or it is sticky), else gmlake's; cudaGetLastError clears both.  A runtime that already
 * holds a sticky error (the context is unusable) makes every served call fail with it, as CUDA
 * does: gmlake checks with cudaPeekAtLastError before serving. */
static __thread cudaError_t gml_rt_error;

static cudaError_t rt_error(cudaError_t e)
{
    if (e != cudaSuccess) {
        PASS(cudaGetLastError, cudaSuccess);
        gml_rt_error = e;
    }
    return e;
}

static bool is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorContained: case cudaErrorIllegalAddress: case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace: case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure: case cudaErrorExternalDevice:
        return true;
    default:
        return false;
    }
}

/* The sticky error the runtime holds, or cudaSuccess. */
static cudaError_t rt_sticky(void)
{
    cudaError_t e = PASS(cudaPeekAtLastError, cudaSuccess);
    return is_sticky(e) ? e : cudaSuccess;
}

GML_HOOK cudaError_t cudaGetLastError(void)
{
    GML_RT_ENTRY();
    cudaError_t mine = gml_rt_error;
    gml_rt_error = cudaSuccess;
    cudaError_t r = PASS(cudaGetLastError, cudaSuccess);
    return r != cudaSuccess ? r : mine;
}

GML_HOOK cudaError_t cudaPeekAtLastError(void)
{
    GML_RT_ENTRY();
    cudaError_t r = PASS(cudaPeekAtLastError, cudaSuccess);
    return r != cudaSuccess ? r : gml_rt_error;
}

/* ---- memory pools other than the default ----
 * cudaMallocAsync / cuMemAllocAsync allocate from the device's current memory pool; once the
 * program makes another pool current (cudaDeviceSetMemPool), that pool's properties apply and
 * gmlake passes the device's allocations through until the default pool is current again. */
static _Atomic bool custom_pool[GML_MAX_DEVICES];

static bool custom_pool_of(int device)
{
    return device >= 0 && device < GML_MAX_DEVICES && atomic_load_explicit(&custom_pool[device], memory_order_relaxed);
}

static void note_pool(int device, bool is_default)
{
    if (device >= 0 && device < GML_MAX_DEVICES)
        atomic_store(&custom_pool[device], !is_default);
}

GML_HOOK cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool)
{
    GML_RT_ENTRY();
    bool serving = gml_serving();
    cudaError_t r = PASS(cudaDeviceSetMemPool, NO_RT, device, pool);
    cudaMemPool_t dp = NULL;
    if (r == cudaSuccess && serving && PASS(cudaDeviceGetDefaultMemPool, NO_RT, &dp, device) == cudaSuccess)
        note_pool(device, dp == pool);
    return r;
}

GML_HOOK CUresult cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool)
{
    bool serving = gml_serving();
    CUresult r = PASS(cuDeviceSetMemPool, NO_DRV, device, pool);
    CUmemoryPool dp = NULL;
    if (r == CUDA_SUCCESS && serving && PASS(cuDeviceGetDefaultMemPool, NO_DRV, &dp, device) == CUDA_SUCCESS)
        note_pool((int)device, dp == pool);
    return r;
}

/* ---- peer access ----
 * A device that may access a peer's memory (cudaDeviceEnablePeerAccess, cuCtxEnablePeerAccess)
 * must reach the peer's gmlake memory too: gml_peer_grant (state.c) records it and the peer's
 * pool maps its present and future memory for that device. */
GML_HOOK cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    GML_RT_ENTRY();
    cudaError_t r = PASS(cudaDeviceEnablePeerAccess, NO_RT, peerDevice, flags);
    if (r == cudaSuccess && gml_serving())
        gml_peer_grant(peerDevice, current_device_rt());
    return r;
}

GML_HOOK CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    CUresult r = PASS(cuCtxEnablePeerAccess, NO_DRV, peer, flags);
    if (r != CUDA_SUCCESS || !gml_serving())
        return r;
    int accessor = current_device_drv(), owner = -1;
    CUcontext popped = NULL;
    if (PASS(cuCtxPushCurrent_v2, NO_DRV, peer) == CUDA_SUCCESS) {
        owner = current_device_drv();
        PASS(cuCtxPopCurrent_v2, NO_DRV, &popped);
    }
    gml_peer_grant(owner, accessor);
    return r;
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
        gml_oom_report(device, p, size);
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

enum { FREE_PASS = -1 };
/* CUDA_SUCCESS freed; FREE_PASS not gmlake's (pass through); otherwise the CUDA error to return,
 * the pool unchanged: CUDA_ERROR_INVALID_VALUE for gmlake memory that is not a live allocation
 * (double free, interior pointer), or the error of the synchronisation a synchronous free makes
 * (during graph capture CUDA refuses it, as it refuses cudaFree, and the capture is invalidated).
 * s, ptsz: the free's stream as in stream_key; sync: cudaFree / cuMemFree (no stream: waits for
 * the pointer's device). */
static int serve_free(uintptr_t ptr, CUstream s, bool ptsz, const char *api, bool sync, bool drv)
{
    int device = -1;
    gml_pool *p = live_owner(ptr, &device);
    if (!p) {
        if (!gml_owner(ptr, NULL))
            return FREE_PASS;
        gml_log(GML_LOG_ERROR, "%s(%#lx): not the start of a live allocation (double free or "
                "interior pointer); the pool is unchanged", api, (unsigned long)ptr);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (!sync && (drv ? capturing_drv(named(s, ptsz)) : capturing_rt((cudaStream_t)named(s, ptsz)))) {
        if (!atomic_exchange(&capture_warned, 1))
            gml_log(GML_LOG_WARN, "%s during graph capture: gmlake keeps such blocks allocated", api);
        return CUDA_SUCCESS;
    }
    gml_stream stream = GML_STREAM_NONE;
    if (sync) {
        gml_depth++; /* the pool's driver calls are real calls: routing off */
        int rc = gml_pool_sync(p);
        gml_depth--;
        if (rc != GMLAKE_OK) {
            int r = gml_cuda_last_error() ? gml_cuda_last_error() : CUDA_ERROR_UNKNOWN;
            gml_log(GML_LOG_WARN, "%s(%#lx): waiting for device %d failed (CUDA error %d); the block "
                    "stays allocated", api, (unsigned long)ptr, device, r);
            return r;
        }
    } else {
        /* a per-thread stream is the one of the thread's current device, which may not be p's
         * (a legacy stream's key is the current context, whatever its device) */
        int cur = named(s, ptsz) == CU_STREAM_PER_THREAD ? (drv ? current_device_drv() : current_device_rt())
                                                          : device;
        stream = stream_key(s, ptsz, cur >= 0 ? cur : device);
    }
    /* The free is logged before the block can serve another thread (gml_trace_free_begin holds
     * the trace lock across it), so a recorded `A X` never precedes the `F X` that freed X. */
    bool tracing = gml_trace_free_begin();
    gml_depth++;
    int rc = gml_pool_free(p, ptr, stream);
    gml_depth--;
    gml_trace_free_end(tracing, rc == GMLAKE_OK, ptr, stream);
    return rc == GMLAKE_OK ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A runtime call gmlake served: the runtime's sticky error if it holds one, else cudaSuccess. */
#define RT_SERVE_CHECK()                                                                          \
    do {                                                                                          \
        cudaError_t sticky_ = rt_sticky();                                                        \
        if (sticky_ != cudaSuccess)                                                               \
            return sticky_;                                                                       \
    } while (0)

/* ---- runtime ---- */

static cudaError_t rt_malloc(void **devPtr, size_t size)
{
    if (!gml_serving() || !devPtr || size == 0)
        return PASS(cudaMalloc, NO_RT, devPtr, size);
    RT_SERVE_CHECK();
    uintptr_t p;
    switch (serve_alloc(current_device_rt(), size, GML_STREAM_NONE, &p)) {
    case 0: *devPtr = (void *)p; return cudaSuccess;
    case 1: return rt_error(cudaErrorMemoryAllocation);
    default: return PASS(cudaMalloc, NO_RT, devPtr, size);
    }
}

GML_HOOK cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    GML_RT_ENTRY();
    return rt_malloc(devPtr, size);
}

static cudaError_t rt_free(void *devPtr)
{
    if (gml_serving() && devPtr) {
        RT_SERVE_CHECK();
        int r = serve_free((uintptr_t)devPtr, NULL, false, "cudaFree", true, false);
        if (r == CUDA_SUCCESS)
            return cudaSuccess;
        if (r != FREE_PASS)
            return rt_error((cudaError_t)r); /* the runtime's codes equal the driver's here */
    }
    return PASS(cudaFree, NO_RT, devPtr);
}

GML_HOOK cudaError_t cudaFree(void *devPtr)
{
    GML_RT_ENTRY();
    return rt_free(devPtr);
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t s, bool ptsz)
{
    int device = -1;
    if (!gml_serving() || !devPtr || size == 0 || capturing_rt(s) ||
        custom_pool_of(device = current_device_rt()))
        return PASS(cudaMallocAsync, NO_RT, devPtr, size, s);
    RT_SERVE_CHECK();
    uintptr_t p;
    switch (serve_alloc(device, size, stream_key((CUstream)s, ptsz, device), &p)) {
    case 0: *devPtr = (void *)p; return cudaSuccess;
    case 1: return rt_error(cudaErrorMemoryAllocation);
    default: return PASS(cudaMallocAsync, NO_RT, devPtr, size, s);
    }
}

static cudaError_t free_async(void *devPtr, cudaStream_t s, bool ptsz)
{
    if (gml_serving() && devPtr) {
        RT_SERVE_CHECK();
        int r = serve_free((uintptr_t)devPtr, (CUstream)s, ptsz, "cudaFreeAsync", false, false);
        if (r == CUDA_SUCCESS)
            return cudaSuccess;
        if (r != FREE_PASS)
            return rt_error((cudaError_t)r);
    }
    return PASS(cudaFreeAsync, NO_RT, devPtr, s);
}

GML_HOOK cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t s)
{
    GML_RT_ENTRY();
    return malloc_async(devPtr, size, s, false);
}

GML_HOOK cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t s)
{
    GML_RT_ENTRY();
    return free_async(devPtr, s, false);
}

/* The per-thread-default-stream variants: stream 0 means this thread's default stream. */
GML_HOOK cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t s)
{
    GML_RT_ENTRY();
    return malloc_async(devPtr, size, s ? s : cudaStreamPerThread, true);
}

GML_HOOK cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t s)
{
    GML_RT_ENTRY();
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
    GML_RT_ENTRY();
    bool serving = gml_serving();
    cudaError_t r = PASS(cudaMemGetInfo, NO_RT, free_b, total);
    if (r == cudaSuccess && serving && free_b && total)
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
        if (PASS(cudaDeviceGetDefaultMemPool, NO_RT, &dp, d) == cudaSuccess && dp == pool)
            return d;
    }
    return -1;
}

GML_HOOK cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    GML_RT_ENTRY();
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
    return PASS(cudaMemPoolGetAttribute, NO_RT, pool, attr, value);
}

GML_HOOK cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    GML_RT_ENTRY();
    int d = default_pool_device(pool);
    if (d >= 0 && (attr == cudaMemPoolAttrReservedMemHigh || attr == cudaMemPoolAttrUsedMemHigh))
        gml_pool_reset_peaks(gml_registry_get(d)); /* resets both highs, as PyTorch does */
    return PASS(cudaMemPoolSetAttribute, NO_RT, pool, attr, value);
}

GML_HOOK cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep)
{
    GML_RT_ENTRY();
    int d = default_pool_device(pool);
    if (d >= 0) {
        gml_depth++;
        gml_pool_empty_cache(gml_registry_get(d));
        gml_depth--;
    }
    return PASS(cudaMemPoolTrimTo, NO_RT, pool, minBytesToKeep);
}

GML_HOOK cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    GML_RT_ENTRY();
    if (gml_serving() && devPtr && gml_owner((uintptr_t)devPtr, NULL)) {
        gml_log(GML_LOG_ERROR, "cudaIpcGetMemHandle(%p): gmlake memory cannot be shared by CUDA IPC; "
                "run the exporting allocation with GMLAKE_ENABLE=0", devPtr);
        return rt_error(cudaErrorInvalidValue);
    }
    return PASS(cudaIpcGetMemHandle, NO_RT, handle, devPtr);
}

/* ---- driver ---- */

GML_HOOK CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    if (!gml_serving() || !dptr || bytesize == 0)
        return PASS(cuMemAlloc_v2, NO_DRV, dptr, bytesize);
    uintptr_t p;
    switch (serve_alloc(current_device_drv(), bytesize, GML_STREAM_NONE, &p)) {
    case 0: *dptr = (CUdeviceptr)p; return CUDA_SUCCESS;
    case 1: return CUDA_ERROR_OUT_OF_MEMORY;
    default: return PASS(cuMemAlloc_v2, NO_DRV, dptr, bytesize);
    }
}

GML_HOOK CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    if (gml_serving() && dptr) {
        int r = serve_free((uintptr_t)dptr, NULL, false, "cuMemFree", true, true);
        if (r != FREE_PASS)
            return (CUresult)r;
    }
    return PASS(cuMemFree_v2, NO_DRV, dptr);
}

typedef CUresult (*alloc_async_fn)(CUdeviceptr *, size_t, CUstream);
typedef CUresult (*free_async_fn)(CUdeviceptr, CUstream);

static CUresult call_alloc(alloc_async_fn real, CUdeviceptr *dptr, size_t size, CUstream s)
{
    if (!real)
        return NO_DRV;
    gml_depth++;
    CUresult r = real(dptr, size, s);
    gml_depth--;
    return r;
}

/* ptsz: a _ptsz entry point (stream 0 is the per-thread default stream). */
static CUresult drv_alloc_async(alloc_async_fn real, CUdeviceptr *dptr, size_t size, CUstream s,
                                bool ptsz)
{
    int device = -1;
    if (!gml_serving() || !dptr || size == 0 || capturing_drv(named(s, ptsz)) ||
        custom_pool_of(device = current_device_drv()))
        return call_alloc(real, dptr, size, s);
    uintptr_t p;
    switch (serve_alloc(device, size, stream_key(s, ptsz, device), &p)) {
    case 0: *dptr = (CUdeviceptr)p; return CUDA_SUCCESS;
    case 1: return CUDA_ERROR_OUT_OF_MEMORY;
    default: return call_alloc(real, dptr, size, s);
    }
}

static CUresult drv_free_async(free_async_fn real, CUdeviceptr dptr, CUstream s, bool ptsz)
{
    if (gml_serving() && dptr) {
        int r = serve_free((uintptr_t)dptr, s, ptsz, "cuMemFreeAsync", false, true);
        if (r != FREE_PASS)
            return (CUresult)r;
    }
    if (!real)
        return NO_DRV;
    gml_depth++;
    CUresult r = real(dptr, s);
    gml_depth--;
    return r;
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

/* Only the device's default pool is served: other pools carry properties gmlake does not give
 * (IPC export, other locations, their own release thresholds). */
static bool is_default_pool(CUmemoryPool pool)
{
    int d = current_device_drv();
    CUmemoryPool dp = NULL;
    return d >= 0 && PASS(cuDeviceGetDefaultMemPool, NO_DRV, &dp, d) == CUDA_SUCCESS && dp == pool;
}

GML_HOOK CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
    if (gml_serving() && is_default_pool(pool))
        return drv_alloc_async(GML_REAL(cuMemAllocAsync), dptr, bytesize, s, false);
    return PASS(cuMemAllocFromPoolAsync, NO_DRV, dptr, bytesize, pool, s);
}

GML_HOOK CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                               CUstream s)
{
    if (gml_serving() && is_default_pool(pool))
        return drv_alloc_async(GML_REAL(cuMemAllocAsync_ptsz), dptr, bytesize, s, true);
    return PASS(cuMemAllocFromPoolAsync_ptsz, NO_DRV, dptr, bytesize, pool, s);
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
    GML_RT_ENTRY();
    retire_stream((CUstream)s);
    return PASS(cudaStreamDestroy, NO_RT, s); /* the runtime's own cuStreamDestroy passes through */
}

GML_HOOK CUresult cuStreamDestroy_v2(CUstream s)
{
    retire_stream(s);
    return PASS(cuStreamDestroy_v2, NO_DRV, s);
}

#undef cuStreamDestroy
GML_HOOK CUresult cuStreamDestroy(CUstream s)
{
    retire_stream(s);
    return PASS(cuStreamDestroy, NO_DRV, s);
}

GML_HOOK CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    bool serving = gml_serving();
    CUresult r = PASS(cuMemGetInfo_v2, NO_DRV, free_b, total);
    if (r == CUDA_SUCCESS && serving && free_b && total)
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
GML_CHECK_TYPE(cuDeviceSetMemPool, PFN_cuDeviceSetMemPool_v11020);
GML_CHECK_TYPE(cuCtxEnablePeerAccess, PFN_cuCtxEnablePeerAccess_v4000);
GML_CHECK_TYPE(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000);
GML_CHECK_TYPE(cuStreamDestroy, PFN_cuStreamDestroy_v4000);
