/* fake_cuda.h — what the fake CUDA driver (libcuda.so.1 built from fake_cuda.c) lets tests see.
 * The fake implements the driver functions gmlake uses on top of the sim device (host memory), so
 * that the interposer can be tested without a GPU; the counters say which calls reached it. */
#ifndef GML_FAKE_CUDA_H
#define GML_FAKE_CUDA_H

#include <stdint.h>

typedef struct fake_counts {
    int mem_alloc, mem_free, mem_alloc_async, mem_free_async, ctx_sync, vmm_create, get_proc;
    int rt_malloc, rt_free, rt_malloc_async, rt_free_async, rt_ipc, rt_trim;
} fake_counts;

/* Streams whose handle is FAKE_CAPTURING_STREAM report that they are capturing a graph. */
#define FAKE_CAPTURING_STREAM ((void *)0xCAFE)

fake_counts *fake_cuda_counts(void);
/* Whether ptr is a live allocation of the fake's own (pass-through) allocator. */
int fake_cuda_owns(uintptr_t ptr);

#endif
