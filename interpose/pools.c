/*
 * pools.c — the per-device pools of the preload layer: created on a device's first allocation
 * (gml_pool_of; never in a constructor), installed in the registry (stitch/registry.h) for good,
 * with the peer-access grants recorded before or after the pool exists.  A device where no pool
 * can be made is marked once (logged) and its allocations pass through to CUDA.  The program's
 * giving a pool's cache back (gml_give_back, under the public gmlake_empty_cache and the hook of
 * cudaMemPoolTrimTo, hooks.c, which know whether a device wait is safe now) is here, where the
 * trace recorder is reachable.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "stitch/registry.h"
#include "interpose.h"

static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int failed_dev[GML_MAX_DEVICES];    /* 1: gmlake cannot run there (logged) */
static _Atomic uint64_t peers_of[GML_MAX_DEVICES]; /* bit a: device a may access this one */

static void *resolve_driver(const char *name) { return gml_driver_symbol(name); }

gml_pool *gml_pool_of(int device)
{
    gml_pool *p = gml_registry_get(device);
    if (p || device < 0 || device >= GML_MAX_DEVICES || atomic_load(&failed_dev[device]))
        return p;
    pthread_mutex_lock(&create_mu);
    p = gml_registry_get(device);
    if (!p && !atomic_load(&failed_dev[device])) {
        const char *err = NULL;
        gml_device *dev = gml_cuda_device_create(device, resolve_driver, &err);
        p = dev ? gml_pool_create(dev, &gml_cfg()->pool, &err) : NULL;
        if (!p) {
            gml_device_destroy(dev);
            atomic_store(&failed_dev[device], 1);
            gml_log(GML_LOG_ERROR, "device %d: %s; gmlake is OFF there, its allocations pass "
                    "through to CUDA", device, err ? err : "cannot create a pool");
        } else {
            uint64_t peers = atomic_load(&peers_of[device]);
            for (int a = 0; a < GML_MAX_DEVICES; a++)
                if (peers >> a & 1)
                    gml_cuda_device_grant(gml_pool_device(p), a);
            gml_summary_claim();
            if (gml_trace_on()) /* the pool records its allocations and frees, in its order */
                gml_pool_set_recorder(p, gml_trace_record, (void *)(intptr_t)device);
            gml_arena_note(device, p);
            gml_registry_install(device, p);
            gml_log(GML_LOG_INFO, "device %d: pool ready (chunk %zu bytes, stitching %s)", device,
                    gml_pool_settings_of(p)->chunk_size,
                    gml_pool_settings_of(p)->vmm_defragment ? "on" : "off");
        }
    }
    pthread_mutex_unlock(&create_mu);
    return p;
}

void gml_peer_grant(int owner, int accessor)
{
    if (owner < 0 || owner >= GML_MAX_DEVICES || accessor < 0 || accessor >= GML_MAX_DEVICES ||
        owner == accessor)
        return;
    /* under create_mu: a pool created now sees the bit or gets the grant below, never neither */
    pthread_mutex_lock(&create_mu);
    atomic_fetch_or(&peers_of[owner], (uint64_t)1 << accessor);
    gml_pool *p = gml_registry_get(owner);
    pthread_mutex_unlock(&create_mu);
    if (p) {
        gml_depth++;
        int rc = gml_cuda_device_grant(gml_pool_device(p), accessor);
        gml_depth--;
        if (rc != GMLAKE_OK)
            gml_log(GML_LOG_WARN, "device %d: granting device %d access to gmlake memory failed (%s)",
                    owner, accessor, gmlake_strerror(rc));
    }
}

void gml_pools_hold_creation(bool hold)
{
    if (hold)
        pthread_mutex_lock(&create_mu);
    else
        pthread_mutex_unlock(&create_mu);
}

int gml_give_back(int device, bool may_wait)
{
    gml_pool *p = gml_registry_get(device);
    if (!p)
        return GMLAKE_ERR_NO_POOL;
    if (atomic_load(&gml_forked))
        return GMLAKE_ERR_DEVICE; /* the parent's pool and trace: CUDA fails in a forked child */
    int rc = GMLAKE_OK;
    gml_depth++;
    if (may_wait)
        rc = gml_pool_empty_cache(p);
    else
        gml_pool_trim(p);
    gml_depth--;
    gml_trace_event(device, 'E', 0, 0, GML_STREAM_NONE);
    return rc;
}

