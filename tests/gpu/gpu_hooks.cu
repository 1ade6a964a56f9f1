// gpu_hooks.cu — every hook on a real GPU, with data checks.  Run under LD_PRELOAD=libgmlake.so;
// prints "N passed, M failed" and exits non-zero on any failure.
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "gmlake.h"
#include "gpu_check.cuh"

typedef int (*stats_fn)(int, gmlake_stats *);
static stats_fn get_stats;
static gmlake_stats st() { gmlake_stats s; memset(&s, 0, sizeof s); if (get_stats) get_stats(0, &s); return s; }

// CUDA calls a graph's user object destructor on a thread of its own and the next allocation
// or free reaps: allocates and frees until the pool's live allocations are back to live0 (3 s
// at most).  Returns them.
static uint64_t reaped(uint64_t live0) {
    uint64_t live = st().live_allocations;
    for (int i = 0; i < 300 && live > live0; i++) {
        void *t;
        cudaMalloc(&t, 512);
        cudaFree(t);
        live = st().live_allocations;
        if (live > live0) usleep(10000);
    }
    return live;
}

int main() {
    get_stats = (stats_fn)dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    CHECK(get_stats != NULL, "libgmlake is preloaded");
    CHECK(cudaMalloc(&bad, sizeof *bad) == cudaSuccess, "cudaMalloc small");
    CHECK(st().allocations >= 1, "gmlake served cudaMalloc (allocations %lu)", (unsigned long)st().allocations);
    // sizes, data
    size_t sizes[] = {512, 4096, 100000, 1 << 20, (3 << 20) + 512, 64 << 20};
    void *v[6];
    for (int i = 0; i < 6; i++) {
        CHECK(cudaMalloc(&v[i], sizes[i]) == cudaSuccess && ((uintptr_t)v[i] % 512) == 0, "cudaMalloc %zu", sizes[i]);
        fill<<<256, 256>>>((uint32_t *)v[i], sizes[i] / 4, 100 + i);
    }
    for (int i = 0; i < 6; i++) CHECK(ok_data(v[i], sizes[i], 100 + i), "data of block %d", i);
    for (int i = 0; i < 6; i++) CHECK(cudaFree(v[i]) == cudaSuccess, "cudaFree");
    // fragmentation -> stitching (first return the cached free memory, so that nothing fits)
    CHECK(((int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_empty_cache"))(0) == 0, "empty cache");
    CHECK(st().reserved_bytes == 2 << 20, "only the small chunk stays (%lu)", (unsigned long)st().reserved_bytes);
    void *b[16];
    for (int i = 0; i < 16; i++) { cudaMalloc(&b[i], 2 << 20); fill<<<64, 256>>>((uint32_t *)b[i], (2 << 20) / 4, 7000 + i); }
    for (int i = 0; i < 16; i += 2) cudaFree(b[i]);
    uint64_t stitches0 = st().stitches, reserved0 = st().reserved_bytes;
    void *s;
    CHECK(cudaMalloc(&s, 12 << 20) == cudaSuccess, "a stitched allocation");
    CHECK(st().stitches == stitches0 + 1, "one stitch (%lu)", (unsigned long)st().stitches);
    CHECK(st().reserved_bytes == reserved0, "no new memory for the stitch");
    fill<<<256, 256>>>((uint32_t *)s, (12 << 20) / 4, 4242);
    CHECK(ok_data(s, 12 << 20, 4242), "data through the stitched range");
    for (int i = 1; i < 16; i += 2) CHECK(ok_data(b[i], 2 << 20, 7000 + i), "live neighbour %d intact", i);
    CHECK(cudaFree(s) == cudaSuccess, "free stitched");
    void *s2;
    uint64_t calls = 0; { gmlake_stats x = st(); for (int k = 0; k < GMLAKE_DC_COUNT; k++) calls += x.device_calls[k]; }
    CHECK(cudaMalloc(&s2, 12 << 20) == cudaSuccess && s2 == s, "cached stitched block reused");
    { uint64_t c2 = 0; gmlake_stats x = st(); for (int k = 0; k < GMLAKE_DC_COUNT; k++) c2 += x.device_calls[k]; CHECK(c2 == calls, "reuse made no device call"); }
    fill<<<256, 256>>>((uint32_t *)s2, (12 << 20) / 4, 99);
    CHECK(ok_data(s2, 12 << 20, 99), "data through the reused stitched range");
    cudaFree(s2);
    for (int i = 1; i < 16; i += 2) cudaFree(b[i]);
    // async on a stream
    cudaStream_t str;
    cudaStreamCreateWithFlags(&str, cudaStreamNonBlocking);
    for (int round = 0; round < 50; round++) {
        void *a;
        size_t n = (size_t)(1 + round % 7) << 20;
        CHECK(cudaMallocAsync(&a, n, str) == cudaSuccess, "cudaMallocAsync");
        fill<<<128, 256, 0, str>>>((uint32_t *)a, n / 4, round);
        if (round % 10 == 0) CHECK(ok_data(a, n, round, str), "async data");
        CHECK(cudaFreeAsync(a, str) == cudaSuccess, "cudaFreeAsync");
    }
    cudaStreamSynchronize(str);
    // driver API through the entry-point resolver
    void *fa = NULL, *ff = NULL;
    cudaDriverEntryPointQueryResult q;
    CHECK(cudaGetDriverEntryPoint("cuMemAlloc", &fa, cudaEnableDefault, &q) == cudaSuccess && fa, "entry point cuMemAlloc");
    CHECK(cudaGetDriverEntryPoint("cuMemFree", &ff, cudaEnableDefault, &q) == cudaSuccess && ff, "entry point cuMemFree");
    void *hook = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
    CHECK(fa == hook, "the resolver returns gmlake's hook (%p vs %p)", fa, hook);
    uint64_t allocs = st().allocations;
    CUdeviceptr d = 0;
    CHECK(((CUresult (*)(CUdeviceptr *, size_t))fa)(&d, 5 << 20) == CUDA_SUCCESS, "cuMemAlloc via entry point");
    CHECK(st().allocations == allocs + 1, "served by gmlake");
    fill<<<128, 256>>>((uint32_t *)d, (5 << 20) / 4, 5);
    CHECK(ok_data((void *)d, 5 << 20, 5), "driver allocation data");
    CHECK(((CUresult (*)(CUdeviceptr))ff)(d) == CUDA_SUCCESS, "cuMemFree via entry point");
    void *gp = NULL;
    CHECK(cuGetProcAddress("cuMemAllocAsync", &gp, 13000, CU_GET_PROC_ADDRESS_DEFAULT, NULL) == CUDA_SUCCESS &&
          gp == dlsym(RTLD_DEFAULT, "cuMemAllocAsync"), "cuGetProcAddress returns the hook");
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    CHECK(h && dlsym(h, "cuMemFree_v2") == dlsym(RTLD_DEFAULT, "cuMemFree_v2"), "dlsym on libcuda returns the hook");
    // errors
    CHECK(cudaFree(NULL) == cudaSuccess, "cudaFree(NULL)");
    void *x;
    cudaMalloc(&x, 3 << 20);
    CHECK(cudaFree((char *)x + 512) == cudaErrorInvalidValue, "interior pointer");
    CHECK(cudaFree(x) == cudaSuccess, "free");
    CHECK(cudaFree(x) == cudaErrorInvalidValue, "double free");
    cudaGetLastError();
    void *m;
    CHECK(cudaMallocManaged(&m, 1 << 20) == cudaSuccess, "managed (not hooked)");
    CHECK(cudaFree(m) == cudaSuccess, "a foreign pointer's free reaches CUDA");
    void *huge;
    uint64_t failed0 = st().failed_allocations;
    CHECK(cudaMalloc(&huge, (size_t)1 << 40) == cudaErrorMemoryAllocation, "1 TiB -> out of memory");
    cudaGetLastError();
    CHECK(st().failed_allocations == failed0 + 1, "counted");
    CHECK(cudaMalloc(&x, 1 << 20) == cudaSuccess && cudaFree(x) == cudaSuccess, "usable after OOM");
    cudaIpcMemHandle_t ih;
    cudaMalloc(&x, 2 << 20);
    CHECK(cudaIpcGetMemHandle(&ih, x) == cudaSuccess, "IPC on gmlake memory gives a handle (ipc_gpu opens it)");
    cudaFree(x);
    CHECK(cudaIpcGetMemHandle(&ih, x) == cudaErrorInvalidValue, "not once it is freed");
    cudaGetLastError();
    // graph capture: gmlake serves it and holds the graph's memory for as long as CUDA keeps the
    // graph (interpose/graphmem.c)
    cudaStream_t cs, other_s;
    cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&other_s, cudaStreamNonBlocking);
    allocs = st().allocations;
    uint64_t live0 = st().live_allocations;
    cudaGraph_t g;
    void *gpa = NULL, *gpb = NULL;
    const size_t GB1 = 1 << 20;
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture");
    CHECK(cudaMallocAsync(&gpa, GB1, cs) == cudaSuccess, "alloc in capture");
    fill<<<16, 256, 0, cs>>>((uint32_t *)gpa, GB1 / 4, 1);
    CHECK(cudaMallocAsync(&gpb, GB1, cs) == cudaSuccess, "a second one, the graph's output");
    spin<<<1, 1, 0, cs>>>(400000000ll); // ~0.2 s: the graph still runs when it is destroyed below
    CHECK(cudaMemcpyAsync(gpb, gpa, GB1, cudaMemcpyDeviceToDevice, cs) == cudaSuccess, "copy in capture");
    CHECK(cudaFreeAsync(gpa, cs) == cudaSuccess, "free in capture");
    CHECK(cudaStreamEndCapture(cs, &g) == cudaSuccess, "end capture");
    CHECK(st().allocations == allocs + 2, "gmlake served the capture's allocations");
    cudaGraphExec_t ge;
    CHECK(cudaGraphInstantiate(&ge, g, 0) == cudaSuccess, "instantiate");
    CHECK(cudaGraphDestroy(g) == cudaSuccess, "the graph goes, its executable graph stays (as in PyTorch)");
    CHECK(cudaFree(gpb) == cudaSuccess, "the program frees the graph's output");
    void *o1;
    CHECK(cudaMalloc(&o1, GB1) == cudaSuccess && o1 != gpa && o1 != gpb, "the graph's blocks serve no one else");
    fill<<<16, 256>>>((uint32_t *)o1, GB1 / 4, 9);
    CHECK(cudaGraphLaunch(ge, cs) == cudaSuccess && cudaStreamSynchronize(cs) == cudaSuccess, "graph runs");
    CHECK(ok_data(gpb, GB1, 1), "the replay wrote the graph's memory");
    CHECK(ok_data(o1, GB1, 9), "and nothing else");
    // destroyed while a launch runs: the memory comes back only after the launch completed
    CHECK(cudaGraphLaunch(ge, cs) == cudaSuccess, "relaunch");
    CHECK(cudaGraphExecDestroy(ge) == cudaSuccess, "destroyed while it runs");
    void *late[8];
    int early = 0;
    for (int i = 0; i < 8; i++) {
        CHECK(cudaMallocAsync(&late[i], GB1, other_s) == cudaSuccess, "allocate during the launch");
        early += late[i] == gpa || late[i] == gpb;
        fill<<<16, 256, 0, other_s>>>((uint32_t *)late[i], GB1 / 4, 20 + i);
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "the launch completes");
    for (int i = 0; i < 8; i++) CHECK(ok_data(late[i], GB1, 20 + i, other_s), "block %d allocated during the launch kept its data", i);
    CHECK(early == 0, "no block of a running graph was handed out (%d were)", early);
    for (int i = 0; i < 8; i++) cudaFreeAsync(late[i], other_s);
    cudaFree(o1);
    uint64_t live = reaped(live0);
    CHECK(live == live0, "the graph's memory returned once CUDA destroyed it (%lu live, %lu before)",
          (unsigned long)live, (unsigned long)live0);
    // a capture cuts what it freed into pieces for its later, smaller allocations (graphmem.c)
    allocs = st().allocations;
    void *big = NULL, *pc[3];
    const size_t MB = 1 << 20;
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture (pieces)");
    CHECK(cudaMallocAsync(&big, 4 * MB, cs) == cudaSuccess, "a 4 MiB block in capture");
    fill<<<16, 256, 0, cs>>>((uint32_t *)big, 4 * MB / 4, 30);
    CHECK(cudaFreeAsync(big, cs) == cudaSuccess, "freed in capture");
    for (int i = 0; i < 3; i++) {
        CHECK(cudaMallocAsync(&pc[i], MB, cs) == cudaSuccess && pc[i] == (char *)big + i * MB,
              "piece %d is part %d of the freed block", i, i);
        fill<<<16, 256, 0, cs>>>((uint32_t *)pc[i], MB / 4, 31 + i);
    }
    CHECK(cudaFreeAsync(pc[0], cs) == cudaSuccess && cudaFreeAsync(pc[2], cs) == cudaSuccess,
          "two pieces freed in capture");
    cudaGraph_t g2;
    CHECK(cudaStreamEndCapture(cs, &g2) == cudaSuccess, "end capture (pieces)");
    CHECK(st().allocations == allocs + 1, "one block of the pool for four allocations");
    cudaGraphExec_t ge2;
    CHECK(cudaGraphInstantiate(&ge2, g2, 0) == cudaSuccess, "instantiate (pieces)");
    CHECK(cudaGraphLaunch(ge2, cs) == cudaSuccess && cudaGraphLaunch(ge2, cs) == cudaSuccess &&
          cudaStreamSynchronize(cs) == cudaSuccess, "the graph runs twice");
    CHECK(ok_data(pc[1], MB, 32), "the output piece holds its own data: its neighbours' writes stayed out");
    CHECK(cudaFree(pc[1]) == cudaSuccess, "the program frees the output piece (inside a block of the pool)");
    CHECK(cudaFree(pc[1]) == cudaErrorInvalidValue, "a second free is a double free");
    cudaGetLastError();
    CHECK(cudaGraphExecDestroy(ge2) == cudaSuccess && cudaGraphDestroy(g2) == cudaSuccess, "graph destroyed");
    live = reaped(live0);
    CHECK(live == live0, "the pieces' block returned once CUDA destroyed the graph (%lu live, %lu before)",
          (unsigned long)live, (unsigned long)live0);
    // a block one graph made and another graph frees: it stays allocated until both are gone
    void *gblk = NULL, *gout = NULL;
    CHECK(cudaMalloc(&gout, MB) == cudaSuccess, "the second graph's output (the program's)");
    CHECK(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture (maker)");
    CHECK(cudaMallocAsync(&gblk, MB, cs) == cudaSuccess, "the first graph's block");
    fill<<<16, 256, 0, cs>>>((uint32_t *)gblk, MB / 4, 40);
    cudaGraph_t gm, gf;
    CHECK(cudaStreamEndCapture(cs, &gm) == cudaSuccess, "end capture (maker)");
    cudaGraphExec_t gme, gfe;
    CHECK(cudaGraphInstantiate(&gme, gm, 0) == cudaSuccess && cudaGraphLaunch(gme, cs) == cudaSuccess &&
          cudaStreamSynchronize(cs) == cudaSuccess, "the first graph runs");
    CHECK(cudaStreamBeginCapture(other_s, cudaStreamCaptureModeGlobal) == cudaSuccess, "begin capture (reader)");
    CHECK(cudaMemcpyAsync(gout, gblk, MB, cudaMemcpyDeviceToDevice, other_s) == cudaSuccess, "it reads the block");
    CHECK(cudaFreeAsync(gblk, other_s) == cudaSuccess, "and frees it");
    CHECK(cudaStreamEndCapture(other_s, &gf) == cudaSuccess, "end capture (reader)");
    CHECK(cudaGraphInstantiate(&gfe, gf, 0) == cudaSuccess, "instantiate (reader)");
    CHECK(cudaGraphExecDestroy(gme) == cudaSuccess && cudaGraphDestroy(gm) == cudaSuccess, "the first graph goes");
    usleep(200000); // CUDA calls the first graph's destructor on a thread of its own; the next calls reap
    void *others[8];
    int taken = 0;
    for (int i = 0; i < 8; i++) {
        CHECK(cudaMalloc(&others[i], MB) == cudaSuccess, "allocate while the reader lives");
        taken += others[i] == gblk;
        fill<<<16, 256>>>((uint32_t *)others[i], MB / 4, 50 + i);
    }
    CHECK(st().live_allocations == live0 + 10, "the block the second graph frees stays allocated (%lu live)",
          (unsigned long)st().live_allocations);
    CHECK(taken == 0, "no one else got the block (%d did)", taken);
    CHECK(cudaGraphLaunch(gfe, other_s) == cudaSuccess && cudaStreamSynchronize(other_s) == cudaSuccess,
          "the second graph runs");
    CHECK(ok_data(gout, MB, 40), "and read the first graph's data");
    for (int i = 0; i < 8; i++) CHECK(ok_data(others[i], MB, 50 + i), "block %d kept its data", i);
    for (int i = 0; i < 8; i++) cudaFree(others[i]);
    CHECK(cudaGraphExecDestroy(gfe) == cudaSuccess && cudaGraphDestroy(gf) == cudaSuccess, "the second graph goes");
    cudaFree(gout);
    live = reaped(live0);
    CHECK(live == live0, "the block returned once both graphs were gone (%lu live, %lu before)",
          (unsigned long)live, (unsigned long)live0);
    size_t fr, tot;
    CHECK(cudaMemGetInfo(&fr, &tot) == cudaSuccess && fr <= tot, "cudaMemGetInfo");
    CHECK(((int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_check"))(0) == 0, "pool consistent");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
