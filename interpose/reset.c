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
 * depth raised, so a pool is reset once per call.  Other devices' pools are not touched.
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
    gml_depth++;
    int rc = gml_pool_reset(p);
    gml_depth--;
    if (rc == GMLAKE_OK)
        gml_log(GML_LOG_INFO, "device %d: reset by the program; the pool gave its memory back and "
                "starts again", device);
    else
        gml_log(GML_LOG_ERROR, "device %d: reset by the program, and the pool could not be made "
                "again (%s); gmlake serves nothing more there", device, gmlake_strerror(rc));
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
