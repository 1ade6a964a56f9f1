/* test_stream_order.c — the pool never hands a stream memory another stream's work may still use.
 *
 * A randomized oracle over the pool on a simulated device (unbacked: bookkeeping only).  Every
 * live allocation's physical bytes (gml_sim_backing, so stitched ranges count by the memory they
 * map) are remembered at its free with the freeing stream's work submitted then.  Each new
 * allocation's physical bytes are checked against every remembered use by another stream: that
 * work must have completed, or (a stream-ordered request) be ordered before the asking stream's
 * next work by the GPU-side waits the pool made (gml_sim_ordered).  Streams get work, finish it,
 * are retired; requests come on 2-6 streams and with no stream; empty_cache runs now and then;
 * the pool's checker runs every 50 steps.  A stream-ordered request checks against the asking
 * stream's next work, a stream-less one against completion.  Written for the review of 16f4dea
 * (the promotion to the asking bin); each of its three tests fails with gml_borrow's GPU-side
 * wait left out, and with a promotion that takes a block whose work may still run.
 */
#include <stdlib.h>

#include "helpers.h"

#define STEPS 3000
#define MAX_LIVE 1024
#define MAX_USES 65536
#define NSTREAMS_MAX 6

/* Sanitized builds run the long configurations shorter (their instrumentation is ~10x slower). */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define LONG_STEPS 4000
#else
#define LONG_STEPS 12000
#endif

/* A run's configuration (run_with: the defaults of the first tests). */
typedef struct cfg {
    int steps;                          /* 0: STEPS */
    size_t capacity;                    /* 0: 256 MiB */
    void (*tweak)(gml_pool_settings *);
    unsigned small_pct;                 /* requests below 1 MiB, in % (0: 40) */
    unsigned empty_in;                  /* 1 in empty_in of the rare steps empties the cache (0: 10) */
    bool implicit;                      /* streams keyed as the preload layer keys per-thread
                                           default streams and legacy streams (hooks.c stream_key) */
    bool cross;                         /* some frees on another stream than the allocation's, after
                                           a GPU-side wait on the allocating stream (the program's
                                           own ordering), and some with no stream after a device
                                           synchronisation (cudaFree, hooks.c serve_free) */
} cfg;

/* What the runs of one test did: the pool's slow-path steps (summed over its seeds) and the
 * oracle's own events, so that a test fails when a path it claims to cover was never taken. */
typedef struct tally {
    gml_pool_paths paths;
    uint64_t stitches, patches, reuses, evictions, empties, releases;
    uint64_t retire_pending;            /* streams retired while their frees' work was running */
    uint64_t cross_frees;               /* frees on another stream than the allocation's */
    uint64_t cross_stitched;            /* of those, of stitched blocks */
    uint64_t none_frees;                /* frees with no stream of stream-ordered allocations */
    uint64_t none_allocs;               /* allocations with no stream */
} tally;

typedef struct use {
    uintptr_t lo, hi; /* physical bytes */
    uintptr_t va;     /* the virtual address of lo, through which the work used them */
    gml_stream s;
    uint64_t unit;
} use;

typedef struct live {
    uintptr_t p;
    size_t size;
    gml_stream s;
} live;

typedef struct oracle {
    fixture f;
    use uses[MAX_USES];
    size_t nuses;
    live lv[MAX_LIVE];
    size_t nlv;
    unsigned long long hazards, unmapped;
    unsigned rng;
    const cfg *c;
    tally *t;
    gml_event ev;                       /* the program's own event, for cross-stream frees */
    uintptr_t arena_lo, arena_hi;
    uintptr_t part_va;                  /* each_phys: the virtual address of the part at hand */
} oracle;

static unsigned next_rand(oracle *o)
{
    o->rng = o->rng * 1103515245u + 12345u;
    return o->rng >> 8;
}

/* Calls fn on each physically contiguous part of [p, p + size) (at most one granule each). */
static void each_phys(oracle *o, uintptr_t p, size_t size, void (*fn)(oracle *, uintptr_t, uintptr_t, void *),
                      void *arg)
{
    const size_t g = 2 * MiB;
    for (uintptr_t v = p; v < p + size;) {
        uintptr_t end = (v & ~(uintptr_t)(g - 1)) + g, ph;
        if (end > p + size)
            end = p + size;
        cr_assert(gml_sim_backing(o->f.dev, v, &ph), "live address %#lx is not mapped", (unsigned long)v);
        o->part_va = v;
        fn(o, ph, ph + (end - v), arg);
        v = end;
    }
}

static void check_part(oracle *o, uintptr_t lo, uintptr_t hi, void *arg)
{
    gml_stream s = *(gml_stream *)arg;
    for (size_t i = 0; i < o->nuses; i++) {
        const use *u = &o->uses[i];
        if (u->hi <= lo || hi <= u->lo || u->s == s)
            continue;
        if (!gml_sim_ordered(o->f.dev, u->s, u->unit, s, s == GML_STREAM_NONE))
            o->hazards++;
    }
}

static void remember_part(oracle *o, uintptr_t lo, uintptr_t hi, void *arg)
{
    const use *u = arg;
    cr_assert_lt(o->nuses, MAX_USES, "too many uses remembered");
    o->uses[o->nuses++] = (use){lo, hi, o->part_va, u->s, u->unit};
}

/* Counts as hazards the remembered uses whose work may still run but whose virtual range no longer
 * maps the bytes they used (a stitched range torn down or patched, a home extent released, before
 * the work that used it completed: on a GPU, a fault or a write into other memory). */
static void check_mappings(oracle *o)
{
    for (size_t i = 0; i < o->nuses; i++) {
        const use *u = &o->uses[i];
        uintptr_t ph;
        if ((!gml_sim_backing(o->f.dev, u->va, &ph) || ph != u->lo) &&
            !gml_sim_ordered(o->f.dev, u->s, u->unit, u->s, true))
            o->unmapped++;
    }
}

/* Forgets the uses whose work has completed. */
static void prune(oracle *o)
{
    size_t j = 0;
    for (size_t i = 0; i < o->nuses; i++)
        if (!gml_sim_ordered(o->f.dev, o->uses[i].s, o->uses[i].unit, o->uses[i].s, true))
            o->uses[j++] = o->uses[i];
    o->nuses = j;
}

static size_t random_size(oracle *o)
{
    unsigned k = next_rand(o) % 100, small = o->c->small_pct ? o->c->small_pct : 40;
    if (k < small)
        return 512 + next_rand(o) % (900 * KiB);
    if (k < small + (100 - small) * 5 / 6)
        return (1 + next_rand(o) % 24) * MiB + next_rand(o) % MiB;
    return (20 + next_rand(o) % 40) * MiB;
}

/* Whether some use remembered of stream s has not completed. */
static bool running(oracle *o, gml_stream s)
{
    for (size_t i = 0; i < o->nuses; i++)
        if (o->uses[i].s == s && !gml_sim_ordered(o->f.dev, s, o->uses[i].unit, s, true))
            return true;
    return false;
}

/* Frees l as the program would: on its stream (its last use in flight), on another stream after
 * a GPU-side wait for it (that stream's use in flight too), or with no stream after the device
 * synchronised (cudaFree). */
static void free_live(oracle *o, live l, gml_stream *streams, int n)
{
    gml_stream fs = l.s;
    unsigned how = o->c->cross && l.s != GML_STREAM_NONE ? next_rand(o) % 8 : 7;
    if (l.s != GML_STREAM_NONE) {
        gml_sim_launch(o->f.dev, l.s); /* its last use, in flight at the free */
        use u = {0, 0, 0, l.s, gml_sim_submitted(o->f.dev, l.s)};
        each_phys(o, l.p, l.size, remember_part, &u);
    }
    if (how == 0) {
        cr_assert_eq(gml_pool_sync(o->f.pool), GMLAKE_OK); /* cudaFree: the device is done */
        fs = GML_STREAM_NONE;
        o->t->none_frees++;
        prune(o);
    } else if (how == 1 && (fs = streams[next_rand(o) % (unsigned)n]) != l.s) {
        cr_assert_eq(gml_dev_event_record(o->f.dev, o->ev, l.s), GMLAKE_OK);
        cr_assert_eq(gml_dev_stream_wait(o->f.dev, fs, o->ev), GMLAKE_OK);
        gml_sim_launch(o->f.dev, fs); /* the freeing stream's use, after the wait */
        use u = {0, 0, 0, fs, gml_sim_submitted(o->f.dev, fs)};
        each_phys(o, l.p, l.size, remember_part, &u);
        o->t->cross_frees++;
        o->t->cross_stitched += l.p < o->arena_lo || l.p >= o->arena_hi;
    } else {
        fs = l.s;
    }
    cr_assert_eq(gml_pool_free(o->f.pool, l.p, fs), GMLAKE_OK);
}

/* A new stream's key: a created stream's handle, or (cfg implicit) every other one a per-thread
 * default stream or a legacy stream as the preload layer keys them (device.h). */
static gml_stream new_key(oracle *o, gml_stream *next_key)
{
    gml_stream k = (*next_key)++;
    if (!o->c->implicit)
        return k;
    switch (k % 4) {
    case 0: /* this thread's per-thread default stream on "device" k */
        return GML_STREAM_PTDS | ((gml_stream)gml_thread_id() << 6) | (k & 63);
    case 1: /* another thread's: this thread cannot name it (no event, no wait: gml_dev_stream_here) */
        return GML_STREAM_PTDS | ((gml_stream)(gml_thread_id() + k) << 6) | (k & 63);
    case 2: return gml_stream_legacy((uintptr_t)k << 12); /* context k's legacy stream */
    default: return k << 4;                                 /* a created stream */
    }
}

static void step(oracle *o, gml_stream *streams, int n, gml_stream *next_key)
{
    unsigned op = next_rand(o) % 100;
    if (op < 45 && o->nlv < MAX_LIVE) {
        int si = (int)(next_rand(o) % (unsigned)(n + 1));
        gml_stream s = si == n && next_rand(o) % 4 == 0 ? GML_STREAM_NONE : streams[si % n];
        size_t size = random_size(o);
        uintptr_t p;
        if (gml_pool_alloc(o->f.pool, size, s, &p) != GMLAKE_OK)
            return; /* out of the sim's memory: allowed */
        o->t->none_allocs += s == GML_STREAM_NONE;
        each_phys(o, p, size, check_part, &s);
        if (s != GML_STREAM_NONE)
            gml_sim_launch(o->f.dev, s); /* the new owner's work on it */
        o->lv[o->nlv++] = (live){p, size, s};
    } else if (op < 85 && o->nlv) {
        size_t i = next_rand(o) % o->nlv;
        live l = o->lv[i];
        o->lv[i] = o->lv[--o->nlv];
        free_live(o, l, streams, n);
    } else if (op < 95) {
        gml_sim_finish(o->f.dev, streams[next_rand(o) % (unsigned)n]);
        prune(o);
    } else if (op < 96) {
        int si = (int)(next_rand(o) % (unsigned)n);
        bool busy = false;
        for (size_t i = 0; i < o->nlv; i++)
            busy |= o->lv[i].s == streams[si];
        if (!busy) { /* a destroyed stream: its key is never used again */
            o->t->retire_pending += running(o, streams[si]);
            gml_pool_stream_retire(o->f.pool, streams[si]);
            streams[si] = new_key(o, next_key);
        }
    } else if (op < 97 && next_rand(o) % (o->c->empty_in ? o->c->empty_in : 10) == 0) {
        cr_assert_eq(gml_pool_empty_cache(o->f.pool), GMLAKE_OK);
        o->t->empties++;
        prune(o);
    } else {
        for (int i = 0; i < n; i++)
            if (next_rand(o) % 3 == 0)
                gml_sim_launch(o->f.dev, streams[i]);
    }
}

static void add_tally(tally *t, oracle *o)
{
    gml_pool_paths q;
    gml_pool_paths_get(o->f.pool, &q);
    uint64_t *a = (uint64_t *)&t->paths, *b = (uint64_t *)&q;
    for (size_t i = 0; i < sizeof q / sizeof *a; i++)
        a[i] += b[i];
    gmlake_stats st = stats_of(o->f.pool);
    t->stitches += st.stitches;
    t->reuses += st.stitch_reuses;
    t->evictions += st.stitch_evictions;
    t->releases += st.cache_releases;
}

static void run_cfg(unsigned seed, int nstreams, const cfg *c, tally *t)
{
    tally local = {0};
    oracle *o = calloc(1, sizeof *o);
    cr_assert_not_null(o);
    o->c = c;
    o->t = t ? t : &local;
    o->f = fx_make(c->capacity ? c->capacity : 256 * MiB, false, c->tweak);
    cr_assert_eq(gml_dev_event_create(o->f.dev, &o->ev), GMLAKE_OK);
    gml_pool_arena(o->f.pool, &o->arena_lo, &o->arena_hi);
    o->rng = seed;
    gml_stream streams[NSTREAMS_MAX], next_key = 100;
    for (int i = 0; i < nstreams; i++)
        streams[i] = new_key(o, &next_key);
    int steps = c->steps ? c->steps : STEPS;
    for (int t = 0; t < steps; t++) {
        step(o, streams, nstreams, &next_key);
        check_mappings(o);
        if (t % 50 == 0)
            CHECK_POOL(o->f.pool);
    }
    cr_assert_eq(o->hazards, 0, "seed %u, %d streams: %llu allocations got memory another stream's "
                 "work may still use", seed, nstreams, o->hazards);
    cr_assert_eq(o->unmapped, 0, "seed %u, %d streams: %llu times a range was unmapped or remapped "
                 "while work that used it may still run", seed, nstreams, o->unmapped);
    add_tally(o->t, o);
    for (size_t i = 0; i < o->nlv; i++)
        cr_assert_eq(gml_pool_free(o->f.pool, o->lv[i].p, o->lv[i].s), GMLAKE_OK);
    CHECK_POOL(o->f.pool);
    gml_dev_event_destroy(o->f.dev, o->ev);
    fx_free(&o->f);
    free(o);
}

static void run_with(unsigned seed, int nstreams, void (*tweak)(gml_pool_settings *), tally *t)
{
    cfg c = {.tweak = tweak};
    run_cfg(seed, nstreams, &c, t);
}

static void report(const char *name, const tally *t)
{
    const gml_pool_paths *q = &t->paths;
    cr_log_info("%s: promotions %llu borrows %llu borrow_alls %llu patches %llu joins %llu "
                "small_refills %llu small_reclaims %llu regrowths %llu last_resorts %llu (syncs %llu) "
                "stitches %llu reuses %llu evictions %llu empties %llu releases %llu "
                "retire_pending %llu cross_frees %llu (stitched %llu) none_frees %llu none_allocs %llu",
                name, (unsigned long long)q->promotions, (unsigned long long)q->borrows,
                (unsigned long long)q->borrow_alls, (unsigned long long)q->patches,
                (unsigned long long)q->joins, (unsigned long long)q->small_refills,
                (unsigned long long)q->small_reclaims, (unsigned long long)q->regrowths,
                (unsigned long long)q->last_resorts, (unsigned long long)q->last_resort_syncs,
                (unsigned long long)t->stitches, (unsigned long long)t->reuses,
                (unsigned long long)t->evictions, (unsigned long long)t->empties,
                (unsigned long long)t->releases, (unsigned long long)t->retire_pending,
                (unsigned long long)t->cross_frees, (unsigned long long)t->cross_stitched,
                (unsigned long long)t->none_frees, (unsigned long long)t->none_allocs);
}

/* A path a test claims to cover was taken at least once over its seeds. */
#define COVERED(t, field) cr_expect_gt((t).field, 0, "the path %s was never taken", #field)

/* What every configuration covers: the stream-ordered reuse paths and the last resort. */
static void covered_common(const tally *t)
{
    COVERED(*t, paths.promotions);
    COVERED(*t, paths.borrows);
    COVERED(*t, paths.joins);
    COVERED(*t, paths.patches);
    COVERED(*t, paths.last_resort_syncs);
    COVERED(*t, stitches);
    COVERED(*t, reuses);
    COVERED(*t, evictions);
    COVERED(*t, releases);
    COVERED(*t, none_allocs);
}

static void run_seeds(const char *name, const cfg *c, int nstreams, unsigned seeds, tally *t)
{
    for (unsigned seed = 1; seed <= seeds; seed++)
        run_cfg(seed * 7919u, nstreams, c, t);
    report(name, t);
    covered_common(t);
}

static void run_streams(int nstreams)
{
    tally t = {0};
    for (unsigned seed = 1; seed <= 6; seed++)
        run_with(seed, nstreams, NULL, &t);
    report("default", &t);
    covered_common(&t);
    COVERED(t, paths.small_refills);
    COVERED(t, paths.small_reclaims);
}

Test(stream_order, no_allocation_gets_memory_in_use_by_another_streams_work_two_streams)
{
    run_streams(2);
}

Test(stream_order, no_allocation_gets_memory_in_use_by_another_streams_work_four_streams)
{
    run_streams(4);
}

Test(stream_order, no_allocation_gets_memory_in_use_by_another_streams_work_six_streams)
{
    run_streams(6);
}

/* stitch_borrow (stitch.h "borrow", 90d8e5f): a large stitch takes the other streams' free blocks
 * after a GPU-side wait per lending bin; every large miss is stitched first (frag_limit and
 * churn_limit 0), so that it borrows often.  Fails when gml_borrow_all's wait may name any event
 * the lending bin already had, whenever it was recorded (streams::borrow_all_waits_for_the_lenders_
 * latest_free pins the finer rule: an event recorded after the latest free it covers). */
static void borrow_and_stitch(gml_pool_settings *s)
{
    s->stitch_borrow = true;
    s->frag_limit = 0;
    s->churn_limit = 0;
}

Test(stream_order, no_allocation_gets_memory_in_use_by_another_streams_work_with_stitch_borrow)
{
    tally t = {0};
    for (unsigned seed = 1; seed <= 6; seed++)
        for (int n = 2; n <= 6; n += 2)
            run_with(seed, n, borrow_and_stitch, &t);
    report("stitch_borrow", &t);
    covered_common(&t);
    COVERED(t, paths.borrow_alls);
}

/* ---- the rare paths, forced (session 31's review): long runs of several seeds of one
 * configuration each, with frees on other streams than the allocation's (after the program's own
 * GPU-side wait) and with no stream (after a device synchronisation, as cudaFree); each fails if
 * a path it names was never taken. ---- */

/* A small stitched-block cache (auto GC by count and by bytes) and every large miss stitched:
 * patches of stale cached blocks and teardowns all the time, stitched blocks freed on a stream
 * other than the one that used them. */
static void small_cache(gml_pool_settings *s)
{
    s->auto_gc = 3;
    s->stitch_bytes_limit = 96 * MiB;
    s->frag_limit = 0;
    s->churn_limit = 0;
}

Test(stream_order, a_small_stitched_cache_patches_and_tears_down_only_what_no_work_uses)
{
    cfg c = {.steps = LONG_STEPS, .tweak = small_cache, .small_pct = 10, .cross = true};
    tally t = {0};
    run_seeds("small cache", &c, 3, 3, &t);
    COVERED(t, cross_stitched);
    COVERED(t, none_frees);
    COVERED(t, paths.regrowths);
}

/* A device of 96 MiB: most large misses reach the last resort, which synchronises the device,
 * releases the cache and retries; streams retire while their frees' work is running. */
Test(stream_order, a_tight_device_synchronises_before_it_reuses_what_other_streams_freed)
{
    cfg c = {.steps = LONG_STEPS, .capacity = 96 * MiB, .cross = true};
    tally t = {0};
    run_seeds("tight device", &c, 3, 3, &t);
    COVERED(t, retire_pending);
    COVERED(t, cross_frees);
    COVERED(t, paths.small_reclaims);
}

/* empty_cache at most rare steps (phases between them): the pool regrows (grows before it
 * stitches) while blocks of the streams are pending. */
static void stitch_all(gml_pool_settings *s)
{
    s->frag_limit = 0;
    s->churn_limit = 0;
}

Test(stream_order, regrowth_after_empty_cache_keeps_stream_order)
{
    cfg c = {.steps = LONG_STEPS, .empty_in = 1, .tweak = stitch_all, .cross = true};
    tally t = {0};
    run_seeds("empties", &c, 3, 3, &t);
    COVERED(t, paths.regrowths);
    COVERED(t, empties);
}

/* Mostly small requests: refills of the small space and reclaims of whole small chunks. */
Test(stream_order, small_requests_refill_and_reclaim_in_stream_order)
{
    cfg c = {.steps = LONG_STEPS, .small_pct = 90, .cross = true};
    tally t = {0};
    run_seeds("small", &c, 5, 3, &t);
    COVERED(t, paths.small_refills);
    COVERED(t, paths.small_reclaims);
}

/* Streams keyed as the preload layer keys them (hooks.c stream_key): this thread's per-thread
 * default streams, another thread's (which this thread cannot name: no event is recorded on it,
 * no stream waits for it, gml_dev_stream_here), legacy streams, created streams; stream-less
 * requests (cudaMalloc) need memory no stream's work may still use. */
Test(stream_order, per_thread_and_legacy_stream_keys_keep_stream_order)
{
    cfg c = {.steps = LONG_STEPS, .implicit = true, .cross = true};
    tally t = {0};
    run_seeds("implicit keys", &c, 6, 3, &t);
    COVERED(t, cross_frees);
    COVERED(t, none_frees);
}

/* stitch_borrow on a small device with mostly large requests: borrows of every lender before a
 * stitch grows, beside the last resort. */
Test(stream_order, stitch_borrow_on_a_small_device_keeps_stream_order)
{
    cfg c = {.steps = LONG_STEPS, .tweak = borrow_and_stitch, .capacity = 128 * MiB, .small_pct = 10,
             .cross = true};
    tally t = {0};
    run_seeds("stitch_borrow, small device", &c, 2, 3, &t);
    COVERED(t, paths.borrow_alls);
    COVERED(t, cross_stitched);
}
