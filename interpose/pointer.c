/*
 * pointer.c — CUDA's pointer queries about gmlake memory answered as about cudaMalloc's.
 *
 * gmlake's memory is CUDA virtual memory, and CUDA answers for a pointer into it with what it
 * knows: cuMemGetAddressRange gives the one mapping holding it (a home extent, which may hold
 * several allocations or a piece of one, or a stitched range), the range attributes the whole
 * virtual reservation (the pool's arena: hundreds of GiB), "not legacy-IPC capable", and
 * cuMemRetainAllocationHandle an extent's handle.  A program that finds an allocation's base
 * that way, to export it with cudaIpcGetMemHandle and send the pointer's offset (vLLM's custom
 * all-reduce, Numba's IPC, NCCL's buffer registration), would export the wrong memory.  So, for
 * a pointer inside a live allocation gmlake served (home or stitched, any byte of it):
 *  - cuMemGetAddressRange and the attributes RANGE_START_ADDR / RANGE_SIZE give the allocation:
 *    its first byte and the bytes asked for, as CUDA does for cudaMalloc memory;
 *  - IS_LEGACY_CUDA_IPC_CAPABLE is 1 where gmlake can export the pool's memory (cudaIpc*,
 *    ipc.c), else 0;
 *  - cuMemRetainAllocationHandle fails with CUDA_ERROR_INVALID_VALUE, as for cudaMalloc memory:
 *    an extent's handle is gmlake's, and mapping it elsewhere would show a part of an
 *    allocation, or parts of others.
 * For a pointer in gmlake's memory that no live allocation holds (freed, or never handed out),
 * those four answer as CUDA does for freed cudaMalloc memory: CUDA_ERROR_NOT_FOUND (the
 * address range), CUDA_ERROR_INVALID_VALUE (the attributes, the retain); cuPointerGetAttributes
 * fills them with zeros.  A pointer into an allocation this process opened through gmlake's
 * IPC answers with that allocation's range (CUDA's opened pointers answer with theirs); the
 * rest of its queries are CUDA's.  Every other attribute, and every pointer that is not gmlake's,
 * goes to CUDA untouched (the attribute is looked at first: Triton asks DEVICE_POINTER at every
 * launch).
 * Files: it calls owner.c (which pool), ipc.c (opened allocations) and the pool (registry.h).
 */
#include <string.h>

#include "stitch/registry.h"
#include "interpose.h"

typedef enum { NOT_OURS = 0, LIVE, NOT_LIVE } which;

/* What gmlake knows of ptr: LIVE with the allocation's range and whether it can be exported,
 * NOT_LIVE (gmlake's memory, no live allocation), NOT_OURS (CUDA answers). */
static which look_up(uintptr_t ptr, uintptr_t *base, size_t *size, int *legacy)
{
    *legacy = 0;
    if (!ptr || !gml_serving())
        return NOT_OURS;
    gml_depth++;
    gml_pool *p = gml_owner(ptr, NULL);
    which w = NOT_OURS;
    if (p) {
        w = gml_pool_find(p, ptr, base, size) == GMLAKE_OK ? LIVE : NOT_LIVE;
        *legacy = w == LIVE && gml_dev_can_export(gml_pool_device(p));
    } else if (gml_ipc_opened_range(ptr, base, size)) {
        w = LIVE;
        *legacy = -1; /* CUDA's answer: an opened allocation is not exported again */
    }
    gml_depth--;
    return w;
}

static bool range_attribute(CUpointer_attribute a)
{
    return a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || a == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
           a == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE;
}

/* Writes gmlake's answer for attribute a (a range_attribute) of a pointer look_up placed; false
 * when CUDA's answer stands (IS_LEGACY_CUDA_IPC_CAPABLE of an opened allocation). */
static bool fill(CUpointer_attribute a, void *data, which w, uintptr_t base, size_t size, int legacy)
{
    bool live = w == LIVE;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = live ? (CUdeviceptr)base : 0;
        return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = live ? size : 0;
        return true;
    default: /* CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE */
        if (legacy < 0)
            return false;
        *(int *)data = legacy;
        return true;
    }
}

GML_HOOK CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    uintptr_t base = 0;
    size_t size = 0;
    int legacy;
    switch (look_up((uintptr_t)dptr, &base, &size, &legacy)) {
    case LIVE:
        if (pbase)
            *pbase = (CUdeviceptr)base;
        if (psize)
            *psize = size;
        return CUDA_SUCCESS;
    case NOT_LIVE:
        return CUDA_ERROR_NOT_FOUND;
    default:
        return PASS(drv_mem_get_address_range, NO_DRV, pbase, psize, dptr);
    }
}

GML_HOOK CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    uintptr_t base = 0;
    size_t size = 0;
    int legacy;
    which w = data && range_attribute(attribute) ? look_up((uintptr_t)ptr, &base, &size, &legacy) : NOT_OURS;
    if (w == NOT_LIVE)
        return CUDA_ERROR_INVALID_VALUE;
    if (w == LIVE && fill(attribute, data, w, base, size, legacy))
        return CUDA_SUCCESS;
    return PASS(drv_pointer_get_attribute, NO_DRV, data, attribute, ptr);
}

GML_HOOK CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
                                         void **data, CUdeviceptr ptr)
{
    CUresult r = PASS(drv_pointer_get_attributes, NO_DRV, numAttributes, attributes, data, ptr);
    if (r != CUDA_SUCCESS || !attributes || !data)
        return r;
    bool asked = false;
    for (unsigned i = 0; i < numAttributes && !asked; i++)
        asked = data[i] && range_attribute(attributes[i]);
    uintptr_t base = 0;
    size_t size = 0;
    int legacy;
    which w = asked ? look_up((uintptr_t)ptr, &base, &size, &legacy) : NOT_OURS;
    for (unsigned i = 0; w != NOT_OURS && i < numAttributes; i++)
        if (data[i] && range_attribute(attributes[i]))
            fill(attributes[i], data[i], w, base, size, legacy);
    return r;
}

GML_HOOK CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    uintptr_t base = 0;
    size_t size = 0;
    int legacy;
    which w = look_up((uintptr_t)addr, &base, &size, &legacy);
    if (w == NOT_LIVE || (w == LIVE && legacy >= 0)) /* a pool's memory, not an opened one */
        return CUDA_ERROR_INVALID_VALUE;
    return PASS(drv_mem_retain_allocation_handle, NO_DRV, handle, addr);
}

GML_CHECK_TYPE(cuMemGetAddressRange_v2, PFN_cuMemGetAddressRange_v3020);
GML_CHECK_TYPE(cuPointerGetAttribute, PFN_cuPointerGetAttribute_v4000);
GML_CHECK_TYPE(cuPointerGetAttributes, PFN_cuPointerGetAttributes_v7000);
GML_CHECK_TYPE(cuMemRetainAllocationHandle, PFN_cuMemRetainAllocationHandle_v11000);
