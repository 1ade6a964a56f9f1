/*
 * state.c — what the hooks share: the settings, the per-device pools (created on first use, never
 * in the constructor), ownership of pointers, logging, the trace recorder, the exit summary, and
 * fork.
 *
 * Several processes (torchrun: one per GPU) share one environment, hence one set of file names:
 *  - log lines start "gmlake[PID]: ", or "gmlake[PID rank R]: " when RANK or LOCAL_RANK is set;
 *  - in log_file, stats_file and trace_file, %p is the pid, %r the rank (RANK, else LOCAL_RANK,
 *    else 0) and %% a percent sign;
 *  - when several processes run (WORLD_SIZE or LOCAL_WORLD_SIZE above 1) and stats_file or
 *    trace_file contains neither %p nor %r, each process writes its own: ".rank%r" is inserted
 *    before the file's extension (stats.json -> stats.rank3.json).  log_file is shared (appended,
 *    one whole line at a time, each naming its process);
 *  - a process that served no allocation writes no stats file and creates no trace file (a shell
 *    or a helper program started under the same LD_PRELOAD does not overwrite the job's).
 *
 * Fork: CUDA cannot be used in a forked child (its calls fail there).  Handlers registered with
 * the settings take every gmlake lock around fork (pool creation, each pool, trace, log), so that
 * no lock is left held by a thread that does not exist in the child; the child then serves
 * nothing (gml_serving is false): its calls reach CUDA, which fails them as it does for any child,
 * and no pointer of the parent's pools is handed out or freed there.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "stitch/registry.h"
#include "interpose.h"

__thread int gml_depth;

static gml_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static FILE *log_out;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_out;
static char trace_path[GML_PATH_MAX], stats_path[GML_PATH_MAX], log_path[GML_PATH_MAX];
static char rank[24];                  /* RANK or LOCAL_RANK, "" when neither is set */
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int failed_dev[GML_MAX_DEVICES]; /* 1: gmlake cannot run there (logged) */
static _Atomic uint64_t peers_of[GML_MAX_DEVICES]; /* bit a: device a may access this one */
static _Atomic int forked; /* this process is a child forked after gmlake started */

static void at_exit(void);

static bool several_processes(void)
{
    const char *vars[] = {"WORLD_SIZE", "LOCAL_WORLD_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1)
            return true;
    }
    return false;
}

/* Expands %p, %r and %% of `pattern` into out (rules at the top of this file); with per_process
 * and several processes, a pattern naming neither gets ".rank%r" before its extension. */
static void expand_path(const char *pattern, bool per_process, char *out, size_t len)
{
    char pat[GML_PATH_MAX + 16];
    snprintf(pat, sizeof pat, "%s", pattern);
    if (per_process && several_processes() && !strstr(pat, "%p") && !strstr(pat, "%r")) {
        const char *base = strrchr(pat, '/');
        char *dot = strrchr(base ? base : pat, '.');
        if (!dot || dot == (base ? base + 1 : pat))
            dot = pat + strlen(pat);
        char ext[GML_PATH_MAX];
        snprintf(ext, sizeof ext, "%s", dot);
        snprintf(dot, sizeof pat - (size_t)(dot - pat), ".rank%%r%s", ext);
    }
    size_t n = 0;
    for (const char *c = pat; *c && n + 1 < len; c++) {
        char num[32] = "";
        if (c[0] == '%' && c[1] == 'p')
            snprintf(num, sizeof num, "%ld", (long)getpid());
        else if (c[0] == '%' && c[1] == 'r')
            snprintf(num, sizeof num, "%s", rank[0] ? rank : "0");
        else if (c[0] == '%' && c[1] == '%')
            snprintf(num, sizeof num, "%%");
        if (!num[0]) {
            out[n++] = *c;
            continue;
        }
        n += (size_t)snprintf(out + n, len - n, "%s", num);
        if (n >= len)
            n = len - 1;
        c++;
    }
    out[n] = 0;
}

enum { LOG_BUDGET = 100 }; /* errors and warnings after this many are counted, not printed */
static unsigned long suppressed;

/* Writes one log line (the settings must be loaded, or being loaded on this thread). */
static void vlog(int level, const char *fmt, va_list ap)
{
    static unsigned long printed;
    if (level > cfg.log_level)
        return;
    pthread_mutex_lock(&log_mu);
    FILE *out = log_out ? log_out : stderr;
    char who[64];
    if (rank[0])
        snprintf(who, sizeof who, "gmlake[%ld rank %s]: ", (long)getpid(), rank);
    else
        snprintf(who, sizeof who, "gmlake[%ld]: ", (long)getpid());
    if (level <= GML_LOG_WARN && ++printed > LOG_BUDGET) {
        if (suppressed++ == 0)
            fprintf(out, "%smore than %d errors and warnings; further ones are only counted\n",
                    who, LOG_BUDGET);
        pthread_mutex_unlock(&log_mu);
        return;
    }
    fputs(who, out);
    vfprintf(out, fmt, ap);
    fputc('\n', out);
    fflush(out);
    pthread_mutex_unlock(&log_mu);
}

static void log_loading(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void log_loading(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

/* The locks in the order every thread takes them: pool creation, trace (a free holds it across
 * the pool's lock: gml_trace_free_begin), each pool, log. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&create_mu);
    pthread_mutex_lock(&trace_mu);
    for (int d = 0; d < GML_MAX_DEVICES; d++)
        if (gml_registry_get(d))
            gml_pool_hold(gml_registry_get(d), true);
    pthread_mutex_lock(&log_mu);
}

static void fork_release(void)
{
    pthread_mutex_unlock(&log_mu);
    for (int d = GML_MAX_DEVICES - 1; d >= 0; d--)
        if (gml_registry_get(d))
            gml_pool_hold(gml_registry_get(d), false);
    pthread_mutex_unlock(&trace_mu);
    pthread_mutex_unlock(&create_mu);
}

static void fork_child(void)
{
    atomic_store(&forked, 1);
    fork_release();
}

static void load_cfg(void)
{
    gml_depth++;
    const char *r = getenv("RANK");
    if (!r || !*r)
        r = getenv("LOCAL_RANK");
    snprintf(rank, sizeof rank, "%s", r && strlen(r) < sizeof rank ? r : "");
    char *msgs = NULL;
    size_t msglen = 0;
    FILE *mf = open_memstream(&msgs, &msglen);
    gml_config_load(&cfg, NULL, mf);
    if (mf)
        fclose(mf);
    if (cfg.log_file[0]) {
        expand_path(cfg.log_file, false, log_path, sizeof log_path);
        if (!(log_out = fopen(log_path, "a")))
            log_loading(GML_LOG_ERROR, "cannot open log_file %s; logging to standard error", log_path);
    }
    /* the configuration's own messages (bad values, unknown keys), now that the log is open */
    for (char *line = msgs, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        log_loading(GML_LOG_WARN, "%s", strncmp(line, "gmlake: ", 8) == 0 ? line + 8 : line);
        if (!next)
            break;
    }
    free(msgs);
    const char *why = NULL;
    if (cfg.enable && gml_pool_settings_check(&cfg.pool, 0, &why) != 0) {
        log_loading(GML_LOG_ERROR, "invalid settings (%s): gmlake is OFF, every allocation passes "
                    "to CUDA (gmlake config --check shows the settings)", why);
        cfg.enable = false;
    }
    if (cfg.stats_file[0])
        expand_path(cfg.stats_file, true, stats_path, sizeof stats_path);
    if (cfg.enable && cfg.trace_file[0])
        expand_path(cfg.trace_file, true, trace_path, sizeof trace_path);
    if (cfg.enable) {
        atexit(at_exit);
        pthread_atfork(fork_prepare, fork_release, fork_child);
    }
    gml_depth--;
}

const gml_config *gml_cfg(void)
{
    pthread_once(&cfg_once, load_cfg);
    return &cfg;
}

bool gml_serving(void)
{
    return gml_depth == 0 && gml_cfg()->enable && !atomic_load_explicit(&forked, memory_order_relaxed);
}

void gml_log(int level, const char *fmt, ...)
{
    gml_cfg();
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

static void *resolve_driver(const char *name) { return gml_driver_symbol(name); }

gml_pool *gml_pool_of(int device)
{
    gml_pool *p = gml_registry_get(device);
    if (p || device < 0 || device >= GML_MAX_DEVICES || atomic_load(&failed_dev[device]))
        return p;
    pthread_mutex_lock(&create_mu);
    p = gml_registry_get(device);
    if (!p && !atomic_load(&failed_dev[device])) {
        const char *err = NULL;
        gml_device *dev = gml_cuda_device_create(device, resolve_driver, &err);
        p = dev ? gml_pool_create(dev, &gml_cfg()->pool, &err) : NULL;
        if (!p) {
            gml_device_destroy(dev);
            atomic_store(&failed_dev[device], 1);
            gml_log(GML_LOG_ERROR, "device %d: %s; gmlake is OFF there, its allocations pass "
                    "through to CUDA", device, err ? err : "cannot create a pool");
        } else {
            uint64_t peers = atomic_load(&peers_of[device]);
            for (int a = 0; a < GML_MAX_DEVICES; a++)
                if (peers >> a & 1)
                    gml_cuda_device_grant(gml_pool_device(p), a);
            gml_registry_install(device, p);
            gml_log(GML_LOG_INFO, "device %d: pool ready (chunk %zu bytes, stitching %s)", device,
                    gml_pool_settings_of(p)->chunk_size,
                    gml_pool_settings_of(p)->vmm_defragment ? "on" : "off");
        }
    }
    pthread_mutex_unlock(&create_mu);
    return p;
}

void gml_peer_grant(int owner, int accessor)
{
    if (owner < 0 || owner >= GML_MAX_DEVICES || accessor < 0 || accessor >= GML_MAX_DEVICES ||
        owner == accessor)
        return;
    /* under create_mu: a pool created now sees the bit or gets the grant below, never neither */
    pthread_mutex_lock(&create_mu);
    atomic_fetch_or(&peers_of[owner], (uint64_t)1 << accessor);
    gml_pool *p = gml_registry_get(owner);
    pthread_mutex_unlock(&create_mu);
    if (p) {
        gml_depth++;
        int rc = gml_cuda_device_grant(gml_pool_device(p), accessor);
        gml_depth--;
        if (rc != GMLAKE_OK)
            gml_log(GML_LOG_WARN, "device %d: granting device %d access to gmlake memory failed (%s)",
                    owner, accessor, gmlake_strerror(rc));
    }
}

gml_pool *gml_owner(uintptr_t ptr, int *device)
{
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        if (p && gml_pool_owns(p, ptr)) {
            if (device)
                *device = d;
            return p;
        }
    }
    return NULL;
}

/* Opens the trace file on the first event (trace_mu held); false when it cannot be written. */
static bool trace_open(void)
{
    static bool failed;
    if (trace_out || failed)
        return trace_out != NULL;
    trace_out = fopen(trace_path, "w");
    if (!trace_out) {
        failed = true;
        gml_log(GML_LOG_ERROR, "cannot open trace_file %s; no trace is recorded", trace_path);
        return false;
    }
    setvbuf(trace_out, NULL, _IOLBF, 0); /* whole lines, readable while the job runs */
    fprintf(trace_out, "# gmlake-trace v1: op ptr size stream t_us (recorded by libgmlake)\n");
    return true;
}

/* One trace line; trace_mu held and the file open. */
static void trace_line(char op, uintptr_t ptr, size_t size, uintptr_t stream)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    fprintf(trace_out, "%c %#lx %zu %#lx %lld\n", op, (unsigned long)ptr, size,
            (unsigned long)stream, (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000);
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

static void write_stats(FILE *f, int d, const gmlake_stats *s)
{
    fprintf(f, "{\"device\":%d,\"peak_active_bytes\":%lu,\"peak_reserved_bytes\":%lu,"
               "\"active_bytes\":%lu,\"reserved_bytes\":%lu,\"utilization\":%.6f,"
               "\"allocations\":%lu,\"frees\":%lu,\"failed_allocations\":%lu,\"stitches\":%lu,"
               "\"stitch_reuses\":%lu,\"stitch_evictions\":%lu,\"device_calls\":{",
            d, (unsigned long)s->peak_active_bytes, (unsigned long)s->peak_reserved_bytes,
            (unsigned long)s->active_bytes, (unsigned long)s->reserved_bytes, s->utilization,
            (unsigned long)s->allocations, (unsigned long)s->frees,
            (unsigned long)s->failed_allocations, (unsigned long)s->stitches,
            (unsigned long)s->stitch_reuses, (unsigned long)s->stitch_evictions);
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        fprintf(f, "%s\"%s\":%lu", i ? "," : "", gmlake_devcall_name(i),
                (unsigned long)s->device_calls[i]);
    fprintf(f, "}}\n");
}

static void at_exit(void)
{
    if (atomic_load(&forked))
        return; /* the summary and stats file are the parent's */
    gml_depth++;
    bool served = false;
    for (int d = 0; d < GML_MAX_DEVICES; d++)
        served = served || gml_registry_get(d) != NULL;
    FILE *stats = stats_path[0] && served ? fopen(stats_path, "w") : NULL;
    if (stats_path[0] && served && !stats)
        gml_log(GML_LOG_ERROR, "cannot write stats_file %s", stats_path);
    for (int d = 0; d < GML_MAX_DEVICES; d++) {
        gml_pool *p = gml_registry_get(d);
        if (!p)
            continue;
        gmlake_stats s;
        gml_pool_stats(p, &s);
        const double mib = 1024.0 * 1024.0;
        gml_log(GML_LOG_INFO,
                "device %d: peak active %.1f MiB, peak reserved %.1f MiB, utilization %.2f%%, "
                "%lu allocations, %lu stitches (%lu reused)",
                d, (double)s.peak_active_bytes / mib, (double)s.peak_reserved_bytes / mib,
                100.0 * s.utilization, (unsigned long)s.allocations, (unsigned long)s.stitches,
                (unsigned long)s.stitch_reuses);
        if (stats)
            write_stats(stats, d, &s);
    }
    if (stats)
        fclose(stats);
    if (suppressed)
        gml_log(GML_LOG_INFO, "%lu errors and warnings were not printed", suppressed);
    if (trace_out)
        fflush(trace_out);
    gml_depth--;
}
