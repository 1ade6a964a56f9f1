/* old_gmlake.c — a stand-in for a libgmlake built before GMLAKE_DC_STREAM_WAIT (615a7eb): its
 * gmlake_stats has 13 device-call kinds, so every field after device_calls sits 8 bytes earlier
 * (and the by-call times 16), and it has no gmlake_get_host_seconds.  The Python package must not
 * read its figures through the newer layout (test_gmlake.py, mode "old"). */
#include <stdint.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
enum { OLD_DC_COUNT = 13 };

struct old_stats {
    uint64_t u64_before[15]; /* active_bytes .. chunk_size */
    double utilization;
    uint64_t device_calls[OLD_DC_COUNT];
    uint64_t free_bytes, largest_free_bytes, stitchable_bytes;
    double device_seconds;
    double device_seconds_by_call[OLD_DC_COUNT];
};

static const char *const names[OLD_DC_COUNT] = {
    "chunk_create", "chunk_release", "va_reserve", "va_free", "map", "unmap", "set_access",
    "event_create", "event_destroy", "event_record", "event_query", "event_sync", "synchronize",
};

EXPORT int gmlake_get_stats(int device, struct old_stats *out)
{
    if (!out)
        return 2;
    if (device != 0)
        return 5;
    memset(out, 0, sizeof *out);
    out->u64_before[14] = 2 << 20; /* chunk_size */
    out->free_bytes = 12345;
    return 0;
}
EXPORT const char *gmlake_devcall_name(int kind)
{
    return kind >= 0 && kind < OLD_DC_COUNT ? names[kind] : "unknown";
}
EXPORT const char *gmlake_strerror(int status) { return status ? "some error" : "success"; }
EXPORT int gmlake_empty_cache(int device) { return device ? 5 : 0; }
EXPORT int gmlake_reset_peak_stats(int device) { return device ? 5 : 0; }
EXPORT int gmlake_check(int device) { return device ? 5 : 0; }
