/* test_stacked.c — gmlake stacked with a second wrapper (wrapper.c) that finds what it wraps with
 * dlsym(RTLD_NEXT): argv[1] says which of the two comes first in the global scope (linked in that
 * order, or preloaded in that order), GMLAKE_ENABLE says whether gmlake serves.  Every call must
 * go down the stack in order: the wrapper sees the calls that reach it exactly once (no recursion,
 * not skipped), gmlake serves what it serves, and the fake CUDA gets the rest.  Plain program. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

#define MiB ((size_t)1 << 20)

static int failed;
#define CHECK(c, what)                                                                            \
    do {                                                                                          \
        if (!(c)) {                                                                               \
            fprintf(stderr, "test_stacked: failed: %s (%s)\n", what, #c);                         \
            failed++;                                                                             \
        }                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "wrapper-first") && strcmp(argv[1], "gmlake-first"))) {
        fprintf(stderr, "usage: test_stacked wrapper-first|gmlake-first\n");
        return 2;
    }
    bool wrapper_first = strcmp(argv[1], "wrapper-first") == 0;
    const char *e = getenv("GMLAKE_ENABLE");
    bool enabled = !e || strcmp(e, "0") != 0;
    int (*rt_calls)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gmlwrap_runtime_calls");
    int (*drv_calls)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "gmlwrap_driver_calls");
    int (*get_stats)(int, gmlake_stats *) = (int (*)(int, gmlake_stats *))dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    if (!rt_calls || !drv_calls || !get_stats) {
        fprintf(stderr, "test_stacked: the wrapper or gmlake is not loaded\n");
        return 2;
    }

    void *p = NULL, *z = NULL;
    CHECK(cudaMalloc(&p, MiB) == cudaSuccess && p, "cudaMalloc");
    CHECK(cudaMalloc(&z, 0) == cudaSuccess, "cudaMalloc of 0 bytes (gmlake passes it on)");
    CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
    CUdeviceptr d = 0;
    CHECK(cuMemAlloc_v2(&d, MiB) == CUDA_SUCCESS && d, "cuMemAlloc");

    /* What reaches the wrapper: everything when it comes first; when gmlake comes first, only what
     * gmlake passes on (everything when it is off; the 0-byte cudaMalloc when on).  The fake
     * runtime calls the driver by name, so its own cuMemAlloc calls (one per cudaMalloc that
     * reaches it) count too; gmlake always passes those on. */
    int want_rt = wrapper_first || !enabled ? 3 : 1;
    int runtime_inner = enabled ? 1 : 2;
    int want_drv = runtime_inner + (wrapper_first || !enabled ? 1 : 0);
    CHECK(rt_calls() == want_rt, "runtime calls that reached the wrapper");
    CHECK(drv_calls() == want_drv, "driver calls that reached the wrapper");
    gmlake_stats s;
    int rc = get_stats(0, &s);
    if (enabled) {
        CHECK(rc == GMLAKE_OK && s.allocations == 2 && s.frees == 1, "gmlake served both allocations");
        CHECK(fake_cuda_counts()->rt_malloc == 1, "only the 0-byte cudaMalloc reached CUDA");
        CHECK(fake_cuda_counts()->mem_alloc == 1, "the runtime's own driver call passed straight through");
    } else {
        CHECK(rc == GMLAKE_ERR_NO_POOL, "gmlake served nothing");
        CHECK(fake_cuda_counts()->rt_malloc == 2 && fake_cuda_counts()->rt_free == 1, "CUDA got every runtime call");
        CHECK(fake_cuda_counts()->mem_alloc == 3, "and every driver allocation");
    }
    printf("%d passed, %d failed\n", failed ? 0 : 1, failed ? 1 : 0);
    return failed != 0;
}
