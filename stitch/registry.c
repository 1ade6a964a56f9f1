/* registry.c — per-device pools and the public API over them (contracts in registry.h, gmlake.h). */
#include "registry.h"

#include <stdatomic.h>
#include <stdio.h>

static _Atomic(gml_pool *) pools[GML_MAX_DEVICES];

gml_pool *gml_registry_get(int device)
{
    if (device < 0 || device >= GML_MAX_DEVICES)
        return NULL;
    return atomic_load_explicit(&pools[device], memory_order_acquire);
}

int gml_registry_install(int device, gml_pool *p)
{
    if (device < 0 || device >= GML_MAX_DEVICES || !p)
        return GMLAKE_ERR_INVALID;
    gml_pool *expected = NULL;
    if (!atomic_compare_exchange_strong(&pools[device], &expected, p))
        return GMLAKE_ERR_BUSY;
    return GMLAKE_OK;
}

gml_pool *gml_registry_take(int device)
{
    if (device < 0 || device >= GML_MAX_DEVICES)
        return NULL;
    return atomic_exchange(&pools[device], NULL);
}

int gmlake_get_stats(int device, gmlake_stats *out)
{
    gml_pool *p = gml_registry_get(device);
    if (!out)
        return GMLAKE_ERR_INVALID;
    if (!p)
        return GMLAKE_ERR_NO_POOL;
    gml_pool_stats(p, out);
    return GMLAKE_OK;
}

size_t gmlake_stats_size(void) { return sizeof(gmlake_stats); }

int gmlake_get_host_seconds(int device, double *alloc_seconds, double *free_seconds)
{
    gml_pool *p = gml_registry_get(device);
    if (!p)
        return GMLAKE_ERR_NO_POOL;
    double a, f;
    gml_pool_host_seconds(p, &a, &f);
    if (alloc_seconds)
        *alloc_seconds = a;
    if (free_seconds)
        *free_seconds = f;
    return GMLAKE_OK;
}

int gmlake_reset_peak_stats(int device)
{
    gml_pool *p = gml_registry_get(device);
    if (!p)
        return GMLAKE_ERR_NO_POOL;
    gml_pool_reset_peaks(p);
    return GMLAKE_OK;
}

int gmlake_check(int device)
{
    gml_pool *p = gml_registry_get(device);
    if (!p)
        return GMLAKE_ERR_NO_POOL;
    char why[256];
    int rc = gml_pool_check(p, why, sizeof why);
    if (rc != GMLAKE_OK)
        fprintf(stderr, "gmlake: pool of device %d is inconsistent: %s\n", device, why);
    return rc;
}

int gmlake_allocation_range(const void *ptr, void **base, size_t *size)
{
    if (!ptr || !base || !size)
        return GMLAKE_ERR_INVALID;
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        uintptr_t b;
        size_t n;
        if (!p || gml_pool_find(p, (uintptr_t)ptr, &b, &n) != GMLAKE_OK)
            continue;
        if ((uintptr_t)ptr - b >= n) /* in the block's rounding, past the bytes asked for */
            return GMLAKE_ERR_INVALID;
        *base = (void *)b;
        *size = n;
        return GMLAKE_OK;
    }
    return GMLAKE_ERR_INVALID;
}

const char *gmlake_strerror(int status)
{
    switch (status) {
    case GMLAKE_OK: return "success";
    case GMLAKE_ERR_NOMEM: return "out of device memory";
    case GMLAKE_ERR_INVALID: return "invalid argument";
    case GMLAKE_ERR_DEVICE: return "CUDA driver error";
    case GMLAKE_ERR_BUSY: return "not ready";
    case GMLAKE_ERR_NO_POOL: return "no gmlake pool on that device";
    case GMLAKE_ERR_CORRUPT: return "pool consistency check failed";
    default: return "unknown gmlake status";
    }
}
