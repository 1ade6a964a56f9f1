/*
 * stitch.c — making a stitched block: which free chunks, in what order, and the device calls.
 *
 * The choice of constituents (choose_pieces) owns the stitch strategy: whole extents alone first;
 * only when they cannot cover the request, also the free ends of partly used extents at the
 * range's two ends (the largest head begins it, the largest tail of another block ends it, giving
 * exactly what is left; docs/ARCHITECTURE.md "Extents").  The runs of whole extents in between:
 *  largest  GMLake's rule: the largest runs first, as few extents of the last as complete it.
 *           Fewest pieces.  The default: neither strategy wins on every recorded job and GPU
 *           lag, in memory or in steady device calls (docs/BENCHMARKS.md "Trace replay").
 *  bestfit  while no single run covers the remainder take the largest; then take the smallest
 *           run that covers it.  As few pieces, but the last cut comes from the tightest run,
 *           leaving the least leftover and the large free blocks whole.
 * A run gives the extents at its top, so that the free block keeps its head; a head grows upwards
 * by its own block's whole extents, a tail downwards.
 *
 * Cost: reserving a range, one map per extent and one set_access over the range (~25 us a
 * handle on an H200), which is why stitched blocks are cached (cache.c) and never made on a steady path.
 * Patches (stitch.h): before a new range, the window of a stale cached block that saves the most
 * driver time (gml_stitch_window, cache.c) is kept where it is mapped; its block's other extents
 * are unmapped and what the window lacks is chosen as a stitch chooses (choose_after: the range
 * begins on the window's end, so no head; one piece may do) and mapped after it.  A patch uses a
 * cached block up, so it counts as churn, as a teardown does (the pool's churn_limit rule).
 * Those driver calls run without the pool lock: the parts are carved (HELD) first, the block
 * waits on st->making, and it is published, or its parts go home, once the lock is back.  The
 * auto GC's teardowns for it run in the same unlocked window (cache.c).
 * The device calls themselves (map a range, unmap it) are map.c's, under this file and cache.c.
 * Tier 2: only the heap's API below (contract in stitch.h).
 */
#include <limits.h>
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
    st->reuse_limit = s->reuse_limit;
    st->patch = s->stitch_patch;
    st->borrow = s->stitch_borrow;
    st->auto_gc = s->auto_gc;
    st->bytes_limit = s->stitch_bytes_limit;
    st->strategy = (gml_stitch_strategy)s->strategy;
    TAILQ_INIT(&st->lru);
    TAILQ_INIT(&st->making);
    TAILQ_INIT(&st->evicting);
    RB_INIT(&st->cached);
    return GMLAKE_OK;
}

typedef struct piece {
    uintptr_t a, e;   /* its range: one free block, or a run of them (gml_run_head) */
    uintptr_t b1, b2; /* its first and last extent boundary: [b1, b2) are whole extents */
    uintptr_t lo, hi; /* what the stitch takes: [lo, hi) (empty: not used) */
    unsigned rank;    /* its place in the stitched range */
    bool taken;       /* its run of whole extents was looked at by choose_pieces */
} piece;

typedef GML_VEC(piece) piece_vec;

/* A piece's head [a, b1) is the free tail of an extent that a live block starts: it can only
 * begin a stitched range (its extent is mapped whole and entered at an offset).  Its tail
 * [b2, e) can only end one.  Whole extents go anywhere. */
static size_t head_of(const piece *p) { return p->b1 - p->a; }
static size_t tail_of(const piece *p) { return p->e - p->b2; }
static size_t whole_of(const piece *p) { return p->b2 - p->b1; }

/* Appends the pieces that begin in bin b's free large blocks and have an extent boundary
 * inside: with `to`, the runs of free blocks that serve `to` (an extent wholly free over blocks
 * of two bins is whole there), else each block alone; false on host out of memory. */
static bool add_pieces(gml_heap *h, gml_bin *b, const gml_bin *to, piece_vec *v)
{
    gml_block *f;
    RB_FOREACH(f, gml_size_tree, &b->free[GML_SPACE_LARGE]) {
        if (to && !gml_run_head(h, f, to))
            continue;
        piece p = {.a = f->addr, .e = f->addr + f->size};
        if (to)
            gml_run_last(h, f, to, &p.e);
        if (gml_extent_bounds(h, p.a, p.e, &p.b1, &p.b2) && !gml_vec_push(v, p))
            return false;
    }
    return true;
}

/* The pieces the request's stream may use; false on host out of memory. */
static bool collect_pieces(gml_heap *h, gml_bin *bin, piece_vec *v)
{
    v->n = 0;
    GML_FOR_SERVING_BINS(h, bin, b)
        if (!add_pieces(h, b, bin, v))
            return false;
    return true;
}

/* The pieces with the largest and the second largest cap (n >= 2; the first on ties). */
static void top_two(const piece *v, size_t n, size_t (*cap)(const piece *), size_t *a, size_t *b)
{
    *a = cap(&v[1]) > cap(&v[0]), *b = !*a;
    for (size_t i = 2; i < n; i++) {
        if (cap(&v[i]) > cap(&v[*a]))
            *b = *a, *a = i;
        else if (cap(&v[i]) > cap(&v[*b]))
            *b = i;
    }
}

/* The first and the last piece: the largest head and the largest tail of two different blocks. */
static void pick_ends(const piece *v, size_t n, size_t *first, size_t *last)
{
    size_t h1, h2, t1, t2;
    top_two(v, n, head_of, &h1, &h2);
    top_two(v, n, tail_of, &t1, &t2);
    *first = h1, *last = t1;
    if (h1 == t1) {
        if (head_of(&v[h1]) + tail_of(&v[t2]) >= head_of(&v[h2]) + tail_of(&v[t1]))
            *last = t2;
        else
            *first = h2;
    }
}

size_t gml_stitch_end_bytes(gml_stitch *st)
{
    piece_vec v = {0};
    size_t bytes = 0;
    gml_bin *b;
    LIST_FOREACH(b, &st->h->holding, holding)
        if (!add_pieces(st->h, b, NULL, &v))
            goto out;
    if (v.n >= 2) {
        size_t fi, li;
        pick_ends(v.v, v.n, &fi, &li);
        bytes = head_of(&v.v[fi]) + tail_of(&v.v[li]);
    }
out:
    gml_vec_free(&v);
    return bytes;
}

/* The run of whole extents to take next: the largest not taken yet; with bestfit, the smallest
 * that brings `want` bytes when one does.  n when none is left. */
static size_t pick_run(const piece *v, size_t n, size_t want, gml_stitch_strategy strategy)
{
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
        size_t w = whole_of(&v[i]);
        if (v[i].taken || !w)
            continue;
        if (best == n) {
            best = i;
            continue;
        }
        size_t bw = whole_of(&v[best]);
        bool fits = strategy == GML_STITCH_BESTFIT && w >= want, bfits = strategy == GML_STITCH_BESTFIT && bw >= want;
        if (fits ? !bfits || w < bw : !bfits && w > bw)
            best = i;
    }
    return best;
}

static int by_rank(const void *a, const void *b)
{
    const piece *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Chooses what each piece gives so that they cover `need` bytes.  With `ends`, the largest head
 * begins the range and the largest tail (of another block) ends it, giving what is left exactly;
 * without, both are empty.  Whole extents fill the rest, from the largest runs (with bestfit the
 * tightest run that completes it), as few as bring what is left within the tail's reach (a head
 * grows upwards by its block's whole extents, a tail downwards, another run gives its top
 * extents); a run that overshoots ends the range with it (the overshoot below one extent).  The
 * pieces used are moved to the front of v in virtual order; returns their number, or 0 with
 * *lack the bytes v cannot cover (0 when it is another reason).  *partial: the bytes of the head
 * and tail, which growth (counting whole extents) does not see. */
static size_t choose_pieces(const gml_heap *h, piece *v, size_t n, size_t need,
                            gml_stitch_strategy strategy, bool ends, bool head_ok, size_t min_used,
                            size_t *lack, size_t *partial)
{
    *lack = need;
    *partial = 0;
    if (n < 2)
        return 0;
    size_t fi, li;
    pick_ends(v, n, &fi, &li);
    piece *F = &v[fi], *L = &v[li];
    size_t head = ends && head_ok ? head_of(F) : 0, tail = ends ? tail_of(L) : 0;
    size_t left = need - head; /* no block fits (take_fit): head < need */
    *partial = head + tail;
    for (size_t i = 0; i < n; i++) {
        v[i].lo = v[i].hi = v[i].b1;
        v[i].rank = UINT_MAX;
        v[i].taken = false;
    }
    F->lo = F->b1 - head;
    F->rank = 0;
    L->lo = L->hi = L->b2;
    unsigned rank = 1;
    bool cut = false;
    size_t i;
    while (left > tail && (i = pick_run(v, n, left - tail, strategy)) < n) {
        piece *p = &v[i];
        p->taken = true;
        if (p == F) { /* upwards from the head */
            uintptr_t x = p->b1;
            while (x < p->b2 && x - p->b1 < left && left - (x - p->b1) > tail)
                x = gml_extent_hi(h, x);
            p->hi = x; /* an overshoot stays in the range, below one extent */
            left -= x - p->b1 < left ? x - p->b1 : left;
            continue;
        }
        uintptr_t y = p->b2; /* downwards from the top: the tail's own run, or a middle */
        while (y > p->b1 && p->b2 - y < left && left - (p->b2 - y) > tail)
            y = gml_extent_lo(h, y - 1);
        p->lo = y;
        p->hi = p->b2;
        if (p->b2 - y > left) { /* the overshoot (below one extent) ends the range */
            p->rank = UINT_MAX - 1;
            left = 0;
            cut = true;
        } else {
            left -= p->b2 - y;
            if (p != L)
                p->rank = rank++;
        }
    }
    if (left > tail) {
        *lack = left - tail;
        return 0;
    }
    *lack = 0;
    if (!cut) {
        L->hi = L->b2 + left;
        if (L->hi > L->lo)
            L->rank = UINT_MAX - 1;
    } else if (L->hi > L->lo && L->rank == UINT_MAX) {
        L->rank = UINT_MAX - 2; /* its run, before the cut one */
    }
    if (F->hi <= F->lo)
        F->rank = UINT_MAX; /* no head and none of its run */
    qsort(v, n, sizeof *v, by_rank);
    size_t used = 0;
    while (used < n && v[used].rank != UINT_MAX && v[used].hi > v[used].lo)
        used++;
    return used >= min_used ? used : 0;
}

/* Whole extents alone first (as few partly used extents mapped as can be); the free ends of
 * partly used extents only when whole extents cannot cover the request. */
static size_t choose(const gml_heap *h, piece_vec *v, size_t need, gml_stitch_strategy strategy,
                     size_t *lack, size_t *partial)
{
    size_t used = choose_pieces(h, v->v, v->n, need, strategy, false, true, 2, lack, partial);
    return used ? used : choose_pieces(h, v->v, v->n, need, strategy, true, true, 2, lack, partial);
}

/* One piece alone for `need` bytes from its first extent boundary up: its whole extents, with
 * `ends` its tail too (giving exactly need), else whole extents only (the overshoot below one
 * extent); 1 with the piece's [lo, hi) set, or 0. */
static size_t choose_one(const gml_heap *h, piece *p, size_t need, bool ends)
{
    uintptr_t top = ends ? p->e : p->b2;
    if (top - p->b1 < need)
        return 0;
    p->lo = p->b1;
    p->hi = p->b1 + need;
    if (!ends)
        p->hi = gml_extent_hi(h, p->hi - 1);
    return 1;
}

/* What a patch maps after its window for `need` bytes: as choose, but the range begins on an
 * extent boundary (no head) and one piece may do. */
static size_t choose_after(const gml_heap *h, piece_vec *v, size_t need,
                           gml_stitch_strategy strategy)
{
    size_t lack, partial;
    for (int ends = 0; ends < 2; ends++) {
        size_t used = v->n == 1 ? choose_one(h, &v->v[0], need, ends)
                                : choose_pieces(h, v->v, v->n, need, strategy, ends, false, 1,
                                                &lack, &partial);
        if (used)
            return used;
    }
    return 0;
}

/* The chunks of the extents covering [lo, hi) appended to slots at *k. */
static void add_extents(const gml_heap *h, uintptr_t lo, uintptr_t hi, uint32_t *slots, size_t *k)
{
    for (size_t s = gml_slot_of(h, gml_extent_lo(h, lo)); s < gml_slot_of(h, gml_extent_hi(h, hi - 1)); s++)
        slots[(*k)++] = (uint32_t)s;
}

/* Takes a free block that fits as a LIVE block: the caller's best fit missed, but a growth (ours,
 * or one whose failed run dropped the caller's lock while another thread freed) may have made
 * one; after our growth also as a run of the stream's block and ready ones, which the growth
 * extended to cover the request and a stitch cannot take as one piece (joined: gml_join_for; the
 * pool tried that join before stitching).  Also what keeps choose_pieces' head below need.  False
 * when none fits. */
static bool take_fit(gml_heap *h, gml_bin *bin, size_t need, size_t req, gml_block **out, int *rc,
                     bool grown)
{
    gml_block *f = gml_best_fit(h, bin, GML_SPACE_LARGE, need);
    if (!f && grown && gml_join_for(h, bin, GML_SPACE_LARGE, need))
        f = gml_best_fit(h, bin, GML_SPACE_LARGE, need);
    if (!f)
        return false;
    *out = grown ? gml_take_grown(h, f, need, req) : gml_take(h, f, need, req);
    *rc = *out ? GMLAKE_OK : GMLAKE_ERR_NOMEM;
    return true;
}

/* Frees a record that was never published (its parts already home). */
static void drop_record(gml_sblock *sb)
{
    free(sb->slots);
    free(sb);
}

/* Publishes stitched block sb, mapped from va on, as the live block for req: pinned, on the LRU,
 * counted. */
static void publish(gml_stitch *st, gml_sblock *sb, uintptr_t va, size_t req, gml_block **out)
{
    sb->b.addr = va + sb->head_off;
    sb->b.req = req;
    sb->b.state = GML_B_VIEW;
    sb->live = true;
    for (uint32_t k = 0; k < sb->nchunks; k++)
        gml_chunk_pin(st->h, sb->slots[k]);
    gml_stitch_link_new(st, sb);
    st->stitches++;
    *out = &sb->b;
}

/* A stitched block's record over `nkeep` chunks kept from another (`keep`, whole extents; none
 * for a new stitch) followed by the extents of pieces v[0..used): its chunks, its tail cut (the
 * last piece's) and the bytes the pieces hand out as its size; NULL on host out of memory. */
static gml_sblock *new_record(const gml_heap *h, const uint32_t *keep, size_t nkeep,
                              const piece_vec *v, size_t used)
{
    size_t chunks = nkeep;
    for (size_t i = 0; i < used; i++)
        chunks += (gml_extent_hi(h, v->v[i].hi - 1) - gml_extent_lo(h, v->v[i].lo)) >> h->chunk_shift;
    gml_sblock *sb = calloc(1, sizeof *sb);
    uint32_t *slots = sb ? malloc(chunks * sizeof *slots) : NULL;
    if (!slots) {
        free(sb);
        return NULL;
    }
    STAILQ_INIT(&sb->parts);
    if (nkeep)
        memcpy(slots, keep, nkeep * sizeof *slots);
    size_t k = nkeep;
    for (size_t i = 0; i < used; i++) {
        add_extents(h, v->v[i].lo, v->v[i].hi, slots, &k);
        sb->b.size += v->v[i].hi - v->v[i].lo;
    }
    sb->slots = slots;
    sb->nchunks = (uint32_t)chunks;
    if (used)
        sb->tail_cut = gml_extent_hi(h, v->v[used - 1].hi - 1) - v->v[used - 1].hi;
    return sb;
}

/* The stitched block a patch makes from window w and the pieces after it (used of v, in order),
 * in w's block's reservation; NULL on host out of memory. */
static gml_sblock *patched_record(const gml_heap *h, const gml_window *w, const piece_vec *v,
                                  size_t used)
{
    gml_sblock *nb = new_record(h, w->sb->slots + w->lo, w->hi - w->lo, v, used);
    if (!nb)
        return NULL;
    nb->head_off = w->lo ? 0 : w->sb->head_off;
    nb->b.size += w->bytes;
    nb->res_va = w->sb->res_va;
    nb->res_bytes = w->sb->res_bytes;
    return nb;
}

/* The window's part of its block, as a record of its own to carve it with (parts on its list). */
static void window_record(const gml_window *w, gml_sblock *wb)
{
    *wb = (gml_sblock){.slots = w->sb->slots + w->lo, .nchunks = w->hi - w->lo,
                       .head_off = w->lo ? 0 : w->sb->head_off};
    STAILQ_INIT(&wb->parts);
}

/* A patch (stitch.h): GMLAKE_OK with *out, GMLAKE_ERR_NOMEM when the window cannot be completed
 * (nothing changed: a stitch follows), GMLAKE_ERR_DEVICE when the driver failed (the block the
 * window was in is gone, its parts home). */
static int patch(gml_stitch *st, gml_bin *bin, size_t need, size_t req, const gml_window *w,
                 gml_block **out)
{
    gml_heap *h = st->h;
    gml_sblock *sb = w->sb, wb;
    window_record(w, &wb);
    uintptr_t va = sb->b.addr - sb->head_off; /* where sb's mapping begins */
    piece_vec v = {0};
    size_t used = 0;
    if (w->bytes < need) { /* what the window lacks, from the free memory outside it */
        if (!gml_stitch_carve(st, &wb))
            return GMLAKE_ERR_NOMEM;
        bool ok = collect_pieces(h, bin, &v);
        used = ok ? choose_after(h, &v, need - w->bytes, st->strategy) : 0;
        gml_stitch_parts_home(st, &wb, NULL);
        if (!used) {
            gml_vec_free(&v);
            return GMLAKE_ERR_NOMEM;
        }
    }
    gml_sblock *nb = patched_record(h, w, &v, used);
    gml_vec_free(&v);
    uintptr_t nva = va + ((size_t)w->lo << h->chunk_shift);
    if (!nb)
        return GMLAKE_ERR_NOMEM;
    if (nva + ((size_t)nb->nchunks << h->chunk_shift) > sb->res_va + sb->res_bytes ||
        !gml_stitch_carve(st, nb)) { /* no room after the window, or host out of memory */
        drop_record(nb);
        return GMLAKE_ERR_NOMEM;
    }
    gml_stitch_unlink_for_patch(st, sb);
    TAILQ_INSERT_TAIL(&st->making, nb, lru);
    gml_sblock_vec evict = {0}; /* the auto GC's bounds, with nb counted, as for a new stitch */
    if (gml_stitch_evict_pick(st, false, &evict))
        st->churns++;
    size_t win = w->hi - w->lo, after = nb->nchunks - win;
    gml_heap_unlock(h);
    /* sb's extents outside the window leave its range (its last free's work has passed), each
     * tried; then what the window lacks is mapped after it, unless an extent stayed mapped where
     * it would go (the patch fails, and the range is left reserved, as a failed teardown's) */
    bool front = gml_stitch_unmap(h, va, sb->slots, w->lo);
    bool back = gml_stitch_unmap(h, nva + (win << h->chunk_shift), sb->slots + w->hi,
                                 sb->nchunks - w->hi);
    bool unmapped = front && back;
    int rc = !unmapped ? GMLAKE_ERR_DEVICE
             : after   ? gml_stitch_map_at(h, nva + (win << h->chunk_shift), nb->slots + win, after)
                       : GMLAKE_OK;
    if (rc != GMLAKE_OK && (!gml_stitch_unmap(h, nva, nb->slots, win) || !unmapped ||
                            gml_dev_va_free(h->dev, nb->res_va, nb->res_bytes)))
        unmapped = false;
    if (!unmapped)
        gml_stitch_warn_kept(sb, "unmapping part of");
    gml_stitch_evict_calls(st, &evict);
    gml_heap_relock(h);
    gml_stitch_evict_done(st, &evict);
    gml_stitch_unlinked_done(st, sb);
    st->patching--; /* counted below: an eviction, or a patch */
    TAILQ_REMOVE(&st->making, nb, lru);
    if (rc != GMLAKE_OK) { /* sb's mapping is gone (or its range left reserved): a teardown */
        st->evictions++;
        gml_stitch_parts_home(st, nb, NULL);
        drop_record(nb);
        return rc;
    }
    publish(st, nb, nva, req, out);
    st->patches++;
    st->churns++; /* a cached block used up for a new one: churn, as a teardown is */
    return GMLAKE_OK;
}

int gml_stitch_alloc(gml_stitch *st, gml_bin *bin, size_t need, size_t req, bool may_grow,
                     gml_block **out)
{
    gml_heap *h = st->h;
    if (!st->enabled)
        return GMLAKE_ERR_NOMEM;
    if (gml_stitch_cache_take(st, bin, need, req, out) == GMLAKE_OK)
        return GMLAKE_OK;
    piece_vec v = {0};
    int rc = GMLAKE_ERR_NOMEM;
    size_t lack, partial, used = 0;
    if (take_fit(h, bin, need, req, out, &rc, false))
        return rc;
    gml_window w; /* a stale cached block's window, completed, costs less than a new stitch */
    if (st->patch && gml_stitch_window(st, bin, need, &w) &&
        (rc = patch(st, bin, need, req, &w, out)) != GMLAKE_ERR_NOMEM)
        return rc;
    rc = GMLAKE_ERR_NOMEM;
    if (!collect_pieces(h, bin, &v))
        goto out;
    used = choose(h, &v, need, st->strategy, &lack, &partial);
    /* before new memory, the other streams' free memory, whose work may still run, by a wait on
     * the GPU (their frees are pending where the GPU runs far behind the host) */
    if (!used && st->borrow && may_grow && lack && need >= h->reserved / GML_BORROW_SHARE &&
        gml_borrow_all(h, bin, GML_SPACE_LARGE, lack)) {
        st->borrow_alls++;
        if ((rc = gml_stitch_cache_take(st, bin, need, req, out)) == GMLAKE_OK ||
            take_fit(h, bin, need, req, out, &rc, false))
            goto out;
        rc = GMLAKE_ERR_NOMEM;
        if (!collect_pieces(h, bin, &v))
            goto out;
        used = choose(h, &v, need, st->strategy, &lack, &partial);
    }
    /* grow what the pieces lack, as whole chunks (growth counts the whole extents itself); a
     * second time when the growth merged the block the range would begin with and the one it
     * would end with (one block gives one end only), so the pieces fall short again */
    for (int round = 0; !used && round < 2; round++) {
        if (!may_grow || !lack)
            goto out;
        rc = gml_grow(h, bin, GML_SPACE_LARGE, GML_GROW_CHUNKS, need - partial);
        if (rc != GMLAKE_OK)
            goto out;
        if (take_fit(h, bin, need, req, out, &rc, true))
            goto out;
        rc = GMLAKE_ERR_NOMEM;
        if (!collect_pieces(h, bin, &v))
            goto out;
        used = choose(h, &v, need, st->strategy, &lack, &partial);
    }
    if (!used)
        goto out;
    gml_sblock *sb = new_record(h, NULL, 0, &v, used);
    if (!sb)
        goto out;
    sb->head_off = v.v[0].lo - gml_extent_lo(h, v.v[0].lo);
    uintptr_t va;
    rc = gml_stitch_carve(st, sb) ? GMLAKE_OK : GMLAKE_ERR_NOMEM;
    if (rc == GMLAKE_OK) {
        /* the parts are HELD: nothing else hands them out, releases or rewrites their slots, so
         * the driver calls run without the lock; so do the teardowns the auto GC picks for the
         * bounds with this block counted (torn down even if its map fails) */
        TAILQ_INSERT_TAIL(&st->making, sb, lru);
        gml_sblock_vec evict = {0};
        if (gml_stitch_evict_pick(st, false, &evict))
            st->churns++;
        gml_heap_unlock(h);
        rc = gml_stitch_map(h, sb->slots, sb->nchunks, &va);
        gml_stitch_evict_calls(st, &evict);
        gml_heap_relock(h);
        gml_stitch_evict_done(st, &evict);
        TAILQ_REMOVE(&st->making, sb, lru);
        if (rc != GMLAKE_OK)
            gml_stitch_parts_home(st, sb, NULL);
    }
    if (rc != GMLAKE_OK) {
        drop_record(sb);
        goto out;
    }
    sb->res_va = va;
    sb->res_bytes = gml_stitch_reserve_bytes(h, sb->nchunks);
    publish(st, sb, va, req, out);
out:
    gml_vec_free(&v);
    return rc;
}
