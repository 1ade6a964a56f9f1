/*
 * access_scaling.c — whether a mapping's driver calls cost more when the process holds many other
 * mappings: gmlake keeps every extent mapped at home and, in cached stitched ranges, mapped again
 * (a 7 GiB FSDP2 pool holds about 1,900 home mappings and several thousand stitched ones), while
 * the cost model (core/cost.c) was measured in a process holding nothing else.  Needs a GPU.
 *
 * For each BACKGROUND count N (default 0 1000 4000 16000 32000): N other mappings are made first
 * (`--alias`, the default: one 2 MiB handle mapped N times at N addresses, each with its access
 * set, so that no memory but one handle is used; `--distinct`: N handles of 2 MiB, N x 2 MiB of
 * device memory), then REPS times a stitched range's life over K fresh 2 MiB handles (created
 * once): map them into a fresh reservation, one cuMemSetAccess over it, unmap, free the
 * reservation.  Printed per N: the median us per handle of map, set access and unmap, and of
 * cuMemCreate / cuMemRelease of one more handle (median of REPS).
 *
 * Built by meson as build/bench/gpu_access_scaling (libcuda resolved at run time); on the GPU:
 *   build/bench/gpu_access_scaling [--distinct] [--one-va] [--reps R] [--k K] [N...]
 * (--one-va: the background mappings side by side in one reservation, as gmlake's home arena;
 * without it each has a reservation of its own.)
 * Output: one JSON line per N.  Exit status 1 with a message when a call fails.
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MIB ((size_t)1 << 20)
#define CK(x)                                                                                      \
    do {                                                                                           \
        CUresult r_ = (x);                                                                         \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "access_scaling: %s failed: CUresult %d\n", #x, (int)r_);              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* The driver's entry points, resolved from libcuda.so.1 at run time (headers only at build). */
static CUresult (*cuInit_)(unsigned int);
static CUresult (*cuDeviceGet_)(CUdevice *, int);
static CUresult (*cuDevicePrimaryCtxRetain_)(CUcontext *, CUdevice);
static CUresult (*cuCtxSetCurrent_)(CUcontext);
static CUresult (*cuMemCreate_)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                                unsigned long long);
static CUresult (*cuMemRelease_)(CUmemGenericAllocationHandle);
static CUresult (*cuMemAddressReserve_)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
                                        unsigned long long);
static CUresult (*cuMemAddressFree_)(CUdeviceptr, size_t);
static CUresult (*cuMemMap_)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                             unsigned long long);
static CUresult (*cuMemSetAccess_)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
static CUresult (*cuMemUnmap_)(CUdeviceptr, size_t);
#define cuInit cuInit_
#define cuDeviceGet cuDeviceGet_
#define cuDevicePrimaryCtxRetain cuDevicePrimaryCtxRetain_
#define cuCtxSetCurrent cuCtxSetCurrent_
#define cuMemCreate cuMemCreate_
#define cuMemRelease cuMemRelease_
#define cuMemAddressReserve cuMemAddressReserve_
#define cuMemAddressFree cuMemAddressFree_
#define cuMemMap cuMemMap_
#define cuMemSetAccess cuMemSetAccess_
#define cuMemUnmap cuMemUnmap_

static int resolve(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "access_scaling: cannot open libcuda.so.1 (no NVIDIA driver here): %s\n",
                dlerror());
        return -1;
    }
    struct { void **slot; const char *name; } want[] = {
        {(void **)&cuInit_, "cuInit"},
        {(void **)&cuDeviceGet_, "cuDeviceGet"},
        {(void **)&cuDevicePrimaryCtxRetain_, "cuDevicePrimaryCtxRetain"},
        {(void **)&cuCtxSetCurrent_, "cuCtxSetCurrent"},
        {(void **)&cuMemCreate_, "cuMemCreate"},
        {(void **)&cuMemRelease_, "cuMemRelease"},
        {(void **)&cuMemAddressReserve_, "cuMemAddressReserve"},
        {(void **)&cuMemAddressFree_, "cuMemAddressFree"},
        {(void **)&cuMemMap_, "cuMemMap"},
        {(void **)&cuMemSetAccess_, "cuMemSetAccess"},
        {(void **)&cuMemUnmap_, "cuMemUnmap"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!(*want[i].slot = dlsym(lib, want[i].name))) {
            fprintf(stderr, "access_scaling: libcuda.so.1 lacks %s\n", want[i].name);
            return -1;
        }
    return 0;
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static CUmemAllocationProp prop;
static CUmemAccessDesc acc;
static size_t G = 2 * MIB;

static CUmemGenericAllocationHandle make(void)
{
    CUmemGenericAllocationHandle h;
    CK(cuMemCreate(&h, G, &prop, 0));
    return h;
}

int main(int argc, char **argv)
{
    int reps = 9, k = 128, distinct = 0, one_va = 0;
    size_t ns[32];
    int nn = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--distinct"))
            distinct = 1;
        else if (!strcmp(argv[i], "--one-va"))
            one_va = 1;
        else if (!strcmp(argv[i], "--alias"))
            distinct = 0;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--k") && i + 1 < argc)
            k = atoi(argv[++i]);
        else {
            char *end = NULL;
            unsigned long long v = strtoull(argv[i], &end, 10);
            if (argv[i][0] < '0' || argv[i][0] > '9' || *end || v > 1000000 || nn == 32 ||
                (nn && v < ns[nn - 1])) {
                fprintf(stderr, "access_scaling: '%s': give at most 32 background counts, rising, "
                                "each 0..1000000 (options: --distinct --one-va --reps R --k K)\n",
                        argv[i]);
                return 1;
            }
            ns[nn++] = (size_t)v;
        }
    }
    if (!nn) {
        size_t d[] = {0, 1000, 4000, 16000, 32000};
        memcpy(ns, d, sizeof d);
        nn = 5;
    }
    if (reps < 1 || reps > 1000 || k < 1 || k > 4096) {
        fprintf(stderr, "access_scaling: --reps 1..1000, --k 1..4096\n");
        return 1;
    }
    if (resolve() != 0)
        return 1;
    CK(cuInit(0));
    CUdevice dev;
    CUcontext ctx;
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR; /* as gmlake's chunks */
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

    CUmemGenericAllocationHandle *hs = malloc((size_t)k * sizeof *hs);
    for (int i = 0; i < k; i++)
        hs[i] = make();
    CUmemGenericAllocationHandle alias = make();

    size_t have = 0, cap = 0, maxn = 0;
    for (int ni = 0; ni < nn; ni++)
        maxn = ns[ni] > maxn ? ns[ni] : maxn;
    CUdeviceptr arena = 0; /* --one-va: every background mapping in one reservation, as gmlake's home */
    if (one_va && maxn)
        CK(cuMemAddressReserve(&arena, maxn * G, G, 0, 0));
    CUdeviceptr *bg = NULL; /* background mappings: one reservation each */
    CUmemGenericAllocationHandle *bgh = NULL;
    double *m = malloc((size_t)reps * sizeof *m), *a = malloc((size_t)reps * sizeof *a),
           *u = malloc((size_t)reps * sizeof *u), *c = malloc((size_t)reps * sizeof *c),
           *r = malloc((size_t)reps * sizeof *r);
    for (int ni = 0; ni < nn; ni++) {
        size_t n = ns[ni];
        if (n > cap) {
            bg = realloc(bg, n * sizeof *bg);
            bgh = realloc(bgh, n * sizeof *bgh);
            cap = n;
        }
        double t0 = now_us();
        for (; have < n; have++) { /* only ever adds: the counts are given in rising order */
            bgh[have] = distinct ? make() : alias;
            if (one_va)
                bg[have] = arena + have * G;
            else
                CK(cuMemAddressReserve(&bg[have], G, G, 0, 0));
            CK(cuMemMap(bg[have], G, 0, bgh[have], 0));
            CK(cuMemSetAccess(bg[have], G, &acc, 1));
        }
        double setup_s = (now_us() - t0) / 1e6;
        for (int rep = 0; rep < reps; rep++) {
            CUdeviceptr va;
            CK(cuMemAddressReserve(&va, (size_t)k * G, G, 0, 0));
            double s = now_us();
            for (int i = 0; i < k; i++)
                CK(cuMemMap(va + (size_t)i * G, G, 0, hs[i], 0));
            double s1 = now_us();
            CK(cuMemSetAccess(va, (size_t)k * G, &acc, 1));
            double s2 = now_us();
            for (int i = 0; i < k; i++)
                CK(cuMemUnmap(va + (size_t)i * G, G));
            double s3 = now_us();
            CK(cuMemAddressFree(va, (size_t)k * G));
            m[rep] = (s1 - s) / k;
            a[rep] = (s2 - s1) / k;
            u[rep] = (s3 - s2) / k;
            double s4 = now_us();
            CUmemGenericAllocationHandle x = make();
            double s5 = now_us();
            CK(cuMemRelease(x));
            double s6 = now_us();
            c[rep] = s5 - s4;
            r[rep] = s6 - s5;
        }
        printf("{\"background\": %zu, \"kind\": \"%s%s\", \"k\": %d, \"reps\": %d, \"setup_s\": %.3f, "
               "\"map_us\": %.2f, \"set_access_us\": %.2f, \"unmap_us\": %.2f, \"create_us\": %.2f, "
               "\"release_us\": %.2f}\n",
               n, distinct ? "distinct" : "alias", one_va ? ", one reservation" : "", k, reps, setup_s, median(m, reps), median(a, reps),
               median(u, reps), median(c, reps), median(r, reps));
        fflush(stdout);
    }
    for (size_t i = 0; i < have; i++) {
        CK(cuMemUnmap(bg[i], G));
        if (!one_va)
            CK(cuMemAddressFree(bg[i], G));
        if (distinct)
            CK(cuMemRelease(bgh[i]));
    }
    for (int i = 0; i < k; i++)
        CK(cuMemRelease(hs[i]));
    CK(cuMemRelease(alias));
    if (arena)
        CK(cuMemAddressFree(arena, maxn * G));
    free(hs), free(bg), free(bgh), free(m), free(a), free(u), free(c), free(r);
    return 0;
}
