/* bench/gpu/layout.cu — does where a tensor lands cost GPU time?  (issue 20: under FSDP2 the GPU's
 * kernel time was ~5% higher under gmlake than under PyTorch's allocators in one profile.)
 *
 * The same kernels run over the same number of bytes laid out as each allocator lays them out:
 *   cudaMalloc       one cudaMalloc (CUDA's own)
 *   pool             one cudaMallocAsync from the device's default pool (PyTorch's async backend)
 *   handle           one cuMemCreate handle of the whole size, mapped once
 *   home H           handles of H MiB mapped in order into one range (gmlake's home arena, or
 *                    expandable segments with H = 20)
 *   stitched H       the same handles mapped into a second range in a shuffled order (a stitched
 *                    range made of extents from all over the pool)
 * Kernels: `stream` (x = x * a + b over the whole buffer, float4: bandwidth) and `gather` (each
 * thread of 2.2 million reads 16 floats at pseudo-random 4 KiB-aligned offsets: address
 * translation).  Each
 * case: 3 warm-up launches, then the median and min of REPS timed launches (CUDA events).
 * One JSON line a case and kernel.
 * Build: nvcc -O2 -arch=sm_90 -o layout bench/gpu/layout.cu -lcuda
 * Usage: layout [MiB (default 2048)] [REPS (default 21)] */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "%s: CUDA error %d\n", #x, (int)r_); exit(1); } } while (0)
#define RK(x) do { cudaError_t r_ = (x); if (r_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(r_)); exit(1); } } while (0)

__global__ void stream_k(float4 *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        v.x = v.x * 1.0001f + 1.f; v.y = v.y * 1.0001f + 1.f; v.z = v.z * 1.0001f + 1.f; v.w = v.w * 1.0001f + 1.f;
        x[i] = v;
    }
}

__global__ void gather_k(const float *x, size_t pages, float *out)
{
    size_t t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    unsigned long long s = t * 0x9E3779B97F4A7C15ull + 1;
    float acc = 0;
    for (int k = 0; k < 16; k++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        acc += x[(s % pages) * 1024];
    }
    out[t] = acc;
}

static int reps = 21;
#define GATHER_BLOCKS (132 * 64)

static void timeit(const char *layout, size_t hmib, const char *kernel, void (*launch)(void *, size_t, float *),
                   void *p, size_t bytes, float *out)
{
    cudaEvent_t a, b;
    RK(cudaEventCreate(&a));
    RK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++)
        launch(p, bytes, out);
    std::vector<float> ms;
    for (int i = 0; i < reps; i++) {
        RK(cudaEventRecord(a));
        launch(p, bytes, out);
        RK(cudaEventRecord(b));
        RK(cudaEventSynchronize(b));
        float t;
        RK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    RK(cudaGetLastError());
    std::sort(ms.begin(), ms.end());
    printf("{\"layout\":\"%s\",\"handle_mib\":%zu,\"kernel\":\"%s\",\"mib\":%zu,\"median_ms\":%.4f,\"min_ms\":%.4f}\n",
           layout, hmib, kernel, bytes >> 20, ms[ms.size() / 2], ms[0]);
    fflush(stdout);
    RK(cudaEventDestroy(a));
    RK(cudaEventDestroy(b));
}

static void launch_stream(void *p, size_t bytes, float *out)
{
    (void)out;
    stream_k<<<132 * 8, 256>>>((float4 *)p, bytes / sizeof(float4));
}

static void launch_gather(void *p, size_t bytes, float *out)
{
    gather_k<<<GATHER_BLOCKS, 256>>>((const float *)p, bytes / 4096, out);
}

static void both(const char *layout, size_t hmib, void *p, size_t bytes, float *out)
{
    RK(cudaMemset(p, 0, bytes));
    timeit(layout, hmib, "stream", launch_stream, p, bytes, out);
    timeit(layout, hmib, "gather", launch_gather, p, bytes, out);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 2048;
    if (argc > 2)
        reps = atoi(argv[2]);
    if (mib < 64 || mib % 64 || reps < 1) {
        fprintf(stderr, "layout: MiB must be a multiple of 64 (>= 64), REPS >= 1\n");
        return 2;
    }
    size_t bytes = mib << 20;
    RK(cudaSetDevice(0));
    RK(cudaFree(0));
    float *out;
    RK(cudaMalloc(&out, GATHER_BLOCKS * 256 * sizeof(float)));

    void *p;
    RK(cudaMalloc(&p, bytes));
    both("cudaMalloc", 0, p, bytes, out);
    RK(cudaFree(p));

    cudaStream_t s = 0;
    RK(cudaMallocAsync(&p, bytes, s));
    both("pool", 0, p, bytes, out);
    RK(cudaFreeAsync(p, s));
    RK(cudaDeviceSynchronize());

    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    const size_t hs[] = {0, 2, 4, 8, 20, 64};
    for (size_t hmib : hs) {
        size_t h = hmib ? hmib << 20 : bytes, n = bytes / h, total = n * h; /* whole handles */
        std::vector<CUmemGenericAllocationHandle> hd(n);
        CUdeviceptr home, st;
        CK(cuMemAddressReserve(&home, total, 0, 0, 0));
        for (size_t i = 0; i < n; i++) {
            CK(cuMemCreate(&hd[i], h, &prop, 0));
            CK(cuMemMap(home + i * h, h, 0, hd[i], 0));
        }
        CK(cuMemSetAccess(home, total, &acc, 1));
        both(hmib ? "home" : "handle", hmib ? hmib : mib, (void *)home, total, out);
        if (hmib) {
            std::vector<size_t> order(n);
            for (size_t i = 0; i < n; i++)
                order[i] = i;
            srand(1);
            for (size_t i = n - 1; i > 0; i--)
                std::swap(order[i], order[(size_t)rand() % (i + 1)]);
            CK(cuMemAddressReserve(&st, total, 0, 0, 0));
            for (size_t i = 0; i < n; i++)
                CK(cuMemMap(st + i * h, h, 0, hd[order[i]], 0));
            CK(cuMemSetAccess(st, total, &acc, 1));
            both("stitched", hmib, (void *)st, total, out);
            CK(cuMemUnmap(st, total));
            CK(cuMemAddressFree(st, total));
        }
        CK(cuMemUnmap(home, total));
        for (size_t i = 0; i < n; i++)
            CK(cuMemRelease(hd[i]));
        CK(cuMemAddressFree(home, total));
    }
    return 0;
}
