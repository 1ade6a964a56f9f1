/* bench/gpu/vmm_offset.cu — may a stitched view map part of a handle (cuMemMap at a non-zero
 * offset), and what does a view's access cost by handle size and handle type?  (heap.h's extents
 * assume CUDA maps a handle only whole, at offset 0, so a stitch maps whole extents and larger
 * extents strand memory; the driver charges cuMemSetAccess per handle mapped, and on some hosts
 * per byte.)
 *
 * 1. correctness: a handle of 64 MiB filled through its home mapping with each word's index;
 *    a second view maps its 2 MiB pieces in reverse order (cuMemMap with offsets); a kernel
 *    checks that every word of the view holds what the home mapping put there, and a write
 *    through the view shows in the home mapping.  One JSON line: ok, mismatches.
 * 2. cost, REPS times each (median printed): a second view (the handles' home mappings made
 *    first, as in gmlake) of P handles of PIECE_MIB, in reverse order, and of one handle of
 *    P x PIECE_MIB mapped whole; each with handles made as gmlake makes them (pinned, exportable
 *    as POSIX file descriptors where supported: "fd") and without an export type ("plain"): the
 *    host time of the maps, of the one cuMemSetAccess over the view, and of the unmap.
 *    (Mapping at an offset is not timed: where it is refused, part 1 says so.)
 * Build: nvcc -O2 -arch=sm_90 -o vmm_offset bench/gpu/vmm_offset.cu -lcuda
 * Usage: vmm_offset [REPS (default 5)] */
#include <string.h>

#define VMM_PROG "vmm_offset"
#include "vmm_bench.cuh"


static const size_t MIB = 1 << 20;

__global__ void fill_k(unsigned *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = (unsigned)i;
}

/* view word i lies in view piece i / per, which maps handle piece (pieces - 1 - i / per) */
__global__ void check_k(const unsigned *v, size_t n, size_t per, size_t pieces, unsigned *bad)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t want = (pieces - 1 - i / per) * per + i % per;
        if (v[i] != (unsigned)want)
            atomicAdd(bad, 1u);
    }
}

static CUmemAllocationProp prop;
static CUmemAccessDesc acc;

static CUmemGenericAllocationHandle make(size_t bytes)
{
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, bytes, &prop, 0));
    return h;
}

struct piece { CUmemGenericAllocationHandle h; size_t off, len; };

/* Reserve, map the pieces in order, set access once; adds each phase's host time. */
static CUdeviceptr view(const std::vector<piece> &ps, double *map_ms, double *acc_ms)
{
    size_t total = 0;
    for (const piece &p : ps)
        total += p.len;
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, total, 0, 0, 0));
    double t0 = now_ms();
    size_t at = 0;
    for (const piece &p : ps) {
        CK(cuMemMap(va + at, p.len, p.off, p.h, 0));
        at += p.len;
    }
    double t1 = now_ms();
    CK(cuMemSetAccess(va, total, &acc, 1));
    double t2 = now_ms();
    *map_ms += t1 - t0, *acc_ms += t2 - t1;
    return va;
}

static double drop(CUdeviceptr va, size_t total)
{
    double t0 = now_ms();
    CK(cuMemUnmap(va, total));
    double t = now_ms() - t0;
    CK(cuMemAddressFree(va, total));
    return t;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: vmm_offset [REPS 1..1000]\n");
        return 2;
    }
    RK(cudaSetDevice(0));
    RK(cudaFree(0));
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    int fd_ok = 0;
    CK(cuDeviceGetAttribute(&fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
    if (fd_ok)
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t gran = 0;
    CK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));

    /* 1. correctness */
    const size_t hb = 64 * MIB, pb = 2 * MIB, pieces = hb / pb, per = pb / 4;
    CUmemGenericAllocationHandle h = make(hb);
    double ig = 0, ig2 = 0;
    CUdeviceptr home = view({{h, 0, hb}}, &ig, &ig2);
    fill_k<<<1024, 256>>>((unsigned *)home, hb / 4);
    std::vector<piece> rev;
    for (size_t k = 0; k < pieces; k++)
        rev.push_back({h, (pieces - 1 - k) * pb, pb});
    CUresult mr = CUDA_SUCCESS;
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, hb, 0, 0, 0));
    size_t mapped = 0;
    for (; mapped < pieces; mapped++) {
        mr = cuMemMap(va + mapped * pb, pb, rev[mapped].off, h, 0);
        if (mr != CUDA_SUCCESS)
            break;
    }
    unsigned *bad, nbad = 0, seen = 0;
    RK(cudaMalloc(&bad, sizeof *bad));
    RK(cudaMemset(bad, 0, sizeof *bad));
    if (mr == CUDA_SUCCESS) {
        CK(cuMemSetAccess(va, hb, &acc, 1));
        check_k<<<1024, 256>>>((const unsigned *)va, hb / 4, per, pieces, bad);
        RK(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
        unsigned mark = 0xabcdef01u; /* a write through the view's first word: handle piece 31 */
        RK(cudaMemcpy((void *)va, &mark, sizeof mark, cudaMemcpyHostToDevice));
        RK(cudaMemcpy(&seen, (void *)(home + (pieces - 1) * pb), sizeof seen, cudaMemcpyDeviceToHost));
    }
    printf("{\"case\":\"map_at_offset\",\"granularity\":%zu,\"fd_handles\":%d,\"map_at_offset\":%d,"
           "\"mapped_pieces\":%zu,\"mismatches\":%u,\"write_seen\":%d,\"ok\":%s}\n",
           gran, fd_ok, (int)mr, mapped, nbad, seen == 0xabcdef01u,
           mr == CUDA_SUCCESS && nbad == 0 && seen == 0xabcdef01u ? "true" : "false");
    fflush(stdout);
    if (mapped)
        CK(cuMemUnmap(va, mapped * pb));
    CK(cuMemAddressFree(va, hb));
    drop(home, hb);
    CK(cuMemRelease(h));

    /* 2. cost */
    const size_t counts[] = {16, 64, 256};
    const size_t sizes[] = {2, 8};
    const unsigned long long fd_type = prop.requestedHandleTypes;
    for (int kind = 0; kind < (fd_ok ? 2 : 1); kind++) {
        prop.requestedHandleTypes = kind ? (CUmemAllocationHandleType)0 : (CUmemAllocationHandleType)fd_type;
        const char *tname = kind || !fd_ok ? "plain" : "fd";
        for (size_t smib : sizes)
            for (size_t P : counts) {
                size_t psz = smib * MIB, total = P * psz;
                CUmemGenericAllocationHandle big = make(total);
                std::vector<CUmemGenericAllocationHandle> small(P);
                std::vector<piece> whole = {{big, 0, total}}, hs, home;
                for (size_t k = 0; k < P; k++) {
                    small[k] = make(psz);
                    home.push_back({small[k], 0, psz});
                }
                for (size_t k = 0; k < P; k++)
                    hs.push_back({small[P - 1 - k], 0, psz});
                CUdeviceptr home_big = view(whole, &ig, &ig2), home_small = view(home, &ig, &ig2);
                const char *names[] = {"handles", "whole"};
                const std::vector<piece> *sets[] = {&hs, &whole};
                for (int c = 0; c < 2; c++) {
                    std::vector<double> m, a, u;
                    for (int r = 0; r < reps; r++) {
                        double mm = 0, aa = 0;
                        CUdeviceptr v = view(*sets[c], &mm, &aa);
                        RK(cudaDeviceSynchronize());
                        u.push_back(drop(v, total));
                        m.push_back(mm), a.push_back(aa);
                    }
                    printf("{\"case\":\"%s\",\"type\":\"%s\",\"handles\":%zu,\"handle_mib\":%zu,"
                           "\"map_ms\":%.3f,\"set_access_ms\":%.3f,\"unmap_ms\":%.3f,\"reps\":%d}\n",
                           names[c], tname, c ? (size_t)1 : P, c ? P * smib : smib, median(m),
                           median(a), median(u), reps);
                    fflush(stdout);
                }
                drop(home_big, total);
                drop(home_small, total);
                CK(cuMemRelease(big));
                for (size_t k = 0; k < P; k++)
                    CK(cuMemRelease(small[k]));
            }
    }
    return 0;
}
