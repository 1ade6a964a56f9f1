/* bench/gpu/overhead.c — what physical memory costs beyond itself, by NVML (issue 22: gmlake's
 * process used ~68 MiB more device memory than its pool reserved, next to PyTorch's allocators).
 * Each case creates COUNT handles of SIZE bytes with cuMemCreate, maps each into one reserved
 * range, sets access, and reports NVML's used bytes above the case's start minus the bytes made:
 *   plain   handles with no shareable type
 *   fd      handles exportable as POSIX file descriptors (what gmlake asks for, for CUDA IPC)
 *   twice   plain handles mapped into a second range as well (a stitched range's view)
 * One JSON line a case.  Build: gcc -O2 -I/usr/local/cuda/include overhead.c -o overhead -L/usr/local/cuda/lib64/stubs -lcuda -ldl */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct { unsigned long long total, free, used; } nvml_mem;
static int (*nvml_info)(void *, nvml_mem *);
static void *nvml_dev;

static unsigned long long used(void)
{
    nvml_mem m;
    usleep(200000);
    return nvml_info(nvml_dev, &m) == 0 ? m.used : 0;
}

#define CK(x) do { CUresult r_ = (x); if (r_ != CUDA_SUCCESS) { \
    fprintf(stderr, "%s: CUDA error %d\n", #x, (int)r_); exit(1); } } while (0)

static void run(const char *name, int fd, int twice, size_t size, int count)
{
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    if (fd)
        prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    unsigned long long before = used();
    CUmemGenericAllocationHandle *h = calloc((size_t)count, sizeof *h);
    CUdeviceptr va, va2 = 0;
    size_t total = size * (size_t)count;
    CK(cuMemAddressReserve(&va, total, 0, 0, 0));
    if (twice)
        CK(cuMemAddressReserve(&va2, total, 0, 0, 0));
    for (int i = 0; i < count; i++) {
        CK(cuMemCreate(&h[i], size, &prop, 0));
        CK(cuMemMap(va + size * (size_t)i, size, 0, h[i], 0));
        CK(cuMemSetAccess(va + size * (size_t)i, size, &acc, 1));
        if (twice) {
            CK(cuMemMap(va2 + size * (size_t)i, size, 0, h[i], 0));
            CK(cuMemSetAccess(va2 + size * (size_t)i, size, &acc, 1));
        }
    }
    CK(cuCtxSynchronize());
    unsigned long long after = used();
    printf("{\"case\":\"%s\",\"size\":%zu,\"count\":%d,\"made_mib\":%.1f,\"nvml_delta_mib\":%.1f,"
           "\"beyond_mib\":%.1f}\n", name, size, count, total / 1048576.0,
           (after - before) / 1048576.0, ((double)after - before - total) / 1048576.0);
    fflush(stdout);
    for (int i = 0; i < count; i++) {
        CK(cuMemUnmap(va + size * (size_t)i, size));
        if (twice)
            CK(cuMemUnmap(va2 + size * (size_t)i, size));
        CK(cuMemRelease(h[i]));
    }
    CK(cuMemAddressFree(va, total));
    if (twice)
        CK(cuMemAddressFree(va2, total));
    free(h);
}

int main(void)
{
    void *nv = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    if (!nv) { fprintf(stderr, "no NVML\n"); return 1; }
    int (*init)(void) = (int (*)(void))dlsym(nv, "nvmlInit_v2");
    int (*get)(unsigned, void **) = (int (*)(unsigned, void **))dlsym(nv, "nvmlDeviceGetHandleByIndex_v2");
    nvml_info = (int (*)(void *, nvml_mem *))dlsym(nv, "nvmlDeviceGetMemoryInfo");
    if (init() || get(0, &nvml_dev)) { fprintf(stderr, "NVML init failed\n"); return 1; }
    unsigned long long start = used();
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    printf("{\"case\":\"context\",\"nvml_delta_mib\":%.1f}\n", (used() - start) / 1048576.0);
    static const size_t sizes[] = {(size_t)2 << 20, (size_t)64 << 20};
    for (int s = 0; s < 2; s++) {
        int count = (int)(((size_t)4 << 30) / sizes[s]);
        run("plain", 0, 0, sizes[s], count);
        run("fd", 1, 0, sizes[s], count);
        run("twice", 0, 1, sizes[s], count);
    }
    return 0;
}
