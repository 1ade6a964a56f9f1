/* bench/gpu/vmm_bench.cuh — what the VMM micro-benchmarks (vmm_gpu_cost.cu, vmm_offset.cu,
 * vmm_contention.cu) share: error checks that name the program and exit, a monotonic clock in
 * milliseconds, the median (the upper one of an even count), and the HANDLES HANDLE_MIB REPS
 * arguments (vmm_gpu_cost, vmm_contention; vmm_offset takes REPS only).  Each program defines
 * VMM_PROG (its name) before including this file. */
#ifndef VMM_BENCH_CUH
#define VMM_BENCH_CUH

#include <cuda.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <vector>

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, VMM_PROG ": %s: CUDA error %d\n", #x, (int)r_); exit(1); } } while (0)
#define RK(x) do { cudaError_t r_ = (x); if (r_ != cudaSuccess) { \
    fprintf(stderr, VMM_PROG ": %s: %s\n", #x, cudaGetErrorString(r_)); exit(1); } } while (0)

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static double median(std::vector<double> v)
{
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

/* [HANDLES (1..4096)] [HANDLE_MIB (even, 2..max_mib)] [REPS (1..max_reps)], with defaults; false
 * (after the usage line on stderr) when one is out of range. */
static bool vmm_args(int argc, char **argv, long *handles, long *hmib, int *reps, long max_mib,
                     int max_reps)
{
    if (argc > 1)
        *handles = atol(argv[1]);
    if (argc > 2)
        *hmib = atol(argv[2]);
    if (argc > 3)
        *reps = atoi(argv[3]);
    if (*handles >= 1 && *handles <= 4096 && *hmib >= 2 && *hmib % 2 == 0 && *hmib <= max_mib &&
        *reps >= 1 && *reps <= max_reps)
        return true;
    fprintf(stderr, "usage: " VMM_PROG " [HANDLES 1..4096] [HANDLE_MIB, even, 2..%ld] [REPS 1..%d]\n",
            max_mib, max_reps);
    return false;
}

#endif
