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

typedef struct use {
    uintptr_t lo, hi; /* physical bytes */
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
    unsigned long long hazards;
    unsigned rng;
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
    o->uses[o->nuses++] = (use){lo, hi, u->s, u->unit};
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
    unsigned k = next_rand(o) % 10;
    if (k < 4)
        return 512 + next_rand(o) % (900 * KiB);
    if (k < 9)
        return (1 + next_rand(o) % 24) * MiB + next_rand(o) % MiB;
    return (20 + next_rand(o) % 40) * MiB;
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
        each_phys(o, p, size, check_part, &s);
        if (s != GML_STREAM_NONE)
            gml_sim_launch(o->f.dev, s); /* the new owner's work on it */
        o->lv[o->nlv++] = (live){p, size, s};
    } else if (op < 85 && o->nlv) {
        size_t i = next_rand(o) % o->nlv;
        live l = o->lv[i];
        o->lv[i] = o->lv[--o->nlv];
        if (l.s != GML_STREAM_NONE) {
            gml_sim_launch(o->f.dev, l.s); /* its last use, in flight at the free */
            use u = {0, 0, l.s, gml_sim_submitted(o->f.dev, l.s)};
            each_phys(o, l.p, l.size, remember_part, &u);
        }
        cr_assert_eq(gml_pool_free(o->f.pool, l.p, l.s), GMLAKE_OK);
    } else if (op < 95) {
        gml_sim_finish(o->f.dev, streams[next_rand(o) % (unsigned)n]);
        prune(o);
    } else if (op < 96) {
        int si = (int)(next_rand(o) % (unsigned)n);
        bool busy = false;
        for (size_t i = 0; i < o->nlv; i++)
            busy |= o->lv[i].s == streams[si];
        if (!busy) { /* a destroyed stream: its key is never used again */
            gml_pool_stream_retire(o->f.pool, streams[si]);
            streams[si] = (*next_key)++;
        }
    } else if (op < 97 && next_rand(o) % 10 == 0) {
        cr_assert_eq(gml_pool_empty_cache(o->f.pool), GMLAKE_OK);
        prune(o);
    } else {
        for (int i = 0; i < n; i++)
            if (next_rand(o) % 3 == 0)
                gml_sim_launch(o->f.dev, streams[i]);
    }
}

static void run_with(unsigned seed, int nstreams, void (*tweak)(gml_pool_settings *))
{
    oracle *o = calloc(1, sizeof *o);
    cr_assert_not_null(o);
    o->f = fx_make(256 * MiB, false, tweak);
    o->rng = seed;
    gml_stream streams[NSTREAMS_MAX], next_key = 100;
    for (int i = 0; i < nstreams; i++)
        streams[i] = next_key++;
    for (int t = 0; t < STEPS; t++) {
        step(o, streams, nstreams, &next_key);
        if (t % 50 == 0)
            CHECK_POOL(o->f.pool);
    }
    cr_assert_eq(o->hazards, 0, "seed %u, %d streams: %llu allocations got memory another stream's "
                 "work may still use", seed, nstreams, o->hazards);
    for (size_t i = 0; i < o->nlv; i++)
        cr_assert_eq(gml_pool_free(o->f.pool, o->lv[i].p, o->lv[i].s), GMLAKE_OK);
    CHECK_POOL(o->f.pool);
    fx_free(&o->f);
    free(o);
}

static void run(unsigned seed, int nstreams) { run_with(seed, nstreams, NULL); }

Test(stream_order, no_allocation_gets_memory_in_use_by_another_streams_work_two_streams)
{
    for (unsigned seed = 1; seed <= 6; seed++)
        run(seed, 2);
}

Test(stream_order, no_allocation_gets_memory_in_use_by_another_streams_work_four_streams)
{
    for (unsigned seed = 1; seed <= 6; seed++)
        run(seed, 4);
}

Test(stream_order, no_allocation_gets_memory_in_use_by_another_streams_work_six_streams)
{
    for (unsigned seed = 1; seed <= 6; seed++)
        run(seed, 6);
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
    for (unsigned seed = 1; seed <= 6; seed++)
        for (int n = 2; n <= 6; n += 2)
            run_with(seed, n, borrow_and_stitch);
}
