/*
 * trace.c — the trace recorder: with trace_file set, every allocation and free gmlake serves is
 * appended as one gmlake-trace v1 line (core/trace_format.h), whole lines (readable while the
 * job runs).  A trace is one device: the first device that serves an allocation records under
 * trace_file, any other under trace_file with ".devN" before the extension (trace_name), each
 * file created on its device's first event, so a process that served nothing leaves no trace
 * file; another process recording into the same file (the same environment) records none there
 * and says so (gml_file_claim, state.c).  A write that fails (a full disk) is said once and ends that file's
 * recording (trace_broken).
 * The pool records its allocations and frees itself, under its lock (gml_trace_record is each
 * pool's recorder, stitch/pool.h), so the trace is in the order the pool served them, whatever
 * the threads and however long a write takes: an `A X` never precedes the `F X` that freed X,
 * and the replay meets the same live memory at every step; a device reset's destroyed
 * allocations are frees there too.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/trace_format.h"
#include "stitch/registry.h" /* GML_MAX_DEVICES */
#include "interpose.h"

typedef struct trace_file {
    FILE *out;
    bool failed;                     /* it could not be opened: no trace of this device */
    bool said;                       /* a write failed, and that was said */
    char path[GML_PATH_MAX];
} trace_file;

static char trace_path[GML_PATH_MAX]; /* trace_file expanded: the first device's trace */
static int first_device = -1;         /* the device recorded under trace_path */
static trace_file files[GML_MAX_DEVICES];
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;

void gml_trace_setup(const char *pattern)
{
    if (pattern[0] && !gml_file_name(pattern, true, trace_path, sizeof trace_path)) {
        trace_path[0] = 0; /* never a trace under a name cut short */
        gml_log(GML_LOG_ERROR, "trace_file %s is too long once expanded; no trace is recorded", pattern);
    }
}

/* Whether trace file t has lost a write (a full disk: trace_mu held).  The first loss is said
 * once and ends its recording: a trace with a gap in it would replay to wrong figures. */
static bool trace_broken(trace_file *t)
{
    if (!t->out || !ferror(t->out))
        return false;
    if (!t->said) {
        t->said = true;
        gml_log(GML_LOG_ERROR, "trace_file %s: write failed (%s): the trace is incomplete and "
                "recording stops (replaying it would give wrong figures)", t->path,
                strerror(errno ? errno : EIO));
    }
    return true;
}

/* The name of device d's trace (trace_mu held): trace_path for the first device to record, else
 * with ".devN" before its extension; NULL, or why there is none: a trace_file that is no regular
 * file (a FIFO, /dev/stdout) takes the first device's trace only, and a name must fit. */
static const char *trace_name(int d, char *out, size_t len)
{
    if (first_device < 0)
        first_device = d;
    if (d == first_device)
        return (size_t)snprintf(out, len, "%s", trace_path) < len ? NULL : "its name is too long";
    struct stat st;
    if (stat(trace_path, &st) == 0 && !S_ISREG(st.st_mode))
        return "trace_file is no regular file, and takes the first device's trace only";
    const char *ext = gml_file_name_ext(trace_path);
    if ((size_t)snprintf(out, len, "%.*s.dev%d%s", (int)(ext - trace_path), trace_path, d, ext) >= len)
        return "its name (.devN added) is too long";
    return NULL;
}

/* Opens device d's trace file on its first event (trace_mu held); NULL when it cannot be
 * written.  It is cut to nothing only once locked: opened "w", a second process cut the first
 * one's trace and both wrote over each other. */
static trace_file *trace_open(int d)
{
    if (d < 0 || d >= GML_MAX_DEVICES)
        return NULL;
    trace_file *t = &files[d];
    if (t->out || t->failed)
        return t->out ? t : NULL;
    t->failed = true;
    const char *why = trace_name(d, t->path, sizeof t->path);
    if (why) {
        gml_log(GML_LOG_ERROR, "trace_file %s: device %d's trace is not recorded (%s)", trace_path,
                d, why);
        return NULL;
    }
    bool taken;
    t->out = gml_file_claim(t->path, &taken);
    if (taken) {
        gml_log(GML_LOG_ERROR, "trace_file %s is being recorded by another process; this one "
                "records no trace there (%%p in trace_file names one file per process)", t->path);
        return NULL;
    }
    if (t->out && !gml_file_restart(t->out)) {
        int e = errno;
        fclose(t->out);
        t->out = NULL;
        errno = e;
    }
    if (!t->out) {
        gml_log(GML_LOG_ERROR, "cannot open trace_file %s (%s); no trace is recorded there",
                t->path, strerror(errno));
        return NULL;
    }
    t->failed = false;
    setvbuf(t->out, NULL, _IOLBF, 0); /* whole lines, readable while the job runs */
    char origin[64];
    snprintf(origin, sizeof origin, "recorded by libgmlake, device %d", d);
    gml_trace_write_header(t->out, origin);
    return trace_broken(t) ? NULL : t;
}

/* One line of device d's trace; trace_mu held and the file open. */
static void trace_line(int d, char op, uintptr_t ptr, size_t size, uintptr_t stream)
{
    trace_file *t = &files[d];
    if (trace_broken(t))
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    gml_trace_rec r = {.op = op, .ptr = ptr, .size = size, .stream = stream,
                       .t_us = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000};
    gml_trace_write_line(t->out, &r);
    trace_broken(t);
}

bool gml_trace_on(void) { return trace_path[0] != 0; }

void gml_trace_event(int device, char op, uintptr_t ptr, size_t size, uintptr_t stream)
{
    if (!trace_path[0])
        return;
    pthread_mutex_lock(&trace_mu);
    if (trace_open(device))
        trace_line(device, op, ptr, size, stream);
    pthread_mutex_unlock(&trace_mu);
}

void gml_trace_record(void *device, char op, uintptr_t ptr, size_t size, gml_stream stream)
{
    gml_trace_event((int)(intptr_t)device, op, ptr, size, stream);
}

void gml_trace_flush(void)
{
    for (int d = 0; d < GML_MAX_DEVICES; d++) /* at exit, without the lock (stdio locks the file) */
        if (files[d].out && fflush(files[d].out) != 0)
            trace_broken(&files[d]);
}

void gml_trace_hold(bool hold)
{
    if (hold)
        pthread_mutex_lock(&trace_mu);
    else
        pthread_mutex_unlock(&trace_mu);
}
