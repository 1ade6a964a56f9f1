/*
 * harness.h — the test runner of the interposer tests: Criterion's spelling (Test, cr_assert*,
 * cr_expect*) over a runner small enough to start under ASan, UBSan and TSan (Criterion's runner
 * does not start under TSan, and the interposer must be checked under all three).
 *
 * Each test runs in a process of its own, as under Criterion: the program re-executes itself once
 * per test (`prog SUITE::NAME` runs one test), so every test starts with fresh gmlake and fake-CUDA
 * state.  A failed cr_assert ends its test; a failed cr_expect marks it failed and goes on.  The
 * runner prints one line per failing test and "N passed, M failed"; its exit status is non-zero
 * if a test failed.  `prog --list` lists the tests.
 *
 * Include it in exactly one file of a test program (it defines main).
 */
#ifndef GML_TEST_HARNESS_H
#define GML_TEST_HARNESS_H

#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#pragma GCC diagnostic ignored "-Wformat-zero-length" /* cr_assert(c) without a message */

typedef struct gmt_test {
    const char *suite, *name;
    void (*fn)(void);
} gmt_test;

enum { GMT_MAX = 256 };
static gmt_test gmt_tests[GMT_MAX];
static int gmt_count;
static int gmt_failed; /* in the child: a cr_expect failed */

static void gmt_register(const char *suite, const char *name, void (*fn)(void))
{
    if (gmt_count == GMT_MAX) {
        fprintf(stderr, "harness: more than %d tests\n", GMT_MAX);
        abort();
    }
    gmt_tests[gmt_count++] = (gmt_test){suite, name, fn};
}

#define Test(suite, name)                                                                         \
    static void gmt_fn_##suite##_##name(void);                                                    \
    __attribute__((constructor)) static void gmt_reg_##suite##_##name(void)                       \
    {                                                                                             \
        gmt_register(#suite, #name, gmt_fn_##suite##_##name);                                     \
    }                                                                                             \
    static void gmt_fn_##suite##_##name(void)

__attribute__((format(printf, 5, 6))) static void gmt_check(int ok, int fatal, const char *where,
                                                            const char *what, const char *fmt, ...)
{
    if (ok)
        return;
    fprintf(stderr, "%s: failed: %s", where, what);
    if (fmt[0]) {
        va_list ap;
        va_start(ap, fmt);
        fputs(" (", stderr);
        vfprintf(stderr, fmt, ap);
        fputc(')', stderr);
        va_end(ap);
    }
    fputc('\n', stderr);
    fflush(stderr);
    gmt_failed = 1;
    if (fatal)
        _exit(1);
}

#define GMT_STR2(x) #x
#define GMT_STR(x) GMT_STR2(x)
#define GMT_WHERE __FILE__ ":" GMT_STR(__LINE__)
/* Messages are a format string literal and its arguments, or nothing. */
#define gmt_assert(fatal, cond, what, ...) gmt_check(!!(cond), fatal, GMT_WHERE, what, "" __VA_ARGS__)

#define cr_assert(c, ...) gmt_assert(1, c, #c, __VA_ARGS__)
#define cr_assert_not(c, ...) gmt_assert(1, !(c), "!(" #c ")", __VA_ARGS__)
#define cr_assert_eq(a, b, ...) gmt_assert(1, (a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...) gmt_assert(1, (a) != (b), #a " != " #b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...) gmt_assert(1, (a) < (b), #a " < " #b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...) gmt_assert(1, (a) <= (b), #a " <= " #b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...) gmt_assert(1, (a) > (b), #a " > " #b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...) gmt_assert(1, (a) >= (b), #a " >= " #b, __VA_ARGS__)
#define cr_assert_null(a, ...) gmt_assert(1, (a) == NULL, #a " is NULL", __VA_ARGS__)
#define cr_assert_not_null(a, ...) gmt_assert(1, (a) != NULL, #a " is not NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) gmt_assert(1, strcmp((a), (b)) == 0, #a " equals " #b, __VA_ARGS__)
#define cr_fail(...) gmt_assert(1, 0, "cr_fail", __VA_ARGS__)
#define cr_expect(c, ...) gmt_assert(0, c, #c, __VA_ARGS__)
#define cr_expect_eq(a, b, ...) gmt_assert(0, (a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...) gmt_assert(0, (a) != (b), #a " != " #b, __VA_ARGS__)

static int gmt_run_one(const char *self, const gmt_test *t)
{
    char id[256];
    snprintf(id, sizeof id, "%s::%s", t->suite, t->name);
    char *argv[] = {(char *)self, id, NULL};
    extern char **environ;
    pid_t pid;
    if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0) {
        fprintf(stderr, "[FAIL] %s: cannot start\n", id);
        return 0;
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (WIFSIGNALED(st))
            fprintf(stderr, "[FAIL] %s: killed by signal %d\n", id, WTERMSIG(st));
        else
            fprintf(stderr, "[FAIL] %s: exit status %d\n", id, WEXITSTATUS(st));
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (int i = 0; i < gmt_count; i++)
            printf("%s::%s\n", gmt_tests[i].suite, gmt_tests[i].name);
        return 0;
    }
    if (argc == 2) {
        for (int i = 0; i < gmt_count; i++) {
            char id[256];
            snprintf(id, sizeof id, "%s::%s", gmt_tests[i].suite, gmt_tests[i].name);
            if (strcmp(id, argv[1]) == 0) {
                gmt_tests[i].fn();
                return gmt_failed;
            }
        }
        fprintf(stderr, "harness: no test named %s (--list lists them)\n", argv[1]);
        return 2;
    }
    int ok = 0;
    for (int i = 0; i < gmt_count; i++)
        ok += gmt_run_one(argv[0], &gmt_tests[i]);
    printf("%d passed, %d failed\n", ok, gmt_count - ok);
    return ok == gmt_count ? 0 : 1;
}

/* Records this test process's gmlake trace into a new temporary file (path: a mkstemp template,
 * filled in); call before the first hook call. */
static inline void trace_to(char *path)
{
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    setenv("GMLAKE_TRACE_FILE", path, 1);
}

#endif /* GML_TEST_HARNESS_H */
