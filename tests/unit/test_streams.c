/* test_streams.c — core/streams.c.  Through its own API (heap_helpers.h): the reuse rule, the
 * serving bins, promotion by events (no event per free; an event per stream when another stream
 * misses), device synchronisation, retiring a bin, the list of bins holding free blocks.  Through
 * the pool on the sim device (helpers.h): retiring a destroyed stream, per-thread default streams
 * recorded only by their own thread, device synchronisation without the pool lock (and its
 * failure), bins freed with their events. */
#include <pthread.h>
#include <string.h>

#include "heap_helpers.h"
#include "helpers.h"

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

/* A heap of `cap` bytes with manual events, bins of S1 and S2, and `grow` bytes grown for S1. */
static void two_streams(hfix *f, size_t cap, size_t grow, gml_bin **s1, gml_bin **s2)
{
    hf_make(f, cap);
    gml_sim_set_manual_events(f->dev, true);
    *s1 = gml_bin_get(&f->h, S1);
    *s2 = gml_bin_get(&f->h, S2);
    cr_assert_eq(gml_grow(&f->h, *s1, GML_SPACE_LARGE, GML_GROW_BLOCK, grow), GMLAKE_OK);
}

Test(streams, promotion_waits_for_the_event_of_the_freeing_stream)
{
    hfix f;
    gml_bin *s1, *s2;
    two_streams(&f, 16 * MiB, 4 * MiB, &s1, &s2);
    gml_block *a = hf_take(&f, s1, 2 * MiB);
    gml_block *b = hf_take(&f, s1, 2 * MiB);
    hf_put(&f, a, s1);
    hf_put(&f, b, s1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 0, "no event per free");
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 0), 0, "the work on S1 may still run");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 1, "one event covers every free so far");
    cr_assert_null(gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 2 * MiB));
    gml_sim_complete_events(f.dev);
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 0), 1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 1, "the recorded event was asked again");
    gml_block *x = gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 4 * MiB);
    cr_assert_not_null(x);
    cr_assert_eq(x->bin, f.h.ready);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(streams, a_miss_with_need_promotes_one_fitting_block_known_first)
{
    hfix f;
    hf_make(&f, 32 * MiB);
    gml_sim_set_manual_events(f.dev, true);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2), *r = f.h.ready;
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 12 * MiB), GMLAKE_OK);
    gml_block *a = hf_take(&f, s1, 4 * MiB), *keep1 = hf_take(&f, s1, 2 * MiB);
    gml_block *b = hf_take(&f, s1, 2 * MiB), *keep2 = hf_take(&f, s1, 2 * MiB);
    gml_block *c = hf_take(&f, s1, 2 * MiB);
    uintptr_t c_addr = c->addr; /* taken from the tail: c is the lowest */
    hf_put(&f, a, s1);
    hf_put(&f, b, s1);
    hf_put(&f, c, s1); /* S1: three free blocks of 4, 2 and 2 MiB, apart */
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 2 * MiB), 0, "S1's work may still run");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 1, "asked with one event");
    gml_sim_complete_events(f.dev);
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 3 * MiB), 1, "only one block moves");
    gml_block *x = gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 3 * MiB);
    cr_assert(x && x->bin == s2 && x->size == 4 * MiB, "the one that fits, to the asking stream");
    cr_assert_eq(s1->nfree, 2, "the rest stays with S1, where its later frees merge with it");
    uint64_t q = hf_calls(&f, GMLAKE_DC_EVENT_QUERY), rec = hf_calls(&f, GMLAKE_DC_EVENT_RECORD);
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 2 * MiB), 1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_QUERY) + hf_calls(&f, GMLAKE_DC_EVENT_RECORD), q + rec,
                 "a block known to have passed moves without a device call");
    x = gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 2 * MiB);
    cr_assert(x && x->bin == s2 && x->addr == c_addr, "the smallest, lowest first");
    cr_assert_eq(r->nfree, 0, "a miss's block goes to the asking stream, not the ready bin");
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 8 * MiB), 1,
                 "no block fits: every block that passed moves (for stitching)");
    cr_assert_eq(s1->nfree, 0);
    hf_put(&f, keep1, s1);
    hf_put(&f, keep2, s1);
    hf_check(&f, 0);
    hf_free(&f);
}

/* Session 8: the block a miss promoted went to the ready bin, where what the request left of it
 * never merged with the asking stream's later frees (blocks.c), so that stream's memory stayed in
 * pieces (FSDP2's all-gather stream: the replay reserved 8,130 MiB where the GPU, whose waits put
 * the block in the asking bin, reserved 8,072). */
Test(streams, a_block_promoted_for_a_miss_merges_with_the_asking_streams_later_frees)
{
    hfix f;
    gml_bin *s1, *s2;
    two_streams(&f, 32 * MiB, 12 * MiB, &s1, &s2);
    gml_block *x = hf_take(&f, s1, 8 * MiB), *keep = hf_take(&f, s1, 4 * MiB);
    hf_put(&f, x, s1);
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 4 * MiB), 0, "S1's work may still run");
    gml_sim_complete_events(f.dev);
    cr_assert_eq(gml_promote(&f.h, s2, GML_SPACE_LARGE, 4 * MiB), 1);
    gml_block *y = hf_take(&f, s2, 4 * MiB);
    hf_put(&f, y, s2);
    gml_block *whole = gml_best_fit(&f.h, s2, GML_SPACE_LARGE, 8 * MiB);
    cr_assert(whole && whole->size == 8 * MiB && whole->bin == s2,
              "S2's free merged with the rest of the block it was given: one 8 MiB block of S2");
    hf_put(&f, keep, s1);
    hf_check(&f, 0);
    hf_free(&f);
}

Test(streams, bin_passed_never_waits_a_device_synchronisation_passes_every_bin)
{
    hfix f;
    hf_make(&f, 16 * MiB);
    gml_sim_set_manual_events(f.dev, true);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    f.h.seq = 5;
    cr_assert(!gml_bin_passed(&f.h, s1, 5));
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_SYNC), 0, "nothing waits for the device");
    cr_assert(!gml_bin_passed(&f.h, s1, 5), "the event still runs");
    f.h.synced_seq = 5; /* what the pool sets after synchronising without its lock */
    cr_assert(gml_bin_passed(&f.h, s1, 5));
    cr_assert_eq(s1->done_seq, 5);
    cr_assert(!gml_bin_passed(&f.h, s1, 6), "work after the synchronisation is not known done");
    cr_assert(gml_bin_passed(&f.h, f.h.ready, 1000), "the ready bin has no pending work");
    hf_free(&f);
}

Test(streams, a_retired_bin_leaves_the_name_and_goes_when_empty_and_let_go)
{
    hfix f;
    hf_make(&f, 16 * MiB);
    gml_sim_set_manual_events(f.dev, true);
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 4 * MiB), GMLAKE_OK);
    gml_block *a = hf_take(&f, s1, 2 * MiB);
    hf_put(&f, a, s1);
    gml_bin_hold(s1); /* as a cached stitched block last freed on S1 does */
    gml_bin_retire(&f.h, s1);
    cr_assert(s1->retired);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 1, "an event covers its frees");
    gml_bin *fresh = gml_bin_get(&f.h, S1);
    cr_assert_neq(fresh, s1, "the handle names a new bin");
    cr_assert(!gml_bin_serves(&f.h, s1, fresh), "the old stream's blocks do not serve the new one");
    cr_assert_eq(gml_promote(&f.h, NULL, GML_SPACE_LARGE, 0), 0, "its work may still run");
    gml_sim_complete_events(f.dev);
    cr_assert(gml_promote(&f.h, NULL, GML_SPACE_LARGE, 0) > 0, "then its blocks reach the ready bin");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_DESTROY), 0, "a record still names the bin");
    hf_check(&f, 0);
    gml_bin_unhold(&f.h, s1);
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_DESTROY), 1, "then it went with its event");
    hf_check(&f, 0);
    hf_free(&f);
}

Test(streams, the_checker_verifies_the_list_of_bins_holding_free_blocks)
{
    hfix f;
    hf_make(&f, 16 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2);
    cr_assert(!gml_bins_hold_blocks(&f.h), "no stream bin holds free blocks yet");
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 4 * MiB), GMLAKE_OK);
    cr_assert(gml_bins_hold_blocks(&f.h), "S1 holds the new chunks");
    hf_check(&f, 0);
    char why[256];
    LIST_REMOVE(s1, holding); /* S1 holds a block but is off the list */
    cr_assert_eq(gml_heap_check(&f.h, NULL, 0, why, sizeof why), GMLAKE_ERR_CORRUPT);
    cr_assert(strstr(why, "holding list"), "%s", why);
    LIST_INSERT_HEAD(&f.h.holding, s1, holding);
    LIST_INSERT_HEAD(&f.h.holding, s2, holding); /* S2 holds nothing but is on the list */
    cr_assert_eq(gml_heap_check(&f.h, NULL, 0, why, sizeof why), GMLAKE_ERR_CORRUPT);
    cr_assert(strstr(why, "on the holding list with 0 free blocks"), "%s", why);
    LIST_REMOVE(s2, holding);
    hf_check(&f, 0);
    hf_free(&f);
}

static void no_stitch(gml_pool_settings *s) { s->vmm_defragment = false; }
/* The event rule alone: no stream waits for another's work on the GPU (stream_wait off). */
static void events_only(gml_pool_settings *s) { s->stream_wait = false; }
static void no_stitch_events_only(gml_pool_settings *s) { no_stitch(s), events_only(s); }

Test(streams, a_retired_stream_key_starts_afresh)
{
    fixture f = fx_make(64 * MiB, false, events_only);
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
    fixture f = fx_make(64 * MiB, false, no_stitch_events_only);
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

Test(streams, out_of_memory_synchronises_only_when_stream_bins_hold_blocks)
{
    fixture f = fx_make(16 * MiB, false, no_stitch);
    gml_pool *p = f.pool;
    gml_sim_set_manual_events(f.dev, true);
    /* five 3 MiB blocks with no stream (cudaMalloc) fill the device (8 chunks, 1 MiB free at the
     * top); the 2nd and 4th freed with no stream (cudaFree): 7 MiB free in the ready bin, so a 6 MiB request is within reach (it goes
     * through the last resort), but no release makes room for it (two chunks come back, three are
     * needed) and no stream bin holds a block: it fails with no device wait */
    uintptr_t v[5];
    for (int i = 0; i < 5; i++)
        v[i] = must_alloc(p, 3 * MiB, GML_STREAM_NONE);
    cr_assert_eq(stats_of(p).reserved_bytes, 16 * MiB, "the device is full");
    must_free(p, v[1], GML_STREAM_NONE);
    must_free(p, v[3], GML_STREAM_NONE);
    cr_assert_eq(gml_pool_alloc(p, 6 * MiB, 0x10, &(uintptr_t){0}), GMLAKE_ERR_NOMEM);
    CHECK_POOL(p);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.cache_releases, 1, "the last resort ran (it released the free chunks)");
    cr_assert_eq(st.device_calls[GMLAKE_DC_SYNCHRONIZE], 0, "nothing to wait for");
    must_free(p, v[0], GML_STREAM_NONE);
    must_free(p, v[2], GML_STREAM_NONE);
    must_free(p, v[4], GML_STREAM_NONE);
    cr_assert_eq(gml_pool_empty_cache(p), GMLAKE_OK); /* synchronises: counted from here */
    uint64_t syncs = stats_of(p).device_calls[GMLAKE_DC_SYNCHRONIZE];
    uintptr_t a = must_alloc(p, 12 * MiB, 0x10);
    cr_assert_eq(gml_pool_alloc(p, 8 * MiB, 0x10, &(uintptr_t){0}), GMLAKE_ERR_NOMEM);
    cr_assert_eq(stats_of(p).device_calls[GMLAKE_DC_SYNCHRONIZE], syncs, "nothing to wait for");
    must_free(p, a, 0x10);
    must_alloc(p, 14 * MiB, 0x20); /* on 16 MiB: only with a's memory, once 0x10's work passed */
    cr_assert_eq(stats_of(p).device_calls[GMLAKE_DC_SYNCHRONIZE], syncs + 1, "one device wait");
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

/* Issue 10's two-stream offload trace: a side stream's small miss moved every free block of the
 * main stream to the ready bin, so the main stream's next frees beside them no longer merged (a
 * ready block never joins a stream's block) and its large requests found its memory in pieces:
 * stitches (device calls) in the steady state.  A miss now moves only the block it needs. */
Test(streams, a_side_stream_miss_leaves_the_main_streams_memory_whole)
{
    fixture f = fx_make(64 * MiB, false, NULL);
    gml_pool *p = f.pool;
    const gml_stream main_s = 0x1000, side = 0x2000;
    uintptr_t a = must_alloc(p, 4 * MiB, main_s), b = must_alloc(p, 4 * MiB, main_s);
    cr_assert_eq(b, a + 4 * MiB, "two neighbours");
    uintptr_t s = must_alloc(p, 64 * KiB, main_s);
    must_free(p, s, main_s);
    must_free(p, a, main_s);
    uint64_t reserved = stats_of(p).reserved_bytes;
    uintptr_t t = must_alloc(p, 64 * KiB, side); /* misses: the main stream's work has passed */
    cr_assert_eq(stats_of(p).reserved_bytes, reserved, "served by the main stream's free memory");
    must_free(p, b, main_s);
    uint64_t calls = calls_of(p);
    uintptr_t c = must_alloc(p, 8 * MiB, main_s);
    cr_assert_eq(c, a, "the main stream's two frees made one block");
    cr_assert_eq(calls_of(p), calls, "no stitch, no growth, no event");
    must_free(p, c, main_s);
    must_free(p, t, side);
    fx_free(&f);
}

/* stream_wait (on by default): a stream takes a block another stream freed while that stream's
 * work still runs, by waiting for it on the GPU (as CUDA's pool does), instead of growing; its
 * own work after the allocation completes only after the other stream's. */
Test(streams, a_stream_takes_a_busy_block_by_waiting_for_it_on_the_gpu)
{
    fixture f = fx_make(64 * MiB, false, no_stitch);
    gml_pool *p = f.pool;
    const gml_stream s1 = 0x10, s2 = 0x20;
    uintptr_t x = must_alloc(p, 4 * MiB, s2);
    cr_assert_eq(gml_sim_launch(f.dev, s2), GMLAKE_OK); /* s2's kernel uses x */
    must_free(p, x, s2);
    uint64_t reserved = stats_of(p).reserved_bytes;
    cr_assert_eq(must_alloc(p, 4 * MiB, s1), x, "s1 takes s2's block");
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.reserved_bytes, reserved, "no growth");
    cr_assert_eq(st.device_calls[GMLAKE_DC_STREAM_WAIT], 1, "one wait on the GPU");
    gml_event ev;
    cr_assert_eq(gml_dev_event_create(f.dev, &ev), GMLAKE_OK);
    cr_assert_eq(gml_sim_launch(f.dev, s1), GMLAKE_OK); /* s1's kernel on x */
    gml_sim_finish(f.dev, s1);
    cr_assert_eq(gml_dev_event_record(f.dev, ev, s1), GMLAKE_OK);
    cr_assert_eq(gml_dev_event_query(f.dev, ev), GMLAKE_ERR_BUSY, "s1's work waits for s2's");
    gml_sim_finish(f.dev, s2);
    cr_assert_eq(gml_dev_event_query(f.dev, ev), GMLAKE_OK, "and completes after it");
    gml_dev_event_destroy(f.dev, ev);
    CHECK_POOL(p);
    /* an allocation usable by every stream at once (cudaMalloc) never takes a busy block */
    uintptr_t y = must_alloc(p, 4 * MiB, s2);
    cr_assert_eq(gml_sim_launch(f.dev, s2), GMLAKE_OK);
    must_free(p, y, s2);
    cr_assert_neq(must_alloc(p, 4 * MiB, GML_STREAM_NONE), y);
    CHECK_POOL(p);
    fx_free(&f);
}

/* gml_borrow_all (stitch_borrow, stitch.h "borrow"): the one wait per lending bin must cover the
 * latest free among the blocks it moves, not only an event the bin already had (recorded after
 * earlier frees).  Here S1 frees a and c behind kernel K1, a miss records S1's event (it covers
 * them only), then S1 frees b behind kernel K2; b is neither the smallest nor the largest of the
 * three.  S2's work after the borrow must wait for K2.  (Written for the review of 90d8e5f: its own
 * tests pass with the wait on S1's older event, because at the pool's level the promotion before
 * a stitch re-records the event of every bin with pending blocks.) */
Test(streams, borrow_all_waits_for_the_lenders_latest_free)
{
    hfix f;
    hf_make(&f, 32 * MiB);
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 16 * MiB), GMLAKE_OK);
    gml_block *a = hf_take(&f, s1, 2 * MiB), *m1 = hf_take(&f, s1, 2 * MiB), *c = hf_take(&f, s1, 6 * MiB);
    gml_block *m2 = hf_take(&f, s1, 2 * MiB), *b = hf_take(&f, s1, 4 * MiB);
    cr_assert(b->addr + b->size == m2->addr && m2->addr + m2->size == c->addr &&
              c->addr + c->size == m1->addr && m1->addr + m1->size == a->addr, "b | m2 | c | m1 | a");
    cr_assert_eq(gml_sim_launch(f.dev, S1), GMLAKE_OK); /* K1 uses a and c */
    uint64_t k1 = gml_sim_submitted(f.dev, S1);
    hf_put(&f, a, s1);
    hf_put(&f, c, s1);
    cr_assert(!gml_bin_passed(&f.h, s1, f.h.seq), "K1 runs");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 1, "S1's event covers the frees of a and c");
    cr_assert_eq(gml_sim_launch(f.dev, S1), GMLAKE_OK); /* K2 uses b */
    hf_put(&f, b, s1);
    cr_assert_eq(gml_borrow_all(&f.h, s2, GML_SPACE_LARGE, 0), 3, "a, b and c move to S2");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_STREAM_WAIT), 1, "one wait for S1");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), 2, "on a new event, recorded after b's free");
    hf_check(&f, 0);
    gml_event ev;
    cr_assert_eq(gml_dev_event_create(f.dev, &ev), GMLAKE_OK);
    gml_sim_finish(f.dev, S2); /* S2's own work (the wait is a unit of it); not what it waits for */
    cr_assert_eq(gml_dev_event_record(f.dev, ev, S2), GMLAKE_OK);
    gml_sim_finish_to(f.dev, S1, k1);
    cr_assert_eq(gml_dev_event_query(f.dev, ev), GMLAKE_ERR_BUSY, "S2's work waits for K2, not only K1");
    gml_sim_finish(f.dev, S1);
    cr_assert_eq(gml_dev_event_query(f.dev, ev), GMLAKE_OK);
    gml_dev_event_destroy(f.dev, ev);
    hf_free(&f);
}

/* gml_borrow_all moves nothing from a bin it cannot cover by a wait: a lending bin of a stream this
 * thread cannot name (another thread's per-thread default stream) with no event after its frees
 * (it is asked to record at its next call instead), and any bin whose wait is refused (as the CUDA
 * device refuses one on a capturing stream: device_cuda.c, not_capturing). */
Test(streams, borrow_all_moves_nothing_it_cannot_cover_by_a_wait)
{
    hfix f;
    hf_make(&f, 32 * MiB);
    const gml_stream other = GML_STREAM_PTDS | ((gml_thread_id() + 1000) << 6); /* not this thread's */
    cr_assert(!gml_dev_stream_here(f.dev, other));
    gml_bin *s1 = gml_bin_get(&f.h, S1), *s2 = gml_bin_get(&f.h, S2), *o = gml_bin_get(&f.h, other);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 12 * MiB), GMLAKE_OK);
    gml_block *x = hf_take(&f, s1, 4 * MiB), *m = hf_take(&f, s1, 4 * MiB), *y = hf_take(&f, s1, 4 * MiB);
    (void)m;
    cr_assert_eq(gml_sim_launch(f.dev, S1), GMLAKE_OK);
    cr_assert_eq(gml_sim_launch(f.dev, other), GMLAKE_OK);
    x = hf_put(&f, x, o);  /* another thread's stream frees x */
    y = hf_put(&f, y, s1); /* S1 frees y */
    /* the wait is refused: nothing moves, from either bin */
    gml_sim_fail_call(f.dev, GMLAKE_DC_STREAM_WAIT, 1);
    cr_assert_eq(gml_borrow_all(&f.h, s2, GML_SPACE_LARGE, 0), 0);
    cr_assert(o->want_record, "the other thread's stream records at its next call");
    cr_assert(x->bin == o && y->bin == s1);
    hf_check(&f, 0);
    /* once the other thread recorded its event (at its own next call: gml_bin_record there),
     * its bin lends by that event, which this thread may wait for */
    uint64_t waits = hf_calls(&f, GMLAKE_DC_STREAM_WAIT);
    cr_assert_eq(gml_dev_event_create(f.dev, &o->ev), GMLAKE_OK);
    cr_assert_eq(gml_dev_event_record(f.dev, o->ev, other), GMLAKE_OK);
    o->ev_seq = f.h.seq;
    o->want_record = false;
    cr_assert_eq(gml_borrow_all(&f.h, s2, GML_SPACE_LARGE, 0), 2, "x by the other thread's event, y by S1's");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_STREAM_WAIT), waits + 2);
    cr_assert(x->bin == s2 && y->bin == s2);
    hf_check(&f, 0);
    gml_sim_finish(f.dev, S1);
    gml_sim_finish(f.dev, other);
    hf_free(&f);
}

/* gml_borrow_all makes no wait that cannot spare the growth: when the other bins' free bytes
 * together are below what the stitch lacks (`want`), nothing moves, and no event is recorded nor
 * waited on; with `want` within them, they move. */
Test(streams, borrow_all_waits_only_when_the_lenders_can_cover_what_is_lacking)
{
    hfix f;
    gml_bin *s1, *s2;
    two_streams(&f, 32 * MiB, 12 * MiB, &s1, &s2);
    gml_block *x = hf_take(&f, s1, 4 * MiB), *m = hf_take(&f, s1, 4 * MiB), *y = hf_take(&f, s1, 4 * MiB);
    (void)m;
    cr_assert_eq(gml_sim_launch(f.dev, S1), GMLAKE_OK);
    hf_put(&f, x, s1);
    hf_put(&f, y, s1);
    uint64_t records = hf_calls(&f, GMLAKE_DC_EVENT_RECORD);
    cr_assert_eq(gml_borrow_all(&f.h, s2, GML_SPACE_LARGE, 8 * MiB + 1), 0, "8 MiB cannot cover more");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_STREAM_WAIT), 0, "no wait");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_EVENT_RECORD), records, "no event");
    cr_assert_eq(gml_borrow_all(&f.h, s2, GML_SPACE_LARGE, 8 * MiB), 2, "8 MiB covers 8 MiB");
    cr_assert_eq(hf_calls(&f, GMLAKE_DC_STREAM_WAIT), 1);
    hf_check(&f, 0);
    gml_sim_finish(f.dev, S1);
    hf_free(&f);
}
