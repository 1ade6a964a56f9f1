/*
 * pool.c — tier 3, the orchestrator (contract in pool.h): entry points, the map of live
 * allocations, the order of the fallbacks when no free block fits (the slow path), statistics,
 * the aggregated checker, destruction.  It sits in stitch/ above VMS (stitch.c, cache.c), which
 * never calls back into it (pool.h says why it is not in core/).
 *
 * Fast path: lock, best fit in the bins that serve the stream, split, hash insert, unlock.
 * Slow path, in order (each step retries the best fit):
 *   1. move a block of another stream whose work has completed: the one that fits (known passed
 *      first, else an event query) to the asking stream's bin, else every passed block to the
 *      ready bin (gml_promote);
 *   2. small: move a free large chunk to the small space, else grow one chunk;
 *      large: give fully free small chunks back to the large space; then at defrag level 0
 *      stitch (a cached stitched block first; with stitch_borrow, for a request of at least
 *      1/GML_BORROW_SHARE of the pool, the other streams' free memory by a wait on the GPU
 *      before growth: "borrow" in stitch.h; growth only by the deficit); else grow the large
 *      space; at level 1 stitch after growth failed.  At level 0 a request below frag_limit, or
 *      below churn_limit while stitching churns, or while a pool that gives its cache back
 *      again and again regrows well below what it held (grow_first), takes a cached stitched
 *      block or grows the large space first, and is stitched once growth failed; after such a
 *      failure nothing grows first for a window of allocations (the device is full);
 *   3. out of memory: if stream bins hold free blocks, unlock, synchronise the device, lock
 *      (nothing waits for the device under the pool lock); tear down cached stitches, release
 *      free chunks, grow again; at level 2 (or as the last resort at any level) stitch;
 *      (skipped where even that could not serve it: need above the device's free memory and the
 *      pool's free memory together, or above the pool's limit less what is active);
 *   4. GMLAKE_ERR_NOMEM, the pool unchanged apart from the released cache.
 * Growth, a new stitch and the teardown of cached stitched blocks make their driver calls without
 * the lock (the heap and VMS drop the lock named by gml_heap_set_lock, on slots, parts or
 * unlinked blocks they reserved): the slow path holds the asking bin throughout, and looks again
 * after every growth and teardown (docs/ARCHITECTURE.md, "Locking").
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/addrmap.h"
#include "../core/heap.h"
#include "stitch.h"
#include "pool.h"

/* How many of the last releases by empty_cache the regrowth rule remembers (regrowing). */
#define GML_REGROW_RECENT 8

struct gml_pool {
    pthread_mutex_t mu;
    gml_device *dev;
    gml_pool_settings set;
    gml_heap heap;
    gml_stitch st;
    gml_bin *last_bin;               /* the bin of the last stream seen */
    gml_addrmap live;                /* by addr: LIVE heap blocks and VIEW stitched blocks */
    size_t inflight;                 /* allocations between their room in `live` and their end */
    bool dead;                       /* a reset could not make the heap again: serves nothing
                                        (beside inflight: read with it on every allocation) */
    uint64_t active, peak_active;
    uint64_t allocations, frees, nlive, failed, cache_releases;
    uint64_t alloc_ticks, free_ticks; /* wall time of gml_pool_alloc / gml_pool_free, lock waits
                                        included, in gml_dev_ticks */
    gml_ticks_clock clock;           /* converts them */
    uint64_t seen_churns;            /* st.churns when last looked at */
    uint64_t churn_until;            /* stitching churns until this many allocations */
    uint64_t no_growth_until;        /* a growth failed: nothing grows first until this many */
    size_t emptied[GML_REGROW_RECENT]; /* slots mapped before each of the last empty_cache
                                        calls that released memory (a ring; 0: none) */
    unsigned empties;                /* such calls so far */
    gml_pool_recorder recorder;      /* NULL: none (gml_pool_set_recorder) */
    void *recorder_arg;
    gml_pool_paths paths;            /* the slow path's steps taken (gml_pool_paths_get) */
};

static int check_locked(gml_pool *p, char *why, size_t whylen);

#ifdef GML_CHECK_EVERY_OP
/* Debug builds (-Dcheck_every_op=true): a broken invariant stops the program where it broke. */
static void debug_check(gml_pool *p)
{
    char why[256];
    if (!p->dead && check_locked(p, why, sizeof why) != GMLAKE_OK) {
        fprintf(stderr, "gmlake: pool consistency check failed: %s\n", why);
        abort();
    }
}
#else
#define debug_check(p) ((void)0)
#endif

int gml_pool_settings_check(const gml_pool_settings *s, size_t granularity, const char **why)
{
    const char *w = NULL;
    if (gml_heap_settings_check(s, granularity, &w) == GMLAKE_OK &&
        gml_stitch_settings_check(s, &w) == GMLAKE_OK && (s->defrag_level < 0 || s->defrag_level > 2))
        w = "defrag_level must be 0..2";
    if (w && why)
        *why = w;
    return w ? -1 : 0;
}

gml_pool *gml_pool_create(gml_device *dev, const gml_pool_settings *settings, const char **err)
{
    const char *why = "out of host memory";
    gml_pool *p = calloc(1, sizeof *p);
    if (!p)
        goto fail;
    p->dev = dev;
    p->set = *settings;
    if (gml_pool_settings_check(settings, gml_dev_granularity(dev), &why) != 0)
        goto fail;
    if (gml_stitch_init(&p->st, &p->heap, settings, &why) != GMLAKE_OK)
        goto fail;
    if (gml_heap_init(&p->heap, dev, settings, &why) != GMLAKE_OK)
        goto fail;
    p->set.chunk_size = p->heap.chunk;
    p->set.round = p->heap.round;
    p->last_bin = p->heap.ready;
    p->clock = gml_ticks_clock_start();
    pthread_mutex_init(&p->mu, NULL);
    gml_heap_set_lock(&p->heap, &p->mu); /* growth's driver calls run without it */
    return p;
fail:
    if (err)
        *err = why;
    free(p);
    return NULL;
}

void gml_pool_destroy(gml_pool *p)
{
    if (!p)
        return;
    if (gml_dev_synchronize(p->dev) == GMLAKE_OK)
        p->heap.synced_seq = p->heap.seq;
    gml_addrmap_free(&p->live);
    gml_stitch_destroy(&p->st);
    gml_heap_destroy(&p->heap);
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
    b = gml_bin_get(&p->heap, s);
    if (b)
        p->last_bin = b;
    return b;
}

/* Makes block b (LIVE or VIEW) a live allocation. */
static inline void hand_out(gml_pool *p, gml_block *b, uintptr_t *out)
{
    gml_addrmap_put(&p->live, b->addr, b); /* its room: gml_pool_alloc's */
    *out = b->addr;
}

/* Serves the request from the best-fitting free block of bin, if any; grown: a growth has just
 * made or extended that block, so the request is cut where the remainder stays extendable
 * (gml_take_grown). */
static inline bool fit(gml_pool *p, gml_bin *bin, int space, size_t need, size_t req,
                       uintptr_t *out, bool grown)
{
    gml_block *f = gml_best_fit(&p->heap, bin, space, need);
    if (!f)
        return false;
    gml_block *l = grown ? gml_take_grown(&p->heap, f, need, req) : gml_take(&p->heap, f, need, req);
    if (!l)
        return false;
    hand_out(p, l, out);
    return true;
}

static inline bool try_fit(gml_pool *p, gml_bin *bin, int space, size_t need, size_t req,
                           uintptr_t *out)
{
    return fit(p, bin, space, need, req, out, false);
}

/* Whether the pool regrows: the program gives its cache back again and again (empty_cache has
 * released memory twice or more), and a growth for req bytes (with the growths under way) leaves
 * the pool below its mark by at least 1/GML_REGROW_MARGIN of the mark.  The mark is the second
 * largest of what the pool held before each of the last GML_REGROW_RECENT releases: a level the
 * program reached twice (steps of different sizes between the releases: the largest that
 * recurs; a one-off peak, counted once, never sets it).  Such a growth takes back
 * memory the program held a step ago, so it makes no new peak, where a stitch would map the same
 * bytes a second time, to be torn down with the next release: a program calling
 * torch.cuda.empty_cache() every step stitched ~44 times a step (an 8-layer transformer on an
 * H200; with this rule 11 a step, half the driver time, +0.2% peak: docs/BENCHMARKS.md "Growing
 * before stitching while a pool regrows").  The margin keeps the last growths of a step, near the
 * mark, stitching the free memory the step has left instead of raising the mark.  One release
 * is not enough: after a one-off peak (cuDNN's benchmark probes, an evaluation pass) and one
 * empty_cache, the pool stitches as always, and its stitches stay cached for the rest of the run.
 * (Peaks repeated over several releases, probes at each of a few new shapes, count until
 * GML_REGROW_RECENT releases have passed.) */
#define GML_REGROW_MARGIN 16
static bool regrowing(const gml_pool *p, size_t req)
{
    if (p->empties < 2)
        return false;
    const gml_heap *h = &p->heap;
    size_t k = (req + h->chunk - 1) >> h->chunk_shift, top = 0, mark = 0;
    for (int i = 0; i < GML_REGROW_RECENT; i++) {
        size_t v = p->emptied[i];
        if (v > top)
            mark = top, top = v;
        else if (v > mark)
            mark = v;
    }
    return h->mapped_slots + h->growing_slots + k + mark / GML_REGROW_MARGIN <= mark;
}

/* Whether a large miss of req bytes grows the pool before it is stitched: while it regrows
 * (above), below frag_limit, or below churn_limit while stitching churns.  Stitching churns when
 * new stitched blocks tear cached ones down or use them up (a patch, stitch.h): each then serves about one request for a map and an unmap, where one growth
 * would have served the pattern from then on.  A training loop's stitches are cached and reused,
 * and tear nothing down.  Never for GML_CHURN_WINDOW allocations after such a growth failed: the
 * device is full (or gmlake's memory_limit reached), and asking it again at every miss would
 * cost a failing driver call each. */
static inline bool grow_first(const gml_pool *p, size_t req, bool *regrow)
{
    *regrow = false;
    if (p->allocations < p->no_growth_until)
        return false;
    return (*regrow = regrowing(p, req)) || req < p->set.frag_limit ||
           (p->allocations < p->churn_until && req < p->set.churn_limit);
}

/* Stitches a large miss (a cached stitched block first; growth only by the deficit). */
static int stitch(gml_pool *p, gml_bin *bin, size_t need, size_t req, uintptr_t *out)
{
    gml_block *b = NULL;
    int rc = gml_stitch_alloc(&p->st, bin, need, req, true, &b);
    if (rc == GMLAKE_OK)
        hand_out(p, b, out);
    if (p->st.churns != p->seen_churns) {
        p->seen_churns = p->st.churns;
        p->churn_until = p->allocations + GML_CHURN_WINDOW;
    }
    return rc;
}

/* Serves a large miss from a cached stitched block, with no device call. */
static bool cached(gml_pool *p, gml_bin *bin, size_t need, size_t req, uintptr_t *out)
{
    gml_block *b = NULL;
    if (gml_stitch_cache_take(&p->st, bin, need, req, &b) != GMLAKE_OK)
        return false;
    hand_out(p, b, out);
    return true;
}

__attribute__((noinline)) static int alloc_slow(gml_pool *p, gml_bin *bin, int space, size_t need,
                                                size_t req, uintptr_t *out)
{
    gml_heap *h = &p->heap;
    int rc;
    gml_pool_paths *n = &p->paths;
    if (gml_promote(h, bin, space, need) && ++n->promotions && try_fit(p, bin, space, need, req, out))
        return GMLAKE_OK;
    if (gml_borrow(h, bin, space, need) && ++n->borrows && try_fit(p, bin, space, need, req, out))
        return GMLAKE_OK;
    if (gml_join_for(h, bin, space, need) && ++n->joins && try_fit(p, bin, space, need, req, out))
        return GMLAKE_OK;
    if (space == GML_SPACE_SMALL) {
        rc = gml_small_refill(h, bin);
        if (rc == GMLAKE_OK && try_fit(p, bin, space, need, req, out) && ++n->small_refills)
            return GMLAKE_OK;
    } else {
        if (gml_small_reclaim(h) && ++n->small_reclaims && try_fit(p, bin, space, need, req, out))
            return GMLAKE_OK;
        /* level 0 stitches first, unless the request should grow the pool first: then only a
         * cached stitched block serves it before growth (no device call), and it is stitched
         * once growth failed (the alternative is the last resort's synchronisation and
         * teardown, or the program's out-of-memory error) */
        int level = p->set.defrag_level;
        bool regrow = false, first = level == 0 && grow_first(p, req, &regrow);
        bool after_growth = level == 1 || first;
        n->regrowths += regrow;
        if (first && cached(p, bin, need, req, out))
            return GMLAKE_OK;
        if (level == 0 && !first && stitch(p, bin, need, req, out) == GMLAKE_OK)
            return GMLAKE_OK;
        rc = gml_grow(h, bin, space, GML_GROW_BLOCK, need);
        if (rc == GMLAKE_OK && fit(p, bin, space, need, req, out, true))
            return GMLAKE_OK;
        if (rc != GMLAKE_OK && first)
            p->no_growth_until = p->allocations + GML_CHURN_WINDOW;
        if (after_growth && stitch(p, bin, need, req, out) == GMLAKE_OK)
            return GMLAKE_OK;
    }
    return GMLAKE_ERR_NOMEM;
}

/* Whether no last resort can serve `need`: everything it frees is the pool's free memory
 * (reserved less active, which only overstates it) and the device's, within the pool's limit.
 * Such a request fails at once, its cache kept and no synchronisation made: cuDNN's benchmark
 * mode probes with about the device's free memory at every new convolution. */
static bool beyond_reach(gml_pool *p, size_t need)
{
    size_t free_b = 0, total = 0;
    uint64_t spare = p->heap.reserved > p->active ? p->heap.reserved - p->active : 0;
    if (p->active > p->heap.limit || need > p->heap.limit - p->active)
        return true;
    return gml_dev_mem_info(p->dev, &free_b, &total) == GMLAKE_OK && need > free_b + spare;
}

/* Step 3, after the device was synchronised if stream bins held free blocks. */
__attribute__((noinline)) static int alloc_last_resort(gml_pool *p, gml_bin *bin, int space,
                                                       size_t need, size_t req, uintptr_t *out)
{
    gml_heap *h = &p->heap;
    int rc;
    /* out of memory: take what the synchronisation freed, drop cached stitches and free chunks */
    gml_promote(h, NULL, 0, 0);
    if (try_fit(p, bin, space, need, req, out))
        return GMLAKE_OK;
    gml_stitch_gc(&p->st, true);
    if (gml_release_free_chunks(h))
        p->cache_releases++;
    rc = space == GML_SPACE_SMALL ? gml_small_refill(h, bin)
                                  : gml_grow(h, bin, space, GML_GROW_BLOCK, need);
    if (rc == GMLAKE_OK && try_fit(p, bin, space, need, req, out))
        return GMLAKE_OK;
    if (space == GML_SPACE_LARGE && stitch(p, bin, need, req, out) == GMLAKE_OK)
        return GMLAKE_OK;
    return rc == GMLAKE_ERR_DEVICE ? rc : GMLAKE_ERR_NOMEM;
}

static inline void add_active(gml_pool *p, long long delta)
{
    p->active += (uint64_t)delta;
    if (p->active > p->peak_active)
        p->peak_active = p->active;
}

int gml_pool_alloc(gml_pool *p, size_t size, gml_stream stream, uintptr_t *out)
{
    if (size == 0 || size > ((size_t)1 << 62))
        return GMLAKE_ERR_INVALID;
    int space = size < p->heap.small_limit ? GML_SPACE_SMALL : GML_SPACE_LARGE;
    size_t need = GML_ROUND_UP(size, p->heap.round);
    int rc = GMLAKE_OK;
    uint64_t t0 = gml_dev_ticks();
    pthread_mutex_lock(&p->mu);
    /* room in the live map for this allocation and every other one under way (each may drop
     * the lock to grow): hand_out never allocates, so it never fails */
    p->inflight++;
    gml_bin *bin = !p->dead && gml_addrmap_reserve(&p->live, p->inflight) ? bin_for(p, stream) : NULL;
    if (__builtin_expect(!bin, 0))
        rc = p->dead ? GMLAKE_ERR_DEVICE : GMLAKE_ERR_NOMEM;
    else if (__builtin_expect(bin->want_record, 0))
        gml_bin_record(&p->heap, bin);
    if (bin && !try_fit(p, bin, space, need, size, out)) {
        gml_bin_hold(bin); /* growth drops the lock: the bin stays even if its stream retires */
        rc = alloc_slow(p, bin, space, need, size, out);
        if (rc != GMLAKE_OK && !beyond_reach(p, need)) {
            p->paths.last_resorts++;
            if (gml_bins_hold_blocks(&p->heap)) {
                p->paths.last_resort_syncs++;
                pthread_mutex_unlock(&p->mu);
                gml_pool_sync(p);
                pthread_mutex_lock(&p->mu);
            }
            rc = alloc_last_resort(p, bin, space, need, size, out);
        }
        gml_bin_unhold(&p->heap, bin);
    }
    if (rc == GMLAKE_OK) {
        p->allocations++;
        p->nlive++;
        add_active(p, (long long)size);
    } else {
        p->failed++;
    }
    p->inflight--;
    debug_check(p);
    p->alloc_ticks += gml_dev_ticks_since(t0);
    if (__builtin_expect(p->recorder != NULL, 0) && rc == GMLAKE_OK) /* not pool time */
        p->recorder(p->recorder_arg, 'A', *out, size, stream);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int gml_pool_free(gml_pool *p, uintptr_t ptr, gml_stream stream)
{
    uint64_t t0 = gml_dev_ticks();
    pthread_mutex_lock(&p->mu);
    gml_block *b = gml_addrmap_del(&p->live, ptr);
    gml_bin *bin = b ? bin_for(p, stream) : NULL;
    if (!bin) {
        if (b) /* no bin for the stream: the block stays live (its slot was just freed) */
            gml_addrmap_put(&p->live, ptr, b);
        pthread_mutex_unlock(&p->mu);
        return GMLAKE_ERR_INVALID;
    }
    p->frees++;
    p->nlive--;
    add_active(p, -(long long)b->req);
    if (b->state == GML_B_VIEW)
        gml_stitch_free(&p->st, b, bin);
    else
        gml_free_insert(&p->heap, b, bin);
    if (__builtin_expect(bin->want_record, 0))
        gml_bin_record(&p->heap, bin);
    debug_check(p);
    p->free_ticks += gml_dev_ticks_since(t0);
    if (__builtin_expect(p->recorder != NULL, 0)) /* not pool time */
        p->recorder(p->recorder_arg, 'F', ptr, 0, stream);
    pthread_mutex_unlock(&p->mu);
    return GMLAKE_OK;
}

void gml_pool_set_recorder(gml_pool *p, gml_pool_recorder fn, void *arg)
{
    p->recorder = fn;
    p->recorder_arg = arg;
}

size_t gml_pool_alloc_size(gml_pool *p, uintptr_t ptr)
{
    pthread_mutex_lock(&p->mu);
    gml_block *b = gml_addrmap_get(&p->live, ptr);
    size_t n = b ? b->req : 0;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* With the lock held: the live allocation holding ptr (a LIVE home block, or a live stitched
 * block's VIEW record), NULL if none; *sb_out the stitched block, or NULL. */
static gml_block *live_holding(gml_pool *p, uintptr_t ptr, gml_sblock **sb_out)
{
    gml_heap *h = &p->heap;
    *sb_out = NULL;
    if (gml_in_arena(h, ptr)) {
        size_t s = gml_slot_of(h, ptr);
        if (s >= h->nslots || (h->slots[s].state != GML_SLOT_LARGE && h->slots[s].state != GML_SLOT_SMALL))
            return NULL;
        gml_block *b = gml_block_at(h, ptr);
        return b && b->state == GML_B_LIVE && ptr < b->addr + b->size ? b : NULL;
    }
    gml_sblock *sb;
    TAILQ_FOREACH(sb, &p->st.lru, lru)
        if (sb->live && ptr >= sb->b.addr && ptr < sb->b.addr + sb->b.size) {
            *sb_out = sb;
            return &sb->b;
        }
    return NULL;
}

int gml_pool_find(gml_pool *p, uintptr_t ptr, uintptr_t *base, size_t *size)
{
    gml_sblock *sb;
    pthread_mutex_lock(&p->mu);
    gml_block *b = live_holding(p, ptr, &sb);
    if (b) {
        *base = b->addr;
        *size = b->req;
    }
    pthread_mutex_unlock(&p->mu);
    return b ? GMLAKE_OK : GMLAKE_ERR_INVALID;
}

void gml_share_clear(gml_share *s)
{
    for (size_t i = 0; s->fd && i < s->n; i++)
        if (s->fd[i] >= 0)
            close(s->fd[i]);
    free(s->fd);
    free(s->bytes);
    memset(s, 0, sizeof *s);
}

/* With the lock held: appends the extent whose head slot is `slot` to *out and exports it. */
static int share_extent(gml_pool *p, size_t slot, gml_share *out)
{
    gml_heap *h = &p->heap;
    size_t head = gml_extent_head(h, slot);
    out->bytes[out->n] = gml_extent_len(h, head) << h->chunk_shift;
    out->fd[out->n] = -1;
    int rc = gml_dev_handle_export(p->dev, h->slots[head].handle, &out->fd[out->n]);
    out->n++;
    return rc;
}

int gml_pool_share(gml_pool *p, uintptr_t ptr, gml_share *out)
{
    memset(out, 0, sizeof *out);
    gml_heap *h = &p->heap;
    gml_sblock *sb;
    pthread_mutex_lock(&p->mu);
    gml_block *b = live_holding(p, ptr, &sb);
    int rc = b ? GMLAKE_OK : GMLAKE_ERR_INVALID;
    /* the extents behind it: a stitched block's mapped chunks (whole extents, in order), or the
     * home extents from the one holding its first byte to the one holding its last */
    size_t first = 0, max = 0;
    if (b && sb) {
        max = sb->nchunks;
    } else if (b) {
        first = gml_slot_of(h, gml_extent_lo(h, b->addr));
        max = gml_slot_of(h, b->addr + b->size - 1) + 1 - first;
    }
    if (b && (!(out->bytes = calloc(max, sizeof *out->bytes)) || !(out->fd = calloc(max, sizeof *out->fd))))
        rc = GMLAKE_ERR_NOMEM;
    if (rc == GMLAKE_OK) {
        out->base = b->addr;
        out->size = b->req;
        if (sb) {
            out->head = sb->head_off;
            for (size_t i = 0; i < sb->nchunks && rc == GMLAKE_OK; i += gml_extent_len(h, sb->slots[i]))
                rc = share_extent(p, sb->slots[i], out);
        } else {
            out->head = b->addr - gml_slot_addr(h, first);
            for (size_t s = first; s < first + max && rc == GMLAKE_OK; s += gml_extent_len(h, s))
                rc = share_extent(p, s, out);
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (rc != GMLAKE_OK)
        gml_share_clear(out);
    return rc;
}

bool gml_pool_owns(gml_pool *p, uintptr_t ptr)
{
    pthread_mutex_lock(&p->mu);
    bool own = gml_in_arena(&p->heap, ptr) || gml_stitch_owns(&p->st, ptr);
    pthread_mutex_unlock(&p->mu);
    return own;
}

int gml_pool_sync(gml_pool *p)
{
    pthread_mutex_lock(&p->mu);
    uint64_t upto = p->heap.seq;
    pthread_mutex_unlock(&p->mu);
    int rc = gml_dev_synchronize(p->dev);
    if (rc != GMLAKE_OK)
        return rc;
    pthread_mutex_lock(&p->mu);
    if (upto > p->heap.synced_seq)
        p->heap.synced_seq = upto;
    pthread_mutex_unlock(&p->mu);
    return GMLAKE_OK;
}

void gml_pool_stream_retire(gml_pool *p, gml_stream stream)
{
    pthread_mutex_lock(&p->mu);
    gml_bin *b = p->dead ? NULL : gml_bin_find(&p->heap, stream);
    if (b) {
        if (p->last_bin == b)
            p->last_bin = p->heap.ready;
        gml_bin_retire(&p->heap, b);
    }
    debug_check(p);
    pthread_mutex_unlock(&p->mu);
}

void gml_pool_context_ends(gml_pool *p, uintptr_t ctx, bool synced)
{
    pthread_mutex_lock(&p->mu);
    if (!p->dead) {
        gml_bins_context_ends(&p->heap, ctx, synced);
        p->last_bin = p->heap.ready; /* it may have been retired, and freed */
    }
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

int gml_pool_reset(gml_pool *p)
{
    int synced = gml_dev_synchronize(p->dev);
    pthread_mutex_lock(&p->mu);
    if (synced == GMLAKE_OK)
        p->heap.synced_seq = p->heap.seq; /* every block has passed: the cache can go */
    int rc = GMLAKE_OK;
    if (!p->dead) {
        const char *why;
        for (size_t i = 0; p->recorder && i < p->live.cap; i++)
            if (p->live.slot[i].key) /* destroyed: freed once the device was done with it */
                p->recorder(p->recorder_arg, 'F', p->live.slot[i].key, 0, GML_STREAM_NONE);
        gml_addrmap_free(&p->live);
        gml_stitch kept = p->st;
        gml_stitch_destroy(&p->st);
        rc = gml_heap_reset(&p->heap);
        gml_stitch_init(&p->st, &p->heap, &p->set, &why); /* its settings passed at creation */
        /* the counters go on: every stitched range torn down, every allocation ended */
        p->st.stitches = kept.stitches;
        p->st.reuses = kept.reuses;
        p->st.patches = kept.patches;
        p->st.evictions = kept.evictions + kept.count;
        p->frees += p->nlive;
        p->active = p->nlive = 0;
        p->seen_churns = p->churn_until = p->no_growth_until = 0;
        memset(p->emptied, 0, sizeof p->emptied);
        p->empties = 0;
        p->last_bin = p->heap.ready;
        p->dead = rc != GMLAKE_OK;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void gml_pool_trim(gml_pool *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->dead) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    gml_promote(&p->heap, NULL, 0, 0);
    gml_stitch_gc(&p->st, true);
    size_t held = p->heap.mapped_slots;
    if (gml_release_free_chunks(&p->heap)) {
        p->cache_releases++;
        p->emptied[p->empties++ % GML_REGROW_RECENT] = held;
    }
    pthread_mutex_unlock(&p->mu);
}

int gml_pool_empty_cache(gml_pool *p)
{
    int rc = gml_pool_sync(p);
    gml_pool_trim(p);
    return rc;
}

/* The counters of *o (everything but the free-memory figures); p->mu held. */
static void fill_counters(gml_pool *p, gmlake_stats *o)
{
    memset(o, 0, sizeof *o);
    o->active_bytes = p->active;
    o->peak_active_bytes = p->peak_active;
    o->reserved_bytes = p->heap.reserved;
    o->peak_reserved_bytes = p->heap.peak_reserved;
    o->allocations = p->allocations;
    o->frees = p->frees;
    o->live_allocations = p->nlive;
    o->failed_allocations = p->failed;
    o->stitches = p->st.stitches;
    o->stitch_reuses = p->st.reuses;
    o->stitch_evictions = p->st.evictions;
    o->stitched_blocks = p->st.count;
    o->stitched_bytes = p->st.bytes;
    o->cache_releases = p->cache_releases;
    o->chunk_size = p->heap.chunk;
    o->utilization = o->peak_reserved_bytes
                         ? (double)o->peak_active_bytes / (double)o->peak_reserved_bytes
                         : 0.0;
    for (int i = 0; i < GMLAKE_DC_COUNT; i++) {
        o->device_calls[i] = atomic_load_explicit(&p->dev->calls[i], memory_order_relaxed);
        o->device_seconds_by_call[i] = gml_dev_seconds(p->dev, i);
        o->device_seconds += o->device_seconds_by_call[i];
    }
}

void gml_pool_counters(gml_pool *p, gmlake_stats *o)
{
    pthread_mutex_lock(&p->mu);
    fill_counters(p, o);
    pthread_mutex_unlock(&p->mu);
}

void gml_pool_stats(gml_pool *p, gmlake_stats *o)
{
    gml_heap_free hf;
    pthread_mutex_lock(&p->mu);
    fill_counters(p, o);
    gml_heap_free_stats(&p->heap, &hf);
    size_t cached = gml_stitch_largest_available(&p->st), ends = gml_stitch_end_bytes(&p->st);
    pthread_mutex_unlock(&p->mu);
    o->free_bytes = hf.free_bytes;
    o->largest_free_bytes = hf.largest_free_bytes > cached ? hf.largest_free_bytes : cached;
    o->stitchable_bytes = hf.whole_extent_bytes + ends;
}

void gml_pool_paths_get(gml_pool *p, gml_pool_paths *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->paths;
    out->borrow_alls = p->st.borrow_alls;
    out->patches = p->st.patches;
    pthread_mutex_unlock(&p->mu);
}

void gml_pool_host_seconds(gml_pool *p, double *alloc_s, double *free_s)
{
    pthread_mutex_lock(&p->mu);
    uint64_t a = p->alloc_ticks, f = p->free_ticks;
    pthread_mutex_unlock(&p->mu);
    *alloc_s = gml_ticks_seconds(&p->clock, a);
    *free_s = gml_ticks_seconds(&p->clock, f);
}

void gml_pool_reset_peaks(gml_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->peak_active = p->active;
    p->heap.peak_reserved = p->heap.reserved;
    pthread_mutex_unlock(&p->mu);
}

/* The pool's own records (the live map and its counters), then the heap's and stitching's
 * checkers, given what each needs from the others. */
static int check_locked(gml_pool *p, char *why, size_t whylen)
{
    int rc = GMLAKE_OK;
    gml_block_vec used = {0};
    uint64_t active = 0, nlive = 0;
    size_t views = 0;
    for (size_t i = 0; i < p->live.cap; i++) {
        gml_block *b = p->live.slot[i].val;
        if (!p->live.slot[i].key)
            continue;
        if (!b || b->addr != p->live.slot[i].key || gml_addrmap_get(&p->live, b->addr) != b) {
            snprintf(why, whylen, "live map entry %#lx: %s", (unsigned long)p->live.slot[i].key,
                     !b ? "no record"
                        : b->addr != p->live.slot[i].key ? "its record has another address"
                                                         : "not found from its home slot");
            rc = GMLAKE_ERR_CORRUPT;
            goto out;
        }
        nlive++;
        active += b->req;
        if (b->state == GML_B_VIEW) {
            views++;
            if (!gml_stitch_owns(&p->st, b->addr)) {
                snprintf(why, whylen, "live view %#lx is no stitched block", (unsigned long)b->addr);
                rc = GMLAKE_ERR_CORRUPT;
                goto out;
            }
            continue;
        }
        if (b->state != GML_B_LIVE || b->req == 0 || b->size != GML_ROUND_UP(b->req, p->heap.round)) {
            snprintf(why, whylen, "block %#lx in the live map: state %d, size %zu for a request of %zu",
                     (unsigned long)b->addr, b->state, b->size, b->req);
            rc = GMLAKE_ERR_CORRUPT;
            goto out;
        }
        if (!gml_vec_push(&used, b))
            goto oom;
    }
    if (nlive != p->nlive || nlive != p->live.n || active != p->active ||
        p->allocations != p->frees + p->nlive) {
        snprintf(why, whylen, "counters say %lu live / %lu active bytes (%lu allocations, %lu "
                 "frees), records say %lu / %lu", (unsigned long)p->nlive, (unsigned long)p->active,
                 (unsigned long)p->allocations, (unsigned long)p->frees, (unsigned long)nlive,
                 (unsigned long)active);
        rc = GMLAKE_ERR_CORRUPT;
        goto out;
    }
    if (p->peak_active < p->active) {
        snprintf(why, whylen, "peak active is below active");
        rc = GMLAKE_ERR_CORRUPT;
        goto out;
    }
    if (!gml_stitch_parts(&p->st, &used))
        goto oom;
    rc = gml_heap_check(&p->heap, used.v, used.n, why, whylen);
    if (rc == GMLAKE_OK)
        rc = gml_stitch_check(&p->st, views, why, whylen);
out:
    gml_vec_free(&used);
    return rc;
oom:
    snprintf(why, whylen, "out of host memory in the checker");
    rc = GMLAKE_ERR_CORRUPT;
    goto out;
}

int gml_pool_check(gml_pool *p, char *why, size_t whylen)
{
    pthread_mutex_lock(&p->mu);
    int rc = p->dead ? GMLAKE_OK : check_locked(p, why, whylen); /* a dead pool holds nothing */
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void gml_pool_arena(const gml_pool *p, uintptr_t *lo, uintptr_t *hi)
{
    *lo = p->heap.arena;
    *hi = p->heap.arena + p->heap.arena_size;
}

gml_device *gml_pool_device(gml_pool *p) { return p->dev; }
const gml_pool_settings *gml_pool_settings_of(gml_pool *p) { return &p->set; }
