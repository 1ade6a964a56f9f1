/*
 * reset.c — the program resets a device (cudaDeviceReset; the driver's cuDevicePrimaryCtxReset
 * and its _v2): CUDA destroys every allocation and object of the device's primary context, and the
 * program may go on in a fresh one (many CUDA programs reset at the end of main; test harnesses
 * between cases; a reset is also how a program recovers from a sticky fault).
 *
 * gmlake's pool of that device is reset first (stitch/pool.h gml_pool_reset): its memory given
 * back, its allocations, stitched ranges, streams and events forgotten, while the context still
 * exists, because an event used after its context died crashes the process (a segmentation fault
 * in cuEventQuery on the GPU: bench/gpu/reset_probe.cu) and the program's live pointers are no
 * allocations any more (a later free of one is CUDA's invalid value).  Virtual memory itself
 * outlives a reset (the probe: mappings, handles and reservations stay valid), so the pool keeps
 * its arena and serves the fresh context.  The runtime's reset reaches the driver's hook with
 * depth raised, so a pool is reset once per call.  Other devices' pools are not touched.  What
 * the preload layer remembers of the pool's blocks ends with them: graph captures' blocks
 * (graphmem.c; else a graph's end would free whatever the fresh pool put at their addresses) and
 * IPC exports (ipc.c; else an old handle would open a new allocation).  The trace (trace_file)
 * ends each allocation the reset destroyed (an `F`, with no stream) and records the memory given
 * back (an `E`), so that it replays past the reset.
 *
 * A context may also end without a reset: the program destroys a context of its own
 * (cuCtxDestroy[_v2]), or releases a primary context (cuDevicePrimaryCtxRelease[_v2]; the last
 * reference destroys it).  Its memory is the pools' and outlives it, but gmlake's events made in
 * it would crash the process as well.  So before the real call the context is synchronised
 * (pushed for the while) and every pool lets go of it (gml_pool_context_ends): its events
 * destroyed, the streams known to be of it ended, their free blocks serving others at once if the
 * synchronisation succeeded, else after a synchronisation of the device.  Every pool, since a
 * stream-ordered free may name another device's stream.  Whether a release is the last one cannot
 * be known (CUDA counts the references), so every release of an active primary context is taken
 * as an end: its handle is had by a retain of our own, dropped before the program's release.
 * Releases are rare (shutdown), and one that was not the last costs a synchronisation and new
 * events, nothing else.
 * Above pools.c and the pool (stitch/); hooktable.c hands the hooks out.
 */
#include "stitch/registry.h"
#include "interpose.h"

static void reset_pool(int device)
{
    if (!gml_serving() || device < 0 || device >= GML_MAX_DEVICES)
        return;
    gml_streams_changed(); /* the context's streams end with it */
    gml_pool *p = gml_registry_get(device);
    if (!p)
        return;
    /* what other files remember of the pool's blocks ends first: graphs' memory, IPC exports */
    gml_graph_forget_pool(p);
    gml_ipc_forget_device(device);
    /* the trace ends what the reset destroys (the pool records those frees) and records the
     * memory given back (an `E`): else the fresh pool's allocations at the same addresses would
     * be allocations of live pointers, which the replay refuses */
    gml_depth++;
    int rc = gml_pool_reset(p);
    gml_depth--;
    gml_trace_event(device, 'E', 0, 0, GML_STREAM_NONE);
    if (rc == GMLAKE_OK)
        gml_log(GML_LOG_INFO, "device %d: reset by the program; the pool gave its memory back and "
                "starts again", device);
    else
        gml_log(GML_LOG_ERROR, "device %d: reset by the program, and the pool could not be made "
                "again (%s); its allocations pass to CUDA from now on", device, gmlake_strerror(rc));
}

GML_HOOK cudaError_t cudaDeviceReset(void)
{
    GML_RT_ENTRY();
    int d = -1;
    if (gml_serving() && PASS(rt_get_device, NO_RT, &d) == cudaSuccess)
        reset_pool(d);
    return PASS(rt_device_reset, NO_RT);
}

GML_HOOK CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    reset_pool((int)dev);
    return PASS(drv_device_primary_ctx_reset, NO_DRV, dev);
}

GML_HOOK CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    reset_pool((int)dev);
    return PASS(drv_device_primary_ctx_reset_v1, NO_DRV, dev);
}

GML_CHECK_TYPE(cuDevicePrimaryCtxReset_v2, PFN_cuDevicePrimaryCtxReset_v11000);
GML_CHECK_TYPE(cuDevicePrimaryCtxReset, PFN_cuDevicePrimaryCtxReset_v11000);

/* Synchronises ctx, pushed for the call: whether that succeeded; *valid false when ctx cannot be
 * pushed (no context: the real call answers). */
static bool sync_context(CUcontext ctx, bool *valid)
{
    CUcontext popped;
    *valid = PASS(drv_ctx_push_current, NO_DRV, ctx) == CUDA_SUCCESS;
    if (!*valid)
        return false;
    CUresult r = PASS(drv_ctx_synchronize, NO_DRV);
    PASS(drv_ctx_pop_current, NO_DRV, &popped);
    if (r != CUDA_SUCCESS)
        gml_log(GML_LOG_INFO, "context %p ends, and waiting for it failed (CUDA error %d): the free "
                "blocks of its streams wait for a synchronisation of their device", (void *)ctx, (int)r);
    return r == CUDA_SUCCESS;
}

/* Context ctx may end with the real call that follows (the top of this file). */
static void context_ends(CUcontext ctx)
{
    bool valid, synced = sync_context(ctx, &valid);
    if (!valid)
        return;
    gml_streams_changed(); /* its streams end with it */
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        if (p) {
            gml_depth++;
            gml_pool_context_ends(p, (uintptr_t)ctx, synced);
            gml_depth--;
        }
    }
}

GML_HOOK CUresult cuCtxDestroy_v2(CUcontext ctx)
{
    if (ctx && gml_serving())
        context_ends(ctx);
    return PASS(drv_ctx_destroy, NO_DRV, ctx);
}

GML_HOOK CUresult cuCtxDestroy(CUcontext ctx)
{
    if (ctx && gml_serving())
        context_ends(ctx);
    return PASS(drv_ctx_destroy_v1, NO_DRV, ctx);
}

/* A release of dev's primary context may be its last: true when the context is active and was
 * let go of, with a reference of ours taken for that, which the caller drops with the same
 * release function before the program's. */
static bool primary_may_end(CUdevice dev)
{
    unsigned int flags = 0;
    int active = 0;
    CUcontext ctx;
    if (!gml_serving() ||
        PASS(drv_device_primary_ctx_get_state, NO_DRV, dev, &flags, &active) != CUDA_SUCCESS ||
        !active || PASS(drv_device_primary_ctx_retain, NO_DRV, &ctx, dev) != CUDA_SUCCESS)
        return false;
    context_ends(ctx);
    return true;
}

GML_HOOK CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
    if (primary_may_end(dev))
        PASS(drv_device_primary_ctx_release, NO_DRV, dev);
    return PASS(drv_device_primary_ctx_release, NO_DRV, dev);
}

GML_HOOK CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
    if (primary_may_end(dev))
        PASS(drv_device_primary_ctx_release_v1, NO_DRV, dev);
    return PASS(drv_device_primary_ctx_release_v1, NO_DRV, dev);
}

GML_CHECK_TYPE(cuCtxDestroy_v2, PFN_cuCtxDestroy_v4000);
GML_CHECK_TYPE(cuCtxDestroy, PFN_cuCtxDestroy_v4000);
GML_CHECK_TYPE(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000);
GML_CHECK_TYPE(cuDevicePrimaryCtxRelease, PFN_cuDevicePrimaryCtxRelease_v11000);
