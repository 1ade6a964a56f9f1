/* test_stress.c — 8 threads allocate and free at random on one pool (backed sim, stitching on),
 * each writing a tag into its blocks and verifying it before the free, while the checker runs. */
#include "helpers.h"
#include "tests/stress/stress_run.h"

Test(stress, eight_threads_random_alloc_free, .timeout = 240)
{
    fixture f = fx_make(512 * MiB, true, NULL);
    cr_assert_eq(gml_stress_run(f.pool, 8, 20000), 0, "tag mismatches, failed frees or check failures");
    CHECK_POOL(f.pool);
    gmlake_stats s = stats_of(f.pool);
    cr_assert_eq(s.active_bytes, 0);
    cr_assert_eq(s.live_allocations, 0);
    cr_assert_eq(s.allocations, s.frees);
    cr_assert_gt(s.allocations, 50000);
    cr_assert_eq(gml_pool_empty_cache(f.pool), GMLAKE_OK);
    CHECK_POOL(f.pool);
    cr_assert_eq(stats_of(f.pool).reserved_bytes, 0);
    cr_assert_eq(gml_sim_bytes_in_use(f.dev), 0);
    fx_free(&f);
}
