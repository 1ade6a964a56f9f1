/* new_gmlake.c — a stand-in for a libgmlake built after this package with a field appended to
 * gmlake_stats: the same kinds of device call (so that counting them cannot tell), a struct 8
 * bytes longer, and gmlake_stats_size saying so.  The Python package must refuse its figures
 * rather than let the library write past the package's struct (test_gmlake.py, mode "new"). */
#include <stdint.h>
#include <string.h>

#include "gmlake.h"

#define EXPORT __attribute__((visibility("default")))

struct new_stats {
    gmlake_stats s;
    uint64_t later_field;
};

static const char *const names[GMLAKE_DC_COUNT] = {
    "chunk_create", "chunk_release", "va_reserve", "va_free", "map", "unmap", "set_access",
    "event_create", "event_destroy", "event_record", "event_query", "event_sync", "synchronize",
    "stream_wait",
};

EXPORT int gmlake_get_stats(int device, gmlake_stats *stats)
{
    struct new_stats *out = (struct new_stats *)stats;
    if (!out)
        return GMLAKE_ERR_INVALID;
    if (device != 0)
        return GMLAKE_ERR_NO_POOL;
    memset(out, 0, sizeof *out);
    out->s.chunk_size = 2 << 20;
    out->later_field = UINT64_MAX;
    return GMLAKE_OK;
}
size_t gmlake_stats_size(void) { return sizeof(struct new_stats); }
EXPORT const char *gmlake_devcall_name(int kind)
{
    return kind >= 0 && kind < GMLAKE_DC_COUNT ? names[kind] : "unknown";
}
EXPORT const char *gmlake_strerror(int status) { return status ? "some error" : "success"; }
EXPORT int gmlake_empty_cache(int device) { return device ? GMLAKE_ERR_NO_POOL : GMLAKE_OK; }
EXPORT int gmlake_reset_peak_stats(int device) { return device ? GMLAKE_ERR_NO_POOL : GMLAKE_OK; }
EXPORT int gmlake_check(int device) { return device ? GMLAKE_ERR_NO_POOL : GMLAKE_OK; }
