/* test_stress.c — 8 threads allocate and free at random on one pool (backed sim, with stitching),
 * each writing a tag into its blocks and verifying it before the free, while the checker runs. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "helpers.h"

enum { THREADS = 8, OPS = 20000, SLOTS = 24 };

typedef struct worker {
    gml_pool *pool;
    int id;
    atomic_int *errors;
} worker;

static uint64_t next_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *run(void *arg)
{
    worker *w = arg;
    uintptr_t ptr[SLOTS] = {0};
    size_t size[SLOTS] = {0};
    uint64_t rnd = 0x9e3779b97f4a7c15ull * (uint64_t)(w->id + 1);
    gml_stream stream = (gml_stream)(0x100 * (w->id % 3)); /* three streams shared */
    for (int op = 0; op < OPS; op++) {
        int k = (int)(next_rand(&rnd) % SLOTS);
        if (ptr[k]) {
            unsigned char *q = (unsigned char *)ptr[k];
            if (q[0] != w->id || q[size[k] - 1] != w->id || q[size[k] / 2] != w->id)
                atomic_fetch_add(w->errors, 1);
            if (gml_pool_free(w->pool, ptr[k], stream) != GMLAKE_OK)
                atomic_fetch_add(w->errors, 1);
            ptr[k] = 0;
            continue;
        }
        uint64_t r = next_rand(&rnd);
        size_t sz = (r & 3) == 0 ? (size_t)(r >> 8) % (6 * MiB) + 1 : (size_t)(r >> 8) % (64 * KiB) + 1;
        if (gml_pool_alloc(w->pool, sz, stream, &ptr[k]) != GMLAKE_OK) {
            ptr[k] = 0; /* out of memory is allowed under this load */
            continue;
        }
        size[k] = sz;
        unsigned char *q = (unsigned char *)ptr[k];
        q[0] = q[sz - 1] = q[sz / 2] = (unsigned char)w->id;
        if (op % 2000 == 0) {
            char why[256];
            if (gml_pool_check(w->pool, why, sizeof why) != GMLAKE_OK) {
                fprintf(stderr, "check: %s\n", why);
                atomic_fetch_add(w->errors, 1);
            }
        }
    }
    for (int k = 0; k < SLOTS; k++)
        if (ptr[k] && gml_pool_free(w->pool, ptr[k], stream) != GMLAKE_OK)
            atomic_fetch_add(w->errors, 1);
    return NULL;
}

Test(stress, eight_threads_random_alloc_free, .timeout = 240)
{
    fixture f = fx_make(512 * MiB, true, NULL);
    atomic_int errors = 0;
    pthread_t t[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.pool = f.pool, .id = i + 1, .errors = &errors};
        cr_assert_eq(pthread_create(&t[i], NULL, run, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    cr_assert_eq(atomic_load(&errors), 0, "tag mismatches, failed frees or check failures");
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
}
