/* fork_plugin.c — a library linked to libcudart (the fake), for test_fork_local to load with
 * dlopen(RTLD_LOCAL), whose runtime calls gmlake resolves in the caller's scope under its
 * caller-scope lock (interpose/resolve.c).  The plugin defines cudaPeekAtLastError itself as an
 * IFUNC: gmlake's lookup of it in the plugin's scope runs the resolver below while holding that
 * lock, and an armed resolver stays there for a while, long enough for another thread to fork. */
#include <cuda_runtime_api.h>
#include <stdatomic.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

static atomic_int armed;   /* the next lookup of cudaPeekAtLastError is slow */
static atomic_int entered; /* a slow lookup has started */

static cudaError_t own_peek(void) { return cudaSuccess; }

static cudaError_t (*resolve_peek(void))(void)
{
    if (atomic_exchange(&armed, 0)) {
        atomic_store(&entered, 1);
        struct timespec ts = {.tv_sec = 2};
        nanosleep(&ts, NULL);
    }
    return own_peek;
}

EXPORT cudaError_t cudaPeekAtLastError(void) __attribute__((ifunc("resolve_peek")));

/* Arms a slow lookup and calls cudaPeekAtLastError (gmlake's hook, which looks the plugin's up). */
EXPORT int plugin_slow_lookup(void)
{
    atomic_store(&armed, 1);
    int r = (int)cudaPeekAtLastError(); /* not a tail call: gmlake finds the caller's scope from
                                         * its return address, which must be in the plugin */
    atomic_store(&armed, 0);
    return r;
}

EXPORT int plugin_lookup_entered(void) { return atomic_load(&entered); }

/* A runtime call gmlake resolves in the plugin's scope (it passes in a forked child). */
EXPORT int plugin_malloc(void)
{
    void *p = NULL;
    return (int)cudaMalloc(&p, 1 << 20);
}
