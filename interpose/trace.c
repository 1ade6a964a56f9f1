/*
 * trace.c — the trace recorder: with trace_file set, every allocation and free gmlake serves is
 * appended as one gmlake-trace v1 line (core/trace_format.h), whole lines (readable while the
 * job runs).  The file is created on the first event, so a process that served nothing leaves no
 * trace file; another process recording into the same file (the same environment) records none
 * and says so (trace_taken).  A write that fails (a full disk) is said once and ends the recording (trace_broken).
 * A free holds the trace lock across the pool free (gml_trace_free_begin/end), so a
 * recorded `A X` never precedes the `F X` that freed X, whatever the threads; so does a device
 * reset, which ends every allocation it destroyed (gml_trace_held) and gives the memory back.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/trace_format.h"
#include "interpose.h"

static FILE *trace_out;
static char trace_path[GML_PATH_MAX];
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;

void gml_trace_setup(const char *pattern)
{
    if (pattern[0] && !gml_file_name(pattern, true, trace_path, sizeof trace_path)) {
        trace_path[0] = 0; /* never a trace under a name cut short */
        gml_log(GML_LOG_ERROR, "trace_file %s is too long once expanded; no trace is recorded", pattern);
    }
}

/* Whether the trace file has lost a write (a full disk: trace_mu held).  The first loss is said
 * once and ends the recording: a trace with a gap in it would replay to wrong figures. */
static bool trace_broken(void)
{
    static bool said;
    if (!trace_out || !ferror(trace_out))
        return false;
    if (!said) {
        said = true;
        gml_log(GML_LOG_ERROR, "trace_file %s: write failed (%s): the trace is incomplete and "
                "recording stops (replaying it would give wrong figures)", trace_path,
                strerror(errno ? errno : EIO));
    }
    return true;
}

/* Whether another process holds the trace file open for its own trace (a program started with
 * the same environment: a subprocess, a spawned worker that allocates): it holds an exclusive
 * lock on it (flock, which a forked child shares and an exec'ed one, the descriptor being
 * close-on-exec, does not); else this process takes the lock.  A file system without such locks
 * is taken as free. */
static bool trace_taken(FILE *f)
{
    return flock(fileno(f), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

/* Opens the trace file on the first event (trace_mu held); false when it cannot be written.  It
 * is cut to nothing only once locked: opened "w", a second process cut the first one's trace
 * and both wrote over each other. */
static bool trace_open(void)
{
    static bool failed;
    if (trace_out || failed)
        return trace_out != NULL;
    trace_out = gml_fopen(trace_path, "a");
    if (trace_out && trace_taken(trace_out)) {
        fclose(trace_out);
        trace_out = NULL;
        failed = true;
        gml_log(GML_LOG_ERROR, "trace_file %s is being recorded by another process; this one "
                "records no trace (%%p in trace_file names one file per process)", trace_path);
        return false;
    }
    struct stat st; /* a regular file starts again; a device or a FIFO is written as it is */
    if (trace_out && fstat(fileno(trace_out), &st) == 0 && S_ISREG(st.st_mode) &&
        ftruncate(fileno(trace_out), 0) != 0) {
        int e = errno;
        fclose(trace_out);
        trace_out = NULL;
        errno = e;
    }
    if (!trace_out) {
        failed = true;
        gml_log(GML_LOG_ERROR, "cannot open trace_file %s (%s); no trace is recorded", trace_path,
                strerror(errno));
        return false;
    }
    setvbuf(trace_out, NULL, _IOLBF, 0); /* whole lines, readable while the job runs */
    gml_trace_write_header(trace_out, "recorded by libgmlake");
    return !trace_broken();
}

/* One trace line; trace_mu held and the file open. */
static void trace_line(char op, uintptr_t ptr, size_t size, uintptr_t stream)
{
    if (trace_broken())
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    gml_trace_rec r = {.op = op, .ptr = ptr, .size = size, .stream = stream,
                       .t_us = (uint64_t)t.tv_sec * 1000000 + (uint64_t)t.tv_nsec / 1000};
    gml_trace_write_line(trace_out, &r);
    trace_broken();
}

void gml_trace_event(char op, uintptr_t ptr, size_t size, uintptr_t stream)
{
    if (!trace_path[0])
        return;
    pthread_mutex_lock(&trace_mu);
    if (trace_open())
        trace_line(op, ptr, size, stream);
    pthread_mutex_unlock(&trace_mu);
}

bool gml_trace_free_begin(void)
{
    if (!trace_path[0])
        return false;
    pthread_mutex_lock(&trace_mu);
    if (!trace_open()) {
        pthread_mutex_unlock(&trace_mu);
        return false;
    }
    return true;
}

void gml_trace_free_end(bool tracing, bool freed, uintptr_t ptr, uintptr_t stream)
{
    if (!tracing)
        return;
    if (freed)
        trace_line('F', ptr, 0, stream);
    pthread_mutex_unlock(&trace_mu);
}

void gml_trace_held(char op, uintptr_t ptr, size_t size, uintptr_t stream)
{
    trace_line(op, ptr, size, stream);
}

void gml_trace_flush(void)
{
    if (trace_out && fflush(trace_out) != 0) /* at exit, without the lock (stdio locks the file) */
        trace_broken();
}

void gml_trace_hold(bool hold)
{
    if (hold)
        pthread_mutex_lock(&trace_mu);
    else
        pthread_mutex_unlock(&trace_mu);
}
