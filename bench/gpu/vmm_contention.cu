/* bench/gpu/vmm_contention.cu — could a stitch's driver calls leave the allocating thread?  On a
 * CPU-bound training step every millisecond the allocating thread spends in cuMemMap /
 * cuMemSetAccess is a millisecond of step time (issue 21).  Two questions, measured:
 *  1. contention: thread A launches kernels (and records an event after each, as PyTorch does);
 *     does its launch rate drop while thread B maps views of HANDLES handles of HANDLE_MIB and
 *     sets access on them (the driver may serialise the two)?  A's microseconds per launch alone
 *     and beside B, and B's milliseconds per view alone and beside A.
 *  2. ordering by a host function: a fresh view is reserved and mapped on the main thread (a copy
 *     into a range reserved but not mapped is refused when it is queued: "invalid argument");
 *     stream S gets a cuLaunchHostFunc that waits until thread B has set the view's access (the
 *     expensive call), then a kernel that writes the view, then a copy back; is the copy accepted
 *     before access is set (the answer is printed; a refused copy is made after the stream ran),
 *     and does the stream complete (no deadlock between the waiting host function and B's driver
 *     call), with the kernel's bytes right?  A watchdog ends the program after 20 s if not.
 * One JSON line per measurement.
 * Build: nvcc -O2 -arch=sm_90 -o vmm_contention bench/gpu/vmm_contention.cu -lcuda -lpthread
 * Usage: vmm_contention [HANDLES (default 112)] [HANDLE_MIB (default 2)] [REPS (default 5)] */
#include <atomic>
#include <pthread.h>
#include <string.h>

#define VMM_PROG "vmm_contention"
#include "vmm_bench.cuh"
#include <unistd.h>


enum { LAUNCHES = 20000 };

__global__ void empty_k() {}
__global__ void write_k(unsigned *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = (unsigned)i ^ 0x5a5a5a5au;
}

static CUcontext ctx;
static CUmemAccessDesc acc;
static std::vector<CUmemGenericAllocationHandle> hs;
static size_t hbytes;

/* Maps all handles at va (reserved) and sets access. */
static void map_at(CUdeviceptr va)
{
    for (size_t i = 0; i < hs.size(); i++)
        CK(cuMemMap(va + i * hbytes, hbytes, 0, hs[i], 0));
    CK(cuMemSetAccess(va, hs.size() * hbytes, &acc, 1));
}

/* A view of all handles: reserve, map, set access; the view's address. */
static CUdeviceptr map_view(void)
{
    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, hs.size() * hbytes, 0, 0, 0));
    map_at(va);
    return va;
}

static void drop_view(CUdeviceptr va)
{
    CK(cuMemUnmap(va, hs.size() * hbytes));
    CK(cuMemAddressFree(va, hs.size() * hbytes));
}

static std::atomic<bool> stop_b;
static std::atomic<int> views_b;
static double b_ms;

static void *mapper(void *)
{
    CK(cuCtxSetCurrent(ctx));
    double t0 = now_ms();
    while (!stop_b.load()) {
        CUdeviceptr v = map_view();
        drop_view(v);
        views_b++;
    }
    b_ms = now_ms() - t0;
    return NULL;
}

/* A's microseconds per launch (a kernel and an event record), LAUNCHES of them. */
static double launches(cudaStream_t s, cudaEvent_t e)
{
    double t0 = now_ms();
    for (int i = 0; i < LAUNCHES; i++) {
        empty_k<<<1, 32, 0, s>>>();
        RK(cudaEventRecord(e, s));
    }
    double t = now_ms() - t0;
    RK(cudaStreamSynchronize(s));
    return t * 1000.0 / LAUNCHES;
}

/* Part 2: the host function's wait and thread B's mapping. */
struct order {
    std::atomic<int> mapped;
    CUdeviceptr va;
};

static void CUDA_CB wait_mapped(void *arg)
{
    order *o = (order *)arg;
    while (!o->mapped.load())
        usleep(50);
}

static void *map_later(void *arg)
{
    order *o = (order *)arg;
    CK(cuCtxSetCurrent(ctx));
    usleep(20000); /* after the stream reached the host function */
    CK(cuMemSetAccess(o->va, hs.size() * hbytes, &acc, 1));
    o->mapped.store(1);
    return NULL;
}

static void *watchdog(void *)
{
    sleep(20);
    printf("{\"case\":\"host_func_order\",\"ok\":false,\"why\":\"no completion in 20 s (deadlock?)\"}\n");
    fflush(stdout);
    _exit(1);
}

int main(int argc, char **argv)
{
    long nh = 112, hmib = 2;
    int reps = 5;
    if (!vmm_args(argc, argv, &nh, &hmib, &reps, 256, 100))
        return 2;
    RK(cudaSetDevice(0));
    RK(cudaFree(0));
    CK(cuCtxGetCurrent(&ctx));
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = (int)dev;
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    hbytes = (size_t)hmib << 20;
    hs.resize(nh);
    for (long i = 0; i < nh; i++)
        CK(cuMemCreate(&hs[i], hbytes, &prop, 0));
    CUdeviceptr home = map_view(); /* the pool's home mappings */
    cudaStream_t s;
    cudaEvent_t e;
    RK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    RK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    launches(s, e); /* warm-up */

    /* 1. contention */
    std::vector<double> alone, beside, b_alone, b_beside;
    for (int r = 0; r < reps; r++) {
        alone.push_back(launches(s, e));
        double t0 = now_ms();
        for (int k = 0; k < 20; k++)
            drop_view(map_view());
        b_alone.push_back((now_ms() - t0) / 20);
        stop_b = false;
        views_b = 0;
        pthread_t b;
        pthread_create(&b, NULL, mapper, NULL);
        usleep(2000);
        beside.push_back(launches(s, e));
        stop_b = true;
        pthread_join(b, NULL);
        b_beside.push_back(views_b ? b_ms / views_b : 0);
    }
    printf("{\"case\":\"contention\",\"handles\":%ld,\"handle_mib\":%ld,\"reps\":%d,"
           "\"launch_us_alone\":%.3f,\"launch_us_beside_mapping\":%.3f,"
           "\"view_ms_alone\":%.3f,\"view_ms_beside_launches\":%.3f}\n",
           nh, hmib, reps, median(alone), median(beside), median(b_alone), median(b_beside));
    fflush(stdout);

    /* 2. ordering by a host function */
    pthread_t wd, b;
    pthread_create(&wd, NULL, watchdog, NULL);
    order o;
    o.mapped = 0;
    o.va = 0;
    size_t n = (size_t)nh * hbytes / 4;
    unsigned *host; /* pinned: the copy stays asynchronous */
    RK(cudaMallocHost(&host, n * 4));
    double t0 = now_ms();
    /* as an allocator would: the range reserved and its address handed out at once, the work
     * queued behind a host function that waits for the mapping, which thread B makes later */
    CK(cuMemAddressReserve(&o.va, (size_t)nh * hbytes, 0, 0, 0));
    for (long i = 0; i < nh; i++)
        CK(cuMemMap(o.va + i * hbytes, hbytes, 0, hs[i], 0));
    CK(cuLaunchHostFunc((CUstream)s, wait_mapped, &o));
    write_k<<<1024, 256, 0, s>>>((unsigned *)o.va, n);
    /* the copy queued before access is set: refused on driver 580 ("invalid argument"); then it
     * is made once the stream has run, so that the kernel's bytes are still checked */
    cudaError_t copy = cudaMemcpyAsync(host, (void *)o.va, n * 4, cudaMemcpyDeviceToHost, s);
    if (copy != cudaSuccess)
        (void)cudaGetLastError();
    double queued = now_ms() - t0;
    pthread_create(&b, NULL, map_later, &o);
    RK(cudaStreamSynchronize(s));
    double t = now_ms() - t0;
    pthread_join(b, NULL);
    if (copy != cudaSuccess)
        RK(cudaMemcpy(host, (void *)o.va, n * 4, cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += host[i] != ((unsigned)i ^ 0x5a5a5a5au);
    printf("{\"case\":\"host_func_order\",\"ok\":%s,\"mismatches\":%zu,\"copy_queued_before_access\":"
           "\"%s\",\"queued_ms\":%.3f,\"ms\":%.3f}\n", bad ? "false" : "true", bad,
           copy == cudaSuccess ? "accepted" : cudaGetErrorString(copy), queued, t);
    fflush(stdout);
    drop_view(o.va);
    drop_view(home);
    for (long i = 0; i < nh; i++)
        CK(cuMemRelease(hs[i]));
    RK(cudaFreeHost(host));
    return bad ? 1 : 0;
}
