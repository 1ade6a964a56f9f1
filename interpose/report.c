/*
 * report.c — the out-of-memory report: what a user needs to act when gmlake cannot serve a
 * request.  The process's first is logged at warn level (on by default); later ones at info
 * level, since programs refuse themselves on purpose and go on (cuDNN's benchmark mode under
 * PyTorch's cudaMallocAsync backend probes for a workspace of the device's free memory, halving
 * until one succeeds: dozens of refusals, none an error; batch-size finders do the same), and
 * warnings beyond the log's budget would hide a later real one.  At exit (gml_oom_summary), if
 * the process's last allocation through gmlake was refused, that report is repeated at warn
 * level: it is the one the program did not get past.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "interpose.h"

/* bytes as "812.0 MiB" or "10.25 GiB" */
static const char *human(size_t bytes, char *buf, size_t len)
{
    const double mib = 1048576.0, gib = 1073741824.0;
    if ((double)bytes >= gib)
        snprintf(buf, len, "%.2f GiB", (double)bytes / gib);
    else
        snprintf(buf, len, "%.1f MiB", (double)bytes / mib);
    return buf;
}

static pthread_mutex_t last_mu = PTHREAD_MUTEX_INITIALIZER;
static char last_report[512];          /* the latest report, under last_mu */
static atomic_ulong refusals;          /* reports made */
atomic_bool gml_oom_pending;           /* the last allocation through gmlake was refused */

void gml_oom_report(int device, gml_pool *p, size_t size)
{
    gmlake_stats s;
    gml_pool_stats(p, &s);
    size_t dev_free = 0, dev_total = 0;
    gml_depth++;
    int info = gml_dev_mem_info(gml_pool_device(p), &dev_free, &dev_total);
    gml_depth--;
    char req[32], res[32], act[32], fr[32], big[32], st[32], df[32], dt[32], lb[32], lim[64] = "";
    size_t limit = gml_pool_settings_of(p)->limit_bytes;
    if (limit)
        snprintf(lim, sizeof lim, " (memory_limit %s)", human(limit, lb, sizeof lb));
    char dev[96] = "the device's free memory is unknown";
    if (info == GMLAKE_OK)
        snprintf(dev, sizeof dev, "the device has %s free of %s", human(dev_free, df, sizeof df),
                 human(dev_total, dt, sizeof dt));
    char msg[sizeof last_report];
    snprintf(msg, sizeof msg,
             "device %d: out of memory: requested %s; reserved %s%s, active %s, free in the pool %s, "
             "largest free block %s, stitching could offer %s; %s",
             device, human(size, req, sizeof req), human(s.reserved_bytes, res, sizeof res), lim,
             human(s.active_bytes, act, sizeof act), human(s.free_bytes, fr, sizeof fr),
             human(s.largest_free_bytes, big, sizeof big), human(s.stitchable_bytes, st, sizeof st),
             dev);
    pthread_mutex_lock(&last_mu);
    memcpy(last_report, msg, sizeof msg);
    pthread_mutex_unlock(&last_mu);
    atomic_store(&gml_oom_pending, true);
    if (atomic_fetch_add(&refusals, 1) == 0)
        gml_log(GML_LOG_WARN, "%s (later refusals are logged at info level; if the program's last "
                "allocation is refused, its report is repeated at exit)", msg);
    else
        gml_log(GML_LOG_INFO, "%s", msg);
}

void gml_oom_summary(void)
{
    unsigned long n = atomic_load(&refusals);
    if (n < 2)
        return; /* none, or the one already at warn level */
    pthread_mutex_lock(&last_mu);
    if (atomic_load(&gml_oom_pending))
        gml_log(GML_LOG_WARN, "%lu allocations were refused for lack of memory; the last, which the "
                "program did not get past: %s", n, last_report);
    else
        gml_log(GML_LOG_INFO, "%lu allocations were refused for lack of memory; the program went on "
                "after each", n);
    pthread_mutex_unlock(&last_mu);
}
