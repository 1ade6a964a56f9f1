// gpu_stats.cuh — what the stitching GPU tests share besides gpu_check.cuh: put (the fill kernel,
// then a device synchronisation) and gmlake's statistics of device 0 looked up in the preloaded
// library (preloaded; st: zeros when it is not preloaded; calls: its device calls of every kind).
#ifndef GML_GPU_STATS_CUH
#define GML_GPU_STATS_CUH
#include <dlfcn.h>
#include <string.h>
#include "gmlake.h"
#include "gpu_check.cuh"

static void put(void *p, size_t bytes, uint32_t seed) {
    fill<<<256, 256>>>((uint32_t *)p, bytes / 4, seed);
    cudaDeviceSynchronize();
}

typedef int (*stats_fn)(int, gmlake_stats *);
static stats_fn get_stats;
static gmlake_stats st() { gmlake_stats s; memset(&s, 0, sizeof s); if (get_stats) get_stats(0, &s); return s; }
// Looks gmlake's entry points up in the preloaded library; false (counted as a failure) if absent.
typedef int (*device_fn)(int);
static bool preloaded(device_fn *empty, device_fn *check) {
    get_stats = (stats_fn)dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    *empty = (device_fn)dlsym(RTLD_DEFAULT, "gmlake_empty_cache");
    *check = (device_fn)dlsym(RTLD_DEFAULT, "gmlake_check");
    CHECK(get_stats && *empty && *check, "libgmlake is preloaded");
    return get_stats && *empty && *check;
}
static uint64_t calls() { gmlake_stats x = st(); uint64_t c = 0; for (int k = 0; k < GMLAKE_DC_COUNT; k++) c += x.device_calls[k]; return c; }
#endif
