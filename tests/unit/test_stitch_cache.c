/* test_stitch_cache.c — stitch/ on a heap through stitching's own API: a stitch combines free
 * chunks and pins them, the cache serves a request again without device calls, its size index
 * picks the smallest fitting block (most recently used among equals), an undo returns every
 * carved part to the bin it came from.  Both checkers run after every step. */
#include "heap_helpers.h"

static const gml_stream S1 = 0x1000;

/* n single-chunk blocks on bin, every other one freed (holes at even i); returns the bases. */
static void holes(hfix *f, gml_bin *bin, int n, uintptr_t *addr)
{
    cr_assert_eq(gml_grow(&f->h, bin, GML_SPACE_LARGE, GML_GROW_BLOCK, (size_t)n * 2 * MiB),
                 GMLAKE_OK);
    gml_block *v[32];
    for (int i = n - 1; i >= 0; i--) { /* takes come from the tail */
        v[i] = hf_take(f, bin, 2 * MiB);
        addr[i] = v[i]->addr;
    }
    for (int i = 0; i < n; i += 2)
        hf_put(f, v[i], bin);
    hf_check(f, 0);
}

Test(stitch_cache, a_stitch_combines_chunks_and_the_cache_serves_it_again)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    uintptr_t a[8];
    holes(&f, s1, 8, a);
    uint64_t reserved = f.h.reserved;
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 8 * MiB, 8 * MiB, false, &b), GMLAKE_OK);
    cr_assert_eq(b->state, GML_B_VIEW);
    cr_assert(!gml_in_arena(&f.h, b->addr), "a fresh range");
    cr_assert_eq(f.h.reserved, reserved, "no growth");
    cr_assert_eq(f.st.stitches, 1);
    for (int i = 0; i < 8; i += 2)
        cr_assert_eq(f.h.slots[gml_slot_of(&f.h, a[i])].pins, 1, "its chunks are pinned");
    hf_check(&f, 1);
    gml_stitch_free(&f.st, b, s1);
    hf_check(&f, 0);
    uint64_t maps = hf_calls(&f, GMLAKE_DC_MAP);
    gml_block *again = NULL;
    cr_assert_eq(gml_stitch_cache_take(&f.st, s1, 7 * MiB, 7 * MiB, &again), GMLAKE_OK);
    cr_assert_eq(again, b, "the cached block is taken again");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_MAP), maps, "no device call");
    cr_assert_eq(f.st.reuses, 1);
    hf_check(&f, 1);
    gml_stitch_free(&f.st, again, s1);
    cr_assert_eq(gml_stitch_gc(&f.st, true), 1);
    cr_assert_eq(f.st.count, 0);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(stitch_cache, the_size_index_picks_the_smallest_fit_most_recent_first)
{
    hfix f;
    hf_make(&f, 128 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    uintptr_t a[24];
    holes(&f, s1, 24, a);
    gml_block *x6a, *x6b, *x8;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 8 * MiB, 8 * MiB, false, &x8), GMLAKE_OK);
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 6 * MiB, 6 * MiB, false, &x6a), GMLAKE_OK);
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 6 * MiB, 6 * MiB, false, &x6b), GMLAKE_OK);
    hf_check(&f, 3);
    gml_stitch_free(&f.st, x8, s1);
    gml_stitch_free(&f.st, x6b, s1);
    gml_stitch_free(&f.st, x6a, s1); /* the most recently freed of the two 6 MiB blocks */
    hf_check(&f, 0);
    gml_block *t = NULL;
    cr_assert_eq(gml_stitch_cache_take(&f.st, s1, 6 * MiB, 6 * MiB, &t), GMLAKE_OK);
    cr_assert_eq(t, x6a, "smallest fit, most recently used among equals");
    cr_assert_eq(gml_stitch_cache_take(&f.st, s1, 5 * MiB + 1, 5 * MiB + 512, &t), GMLAKE_OK);
    cr_assert_eq(t, x6b);
    cr_assert_eq(gml_stitch_cache_take(&f.st, s1, 5 * MiB, 5 * MiB, &t), GMLAKE_ERR_NOMEM,
                 "8 MiB > 5 MiB x reuse_limit 1.25");
    cr_assert_eq(gml_stitch_cache_take(&f.st, s1, 7 * MiB, 7 * MiB, &t), GMLAKE_OK);
    cr_assert_eq(t, x8);
    hf_check(&f, 3);
    hf_free(&f);
}

Test(stitch_cache, an_undo_returns_parts_to_the_bin_they_came_from)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    /* two free 4 MiB blocks of S1 separated by live blocks */
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 12 * MiB), GMLAKE_OK);
    gml_block *v3 = hf_take(&f, s1, 2 * MiB), *v2 = hf_take(&f, s1, 4 * MiB);
    gml_block *v1 = hf_take(&f, s1, 2 * MiB), *v0 = hf_take(&f, s1, 4 * MiB);
    uintptr_t a0 = v0->addr, a2 = v2->addr;
    hf_put(&f, v0, s1);
    hf_put(&f, v2, s1);
    hf_check(&f, 0);
    /* no record left: the first piece (a whole block) is carved, the second needs a record */
    gml_block_vec stash = {0};
    hf_records_exhaust(&f, &stash);
    gml_block *out = NULL;
    uint64_t maps = hf_calls(&f, GMLAKE_DC_MAP), unmaps = hf_calls(&f, GMLAKE_DC_UNMAP);
    int rc = gml_stitch_alloc(&f.st, s1, 6 * MiB, 6 * MiB, false, &out);
    hf_records_restore(&f, &stash);
    cr_assert_eq(rc, GMLAKE_ERR_NOMEM);
    hf_check(&f, 0);
    cr_assert_eq(gml_block_at(&f.h, a0)->bin, s1, "a rolled-back part went to another bin");
    cr_assert_eq(gml_block_at(&f.h, a2)->bin, s1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_UNMAP) - unmaps, hf_calls(&f, GMLAKE_DC_MAP) - maps,
                 "the mapping was undone");
    cr_assert_eq(f.st.count, 0);
    (void)v1, (void)v3;
    hf_free(&f);
}
