/* test_peers.c — two fake devices: peer access reaches gmlake memory (present, future, stitched;
 * runtime and driver), and a device whose current memory pool is not the default one has its
 * stream-ordered allocations passed to CUDA. */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

#define MiB ((size_t)1 << 20)

static gmlake_stats stats(int d)
{
    gmlake_stats s = {0};
    cr_assert_eq(gmlake_get_stats(d, &s), GMLAKE_OK);
    return s;
}

/* Every granule of [p, p+n) may be accessed by exactly the devices in mask. */
static bool access_is(void *p, size_t n, uint64_t mask)
{
    for (size_t off = 0; off < n; off += 2 * MiB)
        if (fake_cuda_access((uintptr_t)p + off) != mask)
            return false;
    return fake_cuda_access((uintptr_t)p + n - 1) == mask;
}

Test(peers, peer_access_reaches_present_and_future_memory)
{
    void *a, *b, *v[8];
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaMalloc(&a, 3 * MiB), cudaSuccess);
    cr_assert(access_is(a, 3 * MiB, 1), "device 0 only");
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess);
    cr_assert(access_is(a, 3 * MiB, 3), "device 1 may now access device 0's block");
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaMalloc(&b, 40 * MiB), cudaSuccess);
    cr_assert(access_is(b, 40 * MiB, 3), "and memory device 0's pool maps later");
    /* a stitched block: free every other 2 MiB block, then ask for 8 MiB */
    for (int i = 0; i < 8; i++)
        cr_assert_eq(cudaMalloc(&v[i], 2 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(b), cudaSuccess);
    cr_assert_eq(gmlake_empty_cache(0), GMLAKE_OK);
    for (int i = 0; i < 8; i += 2)
        cr_assert_eq(cudaFree(v[i]), cudaSuccess);
    uint64_t stitches = stats(0).stitches;
    void *s;
    cr_assert_eq(cudaMalloc(&s, 8 * MiB), cudaSuccess);
    cr_assert_eq(stats(0).stitches, stitches + 1, "8 MiB made of four free 2 MiB chunks");
    cr_assert(access_is(s, 8 * MiB, 3), "a stitched range too");
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

Test(peers, peer_access_granted_before_the_pool_exists)
{
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    void *p;
    cr_assert_eq(cudaMalloc(&p, 5 * MiB), cudaSuccess);
    cr_assert_eq(stats(1).allocations, 1, "device 1's own pool");
    cr_assert(access_is(p, 5 * MiB, 3), "device 0 may access it");
}

Test(peers, driver_peer_access)
{
    CUcontext c0, c1;
    cr_assert_eq(cuDevicePrimaryCtxRetain(&c0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuDevicePrimaryCtxRetain(&c1, 1), CUDA_SUCCESS);
    cr_assert_eq(cuCtxSetCurrent(c1), CUDA_SUCCESS);
    CUdeviceptr d;
    cr_assert_eq(cuMemAlloc_v2(&d, 3 * MiB), CUDA_SUCCESS);
    cr_assert(access_is((void *)d, 3 * MiB, 2), "device 1 only");
    cr_assert_eq(cuCtxSetCurrent(c0), CUDA_SUCCESS);
    cr_assert_eq(cuCtxEnablePeerAccess(c1, 0), CUDA_SUCCESS);
    cr_assert(access_is((void *)d, 3 * MiB, 3), "device 0 may access device 1's block");
    CUcontext cur;
    cr_assert_eq(cuCtxGetCurrent(&cur), CUDA_SUCCESS);
    cr_assert_eq(cur, c0, "the current context is unchanged");
}

Test(peers, another_memory_pool_passes_through)
{
    void *p;
    cr_assert_eq(cudaMallocAsync(&p, MiB, (cudaStream_t)0x10), cudaSuccess);
    cr_assert_eq(stats(0).allocations, 1, "the default pool: gmlake serves");
    cr_assert_eq(cudaDeviceSetMemPool(0, (cudaMemPool_t)0x7777), cudaSuccess);
    void *q;
    cr_assert_eq(cudaMallocAsync(&q, MiB, (cudaStream_t)0x10), cudaSuccess);
    cr_assert(fake_cuda_owns((uintptr_t)q), "another current pool: CUDA serves");
    CUdeviceptr d;
    cr_assert_eq(cuMemAllocAsync(&d, MiB, (CUstream)0x10), CUDA_SUCCESS);
    cr_assert(fake_cuda_owns(d), "the driver call too");
    cr_assert_eq(stats(0).allocations, 1);
    cr_assert_eq(cudaFreeAsync(q, (cudaStream_t)0x10), cudaSuccess);
    cr_assert_eq(cuMemFreeAsync(d, (CUstream)0x10), CUDA_SUCCESS);
    cr_assert_eq(cuDeviceSetMemPool(0, (CUmemoryPool)FAKE_DEFAULT_POOL), CUDA_SUCCESS);
    cr_assert_eq(cudaMallocAsync(&q, MiB, (cudaStream_t)0x10), cudaSuccess);
    cr_assert_eq(stats(0).allocations, 2, "the default pool again: gmlake serves");
}

/* cudaMallocAsync takes memory from the current pool of the stream's device, whichever device is
 * current (CUDA's documentation of cudaMallocAsync and cudaDeviceSetMemPool): a stream of device 1
 * gets device 1's memory while device 0 is current (gmlake used to serve it from device 0's pool:
 * memory device 1's kernels cannot reach). */
Test(peers, a_stream_of_another_device_allocates_on_that_device)
{
    cudaStream_t s1;
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s1), cudaSuccess);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    void *p;
    CUdeviceptr d;
    cr_assert_eq(cudaMallocAsync(&p, 3 * MiB, s1), cudaSuccess);
    cr_assert_eq(cuMemAllocAsync(&d, MiB, (CUstream)s1), CUDA_SUCCESS);
    cr_assert(!fake_cuda_owns((uintptr_t)p) && !fake_cuda_owns(d), "served by gmlake");
    cr_assert(access_is(p, 3 * MiB, 2), "device 1's memory, not device 0's");
    cr_assert(access_is((void *)d, MiB, 2), "the driver call too");
    cr_assert_eq(fake_current_device(), 0, "the current device is unchanged");
    cr_assert_eq(stats(1).allocations, 2);
    cr_assert_eq(cudaFreeAsync(p, s1), cudaSuccess);
    cr_assert_eq(cuMemFreeAsync(d, (CUstream)s1), CUDA_SUCCESS);
    cr_assert_eq(stats(1).active_bytes, 0);
    cr_assert_eq(cudaStreamDestroy(s1), cudaSuccess);
}

/* A thread remembers its last stream's device; a stream destroyed and its handle made again on
 * another device must not keep the old answer (the fake hands a destroyed handle out first). */
Test(peers, a_stream_handle_made_again_on_another_device_allocates_there)
{
    cudaStream_t s1, s0;
    void *p;
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s1), cudaSuccess);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, MiB, s1), cudaSuccess); /* remembered: device 1 */
    cr_assert(access_is(p, MiB, 2));
    cr_assert_eq(cudaFreeAsync(p, s1), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s1), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s0), cudaSuccess); /* on device 0 */
    cr_assert_eq(s0, s1, "the fake made the same handle again");
    cr_assert_eq(cudaMallocAsync(&p, 2 * MiB, s0), cudaSuccess);
    cr_assert(access_is(p, 2 * MiB, 1), "device 0's memory: the old answer was not kept");
    cr_assert_eq(cudaFreeAsync(p, s0), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s0), cudaSuccess);
}

/* cuMemAllocFromPoolAsync names its pool: a device's default pool is gmlake's, whatever pool is
 * current (gmlake used to pass the call on to cuMemAllocAsync, which allocates from the current
 * pool: another pool than the one asked for). */
Test(peers, a_named_default_pool_is_served_whatever_the_current_pool)
{
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(cuDeviceSetMemPool(0, (CUmemoryPool)0x7777), CUDA_SUCCESS);
    CUdeviceptr d;
    cr_assert_eq(cuMemAllocFromPoolAsync(&d, MiB, (CUmemoryPool)FAKE_DEFAULT_POOL, (CUstream)s), CUDA_SUCCESS);
    cr_assert(!fake_cuda_owns(d), "the default pool: gmlake serves");
    cr_assert_eq(stats(0).allocations, 1);
    cr_assert_eq(cuMemFreeAsync(d, (CUstream)s), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocFromPoolAsync(&d, MiB, (CUmemoryPool)0x7777, (CUstream)s), CUDA_SUCCESS);
    cr_assert(fake_cuda_owns(d), "another pool: CUDA serves");
    cr_assert_eq(cuMemFreeAsync(d, (CUstream)s), CUDA_SUCCESS);
}
