/* fork_safety.c — 200 children forked while four threads allocate and free through gmlake (over
 * the fake CUDA, under LD_PRELOAD=libgmlake.so).  Every child must finish (a hung one is killed by
 * its alarm after 10 s and counts as a failure) and must get what CUDA gives after fork: an error
 * from cudaMalloc, cudaFree and cudaMallocAsync, never a pointer of the parent's pool.  The parent
 * must go on allocating afterwards.  Prints "N passed, M failed". */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

enum { CHILDREN = 200, BATCH = 20, THREADS = 4 };
static atomic_int stop;
static void *parent_block;

static void *churn(void *arg)
{
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess)
        return NULL;
    unsigned seed = (unsigned)(uintptr_t)arg;
    while (!atomic_load(&stop)) {
        void *p[8];
        for (int i = 0; i < 8; i++) {
            size_t n = (size_t)(rand_r(&seed) % (3 << 20)) + 512;
            if (cudaMallocAsync(&p[i], n, s) != cudaSuccess)
                p[i] = NULL;
        }
        for (int i = 0; i < 8; i++)
            if (p[i])
                cudaFreeAsync(p[i], s);
        void *q;
        if (cudaMalloc(&q, 4096) == cudaSuccess)
            cudaFree(q);
        gmlake_stats st;
        gmlake_get_stats(0, &st);
    }
    cudaStreamDestroy(s);
    return NULL;
}

/* What a child does: exit status 0 when it saw CUDA's after-fork errors. */
static int child(void)
{
    alarm(5);
    void *p = NULL;
    int bad = 0;
    if (cudaMalloc(&p, 1 << 20) != cudaErrorInitializationError)
        bad |= 1;
    if (cudaMallocAsync(&p, 1 << 20, 0) != cudaErrorInitializationError)
        bad |= 2;
    if (cudaFree(parent_block) != cudaErrorInitializationError)
        bad |= 4;
    CUdeviceptr d;
    if (cuMemAlloc_v2(&d, 1 << 20) != CUDA_ERROR_NOT_INITIALIZED)
        bad |= 8;
    return bad;
}

int main(void)
{
    if (cudaMalloc(&parent_block, 3 << 20) != cudaSuccess) {
        printf("0 passed, 1 failed (first allocation)\n");
        return 1;
    }
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, churn, (void *)(uintptr_t)(i + 1));
    int passed = 0, failed = 0, hung = 0, wrong = 0;
    for (int i = 0; i < CHILDREN; i += BATCH) {
        pid_t pid[BATCH];
        for (int k = 0; k < BATCH; k++) {
            pid[k] = fork();
            if (pid[k] == 0)
                _exit(child());
            usleep(200); /* let the threads move on between forks */
        }
        for (int k = 0; k < BATCH; k++) {
            int st = 0;
            if (pid[k] < 0 || waitpid(pid[k], &st, 0) != pid[k]) {
                failed++;
                continue;
            }
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                passed++;
            } else {
                failed++;
                if (WIFSIGNALED(st))
                    hung++;
                else
                    wrong |= WEXITSTATUS(st);
            }
        }
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    void *p;
    if (cudaMalloc(&p, 1 << 20) == cudaSuccess && cudaFree(p) == cudaSuccess &&
        cudaFree(parent_block) == cudaSuccess && gmlake_check(0) == GMLAKE_OK)
        passed++;
    else
        failed++;
    if (hung)
        printf("%d children hung (killed by their alarm)\n", hung);
    if (wrong)
        printf("children saw success where CUDA fails after fork (mask %#x: 1 cudaMalloc, "
               "2 cudaMallocAsync, 4 cudaFree, 8 cuMemAlloc)\n", wrong);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
