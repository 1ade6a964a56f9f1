/* rtld_local_main.c — a program that does not link libcudart loads rtld_local_plugin.so (which
 * does) with dlopen(RTLD_LOCAL), under LD_PRELOAD=libgmlake.so: the plugin's runtime calls reach
 * gmlake, which must find that runtime in the plugin's scope (no crash), and serve them.
 * Usage: rtld_local_main PLUGIN.  Prints "N passed, M failed". */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmlake.h"

static int passed, failed;
#define CHECK(cond, ...) do { if (cond) passed++; else { failed++; printf("FAIL %s:%d: ", __FILE__, __LINE__); printf(__VA_ARGS__); printf("\n"); } } while (0)

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: rtld_local_main PLUGIN\n"); return 2; }
    CHECK(dlsym(RTLD_DEFAULT, "gmlake_get_stats") != NULL, "libgmlake is preloaded");
    CHECK(dlsym(RTLD_DEFAULT, "cudaStreamCreateWithFlags") == NULL, "no runtime in the global scope");
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "dlopen: %s", h ? "" : dlerror());
    if (!h) { printf("%d passed, %d failed\n", passed, failed); return 1; }
    int (*run)(char *, size_t) = (int (*)(char *, size_t))dlsym(h, "plugin_run");
    char why[512] = "";
    CHECK(run && run(why, sizeof why) == 0, "the plugin ran: %s", why);
    int (*st)(int, gmlake_stats *) = (int (*)(int, gmlake_stats *))dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    gmlake_stats s;
    memset(&s, 0, sizeof s);
    const char *e = getenv("GMLAKE_ENABLE");
    if (e && !strcmp(e, "0"))
        CHECK(st && st(0, &s) == GMLAKE_ERR_NO_POOL, "gmlake off: nothing served");
    else
        CHECK(st && st(0, &s) == GMLAKE_OK && s.allocations == 2 && s.live_allocations == 0,
              "gmlake served the plugin's allocations (%lu)", (unsigned long)s.allocations);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
