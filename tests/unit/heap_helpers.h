/* heap_helpers.h — a heap (and stitching) on a sim device without the pool, for the tier tests:
 * the tests hold their LIVE blocks in `used` and run the heap checker with them after each step. */
#ifndef GML_TEST_HEAP_HELPERS_H
#define GML_TEST_HEAP_HELPERS_H

#include <criterion/criterion.h>

#include "config/settings.h"
#include "core/heap.h"
#include "stitch/stitch.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

typedef struct hfix {
    gml_device *dev;
    gml_heap h;
    gml_stitch st;
    gml_block_vec used; /* LIVE blocks the test holds */
} hfix;

/* A heap whose extents reach extent_size, and at most 1/share of the memory reserved (0: no such
 * bound); with `backed`, host memory behind the chunks (the simulated device's backed mode). */
static inline void hf_make_dev(hfix *f, size_t capacity, size_t extent_size, unsigned share,
                               bool backed)
{
    *f = (hfix){0};
    gml_sim_config sc = {.capacity = capacity, .backed = backed};
    f->dev = gml_sim_create(&sc);
    cr_assert_not_null(f->dev);
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    s.arena_bytes = capacity * 4;
    s.extent_size = extent_size;
    s.extent_share = share;
    const char *why = NULL;
    cr_assert_eq(gml_heap_init(&f->h, f->dev, &s, &why), GMLAKE_OK, "%s", why);
    cr_assert_eq(gml_stitch_init(&f->st, &f->h, &s, &why), GMLAKE_OK, "%s", why);
}

static inline void hf_make_shared(hfix *f, size_t capacity, size_t extent_size, unsigned share)
{
    hf_make_dev(f, capacity, extent_size, share, false);
}

/* A heap whose extents all reach extent_size (uniform extents). */
static inline void hf_make_ext(hfix *f, size_t capacity, size_t extent_size)
{
    hf_make_shared(f, capacity, extent_size, 0);
}

static inline void hf_make(hfix *f, size_t capacity) { hf_make_ext(f, capacity, 2 * MiB); }

static inline void hf_free(hfix *f)
{
    gml_stitch_destroy(&f->st);
    gml_heap_destroy(&f->h);
    gml_vec_free(&f->used);
    gml_device_destroy(f->dev);
}

/* The heap checker over the test's live blocks and stitching's parts, then stitching's checker. */
static inline void hf_check(hfix *f, size_t live_views)
{
    char why[256];
    gml_block_vec all = {0};
    for (size_t i = 0; i < f->used.n; i++)
        cr_assert(gml_vec_push(&all, f->used.v[i]));
    cr_assert(gml_stitch_parts(&f->st, &all));
    int rc = gml_heap_check(&f->h, all.v, all.n, why, sizeof why);
    gml_vec_free(&all);
    cr_assert_eq(rc, GMLAKE_OK, "heap check: %s", why);
    rc = gml_stitch_check(&f->st, live_views, why, sizeof why);
    cr_assert_eq(rc, GMLAKE_OK, "stitch check: %s", why);
}

/* Takes `size` bytes (rounded to 512) on bin from the best fit; the block is held in f->used. */
static inline gml_block *hf_take(hfix *f, gml_bin *bin, size_t size)
{
    int space = size < f->h.small_limit ? GML_SPACE_SMALL : GML_SPACE_LARGE;
    size_t need = GML_ROUND_UP(size, f->h.round);
    gml_block *b = gml_best_fit(&f->h, bin, space, need);
    cr_assert_not_null(b, "no fit for %zu", size);
    b = gml_take(&f->h, b, need, size);
    cr_assert_not_null(b);
    cr_assert(gml_vec_push(&f->used, b));
    return b;
}

/* Frees a block the test holds into bin. */
static inline gml_block *hf_put(hfix *f, gml_block *b, gml_bin *bin)
{
    for (size_t i = 0; i < f->used.n; i++)
        if (f->used.v[i] == b) {
            f->used.v[i] = f->used.v[--f->used.n];
            return gml_free_insert(&f->h, b, bin);
        }
    cr_assert_fail("block %#lx is not held by the test", (unsigned long)b->addr);
    return NULL;
}

/* Takes every free record and forbids new slabs: the next record the heap needs is missing. */
static inline void hf_records_exhaust(hfix *f, gml_block_vec *stash)
{
    f->h.no_new_slabs = true;
    for (gml_block *x; (x = gml_rec_get(&f->h));)
        cr_assert(gml_vec_push(stash, x));
}

static inline void hf_records_restore(hfix *f, gml_block_vec *stash)
{
    for (size_t i = 0; i < stash->n; i++)
        gml_rec_put(&f->h, stash->v[i]);
    gml_vec_free(stash);
    f->h.no_new_slabs = false;
}

static inline uint64_t hf_calls(hfix *f, int kind) { return f->dev->calls[kind]; }

#endif
