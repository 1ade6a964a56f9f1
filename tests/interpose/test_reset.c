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

/* A graph's memory (graphmem.c) is the pool's too: a reset must also end gmlake's record of it,
 * else the graph's later end (its user object's destructor) or a free of the old pointer would
 * act on whatever the fresh pool put at the same address. */
Test(reset, a_graphs_memory_does_not_outlive_the_reset)
{
    cudaStream_t s;
    void *p = NULL, *q = NULL;
    cudaGraph_t g;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, 4 * MiB, s), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, s), cudaSuccess); /* freed in its capture: the graph's */
    cr_assert_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    cr_assert_eq(cudaMalloc(&q, 4 * MiB), cudaSuccess);
    cr_expect_eq(stats(0).live_allocations, 1);
    cr_assert_eq(cuGraphDestroy((CUgraph)g), CUDA_SUCCESS); /* the graph's memory is reaped next */
    void *r = NULL;
    cr_assert_eq(cudaMalloc(&r, MiB), cudaSuccess);
    cr_expect_eq(stats(0).live_allocations, 2, "q is still the program's (q %p, the graph's %p)", q, p);
    cr_expect_eq(cudaFree(q), cudaSuccess, "and frees once");
    cr_expect_eq(cudaFree(r), cudaSuccess);
    cr_expect_eq(stats(0).live_allocations, 0);
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
}

Test(reset, a_bad_device_is_the_drivers_error)
{
    cr_expect_eq(cuDevicePrimaryCtxReset_v2(7), CUDA_ERROR_INVALID_DEVICE);
    cr_expect_eq(cuDevicePrimaryCtxReset_v2(-1), CUDA_ERROR_INVALID_DEVICE);
    cr_expect_eq(fake_cuda_counts()->resets, 0);
}

/* ---- contexts that end: cuCtxDestroy of the program's own context, the last
 * cuDevicePrimaryCtxRelease of a primary one.  gmlake's events of such a context die with it
 * (the fake counts every later use: a crash on the GPU), and its streams too. ---- */

#undef cuCtxDestroy
CUresult cuCtxDestroy(CUcontext ctx);
#undef cuDevicePrimaryCtxRelease
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);

typedef struct ended {
    CUdeviceptr a, b; /* freed with work pending: a on a created stream, b on the legacy one */
} ended;

/* In context c (pushed for the while): blocks freed with work pending on a created stream and on
 * the context's legacy stream, and a larger miss on the legacy stream that asked the created
 * stream's bin, so that gmlake made an event in c. */
static ended use_a_context(CUcontext c)
{
    ended e;
    CUstream s;
    cr_assert_eq(cuCtxPushCurrent_v2(c), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&s, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&e.a, 4 * MiB, s), CUDA_SUCCESS);
    cr_assert_eq(fake_cuda_launch(s), 0);
    cr_assert_eq(cuMemFreeAsync(e.a, s), CUDA_SUCCESS);
    int events = fake_cuda_counts()->events_created;
    cr_assert_eq(cuMemAllocAsync(&e.b, 6 * MiB, 0), CUDA_SUCCESS); /* a miss: asks s's bin */
    cr_assert_gt(fake_cuda_counts()->events_created, events, "gmlake made an event in the context");
    cr_assert_eq(fake_cuda_launch(0), 0);
    cr_assert_eq(cuMemFreeAsync(e.b, 0), CUDA_SUCCESS);
    cr_assert_eq(fake_cuda_pending(s), 1);
    cr_assert_eq(cuCtxPopCurrent_v2(NULL), CUDA_SUCCESS);
    return e;
}

/* After the context ended, in the current context of `device`: misses on its legacy stream and on
 * a new stream (the fake hands it the dead stream's handle) look at the ended context's bins.
 * Their blocks serve others only if the ending context's work was waited for (`synced`); no
 * event of it is used. */
static void after_the_end(int device, ended e, bool synced)
{
    CUdeviceptr x, y, z;
    CUstream t;
    cr_assert_eq(cuMemAllocAsync(&x, 4 * MiB, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&y, 6 * MiB, 0), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&t, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&z, 4 * MiB, t), CUDA_SUCCESS);
    cr_expect_eq(fake_cuda_counts()->dead_event_uses, 0, "no event of the ended context was used");
    if (synced) {
        cr_expect_eq(x, e.a, "the ended context's work was waited for: its blocks serve others");
        cr_expect_eq(y, e.b);
    } else {
        cr_expect(x != e.a && y != e.b && z != e.a && z != e.b,
                  "the ended context's work is not known to be done: its blocks wait");
    }
    cr_expect_eq(gmlake_check(device), GMLAKE_OK);
    cr_assert_eq(cuMemFreeAsync(x, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(y, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(z, t), CUDA_SUCCESS);
    cr_assert_eq(cuStreamDestroy_v2(t), CUDA_SUCCESS);
    cr_expect_eq(gmlake_check(device), GMLAKE_OK);
    cr_expect_eq(fake_cuda_counts()->dead_event_uses, 0);
}

Test(reset, a_destroyed_contexts_events_and_streams_are_not_used_again)
{
    CUcontext c = fake_cuda_ctx_create(0);
    ended e = use_a_context(c);
    cr_assert_eq(cuCtxDestroy_v2(c), CUDA_SUCCESS);
    cr_assert_eq(fake_cuda_counts()->contexts_ended, 1);
    after_the_end(0, e, true);
}

Test(reset, cuCtxDestroy_without_v2_alike)
{
    CUcontext c = fake_cuda_ctx_create(0);
    ended e = use_a_context(c);
    cr_assert_eq(cuCtxDestroy(c), CUDA_SUCCESS);
    after_the_end(0, e, true);
}

/* The context's synchronisation failed (a fault): its blocks are not known to be done and wait
 * for a synchronisation of the device (here the one a synchronous free makes). */
Test(reset, a_destroyed_context_that_could_not_be_synchronised_keeps_its_blocks)
{
    CUcontext c = fake_cuda_ctx_create(0);
    ended e = use_a_context(c);
    fake_cuda_fail_sync(CUDA_ERROR_LAUNCH_FAILED, 1);
    cr_assert_eq(cuCtxDestroy_v2(c), CUDA_SUCCESS);
    after_the_end(0, e, false);
    CUdeviceptr d, x[3];
    CUstream t;
    cr_assert_eq(cuMemAlloc_v2(&d, MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree_v2(d), CUDA_SUCCESS); /* waits for the device */
    cr_assert_eq(cuStreamCreate(&t, 0), CUDA_SUCCESS);
    bool again = false; /* three blocks of 4 MiB are free now (after_the_end freed two) */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(cuMemAllocAsync(&x[i], 4 * MiB, t), CUDA_SUCCESS);
        again |= x[i] == e.a;
    }
    cr_expect(again, "after the device's synchronisation they serve again");
    cr_expect_eq(fake_cuda_counts()->dead_event_uses, 0);
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
}

Test(reset, destroying_no_context_is_the_drivers_error)
{
    CUcontext c = fake_cuda_ctx_create(0);
    cr_assert_eq(cuCtxDestroy_v2(c), CUDA_SUCCESS);
    cr_expect_eq(cuCtxDestroy_v2(c), CUDA_ERROR_INVALID_CONTEXT, "destroyed already");
    cr_expect_eq(cuCtxDestroy_v2(NULL), CUDA_ERROR_INVALID_CONTEXT);
    cr_expect_eq(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT, "no reference held");
    cr_expect_eq(cuDevicePrimaryCtxRelease_v2(9), CUDA_ERROR_INVALID_DEVICE);
    cr_expect_eq(fake_cuda_counts()->contexts_ended, 1);
}

/* A driver program's primary context of device 1, retained, used, released to zero (it dies),
 * then retained again (a fresh one). */
static void release_to_zero(CUresult (*release)(CUdevice))
{
    CUcontext pc;
    cr_assert_eq(cuDevicePrimaryCtxRetain(&pc, 1), CUDA_SUCCESS);
    ended e = use_a_context(pc);
    cr_assert_eq(release(1), CUDA_SUCCESS);
    cr_assert_eq(fake_cuda_counts()->contexts_ended, 1, "the last reference: the context died");
    cr_assert_eq(cuDevicePrimaryCtxRetain(&pc, 1), CUDA_SUCCESS);
    cr_assert_eq(cuCtxPushCurrent_v2(pc), CUDA_SUCCESS);
    after_the_end(1, e, true);
}

Test(reset, the_last_release_of_a_primary_context_ends_its_events)
{
    release_to_zero(cuDevicePrimaryCtxRelease_v2);
}

Test(reset, cuDevicePrimaryCtxRelease_without_v2_alike)
{
    release_to_zero(cuDevicePrimaryCtxRelease);
}

/* A release that leaves a reference: the context lives on, and so do its streams; gmlake's
 * blocks of it stay correct (dropping its events early costs a new event, nothing more). */
Test(reset, a_release_that_is_not_the_last_changes_nothing_visible)
{
    CUcontext pc;
    cr_assert_eq(cuDevicePrimaryCtxRetain(&pc, 1), CUDA_SUCCESS);
    cr_assert_eq(cuDevicePrimaryCtxRetain(&pc, 1), CUDA_SUCCESS);
    ended e = use_a_context(pc);
    cr_assert_eq(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    cr_assert_eq(fake_cuda_counts()->contexts_ended, 0);
    cr_assert_eq(cuCtxPushCurrent_v2(pc), CUDA_SUCCESS);
    CUdeviceptr x;
    cr_assert_eq(cuMemAllocAsync(&x, 4 * MiB, 0), CUDA_SUCCESS);
    cr_expect_eq(fake_cuda_counts()->dead_event_uses, 0);
    cr_expect_eq(gmlake_check(1), GMLAKE_OK);
    (void)e;
}
