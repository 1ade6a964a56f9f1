/* test_api.c — the public C API (include/gmlake.h) called wrongly or at odd times: bad device
 * ordinals, NULL outputs and unknown pointers, before any CUDA call, with gmlake off, after a
 * device reset, from many threads while others allocate, and in a forked child.  Each answers its
 * documented status, and the pool's checker passes afterwards. */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gmlake.h"
#include "tools/trace.h"

#define MiB ((size_t)1 << 20)
#define cr_expect_str_eq(a, b, ...) gmt_assert(0, strcmp((a), (b)) == 0, #a " equals " #b, __VA_ARGS__)

static const int no_pool[] = {-1, 1, 63, 64, 1 << 30, INT_MAX, INT_MIN};

/* Every device-taking function on `device`, which has no pool: GMLAKE_ERR_NO_POOL (a NULL stats
 * output: GMLAKE_ERR_INVALID). */
static void expect_no_pool(int device)
{
    gmlake_stats s;
    double a, f;
    cr_expect_eq(gmlake_get_stats(device, &s), GMLAKE_ERR_NO_POOL, "device %d", device);
    cr_expect_eq(gmlake_get_stats(device, NULL), GMLAKE_ERR_INVALID, "device %d", device);
    cr_expect_eq(gmlake_get_host_seconds(device, &a, &f), GMLAKE_ERR_NO_POOL, "device %d", device);
    cr_expect_eq(gmlake_get_host_seconds(device, NULL, NULL), GMLAKE_ERR_NO_POOL, "device %d", device);
    cr_expect_eq(gmlake_empty_cache(device), GMLAKE_ERR_NO_POOL, "device %d", device);
    cr_expect_eq(gmlake_reset_peak_stats(device), GMLAKE_ERR_NO_POOL, "device %d", device);
    cr_expect_eq(gmlake_check(device), GMLAKE_ERR_NO_POOL, "device %d", device);
}

/* What takes no device: NULL and unknown pointers, names out of range. */
static void expect_bad_pointers(void)
{
    void *base = (void *)1;
    size_t size = 1;
    int host;
    cr_expect_eq(gmlake_allocation_range(NULL, &base, &size), GMLAKE_ERR_INVALID);
    cr_expect_eq(gmlake_allocation_range(&host, &base, &size), GMLAKE_ERR_INVALID);
    cr_expect_eq(gmlake_allocation_range((void *)0x1234, &base, &size), GMLAKE_ERR_INVALID);
    cr_expect_eq(gmlake_allocation_range((void *)UINTPTR_MAX, &base, &size), GMLAKE_ERR_INVALID);
    cr_expect_eq(gmlake_allocation_range(&host, NULL, NULL), GMLAKE_ERR_INVALID);
    cr_expect_eq(gmlake_graph_pool_rename(0, 7), GMLAKE_ERR_INVALID);
    cr_expect_eq(gmlake_graph_pool_rename(7, 0), GMLAKE_ERR_INVALID);
    cr_expect_eq(gmlake_graph_pool((void *)0x77, 0), GMLAKE_OK, "naming no pool where none was named");
    const int odd[] = {-1, GMLAKE_DC_COUNT, INT_MAX, INT_MIN};
    for (int i = 0; i < 4; i++) {
        cr_expect_str_eq(gmlake_devcall_name(odd[i]), "unknown");
        cr_expect_str_eq(gmlake_strerror(odd[i] == GMLAKE_DC_COUNT ? 99 : odd[i]), "unknown gmlake status");
    }
}

/* Every device of no_pool answers as one without a pool, and what takes no device refuses bad
 * pointers: before and after allocations alike. */
static void expect_no_pools_and_bad_pointers(void)
{
    for (size_t i = 0; i < sizeof no_pool / sizeof *no_pool; i++)
        expect_no_pool(no_pool[i]);
    expect_bad_pointers();
}

Test(api, bad_arguments_before_and_after_the_first_allocation)
{
    expect_no_pool(0); /* no CUDA call yet */
    expect_no_pools_and_bad_pointers();
    cr_assert_eq(gmlake_enabled(), 1, "on, before any CUDA call too");
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    cr_assert_eq(cudaMalloc(&q, 5 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(q), cudaSuccess);
    gmlake_stats before, after;
    cr_assert_eq(gmlake_get_stats(0, &before), GMLAKE_OK);
    expect_no_pools_and_bad_pointers();
    void *base;
    size_t size;
    cr_expect_eq(gmlake_allocation_range(q, &base, &size), GMLAKE_ERR_INVALID, "freed");
    cr_expect_eq(gmlake_allocation_range(p, NULL, &size), GMLAKE_ERR_INVALID);
    cr_expect_eq(gmlake_allocation_range(p, &base, NULL), GMLAKE_ERR_INVALID);
    cr_assert_eq(gmlake_get_stats(0, &after), GMLAKE_OK);
    cr_expect(after.reserved_bytes == before.reserved_bytes && after.live_allocations == 1 &&
              after.peak_active_bytes == before.peak_active_bytes, "device 0 untouched");
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
}

/* A refused call writes no output: the caller's *base and *size stay as they were (a pointer in a
 * block's rounding, past the bytes asked for, set *size to the block's and was refused). */
Test(api, a_refused_allocation_range_leaves_its_outputs)
{
    void *p;
    size_t asked = 3 * MiB + 100;
    cr_assert_eq(cudaMalloc(&p, asked), cudaSuccess);
    void *base = (void *)0x5a5a;
    size_t size = 4242;
    const char *cases[] = {"one past the bytes asked for", "in the block's rounding"};
    const size_t offs[] = {asked, asked + 200};
    for (int i = 0; i < 2; i++) {
        cr_expect_eq(gmlake_allocation_range((char *)p + offs[i], &base, &size), GMLAKE_ERR_INVALID,
                     "%s", cases[i]);
        cr_expect(base == (void *)0x5a5a && size == 4242, "%s: outputs untouched (%p, %zu)",
                  cases[i], base, size);
    }
    cr_expect_eq(gmlake_allocation_range((char *)p + asked - 1, &base, &size), GMLAKE_OK);
    cr_expect(base == p && size == asked, "the last byte asked for names the allocation");
    cr_expect_eq(gmlake_stats_size(), sizeof(gmlake_stats), "the library's layout is this header's");
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

Test(api, with_gmlake_off_no_device_has_a_pool)
{
    setenv("GMLAKE_ENABLE", "0", 1); /* before the first hook call of this test process */
    cr_assert_eq(gmlake_enabled(), 0, "loaded but off");
    void *p;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    expect_no_pool(0);
    expect_no_pools_and_bad_pointers();
    void *base;
    size_t size;
    cr_expect_eq(gmlake_allocation_range(p, &base, &size), GMLAKE_ERR_INVALID, "CUDA's memory");
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

Test(api, after_a_device_reset)
{
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    cr_assert_eq(cudaMalloc(&q, 5 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(q), cudaSuccess);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    gmlake_stats s;
    cr_assert_eq(gmlake_get_stats(0, &s), GMLAKE_OK, "the pool stays, emptied");
    cr_expect(s.live_allocations == 0 && s.active_bytes == 0 && s.reserved_bytes == 0);
    void *base;
    size_t size;
    cr_expect_eq(gmlake_allocation_range(p, &base, &size), GMLAKE_ERR_INVALID, "gone with the reset");
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
    cr_expect_eq(gmlake_empty_cache(0), GMLAKE_OK);
    cr_expect_eq(gmlake_reset_peak_stats(0), GMLAKE_OK);
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess, "the fresh context is served");
    cr_expect_eq(gmlake_allocation_range(p, &base, &size), GMLAKE_OK);
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

enum { ROUNDS = 300 };

static void *allocate(void *arg)
{
    cudaStream_t s = (cudaStream_t)(uintptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        void *p;
        size_t size = ((size_t)(i % 7) + 1) * 700 * 1024;
        if ((s ? cudaMallocAsync(&p, size, s) : cudaMalloc(&p, size)) != cudaSuccess)
            return (void *)1;
        void *base;
        size_t got;
        if (gmlake_allocation_range((char *)p + size - 1, &base, &got) != GMLAKE_OK || base != p ||
            got != size)
            return (void *)2;
        if ((s ? cudaFreeAsync(p, s) : cudaFree(p)) != cudaSuccess)
            return (void *)3;
    }
    return NULL;
}

static void *ask(void *arg)
{
    int device = (int)(uintptr_t)arg;
    for (int i = 0; i < ROUNDS; i++) {
        gmlake_stats s;
        double a, f;
        int rc = gmlake_get_stats(device, &s);
        if (rc != GMLAKE_OK && rc != GMLAKE_ERR_NO_POOL)
            return (void *)1;
        gmlake_get_host_seconds(device, &a, NULL);
        gmlake_get_host_seconds(device, NULL, &f);
        gmlake_reset_peak_stats(device);
        if (i % 10 == 0 && (rc = gmlake_empty_cache(device)) != GMLAKE_OK && rc != GMLAKE_ERR_NO_POOL)
            return (void *)2;
        if ((rc = gmlake_check(device)) != GMLAKE_OK && rc != GMLAKE_ERR_NO_POOL)
            return (void *)3;
        gmlake_graph_pool((void *)(uintptr_t)(0x100 + device), (uint64_t)(i % 3));
    }
    return NULL;
}

Test(api, many_threads_ask_while_others_allocate)
{
    pthread_t t[6];
    for (int i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, allocate, (void *)(uintptr_t)(i ? 0x10 * i : 0));
    for (int i = 3; i < 6; i++)
        pthread_create(&t[i], NULL, ask, (void *)(uintptr_t)(i - 3));
    for (int i = 0; i < 6; i++) {
        void *r;
        pthread_join(t[i], &r);
        cr_expect_eq(r, NULL, "thread %d: step %d failed", i, (int)(uintptr_t)r);
    }
    gmlake_stats s;
    cr_assert_eq(gmlake_get_stats(0, &s), GMLAKE_OK);
    cr_expect_eq(s.live_allocations, 0);
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
}

/* In a child forked after gmlake started CUDA cannot be used and gmlake serves nothing: the
 * child's gmlake_empty_cache answers GMLAKE_ERR_DEVICE and leaves the pool (the parent's, copied)
 * as it was, and the parent's trace gets no cache release it never made. */
Test(api, empty_cache_in_a_forked_child_leaves_the_pool_and_the_trace)
{
    char path[] = "/tmp/gmlake-api-trace-XXXXXX";
    trace_to(path); /* before the first hook call of this test process */
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    cr_assert_eq(cudaMalloc(&q, 5 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(q), cudaSuccess); /* cached: what an empty_cache would give back */
    gmlake_stats before;
    cr_assert_eq(gmlake_get_stats(0, &before), GMLAKE_OK);
    pid_t child = fork();
    cr_assert_geq(child, 0);
    if (child == 0) {
        gmlake_stats s;
        int bad = 0;
        if (gmlake_empty_cache(0) != GMLAKE_ERR_DEVICE)
            bad |= 1;
        if (gmlake_get_stats(0, &s) != GMLAKE_OK || s.reserved_bytes != before.reserved_bytes ||
            s.cache_releases != before.cache_releases ||
            s.device_calls[GMLAKE_DC_CHUNK_RELEASE] != before.device_calls[GMLAKE_DC_CHUNK_RELEASE])
            bad |= 2;
        if (gmlake_check(0) != GMLAKE_OK)
            bad |= 4;
        if (gmlake_enabled() != 0)
            bad |= 8; /* serves nothing in a forked child */
        _exit(bad);
    }
    int st = 0;
    cr_assert_eq(waitpid(child, &st, 0), child);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the child: mask %#x (1 status, 2 its pool changed, 4 check)", WEXITSTATUS(st));
    gmlake_stats after;
    cr_assert_eq(gmlake_get_stats(0, &after), GMLAKE_OK);
    cr_expect_eq(after.reserved_bytes, before.reserved_bytes);
    cr_expect_eq(gmlake_check(0), GMLAKE_OK);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    gml_trace t;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
    int releases = 0;
    for (size_t i = 0; i < t.n; i++)
        releases += t.ev[i].op == 'E';
    cr_expect_eq(t.n, 4, "A A F F");
    cr_expect_eq(releases, 0, "no cache release in the parent's trace");
    gml_trace_free(&t);
    unlink(path);
}

/* What the next test starts in processes of their own (same environment): GML_ALLOCS allocations
 * and frees, then, where GML_WAIT_FD names a pipe, a wait for its end to close; run alone it
 * passes too. */
Test(api, allocations_then_a_wait)
{
    const char *n = getenv("GML_ALLOCS"), *fd = getenv("GML_WAIT_FD");
    for (int i = 0; i < (n ? atoi(n) : 1); i++) {
        void *p;
        cr_assert_eq(cudaMalloc(&p, MiB), cudaSuccess);
        cr_assert_eq(cudaFree(p), cudaSuccess);
    }
    char c;
    if (fd)
        while (read(atoi(fd), &c, 1) > 0)
            ;
}

/* Starts allocations_then_a_wait with `allocs` allocations, its standard error into err_fd and
 * waiting on a pipe: the pipe's write end into *go (close it to let the process end). */
static pid_t start_helper(int allocs, int err_fd, int *go)
{
    int fds[2];
    cr_assert_eq(pipe2(fds, O_CLOEXEC), 0); /* no other helper holds its write end */
    char a[16];
    snprintf(a, sizeof a, "%d", allocs);
    setenv("GML_ALLOCS", a, 1);
    setenv("GML_WAIT_FD", "100", 1);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
    posix_spawn_file_actions_adddup2(&fa, fds[0], 100);
    char *argv[] = {"/proc/self/exe", "api::allocations_then_a_wait", NULL};
    extern char **environ;
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    close(fds[0]);
    *go = fds[1];
    return pid;
}

static void end_helper(pid_t pid, int go)
{
    int st = 0;
    close(go);
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the helper allocated and freed");
}

/* Two processes with one environment, hence one stats_file (a program and a subprocess of it
 * that allocates, no %p): the one that allocates first writes it at its exit, and the other one
 * writes none and says so, whichever ends last.  Before, each wrote the file at its exit, so it
 * held the statistics of the process that ended last, said to be nobody's in particular (and
 * two ending at once could mix their lines). */
Test(api, a_stats_file_two_processes_name_is_written_by_the_first_only)
{
    char path[] = "/tmp/gmlake-api-stats-XXXXXX", errs[] = "/tmp/gmlake-api-err-XXXXXX";
    int fd = mkstemp(path), efd = mkostemp(errs, O_CLOEXEC);
    cr_assert(fd >= 0 && efd >= 0);
    close(fd);
    unlink(path);
    setenv("GMLAKE_STATS_FILE", path, 1);
    int go1, go2, null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    pid_t first = start_helper(1, null, &go1);
    for (int i = 0; i < 500 && access(path, F_OK) != 0; i++) /* its first allocation made */
        usleep(10000);
    pid_t second = start_helper(3, efd, &go2);
    usleep(300000); /* the second one has allocated too */
    end_helper(first, go1);
    end_helper(second, go2);
    close(null);
    char stats[4096] = "", said[1024] = "";
    int sfd = open(path, O_RDONLY);
    cr_assert_geq(sfd, 0, "the stats file was written");
    ssize_t n = read(sfd, stats, sizeof stats - 1), m = pread(efd, said, sizeof said - 1, 0);
    close(sfd);
    close(efd);
    unlink(path);
    unlink(errs);
    stats[n > 0 ? n : 0] = 0;
    said[m > 0 ? m : 0] = 0;
    cr_expect(strstr(stats, "\"allocations\":1,") != NULL, "the first process's statistics: %s", stats);
    cr_expect(strstr(said, "is written by another process") && strstr(said, path),
              "the second process said why it writes none: %s", said);
}
