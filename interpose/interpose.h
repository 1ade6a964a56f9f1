/*
 * interpose.h — the preload layer: exported cuda* / cu* / dlsym hooks that turn CUDA allocation
 * calls into pool calls and forward everything else untouched.  Thin: no allocation policy here.
 *
 * How to add an interceptor
 *  1. Add the real function to GML_REAL_FUNCTIONS (below): a field named for what it does, its
 *     CUDA symbol, and its CUDA prototype's type (runtime: RT_T of the declaration; driver: the
 *     PFN_* typedef).  It resolves with RTLD_NEXT, else the calling object's scope (runtime) or
 *     libcuda.so.1 (driver).
 *  2. Write the hook in hooks.c (or the file of its concern: capture.c, pointer.c, reset.c,
 *     hooktable.c's resolvers) with exactly the CUDA prototype (the header declaration checks the
 *     type; GML_CHECK_TYPE asserts it against the CUDA typedef as well) and export it with GML_HOOK.
 *     A runtime hook starts with GML_RT_ENTRY(); every real call goes through PASS.
 *  3. Add {name, hook} to the sorted table in hooktable.c (dlsym, cuGetProcAddress and
 *     cudaGetDriverEntryPoint hand it out), keeping the names in strcmp order (a test checks).
 *
 * Rules every hook follows
 *  - GML_REAL(fn) always reaches the real function, or is NULL (the hook then returns
 *    cudaErrorInitializationError / CUDA_ERROR_NOT_INITIALIZED, never calls NULL).  A call made
 *    while this thread is inside gmlake (depth > 0), or with gmlake disabled, or that gmlake cannot
 *    serve, passes through, with depth raised so that whatever the real function calls is not
 *    routed again.
 *  - dlsym(RTLD_NEXT, ...) from any other object resolves as if gmlake were not there (hooktable.c).
 *  - Streams capturing a graph: gmlake serves their allocations and holds the blocks for as long
 *    as CUDA keeps the graph (graphmem.c); an invalidated capture's allocations pass through to
 *    CUDA.  Any other gmlake pointer freed with a stream-ordered free during capture stays
 *    allocated (logged once): reusing it could corrupt the graph's replays.  A synchronous free (cudaFree, cuMemFree) waits for the pointer's
 *    device as CUDA's does; if that fails (during capture: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 *    and the capture is invalidated, as by CUDA's cudaFree; or a sticky fault) it returns that
 *    error and the block stays allocated.  The pool's own driver calls run in relaxed capture
 *    mode and never record an event into a capture (core/device_cuda.c).  A stream's capture
 *    status is asked only while a capture may be under way (capture.c: the Begin/EndCapture
 *    hooks count them); a capture begun where no hook sees it is not detected.
 *  - A free of a pointer gmlake does not own goes to the real function; of a pointer that is
 *    inside gmlake's memory but not a live allocation (double free, interior pointer): the real
 *    runtime's error code, one log line, the pool untouched.
 *  - Out of memory after the pool released its cache: cudaErrorMemoryAllocation /
 *    CUDA_ERROR_OUT_OF_MEMORY.
 *  - Errors a runtime hook answers itself become the thread's last error (cudaGetLastError /
 *    cudaPeekAtLastError, hooked: hooks.c); a sticky error the runtime holds fails every served
 *    runtime call, as in CUDA.  (The driver API has no last error.)
 *  - Stream-ordered allocations of a device whose current memory pool is not its default one
 *    (cudaDeviceSetMemPool / cuDeviceSetMemPool) pass through to CUDA.
 *  - A stream-ordered allocation takes memory on its stream's device, whichever is current (a
 *    created stream's: its context's, cuStreamGetCtx; the current one where CUDA does not know the
 *    stream); cuMemAllocFromPoolAsync on the current device's default pool is served there with
 *    any stream and whatever pool is current, any other pool goes to CUDA with its pool.
 *  - Peer access enabled for a device (cudaDeviceEnablePeerAccess, cuCtxEnablePeerAccess) covers
 *    the peer's gmlake memory, present and future.
 *  - Streams are passed to the pool by their identity (core/device.h keys; hooks.c): implicit
 *    streams name the calling thread's per-thread default stream or the current context's legacy
 *    stream.  A stream the program destroys (cudaStreamDestroy, cuStreamDestroy) is retired in
 *    every pool before the real destroy.
 *  - In a child forked after gmlake started, nothing is served (lifecycle.c).
 *  - A reset of a device's primary context (cudaDeviceReset, cuDevicePrimaryCtxReset[_v2]) resets
 *    that device's pool first (reset.c): its memory back, its allocations, streams and events
 *    forgotten while the context still exists.  A context that may end otherwise (cuCtxDestroy
 *    [_v2]; cuDevicePrimaryCtxRelease[_v2] of an active primary context, perhaps the last
 *    reference) is synchronised first and every pool lets go of it (its events destroyed, its
 *    known streams ended; their blocks serve others once that synchronisation, else one of the
 *    device, succeeded); a NULL or invalid context passes through.
 *
 * Files, top to bottom, each calling only files below it (tests/calls.py fails on a circle;
 * docs/ARCHITECTURE.md says who owns what):
 *   hooktable.c   the hook table; dlsym, cuGetProcAddress, cudaGetDriverEntryPoint[ByVersion][_ptsz]
 *                 hand hooks out
 *   hooks.c       the hooks of allocation, free, memory info, pools, streams, peers, IPC
 *   pointer.c     the pointer queries (address range, range attributes, retain) about gmlake memory
 *   reset.c       the device resets (cudaDeviceReset, cuDevicePrimaryCtxReset): the pool first;
 *                 contexts that end (cuCtxDestroy, cuDevicePrimaryCtxRelease): their events first
 *   capture.c, pytorch_env.c      the Begin/EndCapture hooks; PyTorch's route (the constructor)
 *   graphmem.c    the memory of graph captures, held for the graph's life
 *   lifecycle.c   the start on the first hook call (trace, summary, fork handlers), gml_serving
 *   ipc.c, report.c, summary.c    IPC of gmlake memory; out-of-memory report; exit summary
 *   pools.c, trace.c              the per-device pools; the trace recorder
 *   owner.c       which pool owns a pointer
 *   settings.c    the settings (gml_cfg) and gml_log (a line once they are loaded)
 *   resolve.c, log.c              the real functions; log lines
 *   state.c       gml_depth, rank, forked child, file names: every file reads it, it calls none
 */
#ifndef GML_INTERPOSE_H
#define GML_INTERPOSE_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "stitch/pool.h"

/* cuda.h maps cuGetProcAddress to its _v2; libcuda exports both, and so does gmlake.  The same
 * for cuStreamDestroy, cuDevicePrimaryCtxReset, cuDevicePrimaryCtxRelease and cuCtxDestroy. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#undef cuStreamDestroy
CUresult cuStreamDestroy(CUstream hStream);
#undef cuDevicePrimaryCtxReset
CUresult cuDevicePrimaryCtxReset(CUdevice dev);
#undef cuDevicePrimaryCtxRelease
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
#undef cuCtxDestroy
CUresult cuCtxDestroy(CUcontext ctx);
/* cuda.h maps cuIpcOpenMemHandle to its _v2; libcuda exports both (the same prototype). */
#undef cuIpcOpenMemHandle
CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags);
/* cuda.h maps cuStreamBeginCapture to its _v2 (with a mode); CUDA 10.0's has none.  The _ptsz
 * variants are declared only under CUDA_API_PER_THREAD_DEFAULT_STREAM. */
#undef cuStreamBeginCapture
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamBeginCapture_ptsz(CUstream hStream);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
                                          const CUgraphEdgeData *dependencyData, size_t numDependencies,
                                          CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
/* The per-thread-default-stream hooks cuda.h and cuda_runtime_api.h declare only under
 * CUDA_API_PER_THREAD_DEFAULT_STREAM (hooks.c, capture.c). */
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream);
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t stream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t stream);
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                               const cudaGraphNode_t *dependencies,
                                               const cudaGraphEdgeData *edgeData, size_t numDependencies,
                                               enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *driverStatus);

#include <cudaTypedefs.h>

#define GML_HOOK __attribute__((visibility("default")))
/* Compile-time check of a hook's type against CUDA's own function-pointer typedef. */
#define GML_CHECK_TYPE(fn, pfn)                                                                   \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), pfn), #fn " has the wrong type")
/* Code that may run before a sanitizer runtime has initialised (the dlsym trampoline's path,
 * hooktable.c): not instrumented, and it calls no function a sanitizer intercepts. */
#define GML_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread"), noinline))

/* The real functions (resolve.c), one field each, named for what it does (rt_: the runtime,
 * drv_: the driver) so that a call through gml_real never reads like a call of a hook.  Each is
 * typed with the CUDA prototype: the runtime's declaration in cuda_runtime_api.h (RT_T), the
 * driver's PFN_* typedef of cudaTypedefs.h.  X(field, CUDA symbol, type). */
#define RT_T(fn) __typeof__(&fn)
#define GML_REAL_FUNCTIONS(X)                                                                     \
    X(rt_malloc, cudaMalloc, RT_T(cudaMalloc))                                                    \
    X(rt_free, cudaFree, RT_T(cudaFree))                                                          \
    X(rt_malloc_async, cudaMallocAsync, RT_T(cudaMallocAsync))                                    \
    X(rt_free_async, cudaFreeAsync, RT_T(cudaFreeAsync))                                          \
    X(rt_mem_get_info, cudaMemGetInfo, RT_T(cudaMemGetInfo))                                      \
    X(rt_pool_get_attribute, cudaMemPoolGetAttribute, RT_T(cudaMemPoolGetAttribute))              \
    X(rt_pool_set_attribute, cudaMemPoolSetAttribute, RT_T(cudaMemPoolSetAttribute))              \
    X(rt_pool_trim_to, cudaMemPoolTrimTo, RT_T(cudaMemPoolTrimTo))                                \
    X(rt_ipc_get_mem_handle, cudaIpcGetMemHandle, RT_T(cudaIpcGetMemHandle))                      \
    X(rt_ipc_open_mem_handle, cudaIpcOpenMemHandle, RT_T(cudaIpcOpenMemHandle))                   \
    X(rt_ipc_close_mem_handle, cudaIpcCloseMemHandle, RT_T(cudaIpcCloseMemHandle))                \
    X(rt_get_driver_entry_point, cudaGetDriverEntryPoint, RT_T(cudaGetDriverEntryPoint))          \
    X(rt_get_driver_entry_point_by_version, cudaGetDriverEntryPointByVersion,                     \
      RT_T(cudaGetDriverEntryPointByVersion))                                                     \
    X(rt_get_driver_entry_point_ptsz, cudaGetDriverEntryPoint_ptsz, RT_T(cudaGetDriverEntryPoint_ptsz)) \
    X(rt_get_driver_entry_point_by_version_ptsz, cudaGetDriverEntryPointByVersion_ptsz,           \
      RT_T(cudaGetDriverEntryPointByVersion_ptsz))                                                \
    X(rt_get_device, cudaGetDevice, RT_T(cudaGetDevice))                                          \
    X(rt_stream_is_capturing, cudaStreamIsCapturing, RT_T(cudaStreamIsCapturing))                \
    X(rt_stream_begin_capture, cudaStreamBeginCapture, RT_T(cudaStreamBeginCapture))             \
    X(rt_stream_begin_capture_to_graph, cudaStreamBeginCaptureToGraph,                            \
      RT_T(cudaStreamBeginCaptureToGraph))                                                        \
    X(rt_stream_end_capture, cudaStreamEndCapture, RT_T(cudaStreamEndCapture))                    \
    X(rt_device_get_default_mem_pool, cudaDeviceGetDefaultMemPool, RT_T(cudaDeviceGetDefaultMemPool)) \
    X(rt_stream_destroy, cudaStreamDestroy, RT_T(cudaStreamDestroy))                              \
    X(rt_get_last_error, cudaGetLastError, RT_T(cudaGetLastError))                                \
    X(rt_peek_at_last_error, cudaPeekAtLastError, RT_T(cudaPeekAtLastError))                      \
    X(rt_device_set_mem_pool, cudaDeviceSetMemPool, RT_T(cudaDeviceSetMemPool))                   \
    X(rt_device_enable_peer_access, cudaDeviceEnablePeerAccess, RT_T(cudaDeviceEnablePeerAccess)) \
    X(rt_device_reset, cudaDeviceReset, RT_T(cudaDeviceReset))                                    \
    X(drv_mem_alloc, cuMemAlloc_v2, PFN_cuMemAlloc_v3020)                                         \
    X(drv_mem_free, cuMemFree_v2, PFN_cuMemFree_v3020)                                            \
    X(drv_mem_alloc_async, cuMemAllocAsync, PFN_cuMemAllocAsync_v11020)                           \
    X(drv_mem_free_async, cuMemFreeAsync, PFN_cuMemFreeAsync_v11020)                              \
    X(drv_mem_alloc_async_ptsz, cuMemAllocAsync_ptsz, PFN_cuMemAllocAsync_v11020_ptsz)            \
    X(drv_mem_free_async_ptsz, cuMemFreeAsync_ptsz, PFN_cuMemFreeAsync_v11020_ptsz)               \
    X(drv_mem_alloc_from_pool_async, cuMemAllocFromPoolAsync, PFN_cuMemAllocFromPoolAsync_v11020) \
    X(drv_mem_alloc_from_pool_async_ptsz, cuMemAllocFromPoolAsync_ptsz,                           \
      PFN_cuMemAllocFromPoolAsync_v11020_ptsz)                                                    \
    X(drv_mem_get_info, cuMemGetInfo_v2, PFN_cuMemGetInfo_v3020)                                  \
    X(drv_get_proc_address, cuGetProcAddress, PFN_cuGetProcAddress_v11030)                        \
    X(drv_get_proc_address_v2, cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000)                  \
    X(drv_ctx_get_device, cuCtxGetDevice, PFN_cuCtxGetDevice_v2000)                               \
    X(drv_stream_is_capturing, cuStreamIsCapturing, PFN_cuStreamIsCapturing_v10000)               \
    X(drv_stream_get_ctx, cuStreamGetCtx, PFN_cuStreamGetCtx_v9020)                               \
    X(drv_stream_begin_capture_v1, cuStreamBeginCapture, gml_pfn_stream_begin_capture_v1)         \
    X(drv_stream_begin_capture_v1_ptsz, cuStreamBeginCapture_ptsz, gml_pfn_stream_begin_capture_v1) \
    X(drv_stream_begin_capture, cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v10010)         \
    X(drv_stream_begin_capture_ptsz, cuStreamBeginCapture_v2_ptsz,                                \
      PFN_cuStreamBeginCapture_v10010_ptsz)                                                       \
    X(drv_stream_begin_capture_to_graph, cuStreamBeginCaptureToGraph,                             \
      PFN_cuStreamBeginCaptureToGraph_v12030)                                                     \
    X(drv_stream_begin_capture_to_graph_ptsz, cuStreamBeginCaptureToGraph_ptsz,                   \
      PFN_cuStreamBeginCaptureToGraph_v12030_ptsz)                                                \
    X(drv_stream_end_capture, cuStreamEndCapture, PFN_cuStreamEndCapture_v10000)                  \
    X(drv_stream_end_capture_ptsz, cuStreamEndCapture_ptsz, PFN_cuStreamEndCapture_v10000_ptsz)   \
    X(drv_device_get_default_mem_pool, cuDeviceGetDefaultMemPool, PFN_cuDeviceGetDefaultMemPool_v11020) \
    X(drv_device_set_mem_pool, cuDeviceSetMemPool, PFN_cuDeviceSetMemPool_v11020)                 \
    X(drv_ctx_enable_peer_access, cuCtxEnablePeerAccess, PFN_cuCtxEnablePeerAccess_v4000)         \
    X(drv_ctx_push_current, cuCtxPushCurrent_v2, PFN_cuCtxPushCurrent_v4000)                      \
    X(drv_ctx_pop_current, cuCtxPopCurrent_v2, PFN_cuCtxPopCurrent_v4000)                         \
    X(drv_ctx_get_current, cuCtxGetCurrent, PFN_cuCtxGetCurrent_v4000)                            \
    X(drv_device_primary_ctx_retain, cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000) \
    X(drv_device_primary_ctx_reset, cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v11000) \
    X(drv_device_primary_ctx_reset_v1, cuDevicePrimaryCtxReset, PFN_cuDevicePrimaryCtxReset_v11000) \
    X(drv_device_primary_ctx_release, cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000) \
    X(drv_device_primary_ctx_release_v1, cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000) \
    X(drv_device_primary_ctx_get_state, cuDevicePrimaryCtxGetState, PFN_cuDevicePrimaryCtxGetState_v7000) \
    X(drv_ctx_destroy, cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000)                                   \
    X(drv_ctx_destroy_v1, cuCtxDestroy, PFN_cuCtxDestroy_v4000)                                   \
    X(drv_ctx_synchronize, cuCtxSynchronize, PFN_cuCtxSynchronize_v2000)                          \
    X(drv_stream_destroy_v2, cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000)                       \
    X(drv_stream_destroy, cuStreamDestroy, PFN_cuStreamDestroy_v4000)                             \
    X(drv_ipc_get_mem_handle, cuIpcGetMemHandle, PFN_cuIpcGetMemHandle_v4010)                     \
    X(drv_ipc_open_mem_handle, cuIpcOpenMemHandle_v2, PFN_cuIpcOpenMemHandle_v11000)              \
    X(drv_ipc_open_mem_handle_v1, cuIpcOpenMemHandle, PFN_cuIpcOpenMemHandle_v11000)              \
    X(drv_ipc_close_mem_handle, cuIpcCloseMemHandle, PFN_cuIpcCloseMemHandle_v4010)                \
    X(drv_stream_get_capture_info, cuStreamGetCaptureInfo_v3, PFN_cuStreamGetCaptureInfo_v12030)  \
    X(drv_user_object_create, cuUserObjectCreate, PFN_cuUserObjectCreate_v11030)                  \
    X(drv_user_object_release, cuUserObjectRelease, PFN_cuUserObjectRelease_v11030)               \
    X(drv_graph_retain_user_object, cuGraphRetainUserObject, PFN_cuGraphRetainUserObject_v11030) \
    X(drv_mem_get_address_range, cuMemGetAddressRange_v2, PFN_cuMemGetAddressRange_v3020)         \
    X(drv_pointer_get_attribute, cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000)           \
    X(drv_pointer_get_attributes, cuPointerGetAttributes, PFN_cuPointerGetAttributes_v7000)        \
    X(drv_mem_retain_allocation_handle, cuMemRetainAllocationHandle,                               \
      PFN_cuMemRetainAllocationHandle_v11000)

/* cuStreamBeginCapture as CUDA 10.0 exported it (no mode: global); cudaTypedefs.h declares its
 * type only for CUDA's internal build. */
typedef CUresult (*gml_pfn_stream_begin_capture_v1)(CUstream hStream);

struct gml_real {
    void *(*dlsym)(void *, const char *); /* first: the dlsym trampoline reads it (hooktable.c) */
#define GML_REAL_FIELD(field, symbol, type) type field;
    GML_REAL_FUNCTIONS(GML_REAL_FIELD)
#undef GML_REAL_FIELD
};
/* gml_symbol_<field>: the name of the CUDA symbol that field stands for. */
#define GML_REAL_SYMBOL(field, symbol, type)                                                      \
    static const char gml_symbol_##field[] __attribute__((unused)) = #symbol;
GML_REAL_FUNCTIONS(GML_REAL_SYMBOL)
#undef GML_REAL_SYMBOL
extern struct gml_real gml_real;

/* Resolves the real dlsym (once). */
void gml_resolve(void);
/* The same, returning it (NULL while dlvsym is being asked): the dlsym trampoline's path. */
GML_NO_SANITIZE void *gml_resolve_dlsym(void);
/* Looks the real `name` up and stores it in *slot; NULL while it is not loaded yet.  A runtime
 * function that RTLD_NEXT cannot see (libcudart loaded RTLD_LOCAL by a plugin) is looked up in
 * the scope of the object that called the current runtime hook (gml_caller) and cached per
 * calling object, not in *slot. */
void *gml_resolve_one(void **slot, const char *name);
/* The real `name` for every caller (RTLD_NEXT; libcuda for the driver), stored in *slot when
 * found; no caller-scope lookup. */
void *gml_resolve_global(void **slot, const char *name);
/* The return address of the runtime hook this thread is in: every runtime hook starts with
 * GML_RT_ENTRY() (in the exported function itself, so that it is the program's address). */
extern GML_TLS const void *gml_caller;
#define GML_RT_ENTRY() (gml_caller = __builtin_return_address(0))
/* The real function of gml_real's `field` (resolved on first use), or NULL.  The slot is read
 * once: threads resolving it together each store it, and a second, plain read would race with
 * their stores. */
#define GML_REAL(field)                                                                           \
    ({                                                                                            \
        __typeof__(gml_real.field) real_ = __atomic_load_n(&gml_real.field, __ATOMIC_ACQUIRE);    \
        real_ ? real_                                                                             \
              : (__typeof__(gml_real.field))gml_resolve_one((void **)&gml_real.field,             \
                                                            gml_symbol_##field);                  \
    })
/* The real function of `field` called with routing off: a hooked function it reaches passes
 * straight through (the real cudaMemGetInfo reaches the hooked cuMemGetInfo, which must not add
 * gmlake's cache a second time).  `err` where no real function exists at all. */
#define PASS(field, err, ...)                                                                     \
    ({                                                                                            \
        __typeof__(gml_real.field) f_ = GML_REAL(field);                                          \
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

/* The real driver symbol `name` (for the cuda device), NULL if missing. */
void *gml_driver_symbol(const char *name);
/* Fork handlers: takes (hold) or releases the resolver's locks (the libcuda handle, the
 * caller-scope cache); a thread holds neither while taking another gmlake lock. */
void gml_resolve_hold(bool hold);

/* The hook table (hooktable.c).  The hook for a real function pointer, or the pointer itself
 * (entry-point resolvers). */
void *gml_hook_for(const char *symbol, void *real);

/* What every file reads (state.c) */
extern GML_TLS int gml_depth; /* > 0 while this thread runs inside gmlake */
/* Reads RANK, else LOCAL_RANK (settings.c, as the settings load); gml_rank: it, else "". */
void gml_rank_read(void);
const char *gml_rank(void);
/* 1: this process is a child forked after gmlake started (set by lifecycle.c's fork handler).
 * A variable, not a function: gml_serving reads it on every hook call. */
extern __attribute__((visibility("hidden"))) _Atomic int gml_forked;
/* Raised (gml_streams_changed) before the program destroys a stream or a context (which destroys
 * its streams), so that what a thread remembers about a stream handle (hooks.c: its device)
 * holds only while no stream it names may have ended and its handle been made again. */
extern __attribute__((visibility("hidden"))) _Atomic uint64_t gml_streams_epoch;
static inline void gml_streams_changed(void)
{
    atomic_fetch_add_explicit(&gml_streams_epoch, 1, memory_order_release);
}
/* A file name from a log_file / stats_file / trace_file pattern: %p, %r, %%, and with
 * per_process, ".rank%r" inserted when several processes run and the pattern names neither
 * (config/filename.c).  false when it does not fit in len: never used cut short (the settings
 * refuse a pattern that could expand past GML_PATH_MAX - 1 bytes, so not with that length). */
bool gml_file_name(const char *pattern, bool per_process, char *out, size_t len);
/* fopen for gmlake's own files (log_file, trace_file): close-on-exec, and never on descriptors 0
 * to 2: where the program closed a standard stream, its own writes to it would land in gmlake's
 * file, and gmlake's lines in the file the program opens there next. */
FILE *gml_fopen(const char *path, const char *mode);
/* A file this process alone writes (stats_file, trace_file: another process started with the
 * same environment may name it too): opened by gml_fopen for appending, not cut, and locked
 * (flock, exclusive, which a forked child shares and an exec'ed one does not); NULL with *taken
 * where another process holds the lock, NULL with errno where it cannot be opened.  A file system
 * without such locks counts as free.  gml_file_restart cuts a claimed regular file to nothing
 * (a device or a FIFO is written as it is); false with errno where that fails. */
FILE *gml_file_claim(const char *path, bool *taken);
bool gml_file_restart(FILE *f);

/* Settings (settings.c).  The settings, loaded on first use (the log opened with them). */
const gml_config *gml_cfg(void);
/* A log line once the settings are loaded (its level and file are theirs). */
void gml_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Lifecycle (lifecycle.c).  Starts gmlake once (the settings, then with gmlake on: the trace
 * file, the exit summary, the fork handlers); whether gmlake is on. */
bool gml_enabled(void);
/* Whether a hook on this thread should serve the call (enabled, not re-entered, not a child
 * forked after gmlake started). */
bool gml_serving(void);

/* Log lines (log.c) */
/* A line now, while the settings load (gml_log would wait for them). */
void gml_log_line(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void gml_log_vline(int level, const char *fmt, va_list ap);
/* Sets the level and opens log_file (pattern "" : standard error). */
void gml_log_open(int level, const char *pattern);
/* Errors and warnings counted but not printed (over the budget). */
unsigned long gml_log_suppressed(void);
void gml_log_hold(bool hold); /* fork handlers: takes / releases the log lock */

/* Pools (pools.c) */
/* The pool of `device`, created on first use; NULL if gmlake cannot run there (logged once). */
gml_pool *gml_pool_of(int device);
void gml_pools_hold_creation(bool hold); /* fork handlers: the pool-creation lock */
/* Device `accessor` may access device `owner`'s memory (peer access was enabled): owner's pool,
 * now or when it is created, maps its present and future memory for accessor too.  Ignores
 * out-of-range ordinals and owner == accessor. */
void gml_peer_grant(int owner, int accessor);
/* The program gives the cache of `device` back (gmlake_empty_cache and PyTorch's
 * cudaMemPoolTrimTo of the default pool holding no fewer bytes than it keeps, hooks.c): its pool releases
 * every cached chunk after waiting for the device, or, unless may_wait (a capture may be under way, where a device wait
 * is an unsafe call), only what is known idle; the trace records an E event, where the replay
 * gives the cache back too.  GMLAKE_ERR_NO_POOL (and no event) where the device has no pool; GMLAKE_ERR_DEVICE (and
 * nothing done) in a forked child, whose pools and trace file are the parent's. */
int gml_give_back(int device, bool may_wait);

/* Ownership (owner.c).  The pool whose memory holds ptr (home arena or a stitched range), or NULL
 * (foreign pointer); takes each pool's lock. */
gml_pool *gml_owner(uintptr_t ptr, int *device);
/* The pool whose home arena holds ptr, or NULL: no lock, no lookup (the arenas' ranges are fixed
 * when a pool is installed).  A stitched block lies outside every arena. */
gml_pool *gml_arena_owner(uintptr_t ptr, int *device);
/* The pool holding a live allocation that starts at ptr (one hash lookup per pool), or NULL. */
gml_pool *gml_live_owner(uintptr_t ptr, int *device);
/* Records the arena of the pool about to be installed for `device` (pools.c). */
void gml_arena_note(int device, gml_pool *p);
/* Whether a graph capture may be under way in the process (capture.c: counted by the capture
 * hooks; true when in doubt). */
bool gml_capture_under_way(void);
/* Graph memory (graphmem.c; its contract at the top of that file): what a stream allocates while
 * it captures a graph, held for as long as CUDA keeps the graph.  Codes are CUresult.
 * gml_graph_capture_id: the id of the capture stream s (as named: the driver's handles) is part
 *   of (*id 0: none) and, if active is not NULL, whether it is active (not invalidated); the
 *   query's error, else 0.
 * gml_graph_reuse: memory of device's pool that capture `id` (or, where the program named a graph
 *   pool for `stream`, its handle, an earlier capture into that pool) freed on stream s and that
 *   fits `size` (true, *out set): the best fit among the pieces freed there, split where the rest
 *   is worth keeping.
 * gml_graph_note: pool p (of device) served ptr (size bytes) to capture id on `stream` (the
 *   program's handle); false when it cannot be recorded (no host memory): the caller frees it
 *   and answers out of memory.
 * gml_graph_piece: whether ptr is the start of a piece of a graph's memory (live or not), and
 *   its pool and device: such a pointer may lie inside one of the pool's blocks.
 * gml_graph_tracking: whether any graph's piece is tracked (one load); while not, no pointer is
 *   a graph's and gml_graph_free need not be asked.
 * gml_graph_free: a free of ptr during capture `capture` (0: outside any) on stream s:
 *   GML_GRAPH_NOT_MINE when ptr is no graph's block (the caller goes on), else the answer.
 *   may_wait: no capture is under way, so the device may be waited for (else a block that needs
 *   it waits for a later reap).
 * gml_graph_ended: capture id ended with graph g (NULL: without a graph).
 * gml_graph_reap: returns the memory of graphs CUDA destroyed since the last call (may_wait: as
 *   for gml_graph_free); gml_graph_reap_pending: whether it has anything to do (two loads).
 * gml_graph_stream_retired: the program destroys stream s (a created stream's handle, or a
 *   thread's per-thread stream at its exit): a later stream with its key is another one.
 * gml_graph_forget_pool: pool p is about to be reset (reset.c): every record of its blocks ends,
 *   so that no later free or reap acts on what the fresh pool puts at their addresses.
 * gml_free_served: the last step of every free of a live gmlake block: the pool's free (which
 *   the trace records), the end of its IPC export (a gmlake status). */
enum { GML_GRAPH_NOT_MINE = -1 };
int gml_graph_capture_id(CUstream s, uint64_t *id, bool *active);
bool gml_graph_reuse(uint64_t id, int device, gml_stream s, uintptr_t stream, size_t size, uintptr_t *out);
bool gml_graph_note(uint64_t id, gml_pool *p, int device, uintptr_t stream, uintptr_t ptr, size_t size);
bool gml_graph_piece(uintptr_t ptr, gml_pool **p, int *device);
int gml_graph_free(uintptr_t ptr, uint64_t capture, gml_stream s, bool may_wait);
void gml_graph_ended(uint64_t id, CUgraph g);
bool gml_graph_reap_pending(void);
bool gml_graph_tracking(void);
void gml_graph_reap(bool may_wait);
void gml_graph_stream_retired(gml_stream s);
void gml_graph_forget_pool(gml_pool *p);
int gml_free_served(gml_pool *p, uintptr_t ptr, gml_stream stream);
/* Logs why `size` bytes could not be served on `device`: the process's first report at warn
 * level, later ones at info (report.c); sets gml_oom_pending, which the next allocation gmlake
 * serves clears.  gml_oom_summary (at exit) repeats the last report at warn level if the last
 * allocation was refused and it was not the only one. */
void gml_oom_report(int device, gml_pool *p, size_t size);
void gml_oom_summary(void);
extern atomic_bool gml_oom_pending;
/* PyTorch's allocator route (pytorch_env.c): what to do with its environment.  conf[i] is the
 * value of gml_torch_vars[i], PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF (NULL: unset; an empty
 * one is set, as for PyTorch, which reads the first one set and whose versions differ on which
 * that is: the plan holds whichever it reads).  Each is read as PyTorch reads it (blanks dropped
 * anywhere, every entry):
 *  GML_TORCH_KEEP    every set variable names a backend, and it is cudaMallocAsync: nothing to do;
 *  GML_TORCH_SET     value[i], where not empty, is gml_torch_vars[i]'s new value: neither set, the
 *                    older variable backend:cudaMallocAsync; else each set one that names no
 *                    backend gets ",backend:cudaMallocAsync" appended (its trailing blanks and
 *                    commas dropped first: PyTorch refuses the empty entry they would make);
 *  GML_TORCH_BYPASS  the user keeps PyTorch's own allocator (a backend other than cudaMallocAsync,
 *                    or expandable_segments, in either variable; or one too long to extend): its
 *                    allocations will not reach gmlake.
 * *var: the variable that names the route (PYTORCH_ALLOC_CONF where set), or that keeps PyTorch's
 * allocator. */
enum gml_torch_action { GML_TORCH_KEEP, GML_TORCH_SET, GML_TORCH_BYPASS };
#define GML_TORCH_VALUE 4096
extern const char *const gml_torch_vars[2];
int gml_torch_plan(const char *const conf[2], const char **var, char value[2][GML_TORCH_VALUE]);
/* CUDA IPC of gmlake memory (ipc.c; how it works at the top of that file).  Codes are CUresult.
 * gml_ipc_export: a handle (64 bytes) for the live allocation of pool p (device `device`) that
 * holds ptr; CUDA_ERROR_INVALID_VALUE when ptr lies in no live allocation, CUDA_ERROR_NOT_SUPPORTED
 * when the pool's device cannot export its chunks (no opener could map them).
 * gml_ipc_forget: the allocation starting at base was freed; its export, if any, ends.
 * gml_ipc_forget_device: device's pool is about to be reset: every export of it ends.
 * gml_ipc_is_ours: whether a handle is one gml_ipc_export made (in any process).
 * gml_ipc_open: maps the allocation a handle of another process names on `device` (the caller's
 * current one); the same handle opened again on the same device gives the same pointer and
 * counts a reference (on another device: a mapping of its own, as CUDA's).
 * gml_ipc_close: drops a reference of a pointer gml_ipc_open gave (unmapped at the last);
 * -1 when ptr is not one (the real function answers). */
int gml_ipc_export(gml_pool *p, int device, uintptr_t ptr, void *handle);
void gml_ipc_forget(uintptr_t base);
void gml_ipc_forget_device(int device);
bool gml_ipc_is_ours(const void *handle);
int gml_ipc_open(int device, const void *handle, uintptr_t *out);
int gml_ipc_close(uintptr_t ptr);
/* Whether ptr lies in an allocation this process opened (gml_ipc_open): its first byte and size. */
bool gml_ipc_opened_range(uintptr_t ptr, uintptr_t *base, size_t *size);
/* Trace (trace.c).  A trace is one device (the first device recorded under trace_file, others
 * with .devN before its extension).  gml_trace_record is the recorder of every pool (set by
 * pools.c where a trace is recorded, gml_trace_on; arg: the device as a pointer-sized number): the
 * pool calls it under its lock on each allocation and free it serves, so the trace is in the
 * pool's order.  gml_trace_event appends what the pool does not see (an `E`, where the program
 * gave the cache back).  The stream column is gmlake's key of
 * the stream (core/device.h: a created stream's handle, or the key of a thread's per-thread
 * default stream or of a context's legacy stream), so that replay tells the streams apart as the
 * pool did.  Calls with no stream (cudaMalloc, cudaFree, cuMemAlloc, cuMemFree) are recorded with
 * stream 0xffffffffffffffff (GML_STREAM_NONE), which replay treats as they were served. */
bool gml_trace_on(void);
void gml_trace_record(void *device, char op, uintptr_t ptr, size_t size, gml_stream stream);
void gml_trace_event(int device, char op, uintptr_t ptr, size_t size, uintptr_t stream);
/* Sets the trace file from trace_file (trace.c; "": none). */
void gml_trace_setup(const char *pattern);
void gml_trace_flush(void);
void gml_trace_hold(bool hold); /* fork handlers: the trace lock */
/* Registers the exit summary and the stats file (summary.c; pattern "": no stats file). */
void gml_summary_setup(const char *stats_pattern);
/* The first pool is made (pools.c, under the creation lock): the stats file is claimed for this
 * process (opened and locked; another process's: said, and none is written here). */
void gml_summary_claim(void);

#endif /* GML_INTERPOSE_H */
