/* fake_cuda.h — what the fake CUDA driver (libcuda.so.1 built from fake_cuda.c and fake_streams.c)
 * lets tests see and control.  The fake implements the driver functions gmlake uses: memory on
 * top of the sim device (host memory, fake_cuda.c); contexts, streams, events, synchronisation,
 * graph capture and fork as demanding as the GPU (fake_streams.c).  The counters say which calls
 * reached it. */
#ifndef GML_FAKE_CUDA_H
#define GML_FAKE_CUDA_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct fake_counts {
    int mem_alloc, mem_free, mem_alloc_async, mem_free_async, ctx_sync, vmm_create, get_proc;
    int rt_malloc, rt_free, rt_malloc_async, rt_free_async, rt_ipc, rt_trim;
    int reentered;          /* routing calls (device, capture, default pool) made inside the runtime */
    int capture_nodes;      /* events recorded into a capture */
    int capture_violations; /* potentially unsafe calls refused during capture */
    int events_live, events_created, streams_live;
    int capture_queries;    /* stream capture status queries (driver and runtime) */
    int resets;             /* primary contexts reset (cuDevicePrimaryCtxReset, cudaDeviceReset) */
    int dead_event_uses;    /* uses of an event whose context was reset or ended since (a crash on
                             * the GPU) */
    int contexts_ended;     /* contexts destroyed (cuCtxDestroy) or primary ones released to zero */
} fake_counts;

/* Device d's default memory pool is FAKE_DEFAULT_POOL + d. */
#define FAKE_DEFAULT_POOL ((void *)0x9001)

fake_counts *fake_cuda_counts(void);
/* Whether ptr is a live allocation of the fake's own (pass-through) allocator. */
int fake_cuda_owns(uintptr_t ptr);
/* The devices (bit d) that may read and write the mapped granule holding p. */
uint64_t fake_cuda_access(uintptr_t p);

/* ---- contexts, streams, work (fake_streams.c) ----
 * Two devices, each with a primary context; no current context means device 0's primary one. */
#define FAKE_DEVICES 2
#define FAKE_STREAM_BASE ((uintptr_t)0x5000000)
/* A new context on `device` (its own legacy stream); NULL when there are too many.  cuCtxDestroy
 * ends it: its work completes, its created streams are destroyed, its events die (their later
 * uses counted in dead_event_uses).  A primary context counts the references
 * cuDevicePrimaryCtxRetain takes and cuDevicePrimaryCtxRelease drops; it ends alike at zero. */
CUcontext fake_cuda_ctx_create(int device);
/* Makes device's primary context current on this thread (what cudaSetDevice does). */
void fake_cuda_set_device(int device);
/* The device of the current context (a host-side query: no routing call, answers after a fault). */
int fake_current_device(void);
/* true: a destroyed stream's handle is handed out again only after all 4096 others (as if the
 * driver's allocator rarely reused addresses); false (default): at once. */
void fake_cuda_reuse_handles_last(bool yes);
/* Submits one unit of work to the stream (as this thread names it); 0, or -1 for a bad handle. */
int fake_cuda_launch(CUstream s);
/* Units submitted to the stream and not completed yet (-1 for a bad handle). */
int fake_cuda_pending(CUstream s);
/* While set, cuGraphRetainUserObject fails (CUDA_ERROR_INVALID_VALUE). */
void fake_cuda_fail_retain(bool fail);
/* Completes every unit of work on every stream. */
void fake_cuda_finish_all(void);
/* While held, every wait (cuCtxSynchronize, cuEventSynchronize on pending work,
 * cuStreamSynchronize) blocks; fake_cuda_await_waiter returns once a call is blocked there. */
void fake_cuda_hold_waits(bool hold);
void fake_cuda_await_waiter(void);
/* The next `times` cuCtxSynchronize calls fail with `code`. */
void fake_cuda_fail_sync(CUresult code, int times);
/* A sticky fault (e.g. CUDA_ERROR_ILLEGAL_ADDRESS): every later cuCtxSynchronize returns it. */
void fake_cuda_fault(int code);
int fake_cuda_faulted(void);
/* True in a child forked from a process that has the fake loaded (every call then fails). */
bool fake_forked(void);

/* ---- for the fake runtime (fake_cudart.c) ---- */
/* Its entry points bracket their bodies with these (see `reentered`). */
void fake_runtime_enter(void);
void fake_runtime_leave(void);
/* What cuStreamIsCapturing / cuDeviceGetDefaultMemPool answer, for the fake runtime's own use
 * (not counted as routing calls; a status query is counted in capture_queries). */
int fake_capture_status(void *stream, int *status);
int fake_default_pool(void **pool, int device);

#endif
