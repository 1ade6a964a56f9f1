/*
 * blocks.c — block records and the operations on them: the best-fit choice, split, merge, carve
 * (tier 1, contract in heap.h).
 *
 * Best fit: each bin keeps its free blocks per space in a red-black tree ordered by (size, addr);
 * RB_NFIND gives the smallest block >= the request (lowest address among equals).  A request on
 * stream S looks in the bins that serve S (gml_bin_serves: S's own, then the ready bin) and takes
 * the smaller fit (the earlier bin among equal sizes).
 * Split: the request is cut from the tail of the free block, so the remainder keeps its address.
 * Runs: touching free blocks of the bins that serve one stream (gml_run_head, gml_run_last), for
 * what maps whole extents: an extent wholly free over blocks of two bins is whole there.
 * Merge: a freed block joins free neighbours of its own bin only; the larger record survives, so
 * that re-pointing slot owners costs the size of the smaller side only.  A ready neighbour never
 * joins a stream's block: memory any stream may use never becomes memory one stream may use.
 * Records come from slabs and are recycled; the hot path never calls malloc.
 */
#include <stdlib.h>
#include <string.h>

#include "heap.h"

enum { SLAB_RECORDS = 1024 };

__attribute__((noinline)) static gml_block *rec_refill(gml_heap *h)
{
    if (h->no_new_slabs)
        return NULL;
    /* records start on cache lines (heap.h lays a record out by line) */
    gml_block *slab = NULL;
    if (posix_memalign((void **)&slab, 64, SLAB_RECORDS * sizeof *slab) != 0)
        return NULL;
    memset(slab, 0, SLAB_RECORDS * sizeof *slab);
    if (!gml_vec_push(&h->slabs, slab)) {
        free(slab);
        return NULL;
    }
    for (size_t i = 1; i < SLAB_RECORDS; i++) {
        slab[i].next = h->rec_free;
        h->rec_free = &slab[i];
    }
    return &slab[0];
}

gml_block *gml_rec_get(gml_heap *h)
{
    gml_block *b = h->rec_free;
    if (__builtin_expect(b == NULL, 0))
        return rec_refill(h);
    h->rec_free = b->next;
    b->next = NULL;
    return b;
}

void gml_rec_put(gml_heap *h, gml_block *b)
{
    b->prev = NULL;
    b->holder = NULL;
    b->bin = NULL;
    b->next = h->rec_free;
    h->rec_free = b;
}

void gml_claim(gml_heap *h, gml_block *b, uintptr_t addr, size_t size)
{
    size_t first = gml_slot_of(h, addr);
    size_t end = (addr + size - h->arena) >> h->chunk_shift; /* slots whose last byte < addr+size */
    for (size_t i = first; i < end; i++)
        h->slots[i].owner = b;
}

gml_block *gml_block_at(gml_heap *h, uintptr_t addr)
{
    gml_block *b = h->slots[gml_slot_of(h, addr)].owner;
    while (b && b->addr > addr)
        b = b->prev;
    return b;
}

/* Out of its bin's tree, remembering its place among the bin's pending blocks in *pos (NULL: no
 * need: it comes back with a new seq, if at all). */
static inline void tree_remove(gml_block *b, gml_pend_pos *pos)
{
    gml_bin *bin = b->bin;
    gml_bin_block_out(bin->heap, b, pos);
    RB_REMOVE(gml_size_tree, &bin->free[b->space], b);
}

void gml_free_tree_remove(gml_block *b) { tree_remove(b, NULL); }

/* Into its bin's tree; pos: where it was among the pending blocks, if it keeps its seq. */
static inline void tree_insert(gml_block *b, const gml_pend_pos *pos)
{
    gml_bin *bin = b->bin;
    RB_INSERT(gml_size_tree, &bin->free[b->space], b);
    gml_bin_block_in(bin->heap, b, pos);
}

/* l immediately precedes r in one space; returns the survivor holding both ranges. */
static gml_block *merge(gml_heap *h, gml_block *l, gml_block *r)
{
    if (l->size >= r->size) {
        gml_claim(h, l, r->addr, r->size);
        l->size += r->size;
        l->next = r->next;
        if (r->next)
            r->next->prev = l;
        gml_rec_put(h, r);
        return l;
    }
    gml_claim(h, r, l->addr, l->size);
    r->addr = l->addr;
    r->size += l->size;
    r->prev = l->prev;
    if (l->prev)
        l->prev->next = r;
    gml_rec_put(h, l);
    return r;
}

/* A free neighbour joins a block freed into `bin` if it is in that same bin (or, with ready, in
 * the ready bin). */
static inline bool joins(const gml_heap *h, const gml_block *n, const gml_bin *bin, bool ready)
{
    return n && n->state == GML_B_FREE && (n->bin == bin || (ready && n->bin == h->ready));
}

static gml_block *insert(gml_heap *h, gml_block *b, gml_bin *bin, bool ready)
{
    b->state = GML_B_FREE;
    b->bin = bin;
    for (gml_block *n = b->prev; joins(h, n, bin, ready); n = b->prev) {
        gml_free_tree_remove(n);
        b = merge(h, n, b);
    }
    for (gml_block *n = b->next; joins(h, n, bin, ready); n = b->next) {
        gml_free_tree_remove(n);
        b = merge(h, b, n);
    }
    b->state = GML_B_FREE;
    b->bin = bin;
    b->seq = ++h->seq;
    tree_insert(b, NULL);
    return b;
}

gml_block *gml_free_insert(gml_heap *h, gml_block *b, gml_bin *bin) { return insert(h, b, bin, false); }

size_t gml_ready_run(const gml_heap *h, const gml_block *f)
{
    size_t n = f->size;
    int k = 0; /* at most GML_JOIN_TRIES blocks each side: a miss stays bounded */
    for (const gml_block *x = f->prev; joins(h, x, f->bin, true) && k < GML_JOIN_TRIES; x = x->prev, k++)
        n += x->size;
    k = 0;
    for (const gml_block *x = f->next; joins(h, x, f->bin, true) && k < GML_JOIN_TRIES; x = x->next, k++)
        n += x->size;
    return n;
}

gml_block *gml_join_ready(gml_heap *h, gml_block *f)
{
    gml_bin *bin = f->bin;
    gml_free_tree_remove(f);
    return insert(h, f, bin, true);
}

/* RB_NFIND for (need, address 0), walked here so that the hot path inlines it: the smallest
 * block >= need, the lowest address among equal sizes. */
static inline gml_block *nfind(struct gml_size_tree *t, size_t need)
{
    gml_block *x = RB_ROOT(t), *fit = NULL;
    while (x) {
        if (x->size >= need) {
            fit = x;
            x = RB_LEFT(x, snode);
        } else {
            x = RB_RIGHT(x, snode);
        }
    }
    return fit;
}

gml_block *gml_best_fit(gml_heap *h, gml_bin *bin, int space, size_t need)
{
    gml_block *best = NULL;
    GML_FOR_SERVING_BINS(h, bin, b) {
        gml_block *f = nfind(&b->free[space], need);
        if (f && (!best || f->size < best->size))
            best = f;
    }
    return best;
}

/* A block taken for request `req`: LIVE, in no bin (the caller puts it in its maps). */
static gml_block *made_live(gml_block *l, size_t req)
{
    l->state = GML_B_LIVE;
    l->bin = NULL;
    l->req = req;
    return l;
}

gml_block *gml_take(gml_heap *h, gml_block *f, size_t need, size_t req)
{
    gml_block *l = f;
    if (f->size > need) {
        l = gml_rec_get(h);
        if (__builtin_expect(!l, 0))
            return NULL;
        gml_bin_block_shrink(h, f, f->size - need); /* keeps its address, seq and place */
        l->addr = f->addr + f->size;
        l->size = need;
        l->space = f->space;
        l->prev = f;
        l->next = f->next;
        if (f->next)
            f->next->prev = l;
        f->next = l;
        gml_claim(h, l, l->addr, need);
    } else {
        tree_remove(f, NULL);
    }
    return made_live(l, req);
}

gml_block *gml_take_grown(gml_heap *h, gml_block *f, size_t need, size_t req)
{
    uintptr_t end = f->addr + f->size;
    size_t s = gml_slot_of(h, end);
    if (f->size <= need || f->space != GML_SPACE_LARGE || ((end - h->arena) & (h->chunk - 1)) ||
        s >= h->nslots || h->slots[s].state != GML_SLOT_EMPTY)
        return gml_take(h, f, need, req);
    gml_block *l = gml_carve(h, f, f->addr, need); /* the remainder stays at the frontier */
    return l ? made_live(l, req) : NULL;
}

gml_block *gml_carve(gml_heap *h, gml_block *f, uintptr_t a, size_t len)
{
    uintptr_t end = f->addr + f->size;
    gml_block *mid = f, *tail = NULL;
    if (a + len < end) {
        tail = gml_rec_get(h);
        if (!tail)
            return NULL;
    }
    if (a > f->addr) {
        mid = gml_rec_get(h);
        if (!mid) {
            if (tail)
                gml_rec_put(h, tail);
            return NULL;
        }
    }
    gml_pend_pos pos; /* head and tail keep f's seq: they take its place, in order */
    tree_remove(f, &pos);
    gml_bin *bin = f->bin;
    uint64_t seq = f->seq;
    gml_block *after = f->next;
    if (mid != f) { /* f keeps the head */
        f->size = a - f->addr;
        mid->space = f->space;
        mid->prev = f;
        f->next = mid;
        tree_insert(f, &pos);
        if (f->where == GML_IN_PENDING)
            pos.prev = f; /* the tail goes after it */
    }
    mid->addr = a;
    mid->size = len;
    mid->next = after;
    if (after)
        after->prev = mid;
    if (mid != f)
        gml_claim(h, mid, a, len);
    if (tail) {
        tail->addr = a + len;
        tail->size = end - (a + len);
        tail->space = mid->space;
        tail->prev = mid;
        tail->next = mid->next;
        if (mid->next)
            mid->next->prev = tail;
        mid->next = tail;
        tail->state = GML_B_FREE;
        tail->bin = bin;
        tail->seq = seq;
        gml_claim(h, tail, tail->addr, tail->size);
        tree_insert(tail, &pos);
    }
    mid->bin = bin; /* where it came from, for an undo */
    mid->seq = seq;
    mid->state = GML_B_HELD;
    return mid;
}

void gml_detach(gml_block *b)
{
    if (b->prev)
        b->prev->next = NULL;
    if (b->next)
        b->next->prev = NULL;
    b->prev = b->next = NULL;
}

static void range_chunks(const gml_heap *h, uintptr_t a, uintptr_t e, uintptr_t *lo, uintptr_t *hi)
{
    *lo = h->arena + GML_ROUND_UP(a - h->arena, h->chunk);
    *hi = h->arena + ((e - h->arena) & ~(uintptr_t)(h->chunk - 1));
}

void gml_whole_chunks(const gml_heap *h, const gml_block *b, uintptr_t *lo, uintptr_t *hi)
{
    range_chunks(h, b->addr, b->addr + b->size, lo, hi);
}

void gml_range_whole_extents(const gml_heap *h, uintptr_t a, uintptr_t e, uintptr_t *lo, uintptr_t *hi)
{
    range_chunks(h, a, e, lo, hi);
    if (*hi <= *lo)
        return;
    size_t s = gml_slot_of(h, *lo), hd = gml_extent_head(h, s);
    if (hd != s)
        *lo = gml_slot_addr(h, hd + gml_extent_len(h, s));
    size_t l = gml_slot_of(h, *hi) - 1, he = gml_extent_head(h, l);
    if (he + gml_extent_len(h, l) != l + 1)
        *hi = gml_slot_addr(h, he);
}

void gml_whole_extents(const gml_heap *h, const gml_block *b, uintptr_t *lo, uintptr_t *hi)
{
    gml_range_whole_extents(h, b->addr, b->addr + b->size, lo, hi);
}

bool gml_run_head(const gml_heap *h, const gml_block *f, const gml_bin *to)
{
    return !f->prev || !gml_usable(h, f->prev, to);
}

gml_block *gml_run_last(const gml_heap *h, gml_block *f, const gml_bin *to, uintptr_t *e)
{
    while (f->next && gml_usable(h, f->next, to))
        f = f->next;
    *e = f->addr + f->size;
    return f;
}

bool gml_extent_bounds(const gml_heap *h, uintptr_t a, uintptr_t e, uintptr_t *b1, uintptr_t *b2)
{
    *b1 = gml_extent_lo(h, a) == a ? a : gml_extent_hi(h, a);
    *b2 = gml_extent_hi(h, e - 1) == e ? e : gml_extent_lo(h, e - 1);
    return *b1 <= *b2;
}
