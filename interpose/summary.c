/*
 * summary.c — what a process that gmlake served leaves at exit: one info line per device (peak
 * active, peak reserved, utilization, stitches), the refusals for lack of memory (report.c's
 * gml_oom_summary), the stats file (stats_file: one JSON object a
 * line per device, gmlake_stats' fields, device calls and their driver time by kind, the host
 * time of the pool's allocations and frees), the count of log lines not
 * printed, and the trace flushed.  A stats file that cannot be written whole is an error in the
 * log, naming the file and why.  A process that served no allocation writes no stats file; a
 * forked child writes nothing (the summary is the parent's).  The file is claimed when the
 * process's first pool is made (gml_summary_claim: opened, locked with flock, never cut yet), so
 * that a process started with the same environment (a subprocess that allocates) finds it taken
 * and writes none, saying so, instead of replacing the other one's at whichever exit comes last.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stitch/registry.h"
#include "interpose.h"

static char stats_path[GML_PATH_MAX];
static FILE *stats_out; /* claimed: this process writes the stats file at its exit */
static bool claimed;    /* gml_summary_claim ran (with or without the file) */

void gml_summary_claim(void)
{
    if (claimed || !stats_path[0])
        return;
    claimed = true;
    bool taken;
    stats_out = gml_file_claim(stats_path, &taken); /* not cut: another process may own it */
    if (taken)
        gml_log(GML_LOG_ERROR, "stats_file %s is written by another process; this one writes no "
                "statistics (%%p in stats_file names one file per process)", stats_path);
    else if (!stats_out)
        gml_log(GML_LOG_ERROR, "cannot write stats_file %s: %s", stats_path, strerror(errno));
}

static void write_stats(FILE *f, int d, gml_pool *p, const gmlake_stats *s)
{
    fprintf(f, "{\"device\":%d,\"peak_active_bytes\":%lu,\"peak_reserved_bytes\":%lu,"
               "\"active_bytes\":%lu,\"reserved_bytes\":%lu,\"utilization\":%.6f,"
               "\"allocations\":%lu,\"frees\":%lu,\"live_allocations\":%lu,"
               "\"failed_allocations\":%lu,\"stitches\":%lu,\"stitch_reuses\":%lu,"
               "\"stitch_evictions\":%lu,\"stitched_blocks\":%lu,\"stitched_bytes\":%lu,"
               "\"cache_releases\":%lu,\"chunk_size\":%lu,\"free_bytes\":%lu,"
               "\"largest_free_bytes\":%lu,\"stitchable_bytes\":%lu,\"device_calls\":{",
            d, (unsigned long)s->peak_active_bytes, (unsigned long)s->peak_reserved_bytes,
            (unsigned long)s->active_bytes, (unsigned long)s->reserved_bytes, s->utilization,
            (unsigned long)s->allocations, (unsigned long)s->frees,
            (unsigned long)s->live_allocations, (unsigned long)s->failed_allocations,
            (unsigned long)s->stitches, (unsigned long)s->stitch_reuses,
            (unsigned long)s->stitch_evictions, (unsigned long)s->stitched_blocks,
            (unsigned long)s->stitched_bytes, (unsigned long)s->cache_releases,
            (unsigned long)s->chunk_size, (unsigned long)s->free_bytes,
            (unsigned long)s->largest_free_bytes, (unsigned long)s->stitchable_bytes);
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        fprintf(f, "%s\"%s\":%lu", i ? "," : "", gmlake_devcall_name(i),
                (unsigned long)s->device_calls[i]);
    fprintf(f, "},\"device_seconds\":%.6f,\"device_seconds_by_call\":{", s->device_seconds);
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        fprintf(f, "%s\"%s\":%.6f", i ? "," : "", gmlake_devcall_name(i),
                s->device_seconds_by_call[i]);
    double alloc_s, free_s;
    gml_pool_host_seconds(p, &alloc_s, &free_s);
    fprintf(f, "},\"host_seconds_alloc\":%.9f,\"host_seconds_free\":%.9f}\n", alloc_s, free_s);
}

static void at_exit(void)
{
    if (atomic_load(&gml_forked))
        return; /* the summary and stats file are the parent's */
    gml_depth++;
    /* claimed with the first pool: a process that served nothing has none */
    FILE *stats = stats_out;
    if (stats && !gml_file_restart(stats)) { /* a regular file starts again */
        gml_log(GML_LOG_ERROR, "cannot write stats_file %s: %s", stats_path, strerror(errno));
        fclose(stats);
        stats = NULL;
    }
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
            write_stats(stats, d, p, &s);
    }
    /* a write that failed (a full disk) is said: a stats file cut short is no statistics */
    if (stats && (ferror(stats) | fclose(stats)) != 0)
        gml_log(GML_LOG_ERROR, "cannot write stats_file %s: %s", stats_path,
                strerror(errno ? errno : EIO));
    gml_oom_summary();
    if (gml_log_suppressed())
        gml_log(GML_LOG_INFO, "%lu errors and warnings were not printed", gml_log_suppressed());
    gml_trace_flush();
    gml_depth--;
}

void gml_summary_setup(const char *stats_pattern)
{
    if (stats_pattern[0] && !gml_file_name(stats_pattern, true, stats_path, sizeof stats_path)) {
        stats_path[0] = 0; /* never statistics under a name cut short */
        gml_log(GML_LOG_ERROR, "stats_file %s is too long once expanded; no statistics are written",
                stats_pattern);
    }
    atexit(at_exit);
}
