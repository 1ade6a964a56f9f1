/* test_stitch_patch.c — patches (stitch.h): a stale cached stitched block keeps the window of its
 * extents that are free at home mapped where they are, its other extents are unmapped, and only
 * what the window lacks is mapped after it, in the room its reservation keeps.  The data written
 * through the window stays where it was, a patched range hands out exactly its home parts, the
 * device calls are the lacking extents' only, a block whose last free's work may still run is
 * not patched, a failed map gives everything back, and `stitch_patch=off` maps a fresh range;
 * the window's search and the auto GC's ask a stream whose work runs once, not once per block.
 * Host memory backs the simulated device; both checkers run after every step. */
#include <string.h>

#include "heap_helpers.h"
#include "helpers.h"

static const gml_stream S1 = 0x1000;

static gml_sblock *sb_of(gml_block *b) { return (gml_sblock *)((char *)b - offsetof(gml_sblock, b)); }

/* The home address of the chunk at index i of stitched block sb. */
static uintptr_t home_of(hfix *f, const gml_sblock *sb, uint32_t i)
{
    return gml_slot_addr(&f->h, sb->slots[i]);
}

/* 8 one-chunk extents; the odd blocks freed: four 2 MiB holes between live blocks (v[0] on top). */
static void four_holes(hfix *f, gml_bin *bin, gml_block *v[8])
{
    cr_assert_eq(gml_grow(&f->h, bin, GML_SPACE_LARGE, GML_GROW_BLOCK, 16 * MiB), GMLAKE_OK);
    for (int i = 0; i < 8; i++)
        v[i] = hf_take(f, bin, 2 * MiB);
    for (int i = 1; i < 8; i += 2)
        hf_put(f, v[i], bin);
    hf_check(f, 0);
}

/* Every home part of live stitched block b holds `byte`, in b's virtual order. */
static void parts_hold(gml_block *b, unsigned char byte)
{
    size_t off = 0;
    gml_block *q;
    STAILQ_FOREACH(q, &sb_of(b)->parts, held) {
        for (size_t i = 0; i < q->size; i += 4096)
            cr_assert_eq(((const unsigned char *)q->addr)[i], byte, "home part %#lx at +%zu",
                         (unsigned long)q->addr, i);
        off += q->size;
    }
    cr_assert_eq(off, b->size, "the parts tile what it hands out");
}

typedef struct stale {
    hfix f;
    gml_bin *s1;
    gml_block *v[8], *taken;
    uintptr_t home[4]; /* the first stitched block's chunks, in its virtual order */
    uintptr_t va;      /* where its mapping began */
    int k;             /* the index of its chunk that `taken` took */
} stale;

/* Four holes stitched into one 8 MiB block, written through (chunk i holds 0x10 + i), freed
 * (cached), then one of its chunks taken at home (0xee) and the top live block freed: the cached
 * block is stale, and 8 MiB are free again in pieces. */
static void make_stale(stale *s, bool patch)
{
    hf_make_dev(&s->f, 64 * MiB, 2 * MiB, 0, true);
    s->f.st.patch = patch;
    s->s1 = gml_bin_get(&s->f.h, S1);
    four_holes(&s->f, s->s1, s->v);
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&s->f.st, s->s1, 8 * MiB, 8 * MiB, false, &b), GMLAKE_OK);
    gml_sblock *sb = sb_of(b);
    cr_assert_eq(sb->nchunks, 4);
    s->va = b->addr;
    for (uint32_t i = 0; i < 4; i++) {
        s->home[i] = home_of(&s->f, sb, i);
        memset((void *)(b->addr + i * 2 * MiB), 0x10 + (int)i, 2 * MiB);
    }
    hf_check(&s->f, 1);
    gml_stitch_free(&s->f.st, b, s->s1);
    s->taken = hf_take(&s->f, s->s1, 2 * MiB);
    memset((void *)s->taken->addr, 0xee, 2 * MiB);
    s->k = -1;
    for (int i = 0; i < 4; i++)
        if (s->home[i] == s->taken->addr)
            s->k = i;
    cr_assert_geq(s->k, 0, "the block taken is one of the stitched block's chunks");
    hf_put(&s->f, s->v[0], s->s1);
    hf_check(&s->f, 0);
}

Test(stitch_patch, a_stale_block_keeps_its_free_window_and_maps_only_what_it_lacks)
{
    stale s;
    make_stale(&s, true);
    hfix *f = &s.f;
    /* the window: the longer run of the block's chunks besides k */
    int lo = s.k >= 2 ? 0 : s.k + 1, hi = s.k >= 2 ? s.k : 4, win = hi - lo;
    uint64_t maps = hf_calls(f, GMLAKE_DC_MAP), unmaps = hf_calls(f, GMLAKE_DC_UNMAP);
    uint64_t reserves = hf_calls(f, GMLAKE_DC_VA_RESERVE), access = hf_calls(f, GMLAKE_DC_SET_ACCESS);
    uint64_t churns = f->st.churns;
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f->st, s.s1, 8 * MiB, 8 * MiB, false, &b), GMLAKE_OK);
    cr_assert_eq(f->st.patches, 1, "chunk %d taken: a patch", s.k);
    cr_assert_eq(f->st.stitches, 2);
    cr_assert_eq(f->st.churns, churns + 1, "a cached block used up: stitching churns");
    cr_assert_eq(b->size, 8 * MiB);
    cr_assert_eq(b->addr, s.va + (size_t)lo * 2 * MiB, "the window stays where it was mapped");
    cr_assert_eq(hf_calls(f, GMLAKE_DC_VA_RESERVE), reserves, "no new range");
    cr_assert_eq(hf_calls(f, GMLAKE_DC_MAP) - maps, (uint64_t)(4 - win), "only what it lacks");
    cr_assert_eq(hf_calls(f, GMLAKE_DC_UNMAP) - unmaps, (uint64_t)(4 - win), "the rest unmapped");
    cr_assert_eq(hf_calls(f, GMLAKE_DC_SET_ACCESS) - access, 1);
    hf_check(f, 1);
    /* the window's bytes are still the first block's, read through the patched range */
    for (int i = lo; i < hi; i++)
        for (size_t off = 0; off < 2 * MiB; off += 4096)
            cr_assert_eq(((const unsigned char *)b->addr)[(size_t)(i - lo) * 2 * MiB + off],
                         0x10 + i, "window chunk %d at +%zu", i, off);
    /* written through, the bytes land in its parts at home and nowhere else */
    memset((void *)b->addr, 0x5c, b->size);
    parts_hold(b, 0x5c);
    for (size_t off = 0; off < 2 * MiB; off += 4096)
        cr_assert_eq(((const unsigned char *)s.taken->addr)[off], 0xee, "the taken chunk");
    /* freed, torn down: nothing of the range stays mapped or reserved */
    gml_stitch_free(&f->st, b, s.s1);
    hf_check(f, 0);
    cr_assert_eq(gml_stitch_gc(&f->st, true), 1);
    hf_check(f, 0);
    cr_assert_eq(gml_sim_reservation_count(f->dev), 1, "only the arena is reserved");
    cr_assert_eq(gml_sim_mapping_count(f->dev), 8, "the home mappings only");
    hf_free(f);
}

Test(stitch_patch, off_maps_a_fresh_range)
{
    stale s;
    make_stale(&s, false);
    hfix *f = &s.f;
    uint64_t maps = hf_calls(f, GMLAKE_DC_MAP), reserves = hf_calls(f, GMLAKE_DC_VA_RESERVE);
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f->st, s.s1, 8 * MiB, 8 * MiB, false, &b), GMLAKE_OK);
    cr_assert_eq(f->st.patches, 0);
    cr_assert_eq(hf_calls(f, GMLAKE_DC_VA_RESERVE) - reserves, 1);
    cr_assert_eq(hf_calls(f, GMLAKE_DC_MAP) - maps, 4, "every extent mapped again");
    cr_assert_eq(f->st.count, 2, "the stale block stays cached");
    hf_check(f, 1);
    hf_free(f);
}

Test(stitch_patch, a_failed_map_gives_everything_back)
{
    stale s;
    make_stale(&s, true);
    hfix *f = &s.f;
    gml_sim_fail_call(f->dev, GMLAKE_DC_MAP, 1);
    gml_block *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f->st, s.s1, 8 * MiB, 8 * MiB, false, &b), GMLAKE_ERR_DEVICE);
    cr_assert_eq(f->st.count, 0, "the stale block went with the failed patch");
    cr_assert_eq(f->st.evictions, 1, "its mapping was torn down: an eviction");
    cr_assert_eq(f->st.patches, 0);
    hf_check(f, 0);
    cr_assert_eq(gml_sim_reservation_count(f->dev), 1, "its range was freed");
    cr_assert_eq(gml_sim_mapping_count(f->dev), 8, "the home mappings only");
    /* the memory is all there: a stitch after it serves the request */
    cr_assert_eq(gml_stitch_alloc(&f->st, s.s1, 8 * MiB, 8 * MiB, false, &b), GMLAKE_OK);
    hf_check(f, 1);
    hf_free(f);
}

/* Through the pool: a cached block freed on a stream whose work may still run is not patched (a
 * patch unmaps its other extents, which that work may still read); once the work is done it is. */
static const gml_stream pa = 0x1000;

Test(stitch_patch, not_while_the_last_free_of_the_block_may_still_run)
{
    for (int done = 0; done < 2; done++) {
        fixture f = fx_make(64 * MiB, false, NULL);
        gml_pool *p = f.pool;
        gml_sim_set_manual_events(f.dev, true);
        uintptr_t v[8];
        for (int i = 0; i < 8; i++)
            v[i] = must_alloc(p, 2 * MiB, pa);
        for (int i = 1; i < 8; i += 2)
            must_free(p, v[i], pa);
        uintptr_t s = must_alloc(p, 8 * MiB, pa); /* the four holes, stitched */
        cr_assert_eq(gml_sim_launch(f.dev, pa), GMLAKE_OK, "work on pa, pending");
        must_free(p, s, pa);
        uintptr_t h = must_alloc(p, 2 * MiB, pa); /* one of its chunks: s is stale */
        must_free(p, v[0], pa);
        if (done) { /* the work ends; an event recorded now completes at once */
            gml_sim_finish(f.dev, pa);
            gml_sim_set_manual_events(f.dev, false);
        }
        uint64_t reserves = stats_of(p).device_calls[GMLAKE_DC_VA_RESERVE];
        uintptr_t t = must_alloc(p, 8 * MiB, pa);
        gmlake_stats st = stats_of(p);
        cr_assert_eq(st.stitches, 2);
        cr_assert_eq(st.device_calls[GMLAKE_DC_VA_RESERVE] - reserves, done ? 0 : 1, "%s",
                     done ? "patched: no new range" : "its work may run: a fresh range");
        cr_assert_eq(gml_pool_owns(p, s), !done || (t <= s && s < t + 8 * MiB),
                     "the stale block stays cached unless patched");
        must_free(p, t, pa);
        must_free(p, h, pa);
        gml_sim_complete_events(f.dev);
        fx_free(&f);
    }
}

/* A patch whose unmap of the block's other extents fails maps nothing into that range (a range
 * still mapped there would be mapped over) and fails: nothing is published, the checkers agree.
 * (make_stale's layout takes the block's first chunk: the window is the other three, one unmap.) */
Test(stitch_patch, a_failed_unmap_fails_the_patch_and_maps_nothing)
{
    for (int nth = 1; nth <= 1; nth++) {
        stale s;
        make_stale(&s, true);
        hfix *f = &s.f;
        uint64_t maps = hf_calls(f, GMLAKE_DC_MAP), stitches = f->st.stitches;
        gml_sim_fail_call(f->dev, GMLAKE_DC_UNMAP, nth);
        gml_block *b = NULL;
        int rc = gml_stitch_alloc(&f->st, s.s1, 8 * MiB, 8 * MiB, false, &b);
        cr_assert_eq(rc, GMLAKE_ERR_DEVICE, "unmap %d failed (chunk %d taken): %d", nth, s.k, rc);
        cr_assert_eq(hf_calls(f, GMLAKE_DC_MAP), maps, "nothing mapped after a failed unmap");
        cr_assert_eq(f->st.stitches, stitches);
        cr_assert_eq(f->st.count, 0);
        cr_assert_eq(f->st.evictions, 1, "the block is gone, its range left reserved: an eviction");
        hf_check(f, 0);
        hf_free(f);
    }
}

/* Takes the free 2 MiB hole at home address a (live, held by the test). */
static gml_block *take_at(hfix *f, uintptr_t a)
{
    gml_block *fb = gml_block_at(&f->h, a);
    cr_assert(fb && fb->state == GML_B_FREE && fb->addr == a && fb->size == 2 * MiB, "hole at %#lx",
              (unsigned long)a);
    gml_block *b = gml_take(&f->h, fb, 2 * MiB, 2 * MiB);
    cr_assert_not_null(b);
    cr_assert(gml_vec_push(&f->used, b));
    return b;
}

/* Two 8 MiB stitched blocks cached under stitch_bytes_limit 16 MiB; the first made stale and 2
 * MiB freed elsewhere; a 10 MiB request: the stitched bytes afterwards. */
static size_t bytes_after_10(bool patch)
{
    hfix f;
    hf_make_dev(&f, 64 * MiB, 2 * MiB, 0, false);
    f.st.patch = patch;
    f.st.bytes_limit = 16 * MiB;
    gml_bin *s1 = gml_bin_get(&f.h, S1);
    cr_assert_eq(gml_grow(&f.h, s1, GML_SPACE_LARGE, GML_GROW_BLOCK, 32 * MiB), GMLAKE_OK);
    gml_block *v[16];
    for (int i = 0; i < 16; i++)
        v[i] = hf_take(&f, s1, 2 * MiB);
    for (int i = 1; i < 16; i += 2)
        hf_put(&f, v[i], s1); /* eight 2 MiB holes */
    gml_block *a = NULL, *b = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 8 * MiB, 8 * MiB, false, &a), GMLAKE_OK);
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 8 * MiB, 8 * MiB, false, &b), GMLAKE_OK);
    uintptr_t a0 = home_of(&f, sb_of(a), 0);
    gml_stitch_free(&f.st, a, s1);
    gml_stitch_free(&f.st, b, s1);
    cr_assert_eq(f.st.bytes, 16 * MiB);
    take_at(&f, a0); /* a goes stale: its chunks 1..3 stay free */
    hf_put(&f, v[0], s1);
    gml_block *c = NULL;
    cr_assert_eq(gml_stitch_alloc(&f.st, s1, 10 * MiB, 10 * MiB, false, &c), GMLAKE_OK);
    cr_assert_eq(f.st.patches, patch ? 1 : 0);
    hf_check(&f, 1);
    size_t bytes = f.st.bytes;
    hf_free(&f);
    return bytes;
}

/* The auto GC's bounds hold for a patch as for a new stitch: a patched block larger than the one
 * it replaces tears other cached blocks down when the stitched bytes would exceed the bound. */
Test(stitch_patch, a_patch_keeps_the_stitched_bytes_bound)
{
    cr_assert_leq(bytes_after_10(false), 16 * MiB, "a new stitch runs the auto GC");
    size_t on = bytes_after_10(true);
    cr_assert_leq(on, 16 * MiB, "a patch leaves %zu MiB stitched, over stitch_bytes_limit", on / MiB);
}

static bool patch_setting;
static unsigned auto_gc_setting; /* 0: the default */
static void with_patch(gml_pool_settings *s)
{
    s->stitch_patch = patch_setting;
    if (auto_gc_setting)
        s->auto_gc = auto_gc_setting;
}

/* Sixteen cached stitched blocks of one stream, its work pending, then ten large misses that
 * stitch anew (which makes some of the cached blocks stale): the event queries the misses make. */
static uint64_t queries_at_ten_misses(bool patch, unsigned auto_gc)
{
    patch_setting = patch;
    auto_gc_setting = auto_gc;
    fixture f = fx_make(256 * MiB, false, with_patch);
    gml_pool *p = f.pool;
    gml_sim_set_manual_events(f.dev, true);
    enum { K = 16 };
    uintptr_t v[4 * K], s[K];
    for (int i = 0; i < 4 * K; i++)
        v[i] = must_alloc(p, 2 * MiB, pa);
    for (int i = 1; i < 4 * K; i += 2)
        must_free(p, v[i], pa);
    for (int k = 0; k < K; k++)
        s[k] = must_alloc(p, 4 * MiB, pa); /* two holes each, stitched */
    cr_assert_eq(gml_sim_launch(f.dev, pa), GMLAKE_OK);
    for (int k = 0; k < K; k++)
        must_free(p, s[k], pa);
    gmlake_stats a = stats_of(p);
    for (int r = 0; r < 10; r++)
        must_alloc(p, 6 * MiB + (size_t)r * 512, pa);
    gmlake_stats b = stats_of(p);
    gml_sim_complete_events(f.dev);
    fx_free(&f);
    return b.device_calls[GMLAKE_DC_EVENT_QUERY] - a.device_calls[GMLAKE_DC_EVENT_QUERY];
}

/* Looking for a window asks about the GPU's progress (an event query) once per stream at a miss,
 * not once per cached block: sixteen cached blocks of one stream, its work pending, and ten large
 * misses make at most one query a miss more with patches than without (the stream's event, which
 * covers its frees, asked once: bin_passed asked it twice before, 17 queries). */
Test(stitch_patch, event_queries_once_per_stream_at_a_miss)
{
    uint64_t off = queries_at_ten_misses(false, 0), on = queries_at_ten_misses(true, 0);
    cr_assert_leq(on, off + 10, "event queries with patches %lu, without %lu", (unsigned long)on,
                  (unsigned long)off);
}

/* So does the auto GC: over its bound, a new stitch looks for cached blocks to tear down, and a
 * stream found with work running is not asked again for each of its other blocks (before, two
 * queries per cached block at each stitch: 399 here; the synthetic random trace at --gpu-lag
 * 1000 made 343,063 for 20,198 events).  With the bound at 4, the ten misses ask once each. */
Test(stitch_patch, the_auto_gc_asks_a_running_stream_once_a_stitch)
{
    uint64_t n = queries_at_ten_misses(false, 4);
    cr_assert_leq(n, 10, "event queries for ten stitches over the auto GC's bound: %lu",
                  (unsigned long)n);
}
