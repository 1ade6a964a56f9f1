/* test_resolve.c — threads that call gmlake's hooks for the first time together: each hook looks
 * its real function up on first use, several threads may do so at once and store it, and a
 * thread that finds it stored must not read the slot again while another thread still stores
 * (a data race: ThreadSanitizer's run of this test reports it).  Each test is a process of its
 * own (harness.h), so these calls are the first of the process. */
#include "harness.h"
#include <cuda_runtime_api.h>
#include <pthread.h>

enum { THREADS = 16 };

static pthread_barrier_t start;

static void *first_calls(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&start);
    void *p = NULL, *q = NULL;
    size_t fr = 0, tot = 0;
    if (cudaMallocAsync(&p, 4096, 0) != cudaSuccess || cudaFreeAsync(p, 0) != cudaSuccess ||
        cudaMalloc(&q, 1 << 20) != cudaSuccess || cudaFree(q) != cudaSuccess ||
        cudaMemGetInfo(&fr, &tot) != cudaSuccess || cudaPeekAtLastError() != cudaSuccess ||
        cudaGetLastError() != cudaSuccess)
        return (void *)1;
    return NULL;
}

Test(resolve, threads_making_their_first_calls_together_all_succeed)
{
    pthread_t t[THREADS];
    cr_assert_eq(pthread_barrier_init(&start, NULL, THREADS), 0);
    for (int i = 0; i < THREADS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, first_calls, NULL), 0);
    for (int i = 0; i < THREADS; i++) {
        void *r;
        pthread_join(t[i], &r);
        cr_assert_null(r, "thread %d: a call failed", i);
    }
    pthread_barrier_destroy(&start);
}
