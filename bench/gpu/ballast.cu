// ballast.cu — takes a GPU's memory until LEAVE_MIB MiB of it stay free, for a job that must run
// on that little (bench/gpu/run_fit.sh: on how much memory does a job run under each allocator?).
// Run it without gmlake.  Prints "ready FREE_MIB" (the free memory left, cudaMemGetInfo) once done,
// then holds the memory until its standard input ends.
// Usage: ballast LEAVE_MIB
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cuda_runtime.h>
#include <unistd.h>
#include <vector>

int main(int argc, char **argv)
{
    char *end = nullptr;
    long leave = argc == 2 ? strtol(argv[1], &end, 10) : -1;
    if (leave < 0 || !end || *end) {
        fprintf(stderr, "usage: ballast LEAVE_MIB (a whole number of MiB to leave free)\n");
        return 2;
    }
    const size_t MiB = 1 << 20;
    if ((size_t)leave > SIZE_MAX / MiB) {
        fprintf(stderr, "ballast: %ld MiB is more than any device\n", leave);
        return 2;
    }
    const size_t want = (size_t)leave * MiB;
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        fprintf(stderr, "ballast: no GPU (cudaMemGetInfo failed)\n");
        return 1;
    }
    std::vector<void *> held;
    // large pieces first, then 2 MiB ones, until what is left is at most LEAVE_MIB
    for (size_t piece = (size_t)1 << 30; piece >= 2 * MiB; piece /= 2) {
        while (free_b > want && free_b - want >= piece) {
            void *p = nullptr;
            if (cudaMalloc(&p, piece) != cudaSuccess) {
                (void)cudaGetLastError();
                break;
            }
            held.push_back(p);
            if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
                fprintf(stderr, "ballast: cudaMemGetInfo failed\n");
                return 1;
            }
        }
    }
    if (free_b > want + 2 * MiB) {
        fprintf(stderr, "ballast: could not take the device down to %ld MiB free (%zu MiB left)\n",
                leave, free_b / MiB);
        return 1;
    }
    printf("ready %zu\n", free_b / MiB);
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    for (void *p : held)
        cudaFree(p);
    return 0;
}
