/*
 * arena.c — where chunks live: the home arena's slots, growth, release, and moving fully free
 * chunks between the large and the small space.
 *
 * Growth creates only the chunks a request lacks: when a usable free block ends where empty slots
 * begin, the new chunks are mapped right after it so that the two merge (expandable-segments
 * style); otherwise a fresh run goes at the lowest empty slots.  New chunks have no GPU history,
 * so a fresh run is free in the ready bin (any stream may use it).
 * Release returns chunks that are wholly inside free blocks; the caller has waited for the
 * device first (see pool.c), and cached stitched views of them are torn down before.
 */
#include <stdlib.h>

#include "pool_impl.h"

void gml_stats_reserved(gml_pool *p, long delta_slots)
{
    p->mapped_slots += (size_t)delta_slots;
    p->c.reserved = (uint64_t)p->mapped_slots * p->chunk;
    if (p->c.reserved > p->c.peak_reserved)
        p->c.peak_reserved = p->c.reserved;
}

static bool run_empty(const gml_pool *p, size_t s, size_t k)
{
    if (s + k > p->nslots)
        return false;
    for (size_t i = s; i < s + k; i++)
        if (p->slots[i].state != GML_SLOT_EMPTY)
            return false;
    return true;
}

/* Lowest run of k empty slots; nslots when there is none. */
static size_t find_run(gml_pool *p, size_t k)
{
    while (p->slot_hint < p->nslots && p->slots[p->slot_hint].state != GML_SLOT_EMPTY)
        p->slot_hint++;
    for (size_t i = p->slot_hint; i + k <= p->nslots;) {
        size_t run = 0;
        while (run < k && p->slots[i + run].state == GML_SLOT_EMPTY)
            run++;
        if (run == k)
            return i;
        i += run + 1;
    }
    return p->nslots;
}

/* Unmaps and releases slots [s, s+k) (their records are the caller's business). */
static int unmap_release(gml_pool *p, size_t s, size_t k)
{
    int rc = GMLAKE_OK;
    for (size_t i = s; i < s + k; i++) {
        gml_slot *sl = &p->slots[i];
        int r1 = gml_dev_unmap(p->dev, gml_slot_addr(p, i), p->chunk);
        int r2 = gml_dev_chunk_release(p->dev, sl->handle);
        if (r1 || r2)
            rc = GMLAKE_ERR_DEVICE;
        sl->state = GML_SLOT_EMPTY;
        sl->owner = NULL;
        sl->handle = 0;
        sl->stitch_refs = 0;
        if (i < p->slot_hint)
            p->slot_hint = i;
    }
    return rc;
}

/* Links a run's record to the large blocks on either side of it. */
static void link_neighbours(gml_pool *p, gml_block *b)
{
    size_t s = gml_slot_of(p, b->addr), e = gml_slot_of(p, b->addr + b->size);
    if (s > 0 && p->slots[s - 1].state == GML_SLOT_LARGE) {
        gml_block *l = p->slots[s - 1].owner;
        l->next = b;
        b->prev = l;
    }
    if (e < p->nslots && p->slots[e].state == GML_SLOT_LARGE) {
        gml_block *r = gml_block_at(p, gml_slot_addr(p, e));
        r->prev = b;
        b->next = r;
    }
}

gml_block *gml_grow(gml_pool *p, int space, size_t k, gml_block *extend, int *rc)
{
    size_t s = extend ? gml_slot_of(p, extend->addr + extend->size) : find_run(p, k);
    if (s >= p->nslots || !run_empty(p, s, k)) {
        *rc = GMLAKE_ERR_NOMEM; /* the arena is full */
        return NULL;
    }
    if ((p->mapped_slots + k) * p->chunk > p->limit) {
        *rc = GMLAKE_ERR_NOMEM;
        return NULL;
    }
    gml_block *b = gml_rec_get(p);
    if (!b) {
        *rc = GMLAKE_ERR_NOMEM;
        return NULL;
    }
    size_t done = 0;
    *rc = GMLAKE_OK;
    for (; done < k; done++) {
        gml_slot *sl = &p->slots[s + done];
        *rc = gml_dev_chunk_create(p->dev, p->chunk, &sl->handle);
        if (*rc)
            break;
        *rc = gml_dev_map(p->dev, gml_slot_addr(p, s + done), p->chunk, sl->handle);
        if (*rc) {
            gml_dev_chunk_release(p->dev, sl->handle);
            break;
        }
        sl->state = (uint8_t)(space == GML_SPACE_SMALL ? GML_SLOT_SMALL : GML_SLOT_LARGE);
    }
    if (*rc == GMLAKE_OK)
        *rc = gml_dev_set_access(p->dev, gml_slot_addr(p, s), k * p->chunk);
    if (*rc) {
        if (*rc != GMLAKE_ERR_NOMEM)
            *rc = GMLAKE_ERR_DEVICE;
        unmap_release(p, s, done);
        gml_rec_put(p, b);
        return NULL;
    }
    b->addr = gml_slot_addr(p, s);
    b->size = k * p->chunk;
    b->space = (uint8_t)space;
    b->prev = b->next = NULL;
    gml_claim(p, b, b->addr, b->size);
    if (space == GML_SPACE_LARGE)
        link_neighbours(p, b);
    gml_stats_reserved(p, (long)k);
    return gml_free_insert(p, b, extend ? extend->bin : p->ready);
}

/* Calls fn on every free block of `space` usable by bin (own bin and ready bin). */
#define FOR_USABLE(p, bin, space, f)                                                              \
    for (int pass_ = 0; pass_ < 2; pass_++)                                                       \
        for (gml_block *f = RB_MIN(gml_size_tree, &(pass_ ? (p)->ready : (bin))->free[space]);     \
             f && !(pass_ == 1 && (bin) == (p)->ready); f = RB_NEXT(gml_size_tree, NULL, f))

int gml_grow_large(gml_pool *p, gml_bin *bin, size_t need)
{
    size_t k_fresh = (need + p->chunk - 1) >> p->chunk_shift;
    gml_block *best = NULL;
    size_t best_k = k_fresh;
    FOR_USABLE(p, bin, GML_SPACE_LARGE, f) {
        uintptr_t end = f->addr + f->size;
        if ((end - p->arena) & (p->chunk - 1))
            continue;
        size_t k = (need - f->size + p->chunk - 1) >> p->chunk_shift; /* f->size < need */
        if (k < best_k && run_empty(p, gml_slot_of(p, end), k)) {
            best = f;
            best_k = k;
        }
    }
    int rc;
    if (best && gml_grow(p, GML_SPACE_LARGE, best_k, best, &rc))
        return GMLAKE_OK;
    gml_grow(p, GML_SPACE_LARGE, k_fresh, NULL, &rc);
    return rc;
}

/* Moves the chunk at address c out of free large block f into the small space. */
static void chunk_to_small(gml_pool *p, gml_block *f, uintptr_t c)
{
    gml_bin *bin = f->bin;
    gml_block *m = gml_carve(p, f, c, p->chunk);
    if (!m)
        return;
    gml_detach(m);
    m->space = GML_SPACE_SMALL;
    p->slots[gml_slot_of(p, c)].state = GML_SLOT_SMALL;
    gml_free_insert(p, m, bin);
}

int gml_small_refill(gml_pool *p, gml_bin *bin)
{
    gml_block *pick = NULL;
    uintptr_t pick_c = 0;
    FOR_USABLE(p, bin, GML_SPACE_LARGE, f) {
        if (f->size < p->chunk || (pick && pick->size <= f->size))
            continue;
        uintptr_t lo = p->arena + GML_ROUND_UP(f->addr - p->arena, p->chunk);
        uintptr_t end = f->addr + f->size;
        uintptr_t hi = p->arena + ((end - p->arena) & ~(uintptr_t)(p->chunk - 1));
        if (lo + p->chunk > hi)
            continue;
        pick = f;
        /* take an edge chunk so the rest of f stays in one piece */
        pick_c = (hi == end) ? hi - p->chunk : lo;
    }
    if (pick) {
        chunk_to_small(p, pick, pick_c);
        return GMLAKE_OK;
    }
    int rc;
    gml_grow(p, GML_SPACE_SMALL, 1, NULL, &rc);
    return rc;
}

/* Collects the free blocks of one tree whose size is in [lo, hi] (they may be modified after). */
static size_t collect(struct gml_size_tree *t, size_t lo, size_t hi, gml_block ***out, size_t *cap)
{
    size_t n = 0;
    gml_block key = {.size = lo, .addr = 0};
    for (gml_block *f = RB_NFIND(gml_size_tree, t, &key); f && f->size <= hi;
         f = RB_NEXT(gml_size_tree, NULL, f)) {
        if (n == *cap) {
            size_t nc = *cap ? *cap * 2 : 64;
            gml_block **a = realloc(*out, nc * sizeof *a);
            if (!a)
                break;
            *out = a;
            *cap = nc;
        }
        (*out)[n++] = f;
    }
    return n;
}

size_t gml_small_reclaim(gml_pool *p)
{
    size_t moved = 0, cap = 0;
    gml_block **v = NULL;
    gml_bin *bin, *tmp;
    HASH_ITER(hh, p->bins, bin, tmp) {
        size_t n = collect(&bin->free[GML_SPACE_SMALL], p->chunk, p->chunk, &v, &cap);
        for (size_t i = 0; i < n; i++) {
            gml_block *b = v[i];
            gml_free_tree_remove(b);
            b->space = GML_SPACE_LARGE;
            p->slots[gml_slot_of(p, b->addr)].state = GML_SLOT_LARGE;
            link_neighbours(p, b);
            gml_free_insert(p, b, bin);
            moved++;
        }
    }
    free(v);
    return moved;
}

size_t gml_release_free_chunks(gml_pool *p)
{
    gml_small_reclaim(p);
    size_t released = 0, cap = 0;
    gml_block **v = NULL;
    gml_bin *bin, *tmp;
    HASH_ITER(hh, p->bins, bin, tmp) {
        size_t n = collect(&bin->free[GML_SPACE_LARGE], p->chunk, SIZE_MAX, &v, &cap);
        for (size_t i = 0; i < n; i++) {
            gml_block *f = v[i];
            uintptr_t lo = p->arena + GML_ROUND_UP(f->addr - p->arena, p->chunk);
            uintptr_t hi = p->arena + ((f->addr + f->size - p->arena) & ~(uintptr_t)(p->chunk - 1));
            /* release maximal runs of chunks no stitched view maps, from the top down so that
             * f (which keeps the head of the range) stays valid */
            while (hi > lo) {
                uintptr_t e = hi;
                while (e > lo && p->slots[gml_slot_of(p, e - p->chunk)].stitch_refs)
                    e -= p->chunk;
                uintptr_t s = e;
                while (s > lo && !p->slots[gml_slot_of(p, s - p->chunk)].stitch_refs)
                    s -= p->chunk;
                if (e == s)
                    break;
                gml_block *m = gml_carve(p, f, s, e - s);
                if (!m)
                    break;
                gml_detach(m);
                size_t k = (e - s) >> p->chunk_shift;
                unmap_release(p, gml_slot_of(p, s), k);
                gml_rec_put(p, m);
                gml_stats_reserved(p, -(long)k);
                released += k;
                hi = s;
            }
        }
    }
    free(v);
    return released;
}
