/* test_stitch_threads.c — the teardown of a cached stitched block (StitchFree) makes its driver
 * calls without the pool lock: while one thread's eviction is held inside its first unmap (a sim
 * hook), other threads allocate, free, release and check the pool; release keeps the extents the
 * range being torn down still maps. */
#include "thread_gate.h"

/* Stream 1 holds free 16, 16 and 4 MiB blocks apart (2 and 4 MiB live between them, in live[]),
 * and after them `more` live 16 MiB blocks (big[]), each followed by a live 2 MiB one (lv[]); the
 * two free 16 MiB blocks are stitched into one 32 MiB block, which is freed (cached). */
static uintptr_t cached_stitch(fixture *f, uintptr_t live[2], int more, uintptr_t *big, uintptr_t *lv)
{
    uintptr_t x = must_alloc(f->pool, 16 * MiB, 1);
    live[0] = must_alloc(f->pool, 2 * MiB, 1);
    uintptr_t z = must_alloc(f->pool, 16 * MiB, 1);
    live[1] = must_alloc(f->pool, 4 * MiB, 1);
    uintptr_t u = must_alloc(f->pool, 4 * MiB, 1);
    for (int i = 0; i < more; i++) {
        big[i] = must_alloc(f->pool, 16 * MiB, 1);
        lv[i] = must_alloc(f->pool, 2 * MiB, 1);
    }
    must_free(f->pool, x, 1);
    must_free(f->pool, z, 1);
    must_free(f->pool, u, 1);
    uintptr_t s = must_alloc(f->pool, 32 * MiB, 1);
    must_free(f->pool, s, 1);
    gmlake_stats st = stats_of(f->pool);
    cr_assert_eq(st.stitches, 1);
    cr_assert_eq(st.stitched_blocks, 1);
    return s;
}

/* The pool's teardown path (empty_cache: the last resort's gc(all), then release) held in the
 * eviction's first unmap while another thread allocates and frees. */
Test(stitch, others_allocate_and_free_while_an_eviction_is_in_flight, .timeout = 60)
{
    fixture f = fx_make(512 * MiB, false, NULL);
    uintptr_t live[2];
    uintptr_t s = cached_stitch(&f, live, 0, NULL, NULL);
    size_t resv = gml_sim_reservation_count(f.dev);
    gate_arm(f.dev, GMLAKE_DC_UNMAP, 1);
    pthread_t ta;
    job a = {.pool = f.pool, .empty_cache = true}, b;
    start_job_held(&ta, &a);
    b = (job){.pool = f.pool, .size = 2 * MiB, .stream = 1, .free_after = true};
    cr_assert(runs_past_the_gate(&b), "an allocate and free waited for another thread's eviction");
    cr_assert_eq(b.rc, GMLAKE_OK);
    /* the checker with the eviction in flight: its block still pins the chunks it maps */
    CHECK_POOL(f.pool);
    gmlake_stats st = stats_of(f.pool);
    cr_assert_eq(st.stitched_blocks, 0, "a block being torn down is no longer cached");
    cr_assert_eq(st.stitched_bytes, 0);
    cr_assert(!gml_pool_owns(f.pool, s), "a range being torn down is no longer the pool's");
    cr_assert(!a.done, "the eviction went on without its unmap");
    gate_open();
    pthread_join(ta, NULL);
    cr_assert_eq(a.rc, GMLAKE_OK);
    CHECK_POOL(f.pool);
    st = stats_of(f.pool);
    cr_assert_eq(st.stitch_evictions, 1);
    cr_assert_eq(gml_sim_reservation_count(f.dev), resv - 1, "the stitched range was freed");
    must_free(f.pool, live[0], 1);
    must_free(f.pool, live[1], 1);
    empty_to_bare(&f);
    fx_free(&f);
}

/* Two threads empty the cache: the second one's teardown does not see the block the first one
 * tears down, and its release, run while the first one's eviction is held in its first unmap,
 * keeps every extent that stitched range still maps. */
Test(stitch, release_keeps_the_extents_of_a_range_being_torn_down, .timeout = 60)
{
    fixture f = fx_make(512 * MiB, false, NULL);
    uintptr_t live[2];
    cached_stitch(&f, live, 0, NULL, NULL);
    must_free(f.pool, live[0], 1);
    must_free(f.pool, live[1], 1);
    size_t mapped = stats_of(f.pool).stitched_bytes; /* whole extents: what it pins */
    cr_assert_gt(stats_of(f.pool).reserved_bytes, mapped, "memory besides the stitched block");
    gate_arm(f.dev, GMLAKE_DC_UNMAP, 1); /* the release's own unmaps pass */
    pthread_t ta;
    job a = {.pool = f.pool, .empty_cache = true}, b = {.pool = f.pool, .empty_cache = true};
    start_job_held(&ta, &a);
    cr_assert(runs_past_the_gate(&b), "a release waited for another thread's eviction");
    cr_assert_eq(b.rc, GMLAKE_OK);
    gmlake_stats st = stats_of(f.pool);
    cr_assert_eq(st.stitch_evictions, 1, "the second teardown did not pick the block again");
    cr_assert_eq(st.reserved_bytes, mapped,
                 "release kept exactly the extents the range being torn down maps");
    cr_assert_eq(gml_sim_bytes_in_use(f.dev), mapped, "those chunks are still held");
    CHECK_POOL(f.pool);
    gate_open();
    pthread_join(ta, NULL);
    cr_assert_eq(a.rc, GMLAKE_OK);
    CHECK_POOL(f.pool);
    /* the first thread's own release ran after its eviction had ended */
    cr_assert_eq(stats_of(f.pool).reserved_bytes, 0);
    cr_assert_eq(gml_sim_bytes_in_use(f.dev), 0);
    cr_assert_eq(gml_sim_mapping_count(f.dev), 0);
    fx_free(&f);
}

static void gc1(gml_pool_settings *s) { s->auto_gc = 1; }

/* Auto GC after a new stitch: its eviction runs in the new block's unlocked window; held there,
 * with the new block not published yet, the pool stays usable and consistent. */
Test(stitch, a_new_stitch_evicts_without_the_lock, .timeout = 60)
{
    fixture f = fx_make(512 * MiB, false, gc1);
    uintptr_t live[2], big[2], lv[2];
    uintptr_t s1 = cached_stitch(&f, live, 2, big, lv);
    must_free(f.pool, big[0], 1);
    must_free(f.pool, big[1], 1);
    gate_arm(f.dev, GMLAKE_DC_UNMAP, 1);
    pthread_t ta;
    job a = {.pool = f.pool, .size = 64 * MiB, .stream = 1}, b;
    start_job_held(&ta, &a); /* a stitch of the four free 16 MiB blocks: s1 is stale */
    b = (job){.pool = f.pool, .size = 2 * MiB, .stream = 1, .free_after = true};
    cr_assert(runs_past_the_gate(&b), "an allocate and free waited for another thread's eviction");
    cr_assert_eq(b.rc, GMLAKE_OK);
    CHECK_POOL(f.pool); /* a block being made and one being torn down at once */
    cr_assert(!a.done);
    gate_open();
    pthread_join(ta, NULL);
    cr_assert_eq(a.rc, GMLAKE_OK, "the stitched allocation: %s", gmlake_strerror(a.rc));
    CHECK_POOL(f.pool);
    gmlake_stats st = stats_of(f.pool);
    cr_assert_eq(st.stitches, 2);
    cr_assert_eq(st.stitch_evictions, 1);
    cr_assert_eq(st.stitched_blocks, 1, "auto GC kept the bound");
    cr_assert(!gml_pool_owns(f.pool, s1), "the stale cached block was torn down");
    must_free(f.pool, a.ptr, 1);
    for (int i = 0; i < 2; i++) {
        must_free(f.pool, live[i], 1);
        must_free(f.pool, lv[i], 1);
    }
    empty_to_bare(&f);
    fx_free(&f);
}
