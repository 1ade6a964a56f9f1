/* preload_reports.c — what libgmlake tells the user, under LD_PRELOAD over the fake CUDA.
 * The runner sets GMLAKE_LOG_FILE=DIR/gmlake-%p.log (so the log is this process's own: %p is the
 * pid) and LOCAL_RANK=2.
 *   preload_reports oom   with GMLAKE_MEMORY_LIMIT=8MiB: a request gmlake cannot serve gets the
 *                         out-of-memory report, with the pool's figures as gmlake_get_stats
 *                         gives them, the limit and the device's memory
 *   preload_reports off   with settings the pool refuses (GMLAKE_SMALL_LIMIT=1GiB): an error
 *                         says gmlake is off, and allocations reach CUDA
 *   preload_reports alloc a 1 MiB allocation and its free (for the launcher tests: a process that
 *                         gmlake served, so that it writes its stats and trace files)
 *   preload_reports refusals  with GMLAKE_MEMORY_LIMIT=8MiB: two children (this program, fork and
 *                         exec) are each refused three times; one goes on with an allocation that
 *                         succeeds, one exits refused: the first report of each is printed, the
 *                         other two not (info level), and at exit only the one that ended refused
 *                         repeats its last report (cuDNN's benchmark mode refuses itself dozens of
 *                         times on purpose)
 *   preload_reports chain N  the allocation, then the same in a child (fork and exec of this
 *                         program with N-1, waited for): a process tree of N+1 processes, each
 *                         loading gmlake's settings (the warnings are once per tree)
 * Prints "N passed, M failed"; exit status 1 on any failure. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

#define MiB ((size_t)1 << 20)

static int pass, fail;
#define CHECK(cond, ...)                                                                          \
    do {                                                                                          \
        if (cond) {                                                                               \
            pass++;                                                                               \
        } else {                                                                                  \
            fail++;                                                                               \
            printf("FAIL %s: ", #cond);                                                           \
            printf(__VA_ARGS__);                                                                  \
            printf("\n");                                                                         \
        }                                                                                         \
    } while (0)

/* The whole log file of this process. */
static char *read_log(void)
{
    static char buf[65536];
    const char *pat = getenv("GMLAKE_LOG_FILE");
    char path[512];
    const char *pp = pat ? strstr(pat, "%p") : NULL;
    if (!pp)
        return strcpy(buf, "(GMLAKE_LOG_FILE has no %p)");
    snprintf(path, sizeof path, "%.*s%ld%s", (int)(pp - pat), pat, (long)getpid(), pp + 2);
    FILE *f = fopen(path, "r");
    if (!f)
        return strcpy(buf, "(no log file)");
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    unlink(path);
    return buf;
}

static const char *mib(uint64_t bytes, char *buf)
{
    sprintf(buf, "%.1f MiB", (double)bytes / (double)MiB);
    return buf;
}

static void oom(void)
{
    void *a = NULL, *b = NULL, *c = NULL;
    CHECK(cudaMalloc(&a, 3 * MiB) == cudaSuccess, "first 3 MiB");
    CHECK(cudaMalloc(&b, 3 * MiB) == cudaSuccess, "second 3 MiB");
    CHECK(cudaFree(a) == cudaSuccess, "free");
    CHECK(cudaMalloc(&c, 7 * MiB) == cudaErrorMemoryAllocation, "7 MiB beyond the 8 MiB limit");
    CHECK(fake_cuda_counts()->rt_malloc == 0, "the failed request did not pass to CUDA");
    gmlake_stats s;
    CHECK(gmlake_get_stats(0, &s) == GMLAKE_OK, "stats");
    CHECK(s.failed_allocations == 1, "one failure counted");
    CHECK(s.free_bytes == s.reserved_bytes - 3 * MiB, "free = reserved - the live 3 MiB: %lu, %lu",
          (unsigned long)s.free_bytes, (unsigned long)s.reserved_bytes);
    CHECK(s.largest_free_bytes <= s.free_bytes && s.stitchable_bytes <= s.free_bytes,
          "largest %lu, stitchable %lu", (unsigned long)s.largest_free_bytes,
          (unsigned long)s.stitchable_bytes);
    char *log = read_log();
    if (getenv("SHOW_LOG"))
        fputs(log, stdout);
    char want[256], x[32], y[32], z[32], w[32];
    snprintf(want, sizeof want, "gmlake[%ld rank 2]: device 0: out of memory: requested 7.0 MiB; ",
             (long)getpid());
    CHECK(strstr(log, want) != NULL, "report with pid and rank prefix: %s", log);
    snprintf(want, sizeof want, "reserved %s (memory_limit 8.0 MiB), active 3.0 MiB, free in the "
             "pool %s, largest free block %s, stitching could offer %s; ",
             mib(s.reserved_bytes, x), mib(s.free_bytes, y), mib(s.largest_free_bytes, z),
             mib(s.stitchable_bytes, w));
    CHECK(strstr(log, want) != NULL, "the pool's figures\nwant: %s\nlog: %s", want, log);
    /* 7 MiB is beyond the limit with 3 MiB live whatever is released: refused at once, the
     * cache kept (no release, no synchronisation) */
    CHECK(strstr(log, "the device has 248.0 MiB free of 256.0 MiB") && s.cache_releases == 0,
          "the device's memory, the cache kept: %s", log);
    CHECK(cudaFree(b) == cudaSuccess, "free");
}

static void off(void)
{
    void *a = NULL;
    CHECK(cudaMalloc(&a, MiB) == cudaSuccess, "allocation");
    CHECK(fake_cuda_counts()->rt_malloc == 1, "it reached CUDA");
    gmlake_stats s;
    CHECK(gmlake_get_stats(0, &s) == GMLAKE_ERR_NO_POOL, "gmlake made no pool");
    CHECK(cudaFree(a) == cudaSuccess, "free");
    char *log = read_log();
    CHECK(strstr(log, "invalid settings (small_limit must not exceed chunk_size): gmlake is OFF")
              != NULL, "the error says so: %s", log);
}

/* The child of `refusals`: three refused requests, then (goes_on) one served. */
static void refused_child(int goes_on)
{
    void *a = NULL, *c = NULL;
    CHECK(cudaMalloc(&a, 3 * MiB) == cudaSuccess, "3 MiB");
    for (int i = 0; i < 3; i++)
        CHECK(cudaMalloc(&c, (size_t)(6 + i) * MiB) == cudaErrorMemoryAllocation, "refused");
    if (goes_on)
        CHECK(cudaMalloc(&c, MiB) == cudaSuccess, "then 1 MiB served");
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void refusals(const char *self)
{
    for (int goes_on = 1; goes_on >= 0; goes_on--) {
        fflush(NULL);
        pid_t pid = fork();
        if (pid == 0) {
            execl("/proc/self/exe", self, goes_on ? "refused-child-goes-on" : "refused-child", (char *)NULL);
            _exit(127);
        }
        int st = 0;
        CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child");
        /* the child's log file: GMLAKE_LOG_FILE with its pid */
        const char *pat = getenv("GMLAKE_LOG_FILE"), *pp = pat ? strstr(pat, "%p") : NULL;
        char path[512], log[16384] = "";
        if (pp) {
            snprintf(path, sizeof path, "%.*s%ld%s", (int)(pp - pat), pat, (long)pid, pp + 2);
            FILE *f = fopen(path, "r");
            if (f) {
                log[fread(log, 1, sizeof log - 1, f)] = 0;
                fclose(f);
                unlink(path);
            }
        }
        CHECK(count(log, "out of memory: requested 6.0 MiB") == 1 && count(log, "later refusals are logged at info level") == 1,
              "the first refusal is reported: %s", log);
        CHECK(count(log, "requested 7.0 MiB") == 0, "the second is not printed: %s", log);
        if (goes_on)
            CHECK(count(log, "requested 8.0 MiB") == 0 && count(log, "did not get past") == 0,
                  "a program that went on: no report repeated at exit: %s", log);
        else
            CHECK(count(log, "3 allocations were refused for lack of memory; the last, which the program did "
                             "not get past: device 0: out of memory: requested 8.0 MiB") == 1,
                  "a program that ended refused: its last report at exit: %s", log);
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "refusals") == 0)
        refusals(argv[0]);
    else if (argc == 2 && strcmp(argv[1], "refused-child") == 0)
        refused_child(0);
    else if (argc == 2 && strcmp(argv[1], "refused-child-goes-on") == 0)
        refused_child(1);
    else
    if (argc == 2 && strcmp(argv[1], "oom") == 0)
        oom();
    else if (argc == 2 && strcmp(argv[1], "off") == 0)
        off();
    else if (argc == 2 && strcmp(argv[1], "alloc") == 0) {
        void *a = NULL;
        CHECK(cudaMalloc(&a, MiB) == cudaSuccess && cudaFree(a) == cudaSuccess, "1 MiB");
    }
    else if (argc == 3 && strcmp(argv[1], "chain") == 0) {
        void *a = NULL;
        CHECK(cudaMalloc(&a, MiB) == cudaSuccess && cudaFree(a) == cudaSuccess, "1 MiB");
        int n = atoi(argv[2]);
        if (n > 0) {
            char next[16];
            snprintf(next, sizeof next, "%d", n - 1);
            fflush(NULL);
            pid_t pid = fork();
            if (pid == 0) {
                execl("/proc/self/exe", argv[0], "chain", next, (char *)NULL);
                _exit(127);
            }
            int st = 0;
            CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "the child's run");
        }
    }
    else
        CHECK(0, "usage: preload_reports oom|refusals|off|alloc|chain N");
    printf("%d passed, %d failed\n", pass, fail);
    return fail != 0;
}
