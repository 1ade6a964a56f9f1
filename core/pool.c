/*
 * pool.c — the pool's entry points: allocate, free, empty the cache; the order of the fallbacks
 * when no free block fits (the slow path).
 *
 * Fast path: lock, best fit in the stream's bin and the ready bin, split, hash insert, unlock.
 * Slow path, in order (each step retries the best fit):
 *   1. move blocks of other streams whose work has completed to the ready bin (event query);
 *   2. small: move a free large chunk to the small space, else grow one chunk;
 *      large: give fully free small chunks back to the large space; then, with stitching at
 *      defrag level 0 and a request >= frag_limit, stitch (a cached stitched block first; growth
 *      only by the deficit); else grow the large space; at level 1 stitch after growth failed;
 *   3. out of memory: if other streams hold free blocks, unlock, synchronise the device, lock
 *      (nothing waits for the device under the pool lock); tear down cached stitches, release
 *      free chunks, grow again; at level 2 (or as the last resort at any level) stitch;
 *   4. GMLAKE_ERR_NOMEM, the pool unchanged apart from the released cache.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../stitch/stitch.h"
#include "pool_impl.h"

#ifdef GML_CHECK_EVERY_OP
/* Debug builds (-Dcheck_every_op=true): a broken invariant stops the program where it broke. */
static void debug_check(gml_pool *p)
{
    char why[256];
    if (gml_pool_check_locked(p, why, sizeof why) != GMLAKE_OK) {
        fprintf(stderr, "gmlake: pool consistency check failed: %s\n", why);
        abort();
    }
}
#else
#define debug_check(p) ((void)0)
#endif

static const char *const strategy_names[GML_STITCH_STRATEGY_COUNT] = {"largest", "bestfit"};

const char *gml_stitch_strategy_name(gml_stitch_strategy s)
{
    return (unsigned)s < GML_STITCH_STRATEGY_COUNT ? strategy_names[s] : "unknown";
}

int gml_stitch_strategy_from_name(const char *name)
{
    for (int i = 0; i < GML_STITCH_STRATEGY_COUNT; i++)
        if (strcmp(name, strategy_names[i]) == 0)
            return i;
    return -1;
}

void gml_pool_settings_default(gml_pool_settings *s)
{
    memset(s, 0, sizeof *s);
    s->small_limit = (size_t)1 << 20;
    s->round = 512;
    s->vmm_defragment = true;
    s->frag_limit = (size_t)2 << 20;
    s->reuse_limit = 1.25;
    s->defrag_level = 0;
    s->auto_gc = 256;
    s->stitch_bytes_limit = 0;
    s->strategy = GML_STITCH_LARGEST;
}

int gml_pool_settings_check(const gml_pool_settings *s, size_t g, const char **why)
{
    size_t chunk = s->chunk_size ? s->chunk_size : ((size_t)2 << 20);
    if (g)
        chunk = GML_ROUND_UP(chunk, g);
    const char *w = NULL;
    if (chunk & (chunk - 1))
        w = "chunk_size must be a power of two";
    else if (s->round < 512 || (s->round & (s->round - 1)) || s->round > chunk)
        w = "round must be a power of two between 512 and the chunk size";
    else if (s->small_limit > chunk)
        w = "small_limit must not exceed chunk_size";
    else if (s->defrag_level < 0 || s->defrag_level > 2 || s->reuse_limit < 1.0 ||
             (unsigned)s->strategy >= GML_STITCH_STRATEGY_COUNT)
        w = "defrag_level must be 0..2, reuse_limit >= 1, strategy known";
    if (w && why)
        *why = w;
    return w ? -1 : 0;
}

gml_pool *gml_pool_create(gml_device *dev, const gml_pool_settings *settings, const char **err)
{
    const char *why = NULL;
    gml_pool *p = calloc(1, sizeof *p);
    if (!p) {
        why = "out of host memory";
        goto fail;
    }
    p->dev = dev;
    p->set = *settings;
    size_t g = gml_dev_granularity(dev);
    size_t free_b = 0, total = 0;
    if (g == 0 || (g & (g - 1)) || gml_dev_mem_info(dev, &free_b, &total) != GMLAKE_OK) {
        why = "the device reports no usable granularity or memory size";
        goto fail;
    }
    if (gml_pool_settings_check(&p->set, g, &why) != 0)
        goto fail;
    size_t chunk = GML_ROUND_UP(p->set.chunk_size ? p->set.chunk_size : ((size_t)2 << 20), g);
    p->chunk = chunk;
    p->set.chunk_size = chunk;
    p->chunk_shift = (unsigned)__builtin_ctzll(chunk);
    p->limit = p->set.limit_bytes ? p->set.limit_bytes : total;
    size_t arena = p->set.arena_bytes ? p->set.arena_bytes : 4 * total;
    arena = GML_ROUND_UP(arena, chunk);
    p->arena_size = arena;
    p->nslots = arena >> p->chunk_shift;
    p->slots = calloc(p->nslots, sizeof *p->slots);
    if (!p->slots) {
        why = "out of host memory for the slot table";
        goto fail;
    }
    if (gml_dev_va_reserve(dev, arena, chunk, &p->arena) != GMLAKE_OK) {
        why = "could not reserve the virtual address range for the arena";
        p->arena = 0;
        goto fail;
    }
    p->ready = gml_bin_get(p, GML_STREAM_NONE);
    if (!p->ready) {
        why = "out of host memory";
        goto fail;
    }
    p->last_bin = p->ready;
    pthread_mutex_init(&p->mu, NULL);
    return p;
fail:
    if (err)
        *err = why;
    if (p) {
        if (p->arena)
            gml_dev_va_free(dev, p->arena, p->arena_size);
        gml_bins_destroy(p);
        free(p->slots);
        free(p);
    }
    return NULL;
}

void gml_pool_destroy(gml_pool *p)
{
    if (!p)
        return;
    if (gml_dev_synchronize(p->dev) == GMLAKE_OK)
        p->synced_seq = p->seq;
    /* stitched blocks, live or cached */
    while (p->lru_head) {
        gml_sblock *sb = p->lru_head;
        if (sb->live)
            gml_stitch_free(p, &sb->b, p->ready);
        gml_stitch_gc(p, true);
        if (p->lru_head == sb)
            break; /* the device refused to unmap: leave it to process exit */
    }
    for (size_t i = 0; i < p->nslots; i++) {
        if (p->slots[i].state == GML_SLOT_EMPTY)
            continue;
        gml_dev_unmap(p->dev, gml_slot_addr(p, i), p->chunk);
        gml_dev_chunk_release(p->dev, p->slots[i].handle);
    }
    gml_dev_va_free(p->dev, p->arena, p->arena_size);
    HASH_CLEAR(hh, p->live);
    gml_bins_destroy(p);
    for (size_t i = 0; i < p->nslabs; i++)
        free(p->slabs[i]);
    free(p->slabs);
    free(p->slots);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

gml_pool *gml_sim_pool_create(size_t capacity, bool backed, const gml_pool_settings *settings,
                              const char **err)
{
    gml_sim_config sc = {.capacity = capacity, .backed = backed};
    gml_device *dev = gml_sim_create(&sc);
    if (!dev) {
        if (err)
            *err = "cannot create the simulated device (capacity must be a multiple of 2 MiB)";
        return NULL;
    }
    gml_pool_settings def;
    if (!settings) {
        gml_pool_settings_default(&def);
        settings = &def;
    }
    gml_pool *p = gml_pool_create(dev, settings, err);
    if (!p)
        gml_device_destroy(dev);
    return p;
}

void gml_sim_pool_destroy(gml_pool *p)
{
    if (!p)
        return;
    gml_device *dev = p->dev;
    gml_pool_destroy(p);
    gml_device_destroy(dev);
}

static inline gml_bin *bin_for(gml_pool *p, gml_stream s)
{
    gml_bin *b = p->last_bin;
    if (__builtin_expect(b->stream == s, 1))
        return b;
    b = gml_bin_get(p, s);
    if (b)
        p->last_bin = b;
    return b;
}

static inline bool try_fit(gml_pool *p, gml_bin *bin, int space, size_t need, size_t req,
                           uintptr_t *out)
{
    gml_block *f = gml_best_fit(p, bin, space, need);
    if (!f)
        return false;
    gml_block *l = gml_take(p, f, need, req);
    if (!l)
        return false;
    *out = l->addr;
    return true;
}

static int stitch(gml_pool *p, gml_bin *bin, size_t need, size_t req, bool may_grow, uintptr_t *out)
{
    if (!p->set.vmm_defragment || req < p->set.frag_limit)
        return GMLAKE_ERR_NOMEM;
    return gml_stitch_alloc(p, bin, need, req, may_grow, out);
}

__attribute__((noinline)) static int alloc_slow(gml_pool *p, gml_bin *bin, int space, size_t need,
                                                size_t req, uintptr_t *out)
{
    int level = p->set.defrag_level, rc;
    if (gml_promote(p, bin, false) && try_fit(p, bin, space, need, req, out))
        return GMLAKE_OK;
    if (space == GML_SPACE_SMALL) {
        rc = gml_small_refill(p, bin);
        if (rc == GMLAKE_OK && try_fit(p, bin, space, need, req, out))
            return GMLAKE_OK;
    } else {
        if (gml_small_reclaim(p) && try_fit(p, bin, space, need, req, out))
            return GMLAKE_OK;
        if (level == 0) {
            rc = stitch(p, bin, need, req, true, out);
            if (rc == GMLAKE_OK)
                return rc;
        }
        rc = gml_grow_large(p, bin, need);
        if (rc == GMLAKE_OK && try_fit(p, bin, space, need, req, out))
            return GMLAKE_OK;
        if (level == 1 && stitch(p, bin, need, req, true, out) == GMLAKE_OK)
            return GMLAKE_OK;
    }
    return GMLAKE_ERR_NOMEM;
}

/* Step 3, after the device was synchronised if other streams held free blocks. */
__attribute__((noinline)) static int alloc_last_resort(gml_pool *p, gml_bin *bin, int space,
                                                       size_t need, size_t req, uintptr_t *out)
{
    int rc;
    /* out of memory: take what the synchronisation freed, drop cached stitches and free chunks */
    gml_promote(p, NULL, false);
    if (try_fit(p, bin, space, need, req, out))
        return GMLAKE_OK;
    gml_stitch_gc(p, true);
    if (gml_release_free_chunks(p))
        p->c.cache_releases++;
    rc = space == GML_SPACE_SMALL ? gml_small_refill(p, bin) : gml_grow_large(p, bin, need);
    if (rc == GMLAKE_OK && try_fit(p, bin, space, need, req, out))
        return GMLAKE_OK;
    if (space == GML_SPACE_LARGE && stitch(p, bin, need, req, true, out) == GMLAKE_OK)
        return GMLAKE_OK;
    return rc == GMLAKE_ERR_DEVICE ? rc : GMLAKE_ERR_NOMEM;
}

int gml_pool_alloc(gml_pool *p, size_t size, gml_stream stream, uintptr_t *out)
{
    if (size == 0 || size > ((size_t)1 << 62))
        return GMLAKE_ERR_INVALID;
    int space = size < p->set.small_limit ? GML_SPACE_SMALL : GML_SPACE_LARGE;
    size_t need = GML_ROUND_UP(size, p->set.round);
    int rc = GMLAKE_OK;
    pthread_mutex_lock(&p->mu);
    gml_bin *bin = bin_for(p, stream);
    if (__builtin_expect(!bin, 0))
        rc = GMLAKE_ERR_NOMEM;
    else if (__builtin_expect(bin->want_record, 0))
        gml_bin_record(p, bin);
    if (bin && !try_fit(p, bin, space, need, size, out)) {
        rc = alloc_slow(p, bin, space, need, size, out);
        if (rc != GMLAKE_OK) {
            if (gml_bins_hold_blocks(p, bin)) {
                pthread_mutex_unlock(&p->mu);
                gml_pool_sync(p);
                pthread_mutex_lock(&p->mu);
                bin = bin_for(p, stream); /* the lock was dropped: look the bin up again */
            }
            rc = bin ? alloc_last_resort(p, bin, space, need, size, out) : GMLAKE_ERR_NOMEM;
        }
    }
    if (rc == GMLAKE_OK) {
        p->c.allocations++;
        p->c.live++;
        gml_stats_active(p, (long long)size);
    } else {
        p->c.failed++;
    }
    debug_check(p);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int gml_pool_free(gml_pool *p, uintptr_t ptr, gml_stream stream)
{
    pthread_mutex_lock(&p->mu);
    gml_block *b = NULL;
    HASH_FIND(hh, p->live, &ptr, sizeof ptr, b);
    gml_bin *bin = b ? bin_for(p, stream) : NULL;
    if (!bin) {
        pthread_mutex_unlock(&p->mu);
        return GMLAKE_ERR_INVALID;
    }
    HASH_DEL(p->live, b);
    p->c.frees++;
    p->c.live--;
    gml_stats_active(p, -(long long)b->req);
    if (b->state == GML_B_STITCHED)
        gml_stitch_free(p, b, bin);
    else
        gml_free_insert(p, b, bin);
    if (__builtin_expect(bin->want_record, 0))
        gml_bin_record(p, bin);
    debug_check(p);
    pthread_mutex_unlock(&p->mu);
    return GMLAKE_OK;
}

size_t gml_pool_alloc_size(gml_pool *p, uintptr_t ptr)
{
    pthread_mutex_lock(&p->mu);
    gml_block *b = NULL;
    HASH_FIND(hh, p->live, &ptr, sizeof ptr, b);
    size_t n = b ? b->req : 0;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void gml_pool_arena(const gml_pool *p, uintptr_t *lo, uintptr_t *hi)
{
    *lo = p->arena;
    *hi = p->arena + p->arena_size;
}

bool gml_pool_owns(gml_pool *p, uintptr_t ptr)
{
    pthread_mutex_lock(&p->mu);
    bool own = (ptr >= p->arena && ptr < p->arena + p->arena_size) || gml_stitch_owns(p, ptr);
    pthread_mutex_unlock(&p->mu);
    return own;
}

int gml_pool_sync(gml_pool *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t upto = p->seq;
    pthread_mutex_unlock(&p->mu);
    int rc = gml_dev_synchronize(p->dev);
    if (rc != GMLAKE_OK)
        return rc;
    pthread_mutex_lock(&p->mu);
    if (upto > p->synced_seq)
        p->synced_seq = upto;
    pthread_mutex_unlock(&p->mu);
    return GMLAKE_OK;
}

void gml_pool_stream_retire(gml_pool *p, gml_stream stream)
{
    pthread_mutex_lock(&p->mu);
    gml_bin *b = NULL;
    HASH_FIND(hh, p->bins, &stream, sizeof stream, b);
    if (b)
        gml_bin_retire(p, b);
    debug_check(p);
    pthread_mutex_unlock(&p->mu);
}

void gml_pool_hold(gml_pool *p, bool hold)
{
    if (hold)
        pthread_mutex_lock(&p->mu);
    else
        pthread_mutex_unlock(&p->mu);
}

int gml_pool_empty_cache(gml_pool *p)
{
    int rc = gml_pool_sync(p);
    pthread_mutex_lock(&p->mu);
    gml_promote(p, NULL, false);
    gml_stitch_gc(p, true);
    if (gml_release_free_chunks(p))
        p->c.cache_releases++;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* Free bytes, the largest free block and the whole free large chunks (what one stitch could
 * map), over every bin: a walk of the free trees, for reports, not for the hot path. */
static void free_figures(gml_pool *p, gmlake_stats *o)
{
    for (gml_bin *bin = p->bins; bin; bin = bin->hh.next)
        for (int sp = 0; sp < GML_NSPACES; sp++) {
            gml_block *b;
            RB_FOREACH(b, gml_size_tree, &bin->free[sp]) {
                o->free_bytes += b->size;
                if (b->size > o->largest_free_bytes)
                    o->largest_free_bytes = b->size;
                uintptr_t lo = GML_ROUND_UP(b->addr - p->arena, p->chunk);
                uintptr_t hi = (b->addr + b->size - p->arena) / p->chunk * p->chunk;
                if (sp == GML_SPACE_LARGE && hi > lo)
                    o->stitchable_bytes += hi - lo;
            }
        }
}

void gml_pool_stats(gml_pool *p, gmlake_stats *o)
{
    memset(o, 0, sizeof *o);
    pthread_mutex_lock(&p->mu);
    o->active_bytes = p->c.active;
    o->peak_active_bytes = p->c.peak_active;
    o->reserved_bytes = p->c.reserved;
    o->peak_reserved_bytes = p->c.peak_reserved;
    o->allocations = p->c.allocations;
    o->frees = p->c.frees;
    o->live_allocations = p->c.live;
    o->failed_allocations = p->c.failed;
    o->stitches = p->c.stitches;
    o->stitch_reuses = p->c.stitch_reuses;
    o->stitch_evictions = p->c.stitch_evictions;
    o->stitched_blocks = p->stitched_count;
    o->stitched_bytes = p->stitched_bytes;
    o->cache_releases = p->c.cache_releases;
    o->chunk_size = p->chunk;
    free_figures(p, o);
    pthread_mutex_unlock(&p->mu);
    o->utilization = o->peak_reserved_bytes
                         ? (double)o->peak_active_bytes / (double)o->peak_reserved_bytes
                         : 0.0;
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        o->device_calls[i] = atomic_load_explicit(&p->dev->calls[i], memory_order_relaxed);
}

void gml_pool_reset_peaks(gml_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->c.peak_active = p->c.active;
    p->c.peak_reserved = p->c.reserved;
    pthread_mutex_unlock(&p->mu);
}

gml_device *gml_pool_device(gml_pool *p) { return p->dev; }
const gml_pool_settings *gml_pool_settings_of(gml_pool *p) { return &p->set; }
