/* fake_cuda.h — what the fake CUDA driver (libcuda.so.1 built from fake_cuda.c) lets tests see.
 * The fake implements the driver functions gmlake uses on top of the sim device (host memory), so
 * that the interposer can be tested without a GPU; the counters say which calls reached it. */
#ifndef GML_FAKE_CUDA_H
#define GML_FAKE_CUDA_H

#include <stdint.h>

typedef struct fake_counts {
    int mem_alloc, mem_free, mem_alloc_async, mem_free_async, ctx_sync, vmm_create, get_proc;
    int rt_malloc, rt_free, rt_malloc_async, rt_free_async, rt_ipc, rt_trim;
    int reentered;          /* routing calls (device, capture, default pool) made inside the runtime */
    int capture_nodes;      /* events recorded into a capture */
    int capture_violations; /* potentially unsafe calls refused during capture */
} fake_counts;

/* Streams whose handle is FAKE_CAPTURING_STREAM report that they are capturing a graph. */
#define FAKE_CAPTURING_STREAM ((void *)0xCAFE)
#define FAKE_DEVICES 2
/* Device d's default memory pool is FAKE_DEFAULT_POOL + d. */
#define FAKE_DEFAULT_POOL ((void *)0x9001)

fake_counts *fake_cuda_counts(void);
/* Whether ptr is a live allocation of the fake's own (pass-through) allocator. */
int fake_cuda_owns(uintptr_t ptr);
/* The devices (bit d) that may read and write the mapped granule holding p. */
uint64_t fake_cuda_access(uintptr_t p);
/* A sticky fault (e.g. CUDA_ERROR_ILLEGAL_ADDRESS): every later synchronisation returns it. */
void fake_cuda_fault(int code);
int fake_cuda_faulted(void);
/* The fake runtime's entry points bracket their bodies with these (see `reentered`). */
void fake_runtime_enter(void);
void fake_runtime_leave(void);
int fake_current_device(void);
/* What cuStreamIsCapturing / cuDeviceGetDefaultMemPool answer, for the fake runtime's own use
 * (not counted as routing calls). */
int fake_capture_status(void *stream, int *status);
int fake_default_pool(void **pool, int device);
void fake_set_device(int d);

#endif
