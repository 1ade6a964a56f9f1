/* test_extents.c — physical memory in extents of several sizes (one handle each): growth makes
 * few large extents, release frees whole unpinned extents only, stitching maps whole extents
 * across mixed sizes, the checkers know extents. */
#include <string.h>

#include "heap_helpers.h"

static const gml_stream S1 = 0x1000;

static void grow(hfix *f, gml_bin *bin, size_t bytes)
{
    cr_assert_eq(gml_grow(&f->h, bin, GML_SPACE_LARGE, GML_GROW_BLOCK, bytes), GMLAKE_OK);
}

/* Grows by each size in turn and takes it at once (so no growth extends a free block). */
static void grow_taken(hfix *f, gml_bin *bin, const size_t *sizes, int n, gml_block **v)
{
    for (int i = 0; i < n; i++) {
        grow(f, bin, sizes[i]);
        v[i] = hf_take(f, bin, sizes[i]);
    }
}

/* A stitch of exactly `need` bytes on bin that grows the pool by `grown` bytes (growth allowed
 * only when grown > 0); the checkers agree. */
static gml_block *stitched(hfix *f, gml_bin *bin, size_t need, size_t grown)
{
    uint64_t reserved = f->h.reserved;
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f->st, bin, need, need, grown > 0, &b), GMLAKE_OK,
                 "a stitch of %zu MiB", need / MiB);
    cr_assert_eq(f->h.reserved, reserved + grown, "grown %lu MiB, expected %zu",
                 (unsigned long)((f->h.reserved - reserved) / MiB), grown / MiB);
    cr_assert_eq(b->size, need);
    hf_check(f, 1);
    return b;
}

/* Frees stitched block b into bin; the checkers agree. */
static void unstitched(hfix *f, gml_block *b, gml_bin *bin)
{
    gml_stitch_free(&f->st, b, bin);
    hf_check(f, 0);
}

/* Nothing is reserved or held on the device any more; the checkers agree; the fixture goes. */
static void all_released(hfix *f)
{
    cr_assert_eq(f->h.reserved, 0);
    cr_assert_eq(gml_sim_bytes_in_use(f->dev), 0);
    hf_check(f, 0);
    hf_free(f);
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
    all_released(&f);
}

Test(extents, a_stitch_maps_whole_extents_of_mixed_sizes)
{
    hfix f;
    hf_make_ext(&f, 128 * MiB, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    /* free extents of 8, 4 and 2 MiB, separated by live ones */
    size_t sizes[] = {8 * MiB, 2 * MiB, 4 * MiB, 2 * MiB, 2 * MiB, 2 * MiB};
    gml_block *v[6];
    grow_taken(&f, s1, sizes, 6, v);
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

/* Extents E1 [0, 8) live at [0, 8 - e1_free); a 2 MiB extent, live; E2 [10, 18) live at
 * [15, 18): the free tail of E1 and the free head of E2 (5 MiB) are the only free memory, no
 * whole extent. */
static void partly_used_extents(hfix *f, gml_bin *bin, gml_block **live, size_t e1_free)
{
    grow(f, bin, 8 * MiB);
    gml_block *top = hf_take(f, bin, e1_free);      /* a take cuts from the top */
    live[0] = hf_take(f, bin, 8 * MiB - e1_free);   /* [0, 8 - e1_free) */
    grow(f, bin, 2 * MiB);
    live[1] = hf_take(f, bin, 2 * MiB);             /* [8, 10) */
    grow(f, bin, 8 * MiB);
    live[2] = hf_take(f, bin, 3 * MiB);             /* [15, 18) */
    hf_put(f, top, bin);
    cr_assert_eq(live[0]->addr, f->h.arena);
    cr_assert_eq(live[2]->addr, f->h.arena + 15 * MiB);
}

static void two_partly_used_extents(hfix *f, gml_bin *bin, gml_block **live)
{
    partly_used_extents(f, bin, live, 5 * MiB);
}

Test(extents, free_ends_below_a_chunk_serve_too)
{
    hfix f;
    hf_make_ext(&f, 64 * MiB, 8 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *live[3];
    partly_used_extents(&f, s1, live, 1 * MiB); /* E1's free tail: 1 MiB, below a chunk */
    /* 1 MiB of E1 and 5 of E2, without growth: a fragment no contiguous fit could use */
    unstitched(&f, stitched(&f, s1, 6 * MiB, 0), s1);
    hf_free(&f);
}

Test(extents, a_stitch_enters_partly_used_extents_at_its_ends)
{
    hfix f;
    hf_make_dev(&f, 64 * MiB, 8 * MiB, 0, true);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *live[3];
    two_partly_used_extents(&f, s1, live);
    memset((void *)live[0]->addr, 0x11, live[0]->size);
    memset((void *)live[2]->addr, 0x22, live[2]->size);
    hf_check(&f, 0);
    uint64_t maps = hf_calls(&f, GMLAKE_DC_MAP), reserved = f.h.reserved;
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 10 * MiB, 10 * MiB, false, &b), GMLAKE_OK);
    cr_assert_eq(f.h.reserved, reserved, "no growth");
    cr_assert_eq(b->size, 10 * MiB);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_MAP) - maps, 2, "E1 and E2, each mapped whole");
    cr_assert_eq(b->addr % (2 * MiB), 1 * MiB, "entered 3 MiB into E1 (mapped at a chunk boundary)");
    hf_check(&f, 1);
    /* the stitched range is E1's tail then E2's head, and nothing of the live blocks */
    memset((void *)b->addr, 0xab, b->size);
    const unsigned char *e1 = (const unsigned char *)f.h.arena, *e2 = e1 + 10 * MiB;
    for (size_t i = 0; i < 8 * MiB; i += 4096) {
        cr_assert_eq(e1[i], i < 3 * MiB ? 0x11 : 0xab, "E1 at %zu", i);
        cr_assert_eq(e2[i], i < 5 * MiB ? 0xab : 0x22, "E2 at %zu", i);
    }
    /* freed, it is cached and serves the same request again without a device call */
    uintptr_t addr = b->addr;
    gml_stitch_free(&f.st, b, s1);
    hf_check(&f, 0);
    uint64_t calls = hf_calls(&f, GMLAKE_DC_MAP) + hf_calls(&f, GMLAKE_DC_VA_RESERVE);
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 10 * MiB, 10 * MiB, false, &b), GMLAKE_OK);
    cr_assert_eq(b->addr, addr);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_MAP) + hf_calls(&f, GMLAKE_DC_VA_RESERVE), calls);
    hf_check(&f, 1);
    gml_stitch_free(&f.st, b, s1);
    /* once a block takes part of E1's tail, the cached range is stale and nothing is left */
    gml_block *l = hf_take(&f, s1, 4 * MiB);
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 10 * MiB, 10 * MiB, false, &b), GMLAKE_ERR_NOMEM);
    hf_check(&f, 0);
    hf_put(&f, l, s1);
    cr_assert_eq(gml_stitch_gc(&f.st, true), 1, "its mapping is torn down");
    hf_check(&f, 0);
    for (int i = 0; i < 3; i++)
        hf_put(&f, live[i], s1);
    cr_assert_eq(gml_release_free_chunks(&f.h), 0, "the blocks are s1's, not ready");
    hf_free(&f);
}

Test(extents, whole_extents_come_before_the_ends_of_partly_used_ones)
{
    hfix f;
    hf_make_ext(&f, 64 * MiB, 8 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *live[3];
    two_partly_used_extents(&f, s1, live);
    /* two whole free extents, 8 and 4 MiB, kept apart by live ones */
    size_t sizes[] = {8 * MiB, 2 * MiB, 4 * MiB, 2 * MiB};
    gml_block *v[4];
    grow_taken(&f, s1, sizes, 4, v);
    hf_put(&f, v[0], s1);
    hf_put(&f, v[2], s1);
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 10 * MiB, 10 * MiB, false, &b), GMLAKE_OK);
    hf_check(&f, 1);
    cr_assert_eq(gml_block_at(&f.h, f.h.arena + 3 * MiB)->state, GML_B_FREE, "E1's tail unused");
    cr_assert_eq(gml_block_at(&f.h, f.h.arena + 10 * MiB)->state, GML_B_FREE, "E2's head unused");
    cr_assert_eq(gml_block_at(&f.h, v[0]->addr)->state, GML_B_HELD, "the whole 8 MiB extent");
    gml_stitch_free(&f.st, b, s1);
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

/* The extent lengths (chunks) of the run of slots starting at slot s, until an empty slot. */
static size_t extent_lens(hfix *f, size_t s, size_t *lens, size_t max)
{
    size_t n = 0;
    while (n < max && f->h.slots[s].state != GML_SLOT_EMPTY) {
        cr_assert_eq(gml_extent_head(&f->h, s), s, "slot %zu starts no extent", s);
        lens[n++] = gml_extent_len(&f->h, s);
        s += lens[n - 1];
    }
    return n;
}

Test(extents, the_extent_unit_follows_the_memory_reserved)
{
    hfix f;
    hf_make_shared(&f, 512 * MiB, 16 * MiB, 2); /* an extent <= reserved / 2, <= 16 MiB */
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    /* each growth is taken at once, so the next one cannot extend a free block */
    size_t grows[] = {8 * MiB, 8 * MiB, 40 * MiB, 64 * MiB};
    /* units of 2 (nothing reserved: the growth's own 4 chunks / 2), 2 (4 reserved), 8 (the
     * 20-chunk growth is larger than the 8 reserved: 10, at most 8), then 8 (28 reserved) */
    uint64_t creates[] = {2, 2, 3, 4};
    for (int i = 0; i < 4; i++) {
        uint64_t c0 = hf_calls(&f, GMLAKE_DC_CHUNK_CREATE), a0 = hf_calls(&f, GMLAKE_DC_SET_ACCESS);
        grow(&f, s1, grows[i]);
        hf_take(&f, s1, grows[i]);
        cr_assert_eq(hf_calls(&f, GMLAKE_DC_CHUNK_CREATE) - c0, creates[i], "growth %d", i);
        cr_assert_eq(hf_calls(&f, GMLAKE_DC_SET_ACCESS) - a0, 1, "one set_access per run");
        hf_check(&f, 0);
    }
    size_t lens[32], want[] = {2, 2, 2, 2, 8, 8, 4, 8, 8, 8, 8};
    size_t n = extent_lens(&f, gml_slot_of(&f.h, f.h.arena), lens, 32);
    cr_assert_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(lens[i], want[i], "extent %zu: %zu chunks, expected %zu", i, lens[i], want[i]);
    cr_assert_eq(f.h.reserved, 120 * MiB);
    /* every block freed: release returns each extent, one release per handle */
    while (f.used.n)
        hf_put(&f, f.used.v[0], f.h.ready);
    uint64_t r0 = hf_calls(&f, GMLAKE_DC_CHUNK_RELEASE);
    cr_assert_eq(gml_release_free_chunks(&f.h), 60);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_CHUNK_RELEASE) - r0, n);
    all_released(&f);
}

Test(extents, a_stitch_across_proportional_extents_and_release_after_it)
{
    hfix f;
    hf_make_shared(&f, 512 * MiB, 64 * MiB, 4);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    /* runs of 2-, 2- and 4-chunk extents (the first growth, larger than the empty pool, by its
     * own 8 chunks / 4), separated by live blocks */
    gml_block *v[6];
    size_t sizes[] = {16 * MiB, 2 * MiB, 16 * MiB, 2 * MiB, 32 * MiB, 2 * MiB};
    grow_taken(&f, s1, sizes, 6, v);
    for (int i = 0; i < 6; i += 2) /* freed with no stream: what release may return */
        hf_put(&f, v[i], f.h.ready);
    uint64_t reserved = f.h.reserved;
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 60 * MiB, 60 * MiB, false, &b), GMLAKE_OK);
    cr_assert_eq(f.h.reserved, reserved, "no growth");
    cr_assert_eq(b->size, 60 * MiB, "32 + 16 + 12: the cut falls between 4 MiB extents");
    hf_check(&f, 1);
    /* freed, the stitched block stays cached: its extents are pinned and release keeps them */
    gml_stitch_free(&f.st, b, f.h.ready);
    hf_check(&f, 0);
    gml_release_free_chunks(&f.h);
    cr_assert_eq(f.h.reserved, reserved - 4 * MiB, "only the 16 MiB piece's unused 4 MiB went");
    hf_check(&f, 0);
    /* torn down, every free extent goes; the live 2 MiB ones last */
    cr_assert_eq(gml_stitch_gc(&f.st, true), 1);
    gml_release_free_chunks(&f.h);
    cr_assert_eq(f.h.reserved, 6 * MiB);
    for (int i = 1; i < 6; i += 2)
        hf_put(&f, v[i], f.h.ready);
    gml_release_free_chunks(&f.h);
    all_released(&f);
}

/* E1 [0, 8) wholly free but in three blocks that never merge (H4): s1's [0, 2), the ready bin's
 * [2, 6) (freed with no stream), s1's [6, 8); a live 2 MiB extent; E2 [10, 18) free in s1; a live
 * 2 MiB extent.  Both bins serve s1. */
static void whole_extent_over_two_bins(hfix *f, gml_bin *s1, gml_block **live)
{
    grow(f, s1, 8 * MiB);
    gml_block *x3 = hf_take(f, s1, 2 * MiB), *x2 = hf_take(f, s1, 4 * MiB), *x1 = hf_take(f, s1, 2 * MiB);
    grow(f, s1, 2 * MiB);
    live[0] = hf_take(f, s1, 2 * MiB);
    grow(f, s1, 8 * MiB);
    gml_block *e2 = hf_take(f, s1, 8 * MiB);
    grow(f, s1, 2 * MiB);
    live[1] = hf_take(f, s1, 2 * MiB);
    hf_put(f, x2, f->h.ready);
    hf_put(f, x1, s1);
    hf_put(f, x3, s1);
    hf_put(f, e2, s1);
    cr_assert_eq(gml_block_at(&f->h, f->h.arena + 3 * MiB)->bin, f->h.ready);
    cr_assert_eq(gml_block_at(&f->h, f->h.arena + 1 * MiB)->bin, s1);
    cr_assert_eq(gml_block_at(&f->h, f->h.arena + 7 * MiB)->bin, s1);
    hf_check(f, 0);
}

Test(extents, a_whole_extent_whose_free_blocks_are_in_two_bins_is_stitched)
{
    hfix f;
    hf_make_ext(&f, 128 * MiB, 8 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *live[2];
    whole_extent_over_two_bins(&f, s1, live);
    uint64_t maps = hf_calls(&f, GMLAKE_DC_MAP);
    gml_block *b = stitched(&f, s1, 16 * MiB, 0); /* E1 and E2 are free and serve s1 */
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_MAP) - maps, 2, "E1 and E2, each mapped once");
    for (uintptr_t a = f.h.arena; a < f.h.arena + 8 * MiB; a += MiB)
        cr_assert_eq(gml_block_at(&f.h, a)->state, GML_B_HELD, "E1 at %lu MiB carved",
                     (unsigned long)((a - f.h.arena) / MiB));
    unstitched(&f, b, s1);
    hf_free(&f);
}

Test(extents, a_stitch_grows_only_what_the_whole_free_extents_over_two_bins_lack)
{
    hfix f;
    hf_make_ext(&f, 128 * MiB, 8 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *live[2];
    whole_extent_over_two_bins(&f, s1, live);
    unstitched(&f, stitched(&f, s1, 20 * MiB, 4 * MiB), s1); /* E1 and E2 give 16 MiB: 4 grown */
    hf_free(&f);
}

/* Found by review: a run over two bins that is the only piece.  [0, 2) live, [2, 11) free in s1,
 * [11, 12) free in the ready bin, the frontier after it.  The growth for a 16 MiB stitch extends
 * the run (6 MiB): the run then covers the request, but as two blocks, and a stitch needs two
 * pieces; joined (gml_join_for), it is one block that fits. */
Test(extents, a_stitch_whose_only_piece_is_a_run_over_two_bins_is_served_after_its_growth)
{
    hfix f;
    hf_make_ext(&f, 128 * MiB, 2 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    grow(&f, s1, 12 * MiB);
    gml_block *b = hf_take(&f, s1, 1 * MiB), *a = hf_take(&f, s1, 9 * MiB);
    hf_take(&f, s1, 2 * MiB);
    cr_assert_eq(b->addr, f.h.arena + 11 * MiB);
    cr_assert_eq(a->addr, f.h.arena + 2 * MiB);
    hf_put(&f, b, f.h.ready);
    hf_put(&f, a, s1);
    hf_check(&f, 0);
    uint64_t reserved = f.h.reserved;
    gml_block *v = NULL;
    int rc = gml_stitch_alloc(&f.st, s1, 16 * MiB, 16 * MiB, true, &v);
    cr_assert_eq(rc, GMLAKE_OK, "the stitch grew %lu MiB and failed",
                 (unsigned long)((f.h.reserved - reserved) / MiB));
    cr_assert_eq(f.h.reserved, reserved + 6 * MiB, "10 MiB free in the run: 6 MiB grown");
    cr_assert_eq(v->state, GML_B_LIVE, "one block, at home");
    cr_assert_eq(v->addr, f.h.arena + 2 * MiB);
    cr_assert(gml_vec_push(&f.used, v));
    hf_check(&f, 0);
    hf_free(&f);
}
