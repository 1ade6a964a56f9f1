/* stress_main.c — the stress workload as a plain program (for ThreadSanitizer): 8 threads on a
 * backed sim pool; exit 0 when no error was seen and the pool is consistent and empty after.
 * `stress_threads N` bounds the stitched-block cache to N blocks (auto_gc), so that evictions,
 * whose driver calls run without the pool lock, happen on several threads at once; it then fails
 * when none happened (patches off: a patch would use a stale block up instead, stitch.h).
 * Otherwise it reports the patches made (a stitch without a new range: stitches less the range
 * reservations after the arena's); `stress_threads - - P` fails when fewer than P were made.  `stress_threads N E` (N may be - for the default
 * bound) also gives the pool uniform extents of E MiB (several
 * chunks each from the start), so that blocks share extents and stitched ranges enter partly
 * used ones.  `stress_threads +N` (E may follow) bounds the cache to N blocks with patches ON, so
 * that patches and teardowns (a new stitch's or patch's auto GC, the last resort's GC), whose
 * driver calls all run without the pool lock, happen on several threads at once: every large
 * miss is stitched first (frag_limit and churn_limit 0) on a pool of 128 MiB (misses reach the
 * last resort now and then), over twice the operations; it fails when over the run no eviction
 * or no patch happened (`+8`: 28 evictions and 7 patches at least over 300 plain runs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stress_run.h"

int main(int argc, char **argv)
{
    const char *err = NULL;
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    bool gc = argc > 1 && strcmp(argv[1], "-") != 0; /* "-": the default auto_gc */
    bool mixed = gc && argv[1][0] == '+'; /* "+N": evictions and patches together */
    size_t capacity = (size_t)512 << 20;
    int ops = 5000;
    if (gc) {
        s.auto_gc = (unsigned)strtoul(argv[1] + mixed, NULL, 10);
        s.stitch_patch = mixed;
    }
    if (mixed) { /* stitch every large miss, on a pool small enough to miss often */
        s.frag_limit = 0;
        s.churn_limit = 0;
        capacity = (size_t)128 << 20;
        ops = 10000;
    }
    if (argc > 2 && strcmp(argv[2], "-") != 0) {
        s.extent_share = 0;
        s.extent_size = (size_t)strtoul(argv[2], NULL, 10) << 20;
    }
    gml_pool *p = gml_sim_pool_create(capacity, true, &s, &err);
    if (!p) {
        fprintf(stderr, "stress: %s\n", err);
        return 1;
    }
    int errors = gml_stress_run(p, 8, ops);
    char why[256] = "";
    int rc = gml_pool_check(p, why, sizeof why);
    gmlake_stats st;
    gml_pool_stats(p, &st);
    gml_sim_pool_destroy(p);
    uint64_t ranges = st.device_calls[GMLAKE_DC_VA_RESERVE] - 1; /* the arena's is the first */
    uint64_t patches = st.stitches > ranges ? st.stitches - ranges : 0;
    uint64_t want = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
    if (errors || rc || st.active_bytes || (gc && !st.stitch_evictions) ||
        (mixed && !patches) || patches < want) {
        fprintf(stderr, "stress: %d errors, check: %s, %lu bytes still active, %lu evictions, %lu patches\n",
                errors, why, (unsigned long)st.active_bytes, (unsigned long)st.stitch_evictions,
                (unsigned long)patches);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    printf("stress: %lu allocations, %lu evictions, %lu patches on 8 threads\n1 passed, 0 failed\n",
           (unsigned long)st.allocations, (unsigned long)st.stitch_evictions, (unsigned long)patches);
    return 0;
}
