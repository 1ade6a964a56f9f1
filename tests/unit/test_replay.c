/* test_replay.c — the trace reader and replay: a trace generated here, every kind of bad line,
 * and the replay with a GPU lag (tools/gpu_lag.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "tools/policy.h"
#include "trace_text.h"

/* A training-like loop: weights live throughout, activations of varying size per step; from step
 * big_from on, its temporary is 60 MiB instead of 14 MiB (growth at that step). */
static char *generate_growing(int steps, int big_from)
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
        n += (size_t)snprintf(s + n, cap - n, "A 0x20000 %d 0x0 %d\n", step < big_from ? 14 << 20 : 60 << 20,
                              t++);
        n += (size_t)snprintf(s + n, cap - n, "F 0x20000 0 0x0 %d\n", t++);
        for (int i = 1; i < 6; i += 2)
            n += (size_t)snprintf(s + n, cap - n, "F %#x 0 0x0 %d\n", 0x10000 + i, t++);
    }
    return s;
}

static char *generate(int steps) { return generate_growing(steps, steps); }

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
    /* The same loop growing at step 20, just past the middle event (561 events, the middle one
     * 280, the last free of step 19): the second half makes device calls, as many as the whole
     * replay less its first 280 events replayed alone (the sim is deterministic). */
    text = generate_growing(40, 20);
    uint64_t total[2], second_half = 0;
    for (int half = 0; half < 2; half++) {
        if (half) { /* the header and the first 280 events */
            char *c = text;
            for (int line = 0; line < 1 + 280; line++)
                c = strchr(c, '\n') + 1;
            *c = '\0';
        }
        char *path = write_trace(text, 0);
        gml_trace t;
        char err[256];
        cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
        cr_assert_eq(t.n, half ? 280 : 1 + 40 * 14);
        fixture f = fx_make(1024 * MiB, false, NULL);
        gml_replay_result r;
        cr_assert_eq(gml_replay(f.pool, &t, 1, &r, err, sizeof err), 0, "%s", err);
        total[half] = r.calls_total;
        if (!half) {
            second_half = r.calls_second_half;
            cr_assert_gt(second_half, 0, "the 60 MiB temporaries grow the pool");
        } else {
            cr_assert_lt(total[1], total[0]);
            cr_assert_eq(second_half, total[0] - total[1], "second half: %lu calls of %lu",
                         (unsigned long)second_half, (unsigned long)total[0]);
        }
        fx_free(&f);
        gml_trace_free(&t);
        unlink(path);
    }
    free(text);
}

/* E (the program gave the cache back) in a trace: the replay's pool releases its free memory
 * there, so the next allocation grows it again. */
Test(replay, a_cache_release_in_the_trace_gives_the_memory_back)
{
    const char *with = "# t\nA 0x10 67108864 0xffffffffffffffff 1\nF 0x10 0 0xffffffffffffffff 2\n"
                       "E 0 0 0xffffffffffffffff 3\nA 0x20 67108864 0xffffffffffffffff 4\n";
    const char *without = "# t\nA 0x10 67108864 0xffffffffffffffff 1\nF 0x10 0 0xffffffffffffffff 2\n"
                          "A 0x20 67108864 0xffffffffffffffff 4\n";
    uint64_t creates[2];
    for (int k = 0; k < 2; k++) {
        char *path = write_trace(k ? without : with, 0);
        gml_trace t;
        char err[256];
        cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
        cr_assert_eq(t.n, k ? 3 : 4);
        fixture f = fx_make(1024 * MiB, false, NULL);
        gml_replay_result r;
        cr_assert_eq(gml_replay(f.pool, &t, 1, &r, err, sizeof err), 0, "%s", err);
        cr_assert_eq(r.allocations, 2);
        cr_assert_eq(r.stats.cache_releases, k ? 0 : 1);
        creates[k] = r.stats.device_calls[GMLAKE_DC_CHUNK_CREATE];
        fx_free(&f);
        gml_trace_free(&t);
        unlink(path);
    }
    cr_assert_gt(creates[0], creates[1], "grown twice with the release (%llu), once without (%llu)",
                 (unsigned long long)creates[0], (unsigned long long)creates[1]);
}

Test(replay, bad_lines_name_file_and_line)
{
    struct { const char *text, *want; } cases[] = {
        /* line 1 is the header write_trace adds */
        {"A 0x10 100 0x0 1\nB 0x10 0 0x0 2\n", ":3: the operation must be A, F or E"},
        {"A 0x10 100 0x0\n", ":2: expected 5 fields"},
        {"# c\n\nA zz 100 0x0 1\n", ":4: the pointer is not a hexadecimal number"},
        {"A 0x10 -5 0x0 1\n", ":2: the size is negative"},
        {"A 0x10 0 0x0 1\n", ":2: an allocation needs a non-zero pointer and size"},
        {"F 0x10 5 0x0 1\n", ":2: a free has size 0"},
        {"A 0x10 100 0x0 1 9\n", ":2: too many fields"},
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
        cr_assert(strstr(err, ":3: "), "%s", err);
        fx_free(&f);
        gml_trace_free(&t);
        unlink(path);
    }
    gml_trace t;
    char err[256];
    cr_assert_eq(gml_trace_load("/nonexistent/trace.gz", &t, err, sizeof err), -1);
    cr_assert(strstr(err, "/nonexistent/trace.gz: cannot open"), "%s", err);
}

/* A gzip trace cut short says so (not "expected 5 fields" of the half line it ends in). */
Test(replay, truncated_or_corrupt_gzip_is_named)
{
    char *text = generate(200);
    char *path = write_trace(text, true);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *gz = malloc((size_t)n + 64);
    cr_assert_eq(fread(gz, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    unlink(path);
    for (int cut = 0; cut < 3; cut++) {
        long len = cut == 0 ? n / 2 : cut == 1 ? n - 4 : n - 1; /* the data; the trailer */
        path = write_trace_bytes(gz, (size_t)len, false);
        gml_trace t;
        char err[512] = "";
        cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), -1, "cut at %ld of %ld", len, n);
        cr_assert(strstr(err, path) && (strstr(err, "truncated") || strstr(err, "corrupt")),
                  "cut at %ld: %s", len, err);
        cr_assert_null(strstr(err, "fields"), "%s", err);
        unlink(path);
    }
    /* a flipped byte in the deflate data */
    gz[n / 2] ^= 0x55;
    path = write_trace_bytes(gz, (size_t)n, false);
    gml_trace t;
    char err[512] = "";
    cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), -1);
    cr_assert(strstr(err, "corrupt") || strstr(err, "truncated"), "%s", err);
    unlink(path);
    gz[n / 2] ^= 0x55;
    /* data after the gzip stream */
    memcpy(gz + n, "A 0x99 4 0x0 1\n", 15);
    path = write_trace_bytes(gz, (size_t)n + 15, false);
    cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), -1);
    cr_assert(strstr(err, path) && strstr(err, "after the end of the gzip stream"), "%s", err);
    unlink(path);
    free(gz);
    free(text);
}

/* The header is required and must say v1; a NUL byte is refused; each names file and line. */
Test(replay, header_version_and_nul_are_checked)
{
    struct { const char *text; size_t len; const char *want; } cases[] = {
        {"A 0x10 100 0x0 1\n", 0, ":1: no '# gmlake-trace v1' header"},
        {"# gmlake-trace v2: op ptr size stream t_us\nA 0x10 100 0x0 1\n", 0,
         ":1: unsupported trace format version"},
        {"# gmlake-trace v10\nA 0x10 100 0x0 1\n", 0, ":1: unsupported trace format version"},
#define WITH_NUL(s) s, sizeof s - 1
        {WITH_NUL("# gmlake-trace v1\nA 0x10 100 0x0 1\n\0A 0x20 100 0x0 2\n"), ":3: a NUL byte"},
        {WITH_NUL("# gmlake-trace v1\nA 0x10 100\0 0x0 1\n"), ":2: a NUL byte"},
        {"", 0, "empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int gz = 0; gz < 2; gz++) {
            size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
            char *path = write_trace_bytes(cases[i].text, len, gz);
            gml_trace t;
            char err[512] = "";
            cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), -1, "case %zu gz %d", i, gz);
            cr_assert(strstr(err, path) && strstr(err, cases[i].want), "case %zu gz %d: %s", i, gz, err);
            unlink(path);
        }
    /* accepted: the header alone then events, CRLF lines, no final newline, two gzip members */
    const char *ok = "# gmlake-trace v1\r\nA 0x10 100 0x0 1\r\nF 0x10 0 0x0 2";
    char *path = write_trace_bytes(ok, strlen(ok), false);
    gml_trace t;
    char err[512] = "";
    cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.n, 2);
    gml_trace_free(&t);
    unlink(path);
    path = write_trace("A 0x10 100 0x0 1\n", true);
    gzFile g = gzdopen(open(path, O_WRONLY | O_APPEND), "ab");
    gzputs(g, "F 0x10 0 0x0 2\n");
    gzclose(g);
    cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.n, 2);
    gml_trace_free(&t);
    unlink(path);
}

/* --stream-ordered: allocations with no stream and their frees (whatever stream the free names)
 * go; a pointer reused afterwards by a stream-ordered allocation stays, as does its free. */
Test(replay, stream_ordered_leaves_out_calls_with_no_stream_and_their_frees)
{
    const char *text = "# gmlake-trace v1\n"
                       "A 0x1000 4096 0xffffffffffffffff 1\n" /* cudaMalloc: out */
                       "A 0x2000 8192 0x10 2\n"
                       "F 0x1000 0 0x10 3\n"                  /* its free, on a stream: out */
                       "A 0x1000 1024 0x10 4\n"               /* the address again, ordered: in */
                       "A 0x3000 512 0xffffffffffffffff 5\n"  /* never freed: out */
                       "F 0x2000 0 0xffffffffffffffff 6\n"    /* cudaFree of ordered memory: in */
                       "F 0x1000 0 0x10 7\n";                 /* in */
    char *path = write_trace(text, 0);
    gml_trace t;
    char err[256];
    size_t dropped = 99;
    cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
    cr_assert_eq(t.n, 7);
    cr_assert_eq(gml_trace_keep_stream_ordered(&t, &dropped, err, sizeof err), 0, "%s", err);
    cr_assert_eq(dropped, 3);
    cr_assert_eq(t.n, 4);
    static const struct { char op; uint64_t ptr, t_us; } want[] = {
        {'A', 0x2000, 2}, {'A', 0x1000, 4}, {'F', 0x2000, 6}, {'F', 0x1000, 7}};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(t.ev[i].op, want[i].op, "event %zu", i);
        cr_assert_eq(t.ev[i].ptr, want[i].ptr, "event %zu", i);
        cr_assert_eq(t.ev[i].t_us, want[i].t_us, "event %zu", i);
    }
    fixture f = fx_make(1024 * MiB, false, NULL);
    gml_replay_result r;
    cr_assert_eq(gml_replay(f.pool, &t, 1, &r, err, sizeof err), 0, "%s", err);
    cr_assert_eq(r.allocations, 2);
    cr_assert_eq(r.frees, 2);
    fx_free(&f);
    gml_trace_free(&t);
    unlink(path);
}


/* The replay's stream 0xb frees 8 MiB at 10 us; stream 0xa asks for 8 MiB at 20 us, and again at
 * 2 s (after freeing it); a cudaFree-like free (no stream) of a third block ends it. */
static const char *const lag_text = "A 0x1 8388608 0xb 0\n"
                                    "A 0x9 2097152 0xffffffffffffffff 1\n"
                                    "F 0x1 0 0xb 10\n"
                                    "A 0x2 8388608 0xa 20\n"
                                    "F 0x2 0 0xa 30\n"
                                    "A 0x3 8388608 0xb 2000000\n"
                                    "F 0x3 0 0xb 2000010\n"
                                    "A 0x4 8388608 0xa 4000000\n"
                                    "F 0x9 0 0xffffffffffffffff 4000010\n";

/* Replays `text` under gmlake with the GPU lag_us behind (stream_wait as given). */
static gml_policy_result replay_text_lagging(const char *text, uint64_t lag_us, bool stream_wait,
                                             uint64_t *waits)
{
    char *path = write_trace(text, 0);
    gml_trace t;
    char err[256];
    cr_assert_eq(gml_trace_load(path, &t, err, sizeof err), 0, "%s", err);
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    s.stream_wait = stream_wait;
    gml_policy *p = gml_policy_create("gmlake", 1024 * MiB, &s, NULL, err, sizeof err);
    cr_assert_not_null(p, "%s", err);
    p->gpu_lag_us = lag_us;
    gml_policy_result r;
    cr_assert_eq(gml_policy_replay(p, &t, 1, NULL, &r, err, sizeof err), 0, "%s", err);
    *waits = r.calls[GMLAKE_DC_STREAM_WAIT];
    gml_policy_destroy(p);
    gml_trace_free(&t);
    unlink(path);
    return r;
}

/* --gpu-lag: a block another stream freed is pending for `lag` after its free, as on a GPU that
 * runs behind the host; without a lag it has passed at once (the replay as it always was). */
static gml_policy_result replay_lagging(uint64_t lag_us, bool stream_wait, uint64_t *waits)
{
    return replay_text_lagging(lag_text, lag_us, stream_wait, waits);
}

/* The GPU waits gmlake makes replaying `text` with the GPU 1 s behind and stream_wait on. */
static uint64_t waits_one_second_behind(const char *text)
{
    uint64_t waits;
    replay_text_lagging(text, 1000000, true, &waits);
    return waits;
}

Test(replay, a_gpu_lag_keeps_another_streams_free_pending_until_it_has_passed)
{
    uint64_t waits;
    gml_policy_result r = replay_lagging(0, true, &waits);
    cr_assert_eq(r.peak_reserved, 10 * MiB, "no lag: stream a takes b's block at once");
    cr_assert_eq(waits, 0);
    r = replay_lagging(1000000, true, &waits);
    cr_assert_eq(r.peak_reserved, 10 * MiB, "1 s behind, with stream_wait: no growth");
    cr_assert_eq(waits, 1, "a waits on the GPU for b's pending free once; at 2 s and 4 s the "
                           "frees have passed");
    r = replay_lagging(1000000, false, &waits);
    cr_assert_eq(r.peak_reserved, 18 * MiB, "1 s behind, without stream_wait: a grows");
    cr_assert_eq(waits, 0);
    r = replay_lagging(0, false, &waits);
    cr_assert_eq(r.peak_reserved, 10 * MiB, "no lag: nothing is pending, whatever stream_wait");
}

/* The lag completes a stream's work in order, unit by unit (not the whole stream at once), and a
 * free with no stream (cudaFree waits for the device) completes everything.  With the GPU 1 s
 * behind: at 1.2 s stream b's units of 2 to 10 us are done but the one of its free at 0.5 s is
 * not, so stream a, taking b's freed memory, waits for it on the GPU; after the stream-less free
 * at 1.3 s, c takes the block a freed at 1.2 s without a wait. */
Test(replay, a_gpu_lag_completes_units_in_order_and_all_at_a_stream_less_free)
{
    const char *text = "A 0x9 4096 0xffffffffffffffff 1\n"
                       "A 0x1 8388608 0xb 2\n"
                       "A 0x5 2097152 0xb 3\n"
                       "F 0x1 0 0xb 10\n"
                       "F 0x5 0 0xb 500000\n"
                       "A 0x2 8388608 0xa 1200000\n"
                       "F 0x2 0 0xa 1200010\n"
                       "F 0x9 0 0xffffffffffffffff 1300000\n"
                       "A 0x3 8388608 0xc 1400000\n"
                       "F 0x3 0 0xc 1400010\n";
    cr_assert_eq(waits_one_second_behind(text), 1,
                 "a waits for b's pending third unit; c waits for nothing");
}

/* What the pool adds to a stream while serving an event (a wait on the GPU for another stream)
 * completes with that event's unit: stream a, whose last event waited for b, has its work done
 * 1 s later, so at 5 s stream c takes the 4 MiB a freed at 15 us without a wait. */
Test(replay, a_gpu_lag_completes_the_waits_the_pool_added_with_their_event)
{
    const char *text = "A 0x7 4194304 0xa 0\n"
                       "A 0x1 8388608 0xb 1\n"
                       "F 0x7 0 0xa 15\n"
                       "F 0x1 0 0xb 16\n"
                       "A 0x2 8388608 0xa 20\n"
                       "A 0x3 4194304 0xc 5000000\n";
    cr_assert_eq(waits_one_second_behind(text), 1, "only a's wait for b at 20 us");
}
