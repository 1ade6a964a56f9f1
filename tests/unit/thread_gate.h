/* thread_gate.h — holding a pool's driver call in flight (a sim hook waiting at a gate) while other
 * threads use the pool: the gate, allocation jobs run on threads, and timed waits. */
#ifndef GML_TEST_THREAD_GATE_H
#define GML_TEST_THREAD_GATE_H

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "helpers.h"

/* A gate the hooked driver calls wait at until the test opens it. */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int entered;     /* hooked calls that reached the gate */
    int hold_first;  /* only the first hold_first of them wait (0: every one) */
    bool open;
} gate;

static gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, false};

static inline void hold(void *arg)
{
    gate *gt = arg;
    pthread_mutex_lock(&gt->mu);
    gt->entered++;
    pthread_cond_broadcast(&gt->cv);
    bool waits = !gt->hold_first || gt->entered <= gt->hold_first;
    while (waits && !gt->open)
        pthread_cond_wait(&gt->cv, &gt->mu);
    pthread_mutex_unlock(&gt->mu);
}

static inline void gate_open(void)
{
    pthread_mutex_lock(&g.mu);
    g.open = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
}

/* Closes the gate and hooks every driver call of `kind` on dev to it; the first `hold_first` wait
 * (0: all). */
static inline void gate_arm(gml_device *dev, int kind, int hold_first)
{
    pthread_mutex_lock(&g.mu);
    g.entered = 0;
    g.hold_first = hold_first;
    g.open = false;
    pthread_mutex_unlock(&g.mu);
    gml_sim_hook_call(dev, kind, hold, &g);
}

typedef struct job {
    gml_pool *pool;
    size_t size;
    gml_stream stream;
    bool free_after; /* free what was allocated */
    bool empty_cache; /* instead of allocating: gml_pool_empty_cache */
    uintptr_t ptr;
    int rc;
    bool done;
} job;

static inline void *run_job(void *arg)
{
    job *j = arg;
    int rc;
    if (j->empty_cache) {
        rc = gml_pool_empty_cache(j->pool);
    } else {
        rc = gml_pool_alloc(j->pool, j->size, j->stream, &j->ptr);
        if (rc == GMLAKE_OK && j->free_after)
            rc = gml_pool_free(j->pool, j->ptr, j->stream);
    }
    pthread_mutex_lock(&g.mu);
    j->rc = rc;
    j->done = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Waits up to `seconds` for *flag, or (flag NULL) for *count >= want (under the gate's lock). */
static inline bool wait_for(const bool *flag, const int *count, int want, int seconds)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += seconds;
    pthread_mutex_lock(&g.mu);
    int rc = 0;
    while (rc != ETIMEDOUT && !(flag ? *flag : *count >= want))
        rc = pthread_cond_timedwait(&g.cv, &g.mu, &until);
    bool ok = flag ? *flag : *count >= want;
    pthread_mutex_unlock(&g.mu);
    return ok;
}

/* Starts job *a on thread *t and waits until it is held at the gate (armed by the caller). */
static inline void start_job_held(pthread_t *t, job *a)
{
    cr_assert_eq(pthread_create(t, NULL, run_job, a), 0);
    cr_assert(wait_for(NULL, &g.entered, 1, 10), "the job never reached the driver");
}

/* Runs job *b on a thread and waits up to 3 s for it; if it did not end, opens the gate so that
 * the held thread (and b) can finish.  Whether b ended in time. */
static inline bool runs_past_the_gate(job *b)
{
    pthread_t tb;
    cr_assert_eq(pthread_create(&tb, NULL, run_job, b), 0);
    bool done = wait_for(&b->done, NULL, 0, 3);
    if (!done)
        gate_open();
    pthread_join(tb, NULL);
    return done;
}

/* Empties the cache of f's pool, which holds no allocation: it stays consistent and gives every
 * chunk and mapping back to the device. */
static inline void empty_to_bare(fixture *f)
{
    cr_assert_eq(gml_pool_empty_cache(f->pool), GMLAKE_OK);
    CHECK_POOL(f->pool);
    cr_assert_eq(gml_sim_bytes_in_use(f->dev), 0, "chunks still held");
    cr_assert_eq(gml_sim_mapping_count(f->dev), 0, "mappings still there");
}

#endif
