/* test_extents.c — physical memory in extents of several sizes (one handle each): growth makes
 * few large extents, release frees whole unpinned extents only, stitching maps whole extents
 * across mixed sizes, the checkers know extents. */
#include "heap_helpers.h"

static const gml_stream S1 = 0x1000;

static void grow(hfix *f, gml_bin *bin, size_t bytes)
{
    cr_assert_eq(gml_grow(&f->h, bin, GML_SPACE_LARGE, GML_GROW_BLOCK, bytes), GMLAKE_OK);
}

Test(extents, growth_makes_few_large_extents)
{
    hfix f;
    hf_make_ext(&f, 64 * MiB, 8 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    grow(&f, s1, 20 * MiB);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_CHUNK_CREATE), 3, "8 + 8 + 4 MiB");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_MAP), 3, "one map per extent");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_SET_ACCESS), 1, "one set_access over the run");
    size_t s0 = gml_slot_of(&f.h, f.h.arena);
    cr_assert_eq(gml_extent_len(&f.h, s0), 4);
    cr_assert_eq(gml_extent_head(&f.h, s0 + 5), s0 + 4);
    cr_assert_eq(gml_extent_len(&f.h, s0 + 9), 2);
    cr_assert_eq(gml_sim_bytes_in_use(f.dev), 20 * MiB);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(extents, release_frees_whole_unpinned_extents_only)
{
    hfix f;
    hf_make_ext(&f, 64 * MiB, 8 * MiB);
    grow(&f, f.h.ready, 24 * MiB); /* extents [0, 8) [8, 16) [16, 24) */
    gml_block *l = hf_take(&f, f.h.ready, 3 * MiB); /* [21, 24): the last extent is not whole */
    size_t pinned = gml_slot_of(&f.h, f.h.arena + 2 * MiB);
    gml_chunk_pin(&f.h, pinned); /* and the first one is pinned */
    cr_assert_eq(gml_release_free_chunks(&f.h), 4, "only the middle extent");
    cr_assert_eq(f.h.reserved, 16 * MiB);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_CHUNK_RELEASE), 1, "one handle");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_UNMAP), 1);
    gml_chunk_unpin(&f.h, pinned);
    hf_check(&f, 0);
    hf_put(&f, l, f.h.ready);
    cr_assert_eq(gml_release_free_chunks(&f.h), 8);
    cr_assert_eq(f.h.reserved, 0);
    cr_assert_eq(gml_sim_bytes_in_use(f.dev), 0);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(extents, a_stitch_maps_whole_extents_of_mixed_sizes)
{
    hfix f;
    hf_make_ext(&f, 128 * MiB, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    /* free extents of 8, 4 and 2 MiB, separated by live ones */
    size_t sizes[] = {8 * MiB, 2 * MiB, 4 * MiB, 2 * MiB, 2 * MiB, 2 * MiB};
    gml_block *v[6];
    for (int i = 0; i < 6; i++) {
        grow(&f, s1, sizes[i]);
        v[i] = hf_take(&f, s1, sizes[i]);
    }
    for (int i = 0; i < 6; i += 2)
        hf_put(&f, v[i], s1);
    hf_check(&f, 0);
    uint64_t maps = hf_calls(&f, GMLAKE_DC_MAP), reserved = f.h.reserved;
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 10 * MiB, 10 * MiB, false, &b), GMLAKE_OK);
    cr_assert_eq(f.h.reserved, reserved, "no growth");
    cr_assert_eq(b->size, 12 * MiB, "8 + 4: whole extents, the overshoot below one extent");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_MAP) - maps, 2, "one map per extent");
    hf_check(&f, 1);
    gml_stitch_free(&f.st, b, s1);
    uint64_t unmaps = hf_calls(&f, GMLAKE_DC_UNMAP);
    cr_assert_eq(gml_stitch_gc(&f.st, true), 1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_UNMAP) - unmaps, 2, "one unmap per extent");
    hf_check(&f, 0);
    hf_free(&f);
}

Test(extents, the_checker_finds_a_broken_extent)
{
    hfix f;
    hf_make_ext(&f, 64 * MiB, 8 * MiB);
    grow(&f, f.h.ready, 8 * MiB);
    size_t s0 = gml_slot_of(&f.h, f.h.arena);
    f.h.slots[s0 + 2].head = (uint32_t)(s0 + 1);
    char why[256];
    cr_assert_eq(gml_heap_check(&f.h, NULL, 0, why, sizeof why), GMLAKE_ERR_CORRUPT);
    cr_assert(strstr(why, "extent"), "%s", why);
    f.h.slots[s0 + 2].head = (uint32_t)s0;
    hf_check(&f, 0);
    hf_free(&f);
}
