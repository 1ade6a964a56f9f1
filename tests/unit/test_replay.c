/* test_replay.c — the trace reader and replay: a trace generated here, and every kind of bad line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "trace_text.h"

/* A training-like loop: weights live throughout, activations of varying size per step. */
static char *generate(int steps)
{
    size_t cap = 1 << 20, n = 0;
    char *s = malloc(cap);
    n += (size_t)snprintf(s + n, cap - n, "# generated\nA 0x1000 33554432 0x0 1\n");
    int t = 2;
    for (int step = 0; step < steps; step++) {
        size_t act[6] = {3 << 20, 7 << 20, 12345, 5 << 20, 9 << 20, 700000};
        for (int i = 0; i < 6; i++)
            n += (size_t)snprintf(s + n, cap - n, "A %#x %zu 0x0 %d\n", 0x10000 + i, act[i], t++);
        for (int i = 0; i < 6; i += 2) /* free every other: holes between live blocks */
            n += (size_t)snprintf(s + n, cap - n, "F %#x 0 0x0 %d\n", 0x10000 + i, t++);
        n += (size_t)snprintf(s + n, cap - n, "A 0x20000 %d 0x0 %d\n", 14 << 20, t++);
        n += (size_t)snprintf(s + n, cap - n, "F 0x20000 0 0x0 %d\n", t++);
        for (int i = 1; i < 6; i += 2)
            n += (size_t)snprintf(s + n, cap - n, "F %#x 0 0x0 %d\n", 0x10000 + i, t++);
    }
    return s;
}

Test(replay, generated_trace_replays_and_repeats_without_device_calls)
{
    char *text = generate(40);
    for (int gz = 0; gz < 2; gz++) {
        char *path = write_trace(text, gz);
        gml_trace t;
        char err[256];
        cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
        cr_assert_eq(t.n, 1 + 40 * 14);
        fixture f = fx_make(1024 * MiB, false, NULL);
        gml_replay_result r;
        cr_assert_eq(gml_replay(f.pool, &t, 1, &r, err, sizeof err), 0, "%s", err);
        cr_assert_eq(r.allocations, 1 + 40 * 7);
        cr_assert_eq(r.frees, 40 * 7);
        cr_assert_eq(r.failed, 0);
        /* peak: weights + the three kept activations + the 14 MiB temporary */
        cr_assert_eq(r.stats.peak_active_bytes, (32u + 7 + 5 + 14) * MiB + 700000);
        cr_assert_eq(r.calls_second_half, 0, "a repeating workload makes no device calls");
        cr_assert_geq(r.stats.utilization, 0.9);
        fx_free(&f);
        gml_trace_free(&t);
        unlink(path);
    }
    free(text);
}

Test(replay, bad_lines_name_file_and_line)
{
    struct { const char *text, *want; } cases[] = {
        {"A 0x10 100 0x0 1\nB 0x10 0 0x0 2\n", ":2: the operation must be A or F"},
        {"A 0x10 100 0x0\n", ":1: expected 5 fields"},
        {"# c\n\nA zz 100 0x0 1\n", ":3: the pointer is not a hexadecimal number"},
        {"A 0x10 -5 0x0 1\n", ":1: the size is not a decimal number"},
        {"A 0x10 0 0x0 1\n", ":1: an allocation needs a non-zero pointer and size"},
        {"F 0x10 5 0x0 1\n", ":1: a free has size 0"},
        {"A 0x10 100 0x0 1 9\n", ":1: too many fields"},
        {"# nothing\n", "no events"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = write_trace(cases[i].text, false);
        gml_trace t;
        char err[256] = "";
        cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), -1, "case %zu", i);
        cr_assert(strstr(err, path) && strstr(err, cases[i].want), "case %zu: %s", i, err);
        unlink(path);
    }
    /* replay-time errors: a free of a pointer that is not live, a double allocation */
    const char *bad[] = {"A 0x10 100 0x0 1\nF 0x20 0 0x0 2\n", "A 0x10 100 0x0 1\nA 0x10 100 0x0 2\n"};
    for (int i = 0; i < 2; i++) {
        char *path = write_trace(bad[i], false);
        gml_trace t;
        char err[256];
        cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0);
        fixture f = fx_make(64 * MiB, false, NULL);
        gml_replay_result r;
        cr_assert_eq(gml_replay(f.pool, &t, 0, &r, err, sizeof err), -1);
        cr_assert(strstr(err, ":2: "), "%s", err);
        fx_free(&f);
        gml_trace_free(&t);
        unlink(path);
    }
    gml_trace t;
    char err[256];
    cr_assert_eq(gml_trace_load("/nonexistent/trace.gz", &t, err, sizeof err), -1);
    cr_assert(strstr(err, "/nonexistent/trace.gz: cannot open"), "%s", err);
}
