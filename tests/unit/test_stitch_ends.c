/* test_stitch_ends.c — randomized property tests of stitched ranges that enter partly used extents
 * (stitch/stitch.c choose_pieces, stitch/cache.c): the heap and stitching driven without the pool
 * and, separately, the pool on several streams, on a simulated device with host memory behind the
 * chunks, over uniform and share-based extents.  Every live block and every live stitched block
 * gets its own pattern (one word per 512-byte granule, the allocation grain), checked before it is
 * freed and at the end, so any byte two of them share, or a stitched range entered at the wrong
 * offset, shows; the heap and stitch checkers run after every step.  Fixed seeds. */
#include <stdint.h>
#include <string.h>

#include "heap_helpers.h"
#include "helpers.h"

static const gml_stream S1 = 0x1000, S2 = 0x2000;
#define GRAIN 512

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
    *s = x;
    return x * UINT64_C(2685821657736338717);
}

static size_t rnd(uint64_t *s, size_t lo, size_t hi) /* [lo, hi] */
{
    return lo + (size_t)(rng_next(s) % (hi - lo + 1));
}

static uint64_t pat(uint64_t id, size_t off) { return (id << 40) ^ (off / GRAIN) ^ UINT64_C(0x5a5a000000); }

static void fill(uintptr_t a, size_t size, uint64_t id)
{
    for (size_t off = 0; off < size; off += GRAIN)
        *(volatile uint64_t *)(a + off) = pat(id, off);
}

static void verify(uintptr_t a, size_t size, uint64_t id, const char *what)
{
    for (size_t off = 0; off < size; off += GRAIN) {
        uint64_t got = *(volatile uint64_t *)(a + off);
        cr_assert_eq(got, pat(id, off), "%s %#lx (id %lu, size %zu) at +%zu holds %#lx",
                     what, (unsigned long)a, (unsigned long)id, size, off, (unsigned long)got);
    }
}

/* ---- the heap and stitching without the pool ---- */

typedef struct obj {
    gml_block *b;
    bool view;  /* a stitched block */
    uint64_t id;
    gml_bin *bin; /* the request's stream */
} obj;

typedef struct run {
    hfix f;
    gml_bin *bins[3]; /* s1, s2, ready */
    obj objs[256];
    size_t n, views;
    uint64_t next_id, rng;
    size_t stitched, reused, ended; /* stitches made, taken from the cache, with head_off/tail_cut */
} run;

static gml_sblock *sb_of(gml_block *b) { return (gml_sblock *)((char *)b - offsetof(gml_sblock, b)); }

static void check(run *r) { hf_check(&r->f, r->views); }

/* The home bytes of a live stitched block hold what was written through its range: its parts, in
 * virtual order, are the bytes it hands out. */
static void verify_view(const obj *o)
{
    gml_sblock *sb = sb_of(o->b);
    verify(o->b->addr, o->b->size, o->id, "stitched block");
    size_t voff = 0;
    gml_block *q;
    STAILQ_FOREACH(q, &sb->parts, held) {
        for (size_t off = 0; off < q->size; off += GRAIN)
            cr_assert_eq(*(volatile uint64_t *)(q->addr + off), pat(o->id, voff + off),
                         "stitched block %#lx (head_off %zu, tail_cut %zu): home part %#lx at +%zu "
                         "is not its byte %zu", (unsigned long)o->b->addr, sb->head_off,
                         sb->tail_cut, (unsigned long)q->addr, off, voff + off);
        voff += q->size;
    }
    cr_assert_eq(voff, o->b->size, "parts cover the size");
}

static void add(run *r, gml_block *b, bool view, gml_bin *bin)
{
    cr_assert_lt(r->n, sizeof r->objs / sizeof r->objs[0]);
    obj o = {b, view, ++r->next_id, bin};
    fill(b->addr, b->size, o.id);
    r->objs[r->n++] = o;
    if (view) {
        r->views++;
        verify_view(&r->objs[r->n - 1]);
        cr_assert(gml_stitch_owns(&r->f.st, b->addr));
        cr_assert(gml_stitch_owns(&r->f.st, b->addr + b->size - 1));
    } else {
        cr_assert(gml_vec_push(&r->f.used, b));
    }
}

static void drop(run *r, size_t i, gml_bin *to)
{
    obj o = r->objs[i];
    r->objs[i] = r->objs[--r->n];
    if (o.view) {
        verify_view(&o);
        r->views--;
        gml_stitch_free(&r->f.st, o.b, to);
    } else {
        verify(o.b->addr, o.b->size, o.id, "block");
        hf_put(&r->f, o.b, to);
    }
}

static void take(run *r, gml_bin *bin, size_t size)
{
    gml_heap *h = &r->f.h;
    int space = size < h->small_limit ? GML_SPACE_SMALL : GML_SPACE_LARGE;
    size_t need = GML_ROUND_UP(size, h->round);
    gml_block *b = gml_best_fit(h, bin, space, need);
    if (!b) {
        if (space == GML_SPACE_SMALL)
            (void)gml_small_refill(h, bin);
        else
            (void)gml_grow(h, bin, space, GML_GROW_BLOCK, need);
        b = gml_best_fit(h, bin, space, need);
    }
    if (!b)
        return;
    b = gml_take(h, b, need, size);
    cr_assert_not_null(b);
    add(r, b, false, bin);
}

static void stitch(run *r, gml_bin *bin, size_t size, bool may_grow)
{
    gml_heap *h = &r->f.h;
    size_t need = GML_ROUND_UP(size, h->round);
    uint64_t reuses = r->f.st.reuses;
    gml_block *b = gml_best_fit(h, bin, GML_SPACE_LARGE, need);
    if (b) { /* the pool stitches only when no block fits */
        take(r, bin, size);
        return;
    }
    int rc = gml_stitch_alloc(&r->f.st, bin, need, size, may_grow, &b);
    cr_assert(rc == GMLAKE_OK || rc == GMLAKE_ERR_NOMEM, "stitch %zu: %d", need, rc);
    if (rc != GMLAKE_OK)
        return;
    cr_assert_geq(b->size, need);
    if (b->state == GML_B_LIVE) { /* growth made one block large enough */
        add(r, b, false, bin);
        return;
    }
    cr_assert_eq(b->state, GML_B_VIEW);
    gml_sblock *sb = sb_of(b);
    if (r->f.st.reuses > reuses) {
        r->reused++;
        cr_assert_leq((double)b->size, (double)need * r->f.st.reuse_limit, "reuse within the limit");
    } else {
        r->stitched++;
        /* the overshoot of a run stays below one extent */
        cr_assert_lt(b->size - need, h->extent_chunks << h->chunk_shift, "overshoot %zu",
                     b->size - need);
    }
    if (sb->head_off || sb->tail_cut)
        r->ended++;
    add(r, b, true, bin);
}

typedef struct config {
    size_t extent_size;
    unsigned share;
    gml_stitch_strategy strategy;
    unsigned auto_gc;
} config;

static void heap_run(const config *c, uint64_t seed, int steps)
{
    run *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    hf_make_dev(&r->f, 96 * MiB, c->extent_size, c->share, true);
    r->f.st.strategy = c->strategy;
    r->f.st.auto_gc = c->auto_gc;
    r->bins[0] = gml_bin_get(&r->f.h, S1);
    r->bins[1] = gml_bin_get(&r->f.h, S2);
    r->bins[2] = r->f.h.ready;
    r->rng = seed;
    uint64_t *g = &r->rng;
    for (int step = 0; step < steps; step++) {
        unsigned op = (unsigned)rnd(g, 0, 99);
        gml_bin *bin = r->bins[rnd(g, 0, 1)];
        if (op < 30) {
            /* sizes that leave sub-chunk and sub-extent gaps */
            size_t size = rnd(g, 0, 3) ? rnd(g, 1 * MiB, 7 * MiB) : rnd(g, 7 * MiB, 20 * MiB);
            take(r, bin, size - size % 256);
        } else if (op < 38) {
            take(r, bin, rnd(g, 1, 1 * MiB - 1));
        } else if (op < 60) {
            stitch(r, bin, rnd(g, 2 * MiB, 40 * MiB), rnd(g, 0, 2) == 0);
        } else if (op < 90) {
            if (r->n) {
                size_t i = rnd(g, 0, r->n - 1);
                /* back to its own stream's bin mostly, some to the ready bin */
                drop(r, i, rnd(g, 0, 3) ? r->objs[i].bin : r->bins[2]);
            }
        } else if (op < 93) {
            gml_stitch_gc(&r->f.st, rnd(g, 0, 1));
        } else if (op < 96) {
            gml_release_free_chunks(&r->f.h);
        } else if (op < 98) {
            (void)gml_small_refill(&r->f.h, r->bins[rnd(g, 0, 2)]);
        } else {
            gml_small_reclaim(&r->f.h);
        }
        check(r);
        size_t avail = gml_stitch_largest_available(&r->f.st);
        if (avail) {
            gml_heap_free fs;
            gml_heap_free_stats(&r->f.h, &fs);
            cr_assert_leq(avail, fs.free_bytes, "an available cached block is free memory");
        }
    }
    cr_assert_gt(r->stitched, 0);
    cr_assert_gt(r->ended, 0, "some stitched ranges entered partly used extents");
    while (r->n)
        drop(r, r->n - 1, r->bins[2]);
    check(r);
    gml_stitch_gc(&r->f.st, true);
    check(r);
    cr_assert_eq(r->f.st.count, 0);
    r->f.h.synced_seq = r->f.h.seq; /* as after a device synchronisation */
    gml_promote(&r->f.h, NULL, GML_SPACE_LARGE, 0);
    gml_release_free_chunks(&r->f.h);
    check(r);
    cr_assert_eq(r->f.h.reserved, 0, "everything released");
    hf_free(&r->f);
    free(r);
}

static const config configs[] = {
    {4 * MiB, 0, GML_STITCH_LARGEST, 256},  {8 * MiB, 0, GML_STITCH_LARGEST, 6},
    {16 * MiB, 0, GML_STITCH_BESTFIT, 256}, {8 * MiB, 0, GML_STITCH_BESTFIT, 4},
    {16 * MiB, 8, GML_STITCH_LARGEST, 8},   {16 * MiB, 12, GML_STITCH_BESTFIT, 256},
    {2 * MiB, 0, GML_STITCH_LARGEST, 8},
};

Test(stitch_ends, heap_random_uniform_and_shared_extents, .timeout = 120)
{
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
        for (uint64_t seed = 1; seed <= 2; seed++)
            heap_run(&configs[c], seed * UINT64_C(0x9e3779b97f4a7c15) + c, 700);
}

/* ---- the pool, on several streams ---- */

static config pool_config; /* read by pool_tweak */

static void pool_tweak(gml_pool_settings *s)
{
    s->extent_size = pool_config.extent_size;
    s->extent_share = pool_config.share;
    s->strategy = pool_config.strategy;
    s->auto_gc = pool_config.auto_gc;
}

typedef struct pobj {
    uintptr_t ptr;
    size_t size;
    gml_stream stream;
    uint64_t id;
} pobj;

/* With `leave`, the pool is destroyed with its allocations live (stitched ones included). */
static void pool_run(const config *c, uint64_t seed, int steps, bool leave)
{
    pool_config = *c;
    fixture fx = fx_make(96 * MiB, true, pool_tweak);
    gml_pool *p = fx.pool;
    static const gml_stream streams[] = {0, S1, S2};
    static pobj objs[256];
    size_t n = 0;
    uint64_t g = seed, next_id = 0;
    for (int step = 0; step < steps; step++) {
        unsigned op = (unsigned)rnd(&g, 0, 99);
        if (op < 50 && n < sizeof objs / sizeof objs[0]) {
            size_t size = rnd(&g, 0, 4) == 0   ? rnd(&g, 1, 1 * MiB)
                          : rnd(&g, 0, 3) == 0 ? rnd(&g, 8 * MiB, 36 * MiB)
                                               : rnd(&g, 1 * MiB, 8 * MiB);
            gml_stream s = streams[rnd(&g, 0, 2)];
            uintptr_t ptr = 0;
            int rc = gml_pool_alloc(p, size, s, &ptr);
            cr_assert(rc == GMLAKE_OK || rc == GMLAKE_ERR_NOMEM, "alloc %zu: %d", size, rc);
            if (rc == GMLAKE_OK) {
                cr_assert_eq(gml_pool_alloc_size(p, ptr), size);
                cr_assert(gml_pool_owns(p, ptr) && gml_pool_owns(p, ptr + size - 1));
                objs[n] = (pobj){ptr, size, s, ++next_id};
                fill(ptr, size, objs[n].id);
                n++;
            }
        } else if (op < 92) {
            if (n) {
                size_t i = rnd(&g, 0, n - 1);
                pobj o = objs[i];
                objs[i] = objs[--n];
                verify(o.ptr, o.size, o.id, "allocation");
                if (o.size > GRAIN) { /* inside it, a stitched range's included: no allocation */
                    cr_assert_eq(gml_pool_alloc_size(p, o.ptr + GRAIN), 0);
                    cr_assert_eq(gml_pool_free(p, o.ptr + GRAIN, o.stream), GMLAKE_ERR_INVALID);
                }
                gml_stream s = rnd(&g, 0, 5) ? o.stream : streams[rnd(&g, 0, 2)];
                cr_assert_eq(gml_pool_free(p, o.ptr, s), GMLAKE_OK);
            }
        } else if (op < 97) {
            cr_assert_eq(gml_pool_sync(p), GMLAKE_OK);
        } else {
            cr_assert_eq(gml_pool_empty_cache(p), GMLAKE_OK);
        }
        CHECK_POOL(p);
        gmlake_stats st;
        gml_pool_stats(p, &st);
        cr_assert(st.largest_free_bytes <= st.free_bytes && st.stitchable_bytes <= st.free_bytes,
                  "largest %lu, stitchable %lu, free %lu", (unsigned long)st.largest_free_bytes,
                  (unsigned long)st.stitchable_bytes, (unsigned long)st.free_bytes);
    }
    gmlake_stats st;
    gml_pool_stats(p, &st);
    cr_assert_gt(st.stitches, 0);
    if (leave) {
        cr_assert_gt(st.stitched_blocks, 0);
        fx_free(&fx);
        return;
    }
    while (n) {
        n--;
        verify(objs[n].ptr, objs[n].size, objs[n].id, "allocation");
        cr_assert_eq(gml_pool_free(p, objs[n].ptr, objs[n].stream), GMLAKE_OK);
    }
    cr_assert_eq(gml_pool_empty_cache(p), GMLAKE_OK);
    CHECK_POOL(p);
    gml_pool_stats(p, &st);
    cr_assert_eq(st.reserved_bytes, 0, "everything released");
    fx_free(&fx);
}

Test(stitch_ends, pool_random_streams, .timeout = 120)
{
    for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
        pool_run(&configs[c], UINT64_C(0xbf58476d1ce4e5b9) + c, 800, c == 1);
}

/* A range may begin in the free tail of an extent and end in the free head of the same extent (the
 * handle mapped twice, its bytes handed out once each): E1 = [16, 32) MiB holds L's tail [16, 19),
 * a live block [20, 22) and F's head [22, 32). */
Test(stitch_ends, first_and_last_piece_in_one_extent)
{
    run *r = calloc(1, sizeof *r);
    cr_assert_not_null(r);
    hf_make_dev(&r->f, 64 * MiB, 16 * MiB, 0, true);
    gml_heap *h = &r->f.h;
    gml_bin *s1 = gml_bin_get(h, S1);
    cr_assert_eq(gml_grow(h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 48 * MiB), GMLAKE_OK);
    /* taken from the top down: [34, 48) live, F [22, 34), [20, 22) live, L [15, 20), [0, 15) live */
    size_t sizes[] = {14 * MiB, 12 * MiB, 2 * MiB, 5 * MiB, 15 * MiB};
    gml_block *b[5];
    for (int i = 0; i < 5; i++)
        b[i] = hf_take(&r->f, s1, sizes[i]);
    cr_assert_eq(b[1]->addr - h->arena, 22 * MiB);
    cr_assert_eq(b[3]->addr - h->arena, 15 * MiB);
    r->f.used.n = 0; /* held by the run from here on */
    for (int i = 0; i < 5; i++)
        if (i == 1 || i == 3)
            gml_free_insert(h, b[i], s1);
        else
            add(r, b[i], false, s1);
    check(r);
    gml_block *v = NULL;
    cr_assert_eq(gml_stitch_alloc(&r->f.st, s1, 13 * MiB, 13 * MiB, false, &v), GMLAKE_OK);
    gml_sblock *sb = sb_of(v);
    cr_assert_eq(v->size, 13 * MiB);
    cr_assert_eq(sb->nchunks, 16, "E1 mapped twice");
    cr_assert_eq(sb->slots[0], sb->slots[8]);
    cr_assert_eq(sb->head_off, 6 * MiB);
    cr_assert_eq(sb->tail_cut, 13 * MiB);
    add(r, v, true, s1);
    check(r);
    while (r->n)
        drop(r, r->n - 1, s1);
    check(r);
    hf_free(&r->f);
    free(r);
}

/* The pool stitches after its best fit missed, but its last resort stitches after a failed growth
 * that may have dropped the lock, so a block may fit by then.  A head larger than the request
 * (F [1, 16) MiB: 15 MiB before its extent's end) must not wrap `need - head` around: the request
 * is served, from the block that fits, and growth is not asked for ~2^64 bytes. */
Test(stitch_ends, a_head_larger_than_the_request)
{
    hfix f;
    hf_make_dev(&f, 64 * MiB, 16 * MiB, 0, true);
    gml_heap *h = &f.h;
    gml_bin *s1 = gml_bin_get(h, S1);
    cr_assert_eq(gml_grow(h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 48 * MiB), GMLAKE_OK);
    /* from the top down: [34, 48) live, G [30, 34), [16, 30) live, F [1, 16), [0, 1) live */
    size_t sizes[] = {14 * MiB, 4 * MiB, 14 * MiB, 15 * MiB, 1 * MiB};
    gml_block *b[5];
    for (int i = 0; i < 5; i++)
        b[i] = hf_take(&f, s1, sizes[i]);
    cr_assert_eq(b[3]->addr - h->arena, 1 * MiB);
    hf_put(&f, b[1], s1);
    hf_put(&f, b[3], s1);
    hf_check(&f, 0);
    for (int grow = 1; grow >= 0; grow--) {
        uint64_t reserved = h->reserved;
        gml_block *v = NULL;
        cr_assert_eq(gml_stitch_alloc(&f.st, s1, 8 * MiB, 8 * MiB, grow, &v), GMLAKE_OK,
                     "a block fits (may_grow %d)", grow);
        cr_assert_eq(h->reserved, reserved, "nothing grown");
        cr_assert_geq(v->size, 8 * MiB);
        bool view = v->state == GML_B_VIEW;
        if (!view)
            cr_assert(gml_vec_push(&f.used, v));
        hf_check(&f, view);
        if (view)
            gml_stitch_free(&f.st, v, s1);
        else
            hf_put(&f, v, s1);
        hf_check(&f, 0);
    }
    hf_free(&f);
}

/* A pool destroyed while a stitched allocation is live (its record the live map's head): the map
 * is cleared before stitching frees that record (under ASan a use after free otherwise). */
Test(stitch_ends, destroy_with_a_live_stitched_allocation)
{
    fixture fx = fx_make(32 * MiB, false, NULL);
    uintptr_t a[4];
    for (int i = 0; i < 4; i++)
        a[i] = must_alloc(fx.pool, 8 * MiB, S1);
    must_free(fx.pool, a[0], S1);
    must_free(fx.pool, a[2], S1);
    uintptr_t v = must_alloc(fx.pool, 16 * MiB, S1);
    cr_assert_eq(stats_of(fx.pool).stitches, 1, "stitched from the two free blocks");
    must_free(fx.pool, a[1], S1);
    must_free(fx.pool, a[3], S1);
    cr_assert(gml_pool_owns(fx.pool, v));
    fx_free(&fx);
}

/* gml_stitch_largest_available (the pool's largest free figure: what one request gets without
 * device calls) counts a cached stitched block only when one stream may take it: not when its
 * bytes are free in two streams' bins, which serve neither. */
Test(stitch_ends, largest_available_needs_one_stream)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_heap *h = &f.h;
    gml_bin *s1 = gml_bin_get(h, S1), *s2 = gml_bin_get(h, S2);
    cr_assert_eq(gml_grow(h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 32 * MiB), GMLAKE_OK);
    gml_block *b[4];
    for (int i = 0; i < 4; i++)
        b[i] = hf_take(&f, s1, 8 * MiB);
    hf_put(&f, b[0], h->ready);
    hf_put(&f, b[2], h->ready);
    gml_block *v = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 16 * MiB, 16 * MiB, false, &v), GMLAKE_OK);
    cr_assert_eq(v->state, GML_B_VIEW);
    gml_stitch_free(&f.st, v, s1);
    cr_assert_eq(gml_stitch_largest_available(&f.st), 16 * MiB, "s1 may take it");
    gml_block *x = hf_take(&f, s1, 8 * MiB); /* one half of it, freed on s2 */
    hf_put(&f, x, s2);
    hf_check(&f, 0);
    cr_assert_eq(gml_stitch_cache_take(&f.st, s1, 16 * MiB, 16 * MiB, &v), GMLAKE_ERR_NOMEM);
    cr_assert_eq(gml_stitch_cache_take(&f.st, s2, 16 * MiB, 16 * MiB, &v), GMLAKE_ERR_NOMEM);
    cr_assert_eq(gml_stitch_largest_available(&f.st), 0, "no stream may take it");
    hf_put(&f, b[1], s1);
    hf_put(&f, b[3], s1);
    hf_free(&f);
}

static void uniform_8mib(gml_pool_settings *s)
{
    s->extent_share = 0;
    s->extent_size = 8 * MiB;
}

/* stitchable_bytes counts what a stitched range may begin and end with, not only whole extents */
Test(stitch_ends, stitchable_bytes_count_the_free_ends)
{
    fixture fx = fx_make(64 * MiB, false, uniform_8mib);
    gml_pool *p = fx.pool;
    uintptr_t t = must_alloc(p, 8 * MiB, 0); /* E1 */
    must_free(p, t, 0);
    uintptr_t top = must_alloc(p, 5 * MiB, 0), low = must_alloc(p, 3 * MiB, 0);
    cr_assert_eq(top, low + 3 * MiB, "E1: [0, 3) live, then [3, 8)");
    uintptr_t sep = must_alloc(p, 2 * MiB, 0);
    t = must_alloc(p, 8 * MiB, 0); /* E2 */
    must_free(p, t, 0);
    uintptr_t high = must_alloc(p, 3 * MiB, 0);
    cr_assert_eq(high, t + 5 * MiB, "E2: [0, 5) free, then [5, 8) live");
    must_free(p, top, 0);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.free_bytes, 10 * MiB);
    cr_assert_eq(st.stitchable_bytes, 10 * MiB, "E1's free tail and E2's free head (%lu)",
                 (unsigned long)st.stitchable_bytes);
    uintptr_t s = must_alloc(p, 10 * MiB, 0);
    cr_assert_eq(stats_of(p).reserved_bytes, st.reserved_bytes, "and a stitch gets them");
    must_free(p, s, 0);
    must_free(p, low, 0);
    must_free(p, sep, 0);
    must_free(p, high, 0);
    CHECK_POOL(p);
    fx_free(&fx);
}

/* A stitch's growth that fills the gap between the block it would begin with and the one it would
 * end with merges them: one block cannot give both ends, so the pieces fall short again.  The
 * stitch grows what is still missing instead of failing (after which the pool would grow the
 * whole request). */
Test(stitch_ends, growth_that_merges_the_two_ends_grows_again)
{
    hfix f;
    hf_make_ext(&f, 256 * MiB, 8 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    size_t sizes[] = {8 * MiB, 8 * MiB, 4 * MiB, 8 * MiB, 8 * MiB, 2 * MiB};
    gml_block *v[6]; /* E1 [0, 8), E1b [8, 16), G [16, 20), E2 [20, 28), W [28, 36), S [36, 38) */
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, sizes[i]), GMLAKE_OK);
        v[i] = hf_take(&f, s1, sizes[i]);
    }
    hf_put(&f, v[0], s1);
    gml_block *top = hf_take(&f, s1, 5 * MiB), *low = hf_take(&f, s1, 3 * MiB); /* [3, 8) [0, 3) */
    hf_put(&f, v[3], s1);
    gml_block *high = hf_take(&f, s1, 3 * MiB); /* [25, 28) */
    cr_assert_eq(high->addr, f.h.arena + 25 * MiB);
    hf_put(&f, top, s1);
    hf_put(&f, v[1], s1);      /* [3, 16): E1's free tail, then E1b whole */
    hf_put(&f, v[4], s1);      /* W [28, 36), kept apart from empty slots by S */
    hf_put(&f, v[2], f.h.ready);
    cr_assert_eq(gml_release_free_chunks(&f.h), 2, "G: a gap of two chunks after E1b");
    hf_check(&f, 0);
    /* pieces: 5 (E1's tail) + 8 (E1b) + 8 (W) + 5 (E2's head) = 26 of 30; the 4 MiB growth lands
     * in the gap, next to E1b, and merges [3, 16), the new extent and E2's head [20, 25) */
    uint64_t reserved = f.h.reserved;
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 30 * MiB, 30 * MiB, true, &b), GMLAKE_OK);
    cr_assert_eq(f.h.slots[gml_slot_of(&f.h, f.h.arena + 16 * MiB)].state, GML_SLOT_LARGE,
                 "the growth filled the gap");
    cr_assert_leq(f.h.reserved - reserved, 12 * MiB, "grew %lu MiB for 4 missing",
                  (unsigned long)((f.h.reserved - reserved) >> 20));
    hf_check(&f, b->state == GML_B_VIEW);
    if (b->state == GML_B_VIEW)
        gml_stitch_free(&f.st, b, s1);
    else
        hf_put(&f, b, s1);
    hf_put(&f, low, s1);
    hf_put(&f, high, s1);
    hf_put(&f, v[5], s1);
    hf_check(&f, 0);
    hf_free(&f);
}
