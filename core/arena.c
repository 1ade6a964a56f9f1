/*
 * arena.c — where chunks live: the heap's arena and slots, growth, release, and moving fully free
 * chunks between the large and the small space (tier 1, contract in heap.h).
 *
 * Growth (gml_grow; plan_growth owns the amount, extent_unit the unit): the amount is counted in chunks
 * and made of extents of `unit` chunks, the last one what is left (one handle, one create and one
 * map each; one set_access over the run), because the driver charges per handle.  The unit
 * (extent_unit) is the most memory reserved at once so far (or the growth, where it is larger)
 * divided by extent_share, at least one chunk and at most extent_chunks: a stitch maps whole extents only, so the free part of an extent that a live
 * block shares is stranded for stitching (up to one extent at each end of a live block); an
 * extent in proportion to the pool bounds what is stranded to a share of the pool, while a
 * large pool still grows in few handles (docs/ARCHITECTURE.md, "Extents", has the measurements).
 * A small request gets one one-chunk extent.  A large request gets only the chunks it lacks: when a free block that
 * its stream may use ends where empty slots begin, the fewest chunks that make it large enough are
 * mapped right after it so that the two merge (expandable-segments style); otherwise
 * ceil(need / chunk) chunks go at the lowest empty slots.  A stitch (GML_GROW_CHUNKS) gets the
 * deficit: need minus the whole free extents of the runs of free blocks its stream may use
 * (gml_run_head: what a stitch maps), after the last block of the first such run that has room
 * (which may be a ready block: a stitch maps runs over both bins alike).  New chunks go to the bin of the block they extend, or to the asking stream's bin: they
 * have no GPU history, but giving them to the ready bin would put them beside that stream's own
 * later frees, which never merge with ready blocks (blocks.c), splitting the stream's memory.
 * A growth of GML_GROW_CHECK chunks or more that the device has no free memory for fails at
 * once, with no driver call but the query (device_lacks).
 * Release returns whole extents of the ready bin's free blocks only (memory every stream may use;
 * the caller promotes or waits first), never one with a pinned chunk.
 * Growth's driver calls run without the caller's lock (gml_heap_set_lock): grow_run reserves the
 * run's slots (GML_SLOT_GROWING) under it, grow_calls runs unlocked, and the run is published or
 * undone once the lock is back (docs/ARCHITECTURE.md, "Locking").
 */
#include <stdlib.h>
#include <string.h>

#include "heap.h"

/* The chunk size settings s give on a device of granularity g (0: not known, taken as given). */
static size_t chunk_of(const gml_pool_settings *s, size_t g)
{
    size_t chunk = s->chunk_size ? s->chunk_size : ((size_t)2 << 20);
    return g ? GML_ROUND_UP(chunk, g) : chunk;
}

int gml_heap_settings_check(const gml_pool_settings *s, size_t granularity, const char **why)
{
    size_t chunk = chunk_of(s, granularity), round = s->round ? s->round : 512;
    const char *w = NULL;
    if (chunk & (chunk - 1))
        w = "chunk_size must be a power of two";
    else if (round < 512 || (round & (round - 1)) || round > chunk)
        w = "round must be a power of two between 512 and the chunk size";
    else if (s->small_limit > chunk)
        w = "small_limit must not exceed chunk_size";
    if (w)
        *why = w;
    return w ? GMLAKE_ERR_INVALID : GMLAKE_OK;
}

/* The heap's fields from the settings and the device, everything else zero: what gml_heap_init
 * and gml_heap_reset share (the arena and the slot table are theirs). */
static int setup(gml_heap *h, gml_device *dev, const gml_pool_settings *s, const char **why)
{
    memset(h, 0, sizeof *h);
    h->dev = dev;
    pthread_cond_init(&h->grown, NULL);
    size_t g = gml_dev_granularity(dev);
    size_t free_b = 0, total = 0;
    if (g == 0 || (g & (g - 1)) || gml_dev_mem_info(dev, &free_b, &total) != GMLAKE_OK) {
        *why = "the device reports no usable granularity or memory size";
        return GMLAKE_ERR_INVALID;
    }
    if (gml_heap_settings_check(s, g, why) != GMLAKE_OK)
        return GMLAKE_ERR_INVALID;
    size_t chunk = chunk_of(s, g), round = s->round ? s->round : 512;
    h->chunk = chunk;
    h->chunk_shift = (unsigned)__builtin_ctzll(chunk);
    h->round = round;
    h->small_limit = s->small_limit;
    h->extent_chunks = s->extent_size / chunk ? s->extent_size / chunk : 1;
    h->extent_share = s->extent_share;
    h->stream_wait = s->stream_wait;
    h->limit = s->limit_bytes ? s->limit_bytes : total;
    h->arena_size = GML_ROUND_UP(s->arena_bytes ? s->arena_bytes : 4 * total, chunk);
    h->nslots = h->arena_size >> h->chunk_shift;
    return GMLAKE_OK;
}

/* The bins' side of a heap whose arena is reserved: the ready bin. */
static int open_bins(gml_heap *h, const char **why)
{
    LIST_INIT(&h->holding);
    h->ready = gml_bin_get(h, GML_STREAM_NONE);
    if (!h->ready) {
        *why = "out of host memory";
        return GMLAKE_ERR_NOMEM;
    }
    return GMLAKE_OK;
}

int gml_heap_init(gml_heap *h, gml_device *dev, const gml_pool_settings *s, const char **why)
{
    int rc = setup(h, dev, s, why);
    if (rc != GMLAKE_OK)
        return rc;
    h->slots = calloc(h->nslots, sizeof *h->slots);
    if (!h->slots) {
        *why = "out of host memory for the slot table";
        return GMLAKE_ERR_NOMEM;
    }
    if (gml_dev_va_reserve(dev, h->arena_size, h->chunk, &h->arena) != GMLAKE_OK) {
        *why = "could not reserve the virtual address range for the arena";
        h->arena = 0;
        gml_heap_destroy(h);
        return GMLAKE_ERR_DEVICE;
    }
    if ((rc = open_bins(h, why)) != GMLAKE_OK)
        gml_heap_destroy(h);
    return rc;
}

/* Unmaps and releases every extent, free or not. */
static void release_all(gml_heap *h)
{
    for (size_t i = 0; h->slots && i < h->nslots; i++) {
        if (h->slots[i].state == GML_SLOT_EMPTY || h->slots[i].state == GML_SLOT_GROWING ||
            h->slots[i].head != i)
            continue;
        gml_dev_unmap(h->dev, gml_slot_addr(h, i), (size_t)h->slots[i].len << h->chunk_shift);
        gml_dev_chunk_release(h->dev, h->slots[i].handle);
    }
}

/* Frees the records and the bins (their events destroyed). */
static void drop_books(gml_heap *h)
{
    gml_bins_destroy(h);
    for (size_t i = 0; i < h->slabs.n; i++)
        free(h->slabs.v[i]);
    gml_vec_free(&h->slabs);
}

void gml_heap_destroy(gml_heap *h)
{
    release_all(h);
    if (h->arena)
        gml_dev_va_free(h->dev, h->arena, h->arena_size);
    drop_books(h);
    free(h->slots);
    h->slots = NULL;
    h->arena = 0;
    pthread_cond_destroy(&h->grown);
}

int gml_heap_reset(gml_heap *h)
{
    release_all(h);
    drop_books(h);
    /* no device call from here on (the context may have faulted): what gml_heap_init set from
     * the settings and the device stays, with the arena and the slot table; the rest starts
     * again from zero */
    gml_heap keep = *h;
    pthread_cond_destroy(&h->grown);
    memset(h, 0, sizeof *h);
    pthread_cond_init(&h->grown, NULL);
    h->dev = keep.dev;
    h->chunk = keep.chunk;
    h->chunk_shift = keep.chunk_shift;
    h->small_limit = keep.small_limit;
    h->round = keep.round;
    h->limit = keep.limit;
    h->extent_chunks = keep.extent_chunks;
    h->extent_share = keep.extent_share;
    h->stream_wait = keep.stream_wait;
    h->arena = keep.arena;
    h->arena_size = keep.arena_size;
    h->nslots = keep.nslots;
    h->slots = keep.slots;
    h->mu = keep.mu;
    h->peak_reserved = keep.peak_reserved;
    memset(h->slots, 0, h->nslots * sizeof *h->slots);
    const char *why;
    return open_bins(h, &why);
}

void gml_heap_set_lock(gml_heap *h, pthread_mutex_t *mu)
{
    h->mu = mu;
}

static bool run_empty(const gml_heap *h, size_t s, size_t k)
{
    if (s + k > h->nslots)
        return false;
    for (size_t i = s; i < s + k; i++)
        if (h->slots[i].state != GML_SLOT_EMPTY)
            return false;
    return true;
}

/* Lowest run of k empty slots; nslots when there is none. */
static size_t find_run(gml_heap *h, size_t k)
{
    while (h->slot_hint < h->nslots && h->slots[h->slot_hint].state != GML_SLOT_EMPTY)
        h->slot_hint++;
    for (size_t i = h->slot_hint; i + k <= h->nslots;) {
        size_t run = 0;
        while (run < k && h->slots[i + run].state == GML_SLOT_EMPTY)
            run++;
        if (run == k)
            return i;
        i += run + 1;
    }
    return h->nslots;
}

/* Unmaps and releases the whole extents on slots [s, s+k) (their records are the caller's
 * business). */
static int unmap_release(gml_heap *h, size_t s, size_t k)
{
    int rc = GMLAKE_OK;
    for (size_t i = s; i < s + k;) {
        size_t len = h->slots[i].len;
        int r1 = gml_dev_unmap(h->dev, gml_slot_addr(h, i), len << h->chunk_shift);
        int r2 = gml_dev_chunk_release(h->dev, h->slots[i].handle);
        if (r1 || r2)
            rc = GMLAKE_ERR_DEVICE;
        for (size_t j = i; j < i + len; j++)
            h->slots[j] = (gml_slot){0};
        if (i < h->slot_hint)
            h->slot_hint = i;
        i += len;
    }
    return rc;
}

/* Links a run's record to the large blocks on either side of it. */
static void link_neighbours(gml_heap *h, gml_block *b)
{
    size_t s = gml_slot_of(h, b->addr), e = gml_slot_of(h, b->addr + b->size);
    if (s > 0 && h->slots[s - 1].state == GML_SLOT_LARGE) {
        gml_block *l = h->slots[s - 1].owner;
        l->next = b;
        b->prev = l;
    }
    if (e < h->nslots && h->slots[e].state == GML_SLOT_LARGE) {
        gml_block *r = gml_block_at(h, gml_slot_addr(h, e));
        r->prev = b;
        b->next = r;
    }
}

/* The driver calls of a growth of k chunks at slot s, in extents of `unit` chunks (one create and
 * one map each, one set_access over the run), their handles to hs.  Touches no heap state but
 * the read-only fields, so it runs without the lock on slots reserved GROWING; on failure nothing
 * stays created or mapped. */
static int grow_calls(const gml_heap *h, size_t s, size_t k, size_t unit, gml_handle *hs)
{
    size_t done = 0, n = 0;
    int rc = GMLAKE_OK;
    while (done < k) { /* extents of unit chunks, the last one what is left */
        size_t len = k - done < unit ? k - done : unit;
        rc = gml_dev_chunk_create(h->dev, len << h->chunk_shift, &hs[n]);
        if (rc)
            break;
        rc = gml_dev_map(h->dev, gml_slot_addr(h, s + done), len << h->chunk_shift, hs[n]);
        if (rc) {
            gml_dev_chunk_release(h->dev, hs[n]);
            break;
        }
        done += len;
        n++;
    }
    if (rc == GMLAKE_OK)
        rc = gml_dev_set_access(h->dev, gml_slot_addr(h, s), k * h->chunk);
    if (rc == GMLAKE_OK)
        return rc;
    for (size_t i = 0, at = 0; i < n; i++, at += unit) { /* every extent but the last is whole */
        size_t len = k - at < unit ? k - at : unit;
        gml_dev_unmap(h->dev, gml_slot_addr(h, s + at), len << h->chunk_shift);
        gml_dev_chunk_release(h->dev, hs[i]);
    }
    return rc == GMLAKE_ERR_NOMEM ? rc : GMLAKE_ERR_DEVICE;
}

/* Creates and maps k chunks, in extents of `unit` chunks, as one free run of `space`: right after
 * free block `extend` (in its bin), or at the lowest empty slots in `bin`.  The slots are
 * reserved (GROWING) and the lock, if named, dropped during the driver calls; the run then joins
 * the bin, merging with whatever free neighbour of that bin is there by then.  Returns the free
 * block, or NULL with *rc set (*busy: the limit left no room while other growths are in flight). */
static gml_block *grow_run(gml_heap *h, int space, size_t k, size_t unit, gml_block *extend,
                           gml_bin *bin, int *rc, bool *busy)
{
    size_t s = extend ? gml_slot_of(h, extend->addr + extend->size) : find_run(h, k);
    *rc = GMLAKE_ERR_NOMEM;
    if (s >= h->nslots || !run_empty(h, s, k))
        return NULL; /* the arena is full */
    if ((h->mapped_slots + h->growing_slots + k) * h->chunk > h->limit) {
        *busy = h->growing_slots > 0;
        return NULL;
    }
    gml_block *b = gml_rec_get(h);
    gml_handle *hs = b ? malloc(((k + unit - 1) / unit) * sizeof *hs) : NULL;
    if (!hs) {
        if (b)
            gml_rec_put(h, b);
        return NULL;
    }
    gml_bin *to = extend ? extend->bin : bin;
    for (size_t j = s; j < s + k; j++)
        h->slots[j].state = GML_SLOT_GROWING;
    h->growing_slots += k;
    gml_bin_hold(to); /* a retired bin stays while its growth is in flight */
    gml_heap_unlock(h);
    *rc = grow_calls(h, s, k, unit, hs);
    gml_heap_relock(h);
    pthread_cond_broadcast(&h->grown);
    h->growing_slots -= k;
    for (size_t j = s, n = 0; j < s + k; j += unit, n++) {
        size_t len = s + k - j < unit ? s + k - j : unit;
        h->slots[j].handle = *rc ? 0 : hs[n];
        h->slots[j].len = *rc ? 0 : (uint32_t)len;
        for (size_t i = j; i < j + len; i++) {
            h->slots[i].head = *rc ? 0 : (uint32_t)j;
            h->slots[i].state = (uint8_t)(*rc ? GML_SLOT_EMPTY
                                              : space == GML_SPACE_SMALL ? GML_SLOT_SMALL
                                                                         : GML_SLOT_LARGE);
        }
    }
    free(hs);
    if (*rc) {
        if (s < h->slot_hint)
            h->slot_hint = s;
        gml_rec_put(h, b);
        gml_bin_unhold(h, to);
        return NULL;
    }
    b->addr = gml_slot_addr(h, s);
    b->size = k * h->chunk;
    b->space = (uint8_t)space;
    b->prev = b->next = NULL;
    gml_claim(h, b, b->addr, b->size);
    if (space == GML_SPACE_LARGE)
        link_neighbours(h, b);
    gml_heap_reserved(h, (long)k);
    b = gml_free_insert(h, b, to);
    gml_bin_unhold(h, to);
    return b;
}

/* Calls the loop body on every free block of `space` that may serve bin. */
#define FOR_USABLE(h, bin, space, f)                                                              \
    GML_FOR_SERVING_BINS(h, bin, sb_)                                                             \
    for (gml_block *f = RB_MIN(gml_size_tree, &sb_->free[space]); f;                              \
         f = RB_NEXT(gml_size_tree, NULL, f))

/* Where growth goes: up to two places, tried in order (extend NULL: fresh slots). */
typedef struct growth {
    int n;
    struct growth_at {
        size_t k;
        gml_block *extend;
    } at[2];
} growth;

/* The extent unit in chunks for a growth of k chunks: the most chunks the pool has held at once
 * (the chunks mapped now, unless memory was given back since), or k where the growth is larger,
 * / extent_share, within [1, extent_chunks].  (From the pool mapped now alone, a growth beyond
 * it, a first large tensor or a workspace of half the device, was cut in one-chunk extents: tens
 * of thousands of handles, each paying set access; and a pool emptied every step by
 * torch.cuda.empty_cache() regrew every step in the small extents of a first step.)  While the
 * pool regrows below what it once held (memory was given back: empty_cache, a release under
 * pressure), the share is GML_REGROW_DIV times smaller, so extents are that much larger: such a
 * pool pays every handle's whole life again at each regrowth (create, map, set access, unmap,
 * release), and on a program that empties the cache every step (bench/gpu/empty_cache_bench.py)
 * extents four times larger halved the driver time at the same peak (docs/BENCHMARKS.md "empty_cache
 * every step").  A pool that never gave memory back, every training job's, is unchanged. */
#define GML_REGROW_DIV 4
static size_t extent_unit(const gml_heap *h, size_t k)
{
    size_t u = h->extent_chunks, base = k > h->most_slots ? k : h->most_slots;
    size_t share = h->extent_share;
    if (share && h->mapped_slots < h->most_slots)
        share = share / GML_REGROW_DIV ? share / GML_REGROW_DIV : 1;
    if (share && base / share < u)
        u = base / share;
    return u ? u : 1;
}

/* Whether the device lacks the free memory for k chunks (asked for growths of GML_GROW_CHECK
 * chunks and more): a growth it cannot hold would create extents until the driver refuses one and
 * then undo them all. */
static bool device_lacks(gml_heap *h, size_t k)
{
    size_t free_b = 0, total = 0;
    return k >= GML_GROW_CHECK && gml_dev_mem_info(h->dev, &free_b, &total) == GMLAKE_OK &&
           k * h->chunk > free_b;
}

/* The growth plan: the one place that decides the amount (see the top of the file).
 * The plan lists where to try: an extension of a free block first when one fits, then fresh
 * slots. */
static growth plan_growth(gml_heap *h, gml_bin *bin, int space, enum gml_grow_goal goal,
                          size_t need)
{
    growth g = {0};
    size_t k_need = (need + h->chunk - 1) >> h->chunk_shift;
    if (space == GML_SPACE_SMALL) {
        g.at[g.n++].k = 1;
        return g;
    }
    if (goal == GML_GROW_BLOCK) {
        gml_block *best = NULL;
        size_t best_k = k_need;
        FOR_USABLE(h, bin, GML_SPACE_LARGE, f) {
            uintptr_t end = f->addr + f->size;
            if ((end - h->arena) & (h->chunk - 1))
                continue;
            size_t k = (need - f->size + h->chunk - 1) >> h->chunk_shift; /* f->size < need */
            if (k < best_k && run_empty(h, gml_slot_of(h, end), k)) {
                best = f;
                best_k = k;
            }
        }
        if (best)
            g.at[g.n++] = (struct growth_at){best_k, best};
        g.at[g.n++].k = k_need;
        return g;
    }
    /* what a stitch can map whole: the whole extents of the runs of free blocks (stitch.c) */
    size_t have = 0;
    gml_block *next_to = NULL;
    FOR_USABLE(h, bin, GML_SPACE_LARGE, f) {
        uintptr_t lo, hi, end;
        if (!gml_run_head(h, f, bin))
            continue;
        gml_run_last(h, f, bin, &end);
        gml_range_whole_extents(h, f->addr, end, &lo, &hi);
        if (hi > lo)
            have += (hi - lo) >> h->chunk_shift;
    }
    size_t k = k_need > have ? k_need - have : 0;
    if (k == 0)
        return g;
    FOR_USABLE(h, bin, GML_SPACE_LARGE, f) {
        uintptr_t lo, hi, end;
        if (next_to || !gml_run_head(h, f, bin))
            continue;
        gml_block *last = gml_run_last(h, f, bin, &end);
        gml_range_whole_extents(h, f->addr, end, &lo, &hi);
        if (hi > lo && !((end - h->arena) & (h->chunk - 1)) && run_empty(h, gml_slot_of(h, end), k))
            next_to = last;
    }
    if (next_to)
        g.at[g.n++] = (struct growth_at){k, next_to};
    g.at[g.n++].k = k;
    return g;
}

int gml_grow(gml_heap *h, gml_bin *bin, int space, enum gml_grow_goal goal, size_t need)
{
    growth g = plan_growth(h, bin, space, goal, need);
    int rc = GMLAKE_ERR_NOMEM;
    bool busy = false;
    if (g.n && device_lacks(h, g.at[0].k < g.at[g.n - 1].k ? g.at[0].k : g.at[g.n - 1].k))
        return rc;
    for (int i = 0; i < g.n; i++) {
        /* only the first place may extend a block (a failed run may have dropped the lock) */
        if (grow_run(h, space, g.at[i].k, extent_unit(h, g.at[i].k), g.at[i].extend, bin, &rc, &busy))
            return GMLAKE_OK;
        if (rc == GMLAKE_ERR_DEVICE && goal == GML_GROW_CHUNKS)
            break;
    }
    if (busy && h->mu) {
        /* other growths hold what the limit leaves: once one ends, its memory may serve (the
         * caller looks again, and its later fallbacks may grow again) */
        pthread_cond_wait(&h->grown, h->mu);
        return GMLAKE_OK;
    }
    return rc;
}

/* Moves the chunk at address c out of free large block f into the small space. */
static void chunk_to_small(gml_heap *h, gml_block *f, uintptr_t c)
{
    gml_bin *bin = f->bin;
    gml_block *m = gml_carve(h, f, c, h->chunk);
    if (!m)
        return;
    gml_detach(m);
    m->space = GML_SPACE_SMALL;
    h->slots[gml_slot_of(h, c)].state = GML_SLOT_SMALL;
    gml_free_insert(h, m, bin);
}

int gml_small_refill(gml_heap *h, gml_bin *bin)
{
    /* the smallest free large block (own bin first among equal sizes) holding a whole chunk */
    gml_block *pick = NULL, key = {.size = h->chunk, .addr = 0};
    uintptr_t pick_c = 0;
    GML_FOR_SERVING_BINS(h, bin, sb) {
        for (gml_block *f = RB_NFIND(gml_size_tree, &sb->free[GML_SPACE_LARGE], &key);
             f && !(pick && pick->size <= f->size); f = RB_NEXT(gml_size_tree, NULL, f)) {
            uintptr_t lo, hi, end = f->addr + f->size;
            gml_whole_chunks(h, f, &lo, &hi);
            if (lo + h->chunk > hi)
                continue;
            pick = f;
            /* take an edge chunk so the rest of f stays in one piece */
            pick_c = (hi == end) ? hi - h->chunk : lo;
            break; /* ascending sizes: nothing later in this bin is smaller */
        }
    }
    if (pick) {
        chunk_to_small(h, pick, pick_c);
        return GMLAKE_OK;
    }
    return gml_grow(h, bin, GML_SPACE_SMALL, GML_GROW_BLOCK, h->chunk);
}

/* Collects the free blocks of one tree whose size is in [lo, hi] (they may be modified after). */
static void collect(struct gml_size_tree *t, size_t lo, size_t hi, void *out)
{
    GML_VEC(gml_block *) *v = out;
    v->n = 0;
    gml_block key = {.size = lo, .addr = 0};
    for (gml_block *f = RB_NFIND(gml_size_tree, t, &key); f && f->size <= hi;
         f = RB_NEXT(gml_size_tree, NULL, f))
        if (!gml_vec_push(v, f))
            break;
}

size_t gml_small_reclaim(gml_heap *h)
{
    /* heap->small_whole lists exactly the fully free small chunks (kept as blocks enter and leave
     * their bins), so this costs what it moves, whatever the number of bins */
    size_t moved = 0;
    gml_block *b;
    while ((b = LIST_FIRST(&h->small_whole))) {
        gml_bin *bin = b->bin;
        gml_free_tree_remove(b);
        b->space = GML_SPACE_LARGE;
        h->slots[gml_slot_of(h, b->addr)].state = GML_SLOT_LARGE;
        link_neighbours(h, b);
        gml_free_insert(h, b, bin);
        moved++;
    }
    return moved;
}

/* Whether a chunk of the extent holding slot s is pinned. */
static bool extent_pinned(const gml_heap *h, size_t s)
{
    size_t hd = gml_extent_head(h, s), len = gml_extent_len(h, s);
    for (size_t i = hd; i < hd + len; i++)
        if (h->slots[i].pins)
            return true;
    return false;
}

size_t gml_release_free_chunks(gml_heap *h)
{
    gml_small_reclaim(h);
    size_t released = 0;
    GML_VEC(gml_block *) v = {0};
    GML_FOR_SERVING_BINS(h, NULL, bin) { /* the bins every stream may use: the ready bin */
        collect(&bin->free[GML_SPACE_LARGE], h->chunk, SIZE_MAX, &v);
        for (size_t i = 0; i < v.n; i++) {
            gml_block *f = v.v[i];
            uintptr_t lo, hi;
            gml_whole_extents(h, f, &lo, &hi);
            /* release maximal runs of unpinned extents, from the top down so that f (which keeps
             * the head of the range) stays valid */
            while (hi > lo) {
                uintptr_t e = hi;
                while (e > lo && extent_pinned(h, gml_slot_of(h, e - h->chunk)))
                    e = gml_extent_lo(h, e - 1);
                uintptr_t s = e;
                while (s > lo && !extent_pinned(h, gml_slot_of(h, s - h->chunk)))
                    s = gml_extent_lo(h, s - 1);
                if (e == s)
                    break;
                gml_block *m = gml_carve(h, f, s, e - s);
                if (!m)
                    break;
                gml_detach(m);
                size_t k = (e - s) >> h->chunk_shift;
                unmap_release(h, gml_slot_of(h, s), k);
                gml_rec_put(h, m);
                gml_heap_reserved(h, -(long)k);
                released += k;
                hi = s;
            }
        }
    }
    gml_vec_free(&v);
    return released;
}
