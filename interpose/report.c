/*
 * report.c — the out-of-memory report: what a user needs to act when gmlake cannot serve a
 * request (logged at warn level, so it is on by default).
 */
#include <stdio.h>

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
    gml_log(GML_LOG_WARN,
            "device %d: out of memory: requested %s; reserved %s%s, active %s, free in the pool %s, "
            "largest free block %s, stitching could offer %s; %s",
            device, human(size, req, sizeof req), human(s.reserved_bytes, res, sizeof res), lim,
            human(s.active_bytes, act, sizeof act), human(s.free_bytes, fr, sizeof fr),
            human(s.largest_free_bytes, big, sizeof big), human(s.stitchable_bytes, st, sizeof st),
            dev);
}
