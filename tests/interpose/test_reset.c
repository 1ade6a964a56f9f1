/* test_reset.c — a program that resets its device and goes on (cudaDeviceReset, or the driver's
 * cuDevicePrimaryCtxReset), against the fake CUDA (tests/fake: a reset kills the primary
 * context's events and streams, and counts every later use of such an event, which crashes the
 * process on the GPU).  CUDA's contract: every allocation of the context is destroyed, and the
 * program may allocate again in the fresh context.  gmlake's pool of that device must give its
 * memory back, forget its allocations, streams and events before they die, and serve again. */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <string.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

#define MiB ((size_t)1 << 20)

static gmlake_stats stats(int device)
{
    gmlake_stats s;
    memset(&s, 0, sizeof s);
    cr_assert_eq(gmlake_get_stats(device, &s), GMLAKE_OK);
    return s;
}

/* Blocks of every kind on device 0: freed on a created stream with work pending (its bin holds an
 * event), freed on the legacy stream, and one left live; returns the live one. */
static void *use_the_device(void)
{
    cudaStream_t s;
    void *a = NULL, *b = NULL, *live = NULL;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&a, 4 * MiB, s), cudaSuccess);
    cr_assert_eq(fake_cuda_launch((CUstream)s), 0);
    cr_assert_eq(cudaFreeAsync(a, s), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&b, 3 * MiB, 0), cudaSuccess);
    cr_assert_eq(fake_cuda_launch(0), 0);
    cr_assert_eq(cudaFreeAsync(b, 0), cudaSuccess);
    cr_assert_eq(cudaMalloc(&live, 8 * MiB), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&a, 6 * MiB, s), cudaSuccess); /* a miss: the bins look at events */
    cr_assert_eq(cudaFreeAsync(a, s), cudaSuccess);
    cr_assert_gt(stats(0).reserved_bytes, 0);
    return live;
}

/* After the reset: nothing of the old life is left, and the device serves again, on a new stream
 * that gets the old stream's handle and on the legacy stream, with no dead event used. */
static void after_the_reset(void *stale)
{
    gmlake_stats st = stats(0);
    cr_expect_eq(st.active_bytes, 0, "the reset destroyed every allocation");
    cr_expect_eq(st.reserved_bytes, 0, "and gmlake gave its memory back");
    cr_expect_eq(st.live_allocations, 0);
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
    size_t free_b = 0, total = 0;
    gmlake_stats other;
    size_t elsewhere = gmlake_get_stats(1, &other) == GMLAKE_OK ? other.reserved_bytes : 0;
    cr_assert_eq(cuMemGetInfo_v2(&free_b, &total), CUDA_SUCCESS);
    cr_expect_eq(free_b, total - elsewhere, "all of the memory device 0 held is free again "
                 "(the fake's devices share one memory; device 1's pool holds %zu)", elsewhere);

    cudaStream_t s;
    void *p = NULL, *q = NULL;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(cudaMallocAsync(&p, (size_t)(4 + i) * MiB, s), cudaSuccess);
        cr_assert_eq(fake_cuda_launch((CUstream)s), 0);
        cr_assert_eq(cudaFreeAsync(p, s), cudaSuccess);
        cr_assert_eq(cudaMallocAsync(&q, 3 * MiB, 0), cudaSuccess);
        cr_assert_eq(cudaFreeAsync(q, 0), cudaSuccess);
    }
    cr_assert_eq(cudaMalloc(&p, 20 * MiB), cudaSuccess);
    cr_expect_eq(stats(0).active_bytes, 20 * MiB, "gmlake serves in the fresh context");
    cr_expect_eq(cudaFree(stale), cudaErrorInvalidValue, "a pointer the reset destroyed is no allocation");
    cr_expect_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
    cr_expect_eq(gmlake_empty_cache(0), GMLAKE_OK);
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
    cr_expect_eq(fake_cuda_counts()->dead_event_uses, 0, "no event of the old context was used");
}

Test(reset, cudaDeviceReset_gives_the_pool_back_and_it_serves_again)
{
    void *stale = use_the_device();
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->resets, 1);
    after_the_reset(stale);
}

Test(reset, the_drivers_primary_context_reset_alike)
{
    void *stale = use_the_device();
    cr_assert_eq(cuDevicePrimaryCtxReset_v2(0), CUDA_SUCCESS);
    after_the_reset(stale);
}

Test(reset, resets_in_a_loop_keep_the_pool_empty_between_them)
{
    for (int round = 0; round < 5; round++) {
        void *stale = use_the_device();
        cr_assert_eq(cudaDeviceReset(), cudaSuccess);
        gmlake_stats st = stats(0);
        cr_assert_eq(st.reserved_bytes, 0, "round %d", round);
        cr_assert_eq(st.active_bytes, 0, "round %d", round);
        cr_expect_eq(cudaFree(stale), cudaErrorInvalidValue, "round %d", round);
        cudaGetLastError();
    }
    cr_expect_eq(fake_cuda_counts()->dead_event_uses, 0);
    cr_expect_eq(fake_cuda_counts()->events_live, 0, "the pool destroyed its events before the reset");
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
}

Test(reset, another_devices_pool_keeps_its_allocations)
{
    void *other = NULL;
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaMalloc(&other, 16 * MiB), cudaSuccess);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    void *stale = use_the_device();
    cr_assert_eq(cudaDeviceReset(), cudaSuccess); /* device 0, the current one */
    cr_expect_eq(stats(1).active_bytes, 16 * MiB, "device 1 was not reset");
    after_the_reset(stale);
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_expect_eq(cudaFree(other), cudaSuccess);
    cr_expect_eq(stats(1).active_bytes, 0);
    cr_expect_eq(gmlake_check(1), GMLAKE_OK);
}

Test(reset, a_reset_before_any_allocation_passes_through)
{
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->resets, 1);
    void *p = NULL;
    cr_assert_eq(cudaMalloc(&p, 2 * MiB), cudaSuccess);
    cr_expect_eq(stats(0).active_bytes, 2 * MiB);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

/* A kernel faulted: CUDA's own reset returns success, the fault stays, and every later call fails
 * with it (the process must end: CUDA's words).  The pool's teardown runs in the faulted context,
 * where the device answers no query: nothing may crash, no dead event be used. */
Test(reset, a_reset_after_a_sticky_fault_crashes_nothing)
{
    (void)use_the_device();
    fake_cuda_fault(CUDA_ERROR_ILLEGAL_ADDRESS);
    cr_assert_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    void *p = NULL;
    CUdeviceptr d = 0;
    cr_expect_eq(cudaMalloc(&p, MiB), cudaErrorIllegalAddress, "the fault stays");
    if (cuMemAlloc_v2(&d, MiB) == CUDA_SUCCESS) { /* the driver API keeps no sticky state */
        CUresult r = cuMemFree_v2(d); /* it waits for the device: the fault, the block kept */
        cr_expect(r == CUDA_SUCCESS || r == CUDA_ERROR_ILLEGAL_ADDRESS, "cuMemFree: %d", (int)r);
    }
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
    cr_expect_eq(fake_cuda_counts()->dead_event_uses, 0);
}

Test(reset, a_bad_device_is_the_drivers_error)
{
    cr_expect_eq(cuDevicePrimaryCtxReset_v2(7), CUDA_ERROR_INVALID_DEVICE);
    cr_expect_eq(cuDevicePrimaryCtxReset_v2(-1), CUDA_ERROR_INVALID_DEVICE);
    cr_expect_eq(fake_cuda_counts()->resets, 0);
}
