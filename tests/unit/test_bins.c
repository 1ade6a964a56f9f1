/* test_bins.c — core/bins.c, the indexes a miss searches (issue 23): a stream bin's free blocks are
 * pending until its threshold covers them, then passed (one size tree for every bin); a
 * synchronisation reaches them at the next promotion; a retired bin holds all or none passed; the
 * bins asked by a miss are those whose largest block fits, the tightest first, and a miss asks no
 * bin that cannot help; whole free small chunks are listed for gml_small_reclaim.  The heap checker
 * (H6: the indexes agree with the trees) runs after every step. */
#include "heap_helpers.h"

static const gml_stream S1 = 0x1000, S2 = 0x2000, S3 = 0x3000, S4 = 0x4000;

/* A heap whose events complete only when the test says so. */
static void start(hfix *f, size_t capacity)
{
    hf_make(f, capacity);
    gml_sim_set_manual_events(f->dev, true);
}

/* A free block of `size` in bin (grown for it, then freed there). */
static gml_block *free_in(hfix *f, gml_bin *bin, size_t size)
{
    cr_assert_eq(gml_grow(&f->h, bin, GML_SPACE_LARGE, GML_GROW_BLOCK, size), GMLAKE_OK);
    gml_block *b = gml_best_fit(&f->h, bin, GML_SPACE_LARGE, size);
    cr_assert(b && b->bin == bin);
    return b;
}

static size_t passed_count(gml_heap *h, int space)
{
    size_t n = 0;
    gml_block *b;
    RB_FOREACH(b, gml_passed_tree, &h->passed[space])
        n++;
    return n;
}

Test(bins, a_stream_bins_blocks_are_pending_until_its_event_then_passed)
{
    hfix f;
    start(&f, 32 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *b = free_in(&f, s1, 4 * MiB);
    cr_assert_eq(b->where, GML_IN_PENDING);
    cr_assert_eq(s1->npend[GML_SPACE_LARGE], 1);
    cr_assert_eq(LIST_FIRST(&f.h.pend_bins[GML_SPACE_LARGE]), s1);
    cr_assert_eq(s1->cmax[GML_SPACE_LARGE], 4 * MiB);
    gml_bin_cand_flush(&f.h);
    cr_assert_eq(RB_MIN(gml_cand_large, &f.h.cand_large), s1);
    hf_check(&f, 0);
    cr_assert(!gml_bin_passed(&f.h, s1, f.h.seq), "the event was only recorded");
    cr_assert_eq(b->where, GML_IN_PENDING);
    gml_sim_complete_events(f.dev);
    cr_assert(gml_bin_passed(&f.h, s1, f.h.seq));
    cr_assert_eq(b->where, GML_IN_PASSED, "learning it moves the block at once");
    cr_assert_eq(passed_count(&f.h, GML_SPACE_LARGE), 1);
    cr_assert(LIST_EMPTY(&f.h.pend_bins[GML_SPACE_LARGE]));
    cr_assert_eq(LIST_FIRST(&f.h.passed_bins), s1);
    hf_check(&f, 0);
    gml_block *x = hf_take(&f, s1, 1 * MiB); /* the remainder keeps its seq: still passed */
    b = gml_best_fit(&f.h, s1, GML_SPACE_LARGE, 1 * MiB);
    cr_assert(b && b->size == 3 * MiB && b->where == GML_IN_PASSED);
    hf_put(&f, x, s1); /* a new free: its seq is after the event, so pending again */
    cr_assert_eq(b->where, GML_IN_PENDING, "merged into a block freed after the event");
    hf_check(&f, 0);
    hf_free(&f);
}

Test(bins, a_synchronisation_reaches_the_indexes_at_the_next_promotion)
{
    hfix f;
    start(&f, 32 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2);
    gml_block *b = free_in(&f, s1, 4 * MiB);
    f.h.synced_seq = f.h.seq; /* what the pool sets after synchronising without its lock */
    cr_assert_eq(b->where, GML_IN_PENDING, "nothing is walked when the pool synchronises");
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 2 * MiB), 1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD) + hf_calls(&f, GMLAKE_DC_EVENT_QUERY), 0,
                 "known from the synchronisation, no event");
    cr_assert_eq(gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 4 * MiB)->bin, s2, "to the asking bin");
    hf_check(&f, 0);
    hf_free(&f);
}

Test(bins, a_retired_bin_not_known_passed_holds_none_passed)
{
    hfix f;
    start(&f, 32 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *a = free_in(&f, s1, 4 * MiB);
    gml_block *keep = hf_take(&f, s1, 2 * MiB);
    cr_assert(!gml_bin_passed(&f.h, s1, f.h.seq)); /* records the event */
    gml_sim_complete_events(f.dev);
    cr_assert(gml_bin_passed(&f.h, s1, f.h.seq));
    a = gml_best_fit(&f.h, s1, GML_SPACE_LARGE, 2 * MiB);
    cr_assert_eq(a->where, GML_IN_PASSED);
    hf_put(&f, keep, s1); /* merges: freed after the event */
    cr_assert_eq(s1->npassed, 0);
    gml_block *c = free_in(&f, s1, 4 * MiB); /* a second block, apart, freed after too */
    (void)c;
    gml_bin_retire(&f.h, s1); /* records an event covering both, not completed yet */
    cr_assert_eq(s1->npassed, 0, "all or none: none until the retirement's event passed");
    hf_check(&f, 0);
    gml_sim_complete_events(f.dev);
    cr_assert(gml_promote(&f.h, NULL, 0, 0) >= 1, "then all of them move");
    cr_assert(RB_EMPTY(&f.h.passed[GML_SPACE_LARGE]));
    hf_check(&f, 0);
    hf_free(&f);
}

Test(bins, a_miss_asks_the_bins_whose_largest_block_fits_the_tightest_first)
{
    hfix f;
    start(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2), *s3 = gml_bin_get(&f.h, S3),
            *s4 = gml_bin_get(&f.h, S4);
    free_in(&f, s1, 8 * MiB);
    free_in(&f, s2, 4 * MiB);
    free_in(&f, s3, 2 * MiB);
    hf_check(&f, 0);
    cr_assert_eq(gml_promote(&f.h, s4, GML_SPACE_LARGE, 3 * MiB), 0, "nothing passed yet");
    cr_assert(s1->asked == f.h.ask_round && s2->asked == f.h.ask_round &&
              s3->asked == f.h.ask_round, "S1 and S2 for a block that fits, then S3 for all");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 3, "each asked once");
    gml_sim_complete_events(f.dev);
    cr_assert_eq(gml_promote(&f.h, s4, GML_SPACE_LARGE, 3 * MiB), 1);
    gml_block *x = gml_best_fit(&f.h, s4, GML_SPACE_LARGE, 3 * MiB);
    cr_assert(x && x->bin == s4 && x->size == 4 * MiB, "S2's 4 MiB: the tightest bin first");
    cr_assert_eq(s1->nfree, 1, "S1's 8 MiB stays whole with S1");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_QUERY), 3 + 1, "only S2 was asked again");
    hf_check(&f, 0);
    hf_free(&f);
}

Test(bins, a_large_miss_with_many_small_only_bins_makes_no_device_call)
{
    hfix f;
    start(&f, 64 * MiB);
    gml_bin *r = f.h.ready, *me = gml_bin_get(&f.h, S4);
    cr_assert_eq(gml_small_refill(&f.h, r), GMLAKE_OK);
    enum { N = 200 };
    gml_block *held[N];
    for (int i = 0; i < N; i++)
        held[i] = hf_take(&f, r, 4 * KiB);
    for (int i = 0; i < N; i++) /* each freed on a stream of its own */
        hf_put(&f, held[i], gml_bin_get(&f.h, 0x100000 + (gml_stream)i));
    cr_assert(LIST_EMPTY(&f.h.pend_bins[GML_SPACE_LARGE]));
    hf_check(&f, 0);
    cr_assert_eq(gml_promote(&f.h, me, GML_SPACE_LARGE, 4 * MiB), 0);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD) + hf_calls(&f, GMLAKE_DC_EVENT_QUERY), 0,
                 "no bin holds a large block: none is asked");
    hf_check(&f, 0);
    hf_free(&f);
}

Test(bins, whole_free_small_chunks_are_listed_and_reclaimed)
{
    hfix f;
    hf_make(&f, 32 * MiB);
    gml_bin *r = f.h.ready, *s1 = gml_bin_get(&f.h, S1);
    for (int i = 0; i < 50; i++) /* bins that hold nothing: reclaim never looks at them */
        gml_bin_get(&f.h, 0x200000 + (gml_stream)i);
    cr_assert_eq(gml_small_refill(&f.h, s1), GMLAKE_OK);
    cr_assert_eq(gml_small_refill(&f.h, r), GMLAKE_OK);
    size_t n = 0;
    gml_block *b;
    LIST_FOREACH(b, &f.h.small_whole, wnode)
        n++;
    cr_assert_eq(n, 2, "one whole small chunk in S1's bin, one in the ready bin");
    gml_block *x = hf_take(&f, s1, 4 * KiB);
    n = 0;
    LIST_FOREACH(b, &f.h.small_whole, wnode)
        n++;
    cr_assert_eq(n, 1, "a used chunk is not whole");
    hf_check(&f, 0);
    cr_assert_eq(gml_small_reclaim(&f.h), 1);
    cr_assert(LIST_EMPTY(&f.h.small_whole));
    hf_put(&f, x, s1);
    cr_assert_eq(gml_small_reclaim(&f.h), 1, "whole again once freed");
    hf_check(&f, 0);
    hf_free(&f);
}
