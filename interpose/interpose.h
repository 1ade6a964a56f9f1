/*
 * interpose.h — the preload layer: exported cuda* / cu* / dlsym hooks that turn CUDA allocation
 * calls into pool calls and forward everything else untouched.  Thin: no allocation policy here.
 *
 * How to add an interceptor
 *  1. Add the real function to `struct gml_real` (below) with its CUDA prototype's type (runtime:
 *     RTLD_NEXT, else the calling object's scope; driver: RTLD_NEXT, else libcuda.so.1).
 *  2. Write the hook in hooks.c with exactly the CUDA prototype (the header declaration checks the
 *     type; GML_CHECK_TYPE asserts it against the CUDA typedef as well) and export it with GML_HOOK.
 *     A runtime hook starts with GML_RT_ENTRY(); every real call goes through PASS.
 *  3. Add {name, hook} to the sorted table in resolve.c (dlsym, cuGetProcAddress and
 *     cudaGetDriverEntryPoint hand it out), keeping the names in strcmp order (a test checks).
 *
 * Rules every hook follows
 *  - GML_REAL(fn) always reaches the real function, or is NULL (the hook then returns
 *    cudaErrorInitializationError / CUDA_ERROR_NOT_INITIALIZED, never calls NULL).  A call made
 *    while this thread is inside gmlake (depth > 0), or with gmlake disabled, or that gmlake cannot
 *    serve, passes through, with depth raised so that whatever the real function calls is not
 *    routed again.
 *  - dlsym(RTLD_NEXT, ...) from any other object resolves as if gmlake were not there (resolve.c).
 *  - Streams capturing a graph: allocations pass through to CUDA.  A gmlake pointer freed with a
 *    stream-ordered free during capture stays allocated (logged once): reusing it could corrupt
 *    the graph's replays.  A synchronous free (cudaFree, cuMemFree) waits for the pointer's
 *    device as CUDA's does; if that fails (during capture: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 *    and the capture is invalidated, as by CUDA's cudaFree; or a sticky fault) it returns that
 *    error and the block stays allocated.  The pool's own driver calls run in relaxed capture mode and never record
 *    an event into a capture (core/device_cuda.c).
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
 *  - Peer access enabled for a device (cudaDeviceEnablePeerAccess, cuCtxEnablePeerAccess) covers
 *    the peer's gmlake memory, present and future.
 *  - Streams are passed to the pool by their identity (core/device.h keys; hooks.c): implicit
 *    streams name the calling thread's per-thread default stream or the current context's legacy
 *    stream.  A stream the program destroys (cudaStreamDestroy, cuStreamDestroy) is retired in
 *    every pool before the real destroy.
 *  - In a child forked after gmlake started, nothing is served (state.c).
 */
#ifndef GML_INTERPOSE_H
#define GML_INTERPOSE_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "stitch/pool.h"

/* cuda.h maps cuGetProcAddress to its _v2; libcuda exports both, and so does gmlake.  The same
 * for cuStreamDestroy. */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
#undef cuStreamDestroy
CUresult cuStreamDestroy(CUstream hStream);

#include <cudaTypedefs.h>

#define GML_HOOK __attribute__((visibility("default")))
/* Compile-time check of a hook's type against CUDA's own function-pointer typedef. */
#define GML_CHECK_TYPE(fn, pfn)                                                                   \
    _Static_assert(__builtin_types_compatible_p(__typeof__(&fn), pfn), #fn " has the wrong type")

/* The real functions (resolve.c). */
struct gml_real {
    void *(*dlsym)(void *, const char *);
    cudaError_t (*cudaMalloc)(void **, size_t);
    cudaError_t (*cudaFree)(void *);
    cudaError_t (*cudaMallocAsync)(void **, size_t, cudaStream_t);
    cudaError_t (*cudaFreeAsync)(void *, cudaStream_t);
    cudaError_t (*cudaMemGetInfo)(size_t *, size_t *);
    cudaError_t (*cudaMemPoolGetAttribute)(cudaMemPool_t, enum cudaMemPoolAttr, void *);
    cudaError_t (*cudaMemPoolSetAttribute)(cudaMemPool_t, enum cudaMemPoolAttr, void *);
    cudaError_t (*cudaMemPoolTrimTo)(cudaMemPool_t, size_t);
    cudaError_t (*cudaIpcGetMemHandle)(cudaIpcMemHandle_t *, void *);
    cudaError_t (*cudaGetDriverEntryPoint)(const char *, void **, unsigned long long,
                                           enum cudaDriverEntryPointQueryResult *);
    cudaError_t (*cudaGetDriverEntryPointByVersion)(const char *, void **, unsigned int,
                                                    unsigned long long,
                                                    enum cudaDriverEntryPointQueryResult *);
    cudaError_t (*cudaGetDevice)(int *);
    cudaError_t (*cudaStreamIsCapturing)(cudaStream_t, enum cudaStreamCaptureStatus *);
    cudaError_t (*cudaDeviceGetDefaultMemPool)(cudaMemPool_t *, int);
    cudaError_t (*cudaStreamDestroy)(cudaStream_t);
    CUresult (*cuMemAlloc_v2)(CUdeviceptr *, size_t);
    CUresult (*cuMemFree_v2)(CUdeviceptr);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
    CUresult (*cuMemAllocAsync_ptsz)(CUdeviceptr *, size_t, CUstream);
    CUresult (*cuMemFreeAsync_ptsz)(CUdeviceptr, CUstream);
    CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemAllocFromPoolAsync_ptsz)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*cuMemGetInfo_v2)(size_t *, size_t *);
    CUresult (*cuGetProcAddress)(const char *, void **, int, cuuint64_t);
    CUresult (*cuGetProcAddress_v2)(const char *, void **, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult *);
    CUresult (*cuCtxGetDevice)(CUdevice *);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuStreamIsCapturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
    cudaError_t (*cudaGetLastError)(void);
    cudaError_t (*cudaPeekAtLastError)(void);
    cudaError_t (*cudaDeviceSetMemPool)(int, cudaMemPool_t);
    cudaError_t (*cudaDeviceEnablePeerAccess)(int, unsigned int);
    CUresult (*cuDeviceSetMemPool)(CUdevice, CUmemoryPool);
    CUresult (*cuCtxEnablePeerAccess)(CUcontext, unsigned int);
    CUresult (*cuCtxPushCurrent_v2)(CUcontext);
    CUresult (*cuCtxPopCurrent_v2)(CUcontext *);
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuStreamDestroy_v2)(CUstream);
    CUresult (*cuStreamDestroy)(CUstream);
};
extern struct gml_real gml_real;

/* Resolves the real dlsym (once). */
void gml_resolve(void);
/* Looks the real `name` up and stores it in *slot; NULL while it is not loaded yet.  A runtime
 * function that RTLD_NEXT cannot see (libcudart loaded RTLD_LOCAL by a plugin) is looked up in
 * the scope of the object that called the current runtime hook (gml_caller) and cached per
 * calling object, not in *slot. */
void *gml_resolve_one(void **slot, const char *name);
/* The return address of the runtime hook this thread is in: every runtime hook starts with
 * GML_RT_ENTRY() (in the exported function itself, so that it is the program's address). */
extern __thread const void *gml_caller;
#define GML_RT_ENTRY() (gml_caller = __builtin_return_address(0))
#define GML_REAL(fn)                                                                              \
    (__atomic_load_n(&gml_real.fn, __ATOMIC_ACQUIRE)                                              \
         ? gml_real.fn                                                                            \
         : (__typeof__(gml_real.fn))gml_resolve_one((void **)&gml_real.fn, #fn))
/* The real driver symbol `name` (for the cuda device), NULL if missing. */
void *gml_driver_symbol(const char *name);
/* The hook for a real function pointer, or the pointer itself (entry-point resolvers). */
void *gml_hook_for(const char *symbol, void *real);

/* State (state.c) */
extern __thread int gml_depth; /* > 0 while this thread runs inside gmlake */
/* The settings, loaded on first use. */
const gml_config *gml_cfg(void);
/* Whether a hook on this thread should serve the call (enabled, not re-entered). */
bool gml_serving(void);
/* The pool of `device`, created on first use; NULL if gmlake cannot run there (logged once). */
gml_pool *gml_pool_of(int device);
/* The pool whose memory holds ptr, or NULL (foreign pointer). */
gml_pool *gml_owner(uintptr_t ptr, int *device);
void gml_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs (warn level) why `size` bytes could not be served on `device` (report.c). */
void gml_oom_report(int device, gml_pool *p, size_t size);
/* PyTorch's allocator route (pytorch_env.c): what to do with its environment.  alloc_conf and
 * cuda_conf are PYTORCH_ALLOC_CONF and PYTORCH_CUDA_ALLOC_CONF (NULL: unset).
 *  GML_TORCH_KEEP    a backend is named and it is cudaMallocAsync: nothing to do;
 *  GML_TORCH_SET     set *var to value: backend:cudaMallocAsync when neither names anything, or
 *                    the user's options with ",backend:cudaMallocAsync" appended when they name
 *                    no backend and do not ask for expandable_segments;
 *  GML_TORCH_BYPASS  the user keeps PyTorch's own allocator (backend:native, expandable_segments):
 *                    its allocations will not reach gmlake; *var names the variable in effect. */
enum gml_torch_action { GML_TORCH_KEEP, GML_TORCH_SET, GML_TORCH_BYPASS };
int gml_torch_plan(const char *alloc_conf, const char *cuda_conf, const char **var, char *value,
                   size_t len);
/* Appends an event to the trace file, if one is configured.  The stream column is gmlake's key of
 * the stream (core/device.h: a created stream's handle, or the key of a thread's per-thread
 * default stream or of a context's legacy stream), so that replay tells the streams apart as the
 * pool did.  Calls with no stream (cudaMalloc, cudaFree, cuMemAlloc, cuMemFree) are recorded with
 * stream 0xffffffffffffffff (GML_STREAM_NONE), which replay treats as they were served. */
void gml_trace_event(char op, uintptr_t ptr, size_t size, uintptr_t stream);
/* Around a pool free: begin takes the trace lock (if a trace is recorded; returns whether), end
 * appends `F ptr` if `freed` and releases it, so that no other thread can record an allocation
 * of ptr before its free. */
bool gml_trace_free_begin(void);
void gml_trace_free_end(bool tracing, bool freed, uintptr_t ptr, uintptr_t stream);
/* Device `accessor` may access device `owner`'s memory (peer access was enabled): owner's pool,
 * now or when it is created, maps its present and future memory for accessor too.  Ignores
 * out-of-range ordinals and owner == accessor. */
void gml_peer_grant(int owner, int accessor);

#endif /* GML_INTERPOSE_H */
