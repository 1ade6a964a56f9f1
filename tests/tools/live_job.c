/* live_job.c — a small "training job" for the live-run report test: run under libgmlake over the
 * fake CUDA with trace_file set, its trace is replayed under pytorch and expandable afterwards
 * (tests/tools/live_replay.sh).  Weights: 12 MiB with cudaMalloc; 8 steps on stream 0x20, each
 * allocating 3 MiB, 700000 bytes and 5 MiB + step x 64 KiB with cudaMallocAsync, then freeing
 * them in reverse order. */
#include <cuda_runtime_api.h>
#include <stdio.h>

#define MiB ((size_t)1 << 20)

int main(void)
{
    void *w, *a, *b, *c;
    cudaStream_t s = (cudaStream_t)0x20;
    int bad = cudaMalloc(&w, 12 * MiB) != cudaSuccess;
    for (size_t step = 0; step < 8 && !bad; step++) {
        bad |= cudaMallocAsync(&a, 3 * MiB, s) != cudaSuccess;
        bad |= cudaMallocAsync(&b, 700000, s) != cudaSuccess;
        bad |= cudaMallocAsync(&c, 5 * MiB + step * 65536, s) != cudaSuccess;
        bad |= cudaFreeAsync(c, s) != cudaSuccess;
        bad |= cudaFreeAsync(b, s) != cudaSuccess;
        bad |= cudaFreeAsync(a, s) != cudaSuccess;
    }
    bad |= cudaFree(w) != cudaSuccess;
    if (bad)
        fprintf(stderr, "live_job: a CUDA call failed\n");
    return bad;
}
