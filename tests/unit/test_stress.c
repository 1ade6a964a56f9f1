/* test_stress.c — 8 threads allocate and free at random on one pool (backed sim, stitching on),
 * each writing a tag into its blocks and verifying it before the free, while the checker runs. */
#include "helpers.h"
#include "tests/stress/stress_run.h"

/* Runs the workload on a pool with settings tweaked by `tweak`; checks that every allocation was
 * freed and that emptying the cache returns everything; returns the stats after the run. */
static gmlake_stats stress(void (*tweak)(gml_pool_settings *))
{
    fixture f = fx_make(512 * MiB, true, tweak);
    cr_assert_eq(gml_stress_run(f.pool, 8, 20000), 0, "tag mismatches, failed frees or check failures");
    CHECK_POOL(f.pool);
    gmlake_stats s = stats_of(f.pool);
    cr_assert_eq(s.active_bytes, 0);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.allocations, s.frees);
    cr_assert_eq(gml_pool_empty_cache(f.pool), GMLAKE_OK);
    CHECK_POOL(f.pool);
    cr_assert_eq(stats_of(f.pool).reserved_bytes, 0);
    cr_assert_eq(gml_sim_bytes_in_use(f.dev), 0);
    fx_free(&f);
    return s;
}

Test(stress, eight_threads_random_alloc_free, .timeout = 240)
{
    cr_assert_gt(stress(NULL).allocations, 50000);
}

static void uniform_8mib_extents(gml_pool_settings *s)
{
    s->extent_share = 0;
    s->extent_size = 8 * MiB;
}

/* The same with extents of four chunks from the start (by default a pool this small keeps one
 * chunk per extent): stitched ranges over whole extents and over the free ends of partly used
 * ones, blocks sharing extents, release of whole extents only. */
Test(stress, eight_threads_on_multi_chunk_extents, .timeout = 240)
{
    gmlake_stats s = stress(uniform_8mib_extents);
    cr_assert_gt(s.stitches, 0, "stitching ran");
    cr_assert_lt(s.device_calls[GMLAKE_DC_CHUNK_CREATE] * 2 * MiB, s.peak_reserved_bytes,
                 "extents of several chunks (%lu creations, %lu bytes at the peak)",
                 (unsigned long)s.device_calls[GMLAKE_DC_CHUNK_CREATE],
                 (unsigned long)s.peak_reserved_bytes);
}
