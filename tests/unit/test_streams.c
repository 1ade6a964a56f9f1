/* test_streams.c — bins of streams (core/streams.c) on the sim device: retiring a destroyed
 * stream, per-thread default streams recorded only by their own thread, device synchronisation
 * without the pool lock (and its failure), bins freed with their events. */
#include <pthread.h>

#include "helpers.h"

static void no_stitch(gml_pool_settings *s) { s->vmm_defragment = false; }

Test(streams, a_retired_stream_key_starts_afresh)
{
    fixture f = fx_make(64 * MiB, false, NULL);
    gml_pool *p = f.pool;
    gml_sim_set_manual_events(f.dev, true);
    const gml_stream s = 0x1000;
    uintptr_t x = must_alloc(p, 4 * MiB, s);
    must_free(p, x, s);
    gml_pool_stream_retire(p, s);
    CHECK_POOL(p);
    cr_assert_eq(stats_of(p).device_calls[GMLAKE_DC_EVENT_RECORD], 1, "an event covers its frees");
    uintptr_t y = must_alloc(p, 4 * MiB, s);
    cr_assert_neq(y, x, "a new stream with the old handle took a block whose work may run");
    gml_sim_complete_events(f.dev);
    uintptr_t z = must_alloc(p, 4 * MiB, s);
    cr_assert_eq(z, x, "after the event completed the retired block serves others");
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.device_calls[GMLAKE_DC_EVENT_CREATE], st.device_calls[GMLAKE_DC_EVENT_DESTROY],
                 "the emptied bin went with its event");
    gml_pool_stream_retire(p, 0x9999); /* a stream the pool never saw */
    CHECK_POOL(p);
    fx_free(&f);
}

Test(streams, many_retired_streams_leave_nothing_behind)
{
    fixture f = fx_make(64 * MiB, false, NULL);
    gml_pool *p = f.pool;
    for (gml_stream s = 0x1000; s < 0x1000 + 20000; s++) {
        uintptr_t x = must_alloc(p, MiB + 512 * (s % 5), s);
        cr_assert_eq(gml_pool_free(p, x, s), GMLAKE_OK);
        gml_pool_stream_retire(p, s);
    }
    gmlake_stats st = stats_of(p);
    cr_assert_leq(st.device_calls[GMLAKE_DC_EVENT_CREATE] - st.device_calls[GMLAKE_DC_EVENT_DESTROY], 1);
    cr_assert_eq(st.reserved_bytes, 2 * MiB);
    CHECK_POOL(p);
    fx_free(&f);
}

Test(streams, only_streams_whose_work_completed_pass_their_blocks)
{
    fixture f = fx_make(64 * MiB, false, no_stitch);
    gml_pool *p = f.pool;
    uintptr_t a = must_alloc(p, 4 * MiB, 0x10), b = must_alloc(p, 4 * MiB, 0x20);
    cr_assert_eq(gml_sim_launch(f.dev, 0x10), GMLAKE_OK);
    cr_assert_eq(gml_sim_launch(f.dev, 0x20), GMLAKE_OK);
    must_free(p, a, 0x10);
    must_free(p, b, 0x20);
    gml_sim_finish(f.dev, 0x20);
    cr_assert_eq(must_alloc(p, 4 * MiB, 0x30), b, "0x20's work completed: its block passes");
    uintptr_t c = must_alloc(p, 4 * MiB, 0x30);
    cr_assert_neq(c, a, "0x10's work still runs");
    cr_assert_eq(must_alloc(p, 4 * MiB, 0x10), a, "0x10 itself reuses its block at once");
    fx_free(&f);
}

static gml_pool *shared;
static uintptr_t a_block;
static pthread_barrier_t bar;

static void *owner(void *arg)
{
    gml_stream mine = gml_stream_ptds(0);
    a_block = must_alloc(shared, 4 * MiB, mine);
    uintptr_t k = must_alloc(shared, 4 * MiB, mine);
    must_free(shared, a_block, mine);
    pthread_barrier_wait(&bar); /* the other thread misses */
    pthread_barrier_wait(&bar);
    must_free(shared, k, mine); /* its next call records the event another thread asked for */
    pthread_barrier_wait(&bar);
    return arg;
}

Test(streams, a_per_thread_stream_is_recorded_only_by_its_thread)
{
    fixture f = fx_make(64 * MiB, false, no_stitch);
    shared = f.pool;
    pthread_barrier_init(&bar, NULL, 2);
    pthread_t a;
    pthread_create(&a, NULL, owner, NULL);
    pthread_barrier_wait(&bar);
    gml_stream mine = gml_stream_ptds(0);
    cr_assert_neq(mine, gml_stream_ptds(1), "one key per device");
    uintptr_t y = must_alloc(shared, 4 * MiB, mine);
    cr_assert_neq(y, a_block, "another thread's default stream was not waited for");
    cr_assert_eq(stats_of(shared).device_calls[GMLAKE_DC_EVENT_RECORD], 0,
                 "no event was recorded on the wrong thread's stream");
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    pthread_join(a, NULL);
    cr_assert_eq(stats_of(shared).device_calls[GMLAKE_DC_EVENT_RECORD], 1, "its own thread recorded");
    uint64_t reserved = stats_of(shared).reserved_bytes;
    must_alloc(shared, 4 * MiB, mine);
    cr_assert_eq(stats_of(shared).reserved_bytes, reserved, "then its blocks crossed threads");
    fx_free(&f);
}

Test(streams, out_of_memory_synchronises_only_when_other_streams_hold_blocks)
{
    fixture f = fx_make(16 * MiB, false, no_stitch);
    gml_pool *p = f.pool;
    gml_sim_set_manual_events(f.dev, true);
    uintptr_t a = must_alloc(p, 12 * MiB, 0x10);
    cr_assert_eq(gml_pool_alloc(p, 8 * MiB, 0x10, &(uintptr_t){0}), GMLAKE_ERR_NOMEM);
    cr_assert_eq(stats_of(p).device_calls[GMLAKE_DC_SYNCHRONIZE], 0, "nothing to wait for");
    must_free(p, a, 0x10);
    must_alloc(p, 14 * MiB, 0x20); /* on 16 MiB: only with a's memory, once 0x10's work passed */
    cr_assert_eq(stats_of(p).device_calls[GMLAKE_DC_SYNCHRONIZE], 1, "one device wait");
    fx_free(&f);
}

Test(streams, a_failed_synchronisation_is_reported)
{
    fixture f = fx_make(16 * MiB, false, NULL);
    gml_pool *p = f.pool;
    gml_sim_set_manual_events(f.dev, true);
    uintptr_t a = must_alloc(p, 4 * MiB, 0x10);
    must_free(p, a, 0x10);
    gml_sim_fail_call(f.dev, GMLAKE_DC_SYNCHRONIZE, 1);
    cr_assert_eq(gml_pool_sync(p), GMLAKE_ERR_DEVICE);
    gml_sim_fail_call(f.dev, GMLAKE_DC_SYNCHRONIZE, 1);
    cr_assert_eq(gml_pool_empty_cache(p), GMLAKE_ERR_DEVICE);
    CHECK_POOL(p);
    cr_assert_eq(gml_pool_empty_cache(p), GMLAKE_OK);
    cr_assert_eq(stats_of(p).reserved_bytes, 0);
    CHECK_POOL(p);
    fx_free(&f);
}
