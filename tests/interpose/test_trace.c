/* test_trace.c — a trace recorded while several threads allocate and free replays: no `A X` comes
 * before the `F X` that freed X (gmlake logs a free before another thread can get its address). */
#include "harness.h"
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <uthash.h>

#include "gmlake.h"
#include "tools/trace.h"

enum { THREADS = 4, ROUNDS = 3000 };

static void *churn(void *arg)
{
    (void)arg;
    for (int i = 0; i < ROUNDS; i++) {
        void *p;
        if (cudaMallocAsync(&p, 4096 + (size_t)(i % 4) * 512, 0) != cudaSuccess ||
            cudaFreeAsync(p, 0) != cudaSuccess)
            return (void *)1;
    }
    return NULL;
}

typedef struct live {
    uintptr_t ptr;
    UT_hash_handle hh;
} live;

Test(trace, frees_from_several_threads_are_logged_in_order)
{
    char path[] = "/tmp/gmlake-trace-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    setenv("GMLAKE_TRACE_FILE", path, 1); /* before the first hook call */
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, churn, NULL), 0);
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        cr_assert_null(r, "thread %d: a call failed", i);
    }
    gml_trace tr;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &tr, err, sizeof err), 0, "%s", err);
    unlink(path);
    cr_assert_eq(tr.n, 2 * THREADS * ROUNDS);
    live *set = NULL;
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < tr.n; i++) {
        live *l;
        uintptr_t x = tr.ev[i].ptr;
        HASH_FIND(hh, set, &x, sizeof x, l);
        if (tr.ev[i].op == 'A' && !l) {
            l = malloc(sizeof *l);
            l->ptr = x;
            HASH_ADD(hh, set, ptr, sizeof l->ptr, l);
        } else if (tr.ev[i].op == 'F' && l) {
            HASH_DEL(set, l);
            free(l);
        } else if (bad++ == 0) {
            first_bad = i;
        }
    }
    live *l, *tmp;
    HASH_ITER(hh, set, l, tmp) {
        HASH_DEL(set, l);
        free(l);
    }
    cr_assert_eq(bad, 0, "%zu events out of order, the first at event %zu", bad, first_bad);
    gml_trace_free(&tr);
}
