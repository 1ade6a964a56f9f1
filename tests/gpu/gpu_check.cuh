// gpu_check.cuh — what the plain GPU test programs share: CHECK (counts passed / failed and
// prints a failure with its line), a fill kernel writing a seeded pattern, and ok_data, which
// verifies that pattern on the GPU (the caller allocates `bad`, one counter of device memory).
#ifndef GML_GPU_CHECK_CUH
#define GML_GPU_CHECK_CUH
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

static int passed, failed;
#define CHECK(cond, ...) do { if (cond) passed++; else { failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

__global__ void fill(uint32_t *p, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = seed ^ (uint32_t)(i * 2654435761u);
}
__global__ void verify(const uint32_t *p, size_t n, uint32_t seed, unsigned long long *bad) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (p[i] != (seed ^ (uint32_t)(i * 2654435761u))) atomicAdd(bad, 1ull);
}

// Keeps one GPU thread busy for about `cycles` clock cycles.
__global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}

static unsigned long long *bad;
static bool ok_data(void *p, size_t bytes, uint32_t seed, cudaStream_t s = 0) {
    cudaMemsetAsync(bad, 0, sizeof *bad, s);
    verify<<<256, 256, 0, s>>>((const uint32_t *)p, bytes / 4, seed, bad);
    unsigned long long h = 1;
    cudaMemcpyAsync(&h, bad, sizeof h, cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    return h == 0 && cudaGetLastError() == cudaSuccess;
}
#endif
