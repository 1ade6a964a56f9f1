// How much device memory CUDA streams take, by kind, and when (creation or first work).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>
__global__ void nop() {}
static double used_mib() { size_t f, t; cudaMemGetInfo(&f, &t); return (t - f) / 1048576.0; }
int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 32;
    cudaFree(0);
    int lo, hi; cudaDeviceGetStreamPriorityRange(&lo, &hi);
    printf("priorities %d..%d, CUDA_DEVICE_MAX_CONNECTIONS=%s\n", lo, hi, getenv("CUDA_DEVICE_MAX_CONNECTIONS") ? getenv("CUDA_DEVICE_MAX_CONNECTIONS") : "unset");
    cudaStream_t *s = (cudaStream_t *)calloc(n * 8, sizeof *s);
    int k = 0;
    double base = used_mib();
    struct { const char *what; unsigned flags; int prio; } kinds[] = {
        {"default flags", cudaStreamDefault, 0}, {"non-blocking", cudaStreamNonBlocking, 0},
        {"non-blocking, priority lo", cudaStreamNonBlocking, 99}, {"non-blocking, priority hi", cudaStreamNonBlocking, -99}};
    for (auto &kd : kinds) {
        double b = used_mib();
        for (int i = 0; i < n; i++) {
            cudaError_t e = kd.prio == 0 ? cudaStreamCreateWithFlags(&s[k], kd.flags)
                                         : cudaStreamCreateWithPriority(&s[k], kd.flags, kd.prio > 0 ? lo : hi);
            if (e) { printf("create: %s\n", cudaGetErrorString(e)); return 1; }
            k++;
        }
        double c = used_mib();
        for (int i = k - n; i < k; i++) nop<<<1, 1, 0, s[i]>>>();
        cudaDeviceSynchronize();
        double w = used_mib();
        printf("%-28s %d streams: created +%.1f MiB (%.3f each), first kernel +%.1f MiB\n", kd.what, n, c - b, (c - b) / n, w - c);
    }
    double all = used_mib();
    for (int i = 0; i < k; i++) cudaStreamDestroy(s[i]);
    cudaDeviceSynchronize();
    printf("all %d streams: +%.1f MiB; destroyed: +%.1f MiB above the start\n", k, all - base, used_mib() - base);
    // one stream at a time: does each cost, or only some?
    double prev = used_mib(); int steps = 0;
    for (int i = 0; i < 64; i++) { cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking); double u = used_mib(); if (u != prev) { steps++; printf("  stream %d: +%.1f MiB\n", i, u - prev); } prev = u; }
    printf("64 streams one by one: memory moved %d times\n", steps);
    return 0;
}
