/*
 * capture.c — whether a graph capture may be under way anywhere in the process, so that the
 * allocation and free hooks ask CUDA about a stream's capture only then (hooks.c: `capturing`).
 *
 * Contract: gml_capture_under_way() is true from before any capture that a hook saw begin
 * becomes visible until after it ended.  It errs on the side of true:
 *  - every begin hook (cudaStreamBeginCapture[ToGraph], cuStreamBeginCapture[_v2][ToGraph], and
 *    their _ptsz variants) counts the capture before the real call and uncounts it if that fails;
 *  - every end hook (cudaStreamEndCapture, cuStreamEndCapture, _ptsz) uncounts one capture only if
 *    the stream was capturing before the real call (active or invalidated: an invalidated capture
 *    is under way until its end call), the call ended it (success, or "invalidated") and the
 *    stream no longer captures after it; a failed status query counts as "still capturing" (an
 *    end on a stream that only joined another's capture fails otherwise and ends nothing);
 *  - a capture that never ends (its end never called) keeps the count up for good.
 * Calls made from inside gmlake (gml_depth > 0: the runtime's own driver calls below one of these
 * hooks) are not counted again.  A capture begun where no hook of gmlake's can see it (a function
 * pointer obtained with routing off) is not known: allocations on its stream are served by
 * gmlake as outside a capture.
 */
#include <stdatomic.h>

#include "interpose.h"

static _Atomic long under_way;

bool gml_capture_under_way(void) { return atomic_load_explicit(&under_way, memory_order_acquire) != 0; }

/* Before a real begin call: whether this capture is counted (it is, from now on). */
static bool begin(void)
{
    if (gml_depth)
        return false;
    atomic_fetch_add(&under_way, 1);
    return true;
}

static void begun(bool counted, bool ok)
{
    if (counted && !ok)
        atomic_fetch_sub(&under_way, 1);
}

/* Whether stream s (as the calling thread names it; ptsz: a _ptsz entry point of the driver)
 * captures now, through the runtime (rt) or the driver; a failed query says yes. */
static bool stream_captures(bool rt, CUstream s)
{
    if (rt) {
        enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
        return PASS(rt_stream_is_capturing, NO_RT, (cudaStream_t)s, &st) != cudaSuccess ||
               st != cudaStreamCaptureStatusNone;
    }
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return PASS(drv_stream_is_capturing, NO_DRV, s, &st) != CUDA_SUCCESS || st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Before a real end call on s: whether a counted capture may end there, and its id in *id (0 if
 * unknown: graphmem.c then never hears of its end).  The legacy stream never captures (and
 * querying it during a capture is an error). */
static bool ending(bool rt, CUstream s, uint64_t *id)
{
    *id = 0;
    bool was = !gml_depth && s && s != CU_STREAM_LEGACY && gml_capture_under_way() && stream_captures(rt, s);
    if (was)
        gml_graph_capture_id(s, id, NULL);
    return was;
}

/* After the real end call on s, which returned r (CUresult numbering; the runtime's codes for
 * these two are the same numbers) and, on success, the graph *graph.  The capture with that id
 * ended: graphmem.c ties its memory to the graph (or releases it, without one). */
static void ended(bool rt, CUstream s, bool was, uint64_t id, int r, CUgraph *graph)
{
    _Static_assert((int)CUDA_ERROR_STREAM_CAPTURE_INVALIDATED == (int)cudaErrorStreamCaptureInvalidated,
                   "one code for an invalidated capture's end");
    bool ends = r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    if (was && ends && !stream_captures(rt, s)) {
        atomic_fetch_sub(&under_way, 1);
        gml_graph_ended(id, r == CUDA_SUCCESS && graph ? *graph : NULL);
    }
}

/* ---- runtime ---- */

static cudaError_t rt_begin(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    bool counted = begin();
    cudaError_t r = PASS(rt_stream_begin_capture, NO_RT, s, mode);
    begun(counted, r == cudaSuccess);
    return r;
}

static cudaError_t rt_begin_to_graph(cudaStream_t s, cudaGraph_t graph, const cudaGraphNode_t *dependencies,
                                     const cudaGraphEdgeData *dependencyData, size_t numDependencies,
                                     enum cudaStreamCaptureMode mode)
{
    bool counted = begin();
    cudaError_t r = PASS(rt_stream_begin_capture_to_graph, NO_RT, s, graph, dependencies,
                         dependencyData, numDependencies, mode);
    begun(counted, r == cudaSuccess);
    return r;
}

static cudaError_t rt_end(cudaStream_t s, cudaGraph_t *graph)
{
    uint64_t id;
    bool was = ending(true, (CUstream)s, &id);
    cudaError_t r = PASS(rt_stream_end_capture, NO_RT, s, graph);
    ended(true, (CUstream)s, was, id, r, (CUgraph *)graph);
    return r;
}

GML_HOOK cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    GML_RT_ENTRY();
    return rt_begin(s, mode);
}

GML_HOOK cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t graph,
                                                   const cudaGraphNode_t *dependencies,
                                                   const cudaGraphEdgeData *dependencyData,
                                                   size_t numDependencies, enum cudaStreamCaptureMode mode)
{
    GML_RT_ENTRY();
    return rt_begin_to_graph(s, graph, dependencies, dependencyData, numDependencies, mode);
}

GML_HOOK cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph)
{
    GML_RT_ENTRY();
    return rt_end(s, graph);
}

/* The per-thread-default-stream variants: stream 0 is this thread's default stream. */
GML_HOOK cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
    GML_RT_ENTRY();
    return rt_begin(s ? s : cudaStreamPerThread, mode);
}

GML_HOOK cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t graph,
                                                        const cudaGraphNode_t *dependencies,
                                                        const cudaGraphEdgeData *dependencyData,
                                                        size_t numDependencies,
                                                        enum cudaStreamCaptureMode mode)
{
    GML_RT_ENTRY();
    return rt_begin_to_graph(s ? s : cudaStreamPerThread, graph, dependencies, dependencyData,
                             numDependencies, mode);
}

GML_HOOK cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *graph)
{
    GML_RT_ENTRY();
    return rt_end(s ? s : cudaStreamPerThread, graph);
}

/* ---- driver ---- */

/* A driver begin: `call` is the real call's expression. */
#define DRV_BEGIN(call)                                                                           \
    ({                                                                                            \
        bool counted_ = begin();                                                                  \
        CUresult r_ = (call);                                                                     \
        begun(counted_, r_ == CUDA_SUCCESS);                                                      \
        r_;                                                                                       \
    })

GML_HOOK CUresult cuStreamBeginCapture(CUstream s)
{
    return DRV_BEGIN(PASS(drv_stream_begin_capture_v1, NO_DRV, s));
}

GML_HOOK CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
    return DRV_BEGIN(PASS(drv_stream_begin_capture_v1_ptsz, NO_DRV, s));
}

GML_HOOK CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    return DRV_BEGIN(PASS(drv_stream_begin_capture, NO_DRV, s, mode));
}

GML_HOOK CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode)
{
    return DRV_BEGIN(PASS(drv_stream_begin_capture_ptsz, NO_DRV, s, mode));
}

GML_HOOK CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph, const CUgraphNode *dependencies,
                                              const CUgraphEdgeData *dependencyData,
                                              size_t numDependencies, CUstreamCaptureMode mode)
{
    return DRV_BEGIN(PASS(drv_stream_begin_capture_to_graph, NO_DRV, s, graph, dependencies,
                          dependencyData, numDependencies, mode));
}

GML_HOOK CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph graph,
                                                   const CUgraphNode *dependencies,
                                                   const CUgraphEdgeData *dependencyData,
                                                   size_t numDependencies, CUstreamCaptureMode mode)
{
    return DRV_BEGIN(PASS(drv_stream_begin_capture_to_graph_ptsz, NO_DRV, s, graph, dependencies,
                          dependencyData, numDependencies, mode));
}

/* An end through the driver (ptsz: stream 0 is this thread's default stream, which the status
 * query names CU_STREAM_PER_THREAD). */
static CUresult drv_end(CUstream s, CUgraph *graph, bool ptsz)
{
    CUstream named = !s && ptsz ? CU_STREAM_PER_THREAD : s;
    uint64_t id;
    bool was = ending(false, named, &id);
    CUresult r = ptsz ? PASS(drv_stream_end_capture_ptsz, NO_DRV, s, graph)
                      : PASS(drv_stream_end_capture, NO_DRV, s, graph);
    ended(false, named, was, id, r, graph);
    return r;
}

GML_HOOK CUresult cuStreamEndCapture(CUstream s, CUgraph *graph) { return drv_end(s, graph, false); }

GML_HOOK CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *graph) { return drv_end(s, graph, true); }

GML_CHECK_TYPE(cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v10010);
GML_CHECK_TYPE(cuStreamBeginCapture_v2_ptsz, PFN_cuStreamBeginCapture_v10010_ptsz);
GML_CHECK_TYPE(cuStreamBeginCapture, gml_pfn_stream_begin_capture_v1);
GML_CHECK_TYPE(cuStreamBeginCapture_ptsz, gml_pfn_stream_begin_capture_v1);
GML_CHECK_TYPE(cuStreamBeginCaptureToGraph, PFN_cuStreamBeginCaptureToGraph_v12030);
GML_CHECK_TYPE(cuStreamBeginCaptureToGraph_ptsz, PFN_cuStreamBeginCaptureToGraph_v12030_ptsz);
GML_CHECK_TYPE(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000);
GML_CHECK_TYPE(cuStreamEndCapture_ptsz, PFN_cuStreamEndCapture_v10000_ptsz);
