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
 * Those driver calls run without the pool lock: the parts are carved (HELD) first, the block
 * waits on st->making, and it is published, or its parts go home, once the lock is back.
 * Tier 2: only the heap's API below (contract in stitch.h).
 */
#include <stdlib.h>
#include <string.h>

#include "../config/settings.h"
#include "stitch.h"

int gml_stitch_strategy_from_name(const char *name)
{
    return gml_setting_choice("stitch_strategy", name);
}

int gml_stitch_settings_check(const gml_pool_settings *s, const char **why)
{
    if (s->reuse_limit < 1.0 || (unsigned)s->strategy >= GML_STITCH_STRATEGY_COUNT) {
        *why = "reuse_limit must be >= 1 and stitch_strategy known";
        return GMLAKE_ERR_INVALID;
    }
    return GMLAKE_OK;
}

int gml_stitch_init(gml_stitch *st, gml_heap *h, const gml_pool_settings *s, const char **why)
{
    memset(st, 0, sizeof *st);
    if (gml_stitch_settings_check(s, why) != GMLAKE_OK)
        return GMLAKE_ERR_INVALID;
    st->h = h;
    st->enabled = s->vmm_defragment;
    st->frag_limit = s->frag_limit;
    st->reuse_limit = s->reuse_limit;
    st->auto_gc = s->auto_gc;
    st->bytes_limit = s->stitch_bytes_limit;
    st->strategy = (gml_stitch_strategy)s->strategy;
    TAILQ_INIT(&st->lru);
    TAILQ_INIT(&st->making);
    RB_INIT(&st->cached);
    return GMLAKE_OK;
}

typedef struct piece {
    gml_block *f;   /* the free block */
    uintptr_t lo;   /* first whole chunk inside it */
    size_t n;       /* whole chunks inside it */
    size_t use;     /* chunks taken (from the top) */
} piece;

typedef GML_VEC(piece) piece_vec;

/* The pieces the request's stream may use, in search order; false on host out of memory. */
static bool collect_pieces(gml_heap *h, gml_bin *bin, piece_vec *v)
{
    v->n = 0;
    GML_FOR_SERVING_BINS(h, bin, b) {
        gml_block *f;
        RB_FOREACH(f, gml_size_tree, &b->free[GML_SPACE_LARGE]) {
            uintptr_t lo, hi;
            gml_whole_extents(h, f, &lo, &hi);
            if (f->size < h->chunk || hi <= lo)
                continue;
            if (!gml_vec_push(v, ((piece){.f = f, .lo = lo, .n = (hi - lo) >> h->chunk_shift})))
                return false;
        }
    }
    return true;
}

static int by_size_desc(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return x->lo < y->lo ? -1 : (x->lo > y->lo);
}

/* The chunks of the fewest whole extents at the top of piece p that hold `want` chunks. */
static size_t whole_from_top(const gml_heap *h, const piece *p, size_t want)
{
    size_t top = gml_slot_of(h, p->lo) + p->n, got = 0;
    while (got < want)
        got = top - gml_extent_head(h, top - got - 1);
    return got;
}

/* Marks piece.use (whole extents from the top of each piece) so that the used chunks add up to
 * at least `chunks` (*total, the overshoot below one extent a piece); returns the number of
 * pieces used (they are moved to the front of v, in stitching order). */
static size_t choose_pieces(const gml_heap *h, piece *v, size_t n, size_t chunks,
                            gml_stitch_strategy strategy, size_t *total)
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
        v[used].use = whole_from_top(h, &t, t.n < left ? t.n : left);
        left -= v[used].use < left ? v[used].use : left;
        *total += v[used].use;
        used++;
    }
    return left ? 0 : used;
}

bool gml_stitch_unmap(gml_heap *h, uintptr_t va, const uint32_t *slots, size_t mapped)
{
    bool ok = true;
    for (size_t i = 0; i < mapped;) {
        size_t len = gml_extent_len(h, slots[i]);
        if (gml_dev_unmap(h->dev, va + (i << h->chunk_shift), len << h->chunk_shift))
            ok = false;
        i += len;
    }
    return ok;
}

/* Device calls for a stitched range over `slots`; on failure nothing stays mapped or reserved. */
static int map_range(gml_heap *h, const uint32_t *slots, size_t n, uintptr_t *va_out)
{
    uintptr_t va;
    size_t bytes = n << h->chunk_shift;
    if (gml_dev_va_reserve(h->dev, bytes, h->chunk, &va) != GMLAKE_OK)
        return GMLAKE_ERR_DEVICE;
    size_t i = 0; /* one map per extent: slots holds whole extents, heads first */
    while (i < n) {
        size_t len = gml_extent_len(h, slots[i]);
        if (gml_dev_map(h->dev, va + (i << h->chunk_shift), len << h->chunk_shift,
                        h->slots[slots[i]].handle))
            break;
        i += len;
    }
    if (i == n && gml_dev_set_access(h->dev, va, bytes) == GMLAKE_OK) {
        *va_out = va;
        return GMLAKE_OK;
    }
    gml_stitch_unmap(h, va, slots, i);
    gml_dev_va_free(h->dev, va, bytes);
    return GMLAKE_ERR_DEVICE;
}

/* Carves the chosen pieces out of their home blocks as sb's parts; false (nothing carved) on host
 * out of memory. */
static bool carve_parts(gml_stitch *st, gml_sblock *sb, const piece *v, size_t used)
{
    gml_heap *h = st->h;
    for (size_t i = 0; i < used; i++) {
        uintptr_t a = v[i].lo + ((v[i].n - v[i].use) << h->chunk_shift);
        gml_block *part = gml_carve(h, v[i].f, a, v[i].use << h->chunk_shift);
        if (!part) {
            gml_stitch_parts_home(st, sb, NULL);
            return false;
        }
        part->holder = sb;
        STAILQ_INSERT_TAIL(&sb->parts, part, held);
    }
    return true;
}

int gml_stitch_alloc(gml_stitch *st, gml_bin *bin, size_t need, size_t req, bool may_grow,
                     gml_block **out)
{
    gml_heap *h = st->h;
    if (!st->enabled || req < st->frag_limit)
        return GMLAKE_ERR_NOMEM;
    if (gml_stitch_cache_take(st, bin, need, req, out) == GMLAKE_OK)
        return GMLAKE_OK;
    size_t chunks = (need + h->chunk - 1) >> h->chunk_shift;
    piece_vec v = {0};
    int rc = GMLAKE_ERR_NOMEM;
    if (!collect_pieces(h, bin, &v))
        goto out;
    size_t have = 0;
    for (size_t i = 0; i < v.n; i++)
        have += v.v[i].n;
    if (have < chunks) {
        rc = may_grow ? gml_grow(h, bin, GML_SPACE_LARGE, GML_GROW_CHUNKS, need) : GMLAKE_ERR_NOMEM;
        if (rc != GMLAKE_OK)
            goto out;
        /* the new chunks may have made one block large enough */
        gml_block *f = gml_best_fit(h, bin, GML_SPACE_LARGE, need);
        if (f) {
            *out = gml_take(h, f, need, req);
            rc = *out ? GMLAKE_OK : GMLAKE_ERR_NOMEM;
            goto out;
        }
        rc = GMLAKE_ERR_NOMEM;
        if (!collect_pieces(h, bin, &v))
            goto out;
    }
    size_t total = 0, used = choose_pieces(h, v.v, v.n, chunks, st->strategy, &total);
    chunks = total;
    gml_sblock *sb = used ? calloc(1, sizeof *sb) : NULL;
    uint32_t *slots = sb ? malloc(chunks * sizeof *slots) : NULL;
    if (!slots) {
        free(sb);
        goto out;
    }
    STAILQ_INIT(&sb->parts);
    size_t k = 0;
    for (size_t i = 0; i < used; i++) {
        uintptr_t a = v.v[i].lo + ((v.v[i].n - v.v[i].use) << h->chunk_shift);
        for (size_t j = 0; j < v.v[i].use; j++)
            slots[k++] = (uint32_t)gml_slot_of(h, a + (j << h->chunk_shift));
    }
    sb->slots = slots;
    sb->nchunks = (uint32_t)chunks;
    uintptr_t va;
    rc = carve_parts(st, sb, v.v, used) ? GMLAKE_OK : GMLAKE_ERR_NOMEM;
    if (rc == GMLAKE_OK) {
        /* the parts are HELD: nothing else hands them out, releases or rewrites their slots, so
         * the driver calls run without the lock */
        TAILQ_INSERT_TAIL(&st->making, sb, lru);
        gml_heap_unlock(h);
        rc = map_range(h, slots, chunks, &va);
        gml_heap_relock(h);
        TAILQ_REMOVE(&st->making, sb, lru);
        if (rc != GMLAKE_OK)
            gml_stitch_parts_home(st, sb, NULL);
    }
    if (rc != GMLAKE_OK) {
        free(slots);
        free(sb);
        goto out;
    }
    sb->b.addr = va;
    sb->b.size = chunks << h->chunk_shift;
    sb->b.req = req;
    sb->b.state = GML_B_VIEW;
    sb->live = true;
    for (size_t i = 0; i < chunks; i++)
        gml_chunk_pin(h, slots[i]);
    gml_stitch_link_new(st, sb);
    st->stitches++;
    *out = &sb->b;
    gml_stitch_gc(st, false);
out:
    gml_vec_free(&v);
    return rc;
}
