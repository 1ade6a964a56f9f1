/*
 * access_cost.c — what cuMemSetAccess, cuMemMap and cuMemUnmap cost by the allocation's handle
 * type, on the raw driver (no gmlake layer): whether gmlake's exportable handles (POSIX file
 * descriptors, for CUDA IPC) or the GPUs the process sees make a stitched range's device calls
 * dearer.  Needs a GPU.
 *
 * For each handle type (none: plain; fd: CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, as gmlake
 * creates its chunks where the device supports it) and handle size (2, 20, 64 MiB, or those
 * given), REPS times over the whole handles that fit in TOTAL bytes (1 GiB) of device 0: create
 * the handles once, then map them into a fresh range, one cuMemSetAccess over the range, unmap,
 * free the range (a stitched range's life); the median ms per GiB of map, set access and unmap.
 * The devices the process sees (cuDeviceGetCount) are printed with each line, so that runs with
 * CUDA_VISIBLE_DEVICES set can be told apart.
 *
 * With --threads T (default 1) every phase (create, map, set access, unmap, release) is split
 * into T contiguous parts of the handles, run at once by T threads (the caller and T-1 workers
 * started beforehand, each with the context current, released together by a barrier): whether
 * the driver runs those calls side by side, so that a pool could spread a stitch's or a
 * growth's calls over threads and wait for all of them.
 *
 * Output: JSON lines on stdout.  Exit status 1 with a message when the driver or a GPU is missing
 * or a call fails.
 *   gpu_access [--reps N] [--total-mib M] [--threads T] [HANDLE_MIB...]
 */
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_common.h"

#define MIB ((size_t)1 << 20)
#define MAX_HANDLES 4096
#define MAX_THREADS 16

static struct {
    CUresult (*init)(unsigned int);
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_get_count)(int *);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
    CUresult (*primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*granularity)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                       unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*va_free)(CUdeviceptr, size_t);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*unmap)(CUdeviceptr, size_t);
} cu;

#define CHECK(call)                                                                               \
    do {                                                                                          \
        CUresult r_ = (call);                                                                     \
        if (r_ != CUDA_SUCCESS) {                                                                 \
            fprintf(stderr, "gpu_access: %s failed: CUresult %d (line %d)\n", #call, (int)r_,     \
                    __LINE__);                                                                    \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static int resolve_all(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "gpu_access: cannot open libcuda.so.1 (no NVIDIA driver here): %s\n", dlerror());
        return -1;
    }
    struct { void **slot; const char *name; } want[] = {
        {(void **)&cu.init, "cuInit"},
        {(void **)&cu.device_get, "cuDeviceGet"},
        {(void **)&cu.device_get_count, "cuDeviceGetCount"},
        {(void **)&cu.device_get_attribute, "cuDeviceGetAttribute"},
        {(void **)&cu.primary_ctx_retain, "cuDevicePrimaryCtxRetain"},
        {(void **)&cu.ctx_set_current, "cuCtxSetCurrent"},
        {(void **)&cu.granularity, "cuMemGetAllocationGranularity"},
        {(void **)&cu.create, "cuMemCreate"},
        {(void **)&cu.release, "cuMemRelease"},
        {(void **)&cu.reserve, "cuMemAddressReserve"},
        {(void **)&cu.va_free, "cuMemAddressFree"},
        {(void **)&cu.map, "cuMemMap"},
        {(void **)&cu.set_access, "cuMemSetAccess"},
        {(void **)&cu.unmap, "cuMemUnmap"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!(*want[i].slot = dlsym(lib, want[i].name))) {
            fprintf(stderr, "gpu_access: libcuda.so.1 lacks %s\n", want[i].name);
            return -1;
        }
    return 0;
}

/* The phases, each split over the threads (phase_part). */
enum op { OP_CREATE, OP_MAP, OP_ACCESS, OP_UNMAP, OP_RELEASE, OP_QUIT };
static struct {
    int threads;
    CUcontext ctx;
    pthread_barrier_t start, end;
    enum op op;
    CUmemGenericAllocationHandle *hs;
    size_t n, hsize;
    CUdeviceptr va;
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
} job = {.threads = 1};

/* Thread t's part of the current phase: handles [n*t/T, n*(t+1)/T). */
static void phase_part(int t)
{
    size_t T = (size_t)job.threads, lo = job.n * (size_t)t / T, hi = job.n * (size_t)(t + 1) / T;
    if (hi == lo)
        return;
    switch (job.op) {
    case OP_CREATE:
        for (size_t i = lo; i < hi; i++)
            CHECK(cu.create(&job.hs[i], job.hsize, &job.prop, 0));
        break;
    case OP_MAP:
        for (size_t i = lo; i < hi; i++)
            CHECK(cu.map(job.va + i * job.hsize, job.hsize, 0, job.hs[i], 0));
        break;
    case OP_ACCESS:
        CHECK(cu.set_access(job.va + lo * job.hsize, (hi - lo) * job.hsize, &job.access, 1));
        break;
    case OP_UNMAP:
        for (size_t i = lo; i < hi; i++)
            CHECK(cu.unmap(job.va + i * job.hsize, job.hsize));
        break;
    case OP_RELEASE:
        for (size_t i = lo; i < hi; i++)
            CHECK(cu.release(job.hs[i]));
        break;
    case OP_QUIT:
        break;
    }
}

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    CHECK(cu.ctx_set_current(job.ctx));
    for (;;) {
        pthread_barrier_wait(&job.start);
        if (job.op == OP_QUIT)
            return NULL;
        phase_part(t);
        pthread_barrier_wait(&job.end);
    }
}

/* Runs one phase on every thread at once; its wall time in ms. */
static double phase(enum op op)
{
    job.op = op;
    double t0 = bench_now_ns() * 1e-6;
    if (job.threads > 1)
        pthread_barrier_wait(&job.start);
    phase_part(0);
    if (job.threads > 1)
        pthread_barrier_wait(&job.end);
    return bench_now_ns() * 1e-6 - t0;
}

/* REPS stitched-range lives over the job.n handles of job.hsize in job.hs: medians of map, set
 * access, unmap in ms. */
static void lives(size_t gran, int reps, double out[3])
{
    double t[3][64];
    for (int r = 0; r < reps; r++) {
        CHECK(cu.reserve(&job.va, job.n * job.hsize, gran, 0, 0));
        t[0][r] = phase(OP_MAP);
        t[1][r] = phase(OP_ACCESS);
        t[2][r] = phase(OP_UNMAP);
        CHECK(cu.va_free(job.va, job.n * job.hsize));
    }
    for (int k = 0; k < 3; k++)
        out[k] = bench_median(t[k], reps);
}

int main(int argc, char **argv)
{
    int reps = 5;
    size_t total = 1024 * MIB, sizes[16];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)strtol(argv[++i], &end, 10);
            if (*end || reps < 1 || reps > 64) {
                fprintf(stderr, "gpu_access: --reps wants 1..64\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--total-mib") == 0 && i + 1 < argc) {
            long m = strtol(argv[++i], &end, 10);
            if (*end || m < 2 || m > 65536) {
                fprintf(stderr, "gpu_access: --total-mib wants 2..65536\n");
                return 2;
            }
            total = (size_t)m * MIB;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            long m = strtol(argv[++i], &end, 10);
            if (*end || m < 1 || m > MAX_THREADS) {
                fprintf(stderr, "gpu_access: --threads wants 1..%d\n", MAX_THREADS);
                return 2;
            }
            job.threads = (int)m;
        } else {
            long m = strtol(argv[i], &end, 10);
            if (*end || m < 2 || m % 2 || nsizes == 16) {
                fprintf(stderr, "usage: gpu_access [--reps N] [--total-mib M] [--threads T] [HANDLE_MIB (even, >= 2)...]\n");
                return 2;
            }
            sizes[nsizes++] = (size_t)m * MIB;
        }
    }
    if (!nsizes) {
        sizes[0] = 2 * MIB, sizes[1] = 20 * MIB, sizes[2] = 64 * MIB;
        nsizes = 3;
    }
    if (resolve_all())
        return 1;
    if (cu.init(0) != CUDA_SUCCESS) {
        fprintf(stderr, "gpu_access: cuInit failed (no GPU?)\n");
        return 1;
    }
    int ndev = 0, fd_ok = 0;
    CUdevice d;
    CUcontext ctx;
    CHECK(cu.device_get_count(&ndev));
    CHECK(cu.device_get(&d, 0));
    CHECK(cu.primary_ctx_retain(&ctx, d));
    CHECK(cu.ctx_set_current(ctx));
    CHECK(cu.device_get_attribute(&fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, d));
    static CUmemGenericAllocationHandle hs[MAX_HANDLES];
    pthread_t tids[MAX_THREADS];
    job.ctx = ctx;
    job.hs = hs;
    job.access = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                   .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    if (job.threads > 1) {
        pthread_barrier_init(&job.start, NULL, (unsigned)job.threads);
        pthread_barrier_init(&job.end, NULL, (unsigned)job.threads);
        for (int t = 1; t < job.threads; t++)
            if (pthread_create(&tids[t], NULL, worker, (void *)(intptr_t)t)) {
                fprintf(stderr, "gpu_access: cannot start thread %d\n", t);
                return 1;
            }
    }
    for (int type = 0; type < 2; type++) {
        if (type && !fd_ok)
            break;
        job.prop = (CUmemAllocationProp){.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                         .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
        if (type)
            job.prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
        size_t gran;
        CHECK(cu.granularity(&gran, &job.prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        for (int s = 0; s < nsizes; s++) {
            size_t hsize = (sizes[s] + gran - 1) / gran * gran, n = total / hsize;
            if (!n || n > MAX_HANDLES) {
                fprintf(stderr, "gpu_access: %zu MiB handles: 1..%d of them must fit in the total\n",
                        hsize / MIB, MAX_HANDLES);
                return 2;
            }
            job.n = n;
            job.hsize = hsize;
            double create_ms = phase(OP_CREATE), ms[3];
            lives(gran, reps, ms);
            double release_ms = phase(OP_RELEASE);
            double gib = (double)(n * hsize) / (1024.0 * MIB), us = 1e3 / (double)n;
            printf("{\"bench\":\"access\",\"handle_type\":\"%s\",\"visible_devices\":%d,\"threads\":%d,"
                   "\"handle_mib\":%zu,\"handles\":%zu,\"reps\":%d,\"map_ms_per_gib\":%.3f,"
                   "\"set_access_ms_per_gib\":%.3f,\"unmap_ms_per_gib\":%.3f,"
                   "\"set_access_us_per_handle\":%.2f,\"unmap_us_per_handle\":%.2f,"
                   "\"create_us_per_handle\":%.2f,\"release_us_per_handle\":%.2f}\n",
                   type ? "fd" : "none", ndev, job.threads, hsize / MIB, n, reps, ms[0] / gib,
                   ms[1] / gib, ms[2] / gib, ms[1] * us, ms[2] * us, create_ms * us, release_ms * us);
            fflush(stdout);
        }
    }
    if (job.threads > 1) {
        job.op = OP_QUIT;
        pthread_barrier_wait(&job.start);
        for (int t = 1; t < job.threads; t++)
            pthread_join(tids[t], NULL);
    }
    return 0;
}
