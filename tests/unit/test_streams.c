/* test_streams.c — core/streams.c through its own API: the reuse rule, the serving bins, and
 * promotion by events (no event per free; an event per stream when another stream misses). */
#include "heap_helpers.h"

static const gml_stream S1 = 0x1000, S2 = 0x2000;

Test(streams, the_reuse_rule)
{
    hfix f;
    hf_make(&f, 16 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2), *r = f.h.ready;
    cr_assert_eq(gml_bin_get(&f.h, S1), s1, "one bin per stream");
    cr_assert(gml_bin_serves(&f.h, s1, s1), "a stream reuses its own frees at once");
    cr_assert(gml_bin_serves(&f.h, r, s1) && gml_bin_serves(&f.h, r, s2) && gml_bin_serves(&f.h, r, r));
    cr_assert(!gml_bin_serves(&f.h, s1, s2), "not another stream's");
    cr_assert(!gml_bin_serves(&f.h, s1, r));
    cr_assert(gml_bin_serves(&f.h, r, NULL) && !gml_bin_serves(&f.h, s1, NULL),
              "only the ready bin serves every stream");
    gml_bin *seen[4];
    int n = 0;
    GML_FOR_SERVING_BINS(&f.h, s1, b) seen[n++] = b;
    cr_assert(n == 2 && seen[0] == s1 && seen[1] == r, "own bin first, then the ready bin");
    n = 0;
    GML_FOR_SERVING_BINS(&f.h, r, b) seen[n++] = b;
    cr_assert(n == 1 && seen[0] == r);
    n = 0;
    GML_FOR_SERVING_BINS(&f.h, NULL, b) seen[n++] = b;
    cr_assert(n == 1 && seen[0] == r);
    hf_free(&f);
}

Test(streams, promotion_waits_for_the_event_of_the_freeing_stream)
{
    hfix f;
    hf_make(&f, 16 * MiB);
    gml_sim_set_manual_events(f.dev, true);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 4 * MiB), GMLAKE_OK);
    gml_block *a = hf_take(&f, s1, 2 * MiB);
    gml_block *b = hf_take(&f, s1, 2 * MiB);
    hf_put(&f, a, s1);
    hf_put(&f, b, s1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 0, "no event per free");
    cr_assert_eq(gml_promote(&f.h, s2, false), 0, "the work on S1 may still run");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 1, "one event covers every free so far");
    cr_assert_null(gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 2 * MiB));
    gml_sim_complete_events(f.dev);
    cr_assert_eq(gml_promote(&f.h, s2, false), 1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 1, "the recorded event was asked again");
    gml_block *x = gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 4 * MiB);
    cr_assert_not_null(x);
    cr_assert_eq(x->bin, f.h.ready);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(streams, bin_passed_with_wait_waits)
{
    hfix f;
    hf_make(&f, 16 * MiB);
    gml_sim_set_manual_events(f.dev, true);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    f.h.seq = 5;
    cr_assert(!gml_bin_passed(&f.h, s1, 5, false));
    cr_assert(gml_bin_passed(&f.h, s1, 5, true));
    cr_assert_eq(s1->done_seq, 5);
    cr_assert(gml_bin_passed(&f.h, f.h.ready, 1000, false), "the ready bin has no pending work");
    hf_free(&f);
}
