/* charge.c — device-call kinds by name, and the charging of one call to a policy (contract in
 * charge.h).  A file of its own under both of its users: the policies of policy.c and the models
 * of tools/models/. */
#include "charge.h"

#include "../core/cost.h"

static const char *const extra_call_names[] = {"cuda_malloc", "cuda_free", "stream_synchronize"};

const char *gml_call_name(int kind)
{
    if (kind >= 0 && kind < GMLAKE_DC_COUNT)
        return gmlake_devcall_name(kind);
    if (kind >= GMLAKE_DC_COUNT && kind < GML_CALL_COUNT)
        return extra_call_names[kind - GMLAKE_DC_COUNT];
    return "unknown";
}

/* Estimated driver seconds of one call (contract in charge.h).  The table has no row for
 * cudaMalloc / cudaFree: they are priced as the VMM calls that do the same work on one handle of
 * the segment's size. */
static double call_seconds(int kind, uint64_t handle_bytes, uint64_t handles)
{
    switch (kind) {
    case GML_CALL_CUDA_MALLOC:
        return gml_cost_call(GMLAKE_DC_VA_RESERVE, 0) + gml_cost_grow(handle_bytes, handle_bytes);
    case GML_CALL_CUDA_FREE:
        return gml_cost_shrink(handle_bytes, handle_bytes) + gml_cost_call(GMLAKE_DC_VA_FREE, 0);
    case GML_CALL_STREAM_SYNC:
        return gml_cost_call(GMLAKE_DC_SYNCHRONIZE, 0);
    default:
        return gml_cost_by_handle(kind) ? (double)handles * gml_cost_call(kind, handle_bytes)
                                        : gml_cost_call(kind, handle_bytes);
    }
}

void gml_policy_call(gml_policy *p, int kind, uint64_t handle_bytes, uint64_t handles)
{
    p->calls[kind]++;
    p->device_seconds += call_seconds(kind, handle_bytes, handles);
}
