/* test_blocks.c — core/blocks.c through its own API: best fit over the serving bins, split from
 * the tail, merge within one bin only, carve, records running out.  The heap checker runs after
 * every step. */
#include "heap_helpers.h"

static const gml_stream S1 = 0x1000, S2 = 0x2000;

/* One free run of `bytes` in bin (grown fresh). */
static gml_block *run_in(hfix *f, gml_bin *bin, size_t bytes)
{
    cr_assert_eq(gml_grow(&f->h, bin, GML_SPACE_LARGE, GML_GROW_BLOCK, bytes), GMLAKE_OK);
    gml_block *b = gml_best_fit(&f->h, bin, GML_SPACE_LARGE, bytes);
    cr_assert_not_null(b);
    cr_assert_eq(b->bin, bin, "new chunks go to the bin that asked");
    return b;
}

Test(blocks, best_fit_searches_own_and_ready_bins_only)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2);
    gml_block *r = run_in(&f, s1, 8 * MiB);
    uintptr_t base = r->addr;
    gml_block *l = hf_take(&f, s1, 3 * MiB);
    cr_assert_eq(l->addr, base + 5 * MiB, "cut from the tail");
    cr_assert_eq(r->addr, base, "the remainder keeps its address");
    gml_block *ready = hf_put(&f, l, f.h.ready); /* e.g. freed by cudaFree */
    cr_assert_eq(ready->size, 3 * MiB, "no merge across bins");
    hf_check(&f, 0);
    cr_assert_eq(gml_best_fit(&f.h, s1, GML_SPACE_LARGE, 3 * MiB), ready, "the smaller fit wins");
    cr_assert_eq(gml_best_fit(&f.h, s1, GML_SPACE_LARGE, 4 * MiB), r);
    cr_assert_eq(gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 3 * MiB), ready);
    cr_assert_null(gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 4 * MiB),
                   "another stream's block is not searched");
    hf_free(&f);
}

Test(blocks, free_merges_with_neighbours_of_its_bin)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *r = run_in(&f, s1, 8 * MiB);
    uintptr_t base = r->addr;
    gml_block *v[4];
    for (int i = 0; i < 4; i++)
        v[i] = hf_take(&f, s1, 2 * MiB);
    hf_check(&f, 0);
    hf_put(&f, v[0], s1);
    hf_put(&f, v[2], s1);
    hf_check(&f, 0);
    hf_put(&f, v[1], s1);
    gml_block *m = hf_put(&f, v[3], s1);
    hf_check(&f, 0);
    cr_assert_eq(m->addr, base);
    cr_assert_eq(m->size, 8 * MiB, "all four merged back into one block");
    cr_assert_eq(s1->nfree, 1);
    hf_free(&f);
}

Test(blocks, a_ready_neighbour_never_joins_a_stream_block)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2);
    run_in(&f, f.h.ready, 6 * MiB);
    gml_block *l = hf_take(&f, s1, 2 * MiB); /* the tail of the ready run */
    gml_block *back = hf_put(&f, l, s1);     /* freed on S1: its work may still run */
    hf_check(&f, 0);
    cr_assert_eq(back->size, 2 * MiB, "the ready head did not become S1's");
    gml_block *head = gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 4 * MiB);
    cr_assert_not_null(head, "another stream still gets the ready memory");
    cr_assert_eq(head->bin, f.h.ready);
    cr_assert_eq(head->size, 4 * MiB);
    hf_free(&f);
}

Test(blocks, carve_leaves_head_and_tail_and_remembers_the_bin)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *r = run_in(&f, s1, 6 * MiB);
    uintptr_t base = r->addr;
    gml_block *mid = gml_carve(&f.h, r, base + 2 * MiB, 2 * MiB);
    cr_assert_not_null(mid);
    cr_assert_eq(mid->state, GML_B_HELD);
    cr_assert_eq(mid->bin, s1, "a carved block remembers where it came from");
    cr_assert_eq(s1->nfree, 2, "head and tail stay free in the bin");
    cr_assert(gml_vec_push(&f.used, mid));
    hf_check(&f, 0);
    f.used.n = 0;
    gml_block *m = gml_free_insert(&f.h, mid, mid->bin);
    cr_assert_eq(m->size, 6 * MiB, "undone: one block again");
    hf_check(&f, 0);
    hf_free(&f);
}

Test(blocks, running_out_of_records_leaves_the_block_unchanged)
{
    hfix f;
    hf_make(&f, 64 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    gml_block *r = run_in(&f, s1, 4 * MiB);
    gml_block_vec stash = {0};
    hf_records_exhaust(&f, &stash);
    cr_assert_null(gml_take(&f.h, r, 1 * MiB, 1 * MiB), "a split needs a record");
    cr_assert_null(gml_carve(&f.h, r, r->addr + 2 * MiB, 1 * MiB));
    cr_assert_eq(r->size, 4 * MiB);
    hf_check(&f, 0);
    gml_block *whole = gml_take(&f.h, r, 4 * MiB, 4 * MiB);
    cr_assert_eq(whole, r, "an exact fit needs no record");
    cr_assert(gml_vec_push(&f.used, whole));
    hf_check(&f, 0);
    hf_records_restore(&f, &stash);
    hf_free(&f);
}
