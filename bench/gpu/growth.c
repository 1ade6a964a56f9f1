/*
 * growth.c — the driver's cost of growing and releasing device memory, by handle size, and of
 * the other calls gmlake makes (address reserve/free, events, synchronize).  The measurements
 * behind core/cost.c.  Needs a GPU; the driver is opened with dlopen("libcuda.so.1"), as libgmlake
 * does, so it builds with the CUDA headers only.
 *
 * For each handle size (2, 8, 20, 32, 64, 128, 512 MiB; or those given) and REPS repetitions
 * (median reported), over the whole handles that fit in TOTAL bytes (1 GiB), in one reserved range:
 *   create       cuMemCreate of every handle
 *   map          cuMemMap of every handle at its offset
 *   set_access   one cuMemSetAccess over the whole range   (set_access_each: one per handle)
 *   unmap        one cuMemUnmap over the whole range        (unmap_each: one per handle)
 *   release      cuMemRelease of every handle
 * Times are normalised to ms per GiB.  The "_each" variants are measured
 * in a second pass over fresh handles.  Then the fixed-cost calls, mean us per call over many:
 * address reserve + free of 1 GiB and of 256 GiB, event create / record / query / synchronize /
 * destroy (CU_EVENT_DISABLE_TIMING, as gmlake creates them, on an idle stream), cuCtxSynchronize
 * on an idle device.
 *
 * Output: JSON lines on stdout.  Exit status 1 with a message when the driver or a GPU is missing
 * or a call fails.
 *   gpu_growth [--reps N] [--total-mib M] [HANDLE_MIB...]
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB ((size_t)1 << 20)

static struct {
    CUresult (*cuInit)(unsigned int);
    CUresult (*cuDeviceGet)(CUdevice *, int);
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*cuCtxSetCurrent)(CUcontext);
    CUresult (*cuCtxSynchronize)(void);
    CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *,
                                              CUmemAllocationGranularity_flags);
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                            unsigned long long);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
    CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
    CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                         unsigned long long);
    CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
    CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*cuEventCreate)(CUevent *, unsigned int);
    CUresult (*cuEventDestroy_v2)(CUevent);
    CUresult (*cuEventRecord)(CUevent, CUstream);
    CUresult (*cuEventQuery)(CUevent);
    CUresult (*cuEventSynchronize)(CUevent);
    CUresult (*cuStreamCreate)(CUstream *, unsigned int);
    CUresult (*cuStreamDestroy_v2)(CUstream);
} cu;

static CUmemAllocationProp prop;
static CUmemAccessDesc access_desc;

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

#define CHECK(call)                                                                               \
    do {                                                                                          \
        CUresult r_ = (call);                                                                     \
        if (r_ != CUDA_SUCCESS) {                                                                 \
            fprintf(stderr, "gpu_growth: %s failed with CUresult %d (line %d)\n", #call, (int)r_,  \
                    __LINE__);                                                                    \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

static int load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "gpu_growth: cannot open libcuda.so.1 (no NVIDIA driver here): %s\n", dlerror());
        return -1;
    }
#define SYM(name)                                                                                 \
    do {                                                                                          \
        *(void **)&cu.name = dlsym(h, #name);                                                     \
        if (!cu.name) {                                                                           \
            fprintf(stderr, "gpu_growth: the driver lacks %s\n", #name);                         \
            return -1;                                                                            \
        }                                                                                         \
    } while (0)
    SYM(cuInit); SYM(cuDeviceGet); SYM(cuDevicePrimaryCtxRetain); SYM(cuCtxSetCurrent);
    SYM(cuCtxSynchronize); SYM(cuMemGetAllocationGranularity); SYM(cuMemCreate); SYM(cuMemRelease);
    SYM(cuMemAddressReserve); SYM(cuMemAddressFree); SYM(cuMemMap); SYM(cuMemUnmap);
    SYM(cuMemSetAccess); SYM(cuEventCreate); SYM(cuEventDestroy_v2); SYM(cuEventRecord);
    SYM(cuEventQuery); SYM(cuEventSynchronize); SYM(cuStreamCreate); SYM(cuStreamDestroy_v2);
#undef SYM
    return 0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

enum { CREATE, MAP, SET_ACCESS, UNMAP, RELEASE, SET_ACCESS_EACH, UNMAP_EACH, NPHASES };
static const char *const phase_name[NPHASES] = {"create", "map", "set_access", "unmap", "release",
                                                "set_access_each", "unmap_each"};

/* One grow + release of `total` bytes in handles of `hsize`; each: one call per handle for
 * set_access and unmap instead of one over the range. */
static void cycle(size_t hsize, size_t total, int each, double *ms, CUmemGenericAllocationHandle *hs)
{
    size_t n = total / hsize;
    CUdeviceptr va;
    CHECK(cu.cuMemAddressReserve(&va, total, hsize, 0, 0));
    double t = now_ms();
    for (size_t i = 0; i < n; i++)
        CHECK(cu.cuMemCreate(&hs[i], hsize, &prop, 0));
    double t1 = now_ms();
    ms[CREATE] = t1 - t;
    for (size_t i = 0; i < n; i++)
        CHECK(cu.cuMemMap(va + i * hsize, hsize, 0, hs[i], 0));
    double t2 = now_ms();
    ms[MAP] = t2 - t1;
    if (each)
        for (size_t i = 0; i < n; i++)
            CHECK(cu.cuMemSetAccess(va + i * hsize, hsize, &access_desc, 1));
    else
        CHECK(cu.cuMemSetAccess(va, total, &access_desc, 1));
    double t3 = now_ms();
    ms[each ? SET_ACCESS_EACH : SET_ACCESS] = t3 - t2;
    if (each)
        for (size_t i = 0; i < n; i++)
            CHECK(cu.cuMemUnmap(va + i * hsize, hsize));
    else
        CHECK(cu.cuMemUnmap(va, total));
    double t4 = now_ms();
    ms[each ? UNMAP_EACH : UNMAP] = t4 - t3;
    for (size_t i = 0; i < n; i++)
        CHECK(cu.cuMemRelease(hs[i]));
    ms[RELEASE] = now_ms() - t4;
    CHECK(cu.cuMemAddressFree(va, total));
}

static void growth(size_t hsize, size_t total, int reps)
{
    size_t n = total / hsize;
    total = n * hsize; /* whole handles: 20 MiB handles grow 1020 MiB of a GiB */
    CUmemGenericAllocationHandle *hs = calloc(n, sizeof *hs);
    double (*v)[NPHASES] = calloc((size_t)reps, sizeof *v);
    double ms[NPHASES], col[64];
    if (!hs || !v) {
        fprintf(stderr, "gpu_growth: out of host memory\n");
        exit(1);
    }
    cycle(hsize, total, 0, ms, hs); /* warm-up */
    for (int r = 0; r < reps; r++) {
        cycle(hsize, total, 0, ms, hs);
        for (int k = CREATE; k <= RELEASE; k++)
            v[r][k] = ms[k];
        cycle(hsize, total, 1, ms, hs);
        v[r][SET_ACCESS_EACH] = ms[SET_ACCESS_EACH];
        v[r][UNMAP_EACH] = ms[UNMAP_EACH];
    }
    double gib = (double)total / (double)(1024 * MIB), med[NPHASES];
    printf("{\"bench\":\"growth\",\"handle_mib\":%zu,\"handles\":%zu,\"total_mib\":%zu,\"reps\":%d",
           hsize / MIB, n, total / MIB, reps);
    for (int k = 0; k < NPHASES; k++) {
        for (int r = 0; r < reps; r++)
            col[r] = v[r][k];
        med[k] = median(col, reps);
        printf(",\"%s_ms_per_gib\":%.4f", phase_name[k], med[k] / gib);
    }
    printf(",\"grow_total_ms_per_gib\":%.4f,\"release_total_ms_per_gib\":%.4f}\n",
           (med[CREATE] + med[MAP] + med[SET_ACCESS]) / gib, (med[UNMAP] + med[RELEASE]) / gib);
    fflush(stdout);
    free(hs);
    free(v);
}

static void call_costs(int reps)
{
    double t;
    CUdeviceptr va;
    size_t sizes[2] = {(size_t)1 << 30, (size_t)256 << 30};
    const char *names[2] = {"1GiB", "256GiB"};
    for (int s = 0; s < 2; s++) {
        double reserve = 0, release = 0;
        for (int i = 0; i < reps; i++) {
            t = now_ms();
            CHECK(cu.cuMemAddressReserve(&va, sizes[s], 0, 0, 0));
            double t1 = now_ms();
            CHECK(cu.cuMemAddressFree(va, sizes[s]));
            reserve += t1 - t;
            release += now_ms() - t1;
        }
        printf("{\"bench\":\"call\",\"kind\":\"va_reserve\",\"size\":\"%s\",\"us\":%.3f}\n", names[s], 1e3 * reserve / reps);
        printf("{\"bench\":\"call\",\"kind\":\"va_free\",\"size\":\"%s\",\"us\":%.3f}\n", names[s], 1e3 * release / reps);
    }
    CUstream st;
    CHECK(cu.cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
    CUevent *ev = calloc((size_t)reps, sizeof *ev);
    double ms[5] = {0};
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(cu.cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING));
    ms[0] = now_ms() - t;
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(cu.cuEventRecord(ev[i], st));
    ms[1] = now_ms() - t;
    CHECK(cu.cuCtxSynchronize());
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(cu.cuEventQuery(ev[i]));
    ms[2] = now_ms() - t;
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(cu.cuEventSynchronize(ev[i]));
    ms[3] = now_ms() - t;
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(cu.cuEventDestroy_v2(ev[i]));
    ms[4] = now_ms() - t;
    const char *kinds[5] = {"event_create", "event_record", "event_query", "event_sync", "event_destroy"};
    for (int k = 0; k < 5; k++)
        printf("{\"bench\":\"call\",\"kind\":\"%s\",\"us\":%.3f}\n", kinds[k], 1e3 * ms[k] / reps);
    t = now_ms();
    for (int i = 0; i < reps; i++)
        CHECK(cu.cuCtxSynchronize());
    printf("{\"bench\":\"call\",\"kind\":\"synchronize\",\"us\":%.3f}\n", 1e3 * (now_ms() - t) / reps);
    CHECK(cu.cuStreamDestroy_v2(st));
    free(ev);
}

int main(int argc, char **argv)
{
    int reps = 5;
    size_t total = 1024 * MIB;
    size_t handles[32];
    int nh = 0;
    for (int i = 1; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = (int)strtol(argv[++i], &end, 10);
            if (*end || reps < 1 || reps > 64) {
                fprintf(stderr, "gpu_growth: --reps wants 1..64\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--total-mib") == 0 && i + 1 < argc) {
            long m = strtol(argv[++i], &end, 10);
            if (*end || m < 2) {
                fprintf(stderr, "gpu_growth: --total-mib wants a number of MiB >= 2\n");
                return 2;
            }
            total = (size_t)m * MIB;
        } else {
            long m = strtol(argv[i], &end, 10);
            if (*end || m < 2 || nh == 32) {
                fprintf(stderr, "usage: gpu_growth [--reps N] [--total-mib M] [HANDLE_MIB...] (up to 32 sizes >= 2)\n");
                return 2;
            }
            handles[nh++] = (size_t)m * MIB;
        }
    }
    if (nh == 0) {
        static const size_t def[] = {2, 8, 20, 32, 64, 128, 512};
        for (nh = 0; nh < 7; nh++)
            handles[nh] = def[nh] * MIB;
    }
    if (load())
        return 1;
    CUdevice dev;
    CUcontext ctx;
    CHECK(cu.cuInit(0));
    CHECK(cu.cuDeviceGet(&dev, 0));
    CHECK(cu.cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cu.cuCtxSetCurrent(ctx));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    access_desc.location = prop.location;
    access_desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    size_t gran = 0;
    CHECK(cu.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    printf("{\"bench\":\"device\",\"granularity\":%zu}\n", gran);
    for (int i = 0; i < nh; i++) {
        size_t h = handles[i];
        if (h % gran || h > total) {
            fprintf(stderr, "gpu_growth: handle of %zu MiB skipped (not a multiple of the granularity "
                    "or larger than %zu MiB)\n", h / MIB, total / MIB);
            continue;
        }
        growth(h, total, reps);
    }
    call_costs(1000);
    return 0;
}
