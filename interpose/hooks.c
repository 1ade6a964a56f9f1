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

/* ---- one body per operation ----
 * The runtime and driver hooks of one operation share its body: it works in the driver's
 * numbering and says what to do (`outcome`); the hook passes the call through, or returns the
 * answer in its API's codes (rt_finish: CUresult -> cudaError_t, and the runtime's last error). */
typedef enum api { RT, DRV } api;

typedef struct outcome {
    bool pass; /* not served: the hook calls the real function */
    bool own;  /* gmlake's own error, which a runtime hook makes the thread's last error (not
                  the sticky error the runtime already holds) */
    int code;  /* the answer, CUresult numbering */
} outcome;
static const outcome PASS_THROUGH = {.pass = true};
static outcome answer(int code) { return (outcome){.own = code != CUDA_SUCCESS, .code = code}; }

/* ---- shared steps ---- */

/* The calling thread's current device as API a sees it, -1 if none. */
static int current_device(api a)
{
    if (a == RT) {
        int d = -1;
        return PASS(rt_get_device, NO_RT, &d) == cudaSuccess ? d : -1;
    }
    CUdevice d = -1;
    return PASS(drv_ctx_get_device, NO_DRV, &d) == CUDA_SUCCESS ? (int)d : -1;
}

/* The context the legacy stream of `device` lives in for this thread: the current one, else the
 * device's primary context (the one the runtime makes current on first use). */
static uintptr_t legacy_context(int device)
{
    static _Atomic(CUcontext) primary[GML_MAX_DEVICES];
    CUcontext c = NULL;
    if (PASS(drv_ctx_get_current, NO_DRV, &c) == CUDA_SUCCESS && c)
        return (uintptr_t)c;
    if (device < 0 || device >= GML_MAX_DEVICES)
        return 0;
    c = atomic_load(&primary[device]);
    if (!c && PASS(drv_device_primary_ctx_retain, NO_DRV, &c, device) == CUDA_SUCCESS)
        atomic_store(&primary[device], c); /* retained once for the process */
    return (uintptr_t)c;
}

/* The device of context c (pushed for the query), -1 if not known. */
static int ctx_device(CUcontext c)
{
    int device = -1;
    CUcontext popped = NULL;
    if (PASS(drv_ctx_push_current, NO_DRV, c) == CUDA_SUCCESS) {
        device = current_device(DRV);
        PASS(drv_ctx_pop_current, NO_DRV, &popped);
    }
    return device;
}

/* The device of stream s as the caller names it (CUDA's stream-ordered allocations take memory
 * there, whichever device is current): an implicit stream's is the current one; a created
 * stream's, its context's (cuStreamGetCtx); the current one where CUDA does not say.  A created
 * stream's answer is remembered by the thread for its next allocation on the same stream, until
 * a stream or context may have ended (gml_streams_epoch): the hot path of a program that
 * allocates on side streams (PyTorch's, NCCL's) makes no driver call for it. */
static GML_TLS struct {
    CUstream s;
    uint64_t epoch;
    int device;
} last_stream;

static int stream_device(api a, CUstream s)
{
    if (!s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return current_device(a);
    uint64_t epoch = atomic_load_explicit(&gml_streams_epoch, memory_order_acquire);
    if (last_stream.s == s && last_stream.epoch == epoch)
        return last_stream.device;
    CUcontext c = NULL, here = NULL;
    if (PASS(drv_stream_get_ctx, NO_DRV, s, &c) != CUDA_SUCCESS || !c)
        return current_device(a); /* not remembered: CUDA does not know the stream */
    int device = PASS(drv_ctx_get_current, NO_DRV, &here) == CUDA_SUCCESS && here == c
                     ? current_device(a)
                     : ctx_device(c);
    if (device >= 0)
        last_stream.s = s, last_stream.epoch = epoch, last_stream.device = device;
    return device;
}

/* A thread's per-thread default streams end with it: its bins are retired at thread exit. */
static pthread_key_t ptds_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;
static GML_TLS bool ptds_noted;

static void ptds_thread_exit(void *unused)
{
    (void)unused;
    if (!gml_serving())
        return;
    gml_depth++;
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        gml_graph_stream_retired(gml_stream_ptds(d));
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

/* Whether stream s (as named by the caller) captures a graph.  Asked only while a capture may be
 * under way in the process (capture.c counts them); a failed query counts as capturing and leaves
 * its error in *err (CUresult numbering; else 0): the legacy stream while a blocking stream
 * captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: CUDA refuses work on it until that capture ends),
 * or a stream CUDA does not know. */
static bool capturing(api a, CUstream s, int *err)
{
    *err = 0;
    if (!gml_capture_under_way())
        return false;
    if (a == RT) {
        enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        if (!GML_REAL(rt_stream_is_capturing))
            return false;
        *err = (int)PASS(rt_stream_is_capturing, NO_RT, (cudaStream_t)s, &st);
        return *err != cudaSuccess || st != cudaStreamCaptureStatusNone;
    }
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (!GML_REAL(drv_stream_is_capturing))
        return false;
    *err = (int)PASS(drv_stream_is_capturing, NO_DRV, s, &st);
    return *err != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ---- the runtime's last error ----
 * The runtime keeps a per-thread last error inside libcudart, which gmlake cannot write.  When a
 * runtime hook answers an error itself, gmlake consumes the runtime's pending error (the new one
 * supersedes it: CUDA keeps only the last) and keeps its own in gml_rt_error.  The hooked
 * cudaGetLastError / cudaPeekAtLastError return the runtime's error if it has one (it came after
 * gmlake's, or it is sticky), else gmlake's; cudaGetLastError clears both.  A runtime that already
 * holds a sticky error (the context is unusable) makes every served call fail with it, as CUDA
 * does: gmlake checks with cudaPeekAtLastError before serving. */
static GML_TLS cudaError_t gml_rt_error;

static cudaError_t rt_error(cudaError_t e)
{
    if (e != cudaSuccess) {
        PASS(rt_get_last_error, cudaSuccess);
        gml_rt_error = e;
    }
    return e;
}

/* The errors driver_types.h documents as leaving the process unusable ("any further CUDA work
 * will return the same error", "the process must be terminated and relaunched").  721 is
 * cudaErrorTensorMemoryLeak, named only by CUDA 12.8's headers and later. */
static bool is_sticky(cudaError_t e)
{
    switch (e) {
    case cudaErrorContained: case cudaErrorIllegalAddress: case cudaErrorLaunchTimeout:
    case cudaErrorHardwareStackError: case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress: case cudaErrorInvalidAddressSpace: case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure: case cudaErrorExternalDevice: case cudaErrorAssert:
    case (cudaError_t)721: case cudaErrorMpsClientTerminated:
        return true;
    default:
        return false;
    }
}

/* Before API a serves a call: the sticky error the runtime holds (the call fails with it; it is
 * the runtime's, not recorded as gmlake's), else cudaSuccess.  The driver has no such error. */
static int rt_sticky(api a)
{
    if (a != RT)
        return cudaSuccess;
    cudaError_t e = PASS(rt_peek_at_last_error, cudaSuccess);
    return is_sticky(e) ? e : cudaSuccess;
}

/* The error-code map: the runtime's code for a driver code.  CUDA numbers the two enums alike
 * for every error gmlake answers or forwards from a synchronisation (asserted below), so the map
 * is the identity on them. */
_Static_assert((int)CUDA_ERROR_OUT_OF_MEMORY == (int)cudaErrorMemoryAllocation, "code map");
_Static_assert((int)CUDA_ERROR_INVALID_VALUE == (int)cudaErrorInvalidValue, "code map");
_Static_assert((int)CUDA_ERROR_NOT_INITIALIZED == (int)cudaErrorInitializationError, "code map");
_Static_assert((int)CUDA_ERROR_UNKNOWN == (int)cudaErrorUnknown, "code map");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED == (int)cudaErrorStreamCaptureUnsupported, "code map");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_INVALIDATED == (int)cudaErrorStreamCaptureInvalidated, "code map");
_Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_IMPLICIT == (int)cudaErrorStreamCaptureImplicit, "code map");
_Static_assert((int)CUDA_ERROR_INVALID_HANDLE == (int)cudaErrorInvalidResourceHandle, "code map");
_Static_assert((int)CUDA_ERROR_ILLEGAL_ADDRESS == (int)cudaErrorIllegalAddress, "code map");
_Static_assert((int)CUDA_ERROR_LAUNCH_FAILED == (int)cudaErrorLaunchFailure, "code map");
_Static_assert((int)CUDA_ERROR_NOT_SUPPORTED == (int)cudaErrorNotSupported, "code map");
static cudaError_t rt_code(int driver_code) { return (cudaError_t)driver_code; }

/* A runtime hook's answer: the runtime's code, gmlake's own errors recorded as the last error. */
static cudaError_t rt_finish(outcome o) { return o.own ? rt_error(rt_code(o.code)) : rt_code(o.code); }

/* The status of a pool call as a CUDA answer. */
static int drv_code(int gmlake_status)
{
    switch (gmlake_status) {
    case GMLAKE_OK: return CUDA_SUCCESS;
    case GMLAKE_ERR_NOMEM: return CUDA_ERROR_OUT_OF_MEMORY;
    default: return CUDA_ERROR_INVALID_VALUE;
    }
}

GML_HOOK cudaError_t cudaGetLastError(void)
{
    GML_RT_ENTRY();
    cudaError_t mine = gml_rt_error;
    gml_rt_error = cudaSuccess;
    cudaError_t r = PASS(rt_get_last_error, cudaSuccess);
    return r != cudaSuccess ? r : mine;
}

GML_HOOK cudaError_t cudaPeekAtLastError(void)
{
    GML_RT_ENTRY();
    cudaError_t r = PASS(rt_peek_at_last_error, cudaSuccess);
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

/* After API a made `pool` the current pool of `device`: whether it is the default one. */
static void note_pool(api a, int device, CUmemoryPool pool)
{
    CUmemoryPool dp = NULL; /* cudaMemPool_t is the same handle type */
    bool known = a == RT ? PASS(rt_device_get_default_mem_pool, NO_RT, &dp, device) == cudaSuccess
                         : PASS(drv_device_get_default_mem_pool, NO_DRV, &dp, device) == CUDA_SUCCESS;
    if (known && device >= 0 && device < GML_MAX_DEVICES)
        atomic_store(&custom_pool[device], dp != pool);
}

GML_HOOK cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t pool)
{
    GML_RT_ENTRY();
    bool serving = gml_serving();
    cudaError_t r = PASS(rt_device_set_mem_pool, NO_RT, device, pool);
    if (r == cudaSuccess && serving)
        note_pool(RT, device, pool);
    return r;
}

GML_HOOK CUresult cuDeviceSetMemPool(CUdevice device, CUmemoryPool pool)
{
    bool serving = gml_serving();
    CUresult r = PASS(drv_device_set_mem_pool, NO_DRV, device, pool);
    if (r == CUDA_SUCCESS && serving)
        note_pool(DRV, (int)device, pool);
    return r;
}

/* ---- peer access ----
 * A device that may access a peer's memory (cudaDeviceEnablePeerAccess, cuCtxEnablePeerAccess)
 * must reach the peer's gmlake memory too: gml_peer_grant (pools.c) records it and the peer's
 * pool maps its present and future memory for that device. */
GML_HOOK cudaError_t cudaDeviceEnablePeerAccess(int peerDevice, unsigned int flags)
{
    GML_RT_ENTRY();
    cudaError_t r = PASS(rt_device_enable_peer_access, NO_RT, peerDevice, flags);
    if (r == cudaSuccess && gml_serving())
        gml_peer_grant(peerDevice, current_device(RT));
    return r;
}

GML_HOOK CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    CUresult r = PASS(drv_ctx_enable_peer_access, NO_DRV, peer, flags);
    if (r != CUDA_SUCCESS || !gml_serving())
        return r;
    gml_peer_grant(ctx_device(peer), current_device(DRV));
    return r;
}

/* ---- allocate ---- */

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
        if (__builtin_expect(atomic_load_explicit(&gml_oom_pending, memory_order_relaxed), 0))
            atomic_store_explicit(&gml_oom_pending, false, memory_order_relaxed);
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

/* One allocation through API a: cudaMalloc / cuMemAlloc (async false: usable by every stream) on
 * the current device, or a stream-ordered one on stream s (ptsz: a _ptsz entry point) from the
 * current pool of the stream's device, or (from_pool >= 0) from the default pool of device
 * from_pool.  Streams capturing a graph and devices whose current pool is not the default one
 * pass through. */
static outcome alloc_op(api a, uintptr_t *out, size_t size, CUstream s, bool async, bool ptsz, int from_pool)
{
    if (!gml_serving() || size == 0)
        return PASS_THROUGH;
    if (gml_graph_reap_pending())
        gml_graph_reap(!gml_capture_under_way()); /* no device wait in a capture */
    int query;
    uint64_t capture = 0;
    bool active = false;
    if (async && capturing(a, named(s, ptsz), &query) &&
        (query || gml_graph_capture_id(named(s, ptsz), &capture, &active) != CUDA_SUCCESS || !active))
        return PASS_THROUGH; /* a failed query or an invalidated capture: CUDA answers */
    int device = from_pool >= 0 ? from_pool : async ? stream_device(a, named(s, ptsz)) : current_device(a);
    if (async && from_pool < 0 && custom_pool_of(device))
        return PASS_THROUGH;
    int sticky = rt_sticky(a);
    if (sticky != cudaSuccess)
        return (outcome){.code = sticky};
    gml_stream key = async ? stream_key(s, ptsz, device) : GML_STREAM_NONE;
    if (capture && gml_graph_reuse(capture, device, key, (uintptr_t)named(s, ptsz), size, out))
        return answer(CUDA_SUCCESS);
    /* a graph's block is taken as cudaMalloc takes one: whichever stream launches the graph */
    switch (serve_alloc(device, size, capture ? GML_STREAM_NONE : key, out)) {
    case 0:
        if (capture && !gml_graph_note(capture, gml_registry_get(device), device, (uintptr_t)named(s, ptsz),
                                       *out, size)) {
            gml_free_served(gml_registry_get(device), *out, GML_STREAM_NONE);
            return answer(CUDA_ERROR_OUT_OF_MEMORY);
        }
        return answer(CUDA_SUCCESS);
    case 1: return answer(CUDA_ERROR_OUT_OF_MEMORY);
    default: return PASS_THROUGH;
    }
}

/* ---- free ---- */

enum { FREE_PASS = -1 };

/* The answer to a free of gmlake memory that is not a live allocation (logged). */
static int invalid_free(const char *name, uintptr_t ptr)
{
    gml_log(GML_LOG_ERROR, "%s(%#lx): not the start of a live allocation (double free or "
            "interior pointer); the pool is unchanged", name, (unsigned long)ptr);
    return CUDA_ERROR_INVALID_VALUE;
}

/* CUDA_SUCCESS freed; FREE_PASS not gmlake's (pass through); otherwise the CUDA error to return,
 * the pool unchanged: CUDA_ERROR_INVALID_VALUE for gmlake memory that is not a live allocation
 * (double free, interior pointer), or the error of the synchronisation a synchronous free makes
 * (during graph capture CUDA refuses it, as it refuses cudaFree, and the capture is invalidated),
 * or the error of a stream-ordered free's failed capture query (the legacy stream while a blocking
 * stream captures, which CUDA refuses to use until the capture ends).
 * s, ptsz: the free's stream as in stream_key; sync: cudaFree / cuMemFree (no stream: waits for
 * the pointer's device).
 * The pool is picked from the pointer's address without a lock (gml_arena_owner) and the pointer
 * looked up once, by gml_pool_free; only a pointer outside every home arena (a stitched block,
 * or not gmlake's) takes the slower search, and only the rare paths (a synchronous free, a free
 * during a capture) check that the block is live before acting on it. */
static int serve_free(api a, uintptr_t ptr, CUstream s, bool ptsz, const char *name, bool sync)
{
    int device = -1;
    gml_pool *p = gml_arena_owner(ptr, &device);
    bool live_known = false, piece = false;
    if (!p) {
        p = gml_live_owner(ptr, &device);
        live_known = p != NULL;
    }
    /* a piece of a graph's memory may start inside one of the pool's blocks (graphmem.c) */
    if (!p)
        live_known = piece = gml_graph_piece(ptr, &p, &device);
    if (!p && !gml_owner(ptr, NULL))
        return FREE_PASS;
    int query = 0;
    bool capture = !sync && p && capturing(a, named(s, ptsz), &query);
    if (p && !live_known && (sync || capture))
        live_known = (piece = gml_graph_piece(ptr, &p, &device)) || gml_pool_alloc_size(p, ptr) != 0;
    if (!p || ((sync || capture) && !live_known))
        return invalid_free(name, ptr);
    if (query) {
        gml_log(GML_LOG_WARN, "%s(%#lx): the stream's capture status is unknown (CUDA error %d); "
                "the block stays allocated", name, (unsigned long)ptr, query);
        return query; /* as CUDA refuses work on that stream; the program may free it later */
    }
    if (sync) {
        gml_depth++; /* the pool's driver calls are real calls: routing off */
        int rc = gml_pool_sync(p);
        gml_depth--;
        if (rc != GMLAKE_OK) {
            int r = gml_cuda_last_error() ? gml_cuda_last_error() : CUDA_ERROR_UNKNOWN;
            gml_log(GML_LOG_WARN, "%s(%#lx): waiting for device %d failed (CUDA error %d); the block "
                    "stays allocated", name, (unsigned long)ptr, device, r);
            return r;
        }
    }
    /* a per-thread stream is the one of the thread's current device, which may not be p's (a
     * legacy stream's key is the current context, whatever its device) */
    int cur = !sync && named(s, ptsz) == CU_STREAM_PER_THREAD ? current_device(a) : device;
    gml_stream stream = sync ? GML_STREAM_NONE : stream_key(s, ptsz, cur >= 0 ? cur : device);
    uint64_t in = 0;
    if (capture)
        gml_graph_capture_id(named(s, ptsz), &in, NULL); /* in stays 0 if it fails */
    int graph = gml_graph_tracking() ? gml_graph_free(ptr, in, stream, !gml_capture_under_way())
                                      : GML_GRAPH_NOT_MINE;
    if (graph != GML_GRAPH_NOT_MINE)
        return graph;
    if (piece)
        return invalid_free(name, ptr); /* another thread freed it meanwhile */
    if (capture) {
        if (!atomic_exchange(&capture_warned, 1))
            gml_log(GML_LOG_WARN, "%s during graph capture: gmlake keeps such blocks allocated", name);
        return CUDA_SUCCESS;
    }
    int rc = gml_free_served(p, ptr, stream);
    return rc == GMLAKE_OK || live_known ? drv_code(rc) : invalid_free(name, ptr);
}

/* One free through API a (sync: cudaFree / cuMemFree). */
static outcome free_op(api a, uintptr_t ptr, CUstream s, bool ptsz, const char *name, bool sync)
{
    if (!gml_serving() || !ptr)
        return PASS_THROUGH;
    int sticky = rt_sticky(a);
    if (sticky != cudaSuccess)
        return (outcome){.code = sticky};
    if (gml_graph_reap_pending())
        gml_graph_reap(!gml_capture_under_way()); /* no device wait in a capture */
    int r = serve_free(a, ptr, s, ptsz, name, sync);
    return r == FREE_PASS ? PASS_THROUGH : answer(r);
}

/* ---- memory information ---- */

/* Free memory as the program can use it: the device's, plus what gmlake holds but is not live
 * (ok: the real call succeeded while gmlake was serving). */
static void add_cached(api a, bool ok, size_t *free_b, size_t *total)
{
    gml_pool *p = ok && free_b && total ? gml_registry_get(current_device(a)) : NULL;
    if (!p)
        return;
    gmlake_stats s;
    gml_pool_stats(p, &s);
    size_t cached = s.reserved_bytes > s.active_bytes ? s.reserved_bytes - s.active_bytes : 0;
    *free_b = *free_b + cached > *total ? *total : *free_b + cached;
}

/* ---- runtime ---- */

/* The real allocation functions, called to pass through (stream ignored by cudaMalloc's). */
static cudaError_t malloc_real(void **devPtr, size_t size, cudaStream_t s)
{
    (void)s;
    return PASS(rt_malloc, NO_RT, devPtr, size);
}

static cudaError_t malloc_async_real(void **devPtr, size_t size, cudaStream_t s)
{
    return PASS(rt_malloc_async, NO_RT, devPtr, size, s);
}

/* A runtime allocation hook's body (async, ptsz: as for alloc_op). */
static cudaError_t rt_alloc(cudaError_t (*real)(void **, size_t, cudaStream_t), void **devPtr,
                            size_t size, cudaStream_t s, bool async, bool ptsz)
{
    uintptr_t p = 0;
    outcome o = devPtr ? alloc_op(RT, &p, size, (CUstream)s, async, ptsz, -1) : PASS_THROUGH;
    if (o.pass)
        return real(devPtr, size, s);
    if (o.code == CUDA_SUCCESS)
        *devPtr = (void *)p;
    return rt_finish(o);
}

GML_HOOK cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    GML_RT_ENTRY();
    return rt_alloc(malloc_real, devPtr, size, NULL, false, false);
}

GML_HOOK cudaError_t cudaFree(void *devPtr)
{
    GML_RT_ENTRY();
    outcome o = free_op(RT, (uintptr_t)devPtr, NULL, false, "cudaFree", true);
    if (o.pass)
        return PASS(rt_free, NO_RT, devPtr);
    return rt_finish(o);
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t s, bool ptsz)
{
    return rt_alloc(malloc_async_real, devPtr, size, s, true, ptsz);
}

static cudaError_t free_async(void *devPtr, cudaStream_t s, bool ptsz)
{
    outcome o = free_op(RT, (uintptr_t)devPtr, (CUstream)s, ptsz, "cudaFreeAsync", false);
    if (o.pass)
        return PASS(rt_free_async, NO_RT, devPtr, s);
    return rt_finish(o);
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

GML_HOOK cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    GML_RT_ENTRY();
    bool serving = gml_serving();
    cudaError_t r = PASS(rt_mem_get_info, NO_RT, free_b, total);
    add_cached(RT, serving && r == cudaSuccess, free_b, total);
    return r;
}

/* The device whose default memory pool `pool` is and whose gmlake pool exists, or -1. */
static int default_pool_device(cudaMemPool_t pool)
{
    if (!gml_serving() || !GML_REAL(rt_device_get_default_mem_pool))
        return -1;
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        if (!gml_registry_get(d))
            continue;
        cudaMemPool_t dp = NULL;
        if (PASS(rt_device_get_default_mem_pool, NO_RT, &dp, d) == cudaSuccess && dp == pool)
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
    return PASS(rt_pool_get_attribute, NO_RT, pool, attr, value);
}

GML_HOOK cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr attr, void *value)
{
    GML_RT_ENTRY();
    cudaError_t r = PASS(rt_pool_set_attribute, NO_RT, pool, attr, value);
    /* once CUDA took it (a high resets only to 0): both highs reset, as PyTorch does */
    int d = r == cudaSuccess && (attr == cudaMemPoolAttrReservedMemHigh || attr == cudaMemPoolAttrUsedMemHigh)
                ? default_pool_device(pool)
                : -1;
    if (d >= 0)
        gml_pool_reset_peaks(gml_registry_get(d));
    return r;
}

/* CUDA releases memory until the pool holds fewer than minBytesToKeep reserved bytes: gmlake gives
 * its whole cache back where its pool holds that many or more (PyTorch's empty_cache: 0), else
 * nothing. */
GML_HOOK cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t minBytesToKeep)
{
    GML_RT_ENTRY();
    int d = default_pool_device(pool);
    gmlake_stats s = {0};
    if (d >= 0)
        gml_pool_stats(gml_registry_get(d), &s);
    if (d >= 0 && s.reserved_bytes >= minBytesToKeep)
        gml_give_back(d, !gml_capture_under_way()); /* and an E event in the trace */
    return PASS(rt_pool_trim_to, NO_RT, pool, minBytesToKeep);
}

/* The public call (gmlake.h): no device wait while a capture may be under way, where it is an
 * unsafe call (fatal to another thread's capture in global mode). */
int gmlake_empty_cache(int device) { return gml_give_back(device, !gml_capture_under_way()); }

/* ---- CUDA IPC (ipc.c) ----
 * A handle of gmlake memory names the live allocation holding the pointer; opening it maps the
 * exporter's extents into this process (both must run under gmlake).  Handles of other memory,
 * and pointers gmlake did not open, go to CUDA. */
static outcome ipc_get_op(api a, void *handle, uintptr_t ptr)
{
    int device = -1;
    gml_pool *p = handle && ptr && gml_serving() ? gml_owner(ptr, &device) : NULL;
    if (!p)
        return PASS_THROUGH;
    int sticky = rt_sticky(a);
    if (sticky != cudaSuccess)
        return (outcome){.code = sticky};
    gml_depth++;
    int r = gml_ipc_export(p, device, ptr, handle);
    gml_depth--;
    if (r == CUDA_ERROR_INVALID_VALUE)
        gml_log(GML_LOG_ERROR, "IPC handle of %#lx: not inside a live allocation of gmlake's",
                (unsigned long)ptr);
    else if (r == CUDA_ERROR_NOT_SUPPORTED)
        gml_log(GML_LOG_ERROR, "IPC handle of %#lx: device %d cannot share gmlake's memory (its "
                "physical memory cannot be exported as POSIX file descriptors); run this process "
                "without gmlake (GMLAKE_ENABLE=0) to share memory", (unsigned long)ptr, device);
    return answer(r);
}

static outcome ipc_open_op(api a, uintptr_t *out, const void *handle)
{
    if (!gml_serving() || !gml_ipc_is_ours(handle))
        return PASS_THROUGH;
    int sticky = rt_sticky(a);
    if (sticky != cudaSuccess)
        return (outcome){.code = sticky};
    int device = current_device(a);
    gml_depth++;
    int r = gml_ipc_open(device, handle, out);
    gml_depth--;
    return answer(r);
}

static outcome ipc_close_op(uintptr_t ptr)
{
    if (!gml_serving() || !ptr)
        return PASS_THROUGH;
    gml_depth++;
    int r = gml_ipc_close(ptr);
    gml_depth--;
    return r < 0 ? PASS_THROUGH : answer(r);
}

GML_HOOK cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
    GML_RT_ENTRY();
    outcome o = ipc_get_op(RT, handle, (uintptr_t)devPtr);
    if (o.pass)
        return PASS(rt_ipc_get_mem_handle, NO_RT, handle, devPtr);
    return rt_finish(o);
}

GML_HOOK cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
    GML_RT_ENTRY();
    uintptr_t p = 0;
    outcome o = devPtr ? ipc_open_op(RT, &p, &handle) : PASS_THROUGH;
    if (o.pass)
        return PASS(rt_ipc_open_mem_handle, NO_RT, devPtr, handle, flags);
    if (o.code == CUDA_SUCCESS)
        *devPtr = (void *)p;
    return rt_finish(o);
}

GML_HOOK cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
    GML_RT_ENTRY();
    outcome o = ipc_close_op((uintptr_t)devPtr);
    if (o.pass)
        return PASS(rt_ipc_close_mem_handle, NO_RT, devPtr);
    return rt_finish(o);
}

GML_HOOK CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    outcome o = ipc_get_op(DRV, pHandle, (uintptr_t)dptr);
    if (o.pass)
        return PASS(drv_ipc_get_mem_handle, NO_DRV, pHandle, dptr);
    return (CUresult)o.code;
}

/* A driver open's body; `real` is called to pass through. */
static CUresult drv_ipc_open(PFN_cuIpcOpenMemHandle_v11000 real, CUdeviceptr *pdptr, CUipcMemHandle handle,
                             unsigned int flags)
{
    uintptr_t p = 0;
    outcome o = pdptr ? ipc_open_op(DRV, &p, &handle) : PASS_THROUGH;
    if (o.pass) {
        if (!real)
            return NO_DRV;
        gml_depth++;
        CUresult r = real(pdptr, handle, flags);
        gml_depth--;
        return r;
    }
    if (o.code == CUDA_SUCCESS)
        *pdptr = (CUdeviceptr)p;
    return (CUresult)o.code;
}

GML_HOOK CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return drv_ipc_open(GML_REAL(drv_ipc_open_mem_handle), pdptr, handle, Flags);
}

GML_HOOK CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    return drv_ipc_open(GML_REAL(drv_ipc_open_mem_handle_v1), pdptr, handle, Flags);
}

GML_HOOK CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    outcome o = ipc_close_op((uintptr_t)dptr);
    if (o.pass)
        return PASS(drv_ipc_close_mem_handle, NO_DRV, dptr);
    return (CUresult)o.code;
}

/* ---- driver ---- */

/* The real allocation functions, called to pass through (stream ignored by cuMemAlloc's). */
static CUresult mem_alloc_real(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    (void)s;
    return PASS(drv_mem_alloc, NO_DRV, dptr, bytesize);
}

static CUresult mem_alloc_async_real(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return PASS(drv_mem_alloc_async, NO_DRV, dptr, bytesize, s);
}

static CUresult mem_alloc_async_ptsz_real(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return PASS(drv_mem_alloc_async_ptsz, NO_DRV, dptr, bytesize, s);
}

/* A driver allocation hook's answer where gmlake served it (p: what it gave). */
static CUresult drv_served(outcome o, CUdeviceptr *dptr, uintptr_t p)
{
    if (o.code == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)p;
    return (CUresult)o.code;
}

/* A driver allocation hook's body (async, ptsz: as for alloc_op). */
static CUresult drv_alloc(CUresult (*real)(CUdeviceptr *, size_t, CUstream), CUdeviceptr *dptr,
                          size_t bytesize, CUstream s, bool async, bool ptsz)
{
    uintptr_t p = 0;
    outcome o = dptr ? alloc_op(DRV, &p, bytesize, s, async, ptsz, -1) : PASS_THROUGH;
    return o.pass ? real(dptr, bytesize, s) : drv_served(o, dptr, p);
}

GML_HOOK CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    return drv_alloc(mem_alloc_real, dptr, bytesize, NULL, false, false);
}

GML_HOOK CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    outcome o = free_op(DRV, (uintptr_t)dptr, NULL, false, "cuMemFree", true);
    if (o.pass)
        return PASS(drv_mem_free, NO_DRV, dptr);
    return (CUresult)o.code;
}

/* A driver stream-ordered free hook's body; `real` (NULL: missing) is called to pass through. */
static CUresult drv_free_async(CUresult (*real)(CUdeviceptr, CUstream), CUdeviceptr dptr, CUstream s, bool ptsz)
{
    outcome o = free_op(DRV, (uintptr_t)dptr, s, ptsz, "cuMemFreeAsync", false);
    if (!o.pass)
        return (CUresult)o.code;
    if (!real)
        return NO_DRV;
    gml_depth++;
    CUresult r = real(dptr, s);
    gml_depth--;
    return r;
}

GML_HOOK CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return drv_alloc(mem_alloc_async_real, dptr, bytesize, s, true, false);
}

GML_HOOK CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    return drv_free_async(GML_REAL(drv_mem_free_async), dptr, s, false);
}

GML_HOOK CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream s)
{
    return drv_alloc(mem_alloc_async_ptsz_real, dptr, bytesize, s, true, true);
}

GML_HOOK CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    return drv_free_async(GML_REAL(drv_mem_free_async_ptsz), dptr, s, true);
}

/* Only the current device's default pool is served, whatever pool is current: other pools carry
 * properties gmlake does not give (IPC export, other locations, their own release thresholds).
 * The current device if `pool` is its default pool, else -1. */
static int default_pool_here(CUmemoryPool pool)
{
    int d = current_device(DRV);
    CUmemoryPool dp = NULL;
    return d >= 0 && PASS(drv_device_get_default_mem_pool, NO_DRV, &dp, d) == CUDA_SUCCESS && dp == pool ? d : -1;
}

/* A cuMemAllocFromPoolAsync hook's body (ptsz: the _ptsz one); what gmlake does not serve goes to
 * `real` (NULL: missing), from the pool named. */
static CUresult drv_alloc_from_pool(PFN_cuMemAllocFromPoolAsync_v11020 real, CUdeviceptr *dptr, size_t bytesize,
                                    CUmemoryPool pool, CUstream s, bool ptsz)
{
    uintptr_t p = 0;
    int device = dptr && gml_serving() ? default_pool_here(pool) : -1;
    outcome o = device >= 0 ? alloc_op(DRV, &p, bytesize, s, true, ptsz, device) : PASS_THROUGH;
    if (!o.pass)
        return drv_served(o, dptr, p);
    if (!real)
        return NO_DRV;
    gml_depth++;
    CUresult r = real(dptr, bytesize, pool, s);
    gml_depth--;
    return r;
}

GML_HOOK CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
    return drv_alloc_from_pool(GML_REAL(drv_mem_alloc_from_pool_async), dptr, bytesize, pool, s, false);
}

GML_HOOK CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                               CUstream s)
{
    return drv_alloc_from_pool(GML_REAL(drv_mem_alloc_from_pool_async_ptsz), dptr, bytesize, pool, s, true);
}

GML_HOOK CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    bool serving = gml_serving();
    CUresult r = PASS(drv_mem_get_info, NO_DRV, free_b, total);
    add_cached(DRV, serving && r == CUDA_SUCCESS, free_b, total);
    return r;
}

/* ---- streams ---- */

/* Ends the bins of a created stream the program destroys, in every pool (the stream belongs to
 * one device; the others find nothing).  Implicit streams cannot be destroyed. */
static void retire_stream(CUstream s)
{
    if (!gml_serving() || !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
        return;
    gml_streams_changed();
    gml_graph_stream_retired((gml_stream)s);
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
    return PASS(rt_stream_destroy, NO_RT, s); /* the runtime's own cuStreamDestroy passes through */
}

GML_HOOK CUresult cuStreamDestroy_v2(CUstream s)
{
    retire_stream(s);
    return PASS(drv_stream_destroy_v2, NO_DRV, s);
}

GML_HOOK CUresult cuStreamDestroy(CUstream s)
{
    retire_stream(s);
    return PASS(drv_stream_destroy, NO_DRV, s);
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
