// bench/gpu/reset_probe.cu — what a context reset or destroy does to the objects a VMM pool
// holds, measured with plain CUDA (no gmlake): physical handles (cuMemCreate), their mappings
// and access, address reservations, events.  One JSON line per mode, every call's result by name;
// a mode that crashes shows as a missing line (run each mode as its own process).
// Modes (argv[1]):
//   runtime  cudaDeviceReset after a 256 MiB handle was mapped at a reservation and a 64 MiB
//            cudaMalloc made: free memory before and after, whether the old mapping still serves
//            a memset in the new primary context, unmap / release / address free / cudaFree of
//            the stale pointer afterwards.
//   driver   the same through cuDevicePrimaryCtxReset_v2.
//   ctx      the handle made and mapped while a context of our own (cuCtxCreate) was current,
//            then cuCtxDestroy: the same questions from the primary context.
//   event    an event of the primary context after cudaDeviceReset: cuEventQuery, cuEventRecord,
//            cuEventDestroy (the call most likely to crash, so in a process of its own).
// Build: nvcc -O2 -arch=sm_90 -o reset_probe bench/gpu/reset_probe.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define MiB ((size_t)1 << 20)

static const char *nm(CUresult r) { const char *s = NULL; cuGetErrorName(r, &s); return s ? s : "?"; }
static size_t free_mib(void) { size_t f = 0, t = 0; cuMemGetInfo(&f, &t); return f / MiB; }

static CUresult vmm_make(CUmemGenericAllocationHandle *h, CUdeviceptr *va, size_t size)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUresult r = cuMemCreate(h, size, &prop, 0);
    if (r) return r;
    if ((r = cuMemAddressReserve(va, size, 0, 0, 0))) return r;
    if ((r = cuMemMap(*va, size, 0, *h, 0))) return r;
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location = prop.location;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return cuMemSetAccess(*va, size, &a, 1);
}

static void after(const char *mode, CUmemGenericAllocationHandle h, CUdeviceptr va, size_t size,
                  void *plain, size_t f0, size_t f1, size_t f2)
{
    CUresult ms = cuMemsetD8(va, 2, MiB);
    CUresult sy = cuCtxSynchronize();
    CUresult um = cuMemUnmap(va, size);
    size_t f3 = free_mib();
    CUresult rl = cuMemRelease(h);
    size_t f4 = free_mib();
    CUresult af = cuMemAddressFree(va, size);
    cudaError_t cf = plain ? cudaFree(plain) : cudaSuccess;
    printf("{\"mode\":\"%s\",\"free_mib_before\":%zu,\"free_mib_held\":%zu,\"free_mib_after_reset\":%zu,"
           "\"memset_old_mapping\":\"%s\",\"sync\":\"%s\",\"unmap\":\"%s\",\"free_mib_after_unmap\":%zu,"
           "\"release\":\"%s\",\"free_mib_after_release\":%zu,\"address_free\":\"%s\",\"cudaFree_stale\":\"%s\"}\n",
           mode, f0, f1, f2, nm(ms), nm(sy), nm(um), f3, nm(rl), f4, nm(af), cudaGetErrorName(cf));
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "runtime";
    const size_t size = 256 * MiB;
    CUmemGenericAllocationHandle h = 0;
    CUdeviceptr va = 0;
    void *plain = NULL;
    cudaSetDevice(0);
    cudaFree(0);
    size_t f0 = free_mib();
    if (!strcmp(mode, "runtime") || !strcmp(mode, "driver")) {
        CUresult r = vmm_make(&h, &va, size);
        cudaMalloc(&plain, 64 * MiB);
        cuMemsetD8(va, 1, size);
        cuCtxSynchronize();
        size_t f1 = free_mib();
        const char *rr;
        if (!strcmp(mode, "runtime")) {
            rr = cudaGetErrorName(cudaDeviceReset());
        } else {
            rr = nm(cuDevicePrimaryCtxReset(0));
        }
        cudaFree(0); /* the runtime makes the primary context again */
        size_t f2 = free_mib();
        fprintf(stderr, "make %s reset %s\n", nm(r), rr);
        after(mode, h, va, size, plain, f0, f1, f2);
    } else if (!strcmp(mode, "ctx")) {
        CUcontext own = NULL, prim = NULL;
        cuCtxGetCurrent(&prim);
        CUresult c = cuCtxCreate(&own, NULL, 0, 0);
        CUresult r = vmm_make(&h, &va, size);
        cuMemsetD8(va, 1, size);
        cuCtxSynchronize();
        size_t f1 = free_mib();
        CUresult d = cuCtxDestroy(own);
        cuCtxSetCurrent(prim);
        size_t f2 = free_mib();
        fprintf(stderr, "ctx %s make %s destroy %s\n", nm(c), nm(r), nm(d));
        after(mode, h, va, size, NULL, f0, f1, f2);
    } else if (!strcmp(mode, "event")) {
        CUevent ev = NULL;
        CUresult c = cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
        cuEventRecord(ev, 0);
        cuCtxSynchronize();
        cudaError_t rs = cudaDeviceReset();
        cudaFree(0);
        fprintf(stderr, "event create %s reset %s\n", nm(c), cudaGetErrorName(rs));
        fflush(stderr);
        CUresult q = cuEventQuery(ev);
        CUresult rec = cuEventRecord(ev, 0);
        CUresult de = cuEventDestroy(ev);
        printf("{\"mode\":\"event\",\"query\":\"%s\",\"record\":\"%s\",\"destroy\":\"%s\"}\n", nm(q), nm(rec), nm(de));
    } else {
        fprintf(stderr, "reset_probe: unknown mode '%s' (runtime, driver, ctx, event)\n", mode);
        return 2;
    }
    return 0;
}
