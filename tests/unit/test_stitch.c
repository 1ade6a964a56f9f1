/* test_stitch.c — virtual memory stitching on the sim device: aliasing, the stitched-block cache,
 * StitchFree order, auto GC, deficit-only growth and every knob.  Every step runs the checker. */
#include <string.h>

#include "helpers.h"
#include "stitch/stitch.h"

/* Allocates n 2 MiB blocks (one chunk each, adjacent) and frees those whose bit is set in
 * `holes`; returns the blocks in v. */
/* n blocks of 2 MiB on stream s, then those whose bit is set in `holes` freed. */
static void checkerboard_on(gml_pool *p, uintptr_t *v, int n, unsigned holes, gml_stream s)
{
    for (int i = 0; i < n; i++)
        v[i] = must_alloc(p, 2 * MiB, s);
    for (int i = 0; i < n; i++)
        if (holes & (1u << i))
            must_free(p, v[i], s);
}

static void checkerboard(gml_pool *p, uintptr_t *v, int n, unsigned holes)
{
    checkerboard_on(p, v, n, holes, 0);
}

static bool in_block(uintptr_t x, uintptr_t b, size_t n) { return x >= b && x < b + n; }

Test(stitch, stitched_range_aliases_its_chunks)
{
    fixture f = fx_make(32 * MiB, true, NULL);
    gml_pool *p = f.pool;
    uintptr_t v[8];
    checkerboard(p, v, 8, 0x55); /* holes at 0, 2, 4, 6 */
    uint64_t reserved = stats_of(p).reserved_bytes;
    uintptr_t s = must_alloc(p, 8 * MiB, 0);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.stitches, 1);
    cr_assert_eq(st.reserved_bytes, reserved, "stitching asked the device for no memory");
    for (int i = 0; i < 8; i++)
        cr_assert(!in_block(s, v[i], 2 * MiB), "the stitched block is a fresh range");
    /* each 2 MiB of the stitched range is one of the holes: find which, both directions */
    for (int k = 0; k < 4; k++) {
        unsigned char *view = (unsigned char *)(s + k * 2 * MiB);
        memset(view, 0x40 + k, 2 * MiB);
        int found = -1;
        for (int i = 0; i < 8; i += 2)
            if (((unsigned char *)v[i])[12345] == 0x40 + k &&
                ((unsigned char *)v[i])[2 * MiB - 1] == 0x40 + k)
                found = i;
        cr_assert_neq(found, -1, "part %d of the stitched range is visible at a home range", k);
        memset((void *)(v[found] + 4096), 0x99, 100);
        cr_assert_eq(view[4096 + 50], 0x99, "a write at home shows through the stitched view");
    }
    must_free(p, s, 0);
    fx_free(&f);
}

Test(stitch, cached_block_is_reused_without_device_calls)
{
    fixture f = fx_make(32 * MiB, false, NULL);
    gml_pool *p = f.pool;
    uintptr_t v[8];
    checkerboard(p, v, 8, 0x55);
    uintptr_t s = must_alloc(p, 8 * MiB, 0);
    must_free(p, s, 0);
    uint64_t calls = calls_of(p);
    for (int round = 0; round < 5; round++) {
        uintptr_t t = must_alloc(p, 7 * MiB + 3, 0);
        cr_assert_eq(t, s, "the cached stitched block is taken again");
        must_free(p, t, 0);
    }
    gmlake_stats st = stats_of(p);
    cr_assert_eq(calls_of(p), calls, "reuse makes zero device calls");
    cr_assert_eq(st.stitches, 1);
    cr_assert_eq(st.stitch_reuses, 5);
    cr_assert_eq(st.stitched_blocks, 1);
    fx_free(&f);
}

static void gc2(gml_pool_settings *s) { s->auto_gc = 2; }

Test(stitch, stale_blocks_are_evicted_lru_first)
{
    fixture f = fx_make(64 * MiB, false, gc2);
    gml_pool *p = f.pool;
    uintptr_t v[12];
    checkerboard(p, v, 12, 0x555); /* holes at 0,2,4,6,8,10 */
    uintptr_t s1 = must_alloc(p, 4 * MiB, 0);
    uintptr_t s2 = must_alloc(p, 4 * MiB, 0);
    must_free(p, s1, 0); /* s1 is now the least recently used */
    must_free(p, s2, 0);
    uintptr_t h[4];
    for (int i = 0; i < 4; i++) /* lowest holes first: both cached blocks go stale */
        h[i] = must_alloc(p, 2 * MiB, 0);
    uintptr_t s3 = must_alloc(p, 4 * MiB, 0);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.stitches, 3);
    cr_assert_eq(st.stitch_evictions, 1);
    cr_assert_eq(st.stitched_blocks, 2, "auto GC keeps the count at its bound");
    cr_assert(!gml_pool_owns(p, s1), "the least recently used stale block went first");
    cr_assert(gml_pool_owns(p, s2));
    cr_assert(gml_pool_owns(p, s3));
    (void)h;
    fx_free(&f);
}

/* The tests of teardowns and churn make stale cached blocks on purpose: patches off, so that a
 * miss tears one down (test_stitch_patch.c has the patches). */
static void gc1(gml_pool_settings *s)
{
    s->auto_gc = 1;
    s->stitch_patch = false;
}

Test(stitch, blocks_in_use_or_pending_are_never_evicted)
{
    fixture f = fx_make(64 * MiB, false, gc1);
    gml_pool *p = f.pool;
    gml_sim_set_manual_events(f.dev, true);
    const gml_stream st1 = 0x1000;
    uintptr_t v[12];
    for (int i = 0; i < 12; i++)
        v[i] = must_alloc(p, 2 * MiB, st1);
    for (int i = 0; i < 12; i += 2)
        must_free(p, v[i], st1);
    uintptr_t s1 = must_alloc(p, 4 * MiB, st1);
    uintptr_t s2 = must_alloc(p, 4 * MiB, st1);
    cr_assert_eq(stats_of(p).stitched_blocks, 2, "two live stitched blocks exceed the bound");
    must_free(p, s1, st1); /* the GPU may still be using s1 */
    uintptr_t h = must_alloc(p, 2 * MiB, st1); /* a hole: makes s1 stale */
    uintptr_t s3 = must_alloc(p, 4 * MiB, st1);
    cr_assert(gml_pool_owns(p, s1), "not torn down before its last use completed");
    cr_assert_eq(stats_of(p).stitch_evictions, 0);
    gml_sim_complete_events(f.dev);
    must_free(p, s2, st1);
    uintptr_t s4 = 0;
    must_free(p, h, st1);
    s4 = must_alloc(p, 6 * MiB, st1); /* a new stitch runs the GC */
    cr_assert_geq(stats_of(p).stitch_evictions, 1);
    cr_assert(!gml_pool_owns(p, s1), "torn down once its work completed");
    cr_assert(gml_pool_owns(p, s3) && gml_pool_owns(p, s4), "live blocks stay");
    fx_free(&f);
}

static void bytes8(gml_pool_settings *s)
{
    s->stitch_bytes_limit = 8 * MiB;
    s->stitch_patch = false;
}

Test(stitch, auto_gc_bounds_stitched_bytes)
{
    fixture f = fx_make(64 * MiB, false, bytes8);
    gml_pool *p = f.pool;
    uintptr_t v[12];
    checkerboard(p, v, 12, 0x555);
    uintptr_t s1 = must_alloc(p, 4 * MiB, 0), s2 = must_alloc(p, 4 * MiB, 0);
    must_free(p, s1, 0);
    uintptr_t h = must_alloc(p, 2 * MiB, 0); /* the lowest hole, one of s1's: s1 goes stale */
    uintptr_t s3 = must_alloc(p, 4 * MiB, 0);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.stitches, 3);
    cr_assert_eq(st.stitch_evictions, 1);
    cr_assert_leq(st.stitched_bytes, 8 * MiB);
    cr_assert(!gml_pool_owns(p, s1) && gml_pool_owns(p, s2) && gml_pool_owns(p, s3));
    (void)h;
    fx_free(&f);
}

Test(stitch, growth_is_only_the_deficit)
{
    fixture f = fx_make(64 * MiB, false, NULL);
    gml_pool *p = f.pool;
    uintptr_t v[4];
    checkerboard(p, v, 4, 0x5); /* 2 free chunks */
    uint64_t reserved = stats_of(p).reserved_bytes;
    uintptr_t s = must_alloc(p, 8 * MiB, 0); /* 4 chunks: 2 free + 2 new */
    cr_assert_eq(stats_of(p).reserved_bytes, reserved + 4 * MiB);
    cr_assert_eq(stats_of(p).stitches, 1);
    must_free(p, s, 0);
    fx_free(&f);
}

static void off(gml_pool_settings *s) { s->vmm_defragment = false; }
static void frag16(gml_pool_settings *s) { s->frag_limit = 16 * MiB; }

Test(stitch, knob_vmm_defragment_off_and_frag_limit)
{
    void (*tweaks[])(gml_pool_settings *) = {off, frag16};
    for (int t = 0; t < 2; t++) {
        fixture f = fx_make(64 * MiB, false, tweaks[t]);
        uintptr_t v[8];
        checkerboard(f.pool, v, 8, 0x55);
        uint64_t reserved = stats_of(f.pool).reserved_bytes;
        must_alloc(f.pool, 8 * MiB, 0);
        cr_assert_eq(stats_of(f.pool).stitches, 0, "tweak %d", t);
        cr_assert_eq(stats_of(f.pool).reserved_bytes, reserved + 8 * MiB, "grew the whole request");
        fx_free(&f);
    }
}

/* frag_limit decides between stitching and growing while the device can grow; once it cannot, a
 * request below it is stitched rather than refused.  Blocks of 3, 4, 3 and 2 MiB fill a device of
 * six chunks; freeing the 4 and the 2 MiB ones leaves 6 MiB free in two places.  A 6 MiB request
 * fits in neither; releasing the free whole chunks gives back two, one short of growing it in one
 * piece; but the free megabytes the 4 MiB block leaves in the chunks it shared with its
 * neighbours, with two grown chunks between them, make a stitched range of 6 MiB. */
Test(stitch, frag_limit_yields_when_the_device_cannot_grow)
{
    fixture f = fx_make(12 * MiB, true, frag16);
    gml_pool *p = f.pool;
    uintptr_t a = must_alloc(p, 3 * MiB, 0);
    uintptr_t b = must_alloc(p, 4 * MiB, 0);
    uintptr_t c = must_alloc(p, 3 * MiB, 0);
    uintptr_t d = must_alloc(p, 2 * MiB, 0);
    cr_assert_eq(stats_of(p).reserved_bytes, 12 * MiB, "the device is full");
    must_free(p, b, 0);
    must_free(p, d, 0);
    uintptr_t s = 0;
    cr_assert_eq(gml_pool_alloc(p, 6 * MiB, 0, &s), GMLAKE_OK,
                 "a 6 MiB request below frag_limit is stitched once growth fails");
    CHECK_POOL(p);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.stitches, 1);
    cr_assert_eq(st.failed_allocations, 0);
    memset((void *)a, 0x11, 3 * MiB);
    memset((void *)c, 0x33, 3 * MiB);
    memset((void *)s, 0x22, 6 * MiB);
    for (size_t k = 0; k < 3 * MiB; k += 4099)
        cr_assert(((unsigned char *)a)[k] == 0x11 && ((unsigned char *)c)[k] == 0x33,
                  "the stitched range hands out none of the live blocks' bytes");
    must_free(p, s, 0);
    must_free(p, a, 0);
    must_free(p, c, 0);
    CHECK_POOL(p);
    fx_free(&f);
}

/* A request that grows the pool first (below frag_limit) is stitched as soon as growth fails,
 * as a request above the limit would be: not after the last resort, which synchronises the
 * device and gives the free chunks back.  Eight 2 MiB blocks fill a 16 MiB device on a stream;
 * four are freed, every other one. */
Test(stitch, a_request_that_grows_first_is_stitched_when_growth_fails_without_a_synchronisation)
{
    fixture f = fx_make(16 * MiB, true, frag16);
    gml_pool *p = f.pool;
    const gml_stream st1 = 0x1000;
    uintptr_t v[8];
    checkerboard_on(p, v, 8, 0x55, st1);
    uintptr_t s = must_alloc(p, 4 * MiB, st1);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.stitches, 1, "stitched once growth failed");
    cr_assert_eq(st.device_calls[GMLAKE_DC_SYNCHRONIZE], 0, "the device was not synchronised");
    cr_assert_eq(st.device_calls[GMLAKE_DC_CHUNK_RELEASE], 0, "no chunk was given back");
    cr_assert_eq(st.reserved_bytes, 16 * MiB);
    memset((void *)s, 0x5a, 4 * MiB);
    for (int i = 1; i < 8; i += 2)
        cr_assert_eq(*(unsigned char *)v[i], 0, "the stitched range overlaps no live block");
    must_free(p, s, st1);
    fx_free(&f);
}

static void gc1_nochurn(gml_pool_settings *s)
{
    gc1(s);
    s->churn_limit = 0;
}

/* After n small allocate/free pairs, a 4 MiB miss; the pool has then made `stitches` stitches
 * and reserves `reserved` bytes.  The miss's block. */
static uintptr_t miss_after(gml_pool *p, int n, uint64_t stitches, uint64_t reserved)
{
    for (int i = 0; i < n; i++)
        must_free(p, must_alloc(p, 4096, 0), 0);
    uintptr_t b = must_alloc(p, 4 * MiB, 0);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.stitches, stitches, "after %d more allocations: %lu stitches", n, (unsigned long)st.stitches);
    cr_assert_eq(st.reserved_bytes, reserved);
    return b;
}

/* Stitching churns when a new stitched block tears a cached one down (auto GC): for the next
 * 4096 allocations a miss below churn_limit grows the pool rather than stitching again, and
 * after them it stitches as before.  churn_limit=0 keeps stitching throughout. */
Test(stitch, a_miss_grows_while_stitching_churns)
{
    for (int t = 0; t < 2; t++) {
        fixture f = fx_make(64 * MiB, true, t ? gc1_nochurn : gc1);
        gml_pool *p = f.pool;
        uintptr_t v[12];
        checkerboard(p, v, 12, 0x555); /* holes at 0,2,4,6,8,10 */
        uintptr_t s1 = must_alloc(p, 4 * MiB, 0);
        must_free(p, s1, 0);
        uintptr_t h = must_alloc(p, 2 * MiB, 0); /* a hole of s1's: s1 goes stale */
        uintptr_t s2 = must_alloc(p, 4 * MiB, 0);
        gmlake_stats st = stats_of(p);
        cr_assert_eq(st.stitches, 2);
        cr_assert_eq(st.stitch_evictions, 1, "s2 tore the cached s1 down: stitching churns");
        uint64_t reserved = st.reserved_bytes;
        uintptr_t s3 = must_alloc(p, 4 * MiB, 0); /* three 2 MiB holes are left: a miss */
        st = stats_of(p);
        cr_assert_eq(st.stitches, t ? 3 : 2, "churn_limit %s", t ? "0" : "32MiB");
        cr_assert_eq(st.reserved_bytes, t ? reserved : reserved + 4 * MiB);
        if (!t) {
            /* while it churns a miss takes a cached stitched block first: s2, freed, with its
             * chunks free, serves the next 4 MiB with no device call */
            must_free(p, s2, 0);
            gmlake_stats before = stats_of(p);
            uint64_t calls = calls_of(p);
            s2 = must_alloc(p, 4 * MiB, 0);
            st = stats_of(p);
            cr_assert_eq(st.stitch_reuses, before.stitch_reuses + 1, "the cached s2 served it");
            cr_assert_eq(st.stitches, 2);
            cr_assert_eq(calls_of(p), calls, "no device call");
            /* the window lasts 4096 allocations from s2's stitch (the 14th): a miss after 3,900
             * more still grows, and one after 300 more is stitched again */
            uintptr_t g = miss_after(p, 3900, 2, reserved + 8 * MiB); /* still churning: grown */
            uintptr_t s4 = miss_after(p, 300, 3, reserved + 8 * MiB); /* the churn passed */
            must_free(p, s4, 0);
            must_free(p, g, 0);
        }
        must_free(p, s3, 0);
        must_free(p, s2, 0);
        must_free(p, h, 0);
        CHECK_POOL(p);
        fx_free(&f);
    }
}

static void count_call(void *arg) { (*(int *)arg)++; }

/* A device that cannot grow, while stitching churns: once a growth has failed, the misses that
 * would grow first are stitched at once for the window that follows, not sent to a growth that
 * fails again at every miss (a cuMemCreate each).  The device is full (another owner holds
 * half, the pool 8 chunks of 2 MiB, every other one free); requests of 4 and 6 MiB in turn never fit a cached stitched block (reuse_limit
 * 1.25) and, with one block cached, each tears the other down. */
Test(stitch, a_device_that_cannot_grow_is_not_asked_again_at_every_miss_while_stitching_churns)
{
    for (int t = 0; t < 2; t++) {
        fixture f = fx_make(64 * MiB, true, t ? gc1_nochurn : gc1);
        gml_pool *p = f.pool;
        gml_handle other; /* another owner holds half of the device: the pool cannot know */
        cr_assert_eq(gml_dev_chunk_create(f.dev, 32 * MiB, &other), GMLAKE_OK);
        uintptr_t v[16];
        checkerboard(p, v, 16, 0x5555);
        int creates = 0;
        gml_sim_hook_call(f.dev, GMLAKE_DC_CHUNK_CREATE, count_call, &creates);
        for (int i = 0; i < 40; i++)
            must_free(p, must_alloc(p, i % 2 ? 6 * MiB : 4 * MiB, 0), 0);
        gml_sim_hook_call(f.dev, GMLAKE_DC_CHUNK_CREATE, NULL, NULL);
        gmlake_stats st = stats_of(p);
        cr_assert_eq(st.stitches, 40, "every request was stitched");
        cr_assert_geq(st.stitch_evictions, 39, "and tore the other cached block down: churn");
        cr_assert_eq(st.reserved_bytes, 32 * MiB);
        cr_assert_eq(creates, t ? 0 : 1, "growth attempts on a full device: %d (churn_limit %s)",
                      creates, t ? "0" : "32MiB");
        for (int i = 1; i < 16; i += 2)
            must_free(p, v[i], 0);
        CHECK_POOL(p);
        gml_dev_chunk_release(f.dev, other);
        fx_free(&f);
    }
}

static void reuse2(gml_pool_settings *s) { s->reuse_limit = 2.0; }

Test(stitch, knob_reuse_limit)
{
    for (int t = 0; t < 2; t++) {
        fixture f = fx_make(64 * MiB, false, t ? reuse2 : NULL);
        uintptr_t v[8];
        checkerboard(f.pool, v, 8, 0x55);
        uintptr_t s = must_alloc(f.pool, 8 * MiB, 0);
        must_free(f.pool, s, 0);
        must_alloc(f.pool, 6 * MiB, 0); /* 8 MiB block: 8 > 6 x 1.25, but 8 <= 6 x 2 */
        gmlake_stats st = stats_of(f.pool);
        cr_assert_eq(st.stitch_reuses, (uint64_t)t, "reuse_limit %s", t ? "2.0" : "1.25");
        cr_assert_eq(st.stitches, t ? 1 : 2);
        fx_free(&f);
    }
}

static void level1(gml_pool_settings *s) { s->defrag_level = 1; }
static void level2(gml_pool_settings *s) { s->defrag_level = 2; }

Test(stitch, knob_defrag_level)
{
    /* ample memory: level 1 grows instead of stitching */
    fixture f = fx_make(64 * MiB, false, level1);
    uintptr_t v[8];
    checkerboard(f.pool, v, 8, 0x55);
    must_alloc(f.pool, 8 * MiB, 0);
    cr_assert_eq(stats_of(f.pool).stitches, 0);
    fx_free(&f);
    /* 10 chunks on the device, 8 held, 4 of them free: a 4-chunk request */
    void (*tweaks[])(gml_pool_settings *) = {NULL, level1, level2};
    for (int lvl = 0; lvl < 3; lvl++) {
        f = fx_make(20 * MiB, false, tweaks[lvl]);
        checkerboard(f.pool, v, 8, 0x55);
        must_alloc(f.pool, 8 * MiB, 0);
        gmlake_stats st = stats_of(f.pool);
        cr_assert_eq(st.stitches, lvl < 2 ? 1 : 0, "level %d", lvl);
        cr_assert_eq(st.device_calls[GMLAKE_DC_CHUNK_RELEASE], lvl < 2 ? 0 : 4,
                     "level 2 releases the cache before anything else");
        cr_assert_eq(st.reserved_bytes, 16 * MiB);
        fx_free(&f);
    }
}

static void events_only(gml_pool_settings *s) { s->stream_wait = false; }

Test(stitch, cached_block_follows_stream_rules)
{
    fixture f = fx_make(64 * MiB, false, events_only);
    gml_pool *p = f.pool;
    gml_sim_set_manual_events(f.dev, true);
    const gml_stream a = 0x1000, b = 0x2000;
    uintptr_t v[8];
    for (int i = 0; i < 8; i++)
        v[i] = must_alloc(p, 2 * MiB, a);
    for (int i = 0; i < 8; i += 2)
        must_free(p, v[i], a);
    uintptr_t s = must_alloc(p, 8 * MiB, a);
    must_free(p, s, a);
    uintptr_t t = must_alloc(p, 8 * MiB, b);
    cr_assert_neq(t, s, "another stream does not take chunks whose work may be running");
    cr_assert_eq(stats_of(p).stitch_reuses, 0);
    must_free(p, t, b);
    cr_assert_eq(must_alloc(p, 8 * MiB, a), s, "the freeing stream reuses it at once");
    fx_free(&f);
}

static void borrow_on(gml_pool_settings *s) { s->stitch_borrow = true; }
static void borrow_on_waits_off(gml_pool_settings *s) { s->stitch_borrow = true, s->stream_wait = false; }

/* X1 | Y | X2, 8 MiB each: X1 and X2 allocated on `side` and freed there behind a kernel still
 * running on it (their frees pending for every other stream), Y live on `main_s` between them. */
static void pending_on_side(fixture *f, gml_stream main_s, gml_stream side, uintptr_t *y)
{
    uintptr_t x1 = must_alloc(f->pool, 8 * MiB, side);
    *y = must_alloc(f->pool, 8 * MiB, main_s);
    uintptr_t x2 = must_alloc(f->pool, 8 * MiB, side);
    cr_assert(*y == x1 + 8 * MiB && x2 == *y + 8 * MiB, "three neighbours");
    cr_assert_eq(gml_sim_launch(f->dev, side), GMLAKE_OK); /* a kernel on side uses X1 and X2 */
    must_free(f->pool, x1, side);
    must_free(f->pool, x2, side);
}

/* Where the GPU runs far behind the host, the other streams' frees are still pending when a
 * large request of one stream misses: before growing, its stitch takes that memory by making
 * the stream wait for the other stream's work on the GPU (stitch.h, "borrow"). */
Test(stitch, a_large_stitch_takes_another_streams_pending_frees_by_a_wait_instead_of_growing)
{
    fixture f = fx_make(128 * MiB, false, borrow_on);
    gml_pool *p = f.pool;
    const gml_stream main_s = 0x10, side = 0x20;
    uintptr_t y;
    pending_on_side(&f, main_s, side, &y);
    gmlake_stats before = stats_of(p);
    uintptr_t s = must_alloc(p, 16 * MiB, main_s);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.reserved_bytes, before.reserved_bytes, "no growth: X1 and X2 stitched");
    cr_assert_eq(st.stitches, before.stitches + 1);
    cr_assert_eq(st.device_calls[GMLAKE_DC_STREAM_WAIT], before.device_calls[GMLAKE_DC_STREAM_WAIT] + 1,
                 "one wait on the GPU for the side stream");
    /* main_s's work after the allocation runs only after the side stream's kernel */
    gml_event ev;
    cr_assert_eq(gml_dev_event_create(f.dev, &ev), GMLAKE_OK);
    cr_assert_eq(gml_sim_launch(f.dev, main_s), GMLAKE_OK);
    gml_sim_finish(f.dev, main_s);
    cr_assert_eq(gml_dev_event_record(f.dev, ev, main_s), GMLAKE_OK);
    cr_assert_eq(gml_dev_event_query(f.dev, ev), GMLAKE_ERR_BUSY, "main_s waits for the side stream");
    gml_sim_finish(f.dev, side);
    cr_assert_eq(gml_dev_event_query(f.dev, ev), GMLAKE_OK);
    gml_dev_event_destroy(f.dev, ev);
    CHECK_POOL(p);
    must_free(p, s, main_s);
    must_free(p, y, main_s);
    CHECK_POOL(p);
    fx_free(&f);
}

/* A request below 1/GML_BORROW_SHARE of the pool grows rather than wait (a random-size workload
 * with frees on two streams would otherwise stitch and churn), and so does every request with
 * stream_wait off, or with stitch_borrow off (the default). */
Test(stitch, a_small_stitch_or_stream_wait_off_grows_rather_than_wait_for_another_stream)
{
    void (*tweaks[3])(gml_pool_settings *) = {borrow_on, borrow_on_waits_off, NULL};
    for (int round = 0; round < 3; round++) {
        fixture f = fx_make(1024 * MiB, false, tweaks[round]);
        gml_pool *p = f.pool;
        const gml_stream main_s = 0x10, side = 0x20;
        /* round 0: a live block makes 16 MiB less than 1/GML_BORROW_SHARE of the pool */
        uintptr_t big = round == 0 ? must_alloc(p, (size_t)16 * MiB * GML_BORROW_SHARE, main_s) : 0;
        uintptr_t y;
        pending_on_side(&f, main_s, side, &y);
        gmlake_stats before = stats_of(p);
        uintptr_t s = must_alloc(p, 16 * MiB, main_s);
        gmlake_stats st = stats_of(p);
        cr_assert_gt(st.reserved_bytes, before.reserved_bytes, "round %d: grown", round);
        cr_assert_eq(st.device_calls[GMLAKE_DC_STREAM_WAIT], before.device_calls[GMLAKE_DC_STREAM_WAIT],
                     "round %d: no wait", round);
        gml_sim_finish(f.dev, side);
        must_free(p, s, main_s);
        must_free(p, y, main_s);
        if (big)
            must_free(p, big, main_s);
        CHECK_POOL(p);
        fx_free(&f);
    }
}

Test(stitch, empty_cache_tears_everything_down)
{
    fixture f = fx_make(32 * MiB, true, NULL);
    gml_pool *p = f.pool;
    uintptr_t v[8];
    checkerboard(p, v, 8, 0x55);
    uintptr_t s = must_alloc(p, 8 * MiB, 0);
    must_free(p, s, 0);
    for (int i = 1; i < 8; i += 2)
        must_free(p, v[i], 0);
    cr_assert_eq(gml_pool_empty_cache(p), GMLAKE_OK);
    CHECK_POOL(p);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.stitched_blocks, 0);
    cr_assert_eq(st.reserved_bytes, 0);
    cr_assert_eq(gml_sim_bytes_in_use(f.dev), 0);
    cr_assert_eq(gml_sim_mapping_count(f.dev), 0);
    cr_assert_eq(gml_sim_reservation_count(f.dev), 1, "only the arena stays reserved");
    fx_free(&f);
}

/* Near capacity, a cached stitched block freed on a stream whose work is pending pins the only
 * memory a request could use.  Review suspected a spurious out-of-memory here: the last resort
 * synchronises only when a stream bin holds free blocks.  These pin down why it cannot happen:
 * while the block's parts sit in its stream's bin that bin holds blocks (the pool synchronises,
 * then the block is torn down and its extents released); once they left it (live again, or
 * freed with no stream into the ready bin), fitting, stitching and small refills use pinned
 * chunks as they are (pins only keep release away). */
static const gml_stream pa = 0x1000, pb = 0x2000;

/* A full 32 MiB device; v: its 16 chunks, the odd ones live and the even ones parts of stitched
 * block *sb, cached after a free on pa whose work is pending (manual events). */
static fixture full_with_pending_stitch_tweaked(uintptr_t v[16], uintptr_t *sb,
                                               void (*tweak)(gml_pool_settings *))
{
    fixture f = fx_make(32 * MiB, false, tweak);
    gml_pool *p = f.pool;
    gml_sim_set_manual_events(f.dev, true);
    for (int i = 0; i < 16; i++)
        v[i] = must_alloc(p, 2 * MiB, pa);
    for (int i = 0; i < 16; i += 2)
        must_free(p, v[i], pa);
    *sb = must_alloc(p, 16 * MiB, pa); /* the eight free chunks, stitched */
    cr_assert_eq(stats_of(p).stitched_blocks, 1);
    cr_assert_eq(stats_of(p).reserved_bytes, 32 * MiB, "the device is full");
    cr_assert_eq(gml_sim_launch(f.dev, pa), GMLAKE_OK, "work on pa, pending");
    must_free(p, *sb, pa); /* cached; the GPU may still be using it */
    return f;
}

static fixture full_with_pending_stitch(uintptr_t v[16], uintptr_t *sb)
{
    return full_with_pending_stitch_tweaked(v, sb, NULL);
}

/* By default (stitch_borrow off) nothing makes b wait on the GPU for a's work here, so the pool
 * waits for the device (the last resort) and the cached block gives way. */
Test(stitch, pending_cached_block_in_its_stream_bin_gives_way_under_pressure)
{
    uintptr_t v[16], sb;
    fixture f = full_with_pending_stitch(v, &sb);
    gml_pool *p = f.pool;
    const gml_stream a = pa, b = pb;
    uintptr_t x = must_alloc(p, 16 * MiB, b); /* only a's pending memory can serve b */
    gmlake_stats st = stats_of(p);
    cr_assert_geq(st.device_calls[GMLAKE_DC_SYNCHRONIZE], 1, "the pool waited");
    cr_assert(!gml_pool_owns(p, sb) && st.stitch_evictions == 1, "then tore the cached block down");
    cr_assert_eq(st.reserved_bytes, 32 * MiB);
    uintptr_t y = 0;
    cr_assert_eq(gml_pool_alloc(p, 2 * MiB, b, &y), GMLAKE_ERR_NOMEM, "the device is full");
    CHECK_POOL(p);
    must_free(p, x, b);
    for (int i = 1; i < 16; i += 2)
        must_free(p, v[i], a);
    fx_free(&f);
}

/* With stitch_borrow, b takes a's pending memory by a wait on the GPU instead (stitch.h,
 * "borrow"): no device synchronisation, no teardown, and b's later work runs after a's. */
Test(stitch, pending_cached_block_in_another_streams_bin_serves_after_a_wait_on_the_gpu)
{
    uintptr_t v[16], sb;
    fixture f = full_with_pending_stitch_tweaked(v, &sb, borrow_on);
    gml_pool *p = f.pool;
    const gml_stream a = pa, b = pb;
    uintptr_t x = must_alloc(p, 16 * MiB, b);
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.device_calls[GMLAKE_DC_SYNCHRONIZE], 0, "no device synchronisation");
    cr_assert_eq(st.device_calls[GMLAKE_DC_STREAM_WAIT], 1, "one wait on the GPU");
    cr_assert_eq(st.stitch_evictions, 0);
    cr_assert_eq(x, sb, "the cached block serves b");
    cr_assert_eq(st.reserved_bytes, 32 * MiB);
    gml_event ev;
    cr_assert_eq(gml_dev_event_create(f.dev, &ev), GMLAKE_OK);
    cr_assert_eq(gml_dev_event_record(f.dev, ev, b), GMLAKE_OK);
    cr_assert_eq(gml_dev_event_query(f.dev, ev), GMLAKE_ERR_BUSY, "b's work waits for a's");
    gml_sim_finish(f.dev, a);
    gml_sim_complete_events(f.dev);
    cr_assert_eq(gml_dev_event_query(f.dev, ev), GMLAKE_OK);
    gml_dev_event_destroy(f.dev, ev);
    CHECK_POOL(p);
    must_free(p, x, b);
    for (int i = 1; i < 16; i += 2)
        must_free(p, v[i], a);
    CHECK_POOL(p);
    fx_free(&f);
}

Test(stitch, pending_cached_block_outside_stream_bins_still_serves)
{
    uintptr_t v[16], sb;
    fixture f = full_with_pending_stitch(v, &sb);
    gml_pool *p = f.pool;
    const gml_stream a = pa, b = pb;
    uintptr_t w[8];
    for (int i = 0; i < 8; i++) /* a takes its chunks back at home, then frees them synchronously */
        w[i] = must_alloc(p, 2 * MiB, a);
    must_free(p, v[1], GML_STREAM_NONE);
    must_free(p, v[3], GML_STREAM_NONE);
    for (int i = 0; i < 8; i++)
        must_free(p, w[i], GML_STREAM_NONE);
    cr_assert(gml_pool_owns(p, sb), "still cached, its stream not known done");
    gmlake_stats st = stats_of(p);
    cr_assert_eq(st.reserved_bytes, 32 * MiB, "the device is full");
    uint64_t syncs = st.device_calls[GMLAKE_DC_SYNCHRONIZE];
    /* no stream bin holds a free block: nothing to wait for, the pinned chunks serve as they are */
    uintptr_t x = must_alloc(p, 20 * MiB, b); /* a new stitch over the ten free chunks */
    cr_assert_eq(stats_of(p).device_calls[GMLAKE_DC_SYNCHRONIZE], syncs, "no wait was needed");
    cr_assert_eq(stats_of(p).reserved_bytes, 32 * MiB);
    /* truly too large: fails, leaves the pool whole, and what fits still fits */
    uintptr_t y = 0;
    cr_assert_eq(gml_pool_alloc(p, 34 * MiB, b, &y), GMLAKE_ERR_NOMEM);
    CHECK_POOL(p);
    must_free(p, x, b);
    cr_assert_eq(gml_pool_alloc(p, 22 * MiB, b, &y), GMLAKE_ERR_NOMEM, "12 chunks are live");
    CHECK_POOL(p);
    uintptr_t z = must_alloc(p, 16 * MiB, b); /* the cached block, or a stitch of ready chunks */
    uintptr_t s = must_alloc(p, 4 * KiB, b);  /* a small chunk out of a pinned free chunk */
    must_free(p, s, b);
    must_free(p, z, b);
    for (int i = 5; i < 16; i += 2)
        must_free(p, v[i], a);
    fx_free(&f);
}
