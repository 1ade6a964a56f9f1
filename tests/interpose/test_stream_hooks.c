/* test_stream_hooks.c — stream semantics of the interposer against the fake CUDA (tests/fake),
 * libgmlake linked ahead of it (tests/interpose/harness.h runs each test in a process of its own).
 * Work launched with fake_cuda_launch completes only when the test finishes it or something waits
 * for it, so a block handed to another stream too early is seen: per-thread default streams,
 * destroyed streams whose handle is reused, the legacy stream of two contexts, cudaFree /
 * cuMemFree synchronising the pool's device (and failing), many short-lived streams, and no
 * device wait while the pool is locked. */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

#define MiB ((size_t)1 << 20)

cudaError_t cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
cudaError_t cudaFreeAsync_ptsz(void *, cudaStream_t);

/* The event rule alone (stream_wait off): a stream never takes a block another stream's work may
 * still use, not even by waiting for it on the GPU.  Before the first hook call. */
static void events_only(void) { setenv("GMLAKE_STREAM_WAIT", "off", 1); }

static gmlake_stats stats(void)
{
    gmlake_stats s;
    memset(&s, 0, sizeof s);
    cr_assert_eq(gmlake_get_stats(0, &s), GMLAKE_OK);
    return s;
}

/* ---- per-thread default streams ---- */

static pthread_barrier_t bar;
static void *a_block;

static void *ptds_owner(void *arg)
{
    void *p = NULL;
    cr_assert_eq(cudaMallocAsync(&p, 4 * MiB, cudaStreamPerThread), cudaSuccess);
    cr_assert_eq(fake_cuda_launch(CU_STREAM_PER_THREAD), 0); /* work on this thread's stream uses p */
    cr_assert_eq(cudaFreeAsync(p, cudaStreamPerThread), cudaSuccess);
    a_block = p;
    pthread_barrier_wait(&bar); /* B allocates now */
    pthread_barrier_wait(&bar);
    void *q = NULL;
    cr_assert_eq(cudaMallocAsync_ptsz(&q, 4 * MiB, 0), cudaSuccess);
    cr_assert_eq(q, p, "the owner's own default stream reuses its block at once");
    cr_assert_eq(cudaFreeAsync_ptsz(q, 0), cudaSuccess);
    pthread_barrier_wait(&bar);
    return arg;
}

Test(streams, per_thread_default_streams_are_distinct)
{
    events_only(); /* else another stream (the legacy one) could take A's block by a GPU wait */
    pthread_t a;
    pthread_barrier_init(&bar, NULL, 2);
    pthread_create(&a, NULL, ptds_owner, NULL);
    pthread_barrier_wait(&bar);
    void *q = NULL, *r = NULL;
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, cudaStreamPerThread), cudaSuccess);
    cr_assert_neq(q, a_block, "thread B's default stream got thread A's block while A's work ran");
    cr_assert_eq(cudaMallocAsync_ptsz(&r, 4 * MiB, 0), cudaSuccess);
    cr_assert_neq(r, a_block, "the _ptsz entry point names B's own stream too");
    cr_assert_eq(fake_cuda_pending(CU_STREAM_PER_THREAD), 0, "B's stream is idle");
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar); /* A freed its block again, through cudaFreeAsync_ptsz(q, 0) */
    void *t = NULL;
    cr_assert_eq(cudaMallocAsync(&t, 4 * MiB, cudaStreamPerThread), cudaSuccess);
    cr_assert_neq(t, a_block, "A's _ptsz free named A's stream, whose work still runs");
    pthread_join(a, NULL);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

static void *ptds_exiting(void *arg)
{
    void *p = NULL;
    cr_assert_eq(cudaMallocAsync(&p, 4 * MiB, cudaStreamPerThread), cudaSuccess);
    cr_assert_eq(fake_cuda_launch(CU_STREAM_PER_THREAD), 0);
    cr_assert_eq(cudaFreeAsync(p, cudaStreamPerThread), cudaSuccess);
    return p;
}

Test(streams, an_exited_threads_default_stream_blocks_serve_others_after_its_work)
{
    events_only();
    pthread_t a;
    void *p, *q, *r;
    pthread_create(&a, NULL, ptds_exiting, NULL);
    pthread_join(a, &p);
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, 0), cudaSuccess);
    cr_assert_neq(q, p, "the exited thread's work still runs");
    fake_cuda_finish_all();
    cr_assert_eq(cudaMallocAsync(&r, 4 * MiB, 0), cudaSuccess);
    cr_assert_eq(r, p, "its block serves others once its work completed (no device wait needed)");
    cr_assert_eq(stats().device_calls[GMLAKE_DC_SYNCHRONIZE], 0);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

/* ---- destroyed streams ---- */

Test(streams, a_reused_handle_does_not_inherit_the_destroyed_streams_blocks)
{
    events_only();
    cudaStream_t s1, s2;
    void *p, *q, *r;
    cr_assert_eq(cudaStreamCreate(&s1), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, 4 * MiB, s1), cudaSuccess);
    fake_cuda_launch((CUstream)s1);
    cr_assert_eq(cudaFreeAsync(p, s1), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s1), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s2), cudaSuccess);
    cr_assert_eq(s2, s1, "the fake hands the destroyed handle out again");
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, s2), cudaSuccess);
    cr_assert_neq(q, p, "the new stream took the destroyed stream's block while its work ran");
    fake_cuda_finish_all();
    cr_assert_eq(cudaMallocAsync(&r, 4 * MiB, s2), cudaSuccess);
    cr_assert_eq(r, p, "once the destroyed stream's work completed its block serves others");
    cr_assert_eq(cudaFreeAsync(q, s2), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(r, s2), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s2), cudaSuccess);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

Test(streams, driver_stream_destroy_retires_the_bin)
{
    events_only();
    CUstream s1, s2;
    CUdeviceptr p, q;
    cr_assert_eq(cuStreamCreate(&s1, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&p, 4 * MiB, s1), CUDA_SUCCESS);
    fake_cuda_launch(s1);
    cr_assert_eq(cuMemFreeAsync(p, s1), CUDA_SUCCESS);
    cr_assert_eq(cuStreamDestroy_v2(s1), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
    cr_assert_eq(s2, s1);
    cr_assert_eq(cuMemAllocAsync(&q, 4 * MiB, s2), CUDA_SUCCESS);
    cr_assert_neq(q, p, "cuStreamDestroy: the reused handle inherited the old stream's block");
}

Test(streams, many_short_lived_streams_stay_bounded)
{
    struct timespec t0, t1;
    fake_cuda_reuse_handles_last(true); /* 4096 distinct handles, each reused 24 times */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 100000; i++) {
        cudaStream_t s;
        void *p;
        cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
        cr_assert_eq(cudaMallocAsync(&p, MiB + 4096 * (size_t)(i % 7), s), cudaSuccess);
        cr_assert_eq(cudaFreeAsync(p, s), cudaSuccess);
        cr_assert_eq(cudaStreamDestroy(s), cudaSuccess);
        if (i % 10000 == 9999)
            cr_assert_leq(fake_cuda_counts()->events_live, 16, "after %d streams %d events live", i + 1,
                          fake_cuda_counts()->events_live);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("100000 short-lived streams: %.2f s, %d events created, %d live\n", s,
           fake_cuda_counts()->events_created, fake_cuda_counts()->events_live);
    cr_assert_eq(stats().reserved_bytes, 2 * MiB, "one chunk served them all");
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

/* ---- contexts ---- */

Test(streams, the_legacy_streams_of_two_contexts_are_distinct)
{
    void *p, *q;
    cr_assert_eq(cudaMallocAsync(&p, 4 * MiB, 0), cudaSuccess);
    fake_cuda_launch(0);
    cr_assert_eq(cudaFreeAsync(p, 0), cudaSuccess);
    CUcontext c2 = fake_cuda_ctx_create(0);
    cr_assert_not_null(c2);
    cr_assert_eq(cuCtxSetCurrent(c2), CUDA_SUCCESS);
    cr_assert_eq(fake_cuda_pending(0), 0, "the second context's legacy stream is idle");
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, 0), cudaSuccess);
    cr_assert_neq(q, p, "the legacy stream of another context took a block whose work ran");
}

/* A synchronisation covers the streams of the context it synchronised only (cuCtxSynchronize):
 * a block freed on a stream of another context on the same device, whose work still runs, must
 * not serve a stream-less request after a cudaFree in the primary context (session 31's review). */
Test(streams, a_synchronisation_of_one_context_leaves_another_contexts_frees_pending)
{
    void *p, *q, *r;
    CUstream s2;
    CUcontext c2 = fake_cuda_ctx_create(0);
    cr_assert_not_null(c2);
    cr_assert_eq(cuCtxSetCurrent(c2), CUDA_SUCCESS);
    cr_assert_eq(cuStreamCreate(&s2, 0), CUDA_SUCCESS);
    cr_assert_eq(cudaMallocAsync(&p, 8 * MiB, (cudaStream_t)s2), cudaSuccess);
    fake_cuda_launch(s2); /* work on p, still running */
    cr_assert_eq(cudaFreeAsync(p, (cudaStream_t)s2), cudaSuccess);
    fake_cuda_set_device(0); /* the primary context */
    cr_assert_eq(cudaMalloc(&q, 2 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(q), cudaSuccess); /* synchronises the primary context only */
    cr_assert_eq(cudaMalloc(&r, 8 * MiB), cudaSuccess);
    cr_assert_eq(cuCtxSetCurrent(c2), CUDA_SUCCESS);
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)r;
    cr_assert(b >= a + 8 * MiB || a >= b + 8 * MiB || fake_cuda_pending(s2) == 0,
              "cudaMalloc got bytes of a block whose work on another context's stream still runs");
}

/* The other way round: a cudaFree in another context of the device waits for the primary
 * context's streams too, whose frees it then counts as passed (session 31's review). */
Test(streams, a_cudaFree_in_another_context_waits_for_the_primary_contexts_streams)
{
    void *p, *q, *r;
    cudaStream_t s1;
    fake_cuda_set_device(0);
    cr_assert_eq(cudaStreamCreate(&s1), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, 8 * MiB, s1), cudaSuccess);
    fake_cuda_launch((CUstream)s1); /* work on p, still running */
    cr_assert_eq(cudaFreeAsync(p, s1), cudaSuccess);
    CUcontext c2 = fake_cuda_ctx_create(0);
    cr_assert_not_null(c2);
    cr_assert_eq(cuCtxSetCurrent(c2), CUDA_SUCCESS);
    cr_assert_eq(cudaMalloc(&q, 2 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(q), cudaSuccess);
    cr_assert_eq(cudaMalloc(&r, 8 * MiB), cudaSuccess);
    fake_cuda_set_device(0);
    uintptr_t a = (uintptr_t)p, b = (uintptr_t)r;
    cr_assert(b >= a + 8 * MiB || a >= b + 8 * MiB || fake_cuda_pending((CUstream)s1) == 0,
              "cudaMalloc got bytes of a block whose work on the primary context's stream still runs");
}

/* ---- cudaFree / cuMemFree ---- */

Test(streams, cudaFree_waits_for_the_pointers_device)
{
    void *p;
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaMalloc(&p, 4 * MiB), cudaSuccess);
    fake_cuda_launch(0);
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(fake_cuda_pending(0), 0, "cudaFree on device 1 did not wait for device 0's work");
}

Test(streams, a_failed_synchronisation_keeps_the_block)
{
    void *p;
    CUdeviceptr d;
    cr_assert_eq(cudaMalloc(&p, 4 * MiB), cudaSuccess);
    cr_assert_eq(cuMemAlloc_v2(&d, 4 * MiB), CUDA_SUCCESS);
    fake_cuda_fail_sync(CUDA_ERROR_LAUNCH_FAILED, 2);
    cr_assert_eq(cudaFree(p), cudaErrorLaunchFailure, "the synchronisation's error comes back");
    cr_assert_eq(cuMemFree_v2(d), CUDA_ERROR_LAUNCH_FAILED);
    cr_assert_eq(stats().live_allocations, 2, "both blocks stay allocated");
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cuMemFree_v2(d), CUDA_SUCCESS);
    cr_assert_eq(stats().live_allocations, 0);
}

/* A stream-ordered free may name a stream of another device: synchronising the pointer's device
 * (empty_cache here; memory pressure and cudaFree do the same) does not wait for that stream, so
 * the block must not pass to another stream then (it used to: the synchronisation counted for
 * every bin).  Its own stream still reuses it at once, from device 0's pool (named: cudaMallocAsync
 * on s1 allocates on s1's device). */
Test(streams, a_device_synchronisation_does_not_cover_another_devices_stream)
{
    void *p, *q;
    cudaStream_t s0, s1;
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s0), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, 4 * MiB, s0), cudaSuccess);
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s1), cudaSuccess);
    cr_assert_eq(fake_cuda_launch((CUstream)s1), 0); /* device 1's work reads p */
    cr_assert_eq(cudaFreeAsync(p, s1), cudaSuccess);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(gmlake_empty_cache(0), GMLAKE_OK);
    cr_assert_gt(fake_cuda_pending((CUstream)s1), 0, "s1's work is still running");
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, s0), cudaSuccess);
    cr_assert_neq(q, p, "device 0's stream took a block device 1's stream still uses");
    CUdeviceptr r;
    cr_assert_eq(cuMemAllocFromPoolAsync(&r, 4 * MiB, (CUmemoryPool)FAKE_DEFAULT_POOL, (CUstream)s1), CUDA_SUCCESS);
    cr_assert_eq((void *)r, p, "the block's own stream reuses it at once");
    cr_assert_eq(cudaFreeAsync(q, s0), cudaSuccess);
    cr_assert_eq(cuMemFreeAsync(r, (CUstream)s1), CUDA_SUCCESS);
}

/* ---- no device wait under the pool lock ---- */

typedef struct job {
    void *(*fn)(void *);
    void *ret;
    int done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} job;

static void *run_job(void *arg)
{
    job *j = arg;
    void *r = j->fn(NULL);
    pthread_mutex_lock(&j->mu);
    j->ret = r;
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Runs fn on a thread; true if it returned within `seconds`. */
static bool finishes_within(job *j, void *(*fn)(void *), int seconds, pthread_t *t)
{
    memset(j, 0, sizeof *j);
    j->fn = fn;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    pthread_create(t, NULL, run_job, j);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += seconds;
    pthread_mutex_lock(&j->mu);
    while (!j->done && pthread_cond_timedwait(&j->cv, &j->mu, &until) == 0)
        ;
    bool done = j->done;
    pthread_mutex_unlock(&j->mu);
    return done;
}

static void *empty_cache(void *arg) { return (void *)(intptr_t)gmlake_empty_cache(0); }

static void *small_alloc(void *arg)
{
    void *p = NULL;
    if (cudaMallocAsync(&p, 4096, (cudaStream_t)0) != cudaSuccess)
        return NULL;
    return p;
}

Test(streams, empty_cache_does_not_lock_the_pool_while_it_waits)
{
    void *p;
    cr_assert_eq(cudaMallocAsync(&p, 4096, 0), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, 0), cudaSuccess);
    fake_cuda_hold_waits(true);
    job waiter, alloc;
    pthread_t tw, ta;
    finishes_within(&waiter, empty_cache, 0, &tw);
    fake_cuda_await_waiter();
    bool ok = finishes_within(&alloc, small_alloc, 5, &ta);
    fake_cuda_hold_waits(false);
    pthread_join(tw, NULL);
    pthread_join(ta, NULL);
    cr_assert(ok, "an allocation waited for empty_cache's device synchronisation");
    cr_assert_not_null(alloc.ret);
}

static void *big_alloc(void *arg)
{
    void *p = NULL;
    if (cudaMallocAsync(&p, 200 * MiB, (cudaStream_t)0) != cudaSuccess)
        return NULL;
    return p;
}

Test(streams, out_of_memory_waits_without_the_pool_lock)
{
    events_only();
    cudaStream_t s1;
    void *p;
    cr_assert_eq(cudaStreamCreate(&s1), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, 200 * MiB, s1), cudaSuccess);
    fake_cuda_launch((CUstream)s1);
    cr_assert_eq(cudaFreeAsync(p, s1), cudaSuccess);
    fake_cuda_hold_waits(true);
    job big, small;
    pthread_t tb, ts;
    finishes_within(&big, big_alloc, 0, &tb); /* must wait for s1's work: the device is full */
    fake_cuda_await_waiter();
    bool ok = finishes_within(&small, small_alloc, 5, &ts);
    fake_cuda_hold_waits(false);
    pthread_join(tb, NULL);
    pthread_join(ts, NULL);
    cr_assert(ok, "an allocation waited while another one waited for the device under the lock");
    cr_assert_eq(big.ret, p, "after the wait the big request got s1's block");
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

/* stream_wait: a stream takes a block another stream freed while that stream's work still runs,
 * through cuStreamWaitEvent (the fake models the dependency): its own later work completes only
 * after the other stream's. */
Test(streams, a_stream_takes_a_busy_block_by_waiting_on_the_gpu)
{
    cudaStream_t s1, s2;
    void *p, *q;
    cr_assert_eq(cudaStreamCreate(&s1), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&s2), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, 4 * MiB, s1), cudaSuccess);
    fake_cuda_launch((CUstream)s1); /* s1's kernel uses p */
    cr_assert_eq(cudaFreeAsync(p, s1), cudaSuccess);
    uint64_t reserved = stats().reserved_bytes;
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, s2), cudaSuccess);
    cr_assert_eq(q, p, "s2 takes s1's block");
    cr_assert_eq(stats().reserved_bytes, reserved, "no growth");
    cr_assert_eq(stats().device_calls[GMLAKE_DC_STREAM_WAIT], 1);
    cr_assert_eq(fake_cuda_pending((CUstream)s2), 1, "s2 holds the wait");
    CUevent ev;
    cr_assert_eq(cuEventCreate(&ev, 0), CUDA_SUCCESS);
    cr_assert_eq(cuEventRecord(ev, (CUstream)s2), CUDA_SUCCESS);
    cr_assert_eq(cuEventQuery(ev), CUDA_ERROR_NOT_READY, "s2's work waits for s1's");
    fake_cuda_finish_all();
    cr_assert_eq(cuEventQuery(ev), CUDA_SUCCESS);
    cr_assert_eq(cuEventDestroy_v2(ev), CUDA_SUCCESS);
    cr_assert_eq(cudaFreeAsync(q, s2), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s1), cudaSuccess);
    cr_assert_eq(cudaStreamDestroy(s2), cudaSuccess);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}
