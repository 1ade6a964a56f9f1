// ipc_gpu.cu — CUDA IPC of gmlake memory between two processes on a GPU (interpose/ipc.c):
// the parent allocates under gmlake, writes a pattern with a kernel and exports handles; a child
// (this program again, `ipc_gpu child MODE HANDLE SIZE SEED`, same environment, so under gmlake
// too) opens each, verifies the pattern on the GPU, writes a new one and closes; the parent then
// verifies the child's pattern.  Cases: cudaIpc* on a 64 MiB block through a pointer 16 MiB into
// it; cuIpc* on a 10 MiB block; a stitched 12 MiB block (run with GMLAKE_EXTENT_SIZE=2MiB so that
// freeing every other 2 MiB block leaves whole free extents); a handle opened twice (one
// pointer, two closes, a third close refused); the handle of a freed block (refused with
// cudaErrorInvalidResourceHandle); a process opening its own handle (refused); the pointer
// queries (interpose/pointer.c): cuMemGetAddressRange and CU_POINTER_ATTRIBUTE_RANGE_START_ADDR /
// RANGE_SIZE of a pointer inside a stitched block and inside a small block that shares its extent
// name the allocation, IS_LEGACY_CUDA_IPC_CAPABLE is 1, cuMemRetainAllocationHandle is refused,
// and the base found that way, exported, opened by a child (vLLM's custom all-reduce does this)
// holds the data, where the child's own range queries name its opened allocation.  Prints
// "N passed, M failed"; exit 1 on a failure.
#include <cuda.h>
#include <dlfcn.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "gmlake.h"
#include "gpu_check.cuh"

extern char **environ;
typedef int (*stats_fn)(int, gmlake_stats *);
static gmlake_stats st() {
    gmlake_stats s; memset(&s, 0, sizeof s);
    stats_fn f = (stats_fn)dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    if (f) f(0, &s);
    return s;
}

static int child(const char *mode, const char *hex, size_t size, uint32_t seed) {
    cudaIpcMemHandle_t h;
    for (size_t i = 0; i < sizeof h; i++) { unsigned v; sscanf(hex + 2 * i, "%2x", &v); h.reserved[i] = (char)v; }
    cudaMalloc(&bad, sizeof *bad);
    void *p = NULL, *q = NULL;
    if (!strcmp(mode, "rt") || !strcmp(mode, "twice")) {
        CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess, "child: open");
        if (!strcmp(mode, "twice")) {
            CHECK(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess && q == p, "child: second open, same pointer");
            CHECK(cudaIpcCloseMemHandle(q) == cudaSuccess, "child: first close");
        }
        CHECK(p && ok_data(p, size, seed), "child: sees the parent's data");
        if (p) { fill<<<256, 256>>>((uint32_t *)p, size / 4, seed + 1); cudaDeviceSynchronize(); }
        CHECK(cudaIpcCloseMemHandle(p) == cudaSuccess, "child: close");
        if (!strcmp(mode, "twice")) {
            CHECK(cudaIpcCloseMemHandle(p) != cudaSuccess, "child: a third close is refused");
            cudaGetLastError();
        }
    } else if (!strcmp(mode, "drv")) {
        CUipcMemHandle dh; memcpy(&dh, &h, sizeof dh);
        CUdeviceptr d = 0;
        CHECK(cuIpcOpenMemHandle(&d, dh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS, "child: cuIpcOpenMemHandle");
        CHECK(d && ok_data((void *)d, size, seed), "child: sees the parent's data (driver)");
        if (d) { fill<<<256, 256>>>((uint32_t *)d, size / 4, seed + 1); cudaDeviceSynchronize(); }
        CHECK(cuIpcCloseMemHandle(d) == CUDA_SUCCESS, "child: cuIpcCloseMemHandle");
    } else if (!strcmp(mode, "range")) {
        CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess, "child: open");
        CUdeviceptr base = 0, start = 0; size_t n = 0, rz = 0;
        CHECK(p && cuMemGetAddressRange((CUdeviceptr *)&base, &n, (CUdeviceptr)p + size / 2) == CUDA_SUCCESS &&
              (void *)base == p && n == size, "child: cuMemGetAddressRange names the opened allocation");
        CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p + size / 2) == CUDA_SUCCESS &&
              cuPointerGetAttribute(&rz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)p + size / 2) == CUDA_SUCCESS &&
              (void *)start == p && rz == size, "child: the range attributes name it too");
        CHECK(p && ok_data(p, size, seed), "child: the exported base holds the parent's data");
        if (p) { fill<<<256, 256>>>((uint32_t *)p, size / 4, seed + 1); cudaDeviceSynchronize(); }
        CHECK(cudaIpcCloseMemHandle(p) == cudaSuccess, "child: close");
    } else if (!strcmp(mode, "freed")) {
        cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
        CHECK(e == cudaErrorInvalidResourceHandle, "child: a freed block's handle is refused (%d)", (int)e);
        cudaGetLastError();
    }
    printf("child %s: %d passed, %d failed\n", mode, passed, failed);
    return failed ? 1 : 0;
}

static int run_child(const char *mode, const void *handle, size_t size, uint32_t seed) {
    char hex[129], sz[32], sd[32];
    for (int i = 0; i < 64; i++) sprintf(hex + 2 * i, "%02x", ((const unsigned char *)handle)[i]);
    sprintf(sz, "%zu", size); sprintf(sd, "%u", seed);
    char self[4096]; ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    char *argv[] = {self, (char *)"child", (char *)mode, hex, sz, sd, NULL};
    pid_t pid; int status = 0;
    if (posix_spawn(&pid, self, NULL, NULL, argv, environ) != 0) return -1;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

int main(int argc, char **argv) {
    if (argc == 6 && !strcmp(argv[1], "child"))
        return child(argv[2], argv[3], strtoull(argv[4], 0, 0), (uint32_t)strtoul(argv[5], 0, 0));
    CHECK(dlsym(RTLD_DEFAULT, "gmlake_get_stats") != NULL, "libgmlake is preloaded");
    CHECK(cudaMalloc(&bad, sizeof *bad) == cudaSuccess, "cudaMalloc");
    // 1. runtime API, pointer inside the block
    size_t big = 64 << 20;
    void *p; cudaIpcMemHandle_t h;
    CHECK(cudaMalloc(&p, big) == cudaSuccess, "cudaMalloc 64 MiB");
    fill<<<256, 256>>>((uint32_t *)p, big / 4, 11); cudaDeviceSynchronize();
    CHECK(cudaIpcGetMemHandle(&h, (char *)p + (16 << 20)) == cudaSuccess, "cudaIpcGetMemHandle inside the block");
    CHECK(run_child("rt", &h, big, 11) == 0, "child rt");
    CHECK(ok_data(p, big, 12), "the child's writes are seen");
    void *q; CHECK(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess) != cudaSuccess, "own handle refused");
    cudaGetLastError();
    // 2. driver API
    CUdeviceptr d; CUipcMemHandle dh; size_t ds = 10 << 20;
    CHECK(cuMemAlloc(&d, ds) == CUDA_SUCCESS, "cuMemAlloc");
    fill<<<256, 256>>>((uint32_t *)d, ds / 4, 21); cudaDeviceSynchronize();
    CHECK(cuIpcGetMemHandle(&dh, d) == CUDA_SUCCESS, "cuIpcGetMemHandle");
    CHECK(run_child("drv", &dh, ds, 21) == 0, "child drv");
    CHECK(ok_data((void *)d, ds, 22), "the child's writes are seen (driver)");
    // 3. a stitched block
    CHECK(cudaFree(p) == cudaSuccess && cuMemFree(d) == CUDA_SUCCESS, "frees");
    CHECK(((int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_empty_cache"))(0) == 0, "empty cache");
    void *b[16];
    for (int i = 0; i < 16; i++) cudaMalloc(&b[i], 2 << 20);
    for (int i = 0; i < 16; i += 2) cudaFree(b[i]);
    uint64_t stitches0 = st().stitches;
    void *s; size_t ss = 12 << 20;
    CHECK(cudaMalloc(&s, ss) == cudaSuccess, "12 MiB");
    CHECK(st().stitches == stitches0 + 1, "it is a stitched block (%lu stitches)", (unsigned long)st().stitches);
    fill<<<256, 256>>>((uint32_t *)s, ss / 4, 31); cudaDeviceSynchronize();
    CHECK(cudaIpcGetMemHandle(&h, s) == cudaSuccess, "handle of the stitched block");
    CHECK(run_child("rt", &h, ss, 31) == 0, "child reads the stitched block");
    CHECK(ok_data(s, ss, 32), "the child's writes through the stitched block are seen");
    // 4. opened twice
    CHECK(run_child("twice", &h, ss, 32) == 0, "child twice");
    CHECK(ok_data(s, ss, 33), "after the second child");
    cudaIpcMemHandle_t hs = h;
    // 5. pointer queries answer with the allocation; its base, exported, is the allocation
    void *small1, *small2; size_t s2 = 300000;
    CHECK(cudaMalloc(&small1, 1000) == cudaSuccess && cudaMalloc(&small2, s2) == cudaSuccess, "two small blocks");
    fill<<<256, 256>>>((uint32_t *)small2, s2 / 4, 41); cudaDeviceSynchronize();
    struct { void *alloc; size_t size; size_t off; const char *what; uint32_t seed; } cases[2] = {
        {s, ss, (5 << 20) + 4096, "inside the stitched block", 33}, {small2, s2, 123456, "inside a small block", 41}};
    for (int i = 0; i < 2; i++) {
        CUdeviceptr x = (CUdeviceptr)cases[i].alloc + cases[i].off, base = 0, start = 0;
        size_t n = 0, rz = 0; int legacy = -1; CUmemGenericAllocationHandle mh;
        CHECK(cuMemGetAddressRange(&base, &n, x) == CUDA_SUCCESS && (void *)base == cases[i].alloc && n == cases[i].size,
              "cuMemGetAddressRange %s: the allocation (%#llx, %zu)", cases[i].what, (unsigned long long)base, n);
        CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, x) == CUDA_SUCCESS &&
              cuPointerGetAttribute(&rz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, x) == CUDA_SUCCESS &&
              (void *)start == cases[i].alloc && rz == cases[i].size, "range attributes %s (%#llx, %zu)",
              cases[i].what, (unsigned long long)start, rz);
        CHECK(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, x) == CUDA_SUCCESS && legacy == 1,
              "legacy IPC capable %s", cases[i].what);
        CHECK(cuMemRetainAllocationHandle(&mh, (void *)x) == CUDA_ERROR_INVALID_VALUE, "no VMM handle %s", cases[i].what);
        CHECK(cudaIpcGetMemHandle(&h, (void *)start) == cudaSuccess, "handle of the base found %s", cases[i].what);
        CHECK(run_child("range", &h, cases[i].size, cases[i].seed) == 0, "child range %s", cases[i].what);
        CHECK(ok_data(cases[i].alloc, cases[i].size, cases[i].seed + 1), "the child's writes are seen %s", cases[i].what);
    }
    CHECK(cudaFree(small1) == cudaSuccess && cudaFree(small2) == cudaSuccess, "free the small blocks");
    CUdeviceptr fb; size_t fn;
    CHECK(cuMemGetAddressRange(&fb, &fn, (CUdeviceptr)small2) == CUDA_ERROR_NOT_FOUND, "a freed block's range: not found");
    // 6. freed
    CHECK(cudaFree(s) == cudaSuccess, "free the stitched block");
    CHECK(run_child("freed", &hs, ss, 0) == 0, "child freed");
    CHECK(((int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_check"))(0) == 0, "pool consistent");
    printf("ipc_gpu: %d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
