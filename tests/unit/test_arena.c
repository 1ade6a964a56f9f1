/* test_arena.c — core/arena.c through its own API: the growth plan (unit, amount, place, bin),
 * small refill and reclaim, release of ready memory only and never of pinned chunks.  The heap
 * checker runs after every step. */
#include "heap_helpers.h"

static const gml_stream S1 = 0x1000;

Test(arena, growth_extends_a_free_block_at_the_end_of_a_run)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 3 * MiB), GMLAKE_OK);
    cr_assert_eq(f.h.reserved, 4 * MiB, "ceil(need / chunk) chunks");
    uint64_t creates = hf_calls(&f, GMLAKE_DC_CHUNK_CREATE);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 8 * MiB), GMLAKE_OK);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_CHUNK_CREATE) - creates, 2, "only the missing chunks");
    gml_block *b = gml_best_fit(&f.h, s1, GML_SPACE_LARGE, 8 * MiB);
    cr_assert_not_null(b);
    cr_assert_eq(b->addr, f.h.arena);
    cr_assert_eq(b->size, 8 * MiB, "the new chunks merged with the free block");
    cr_assert_eq(b->bin, s1);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(arena, growth_for_a_stitch_is_the_deficit_next_to_a_piece)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 6 * MiB), GMLAKE_OK);
    gml_block *c = hf_take(&f, s1, 2 * MiB); /* [4, 6) */
    gml_block *b = hf_take(&f, s1, 2 * MiB); /* [2, 4); [0, 2) stays free */
    hf_put(&f, c, s1);                        /* free chunks at [0, 2) and [4, 6) */
    hf_check(&f, 0);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_CHUNKS, 8 * MiB), GMLAKE_OK);
    cr_assert_eq(f.h.reserved, 10 * MiB, "4 chunks needed, 2 free: 2 new");
    gml_block *top = gml_best_fit(&f.h, s1, GML_SPACE_LARGE, 6 * MiB);
    cr_assert_not_null(top, "placed after the piece with room");
    cr_assert_eq(top->addr, f.h.arena + 4 * MiB);
    hf_check(&f, 0);
    (void)b;
    hf_free(&f);
}

Test(arena, growth_respects_the_limit)
{
    hfix f;
    hf_make(&f, 8 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 10 * MiB), GMLAKE_ERR_NOMEM);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_CHUNK_CREATE), 0, "refused before any device call");
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 8 * MiB), GMLAKE_OK);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(arena, small_refill_takes_a_free_large_chunk_and_reclaim_gives_it_back)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    cr_assert_eq(gml_small_refill(&f.h, s1), GMLAKE_OK);
    cr_assert_eq(f.h.reserved, 2 * MiB, "a new chunk when no large one is free");
    gml_block *s = hf_take(&f, s1, 4 * KiB);
    cr_assert_eq(s->space, GML_SPACE_SMALL);
    hf_put(&f, s, s1);
    cr_assert_eq(gml_small_reclaim(&f.h), 1, "a fully free small chunk goes back");
    cr_assert_eq(f.h.slots[0].state, GML_SLOT_LARGE);
    hf_check(&f, 0);
    uint64_t creates = hf_calls(&f, GMLAKE_DC_CHUNK_CREATE);
    cr_assert_eq(gml_small_refill(&f.h, s1), GMLAKE_OK);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_CHUNK_CREATE), creates, "the free large chunk moved");
    cr_assert_eq(f.h.slots[0].state, GML_SLOT_SMALL);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(arena, release_returns_ready_chunks_only_and_never_pinned_ones)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 4 * MiB), GMLAKE_OK);
    gml_block *keep = hf_take(&f, s1, 2 * MiB); /* separates the runs */
    cr_assert_eq(gml_grow(&f.h, f.h.ready, GML_SPACE_LARGE, GML_GROW_BLOCK, 6 * MiB), GMLAKE_OK);
    hf_check(&f, 0);
    size_t pinned = gml_slot_of(&f.h, f.h.arena + 6 * MiB); /* the ready run's middle chunk */
    gml_chunk_pin(&f.h, pinned);
    cr_assert_eq(gml_release_free_chunks(&f.h), 2, "the two unpinned ready chunks");
    cr_assert_eq(f.h.reserved, 6 * MiB);
    cr_assert_eq(f.h.slots[0].state, GML_SLOT_LARGE, "S1's free chunk stays: its work may run");
    cr_assert_eq(f.h.slots[pinned].state, GML_SLOT_LARGE, "a pinned chunk stays");
    gml_chunk_unpin(&f.h, pinned);
    hf_check(&f, 0);
    (void)keep;
    hf_free(&f);
}
