/* test_routing.c — the interposer against the fake CUDA runtime and driver (tests/fake), run
 * linked against libgmlake ahead of them (as LD_PRELOAD puts it): which calls gmlake serves, which
 * reach CUDA, and the error codes. */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <string.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"
#include "stitched.h"
#include "tools/trace.h"
#include <stdlib.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

/* Exported by libgmlake for this test: the names of its hook table, in order. */
const char *gmlake_hook_name(size_t i);
/* What cuda_runtime_api.h names cudaGetDriverEntryPoint[ByVersion] in a program built with
 * --default-stream per-thread (CUDA_API_PER_THREAD_DEFAULT_STREAM). */
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *driverStatus);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                  unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *driverStatus);

static gmlake_stats stats(void)
{
    gmlake_stats s;
    memset(&s, 0, sizeof s);
    cr_assert_eq(gmlake_get_stats(0, &s), GMLAKE_OK);
    return s;
}

Test(routing, cudaMalloc_is_served_by_gmlake)
{
    fake_counts before = *fake_cuda_counts();
    void *p = NULL;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    cr_assert_eq((uintptr_t)p % 512, 0);
    cr_assert_eq(stats().allocations, 1);
    cr_assert_eq(stats().active_bytes, 3 * MiB);
    cr_assert_eq(fake_cuda_counts()->rt_malloc, before.rt_malloc, "the real cudaMalloc was not called");
    cr_assert_geq(fake_cuda_counts()->vmm_create, 2, "chunks came from cuMemCreate");
    memset(p, 0xab, 3 * MiB);
    cr_assert_eq(((unsigned char *)p)[3 * MiB - 1], 0xab);
    int syncs = fake_cuda_counts()->ctx_sync;
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->rt_free, before.rt_free, "the real cudaFree was not called");
    cr_assert_eq(fake_cuda_counts()->ctx_sync, syncs + 1, "cudaFree waits for the device");
    cr_assert_eq(stats().active_bytes, 0);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

Test(routing, async_calls_and_driver_calls_are_served)
{
    void *p;
    cr_assert_eq(cudaMallocAsync(&p, 5 * MiB, (cudaStream_t)0x10), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, (cudaStream_t)0x10), cudaSuccess);
    CUdeviceptr d;
    cr_assert_eq(cuMemAlloc_v2(&d, 2 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&d, 1000, (CUstream)0x10), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(d, (CUstream)0x10), CUDA_SUCCESS);
    cr_assert_eq(stats().allocations, 3);
    cr_assert_eq(fake_cuda_counts()->rt_malloc_async + fake_cuda_counts()->mem_alloc +
                 fake_cuda_counts()->mem_alloc_async, 0, "nothing reached the fake allocators");
    cr_assert_eq(cuMemAllocFromPoolAsync(&d, 4096, (CUmemoryPool)0x9001, 0), CUDA_SUCCESS);
    cr_assert_eq(stats().allocations, 4, "the default pool is served");
    cr_assert_eq(cuMemFree_v2(d), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocFromPoolAsync(&d, 4096, (CUmemoryPool)0x5555, 0), CUDA_SUCCESS);
    cr_assert_eq(fake_cuda_counts()->mem_alloc_async, 1, "another pool passes through");
    cr_assert(fake_cuda_owns(d));
    cr_assert_eq(cuMemFree_v2(d), CUDA_SUCCESS, "its free reaches the fake");
    cr_assert_eq(fake_cuda_counts()->mem_free, 1);
}

Test(routing, foreign_pointers_pass_through_and_a_capture_is_served)
{
    void *p = NULL;
    cudaStream_t c;
    cudaGraph_t g;
    cr_assert_eq(cudaStreamCreate(&c), cudaSuccess);
    /* a device whose current pool is not its default one: stream-ordered calls pass through */
    cr_assert_eq(cudaDeviceSetMemPool(0, (cudaMemPool_t)0x7777), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, MiB, c), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->rt_malloc_async, 1, "the allocation went to CUDA");
    cr_assert(fake_cuda_owns((uintptr_t)p));
    cr_assert_eq(gmlake_get_stats(0, &(gmlake_stats){0}), GMLAKE_ERR_NO_POOL, "gmlake served nothing");
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->rt_free, 1, "a foreign pointer's free reaches CUDA");
    cr_assert(!fake_cuda_owns((uintptr_t)p));
    cr_assert_eq(cudaFree(NULL), cudaSuccess);
    cr_assert_eq(cudaDeviceSetMemPool(0, (cudaMemPool_t)FAKE_DEFAULT_POOL), cudaSuccess);
    /* a capturing stream's allocation is gmlake's, held for the graph */
    cr_assert_eq(cudaStreamBeginCapture(c, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, MiB, c), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->rt_malloc_async, 1, "gmlake served it");
    cr_assert(!fake_cuda_owns((uintptr_t)p));
    /* a gmlake pointer of no capture freed during capture stays allocated */
    void *q;
    cr_assert_eq(cudaMalloc(&q, MiB), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(q, c), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 2);
    cr_assert_eq(cudaStreamEndCapture(c, &g), cudaSuccess);
}

Test(routing, resolvers_return_the_hooks)
{
    void *hook = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"), *fn = NULL;
    void *libcuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    cr_assert_not_null(libcuda);
    cr_assert_eq(dlsym(libcuda, "cuMemAlloc_v2"), hook, "dlsym on a libcuda handle");
    cr_assert_eq(cuGetProcAddress_v2("cuMemAlloc", &fn, 13000, 0, NULL), CUDA_SUCCESS);
    cr_assert_eq(fn, hook, "cuGetProcAddress_v2");
    cr_assert_eq(cuGetProcAddress_v2("cuMemAllocAsync", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, NULL), CUDA_SUCCESS);
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz"), "the per-thread variant");
    cr_assert_eq(cuGetProcAddress_v2("cuGetProcAddress", &fn, 13000, 0, NULL), CUDA_SUCCESS);
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuGetProcAddress_v2"), "nested lookups are routed too");
    cr_assert_eq(cudaGetDriverEntryPoint("cuMemFree", &fn, cudaEnableDefault, NULL), cudaSuccess);
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuMemFree_v2"), "cudaGetDriverEntryPoint");
    CUdeviceptr d;
    cr_assert_eq(((CUresult (*)(CUdeviceptr *, size_t))hook)(&d, MiB), CUDA_SUCCESS);
    cr_assert_eq(stats().allocations, 1, "a call through the resolved pointer is served");
    cr_assert_null(dlsym(libcuda, "cuNoSuchFunction"));
    for (size_t i = 1; gmlake_hook_name(i); i++)
        cr_assert_lt(strcmp(gmlake_hook_name(i - 1), gmlake_hook_name(i)), 0, "the hook table is sorted");
}

/* A program built with --default-stream per-thread resolves driver functions through the runtime's
 * _ptsz resolvers: they hand out the hooks too (by default the per-thread stream's), so that a
 * driver free of memory gmlake served is gmlake's, not CUDA's (which refuses it, and the block is
 * lost). */
Test(routing, the_per_thread_resolvers_of_the_runtime_return_the_hooks)
{
    void *fn = NULL, *free_fn = NULL;
    enum cudaDriverEntryPointQueryResult st = cudaDriverEntryPointSymbolNotFound;
    cr_assert_eq(cudaGetDriverEntryPoint_ptsz("cuMemAllocAsync", &fn, cudaEnableDefault, &st), cudaSuccess);
    cr_assert_eq(st, cudaDriverEntryPointSuccess);
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuMemAllocAsync_ptsz"), "the per-thread hook by default");
    cr_assert_eq(cudaGetDriverEntryPoint_ptsz("cuMemFreeAsync", &fn, cudaEnableLegacyStream, NULL), cudaSuccess);
    cr_assert_eq(fn, dlsym(RTLD_DEFAULT, "cuMemFreeAsync"), "the legacy stream's when asked");
    cr_assert_eq(cudaGetDriverEntryPointByVersion_ptsz("cuMemFree", &free_fn, 13000, cudaEnableDefault, NULL),
                 cudaSuccess);
    cr_assert_eq(free_fn, dlsym(RTLD_DEFAULT, "cuMemFree_v2"));
    cr_assert_eq(cudaGetDriverEntryPoint_ptsz("cuNoSuchFunction", &fn, cudaEnableDefault, &st),
                 cudaErrorSymbolNotFound, "the runtime's own error");
    cr_assert_eq(st, cudaDriverEntryPointSymbolNotFound);
    cr_assert_eq(cudaGetLastError(), cudaErrorSymbolNotFound);
    void *p;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    cr_assert_eq(((CUresult(*)(CUdeviceptr))free_fn)((CUdeviceptr)p), CUDA_SUCCESS, "gmlake frees its block");
    cr_assert_eq(stats().frees, 1);
    cr_assert_eq(stats().active_bytes, 0);
    cr_assert_eq(fake_cuda_counts()->mem_free, 0, "CUDA saw no free");
}

Test(routing, errors_come_back_as_cuda_codes)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree((char *)p + 512), cudaErrorInvalidValue, "interior pointer");
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaErrorInvalidValue, "double free");
    cr_assert_eq(cuMemFree_v2((CUdeviceptr)p), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK, "the pool is intact");
    cr_assert_eq(cudaMalloc(&p, 1024 * MiB), cudaErrorMemoryAllocation, "1 GiB on a 256 MiB device");
    CUdeviceptr d;
    cr_assert_eq(cuMemAlloc_v2(&d, 1024 * MiB), CUDA_ERROR_OUT_OF_MEMORY);
    cr_assert_eq(stats().failed_allocations, 2);
    cr_assert_eq(cudaMalloc(&p, 100 * MiB), cudaSuccess, "usable after out of memory");
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaSuccess, "gmlake exports its memory (test_ipc.c)");
    cr_assert_eq(fake_cuda_counts()->rt_ipc, 0);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

/* A free finds its pool from the pointer's address (home arena) or, for a stitched block (its own
 * range, outside the arena), by the slower search; both report a pointer that is not live. */
Test(routing, stream_ordered_and_stitched_frees_find_their_pool)
{
    cudaStream_t st;
    cr_assert_eq(cudaStreamCreate(&st), cudaSuccess);
    void *p;
    cr_assert_eq(cudaMallocAsync(&p, 3 * MiB, st), cudaSuccess);
    cr_assert_eq(cudaFreeAsync((char *)p + 512, st), cudaErrorInvalidValue, "interior pointer");
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaFreeAsync(p, st), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, st), cudaErrorInvalidValue, "double free");
    cr_assert_eq(cuMemFreeAsync((CUdeviceptr)p, (CUstream)st), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(stats().frees, 1);

    /* a stitched block: free every other 2 MiB block, then ask for 8 MiB */
    void *v[8], *s = stitched_8mib(v);
    memset(s, 0x5a, 8 * MiB);
    cr_assert_eq(cudaFreeAsync((char *)s + 4 * MiB, st), cudaErrorInvalidValue, "inside a stitched block");
    cr_assert_eq(cudaFreeAsync(s, st), cudaSuccess, "a stitched block's stream-ordered free");
    cr_assert_eq(cudaFreeAsync(s, st), cudaErrorInvalidValue, "double free of a stitched block");
    CUdeviceptr d;
    cr_assert_eq(cuMemAllocAsync(&d, 8 * MiB, (CUstream)st), CUDA_SUCCESS);
    cr_assert_eq(stats().stitch_reuses, 1, "the cached stitched block served it again");
    cr_assert_eq(cuMemFree_v2(d), CUDA_SUCCESS, "and a synchronous free through the driver");
    cr_assert_eq(cuMemFree_v2(d), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(stats().live_allocations, 4);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

Test(routing, memory_pool_attributes_speak_of_gmlake)
{
    void *p, *q;
    cr_assert_eq(cudaMallocAsync(&p, 3 * MiB, 0), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&q, 8 * MiB, 0), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(q, 0), cudaSuccess);
    cr_assert_eq(gmlake_empty_cache(0), GMLAKE_OK); /* q's chunks go back: each current below its high */
    gmlake_stats s = stats();
    cr_assert(s.reserved_bytes < s.peak_reserved_bytes && s.active_bytes < s.peak_active_bytes);
    uint64_t v = 0;
    cr_assert_eq(cudaMemPoolGetAttribute((cudaMemPool_t)0x9001, cudaMemPoolAttrReservedMemCurrent, &v), cudaSuccess);
    cr_assert_eq(v, s.reserved_bytes);
    cr_assert_eq(cudaMemPoolGetAttribute((cudaMemPool_t)0x9001, cudaMemPoolAttrReservedMemHigh, &v), cudaSuccess);
    cr_assert_eq(v, s.peak_reserved_bytes);
    cr_assert_eq(cudaMemPoolGetAttribute((cudaMemPool_t)0x9001, cudaMemPoolAttrUsedMemCurrent, &v), cudaSuccess);
    cr_assert_eq(v, 3 * MiB);
    cr_assert_eq(cudaMemPoolGetAttribute((cudaMemPool_t)0x9001, cudaMemPoolAttrUsedMemHigh, &v), cudaSuccess);
    cr_assert_eq(v, 11 * MiB);
    cr_assert_eq(cudaMemPoolGetAttribute((cudaMemPool_t)0x4242, cudaMemPoolAttrUsedMemCurrent, &v), cudaSuccess);
    cr_assert_eq(v, 777, "another pool's attributes come from CUDA");
    cr_assert_eq(cudaFreeAsync(p, 0), cudaSuccess);
    uint64_t zero = 0, five = 5;
    /* a high set to anything but zero is CUDA's invalid value, and resets nothing (before, gmlake
     * reset its peaks before CUDA refused the call) */
    cr_assert_eq(cudaMemPoolSetAttribute((cudaMemPool_t)0x9001, cudaMemPoolAttrReservedMemHigh, &five),
                 cudaErrorInvalidValue);
    cr_assert_eq(cudaMemPoolSetAttribute((cudaMemPool_t)0x9001, cudaMemPoolAttrUsedMemHigh, NULL),
                 cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    gmlake_stats kept = stats();
    cr_assert(kept.peak_active_bytes == s.peak_active_bytes && kept.peak_reserved_bytes == s.peak_reserved_bytes,
              "peaks kept");
    /* either high resets both, as PyTorch does */
    cr_assert_eq(cudaMemPoolSetAttribute((cudaMemPool_t)0x9001, cudaMemPoolAttrReservedMemHigh, &zero), cudaSuccess);
    s = stats();
    cr_assert(s.peak_active_bytes == 0 && s.peak_reserved_bytes == s.reserved_bytes, "peaks reset");
    cr_assert_eq(cudaMallocAsync(&p, MiB, 0), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, 0), cudaSuccess);
    cr_assert_eq(stats().peak_active_bytes, MiB);
    cr_assert_eq(cudaMemPoolSetAttribute((cudaMemPool_t)0x9001, cudaMemPoolAttrUsedMemHigh, &zero), cudaSuccess);
    cr_assert_eq(stats().peak_active_bytes, 0, "peaks reset");
    cr_assert_eq(cudaMemPoolTrimTo((cudaMemPool_t)0x9001, 0), cudaSuccess);
    cr_assert_eq(stats().reserved_bytes, 0, "trim empties gmlake's cache");
    cr_assert_eq(fake_cuda_counts()->rt_trim, 1);
    size_t fr, tot;
    cr_assert_eq(cudaMemGetInfo(&fr, &tot), cudaSuccess);
    cr_assert_eq(tot, 256 * MiB);
}

/* cudaMemPoolTrimTo releases memory until the pool holds fewer than minBytesToKeep reserved bytes:
 * a pool that holds fewer keeps its cache; one that holds that many or more gives it back. */
Test(routing, a_trim_keeps_the_cache_while_the_pool_holds_fewer_bytes_than_asked_to_keep)
{
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, 4 * MiB), cudaSuccess);
    cr_assert_eq(cudaMalloc(&q, 20 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(q), cudaSuccess);
    gmlake_stats s = stats();
    cr_assert_eq(s.reserved_bytes - s.active_bytes, 20 * MiB, "20 MiB cached");
    cudaMemPool_t pool = (cudaMemPool_t)0x9001;
    cr_assert_eq(cudaMemPoolTrimTo(pool, s.reserved_bytes + 1), cudaSuccess);
    cr_assert_eq(stats().reserved_bytes, s.reserved_bytes, "the pool holds fewer bytes than it may keep");
    cr_assert_eq(cudaMemPoolTrimTo(pool, 1024 * MiB), cudaSuccess);
    cr_assert_eq(stats().reserved_bytes, s.reserved_bytes);
    cr_assert_eq(cudaMemPoolTrimTo(pool, s.reserved_bytes), cudaSuccess);
    cr_assert_eq(stats().reserved_bytes, 4 * MiB, "not fewer than it may keep: the cache goes back");
    cr_assert_eq(fake_cuda_counts()->rt_trim, 3, "CUDA's own pool is trimmed each time");
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

Test(routing, trace_file_records_a_replayable_trace)
{
    char path[] = "/tmp/gmlake-trace-XXXXXX";
    trace_to(path); /* before the first hook call of this test process */
    void *a, *b;
    cr_assert_eq(cudaMalloc(&a, 3 * MiB), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&b, 4096, (cudaStream_t)0x20), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(b, (cudaStream_t)0x20), cudaSuccess);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    gml_trace t;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.n, 4);
    cr_assert(t.ev[0].op == 'A' && t.ev[0].size == 3 * MiB && t.ev[0].ptr == (uintptr_t)a);
    cr_assert(t.ev[1].op == 'A' && t.ev[1].stream == 0x20);
    cr_assert(t.ev[2].op == 'F' && t.ev[2].ptr == (uintptr_t)b);
    cr_assert(t.ev[3].op == 'F' && t.ev[3].ptr == (uintptr_t)a);
    gml_trace_free(&t);
    unlink(path);
}

Test(routing, allocation_range_names_the_live_allocation_holding_a_pointer)
{
    void *a = NULL, *b = NULL;
    cr_assert_eq(cudaMalloc(&a, 3 * MiB), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&b, 5000, (cudaStream_t)0x10), cudaSuccess);
    void *base = NULL;
    size_t size = 0;
    cr_assert_eq(gmlake_allocation_range((char *)a + MiB + 7, &base, &size), GMLAKE_OK);
    cr_assert_eq(base, a, "the allocation's first byte");
    cr_assert_eq(size, 3 * MiB);
    cr_assert_eq(gmlake_allocation_range(b, &base, &size), GMLAKE_OK);
    cr_assert_eq(base, b);
    cr_assert_eq(size, 5000);
    cr_assert_eq(gmlake_allocation_range((char *)b + 5000, &base, &size), GMLAKE_ERR_INVALID,
                 "one past the end is not inside");
    int x;
    cr_assert_eq(gmlake_allocation_range(&x, &base, &size), GMLAKE_ERR_INVALID, "host memory");
    cr_assert_eq(gmlake_allocation_range(a, NULL, &size), GMLAKE_ERR_INVALID);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    cr_assert_eq(gmlake_allocation_range(a, &base, &size), GMLAKE_ERR_INVALID, "freed");
    cr_assert_eq(cudaFreeAsync(b, (cudaStream_t)0x10), cudaSuccess);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}
