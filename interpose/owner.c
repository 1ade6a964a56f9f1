/*
 * owner.c — which pool a pointer belongs to.
 *  - gml_arena_owner: the hot path of every free.  Each pool's home arena is a virtual range
 *    fixed for the pool's life (gml_pool_arena); the ranges are recorded when a pool is installed
 *    and read without a lock, so a free picks its pool by address and the pool looks the pointer
 *    up once (gml_pool_free).
 *  - gml_live_owner: a pointer outside every arena (a stitched block's range, or a foreign
 *    pointer): one hash lookup per pool.
 *  - gml_owner: any pointer in gmlake's memory, live or not (home arena or a stitched range):
 *    decides between "not gmlake's" (pass through) and "gmlake's but not live" (an error).
 */
#include <stdatomic.h>

#include "stitch/registry.h"
#include "interpose.h"

static struct {
    _Atomic uintptr_t lo, hi;
} arenas[GML_MAX_DEVICES];
static _Atomic int ndevices; /* 1 + the highest device with a recorded arena */

void gml_arena_note(int device, gml_pool *p)
{
    uintptr_t lo, hi;
    gml_pool_arena(p, &lo, &hi);
    /* hi first, then lo with release: a reader that sees a non-zero lo (acquire) sees this hi,
     * never the half-written range [0, hi) that would claim every lower pointer. */
    atomic_store_explicit(&arenas[device].hi, hi, memory_order_relaxed);
    atomic_store_explicit(&arenas[device].lo, lo, memory_order_release);
    int n = atomic_load(&ndevices);
    while (n < device + 1 && !atomic_compare_exchange_weak(&ndevices, &n, device + 1))
        ;
}

gml_pool *gml_arena_owner(uintptr_t ptr, int *device)
{
    int n = atomic_load_explicit(&ndevices, memory_order_acquire);
    for (int d = 0; d < n; d++) {
        uintptr_t lo = atomic_load_explicit(&arenas[d].lo, memory_order_acquire);
        if (lo && ptr >= lo && ptr < atomic_load_explicit(&arenas[d].hi, memory_order_relaxed)) {
            *device = d;
            return gml_registry_get(d);
        }
    }
    return NULL;
}

gml_pool *gml_live_owner(uintptr_t ptr, int *device)
{
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        if (p && gml_pool_alloc_size(p, ptr)) {
            *device = d;
            return p;
        }
    }
    return NULL;
}

gml_pool *gml_owner(uintptr_t ptr, int *device)
{
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        if (p && gml_pool_owns(p, ptr)) {
            if (device)
                *device = d;
            return p;
        }
    }
    return NULL;
}
