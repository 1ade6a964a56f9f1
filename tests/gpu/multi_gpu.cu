// multi_gpu.cu — one pool per device: allocations on each GPU are served by that GPU's pool, with
// correct data, from two threads at once.  Needs >= 2 GPUs; prints "N passed, M failed".
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "gmlake.h"

static int passed, failed;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
#define CHECK(c, ...) do { pthread_mutex_lock(&mu); if (c) passed++; else { failed++; printf("FAIL %d: ", __LINE__); printf(__VA_ARGS__); printf("\n"); } pthread_mutex_unlock(&mu); } while (0)

__global__ void fill(uint32_t *p, size_t n, uint32_t v) { for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = v ^ (uint32_t)i; }

static void *work(void *arg) {
    int d = (int)(intptr_t)arg;
    CHECK(cudaSetDevice(d) == cudaSuccess, "set device %d", d);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (int r = 0; r < 200; r++) {
        size_t n = ((size_t)(r % 9) + 1) << 20;
        void *p;
        if (cudaMallocAsync(&p, n, s) != cudaSuccess) { CHECK(0, "alloc on %d", d); break; }
        cudaPointerAttributes a;
        if (r % 50 == 0) CHECK(cudaPointerGetAttributes(&a, p) == cudaSuccess && a.device == d, "pointer of device %d is on %d", d, a.device);
        fill<<<64, 256, 0, s>>>((uint32_t *)p, n / 4, 1000 * d + r);
        if (r % 50 == 0) {
            uint32_t h[2];
            cudaMemcpyAsync(h, (char *)p + n - 8, 8, cudaMemcpyDeviceToHost, s);
            cudaStreamSynchronize(s);
            size_t i = n / 4 - 2;
            CHECK(h[0] == ((1000u * d + r) ^ (uint32_t)i) && h[1] == ((1000u * d + r) ^ (uint32_t)(i + 1)), "data on %d", d);
        }
        cudaFreeAsync(p, s);
    }
    cudaStreamSynchronize(s);
    return NULL;
}

int main() {
    int n = 0;
    cudaGetDeviceCount(&n);
    if (n < 2) { printf("multi_gpu: %d GPU, skipped\n", n); return 0; }
    pthread_t t[2];
    for (int d = 0; d < 2; d++) pthread_create(&t[d], NULL, work, (void *)(intptr_t)d);
    for (int d = 0; d < 2; d++) pthread_join(t[d], NULL);
    int (*st)(int, gmlake_stats *) = (int (*)(int, gmlake_stats *))dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    int (*chk)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_check");
    for (int d = 0; d < 2; d++) {
        gmlake_stats s;
        CHECK(st && st(d, &s) == 0 && s.allocations == 200 && s.active_bytes == 0, "device %d: its own pool served 200", d);
        CHECK(chk && chk(d) == 0, "device %d pool consistent", d);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
