/*
 * stitch.c — making a stitched block: which free chunks, in what order, and the device calls.
 *
 * The choice of constituents (choose_pieces) owns the stitch strategy:
 *  largest  GMLake's rule: the largest pieces first, the last one cut to what is still needed.
 *           Fewest pieces.  The default: on the three recorded traces it reaches the same
 *           utilization as bestfit within 0.04% and makes no device call in their second halves
 *           (docs/BENCHMARKS.md).
 *  bestfit  while no single piece covers the remainder take the largest; then take the smallest
 *           piece that covers it.  As few pieces, but the last cut comes from the tightest piece,
 *           leaving the least leftover and the large free blocks whole.
 * A cut takes the chunks at the top of its piece, so that the free block keeps its head.
 *
 * Cost: reserving a range, one map per chunk and one set_access over the range (~25 us a chunk
 * on an H200), which is why stitched blocks are cached (cache.c) and never made on a steady path.
 */
#include <stdlib.h>

#include "stitch.h"

typedef struct piece {
    gml_block *f;   /* the free block */
    uintptr_t lo;   /* first whole chunk inside it */
    size_t n;       /* whole chunks inside it */
    size_t use;     /* chunks taken (from the top) */
    gml_bin *bin;
} piece;

static size_t collect_pieces(gml_pool *p, gml_bin *bin, piece **out)
{
    size_t n = 0, cap = 0;
    piece *v = NULL;
    for (int pass = 0; pass < 2; pass++) {
        gml_bin *b = pass ? p->ready : bin;
        if (pass && bin == p->ready)
            break;
        gml_block *f;
        RB_FOREACH(f, gml_size_tree, &b->free[GML_SPACE_LARGE]) {
            if (f->size < p->chunk)
                continue;
            uintptr_t lo = p->arena + GML_ROUND_UP(f->addr - p->arena, p->chunk);
            uintptr_t hi = p->arena + ((f->addr + f->size - p->arena) & ~(uintptr_t)(p->chunk - 1));
            if (hi <= lo)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 64;
                piece *nv = realloc(v, cap * sizeof *nv);
                if (!nv) {
                    free(v);
                    *out = NULL;
                    return 0;
                }
                v = nv;
            }
            v[n++] = (piece){.f = f, .lo = lo, .n = (hi - lo) >> p->chunk_shift, .bin = b};
        }
    }
    *out = v;
    return n;
}

static int by_size_desc(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return x->lo < y->lo ? -1 : (x->lo > y->lo);
}

/* Marks piece.use so that the used chunks add up to `chunks`; returns the number of pieces used
 * (they are moved to the front of v, in stitching order). */
static size_t choose_pieces(piece *v, size_t n, size_t chunks, gml_stitch_strategy strategy)
{
    if (n)
        qsort(v, n, sizeof *v, by_size_desc);
    size_t left = chunks, used = 0;
    while (left && used < n) {
        size_t pick = used; /* largest unused (v[used..] is sorted descending) */
        if (strategy == GML_STITCH_BESTFIT) {
            for (size_t i = n; i-- > used;)
                if (v[i].n >= left) {
                    pick = i;
                    break;
                }
        }
        piece t = v[pick];
        /* keep v[used+1..] sorted: shift the ones in between up by one */
        for (size_t i = pick; i > used; i--)
            v[i] = v[i - 1];
        v[used] = t;
        v[used].use = t.n < left ? t.n : left;
        left -= v[used].use;
        used++;
    }
    return left ? 0 : used;
}

static void unmap_stitched(gml_pool *p, uintptr_t va, size_t mapped)
{
    for (size_t i = 0; i < mapped; i++)
        gml_dev_unmap(p->dev, va + (i << p->chunk_shift), p->chunk);
}

/* Device calls for a stitched range over `slots`; on failure nothing stays mapped or reserved. */
static int map_range(gml_pool *p, const uint32_t *slots, size_t n, uintptr_t *va_out)
{
    uintptr_t va;
    size_t bytes = n << p->chunk_shift;
    if (gml_dev_va_reserve(p->dev, bytes, p->chunk, &va) != GMLAKE_OK)
        return GMLAKE_ERR_DEVICE;
    size_t i = 0;
    for (; i < n; i++)
        if (gml_dev_map(p->dev, va + (i << p->chunk_shift), p->chunk, p->slots[slots[i]].handle))
            break;
    if (i == n && gml_dev_set_access(p->dev, va, bytes) == GMLAKE_OK) {
        *va_out = va;
        return GMLAKE_OK;
    }
    unmap_stitched(p, va, i);
    gml_dev_va_free(p->dev, va, bytes);
    return GMLAKE_ERR_DEVICE;
}

/* Grows the large space by k chunks, next to a piece where the arena allows. */
static int grow_deficit(gml_pool *p, size_t k, piece *v, size_t n)
{
    int rc = GMLAKE_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        gml_block *f = v[i].f;
        uintptr_t end = f->addr + f->size;
        if (((end - p->arena) & (p->chunk - 1)) == 0 && gml_grow(p, GML_SPACE_LARGE, k, f, &rc))
            return GMLAKE_OK;
        if (rc == GMLAKE_ERR_DEVICE)
            return rc;
    }
    gml_grow(p, GML_SPACE_LARGE, k, NULL, &rc);
    return rc;
}

int gml_stitch_alloc(gml_pool *p, gml_bin *bin, size_t need, size_t req, bool may_grow,
                     uintptr_t *out)
{
    if (gml_stitch_cache_take(p, bin, need, req, out) == GMLAKE_OK)
        return GMLAKE_OK;
    size_t chunks = (need + p->chunk - 1) >> p->chunk_shift;
    piece *v = NULL;
    size_t n = collect_pieces(p, bin, &v), have = 0;
    for (size_t i = 0; i < n; i++)
        have += v[i].n;
    if (have < chunks) {
        int rc = may_grow ? grow_deficit(p, chunks - have, v, n) : GMLAKE_ERR_NOMEM;
        free(v);
        if (rc != GMLAKE_OK)
            return rc;
        /* the new chunks may have made one block large enough */
        gml_block *f = gml_best_fit(p, bin, GML_SPACE_LARGE, need);
        if (f) {
            gml_block *l = gml_take(p, f, need, req);
            if (!l)
                return GMLAKE_ERR_NOMEM;
            *out = l->addr;
            return GMLAKE_OK;
        }
        n = collect_pieces(p, bin, &v);
    }
    size_t used = choose_pieces(v, n, chunks, p->set.strategy);
    gml_sblock *sb = used ? calloc(1, sizeof *sb) : NULL;
    uint32_t *slots = sb ? malloc(chunks * sizeof *slots) : NULL;
    if (!slots) {
        free(sb);
        free(v);
        return GMLAKE_ERR_NOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < used; i++) {
        uintptr_t a = v[i].lo + ((v[i].n - v[i].use) << p->chunk_shift);
        for (size_t j = 0; j < v[i].use; j++)
            slots[k++] = (uint32_t)gml_slot_of(p, a + (j << p->chunk_shift));
    }
    uintptr_t va;
    int rc = map_range(p, slots, chunks, &va);
    if (rc != GMLAKE_OK) {
        free(slots);
        free(sb);
        free(v);
        return rc;
    }
    /* carve the parts out of their home blocks (each piece is a distinct free block) */
    gml_block **tail = &sb->parts;
    for (size_t i = 0; i < used; i++) {
        uintptr_t a = v[i].lo + ((v[i].n - v[i].use) << p->chunk_shift);
        gml_block *part = gml_carve(p, v[i].f, a, v[i].use << p->chunk_shift);
        if (!part) { /* host out of memory: give back what was carved, undo the mapping */
            for (gml_block *q = sb->parts, *nx; q; q = nx) {
                nx = q->part_next;
                q->part_next = NULL;
                q->sb = NULL;
                gml_free_insert(p, q, p->ready);
            }
            unmap_stitched(p, va, chunks);
            gml_dev_va_free(p->dev, va, chunks << p->chunk_shift);
            free(slots);
            free(sb);
            free(v);
            return GMLAKE_ERR_NOMEM;
        }
        part->sb = sb;
        *tail = part;
        tail = &part->part_next;
    }
    free(v);
    sb->slots = slots;
    sb->nchunks = (uint32_t)chunks;
    sb->b.addr = va;
    sb->b.size = chunks << p->chunk_shift;
    sb->b.req = req;
    sb->b.space = GML_SPACE_STITCHED;
    sb->b.state = GML_B_STITCHED;
    sb->live = true;
    for (size_t i = 0; i < chunks; i++)
        p->slots[slots[i]].stitch_refs++;
    HASH_ADD(hh, p->live, addr, sizeof sb->b.addr, &sb->b);
    gml_stitch_link_new(p, sb);
    p->c.stitches++;
    *out = va;
    gml_stitch_gc(p, false);
    return GMLAKE_OK;
}
