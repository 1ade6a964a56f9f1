/* bench/gpu/vmm_gpu_cost.cu — do mapping changes cost the GPU time, beyond the driver time the
 * calling thread spends in them?  (issue 21: on 2 GPUs, DDP's first steps of a new sequence length
 * took 54 ms longer under gmlake than under expandable segments, where the replay puts one stitch
 * and 2-3 ms of driver time; the pool's statistics time only the host side of its calls.)
 *
 * A stream runs KERNELS spin kernels (each SPIN_US of clock64 spinning on one block: GPU time that
 * does not depend on memory), timed with CUDA events, while this thread does one of:
 *   idle        nothing (the baseline)
 *   map         makes a "stitched view": reserves a range, maps H existing handles of S MiB into
 *               it and sets access once over it, with the kernels already queued (the calls run
 *               while the GPU is busy; nothing queued after them)
 *   unmap       unmaps such a view made before the kernels were queued, and frees its range
 *   interleave  queues the kernels one by one and maps one handle into a view after every
 *               EVERY-th kernel (a kernel launched after a map: what a training step does when it
 *               stitches between two kernels), then sets access on each new handle
 *   touch       not a kernel series: a kernel reads a freshly mapped view once, then again; the
 *               two reads' GPU times (a first touch of new mappings against a warm one)
 * Every case REPS times, alternating with `idle` so that clocks and load move both alike; one
 * JSON line each: case, handles, handle MiB, gpu_ms (first event to last), host_ms (the VMM
 * calls' wall time on this thread), and for touch first_ms / second_ms.  What to read: gpu_ms of
 * a case minus the neighbouring idle's is GPU time the mapping changes cost the program.
 * Build: nvcc -O2 -arch=sm_90 -o vmm_gpu_cost bench/gpu/vmm_gpu_cost.cu -lcuda
 * Usage: vmm_gpu_cost [HANDLES (default 112)] [HANDLE_MIB (default 16)] [REPS (default 5)]
 *        (112 handles of 16 MiB: DDP's stitches on 2 GPUs mapped about 112 extents each) */
#include <string.h>

#define VMM_PROG "vmm_gpu_cost"
#include "vmm_bench.cuh"


enum { KERNELS = 400, SPIN_US = 250, EVERY = 4 };

__global__ void spin_k(long long cycles, int *sink)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
    if (threadIdx.x == 0 && cycles < 0)
        *sink = 1;
}

__global__ void read_k(const float4 *x, size_t n, float *out)
{
    float acc = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        acc += x[i].x;
    if (acc == 12345.f)
        *out = acc;
}

struct ctx {
    CUdevice dev;
    cudaStream_t s;
    cudaEvent_t a, b;
    long long cycles;
    int *sink;
    size_t hbytes;
    std::vector<CUmemGenericAllocationHandle> h;
    CUdeviceptr home;
};

static CUmemAccessDesc access_of(const ctx &c)
{
    CUmemAccessDesc d;
    memset(&d, 0, sizeof d);
    d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d.location.id = (int)c.dev;
    d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    return d;
}

/* A second view of handles [0, n): reserve, map in order, set access once. */
static CUdeviceptr make_view(const ctx &c, size_t n, double *host_ms)
{
    double t0 = now_ms();
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, n * c.hbytes, 0, 0, 0));
    for (size_t i = 0; i < n; i++)
        CK(cuMemMap(va + i * c.hbytes, c.hbytes, 0, c.h[i], 0));
    CUmemAccessDesc d = access_of(c);
    CK(cuMemSetAccess(va, n * c.hbytes, &d, 1));
    *host_ms += now_ms() - t0;
    return va;
}

static void drop_view(const ctx &c, CUdeviceptr va, size_t n, double *host_ms)
{
    double t0 = now_ms();
    CK(cuMemUnmap(va, n * c.hbytes));
    CK(cuMemAddressFree(va, n * c.hbytes));
    *host_ms += now_ms() - t0;
}

static void queue_kernels(ctx &c, int n)
{
    for (int i = 0; i < n; i++)
        spin_k<<<1, 32, 0, c.s>>>(c.cycles, c.sink);
}

/* One timed kernel series under `kind`; gpu and host times in ms. */
static void series(ctx &c, const char *kind, size_t n, double *gpu_ms, double *host_ms)
{
    *host_ms = 0;
    CUdeviceptr pre = 0;
    if (!strcmp(kind, "unmap")) {
        double ignore = 0;
        pre = make_view(c, n, &ignore);
    }
    RK(cudaStreamSynchronize(c.s));
    RK(cudaEventRecord(c.a, c.s));
    CUdeviceptr va = 0;
    if (!strcmp(kind, "interleave")) {
        double t = 0;
        CK(cuMemAddressReserve(&va, n * c.hbytes, 0, 0, 0));
        CUmemAccessDesc d = access_of(c);
        size_t mapped = 0;
        for (int i = 0; i < KERNELS; i++) {
            spin_k<<<1, 32, 0, c.s>>>(c.cycles, c.sink);
            if (i % EVERY == EVERY - 1 && mapped < n) {
                double t0 = now_ms();
                CK(cuMemMap(va + mapped * c.hbytes, c.hbytes, 0, c.h[mapped], 0));
                CK(cuMemSetAccess(va + mapped * c.hbytes, c.hbytes, &d, 1));
                t += now_ms() - t0;
                mapped++;
            }
        }
        *host_ms = t;
        RK(cudaEventRecord(c.b, c.s));
        RK(cudaStreamSynchronize(c.s));
        if (mapped) /* a reservation is freed whole, in one call */
            CK(cuMemUnmap(va, mapped * c.hbytes));
        CK(cuMemAddressFree(va, n * c.hbytes));
    } else {
        queue_kernels(c, KERNELS);
        RK(cudaEventRecord(c.b, c.s));
        if (!strcmp(kind, "map"))
            va = make_view(c, n, host_ms);
        else if (!strcmp(kind, "unmap"))
            drop_view(c, pre, n, host_ms);
        RK(cudaStreamSynchronize(c.s));
        if (va) {
            double ignore = 0;
            drop_view(c, va, n, &ignore);
        }
    }
    float ms = 0;
    RK(cudaEventElapsedTime(&ms, c.a, c.b));
    *gpu_ms = ms;
}

/* A fresh view read twice: the GPU time of each read. */
static void touch(ctx &c, size_t n, float *out, double *first, double *second, double *host_ms)
{
    *host_ms = 0;
    CUdeviceptr va = make_view(c, n, host_ms);
    size_t n4 = n * c.hbytes / sizeof(float4);
    double t[2];
    for (int k = 0; k < 2; k++) {
        RK(cudaEventRecord(c.a, c.s));
        read_k<<<132 * 8, 256, 0, c.s>>>((const float4 *)va, n4, out);
        RK(cudaEventRecord(c.b, c.s));
        RK(cudaStreamSynchronize(c.s));
        float ms = 0;
        RK(cudaEventElapsedTime(&ms, c.a, c.b));
        t[k] = ms;
    }
    double ignore = 0;
    drop_view(c, va, n, &ignore);
    *first = t[0], *second = t[1];
}

int main(int argc, char **argv)
{
    long handles = 112, hmib = 16;
    int reps = 5;
    if (!vmm_args(argc, argv, &handles, &hmib, &reps, 1024, 1000))
        return 2;
    ctx c;
    RK(cudaSetDevice(0));
    RK(cudaFree(0));
    CK(cuCtxGetDevice(&c.dev));
    RK(cudaStreamCreateWithFlags(&c.s, cudaStreamNonBlocking));
    RK(cudaEventCreate(&c.a));
    RK(cudaEventCreate(&c.b));
    RK(cudaMalloc(&c.sink, sizeof(int)));
    /* calibrate the spin: the GPU time of 2^24 cycles, so that a kernel takes SPIN_US */
    const long long probe = 1LL << 24;
    float probe_ms = 0;
    for (int k = 0; k < 3; k++) { /* the last of three: clocks up */
        RK(cudaEventRecord(c.a, c.s));
        spin_k<<<1, 32, 0, c.s>>>(probe, c.sink);
        RK(cudaEventRecord(c.b, c.s));
        RK(cudaStreamSynchronize(c.s));
        RK(cudaEventElapsedTime(&probe_ms, c.a, c.b));
    }
    if (probe_ms <= 0) {
        fprintf(stderr, "vmm_gpu_cost: the spin kernel took no time (%.3f ms)\n", probe_ms);
        return 1;
    }
    c.cycles = (long long)(probe * (SPIN_US / 1000.0) / probe_ms);
    float *out;
    RK(cudaMalloc(&out, sizeof(float)));
    c.hbytes = (size_t)hmib << 20;
    /* the pool's home: the handles mapped once, in order, with access */
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)c.dev;
    c.h.resize(handles);
    for (long i = 0; i < handles; i++)
        CK(cuMemCreate(&c.h[i], c.hbytes, &prop, 0));
    double ignore = 0;
    c.home = make_view(c, handles, &ignore);
    RK(cudaMemset((void *)c.home, 0, handles * c.hbytes));
    RK(cudaDeviceSynchronize());
    series(c, "idle", handles, &ignore, &ignore); /* warm-up */
    printf("{\"kernels\":%d,\"spin_us\":%d,\"cycles\":%lld,\"every\":%d}\n", KERNELS, SPIN_US, c.cycles, EVERY);
    const char *kinds[] = {"map", "unmap", "interleave"};
    for (int r = 0; r < reps; r++) {
        for (const char *k : kinds) {
            double g0, h0, g, h;
            series(c, "idle", handles, &g0, &h0);
            series(c, k, handles, &g, &h);
            printf("{\"case\":\"idle\",\"rep\":%d,\"gpu_ms\":%.3f}\n", r, g0);
            printf("{\"case\":\"%s\",\"rep\":%d,\"handles\":%ld,\"handle_mib\":%ld,\"gpu_ms\":%.3f,"
                   "\"host_ms\":%.3f,\"gpu_minus_idle_ms\":%.3f}\n", k, r, handles, hmib, g, h, g - g0);
        }
        double f, s, h;
        touch(c, handles, out, &f, &s, &h);
        printf("{\"case\":\"touch\",\"rep\":%d,\"handles\":%ld,\"handle_mib\":%ld,\"first_ms\":%.3f,"
               "\"second_ms\":%.3f,\"host_ms\":%.3f}\n", r, handles, hmib, f, s, h);
        fflush(stdout);
    }
    drop_view(c, c.home, handles, &ignore);
    for (long i = 0; i < handles; i++)
        CK(cuMemRelease(c.h[i]));
    return 0;
}
