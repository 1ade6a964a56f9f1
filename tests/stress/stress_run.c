/* stress_run.c — the multi-threaded random alloc/free workload shared by the Criterion stress
 * test and the plain program that ThreadSanitizer runs (Criterion's runner does not run under it). */
#include "stress_run.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

enum { SLOTS = 24 };

typedef struct worker {
    gml_pool *pool;
    int ops;
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
    for (int op = 0; op < w->ops; op++) {
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

int gml_stress_run(gml_pool *pool, int threads, int ops)
{
    atomic_int errors = 0;
    pthread_t t[64];
    worker w[64];
    if (threads > 64)
        threads = 64;
    for (int i = 0; i < threads; i++) {
        w[i] = (worker){.pool = pool, .ops = ops, .id = i + 1, .errors = &errors};
        if (pthread_create(&t[i], NULL, run, &w[i]) != 0)
            return -1;
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    return atomic_load(&errors);
}
