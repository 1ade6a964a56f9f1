/* test_growth_threads.c — growth makes its driver calls without the pool lock: while one thread's
 * growth is held inside a driver call (a sim hook), other threads allocate, free and check the
 * pool; a driver failure during that growth leaves the pool consistent. */
#include "thread_gate.h"

/* Starts thread *t allocating `size` on stream 1 and waits until it is held in a call of `kind`. */
static void start_held(fixture *f, int kind, size_t size, pthread_t *t, job *a)
{
    gate_arm(f->dev, kind, 0);
    *a = (job){.pool = f->pool, .size = size, .stream = 1};
    start_job_held(t, a);
}

/* A pool with 8 MiB free on stream 1, and thread *grower (64 MiB on stream 1) held inside its
 * growth's first call of `kind`. */
static fixture held_growth(int kind, pthread_t *grower, job *a)
{
    fixture f = fx_make(512 * MiB, false, NULL);
    must_free(f.pool, must_alloc(f.pool, 8 * MiB, 1), 1);
    start_held(&f, kind, 64 * MiB, grower, a);
    return f;
}

Test(growth_threads, others_allocate_and_free_while_a_growth_is_in_flight, .timeout = 60)
{
    pthread_t ta;
    job a, b;
    fixture f = held_growth(GMLAKE_DC_CHUNK_CREATE, &ta, &a);
    /* another thread allocates from the free 8 MiB and frees, on the growing stream */
    b = (job){.pool = f.pool, .size = 4 * MiB, .stream = 1, .free_after = true};
    cr_assert(runs_past_the_gate(&b), "an allocate and free waited for another thread's growth");
    cr_assert_eq(b.rc, GMLAKE_OK);
    /* a small allocation on another stream too, and the checker, with the growth still held */
    uintptr_t s = must_alloc(f.pool, 4 * KiB, 2);
    must_free(f.pool, s, 2);
    cr_assert(!a.done, "the growth went on without its driver call");
    gate_open();
    pthread_join(ta, NULL);
    cr_assert_eq(a.rc, GMLAKE_OK, "the grown allocation: %s", gmlake_strerror(a.rc));
    CHECK_POOL(f.pool);
    must_free(f.pool, a.ptr, 1);
    gmlake_stats st = stats_of(f.pool);
    cr_assert_eq(st.live_allocations, 0);
    cr_assert_eq(st.reserved_bytes, gml_sim_bytes_in_use(f.dev));
    empty_to_bare(&f);
    fx_free(&f);
}

Test(growth_threads, a_driver_failure_during_an_unlocked_growth_is_undone, .timeout = 60)
{
    pthread_t ta;
    job a;
    fixture f = held_growth(GMLAKE_DC_SET_ACCESS, &ta, &a);
    /* the held growth's set_access fails: everything it created is released, the slow path goes
     * on (another growth succeeds) */
    gml_sim_fail_call(f.dev, GMLAKE_DC_SET_ACCESS, 1);
    CHECK_POOL(f.pool);
    gate_open();
    pthread_join(ta, NULL);
    cr_assert_eq(a.rc, GMLAKE_OK, "after the failed growth: %s", gmlake_strerror(a.rc));
    CHECK_POOL(f.pool);
    gmlake_stats st = stats_of(f.pool);
    cr_assert_eq(st.reserved_bytes, gml_sim_bytes_in_use(f.dev), "a failed growth leaked chunks");
    must_free(f.pool, a.ptr, 1);
    empty_to_bare(&f);
    fx_free(&f);
}

/* Two threads grow at once (each held in its chunk_create): both finish, each with its own slots. */
Test(growth_threads, two_growths_in_flight_at_once, .timeout = 60)
{
    pthread_t ta, tc;
    job a, c;
    fixture f = held_growth(GMLAKE_DC_CHUNK_CREATE, &ta, &a);
    c = (job){.pool = f.pool, .size = 32 * MiB, .stream = 2};
    cr_assert_eq(pthread_create(&tc, NULL, run_job, &c), 0);
    bool both = wait_for(NULL, &g.entered, 2, 3);
    gate_open();
    pthread_join(ta, NULL);
    pthread_join(tc, NULL);
    cr_assert(both, "the second growth waited for the first");
    cr_assert_eq(a.rc, GMLAKE_OK);
    cr_assert_eq(c.rc, GMLAKE_OK);
    cr_assert(a.ptr + a.size <= c.ptr || c.ptr + c.size <= a.ptr, "the two blocks overlap");
    CHECK_POOL(f.pool);
    must_free(f.pool, a.ptr, 1);
    must_free(f.pool, c.ptr, 2);
    cr_assert_eq(stats_of(f.pool).reserved_bytes, gml_sim_bytes_in_use(f.dev));
    fx_free(&f);
}

/* Free 16, 16 and 4 MiB blocks apart on stream 1 (2 and 4 MiB live between them), and thread
 * *stitcher (32 MiB on stream 1: a stitch of the two 16 MiB blocks, no growth) held inside its
 * first map. */
static fixture held_stitch(pthread_t *stitcher, job *a, uintptr_t live[2])
{
    fixture f = fx_make(512 * MiB, false, NULL);
    uintptr_t x = must_alloc(f.pool, 16 * MiB, 1);
    live[0] = must_alloc(f.pool, 2 * MiB, 1);
    uintptr_t z = must_alloc(f.pool, 16 * MiB, 1);
    live[1] = must_alloc(f.pool, 4 * MiB, 1);
    uintptr_t u = must_alloc(f.pool, 4 * MiB, 1);
    must_free(f.pool, x, 1);
    must_free(f.pool, z, 1);
    must_free(f.pool, u, 1);
    start_held(&f, GMLAKE_DC_MAP, 32 * MiB, stitcher, a);
    return f;
}

Test(growth_threads, others_allocate_and_free_while_a_stitch_is_in_flight, .timeout = 60)
{
    pthread_t ta;
    job a, b;
    uintptr_t live[2];
    fixture f = held_stitch(&ta, &a, live);
    uint64_t reserved = stats_of(f.pool).reserved_bytes;
    b = (job){.pool = f.pool, .size = 2 * MiB, .stream = 1, .free_after = true};
    cr_assert(runs_past_the_gate(&b), "an allocate and free waited for another thread's stitch");
    cr_assert_eq(b.rc, GMLAKE_OK);
    CHECK_POOL(f.pool);
    gate_open();
    pthread_join(ta, NULL);
    cr_assert_eq(a.rc, GMLAKE_OK, "the stitched allocation: %s", gmlake_strerror(a.rc));
    gmlake_stats st = stats_of(f.pool);
    cr_assert_eq(st.stitches, 1);
    cr_assert_eq(st.reserved_bytes, reserved, "the stitch grew");
    CHECK_POOL(f.pool);
    must_free(f.pool, a.ptr, 1);
    must_free(f.pool, live[0], 1);
    must_free(f.pool, live[1], 1);
    fx_free(&f);
}

Test(growth_threads, a_driver_failure_during_an_unlocked_stitch_is_undone, .timeout = 60)
{
    pthread_t ta;
    job a;
    uintptr_t live[2];
    fixture f = held_stitch(&ta, &a, live);
    gml_sim_fail_call(f.dev, GMLAKE_DC_MAP, 1); /* the held map fails */
    gate_open();
    pthread_join(ta, NULL);
    /* the parts went home; the slow path went on and grew a fresh block */
    cr_assert_eq(a.rc, GMLAKE_OK, "after the failed stitch: %s", gmlake_strerror(a.rc));
    CHECK_POOL(f.pool);
    gmlake_stats st = stats_of(f.pool);
    cr_assert_eq(st.stitches, 0);
    cr_assert_eq(st.stitched_blocks, 0);
    cr_assert_eq(gml_sim_reservation_count(f.dev), 1, "the stitched range stayed reserved");
    must_free(f.pool, a.ptr, 1);
    must_free(f.pool, live[0], 1);
    must_free(f.pool, live[1], 1);
    empty_to_bare(&f);
    fx_free(&f);
}
