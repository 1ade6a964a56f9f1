/* test_capture.c — gmlake under graph capture, against the fake's capture rules (fake_cuda.c): a
 * synchronous free during capture fails as CUDA's does; the pool's own event calls neither record
 * into a capture nor break another thread's capture; the per-thread variants check the capture
 * of this thread's default stream; a stream's capture status is asked only while a capture is
 * under way (interpose/capture.c), including one that ended by invalidation.  The memory of
 * captures (interpose/graphmem.c): gmlake serves it, reuses what a capture freed only inside that
 * capture on the same stream and device (cut to size, merged again), holds what the program frees
 * while the graph or an executable graph made from it lives, and gives it back once CUDA destroys
 * the last of them, in the order of the program's frees and without a wait during a capture. */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <semaphore.h>

/* cuda.h declares it only under CUDA_API_PER_THREAD_DEFAULT_STREAM */
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

#define MiB ((size_t)1 << 20)
/* Created streams (the fake records events only on streams it made). */
static cudaStream_t S1, S2, C;

static void make_streams(void)
{
    cr_assert_eq(cudaStreamCreate(&S1), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&S2), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&C), cudaSuccess);
}

static gmlake_stats stats(void)
{
    gmlake_stats s = {0};
    cr_assert_eq(gmlake_get_stats(0, &s), GMLAKE_OK);
    return s;
}

/* Another thread that captures `stream` in `mode` until told to end. */
typedef struct capturer {
    pthread_t t;
    cudaStream_t stream;
    enum cudaStreamCaptureMode mode;
    sem_t begun, go;
    cudaError_t begin, end;
} capturer;

static void *capture_main(void *arg)
{
    capturer *c = arg;
    c->begin = cudaStreamBeginCapture(c->stream, c->mode);
    sem_post(&c->begun);
    sem_wait(&c->go);
    cudaGraph_t g;
    c->end = cudaStreamEndCapture(c->stream, &g);
    return NULL;
}

static void capture_start(capturer *c, cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    c->stream = s;
    c->mode = mode;
    sem_init(&c->begun, 0, 0);
    sem_init(&c->go, 0, 0);
    cr_assert_eq(pthread_create(&c->t, NULL, capture_main, c), 0);
    sem_wait(&c->begun);
    cr_assert_eq(c->begin, cudaSuccess);
}

static cudaError_t capture_end(capturer *c)
{
    sem_post(&c->go);
    pthread_join(c->t, NULL);
    return c->end;
}

Test(capture, a_synchronous_free_during_capture_fails_as_in_cuda)
{
    make_streams();
    void *p;
    cr_assert_eq(cudaMalloc(&p, MiB), cudaSuccess);
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaErrorStreamCaptureUnsupported);
    cr_assert_eq(stats().live_allocations, 1, "the block stays allocated");
    cr_assert_eq(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaErrorStreamCaptureInvalidated, "as cudaFree does");
    cr_assert_eq(cudaFree(p), cudaSuccess, "after the capture the free goes through");

    CUdeviceptr d;
    cr_assert_eq(cuMemAlloc_v2(&d, MiB), CUDA_SUCCESS);
    cr_assert_eq(cuStreamBeginCapture_v2((CUstream)C, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    cr_assert_eq(cuMemFree_v2(d), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    cr_assert_eq(stats().live_allocations, 1);
    CUgraph cg;
    cr_assert_eq(cuStreamEndCapture((CUstream)C, &cg), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    cr_assert_eq(cuMemFree_v2(d), CUDA_SUCCESS);
}

Test(capture, pool_events_leave_another_threads_global_capture_alone)
{
    make_streams();
    void *a, *b;
    cr_assert_eq(cudaMallocAsync(&a, 8 * MiB, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(a, S1), cudaSuccess); /* waits in S1's bin */
    capturer c;
    capture_start(&c, C, cudaStreamCaptureModeGlobal);
    cr_assert_eq(cudaMallocAsync(&b, 8 * MiB, S2), cudaSuccess, "a miss on S2 looks at S1's block");
    cr_assert_eq(fake_cuda_counts()->capture_violations, 0, "no unsafe call during the capture");
    cr_assert_eq(capture_end(&c), cudaSuccess, "the other thread's capture is intact");
    cr_assert_eq(cudaFreeAsync(b, S2), cudaSuccess);
}

Test(capture, no_event_is_recorded_into_a_capture)
{
    make_streams();
    void *a, *b;
    cr_assert_eq(cudaMallocAsync(&a, 8 * MiB, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(a, S1), cudaSuccess);
    capturer c;
    capture_start(&c, S1, cudaStreamCaptureModeRelaxed); /* S1 itself now captures */
    cr_assert_eq(cudaMallocAsync(&b, 8 * MiB, S2), cudaSuccess);
    cr_assert_neq(b, a, "S1's block did not pass to S2");
    cr_assert_eq(fake_cuda_counts()->capture_nodes, 0, "gmlake added nothing to the graph");
    cr_assert_eq(capture_end(&c), cudaSuccess);
}

Test(capture, no_event_is_recorded_on_the_legacy_stream_during_capture)
{
    make_streams();
    void *a, *b;
    cr_assert_eq(cudaMallocAsync(&a, 8 * MiB, 0), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(a, 0), cudaSuccess); /* waits in the legacy stream's bin */
    capturer c;
    capture_start(&c, C, cudaStreamCaptureModeRelaxed);
    cr_assert_eq(cudaMallocAsync(&b, 8 * MiB, S2), cudaSuccess);
    cr_assert_eq(capture_end(&c), cudaSuccess, "no implicit dependency on the capture");
}

/* While a blocking stream captures, the legacy stream cannot be used (its status query fails with
 * cudaErrorStreamCaptureImplicit, and CUDA refuses stream-ordered work on it): a free on it fails
 * with that error and the block stays the program's, to free once the capture ended (it used to
 * answer success and keep the block allocated for good). */
Test(capture, a_legacy_stream_free_during_a_blocking_capture_fails_and_keeps_the_block)
{
    make_streams();
    void *a;
    CUdeviceptr d;
    cr_assert_eq(cudaMallocAsync(&a, MiB, 0), cudaSuccess);
    cr_assert_eq(cuMemAllocAsync(&d, MiB, CU_STREAM_LEGACY), CUDA_SUCCESS);
    cr_assert(!fake_cuda_owns((uintptr_t)a) && !fake_cuda_owns(d), "gmlake served both");
    capturer c;
    capture_start(&c, C, cudaStreamCaptureModeRelaxed); /* C is a blocking stream */
    cr_assert_eq(cudaFreeAsync(a, 0), cudaErrorStreamCaptureImplicit, "as CUDA answers");
    cr_assert_eq(cudaGetLastError(), cudaErrorStreamCaptureImplicit);
    cr_assert_eq(cuMemFreeAsync(d, CU_STREAM_LEGACY), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
    cr_assert_eq(stats().live_allocations, 2, "both blocks stay allocated");
    cr_assert_eq(capture_end(&c), cudaSuccess, "the capture is intact");
    cr_assert_eq(cudaFreeAsync(a, 0), cudaSuccess);
    cr_assert_eq(cuMemFreeAsync(d, CU_STREAM_LEGACY), CUDA_SUCCESS);
    cr_assert_eq(stats().live_allocations, 0, "freed once the capture ended");
}

Test(capture, per_thread_allocations_check_this_threads_stream)
{
    make_streams();
    capturer c;
    capture_start(&c, C, cudaStreamCaptureModeRelaxed); /* another stream captures */
    CUdeviceptr d, e;
    cr_assert_eq(cuMemAllocAsync_ptsz(&d, MiB, 0), CUDA_SUCCESS);
    cr_assert(!fake_cuda_owns(d), "this thread's default stream is not capturing: gmlake serves");
    cr_assert_eq(stats().allocations, 1);
    cr_assert_eq(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    size_t live = stats().live_allocations;
    cr_assert_eq(cuMemAllocAsync_ptsz(&e, MiB, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(e, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    cr_assert_eq(stats().live_allocations, live + 1,
                 "this thread's default stream captures: its block is the graph's");
    CUgraph g;
    cr_assert_eq(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g), CUDA_SUCCESS);
    cr_assert_eq(capture_end(&c), cudaSuccess);
}

/* Whether gmlake serves stream s as one that captures: a block allocated and freed there stays
 * allocated, the graph's. */
static bool served_for_a_graph(cudaStream_t s)
{
    void *p;
    cr_assert_eq(cudaMallocAsync(&p, MiB, s), cudaSuccess);
    cr_assert(!fake_cuda_owns((uintptr_t)p), "gmlake serves it");
    size_t live = stats().live_allocations;
    cr_assert_eq(cudaFreeAsync(p, s), cudaSuccess);
    return stats().live_allocations == live;
}

/* Allocate+free pairs through the runtime and the driver on created stream s. */
static void pairs(cudaStream_t s, int n)
{
    for (int i = 0; i < n; i++) {
        void *p;
        CUdeviceptr d;
        cr_assert_eq(cudaMallocAsync(&p, MiB, s), cudaSuccess);
        cr_assert_eq(cudaFreeAsync(p, s), cudaSuccess);
        cr_assert_eq(cuMemAllocAsync(&d, MiB, (CUstream)s), CUDA_SUCCESS);
        cr_assert_eq(cuMemFreeAsync(d, (CUstream)s), CUDA_SUCCESS);
    }
}

Test(capture, no_capture_query_while_no_capture_is_under_way)
{
    make_streams();
    pairs(S1, 100);
    cr_assert_eq(stats().allocations, 200);
    cr_assert_eq(fake_cuda_counts()->capture_queries, 0, "no stream was asked about capture");
}

Test(capture, queries_only_while_a_capture_is_under_way)
{
    make_streams();
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert(served_for_a_graph(C), "the capturing stream's allocation is the graph's");
    pairs(S1, 1);
    cr_assert_gt(fake_cuda_counts()->capture_queries, 0, "during the capture every stream is asked");
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(S1, &g), cudaErrorIllegalState, "S1 is not capturing");
    cr_assert(served_for_a_graph(C), "a failed end on another stream ends nothing");
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
    int asked = fake_cuda_counts()->capture_queries;
    pairs(S1, 10);
    cr_assert_eq(fake_cuda_counts()->capture_queries, asked, "no query once the capture ended");
}

Test(capture, a_capture_ended_by_invalidation_ends)
{
    make_streams();
    void *p;
    cr_assert_eq(cudaMalloc(&p, MiB), cudaSuccess);
    cr_assert_eq(cuStreamBeginCapture_v2((CUstream)C, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
    cr_assert_eq(cudaFree(p), cudaErrorStreamCaptureUnsupported, "invalidates the capture");
    void *q;
    cr_assert_eq(cudaMallocAsync(&q, MiB, C), cudaSuccess);
    cr_assert(fake_cuda_owns((uintptr_t)q), "an invalidated capture is still under way until it ends");
    cr_assert_eq(cudaFreeAsync(q, C), cudaSuccess);
    CUgraph g;
    cr_assert_eq(cuStreamEndCapture((CUstream)C, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    int asked = fake_cuda_counts()->capture_queries;
    pairs(C, 10);
    cr_assert_eq(stats().allocations, 21);
    cr_assert_eq(fake_cuda_counts()->capture_queries, asked, "the invalidated capture ended");
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

Test(capture, a_failed_begin_counts_no_capture)
{
    make_streams();
    cr_assert_neq(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaSuccess,
                  "the legacy stream cannot capture");
    cr_assert_eq(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    pairs(S1, 10);
    cr_assert_eq(fake_cuda_counts()->capture_queries, 0);
}

Test(capture, captures_on_several_streams_are_counted_each)
{
    make_streams();
    cr_assert_eq(cudaStreamBeginCapture(S2, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cuStreamBeginCapture_v2((CUstream)C, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(S2, &g), cudaSuccess);
    cr_assert(served_for_a_graph(C), "C still captures after S2's capture ended");
    cr_assert_eq(cuStreamEndCapture((CUstream)C, (CUgraph *)&g), CUDA_SUCCESS);
    int asked = fake_cuda_counts()->capture_queries;
    pairs(S1, 10);
    cr_assert_eq(fake_cuda_counts()->capture_queries, asked);
}

/* ---- the memory of captures (graphmem.c) ---- */

static CUgraph capture_one(cudaStream_t s, void **out, size_t size)
{
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(out, size, s), cudaSuccess);
    cr_assert(!fake_cuda_owns((uintptr_t)*out), "gmlake serves a capture's allocation");
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    return (CUgraph)g;
}

Test(capture, a_graphs_block_freed_by_the_program_stays_until_the_graph_is_destroyed)
{
    make_streams();
    void *p, *q;
    CUgraph g = capture_one(C, &p, 4 * MiB);
    cr_assert_eq(stats().live_allocations, 1);
    cr_assert_eq(cudaFreeAsync(p, S1), cudaSuccess, "the program's free succeeds");
    cr_assert_eq(cudaFreeAsync(p, S1), cudaErrorInvalidValue, "a second free is a double free");
    cr_assert_eq(stats().live_allocations, 1, "the graph still holds the block");
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, S1), cudaSuccess);
    cr_assert_neq(q, p, "a block the graph holds serves no one else");
    cr_assert_eq(cudaFreeAsync(q, S1), cudaSuccess);
    cr_assert_eq(cuGraphDestroy(g), CUDA_SUCCESS);
    cr_assert_eq(cudaMallocAsync(&q, MiB, S1), cudaSuccess, "the next call returns the graph's memory");
    cr_assert_eq(stats().live_allocations, 1, "the graph's block went back to the pool");
    cr_assert_eq(stats().active_bytes, MiB);
    cr_assert_eq(cudaFreeAsync(q, S1), cudaSuccess);
}

Test(capture, an_executable_graph_keeps_the_memory_after_its_graph_is_destroyed)
{
    make_streams();
    void *p;
    CUgraph g = capture_one(C, &p, MiB);
    CUgraphExec e;
    cr_assert_eq(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
    cr_assert_eq(cuGraphDestroy(g), CUDA_SUCCESS, "as PyTorch does right after instantiating");
    cr_assert_eq(cudaFree(p), cudaSuccess);
    pairs(S1, 2);
    cr_assert_eq(stats().live_allocations, 1, "the executable graph holds it");
    cr_assert_eq(cuGraphExecDestroy(e), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 0, "returned with the last holder");
}

Test(capture, a_block_the_program_still_holds_becomes_its_own_when_the_graph_goes)
{
    make_streams();
    void *p;
    CUgraph g = capture_one(C, &p, MiB);
    cr_assert_eq(cuGraphDestroy(g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 1, "the program's block");
    cr_assert_eq(cudaFreeAsync(p, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 0, "an ordinary free now");
    cr_assert_eq(cudaFreeAsync(p, S1), cudaErrorInvalidValue);
}

Test(capture, a_capture_reuses_what_it_freed_on_the_same_stream_only)
{
    make_streams();
    void *a, *b, *c, *d;
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&a, 2 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(a, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&b, 2 * MiB - 4096, C), cudaSuccess);
    cr_assert_eq(b, a, "a block this capture freed on C serves C again");
    cr_assert_eq(cudaFreeAsync(b, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&c, 3 * MiB, C), cudaSuccess);
    cr_assert_neq(c, a, "not a block smaller than asked for");
    cr_assert_eq(cudaMallocAsync(&d, 8 * MiB, S1), cudaSuccess);
    cr_assert_neq(d, a, "S1 does not capture: an ordinary block");
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 3, "a and c for the graph, d the program's");
    cr_assert_eq(cudaFreeAsync(d, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(c, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 2, "the graph holds its two");
    cr_assert_eq(cuGraphDestroy((CUgraph)g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 0);
}

/* Begins a capture on C in which a block of `size` bytes is allocated and freed: memory free for
 * that capture on C.  Returns the block. */
static void *freed_in_capture(size_t size)
{
    void *a;
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&a, size, C), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(a, C), cudaSuccess);
    return a;
}

Test(capture, a_capture_splits_what_it_freed_for_smaller_requests)
{
    make_streams();
    void *a, *b, *c, *d;
    a = freed_in_capture(8 * MiB);
    cr_assert_eq(cudaMallocAsync(&b, MiB, C), cudaSuccess);
    cr_assert_eq(b, a, "the freed block's start serves a smaller request");
    cr_assert_eq(cudaMallocAsync(&c, 2 * MiB + 100, C), cudaSuccess);
    cr_assert_eq((char *)c, (char *)a + MiB, "its rest serves the next one");
    cr_assert_eq(cudaMallocAsync(&d, 5 * MiB, C), cudaSuccess);
    cr_assert_neq(d, a, "5 MiB do not fit the 5 MiB - 512 bytes left");
    void *e;
    cr_assert_eq(cudaMallocAsync(&e, 5 * MiB - 512, C), cudaSuccess);
    cr_assert_eq((char *)e, (char *)a + 3 * MiB + 512, "c took 2 MiB + 512 (pieces are 512-byte aligned)");
    cr_assert_eq(stats().live_allocations, 2, "two blocks of the pool for four requests");
    cr_assert_eq(stats().active_bytes, 13 * MiB);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(c, S1), cudaSuccess, "a piece inside a block: the program's free succeeds");
    cr_assert_eq(cudaFreeAsync(c, S1), cudaErrorInvalidValue, "and a second one is a double free");
    cr_assert_eq(cudaFree(b), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(d, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(e, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 2, "the graph holds both blocks");
    cr_assert_eq(cuGraphDestroy((CUgraph)g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 0);
    cr_assert_eq(stats().active_bytes, 0);
}

Test(capture, pieces_freed_on_one_stream_merge_again)
{
    make_streams();
    void *a, *b, *c, *d, *e;
    a = freed_in_capture(8 * MiB);
    cr_assert_eq(cudaMallocAsync(&b, 4 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&c, 4 * MiB, C), cudaSuccess);
    cr_assert_eq(b, a);
    cr_assert_eq((char *)c, (char *)a + 4 * MiB);
    cr_assert_eq(cudaFreeAsync(c, C), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(b, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&d, 8 * MiB, C), cudaSuccess);
    cr_assert_eq(d, a, "the two halves freed on C are one piece again");
    cr_assert_eq(cudaFreeAsync(d, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&e, 4 * MiB, S2), cudaSuccess);
    cr_assert_neq(e, a, "S2 does not capture: an ordinary block");
    cr_assert_eq(stats().live_allocations, 2);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(e, S2), cudaSuccess);
    cr_assert_eq(cuGraphDestroy((CUgraph)g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 0);
}

Test(capture, a_block_goes_back_when_the_program_frees_its_last_piece_after_the_graph)
{
    make_streams();
    void *a, *b, *c, *d;
    a = freed_in_capture(6 * MiB);
    cr_assert_eq(cudaMallocAsync(&b, 2 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&c, 2 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&d, 2 * MiB, C), cudaSuccess);
    cr_assert_eq((char *)d, (char *)a + 4 * MiB);
    cr_assert_eq(cudaFreeAsync(b, C), cudaSuccess);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
    cr_assert_eq(cuGraphDestroy((CUgraph)g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 1, "the program still holds two pieces of the block");
    cr_assert_eq(cudaFreeAsync(d, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(d, S1), cudaErrorInvalidValue, "a double free");
    cr_assert_eq(cudaFreeAsync(b, S1), cudaErrorInvalidValue, "the capture freed it already");
    cr_assert_eq(stats().live_allocations, 1);
    cr_assert_eq(cudaFreeAsync(c, S2), cudaSuccess, "the last piece, on another stream");
    cr_assert_eq(stats().live_allocations, 0, "the block is the pool's again");
    cr_assert_eq(cudaFreeAsync(c, S2), cudaErrorInvalidValue);
}

Test(capture, another_captures_free_of_a_graphs_block_leaves_it_to_the_graph)
{
    make_streams();
    void *p, *q;
    CUgraph g = capture_one(C, &p, MiB);
    cr_assert_eq(cudaStreamBeginCapture(S2, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, S2), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&q, MiB, S2), cudaSuccess);
    cr_assert_neq(q, p, "the second capture cannot reuse the first graph's block");
    cudaGraph_t g2;
    cr_assert_eq(cudaStreamEndCapture(S2, &g2), cudaSuccess);
    cr_assert_eq(cuGraphDestroy((CUgraph)g2), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 2, "q is the program's, p the first graph's");
    cr_assert_eq(cuGraphDestroy(g), CUDA_SUCCESS);
    cr_assert_eq(cudaFreeAsync(q, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 0);
}

Test(capture, an_invalidated_capture_returns_its_memory_at_its_end)
{
    make_streams();
    void *p, *q, *x;
    cr_assert_eq(cudaMalloc(&x, MiB), cudaSuccess);
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeGlobal), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, MiB, C), cudaSuccess);
    cr_assert(!fake_cuda_owns((uintptr_t)p));
    cr_assert_eq(cudaFreeAsync(p, C), cudaSuccess);
    cr_assert_eq(cudaFree(x), cudaErrorStreamCaptureUnsupported, "invalidates the capture");
    cr_assert_eq(cudaMallocAsync(&q, MiB, C), cudaSuccess);
    cr_assert(fake_cuda_owns((uintptr_t)q), "an invalidated capture's allocation is CUDA's answer");
    cr_assert_eq(cudaFreeAsync(q, C), cudaSuccess);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaErrorStreamCaptureInvalidated);
    cr_assert_eq(stats().live_allocations, 1, "only x: no graph holds p");
    cr_assert_eq(cudaFree(x), cudaSuccess);
}

Test(capture, memory_that_cannot_be_tied_to_its_graph_is_kept)
{
    make_streams();
    void *p;
    fake_cuda_fail_retain(true);
    CUgraph g = capture_one(C, &p, MiB);
    fake_cuda_fail_retain(false);
    cr_assert_eq(cudaFreeAsync(p, S1), cudaSuccess);
    cr_assert_eq(cuGraphDestroy(g), CUDA_SUCCESS);
    pairs(S1, 2);
    cr_assert_eq(stats().live_allocations, 1, "kept: gmlake cannot know when the graph is gone");
}

/* ---- when a graph's pieces go back: the order of the program's frees, other captures ---- */

/* A capture on C that leaves the program two live 2 MiB pieces (b, c) of one 4 MiB slab (a);
 * its graph destroyed and reaped: the slab is an orphan. */
static void *orphan_of_two(void **b, void **c)
{
    void *a = freed_in_capture(4 * MiB);
    cr_assert_eq(cudaMallocAsync(b, 2 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(c, 2 * MiB, C), cudaSuccess);
    cr_assert_eq(*b, a);
    cr_assert_eq((char *)*c, (char *)a + 2 * MiB);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
    cr_assert_eq(cuGraphDestroy((CUgraph)g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 1, "the orphan slab");
    return a;
}

/* Destroys graph g, reaps (the next calls), and checks the pool's live allocations. */
static void destroyed_leaves(CUgraph g, size_t live, const char *why)
{
    cr_assert_eq(cuGraphDestroy(g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, live, "%s", why);
}

/* A free captured into a graph runs when that graph runs: the block must stay allocated (as
 * serve_free keeps any block freed during a capture), not go back to the pool now. */
Test(capture, the_last_piece_freed_during_another_capture_stays_allocated)
{
    make_streams();
    void *a, *b, *c, *q;
    a = orphan_of_two(&b, &c);
    cr_assert_eq(cudaFreeAsync(b, S2), cudaSuccess);
    cr_assert_eq(cudaStreamBeginCapture(S2, cudaStreamCaptureModeRelaxed), cudaSuccess);
    /* the new graph's kernels read c, then it frees c: a node of that graph, run at its launch */
    cr_assert_eq(cudaFreeAsync(c, S2), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 1, "the slab went back before the graph that frees c ran");
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, S1), cudaSuccess);
    cr_assert_neq(q, a, "S1 got the memory a graph not yet launched will read");
    cudaGraph_t g2;
    cr_assert_eq(cudaStreamEndCapture(S2, &g2), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(q, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 1, "the graph that frees c holds the slab");
    destroyed_leaves((CUgraph)g2, 0, "the slab goes back once that graph is gone too");
}

/* A graph's block that another capture frees: that free runs at the other graph's launches, so
 * the block stays allocated until both graphs are gone, whichever goes first. */
Test(capture, a_block_freed_into_another_graph_stays_until_that_graph_goes_too)
{
    make_streams();
    void *p, *q;
    CUgraph g = capture_one(C, &p, 4 * MiB);
    cr_assert_eq(cudaStreamBeginCapture(S2, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, S2), cudaSuccess);
    cudaGraph_t g2;
    cr_assert_eq(cudaStreamEndCapture(S2, &g2), cudaSuccess);
    destroyed_leaves(g, 1, "the graph that made p goes first; the second one still frees p");
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, S1), cudaSuccess);
    cr_assert_neq(q, p);
    cr_assert_eq(cudaFreeAsync(q, S1), cudaSuccess);
    destroyed_leaves((CUgraph)g2, 0, "back once both graphs are gone");
}

/* A stream-ordered free is no unsafe call: it must neither fail nor invalidate another thread's
 * global capture, even where the orphan's pieces were freed on two streams. */
Test(capture, the_last_piece_freed_on_a_second_stream_leaves_a_global_capture_alone)
{
    make_streams();
    void *b, *c;
    orphan_of_two(&b, &c);
    cr_assert_eq(cudaFreeAsync(b, S1), cudaSuccess);
    cudaStream_t G;
    cr_assert_eq(cudaStreamCreate(&G), cudaSuccess);
    capturer k;
    capture_start(&k, G, cudaStreamCaptureModeGlobal);
    cr_assert_eq(cudaFreeAsync(c, S2), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->capture_violations, 0, "no unsafe call during the capture");
    cr_assert_eq(stats().live_allocations, 1, "the slab waits for the capture's end");
    cr_assert_eq(capture_end(&k), cudaSuccess, "the other thread's capture is intact");
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 0, "and goes back at the first call after it");
}

/* The program freed b on S2 while the graph lived (S2's kernel still reading it), then c on S1
 * after the graph went: the frees came on two streams, so the slab may serve S1 only once S2's
 * work is done (contract: "the device waited for first where those frees came on several
 * streams"). */
Test(capture, a_piece_freed_while_the_graph_lived_counts_for_the_streams_of_the_frees)
{
    setenv("GMLAKE_STREAM_WAIT", "off", 1);
    make_streams();
    void *b, *c, *q[3];
    freed_in_capture(4 * MiB);
    cr_assert_eq(cudaMallocAsync(&b, 2 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&c, 2 * MiB, C), cudaSuccess);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
    cr_assert_eq(fake_cuda_launch((CUstream)S2), 0); /* S2's kernel reads b, the graph's output */
    cr_assert_eq(cudaFreeAsync(b, S2), cudaSuccess);   /* held: the graph lives */
    cr_assert_eq(cuGraphDestroy((CUgraph)g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(cudaFreeAsync(c, S1), cudaSuccess, "the last piece: the slab goes back");
    cr_assert_eq(stats().live_allocations, 0);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(cudaMallocAsync(&q[i], 2 * MiB, S1), cudaSuccess);
        cr_assert(q[i] != b || fake_cuda_pending((CUstream)S2) == 0,
                  "S1 got b's memory while S2's kernel on b was still running");
    }
    for (int i = 0; i < 3; i++)
        cr_assert_eq(cudaFreeAsync(q[i], S1), cudaSuccess);
}

/* A piece device 0's pool served, freed on C, does not serve an allocation from device 1's pool
 * on C (before session 27 a capture's reuse looked at stream and size only). */
Test(capture, a_capture_reuses_memory_of_the_pool_asked_only)
{
    make_streams();
    CUdeviceptr a, b;
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cuMemAllocAsync(&a, 4 * MiB, (CUstream)C), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(a, (CUstream)C), CUDA_SUCCESS);
    fake_cuda_set_device(1);
    cr_assert_eq(cuMemAllocFromPoolAsync(&b, MiB, (CUmemoryPool)((char *)FAKE_DEFAULT_POOL + 1), (CUstream)C),
                 CUDA_SUCCESS);
    cr_assert_neq(b, a, "device 1's allocation got device 0's memory");
    /* and the other way round (the free index is ordered by device first: a lookup for device 0
     * lands on device 1's piece, one for device 1 finds nothing of device 0's either way) */
    cr_assert_eq(cuMemFreeAsync(b, (CUstream)C), CUDA_SUCCESS);
    fake_cuda_set_device(0);
    CUdeviceptr d0, d;
    cr_assert_eq(cuMemAllocAsync(&d0, 4 * MiB, (CUstream)C), CUDA_SUCCESS);
    cr_assert_eq(d0, a, "device 0's own freed piece serves it");
    cr_assert_eq(cuMemAllocAsync(&d, MiB, (CUstream)C), CUDA_SUCCESS);
    cr_assert_neq(d, b, "device 0's allocation got device 1's memory");
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
}

/* A block the program freed on S2 while its graph lived goes back at the reap in S2's order,
 * not as if the device were done with it: S2's kernel that read it before the free may still
 * run (before session 27 it went back as GML_STREAM_NONE). */
Test(capture, a_block_freed_while_the_graph_lived_goes_back_in_the_order_of_its_free)
{
    setenv("GMLAKE_STREAM_WAIT", "off", 1);
    make_streams();
    void *p, *q;
    CUgraph g = capture_one(C, &p, 4 * MiB);
    cr_assert_eq(fake_cuda_launch((CUstream)S2), 0); /* S2's kernel reads p */
    cr_assert_eq(cudaFreeAsync(p, S2), cudaSuccess);
    cr_assert_eq(cuGraphDestroy(g), CUDA_SUCCESS);
    cr_assert_eq(cudaMallocAsync(&q, 4 * MiB, S1), cudaSuccess, "reaps, then allocates");
    cr_assert(q != p || fake_cuda_pending((CUstream)S2) == 0,
              "S1 got p while S2's kernel on p was still running");
    cr_assert_eq(cudaFreeAsync(q, S1), cudaSuccess);
}

/* Merging with the previous piece, and three pieces into one. */
Test(capture, pieces_merge_with_the_previous_one_and_three_way)
{
    make_streams();
    void *a, *p[3], *d;
    a = freed_in_capture(6 * MiB);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(cudaMallocAsync(&p[i], 2 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p[0], C), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p[2], C), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p[1], C), cudaSuccess, "merges with both neighbours");
    cr_assert_eq(cudaFreeAsync(p[2], C), cudaErrorInvalidValue, "merged away: not a piece any more");
    size_t s0 = fake_cuda_counts()->ctx_sync;
    cr_assert_eq(cudaMallocAsync(&d, 6 * MiB, C), cudaSuccess);
    cr_assert_eq(d, a);
    cr_assert_eq(stats().live_allocations, 1);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(C, &g), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->ctx_sync, (int)s0);
    cr_assert_eq(cuGraphDestroy((CUgraph)g), CUDA_SUCCESS);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 1, "d is the program's");
    cr_assert_eq(cudaFreeAsync(d, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 0);
}

/* A destroyed stream whose handle a new stream reuses is another stream to the orphan's
 * bookkeeping (gml_graph_stream_retired), so the slab waits for the device. */
Test(capture, an_orphans_frees_on_a_destroyed_and_a_new_stream_are_two_streams)
{
    setenv("GMLAKE_STREAM_WAIT", "off", 1);
    make_streams();
    void *b, *c, *q[3];
    orphan_of_two(&b, &c);
    CUevent ev;
    cr_assert_eq(cuEventCreate(&ev, 0), CUDA_SUCCESS);
    cr_assert_eq(fake_cuda_launch((CUstream)S1), 0); /* S1's kernel reads b */
    cr_assert_eq(cuEventRecord(ev, (CUstream)S1), CUDA_SUCCESS);
    cr_assert_eq(cudaFreeAsync(b, S1), cudaSuccess);
    cudaStream_t old = S1, S3;
    cr_assert_eq(cudaStreamDestroy(S1), cudaSuccess);
    cr_assert_eq(cudaStreamCreate(&S3), cudaSuccess);
    cr_assert_eq(S3, old, "the fake hands the handle out again");
    cr_assert_eq(cudaFreeAsync(c, S3), cudaSuccess);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(cudaMallocAsync(&q[i], 2 * MiB, S3), cudaSuccess);
        cr_assert(q[i] != b || cuEventQuery(ev) == CUDA_SUCCESS,
                  "S3 got b's memory while the destroyed S1's kernel on b still ran");
    }
    cr_assert_eq(cuEventDestroy_v2(ev), CUDA_SUCCESS);
}

/* ---- graph pools (gmlake_graph_pool): captures that share what they freed ---- */

/* Graph 1, captured on C into graph pool `pool` (named for C, and left so): an 8 MiB block freed
 * inside it (scratch), then a 1 MiB output *out at its start; the rest, 7 MiB at a + 1 MiB, is
 * free for captures on C.  Returns a. */
static void *graph_with_scratch(uint64_t pool, cudaGraph_t *g, void **out)
{
    cr_assert_eq(gmlake_graph_pool(C, pool), GMLAKE_OK);
    void *a = freed_in_capture(8 * MiB);
    cr_assert_eq(cudaMallocAsync(out, MiB, C), cudaSuccess);
    cr_assert_eq(*out, a);
    cr_assert_eq(cudaStreamEndCapture(C, g), cudaSuccess);
    return a;
}

/* A capture on s that allocates `size` bytes into *got and keeps them (its output). */
static CUgraph captured_on(cudaStream_t s, size_t size, void **got)
{
    cr_assert_eq(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(got, size, s), cudaSuccess);
    cudaGraph_t g;
    cr_assert_eq(cudaStreamEndCapture(s, &g), cudaSuccess);
    return (CUgraph)g;
}

Test(capture, captures_into_one_graph_pool_share_what_they_freed)
{
    make_streams();
    void *a, *o1, *o2;
    cudaGraph_t g1;
    a = graph_with_scratch(7, &g1, &o1);
    CUgraph g2 = captured_on(C, 4 * MiB, &o2);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq((char *)o2, (char *)a + MiB, "graph 2 takes what graph 1 freed inside itself");
    cr_assert_eq(stats().live_allocations, 1, "one block of the pool for both graphs");
    destroyed_leaves((CUgraph)g1, 1, "graph 2 still runs on part of graph 1's block");
    cr_assert_eq(cudaFreeAsync(o1, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(o2, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 1, "held by graph 2");
    destroyed_leaves(g2, 0, "back once both graphs are gone");
}

Test(capture, captures_share_only_within_one_named_pool_and_stream)
{
    make_streams();
    void *a, *o1, *p, *q, *r;
    cudaGraph_t g1;
    a = graph_with_scratch(7, &g1, &o1);
    cr_assert_eq(gmlake_graph_pool(C, 8), GMLAKE_OK);
    CUgraph g2 = captured_on(C, 4 * MiB, &p);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    CUgraph g3 = captured_on(C, 4 * MiB, &q);
    cr_assert_eq(gmlake_graph_pool(S2, 7), GMLAKE_OK);
    CUgraph g4 = captured_on(S2, 4 * MiB, &r);
    cr_assert_eq(gmlake_graph_pool(S2, 0), GMLAKE_OK);
    /* a stream made after C, so that streams on both sides of C's handle ask (the free index is
     * ordered by stream: a lookup for a stream ordered before C lands on C's piece) */
    cudaStream_t S3;
    void *t;
    cr_assert_eq(cudaStreamCreate(&S3), cudaSuccess);
    cr_assert_eq(gmlake_graph_pool(S3, 7), GMLAKE_OK);
    CUgraph g5 = captured_on(S3, 4 * MiB, &t);
    cr_assert_eq(gmlake_graph_pool(S3, 0), GMLAKE_OK);
    char *rest = (char *)a + MiB;
    cr_assert(p != rest && q != rest && r != rest && t != rest,
              "another pool, no pool, another stream: none takes graph 1's scratch");
    cr_assert_eq(cuGraphDestroy(g5), CUDA_SUCCESS);
    cr_assert_eq(cudaFreeAsync(t, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 4);
    cr_assert_eq(cudaFreeAsync(o1, S1), cudaSuccess);
    destroyed_leaves((CUgraph)g1, 3, "graph 1's block goes back with graph 1");
    cr_assert_eq(cuGraphDestroy(g2), CUDA_SUCCESS);
    cr_assert_eq(cuGraphDestroy(g3), CUDA_SUCCESS);
    cr_assert_eq(cuGraphDestroy(g4), CUDA_SUCCESS);
    cr_assert_eq(cudaFreeAsync(p, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(q, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(r, S1), cudaSuccess);
    pairs(S1, 1);
    cr_assert_eq(stats().live_allocations, 0);
}

Test(capture, a_piece_a_graph_pool_lends_is_freed_inside_the_borrowing_capture)
{
    make_streams();
    void *a, *o1, *x, *y;
    cudaGraph_t g1, g2;
    a = graph_with_scratch(9, &g1, &o1);
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&x, 2 * MiB, C), cudaSuccess);
    cr_assert_eq((char *)x, (char *)a + MiB);
    cr_assert_eq(cudaFreeAsync(x, C), cudaSuccess, "freed inside the capture that took it");
    cr_assert_eq(cudaMallocAsync(&y, 3 * MiB, C), cudaSuccess);
    cr_assert_eq(y, x, "and free for it again, merged with the rest");
    cr_assert_eq(cudaStreamEndCapture(C, &g2), cudaSuccess);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq(cudaFreeAsync(y, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(y, S1), cudaErrorInvalidValue, "a double free");
    cr_assert_eq(cudaFreeAsync(o1, S1), cudaSuccess);
    destroyed_leaves((CUgraph)g2, 1, "graph 1 holds its block");
    destroyed_leaves((CUgraph)g1, 0, "back once both graphs are gone");
}

Test(capture, naming_pools_on_more_streams_than_gmlake_keeps_is_refused)
{
    for (int i = 0; i < 64; i++)
        cr_assert_eq(gmlake_graph_pool((void *)(uintptr_t)(0x1000 + i), 1), GMLAKE_OK);
    cr_assert_eq(gmlake_graph_pool((void *)0x2000, 1), GMLAKE_ERR_NOMEM);
    cr_assert_eq(gmlake_graph_pool((void *)0x1000, 2), GMLAKE_OK, "a stream already named may change");
    cr_assert_eq(gmlake_graph_pool((void *)0x1001, 0), GMLAKE_OK);
    cr_assert_eq(gmlake_graph_pool((void *)0x2000, 1), GMLAKE_OK, "room again");
}

/* A pool named for cudaStreamPerThread names this thread's default stream only: another thread's
 * default stream is another stream, whose captures (the program named no pool for them) keep
 * their memory to themselves.  A pool named for stream 0 (which cannot capture as the legacy
 * stream) names the per-thread stream that stream 0 is in a per-thread program (_ptsz). */
typedef struct ptds_graphs {
    void *a, *o1, *o2;
} ptds_graphs;

static void *two_ptds_graphs(void *arg)
{
    ptds_graphs *r = arg;
    CUstream s = CU_STREAM_PER_THREAD;
    CUdeviceptr a, o1, o2;
    CUgraph g1, g2;
    cr_assert_eq(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&a, 8 * MiB, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(a, s), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&o1, MiB, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamEndCapture(s, &g1), CUDA_SUCCESS);
    cr_assert_eq(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync(&o2, 4 * MiB, s), CUDA_SUCCESS);
    cr_assert_eq(cuStreamEndCapture(s, &g2), CUDA_SUCCESS);
    *r = (ptds_graphs){(void *)a, (void *)o1, (void *)o2};
    return NULL;
}

Test(capture, a_pool_named_for_the_per_thread_stream_is_this_threads_only)
{
    cr_assert_eq(gmlake_graph_pool(cudaStreamPerThread, 7), GMLAKE_OK);
    ptds_graphs r;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, two_ptds_graphs, &r), 0);
    pthread_join(t, NULL);
    cr_assert_eq(r.o1, r.a);
    cr_assert_neq((char *)r.o2, (char *)r.a + MiB,
                  "another thread's graphs, in no pool, share what the first freed inside itself");
    cr_assert_eq(gmlake_graph_pool(cudaStreamPerThread, 0), GMLAKE_OK);
    two_ptds_graphs(&r); /* this thread's own, its name gone */
    cr_assert_neq((char *)r.o2, (char *)r.a + MiB, "unnamed: no sharing");
}

Test(capture, a_pool_named_for_stream_0_is_the_per_thread_streams)
{
    cr_assert_eq(gmlake_graph_pool(NULL, 7), GMLAKE_OK);
    CUdeviceptr a, o2;
    CUgraph g;
    cr_assert_eq(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync_ptsz(&a, 8 * MiB, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemFreeAsync(a, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
    cr_assert_eq(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g), CUDA_SUCCESS);
    cr_assert_eq(cuStreamBeginCapture_v2(CU_STREAM_PER_THREAD, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
    cr_assert_eq(cuMemAllocAsync_ptsz(&o2, 4 * MiB, 0), CUDA_SUCCESS);
    cr_assert_eq(cuStreamEndCapture(CU_STREAM_PER_THREAD, &g), CUDA_SUCCESS);
    cr_assert_eq(o2, a, "stream 0 of a per-thread program names its per-thread stream");
    cr_assert_eq(gmlake_graph_pool(NULL, 0), GMLAKE_OK);
}

/* ---- graph pools: lifetimes (a borrower outliving the home graph, a third capture, a reset) ---- */
Test(capture, a_home_graph_reaped_during_the_borrowers_capture_leaves_its_scratch_to_it)
{
    make_streams();
    void *o1, *x, *y, *z;
    cudaGraph_t g1, g2;
    void *a = graph_with_scratch(7, &g1, &o1);
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&x, 2 * MiB, C), cudaSuccess);
    cr_assert_eq((char *)x, (char *)a + MiB);
    cr_assert_eq(cuGraphDestroy((CUgraph)g1), CUDA_SUCCESS);
    cr_assert_eq(cudaFreeAsync(o1, S1), cudaSuccess); /* reaps g1 inside B's capture */
    cr_assert_eq(stats().live_allocations, 1);
    cr_assert_eq(cudaFreeAsync(x, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&y, 7 * MiB, C), cudaSuccess);
    cr_assert_eq(y, x, "the orphan's freed pieces serve the borrower");
    cr_assert_eq(cudaFreeAsync(y, C), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 1);
    cr_assert_eq(cudaStreamEndCapture(C, &g2), cudaSuccess);
    /* a third capture takes from the orphan too */
    CUgraph g3 = captured_on(C, 3 * MiB, &z);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq(z, x);
    destroyed_leaves((CUgraph)g2, 1, "g3 holds it");
    cr_assert_eq(cudaFreeAsync(z, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 1, "g3 holds it");
    destroyed_leaves(g3, 0, "all gone");
}

Test(capture, a_borrowed_piece_freed_into_a_third_capture_stays_until_that_one_goes)
{
    make_streams();
    void *o1, *o2;
    cudaGraph_t g1, g3;
    void *a = graph_with_scratch(7, &g1, &o1);
    CUgraph g2 = captured_on(C, 4 * MiB, &o2);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq((char *)o2, (char *)a + MiB);
    cr_assert_eq(cudaStreamBeginCapture(S2, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(o2, S2), cudaSuccess);
    cr_assert_eq(cudaStreamEndCapture(S2, &g3), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(o1, S1), cudaSuccess);
    destroyed_leaves(g2, 1, "g1, g3");
    destroyed_leaves((CUgraph)g1, 1, "g3 frees o2 at its launches");
    destroyed_leaves((CUgraph)g3, 0, "all gone");
}

Test(capture, a_device_reset_with_borrows_outstanding_forgets_them)
{
    make_streams();
    void *o1, *o2;
    cudaGraph_t g1;
    graph_with_scratch(7, &g1, &o1);
    CUgraph g2 = captured_on(C, 4 * MiB, &o2);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    cuGraphDestroy((CUgraph)g1);
    cuGraphDestroy(g2);
    void *p;
    cr_assert_eq(cudaMalloc(&p, MiB), cudaSuccess);
    cudaFree(p);
}

/* A graph captured into a pool of its own that gets its name only once captured (PyTorch's
 * graph.pool() of a graph captured without a pool): renamed, a later capture naming it shares. */
Test(capture, a_renamed_pool_is_shared_under_its_new_name)
{
    make_streams();
    void *a, *o1, *o2;
    cudaGraph_t g1;
    a = graph_with_scratch(5, &g1, &o1);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq(gmlake_graph_pool_rename(5, 6), GMLAKE_OK);
    cr_assert_eq(gmlake_graph_pool_rename(0, 6), GMLAKE_ERR_INVALID);
    cr_assert_eq(gmlake_graph_pool_rename(6, 0), GMLAKE_ERR_INVALID);
    cr_assert_eq(gmlake_graph_pool(C, 5), GMLAKE_OK);
    void *x;
    CUgraph gx = captured_on(C, 4 * MiB, &x);
    cr_assert_neq((char *)x, (char *)a + MiB, "the old name shares nothing any more");
    cr_assert_eq(gmlake_graph_pool(C, 6), GMLAKE_OK);
    CUgraph g2 = captured_on(C, 4 * MiB, &o2);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq((char *)o2, (char *)a + MiB, "the new name shares graph 1's scratch");
    cr_assert_eq(cudaFreeAsync(o1, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(o2, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(x, S1), cudaSuccess);
    cr_assert_eq(cuGraphDestroy(gx), CUDA_SUCCESS);
    destroyed_leaves((CUgraph)g1, 1, "graph 2 holds graph 1's block");
    destroyed_leaves(g2, 0, "back once both graphs are gone");
}

/* A thread that ends while its per-thread stream names a pool takes the name with it: a later
 * thread (which may get its pthread_t) has promised nothing. */
static void *name_ptds_and_end(void *unused)
{
    (void)unused;
    cr_assert_eq(gmlake_graph_pool(cudaStreamPerThread, 3), GMLAKE_OK);
    return NULL;
}

Test(capture, a_threads_per_thread_pool_name_ends_with_the_thread)
{
    for (int i = 0; i < 63; i++)
        cr_assert_eq(gmlake_graph_pool((void *)(uintptr_t)(0x1000 + i), 1), GMLAKE_OK);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, name_ptds_and_end, NULL), 0);
    pthread_join(t, NULL);
    cr_assert_eq(gmlake_graph_pool((void *)0x2000, 1), GMLAKE_OK, "the ended thread's entry is gone");
}

/* ---- a graph pool's free pieces are found by one lookup (by device, stream, size) ---- */

Test(capture, a_graph_pool_serves_the_smallest_freed_piece_that_holds_the_request)
{
    make_streams();
    size_t mib[4] = {4, 1, 2, 3};
    void *s[4], *got[4];
    cr_assert_eq(gmlake_graph_pool(C, 11), GMLAKE_OK);
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cudaMallocAsync(&s[i], mib[i] * MiB, C), cudaSuccess);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cudaFreeAsync(s[i], C), cudaSuccess);
    cudaGraph_t g1, g2;
    cr_assert_eq(cudaStreamEndCapture(C, &g1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 4, "four blocks of the pool, each freed in the capture");
    size_t want[4] = {MiB + MiB / 2, 3 * MiB / 4, 3 * MiB + MiB / 2, 2 * MiB + MiB / 2};
    int from[4] = {2, 1, 0, 3}; /* the smallest freed piece that holds each, in turn */
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(cudaMallocAsync(&got[i], want[i], C), cudaSuccess);
        cr_assert_eq(got[i], s[from[i]], "request %d takes the piece of %zu MiB", i, mib[from[i]]);
    }
    void *big;
    cr_assert_eq(cudaMallocAsync(&big, MiB, C), cudaSuccess, "no rest holds 1 MiB: a new block");
    cr_assert_eq(stats().live_allocations, 5);
    cr_assert_eq(cudaStreamEndCapture(C, &g2), cudaSuccess);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cudaFreeAsync(got[i], S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(big, S1), cudaSuccess);
    destroyed_leaves((CUgraph)g1, 5, "graph 2 still runs on graph 1's blocks");
    destroyed_leaves((CUgraph)g2, 0, "back once both graphs are gone");
}

/* An orphan (its graph gone, a piece still the program's) lends its free rest to later captures
 * into its pool; once it goes back to the pool that rest is no graph's to lend any more. */
Test(capture, an_orphans_free_rest_serves_its_pool_until_the_block_goes_back)
{
    make_streams();
    void *a, *o1, *x, *y;
    cudaGraph_t g1;
    a = graph_with_scratch(12, &g1, &o1);
    destroyed_leaves((CUgraph)g1, 1, "the program still holds graph 1's output");
    CUgraph g2 = captured_on(C, 4 * MiB, &x);
    cr_assert_eq((char *)x, (char *)a + MiB, "graph 2 takes the orphan's free rest");
    cr_assert_eq(cudaFreeAsync(x, S1), cudaSuccess);
    destroyed_leaves(g2, 1, "the borrower is gone, but the program still holds o1");
    void *q;
    cr_assert_eq(cudaMallocAsync(&q, 8 * MiB, S1), cudaSuccess);
    cr_assert_neq(q, a, "the block o1 lies in serves no one else");
    cr_assert_eq(cudaFreeAsync(q, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(o1, S1), cudaSuccess);
    cr_assert_eq(stats().live_allocations, 0, "the block goes back with the program's last piece");
    CUgraph g3 = captured_on(C, MiB, &y);
    cr_assert_eq(stats().live_allocations, 1, "graph 3 gets a block of its own, no piece of the returned one");
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq(cudaFreeAsync(y, S1), cudaSuccess);
    destroyed_leaves(g3, 0, "back with graph 3");
}

Test(capture, renaming_a_pool_onto_one_in_use_joins_their_free_pieces)
{
    make_streams();
    void *a, *b, *o1, *o2, *x, *y;
    cudaGraph_t g1, g2, g3;
    a = graph_with_scratch(5, &g1, &o1);
    b = graph_with_scratch(6, &g2, &o2);
    cr_assert_neq(b, a);
    cr_assert_eq(gmlake_graph_pool_rename(5, 6), GMLAKE_OK);
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&x, 6 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&y, 6 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaStreamEndCapture(C, &g3), cudaSuccess);
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    char *ra = (char *)a + MiB, *rb = (char *)b + MiB;
    cr_assert((x == ra && y == rb) || (x == rb && y == ra), "both graphs' scratch now serve pool 6");
    cr_assert_eq(stats().live_allocations, 2);
    void *out[4] = {o1, o2, x, y};
    for (int i = 0; i < 4; i++)
        cr_assert_eq(cudaFreeAsync(out[i], S1), cudaSuccess);
    cr_assert_eq(cuGraphDestroy((CUgraph)g1), CUDA_SUCCESS);
    cr_assert_eq(cuGraphDestroy((CUgraph)g2), CUDA_SUCCESS);
    destroyed_leaves((CUgraph)g3, 0, "back once every graph is gone");
}

/* ---- review of the free index's upkeep: paths the tests above leave out ---- */

/* A device reset while a graph pool's index holds freed pieces (graph 1's scratch rest, graph 2's
 * rest of it): the index forgets them, and a later capture into the same pool walks a clean tree
 * (a stale node would be a use after free under ASan) and gets a block of its own. */
Test(capture, a_device_reset_empties_a_graph_pools_index)
{
    make_streams();
    void *o1, *o2, *x;
    cudaGraph_t g1;
    void *a = graph_with_scratch(7, &g1, &o1);
    CUgraph g2 = captured_on(C, 4 * MiB, &o2);
    cr_assert_eq((char *)o2, (char *)a + MiB);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    make_streams();
    CUgraph g3 = captured_on(C, 2 * MiB, &x); /* C still names pool 7 */
    cr_assert(!fake_cuda_owns((uintptr_t)x), "gmlake serves the capture");
    cr_assert_eq(stats().live_allocations, 1, "a new block: nothing of the reset pool is lent");
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cuGraphDestroy((CUgraph)g1);
    cuGraphDestroy(g2);
    cr_assert_eq(cudaFreeAsync(x, S1), cudaSuccess);
    destroyed_leaves(g3, 0, "back with graph 3");
}

/* A capture whose pool is named only after its first block: that block's freed piece stays the
 * capture's own (as before the index), the later block's is the pool's. */
Test(capture, a_pool_named_mid_capture_shares_only_the_later_blocks)
{
    make_streams();
    void *a, *b, *o, *x, *y;
    cr_assert_eq(cudaStreamBeginCapture(C, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&a, 8 * MiB, C), cudaSuccess);
    cr_assert_eq(gmlake_graph_pool(C, 4), GMLAKE_OK);
    cr_assert_eq(cudaMallocAsync(&b, 6 * MiB, C), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(a, C), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(b, C), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&o, 7 * MiB, C), cudaSuccess);
    cr_assert_eq(o, a, "its own pieces serve it whatever their pool");
    cudaGraph_t g1;
    cr_assert_eq(cudaStreamEndCapture(C, &g1), cudaSuccess);
    CUgraph g2 = captured_on(C, 6 * MiB, &x);
    cr_assert_eq(x, b, "the block made once the pool was named is the pool's");
    CUgraph g3 = captured_on(C, MiB / 2, &y);
    cr_assert_neq((char *)y, (char *)a + 7 * MiB, "the first block's rest is no pool's");
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    void *out[3] = {o, x, y};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(cudaFreeAsync(out[i], S1), cudaSuccess);
    cr_assert_eq(cuGraphDestroy(g2), CUDA_SUCCESS);
    cr_assert_eq(cuGraphDestroy(g3), CUDA_SUCCESS);
    destroyed_leaves((CUgraph)g1, 0, "all back");
}

/* A rename onto itself changes nothing; a rename of a pool whose only free piece is an orphan's
 * moves that piece too, and it goes from the new pool's index with its block. */
Test(capture, a_rename_onto_itself_and_an_orphans_piece_under_a_new_name)
{
    make_streams();
    void *o1, *x, *y;
    cudaGraph_t g1;
    void *a = graph_with_scratch(5, &g1, &o1);
    destroyed_leaves((CUgraph)g1, 1, "an orphan: the program holds o1");
    cr_assert_eq(gmlake_graph_pool_rename(5, 5), GMLAKE_OK);
    cr_assert_eq(gmlake_graph_pool_rename(5, 6), GMLAKE_OK);
    cr_assert_eq(gmlake_graph_pool(C, 6), GMLAKE_OK);
    CUgraph g2 = captured_on(C, 2 * MiB, &x);
    cr_assert_eq((char *)x, (char *)a + MiB, "the orphan's rest serves pool 6");
    cr_assert_eq(cudaFreeAsync(o1, S1), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(x, S1), cudaSuccess);
    destroyed_leaves(g2, 0, "the orphan goes back with graph 2");
    CUgraph g3 = captured_on(C, 2 * MiB, &y);
    cr_assert_eq(stats().live_allocations, 1, "a block of its own: the returned one's rest left the index");
    cr_assert_eq(gmlake_graph_pool(C, 0), GMLAKE_OK);
    cr_assert_eq(cudaFreeAsync(y, S1), cudaSuccess);
    destroyed_leaves(g3, 0, "back with graph 3");
}

/* gmlake_empty_cache while another thread captures in global mode: a device wait there is an
 * unsafe call, refused and fatal to that capture; what has passed goes back without one. */
Test(capture, empty_cache_leaves_another_threads_global_capture_alone)
{
    make_streams();
    void *a;
    cr_assert_eq(cudaMalloc(&a, 8 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(a), cudaSuccess); /* cudaFree waited: its block has passed */
    capturer c;
    capture_start(&c, C, cudaStreamCaptureModeGlobal);
    cr_assert_eq(gmlake_empty_cache(0), GMLAKE_OK);
    cr_assert_eq(fake_cuda_counts()->capture_violations, 0, "no device wait during the capture");
    cr_assert_eq(capture_end(&c), cudaSuccess, "the other thread's capture is intact");
    cr_assert_eq(stats().reserved_bytes, 0, "the passed block went back all the same");
}
