/*
 * state.c — what the hooks share: the settings, the per-device pools (created on first use, never
 * in the constructor), ownership of pointers, logging, the trace recorder, the exit summary, and
 * fork.
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

#include "core/registry.h"
#include "interpose.h"

__thread int gml_depth;

static gml_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static FILE *log_out;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *trace_out;
static pthread_mutex_t trace_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t create_mu = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int failed_dev[GML_MAX_DEVICES]; /* 1: gmlake cannot run there (logged) */
static _Atomic int forked; /* this process is a child forked after gmlake started */

static void at_exit(void);

static void fork_prepare(void)
{
    pthread_mutex_lock(&create_mu);
    for (int d = 0; d < GML_MAX_DEVICES; d++)
        if (gml_registry_get(d))
            gml_pool_hold(gml_registry_get(d), true);
    pthread_mutex_lock(&trace_mu);
    pthread_mutex_lock(&log_mu);
}

static void fork_release(void)
{
    pthread_mutex_unlock(&log_mu);
    pthread_mutex_unlock(&trace_mu);
    for (int d = GML_MAX_DEVICES - 1; d >= 0; d--)
        if (gml_registry_get(d))
            gml_pool_hold(gml_registry_get(d), false);
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
    gml_config_load(&cfg, NULL, NULL);
    if (cfg.log_file[0] && !(log_out = fopen(cfg.log_file, "a")))
        fprintf(stderr, "gmlake: cannot open log_file %s; logging to standard error\n", cfg.log_file);
    if (cfg.enable && cfg.trace_file[0]) {
        trace_out = fopen(cfg.trace_file, "w");
        if (!trace_out)
            fprintf(stderr, "gmlake: cannot open trace_file %s; no trace is recorded\n", cfg.trace_file);
        else {
            setvbuf(trace_out, NULL, _IOLBF, 0); /* whole lines, readable while the job runs */
            fprintf(trace_out, "# gmlake-trace v1: op ptr size stream t_us (recorded by libgmlake)\n");
        }
    }
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

enum { LOG_BUDGET = 100 }; /* errors and warnings after this many are counted, not printed */
static unsigned long suppressed;

void gml_log(int level, const char *fmt, ...)
{
    static unsigned long printed;
    if (level > gml_cfg()->log_level)
        return;
    pthread_mutex_lock(&log_mu);
    if (level <= GML_LOG_WARN && ++printed > LOG_BUDGET) {
        if (suppressed++ == 0)
            fprintf(log_out ? log_out : stderr,
                    "gmlake: more than %d errors and warnings; further ones are only counted\n", LOG_BUDGET);
        pthread_mutex_unlock(&log_mu);
        return;
    }
    FILE *out = log_out ? log_out : stderr;
    fputs("gmlake: ", out);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
    pthread_mutex_unlock(&log_mu);
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
            gml_log(GML_LOG_WARN, "device %d: %s; its allocations pass through to CUDA", device,
                    err ? err : "cannot create a pool");
        } else {
            gml_registry_install(device, p);
            gml_log(GML_LOG_INFO, "device %d: pool ready (chunk %zu bytes, stitching %s)", device,
                    gml_pool_settings_of(p)->chunk_size,
                    gml_pool_settings_of(p)->vmm_defragment ? "on" : "off");
        }
    }
    pthread_mutex_unlock(&create_mu);
    return p;
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

void gml_trace_event(char op, uintptr_t ptr, size_t size, uintptr_t stream)
{
    if (!trace_out)
        return;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    pthread_mutex_lock(&trace_mu);
    fprintf(trace_out, "%c %#lx %zu %#lx %lld\n", op, (unsigned long)ptr, size,
            (unsigned long)stream, (long long)t.tv_sec * 1000000 + t.tv_nsec / 1000);
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
    FILE *stats = cfg.stats_file[0] ? fopen(cfg.stats_file, "w") : NULL;
    if (cfg.stats_file[0] && !stats)
        fprintf(stderr, "gmlake: cannot write stats_file %s\n", cfg.stats_file);
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
