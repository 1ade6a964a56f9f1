/* test_trace.c — a trace recorded while several threads allocate and free replays: no `A X` comes
 * before the `F X` that freed X (gmlake logs a free before another thread can get its address). */
#include "harness.h"
#include <cuda_runtime_api.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>
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
    trace_to(path);
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

/* torch.cuda.empty_cache() (PyTorch's cudaMemPoolTrimTo of the default pool) is an E event in
 * the trace, where the replay gives the cache back too. */
Test(trace, a_cache_release_is_recorded)
{
    char path[] = "/tmp/gmlake-trace-XXXXXX";
    trace_to(path);
    void *p;
    cudaMemPool_t pool;
    cr_assert_eq(cudaMalloc(&p, 8 << 20), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
    cr_assert_eq(cudaMemPoolTrimTo(pool, 0), cudaSuccess);
    cr_assert_eq(cudaMalloc(&p, 8 << 20), cudaSuccess);
    gml_trace tr;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &tr, err, sizeof err), 0, "%s", err);
    unlink(path);
    cr_assert_eq(tr.n, 4);
    cr_assert(tr.ev[0].op == 'A' && tr.ev[1].op == 'F' && tr.ev[2].op == 'E' && tr.ev[3].op == 'A',
              "A F E A: %c %c %c %c", tr.ev[0].op, tr.ev[1].op, tr.ev[2].op, tr.ev[3].op);
    cr_assert(tr.ev[2].ptr == 0 && tr.ev[2].size == 0);
    gml_trace_free(&tr);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

/* gmlake.empty_cache() (the public gmlake_empty_cache) gives the cache back as well: an E event
 * too, or the replay of such a trace keeps what the GPU released. */
Test(trace, gmlakes_own_empty_cache_is_recorded)
{
    char path[] = "/tmp/gmlake-trace-XXXXXX";
    trace_to(path);
    void *p;
    cr_assert_eq(cudaMalloc(&p, 8 << 20), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(gmlake_empty_cache(0), GMLAKE_OK);
    cr_assert_eq(gmlake_empty_cache(5), GMLAKE_ERR_NO_POOL, "a device without a pool: no event");
    gml_trace tr;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &tr, err, sizeof err), 0, "%s", err);
    unlink(path);
    cr_assert_eq(tr.n, 3);
    cr_assert(tr.ev[0].op == 'A' && tr.ev[1].op == 'F' && tr.ev[2].op == 'E', "A F E: %c %c %c",
              tr.ev[0].op, tr.ev[1].op, tr.ev[2].op);
    gml_trace_free(&tr);
}

/* A device reset (cudaDeviceReset) destroys the allocations still live: the trace ends each with
 * an `F` and records the memory given back (`E`), so that the fresh pool's allocations, at the
 * same addresses, replay, and the replay's peak active is the one gmlake reported.  Before, the
 * trace had no end for them: the next allocation at their address was "allocated while still
 * live" and the replay refused the trace. */
Test(trace, a_device_reset_ends_the_allocations_it_destroyed)
{
    char path[] = "/tmp/gmlake-trace-XXXXXX";
    trace_to(path);
    void *live, *gone, *again;
    cudaStream_t s;
    cr_assert_eq(cudaStreamCreate(&s), cudaSuccess);
    cr_assert_eq(cudaMalloc(&live, 8 << 20), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&gone, 3 << 20, s), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(gone, s), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&gone, 1 << 20, s), cudaSuccess); /* live too */
    cr_assert_eq(cudaDeviceReset(), cudaSuccess); /* and the stream with it */
    cr_assert_eq(cudaMalloc(&again, 8 << 20), cudaSuccess);
    cr_assert_eq(again, live, "the fresh pool hands out the same address (else the test proves nothing)");
    cr_assert_eq(cudaFree(again), cudaSuccess);
    gmlake_stats st;
    cr_assert_eq(gmlake_get_stats(0, &st), GMLAKE_OK);

    gml_trace tr;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &tr, err, sizeof err), 0, "%s", err);
    unlink(path);
    const char want[] = "AAFAFFEAF"; /* the reset's two ends (either order), then E */
    cr_assert_eq(tr.n, sizeof want - 1);
    for (size_t i = 0; i < tr.n; i++)
        cr_expect_eq(tr.ev[i].op, want[i], "event %zu", i);
    cr_expect_eq(tr.ev[6].ptr, 0);
    gml_pool *sim = gml_sim_pool_create((size_t)1 << 30, false, NULL, NULL);
    cr_assert_not_null(sim);
    gml_replay_result res;
    cr_assert_eq(gml_replay(sim, &tr, 1, &res, err, sizeof err), 0, "%s", err);
    cr_expect_eq(res.stats.peak_active_bytes, st.peak_active_bytes);
    cr_expect_eq(res.stats.active_bytes, 0);
    gml_sim_pool_destroy(sim);
    gml_trace_free(&tr);
}

/* What the next test starts in a process of its own, with the same environment (and so the same
 * trace_file); run alone it passes too. */
Test(trace, an_allocation_and_its_free)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 4 << 20), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

/* A program started with the same environment while the trace is recorded (a subprocess, a
 * spawned worker that allocates) has the same trace_file: it records nothing into it and says
 * so, and the trace is whole.  Before, its first event opened the file again ("w"), cutting it,
 * and both processes wrote over each other: the parent's trace began with the child's lines, and
 * frees of pointers it never had. */
Test(trace, another_process_with_the_same_trace_file_leaves_it_whole)
{
    char path[] = "/tmp/gmlake-trace-XXXXXX", errs[] = "/tmp/gmlake-trace-err-XXXXXX";
    trace_to(path);
    int efd = mkstemp(errs);
    cr_assert_geq(efd, 0);
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, 8 << 20), cudaSuccess); /* the trace is open */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, efd, 2);
    char *argv[] = {"/proc/self/exe", "trace::an_allocation_and_its_free", NULL};
    extern char **environ;
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ), 0);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the other process allocated and freed");
    posix_spawn_file_actions_destroy(&fa);
    cr_assert_eq(cudaMalloc(&q, 2 << 20), cudaSuccess);
    cr_assert_eq(cudaFree(q), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);

    gml_trace tr;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &tr, err, sizeof err), 0, "%s", err);
    unlink(path);
    cr_assert_eq(tr.n, 4, "this process's four events only");
    cr_expect(tr.ev[0].op == 'A' && tr.ev[0].ptr == (uintptr_t)p, "A p first");
    cr_expect(tr.ev[1].op == 'A' && tr.ev[1].ptr == (uintptr_t)q);
    cr_expect(tr.ev[2].op == 'F' && tr.ev[2].ptr == (uintptr_t)q);
    cr_expect(tr.ev[3].op == 'F' && tr.ev[3].ptr == (uintptr_t)p);
    gml_trace_free(&tr);
    char said[1024] = "";
    ssize_t n = pread(efd, said, sizeof said - 1, 0);
    close(efd);
    unlink(errs);
    said[n > 0 ? n : 0] = 0;
    cr_expect(strstr(said, "is being recorded by another process") && strstr(said, path),
              "the other process said why it records no trace: %s", said);
}

/* Loads trace `path` and replays it on a sim device: its events' ops into ops (NUL-ended), its
 * replayed peak active into *peak. */
static void load_and_replay(const char *path, char *ops, size_t len, uint64_t *peak)
{
    gml_trace tr;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &tr, err, sizeof err), 0, "%s", err);
    cr_assert_lt(tr.n, len);
    for (size_t i = 0; i < tr.n; i++)
        ops[i] = tr.ev[i].op;
    ops[tr.n] = 0;
    gml_pool *sim = gml_sim_pool_create((size_t)1 << 30, false, NULL, NULL);
    cr_assert_not_null(sim);
    gml_replay_result res;
    cr_assert_eq(gml_replay(sim, &tr, 1, &res, err, sizeof err), 0, "%s", err);
    *peak = res.stats.peak_active_bytes;
    gml_sim_pool_destroy(sim);
    gml_trace_free(&tr);
}

/* One process on two devices: each device's events go to a trace of their own (the first
 * device's under the name given, another's with .devN before the extension), since a trace is
 * one device: each replays to its device's peak active.  Before, both devices' events went into
 * one trace, which the replay took for one device (their memory stitched together). */
Test(trace, each_device_has_a_trace_of_its_own)
{
    char path[] = "/tmp/gmlake-trace-XXXXXX", dev1[64];
    trace_to(path);
    snprintf(dev1, sizeof dev1, "%s.dev1", path);
    void *a, *b, *c;
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaMalloc(&a, 8 << 20), cudaSuccess);
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaMalloc(&b, 4 << 20), cudaSuccess);
    cr_assert_eq(cudaMalloc(&c, 2 << 20), cudaSuccess);
    cr_assert_eq(cudaFree(c), cudaSuccess);
    cr_assert_eq(cudaFree(b), cudaSuccess);
    cr_assert_eq(gmlake_empty_cache(1), GMLAKE_OK);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    gmlake_stats s0, s1;
    cr_assert_eq(gmlake_get_stats(0, &s0), GMLAKE_OK);
    cr_assert_eq(gmlake_get_stats(1, &s1), GMLAKE_OK);
    char ops[16];
    uint64_t peak = 0;
    load_and_replay(path, ops, sizeof ops, &peak);
    unlink(path);
    cr_expect(strcmp(ops, "AF") == 0, "device 0's events only: %s", ops);
    cr_expect_eq(peak, s0.peak_active_bytes);
    load_and_replay(dev1, ops, sizeof ops, &peak);
    unlink(dev1);
    cr_expect(strcmp(ops, "AAFFE") == 0, "device 1's: %s", ops);
    cr_expect_eq(peak, s1.peak_active_bytes);
}

/* The reader of a trace written into a FIFO: it opens it, reads nothing until told to drain
 * (the writer blocks once the pipe is full, as on a stalled disk), then keeps everything. */
typedef struct fifo_reader {
    const char *path;
    atomic_bool drain, done;
    char *buf;
    size_t n;
} fifo_reader;

static void *read_fifo(void *arg)
{
    fifo_reader *r = arg;
    int fd = open(r->path, O_RDONLY);
    if (fd < 0)
        return (void *)1;
    while (!atomic_load(&r->drain))
        usleep(1000);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    size_t cap = 1 << 20;
    r->buf = malloc(cap);
    for (;;) {
        if (r->n == cap)
            r->buf = realloc(r->buf, cap *= 2);
        ssize_t k = read(fd, r->buf + r->n, cap - r->n);
        if (k > 0)
            r->n += (size_t)k;
        else if (k == 0 || errno != EAGAIN || atomic_load(&r->done))
            break;
        else
            usleep(1000);
    }
    close(fd);
    return NULL;
}

static atomic_bool filler_stop;
static atomic_long filled;

static void *fill(void *arg)
{
    (void)arg;
    while (!atomic_load(&filler_stop)) {
        void *p;
        if (cudaMallocAsync(&p, 4096, 0) != cudaSuccess || cudaFreeAsync(p, 0) != cudaSuccess)
            return (void *)1;
        atomic_fetch_add(&filled, 1);
    }
    return NULL;
}

static void *free_y(void *y) { return cudaFreeAsync(y, 0) == cudaSuccess ? NULL : (void *)1; }

static void *alloc_x(void *x) { return cudaMallocAsync((void **)x, 4 << 20, 0) == cudaSuccess ? NULL : (void *)1; }

/* The trace's order is the pool's, whatever delays its writes (a stalled disk, here a FIFO whose
 * reader pauses): an allocation made while another thread waits to free is recorded before that
 * free, so the replay's peak active is the one gmlake reported.  Before, an allocation was
 * recorded only after the pool had served it, and a free only once it had the trace lock, before
 * it reached the pool: a free waiting for the lock while the allocation was served was recorded
 * first, and the replay (8 MiB live at most) missed the moment both blocks were live (12 MiB). */
Test(trace, the_trace_is_in_the_order_the_pool_served)
{
    char path[] = "/tmp/gmlake-trace-fifo-XXXXXX";
    cr_assert_not_null(mkdtemp(path));
    char fifo[64];
    snprintf(fifo, sizeof fifo, "%s/t", path);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    setenv("GMLAKE_TRACE_FILE", fifo, 1);
    fifo_reader r = {.path = fifo};
    pthread_t reader, filler, t_free, t_alloc;
    cr_assert_eq(pthread_create(&reader, NULL, read_fifo, &r), 0);
    void *y, *x = NULL;
    cr_assert_eq(cudaMallocAsync(&y, 8 << 20, 0), cudaSuccess); /* the trace is open */
    cr_assert_eq(pthread_create(&filler, NULL, fill, NULL), 0);
    for (long last = -1; last != atomic_load(&filled);) { /* until the pipe is full */
        last = atomic_load(&filled);
        usleep(300000);
    }
    cr_assert_eq(pthread_create(&t_free, NULL, free_y, y), 0); /* waits behind the stalled write */
    usleep(200000);
    cr_assert_eq(pthread_create(&t_alloc, NULL, alloc_x, &x), 0); /* then this one */
    usleep(200000);
    atomic_store(&filler_stop, true);
    atomic_store(&r.drain, true);
    void *rc[3];
    pthread_join(filler, &rc[0]);
    pthread_join(t_free, &rc[1]);
    pthread_join(t_alloc, &rc[2]);
    cr_assert(!rc[0] && !rc[1] && !rc[2], "a call failed");
    cr_assert_eq(cudaFreeAsync(x, 0), cudaSuccess);
    gmlake_stats st;
    cr_assert_eq(gmlake_get_stats(0, &st), GMLAKE_OK);
    atomic_store(&r.done, true);
    pthread_join(reader, NULL);
    unlink(fifo);
    rmdir(path);

    gml_trace tr;
    char err[256];
    cr_assert_eq(gml_trace_load_mem("fifo", r.buf, r.n, &tr, err, sizeof err), 0, "%s", err);
    free(r.buf);
    cr_assert_eq(tr.n, 4 + 2 * (size_t)atomic_load(&filled), "every event");
    gml_pool *sim = gml_sim_pool_create((size_t)1 << 30, false, NULL, NULL);
    cr_assert_not_null(sim);
    gml_replay_result res;
    cr_assert_eq(gml_replay(sim, &tr, 0, &res, err, sizeof err), 0, "%s", err);
    cr_expect_eq(res.stats.peak_active_bytes, st.peak_active_bytes, "replayed %lu, gmlake said %lu",
                 (unsigned long)res.stats.peak_active_bytes, (unsigned long)st.peak_active_bytes);
    gml_sim_pool_destroy(sim);
    gml_trace_free(&tr);
}

/* A trace_file that is no regular file (a FIFO, /dev/stdout) takes the first device's trace; no
 * file is made beside it for another device (as root, /dev/stdout.dev1 would be a new file in
 * /dev): that device's trace is not recorded, and that is said. */
Test(trace, a_second_device_gets_no_file_beside_a_fifo)
{
    char dir[] = "/tmp/gmlake-trace-fifo-XXXXXX", fifo[64], dev1[80], errs[] = "/tmp/gmlake-trace-err-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/t", dir);
    snprintf(dev1, sizeof dev1, "%s.dev1", fifo);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    setenv("GMLAKE_TRACE_FILE", fifo, 1);
    int efd = mkstemp(errs), saved = dup(2);
    cr_assert(efd >= 0 && saved >= 0);
    fifo_reader r = {.path = fifo};
    pthread_t reader;
    cr_assert_eq(pthread_create(&reader, NULL, read_fifo, &r), 0);
    atomic_store(&r.drain, true);
    void *a, *b;
    dup2(efd, 2);
    cr_assert_eq(cudaMalloc(&a, 2 << 20), cudaSuccess); /* device 0: into the FIFO */
    cr_assert_eq(cudaSetDevice(1), cudaSuccess);
    cr_assert_eq(cudaMalloc(&b, 2 << 20), cudaSuccess);
    cr_assert_eq(cudaFree(b), cudaSuccess);
    cr_assert_eq(cudaSetDevice(0), cudaSuccess);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    dup2(saved, 2);
    atomic_store(&r.done, true);
    pthread_join(reader, NULL);
    bool beside = access(dev1, F_OK) == 0;
    unlink(dev1);
    unlink(fifo);
    rmdir(dir);
    char said[1024] = "";
    ssize_t n = pread(efd, said, sizeof said - 1, 0);
    close(efd);
    unlink(errs);
    said[n > 0 ? n : 0] = 0;
    cr_expect(!beside, "no file made beside the FIFO");
    cr_expect(strstr(said, "device 1's trace is not recorded") != NULL, "said: %s", said);
    gml_trace tr;
    char err[256];
    cr_assert_eq(gml_trace_load_mem("fifo", r.buf, r.n, &tr, err, sizeof err), 0, "%s", err);
    free(r.buf);
    cr_expect_eq(tr.n, 2, "device 0's allocation and free");
    gml_trace_free(&tr);
}
