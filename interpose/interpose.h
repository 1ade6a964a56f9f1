/*
 * interpose.h — the preload layer: exported cuda* / cu* / dlsym hooks that turn CUDA allocation
 * calls into pool calls and forward everything else untouched.  Thin: no allocation policy here.
 *
 * How to add an interceptor
 *  1. Add the real function to `struct gml_real` (resolve.c) with its CUDA prototype's type, and
 *     its name to the list in resolve_all (runtime: RTLD_NEXT; driver: libcuda.so.1).
 *  2. Write the hook in hooks.c with exactly the CUDA prototype (the header declaration checks the
 *     type; GML_CHECK_TYPE asserts it against the CUDA typedef as well) and export it with GML_HOOK.
 *  3. Add {name, hook} to the sorted table in resolve.c (dlsym, cuGetProcAddress and
 *     cudaGetDriverEntryPoint hand it out), keeping the names in strcmp order (a test checks).
 *
 * Rules every hook follows
 *  - GML_REAL(fn) always reaches the real function.  A call made while this thread is inside
 *    gmlake (depth > 0), or with gmlake disabled, or that gmlake cannot serve, passes through.
 *  - Streams capturing a graph: allocations pass through to CUDA.  A gmlake pointer freed during
 *    capture stays allocated (logged once): reusing it could corrupt the graph's replays.
 *  - A free of a pointer gmlake does not own goes to the real function; of a pointer that is
 *    inside gmlake's memory but not a live allocation (double free, interior pointer): the real
 *    runtime's error code, one log line, the pool untouched.
 *  - Out of memory after the pool released its cache: cudaErrorMemoryAllocation /
 *    CUDA_ERROR_OUT_OF_MEMORY.
 */
#ifndef GML_INTERPOSE_H
#define GML_INTERPOSE_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stddef.h>

#include "config/config.h"
#include "core/pool.h"

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
    CUresult (*cuCtxGetCurrent)(CUcontext *);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuStreamDestroy_v2)(CUstream);
    CUresult (*cuStreamDestroy)(CUstream);
};
extern struct gml_real gml_real;

/* Resolves the real dlsym (once). */
void gml_resolve(void);
/* Looks the real `name` up and stores it in *slot; NULL while it is not loaded yet. */
void *gml_resolve_one(void **slot, const char *name);
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
/* Appends an event to the trace file, if one is configured.  The stream column is gmlake's key of
 * the stream (core/device.h: a created stream's handle, or the key of a thread's per-thread
 * default stream or of a context's legacy stream), so that replay tells the streams apart as the
 * pool did.  Calls with no stream (cudaMalloc, cudaFree, cuMemAlloc, cuMemFree) are recorded with
 * stream 0xffffffffffffffff (GML_STREAM_NONE), which replay treats as they were served. */
void gml_trace_event(char op, uintptr_t ptr, size_t size, uintptr_t stream);

#endif /* GML_INTERPOSE_H */
