/* fake_cuda.h — what the fake CUDA driver (libcuda.so.1 built from fake_cuda.c) lets tests see.
 * The fake implements the driver functions gmlake uses on top of the sim device (host memory), so
 * that the interposer can be tested without a GPU; the counters say which calls reached it. */
#ifndef GML_FAKE_CUDA_H
#define GML_FAKE_CUDA_H

#include <cuda.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct fake_counts {
    int mem_alloc, mem_free, mem_alloc_async, mem_free_async, ctx_sync, vmm_create, get_proc;
    int rt_malloc, rt_free, rt_malloc_async, rt_free_async, rt_ipc, rt_trim;
    int events_live, events_created, streams_live;
} fake_counts;

/* Streams whose handle is FAKE_CAPTURING_STREAM report that they are capturing a graph. */
#define FAKE_CAPTURING_STREAM ((void *)0xCAFE)

fake_counts *fake_cuda_counts(void);

/* Contexts, streams, work (fake_streams.c).  Two devices, each with a primary context. */
#define FAKE_DEVICES 2
#define FAKE_STREAM_BASE ((uintptr_t)0x5000000)
/* A new context on `device` (its own legacy stream); NULL when there are too many. */
CUcontext fake_cuda_ctx_create(int device);
/* Makes device's primary context current on this thread (what cudaSetDevice does). */
void fake_cuda_set_device(int device);
/* true: a destroyed stream's handle is handed out again only after all 4096 others (as if the
 * driver's allocator rarely reused addresses); false (default): at once. */
void fake_cuda_reuse_handles_last(bool yes);
/* Submits one unit of work to the stream (as this thread names it); 0, or -1 for a bad handle. */
int fake_cuda_launch(CUstream s);
/* Units submitted to the stream and not completed yet (-1 for a bad handle). */
int fake_cuda_pending(CUstream s);
/* Completes every unit of work on every stream. */
void fake_cuda_finish_all(void);
/* While held, every wait (cuCtxSynchronize, cuEventSynchronize on pending work,
 * cuStreamSynchronize) blocks; fake_cuda_await_waiter returns once a call is blocked there. */
void fake_cuda_hold_waits(bool hold);
void fake_cuda_await_waiter(void);
/* The next `times` cuCtxSynchronize calls fail with `code`. */
void fake_cuda_fail_sync(CUresult code, int times);
/* True in a child forked from a process that used the fake (every call then fails). */
bool fake_forked(void);
/* Whether ptr is a live allocation of the fake's own (pass-through) allocator. */
int fake_cuda_owns(uintptr_t ptr);

#endif
