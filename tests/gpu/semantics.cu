// semantics.cu — CUDA semantics gmlake must keep, on a real GPU, under LD_PRELOAD=libgmlake.so.
// Modes (argv[1]):
//   errors  (run with GMLAKE_MEMORY_LIMIT=256MiB): gmlake's out of memory and invalid frees reach
//           cudaGetLastError / cudaPeekAtLastError; a synchronous cudaFree during graph capture
//           fails and invalidates the capture as CUDA's does (run it with GMLAKE_ENABLE=0 too: the
//           same checks hold for CUDA itself).
//   sticky  a kernel fault: afterwards cudaMalloc and cudaFree of gmlake memory return the fault.
//   peers   (2 GPUs; skipped with fewer) after cudaDeviceEnablePeerAccess, device 1 writes into
//           device 0's gmlake blocks allocated before and after the call and reads them back.
//   stream_device (2 GPUs; skipped with fewer) with device 0 current, cudaMallocAsync on a stream
//           of device 1 gives device 1's memory (no peer access), which device 1 writes and reads.
// Prints "N passed, M failed"; exits non-zero on any failure.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gmlake.h"

static int passed, failed;
#define CHECK(cond, ...) do { if (cond) passed++; else { failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)
#define MiB ((size_t)1 << 20)

__global__ void fill(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = seed ^ (uint32_t)i;
}
__global__ void count_bad(const uint32_t *p, size_t n, uint32_t seed, unsigned long long *bad) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (p[i] != (seed ^ (uint32_t)i)) atomicAdd(bad, 1ull);
}
__global__ void fault(int *p) { *(volatile int *)((uintptr_t)p ^ ((uintptr_t)1 << 46)) = 1; }

typedef int (*stats_fn)(int, gmlake_stats *);
static gmlake_stats stats(int d) {
    gmlake_stats s; memset(&s, 0, sizeof s);
    stats_fn f = (stats_fn)dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    if (f) f(d, &s);
    return s;
}
static bool gmlake_on() { const char *e = getenv("GMLAKE_ENABLE"); return dlsym(RTLD_DEFAULT, "gmlake_get_stats") && !(e && !strcmp(e, "0")); }

static void errors() {
    bool on = gmlake_on();
    void *p = NULL, *q = NULL;
    CHECK(cudaMalloc(&p, 64 * MiB) == cudaSuccess, "cudaMalloc 64 MiB");
    cudaError_t e = cudaMalloc(&q, on ? 512 * MiB : ((size_t)1 << 50));
    CHECK(e == cudaErrorMemoryAllocation, "out of memory: %s", cudaGetErrorName(e));
    CHECK(cudaPeekAtLastError() == cudaErrorMemoryAllocation, "peek sees it");
    CHECK(cudaGetLastError() == cudaErrorMemoryAllocation, "get sees it");
    CHECK(cudaGetLastError() == cudaSuccess, "and clears it");
    e = cudaFree((char *)p + 512);
    CHECK(e == cudaErrorInvalidValue, "interior pointer: %s", cudaGetErrorName(e));
    CHECK(cudaGetLastError() == cudaErrorInvalidValue, "get sees the invalid free");
    // a synchronous free during capture (global mode)
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess, "stream");
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
    e = cudaFree(p);
    CHECK(e == cudaErrorStreamCaptureUnsupported, "cudaFree during capture: %s", cudaGetErrorName(e));
    cudaGraph_t g = NULL;
    e = cudaStreamEndCapture(s, &g);
    CHECK(e == cudaErrorStreamCaptureInvalidated, "the capture is invalidated: %s", cudaGetErrorName(e));
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    if (on) CHECK(stats(0).live_allocations == 1, "the block stayed allocated");
    e = cudaFree(p);
    CHECK(e == cudaSuccess, "after the capture the free goes through: %s", cudaGetErrorName(e));
    if (on) CHECK(stats(0).live_allocations == 0 && stats(0).allocations == 1, "gmlake served and freed it");
}

static void sticky() {
    void *p = NULL, *q = NULL;
    CHECK(cudaMalloc(&p, MiB) == cudaSuccess, "cudaMalloc");
    CHECK(cudaMalloc(&q, MiB) == cudaSuccess && cudaFree(q) == cudaSuccess, "a cached block");
    fault<<<1, 1>>>((int *)p);
    cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaErrorIllegalAddress, "the kernel faults: %s", cudaGetErrorName(e));
    e = cudaMalloc(&q, MiB);
    CHECK(e == cudaErrorIllegalAddress, "cudaMalloc after the fault: %s", cudaGetErrorName(e));
    e = cudaFree(p);
    CHECK(e == cudaErrorIllegalAddress, "cudaFree after the fault: %s", cudaGetErrorName(e));
    CHECK(cudaGetLastError() == cudaErrorIllegalAddress, "the last error is the fault");
}

static bool data_ok(void *p, size_t bytes, uint32_t seed) {
    unsigned long long *bad, h = 1;
    cudaMalloc(&bad, sizeof *bad);
    cudaMemset(bad, 0, sizeof *bad);
    count_bad<<<64, 256>>>((const uint32_t *)p, bytes / 4, seed, bad);
    cudaMemcpy(&h, bad, sizeof h, cudaMemcpyDeviceToHost);
    cudaFree(bad);
    return h == 0;
}

static void peers() {
    int n = 0, can = 0;
    cudaGetDeviceCount(&n);
    if (n < 2) { printf("semantics peers: %d GPU, skipped\n", n); return; }
    cudaDeviceCanAccessPeer(&can, 1, 0);
    if (!can) { printf("semantics peers: device 1 cannot access device 0, skipped\n"); return; }
    void *before = NULL, *after = NULL;
    CHECK(cudaSetDevice(0) == cudaSuccess && cudaMalloc(&before, 24 * MiB) == cudaSuccess, "device 0 block");
    CHECK(cudaSetDevice(1) == cudaSuccess && cudaDeviceEnablePeerAccess(0, 0) == cudaSuccess, "peer access 1 -> 0");
    CHECK(cudaSetDevice(0) == cudaSuccess && cudaMalloc(&after, 40 * MiB) == cudaSuccess, "device 0 block after");
    cudaSetDevice(1);
    fill<<<64, 256>>>((uint32_t *)before, 24 * MiB / 4, 7);
    fill<<<64, 256>>>((uint32_t *)after, 40 * MiB / 4, 9);
    cudaError_t e = cudaDeviceSynchronize();
    CHECK(e == cudaSuccess, "device 1 wrote device 0's gmlake memory: %s", cudaGetErrorName(e));
    cudaSetDevice(0);
    CHECK(data_ok(before, 24 * MiB, 7), "the block from before the grant");
    CHECK(data_ok(after, 40 * MiB, 9), "the block from after the grant");
    gmlake_stats s = stats(0);
    CHECK(s.allocations >= 2 && s.live_allocations == 2, "gmlake served both (%lu live)", (unsigned long)s.live_allocations);
    CHECK(cudaFree(before) == cudaSuccess && cudaFree(after) == cudaSuccess, "frees");
}

// A stream-ordered allocation takes memory on its stream's device, whichever device is current
// (no peer access: memory of the wrong device would fault, or read back wrong).
static void stream_device() {
    int n = 0;
    cudaGetDeviceCount(&n);
    if (n < 2) { printf("semantics stream_device: %d GPU, skipped\n", n); return; }
    cudaStream_t s1;
    unsigned long long *bad1 = NULL, h = 1;
    void *p = NULL;
    CHECK(cudaSetDevice(1) == cudaSuccess && cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess &&
          cudaMalloc(&bad1, sizeof *bad1) == cudaSuccess, "a stream and a counter on device 1");
    CHECK(cudaSetDevice(0) == cudaSuccess, "device 0 current");
    CHECK(cudaMallocAsync(&p, 48 * MiB, s1) == cudaSuccess, "cudaMallocAsync on device 1's stream");
    cudaPointerAttributes a;
    memset(&a, 0, sizeof a);
    CHECK(cudaPointerGetAttributes(&a, p) == cudaSuccess && a.device == 1, "the block is device 1's (%d)", a.device);
    cudaSetDevice(1);
    cudaMemsetAsync(bad1, 0, sizeof *bad1, s1);
    fill<<<64, 256, 0, s1>>>((uint32_t *)p, 48 * MiB / 4, 5);
    count_bad<<<64, 256, 0, s1>>>((const uint32_t *)p, 48 * MiB / 4, 5, bad1);
    cudaMemcpyAsync(&h, bad1, sizeof h, cudaMemcpyDeviceToHost, s1);
    CHECK(cudaStreamSynchronize(s1) == cudaSuccess && h == 0, "device 1 writes and reads it (%llu bad)", h);
    cudaSetDevice(0);
    CHECK(cudaFreeAsync(p, s1) == cudaSuccess && cudaStreamSynchronize(s1) == cudaSuccess, "freed on that stream");
    if (gmlake_on()) {
        gmlake_stats s0 = stats(0), s1s = stats(1);
        CHECK(s1s.allocations >= 1 && s0.allocations == 0, "device 1's pool served it (%lu on 0, %lu on 1)",
              (unsigned long)s0.allocations, (unsigned long)s1s.allocations);
    }
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "errors")) errors();
    else if (!strcmp(mode, "sticky")) sticky();
    else if (!strcmp(mode, "peers")) peers();
    else if (!strcmp(mode, "stream_device")) stream_device();
    else { fprintf(stderr, "usage: semantics errors|sticky|peers|stream_device\n"); return 2; }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
