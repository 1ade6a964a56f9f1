/* test_rtld_local.c — a program that does not link libcudart loads a library that does, with
 * dlopen(RTLD_LOCAL): the library's runtime calls bind to gmlake's hooks but the runtime is not in
 * the global scope, so gmlake must find it in the caller's scope.  Before the library is loaded,
 * gmlake's hooks have no runtime at all and must return a clean error.  argv[1]: "on" (gmlake
 * serves: GMLAKE_ENABLE unset) or "off" (GMLAKE_ENABLE=0).  Plain program; PLUGIN is the path. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

static int failed;
#define CHECK(c, what)                                                                            \
    do {                                                                                          \
        if (!(c)) {                                                                               \
            fprintf(stderr, "test_rtld_local: failed: %s (%s)\n", what, #c);                      \
            failed++;                                                                             \
        }                                                                                         \
    } while (0)

int main(int argc, char **argv)
{
    int on = argc > 1 && strcmp(argv[1], "on") == 0;
    /* no runtime anywhere yet: gmlake's own cudaMalloc (the program links none) */
    cudaError_t (*hook)(void **, size_t) = (cudaError_t(*)(void **, size_t))dlsym(RTLD_DEFAULT, "cudaMalloc");
    CHECK(hook != NULL, "gmlake exports cudaMalloc");
    void *p = NULL;
    if (hook)
        CHECK(hook(&p, 1 << 20) == cudaErrorInitializationError, "no runtime: a clean error, no crash");
    CHECK(dlsym(RTLD_DEFAULT, "fake_cuda_counts") == NULL, "the fake CUDA is not in the global scope");

    void *h = dlopen(PLUGIN, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "dlopen of the plugin");
    if (!h) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    int (*run)(char *, size_t) = (int (*)(char *, size_t))dlsym(h, "plugin_run");
    fake_counts *(*counts)(void) = (fake_counts * (*)(void)) dlsym(h, "plugin_fake_counts");
    CHECK(run && counts, "the plugin's functions");
    char why[256] = "";
    CHECK(run(why, sizeof why) == 0, "the plugin's runtime calls");
    if (why[0])
        fprintf(stderr, "test_rtld_local: plugin step failed: %s\n", why);
    gmlake_stats s;
    int rc = gmlake_get_stats(0, &s);
    if (on) {
        CHECK(rc == GMLAKE_OK && s.allocations == 2 && s.frees == 2, "gmlake served the plugin's allocations");
        CHECK(counts()->rt_malloc == 1, "the 0-byte cudaMalloc reached the plugin's runtime");
    } else {
        CHECK(rc == GMLAKE_ERR_NO_POOL, "gmlake off: nothing served");
        CHECK(counts()->rt_malloc == 3 && counts()->rt_malloc_async == 1, "every call reached the plugin's runtime");
    }
    printf("%d passed, %d failed\n", failed ? 0 : 1, failed ? 1 : 0);
    return failed != 0;
}
