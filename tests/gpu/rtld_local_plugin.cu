// rtld_local_plugin.cu — a library linked to libcudart, as ONNX Runtime / TensorRT-style plugins
// are; rtld_local_main loads it with dlopen(RTLD_LOCAL).  plugin_run allocates, computes, checks
// and frees through the runtime it links; 0 on success, else 1 with a reason.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

__global__ void fill(uint32_t *p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = (uint32_t)i * 3u;
}

#define STEP(c) do { if (!(c)) { snprintf(why, n, "%s (%s)", #c, cudaGetErrorName(cudaGetLastError())); return 1; } } while (0)

extern "C" __attribute__((visibility("default"))) int plugin_run(char *why, size_t n) {
    const size_t bytes = 24 << 20;
    void *p = NULL, *q = NULL;
    cudaStream_t s;
    STEP(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    STEP(cudaMalloc(&p, bytes) == cudaSuccess);
    STEP(cudaMallocAsync(&q, 4096, s) == cudaSuccess);
    fill<<<64, 256, 0, s>>>((uint32_t *)p, bytes / 4);
    uint32_t h[2] = {0, 0};
    STEP(cudaMemcpyAsync(h, (char *)p + bytes - 8, 8, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    STEP(cudaStreamSynchronize(s) == cudaSuccess);
    STEP(h[0] == (uint32_t)(bytes / 4 - 2) * 3u && h[1] == (uint32_t)(bytes / 4 - 1) * 3u);
    STEP(cudaFreeAsync(q, s) == cudaSuccess);
    STEP(cudaStreamSynchronize(s) == cudaSuccess);
    STEP(cudaFree(p) == cudaSuccess);
    size_t f = 0, t = 0;
    STEP(cudaMemGetInfo(&f, &t) == cudaSuccess && f > 0 && f <= t);
    STEP(cudaMalloc(&p, (size_t)1 << 50) == cudaErrorMemoryAllocation);
    STEP(cudaGetLastError() == cudaErrorMemoryAllocation);
    STEP(cudaGetLastError() == cudaSuccess);
    cudaStreamDestroy(s);
    return 0;
}
