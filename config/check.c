/* check.c — the one validation of a configuration (contract in config.h): what `gmlake config
 * --check`, the library (interpose/settings.c) and replay (tools/replay.c) call, so that one
 * setting gets one answer.  Each value against its table row (options.c), then the rules between
 * settings.  The pool checks its own fields again when it is created (stitch/pool.c); these rules
 * are at least as strict, and do not depend on the device: a chunk_size that is not a power of
 * two is refused even where a device's granularity would round it up to one. */
#include <stdio.h>

#include "config.h"

int gml_config_check(const gml_config *c, size_t granularity, char *why, size_t len)
{
    for (int i = 0; i < gml_option_count; i++) {
        const char *w = gml_option_check(c, i);
        if (w) {
            char v[GML_PATH_MAX + 8], acc[200];
            gml_config_value_text(c, i, v, sizeof v);
            gml_option_accepted(&gml_options[i], acc, sizeof acc);
            snprintf(why, len, "%s = %s is not valid (%s); accepted: %s", gml_options[i].key, v, w, acc);
            return -1;
        }
    }
    const gml_pool_settings *s = &c->pool;
    size_t chunk = s->chunk_size;
    size_t device_chunk = granularity && chunk % granularity ? (chunk / granularity + 1) * granularity : chunk;
    const char *w = NULL;
    if (chunk & (chunk - 1))
        w = "chunk_size must be a power of two";
    else if (device_chunk & (device_chunk - 1))
        w = "chunk_size rounded up to the device's granularity must be a power of two";
    else if (s->small_limit > chunk)
        w = "small_limit must not exceed chunk_size";
    if (w) {
        snprintf(why, len, "%s", w);
        return -1;
    }
    if (s->limit_bytes && s->limit_bytes < device_chunk) {
        snprintf(why, len, "memory_limit = %zu bytes is below one chunk (chunk_size %zu bytes): every "
                 "allocation would fail; give a size with its unit (16GiB), or 0 for no limit",
                 s->limit_bytes, device_chunk);
        return -1;
    }
    return 0;
}

int gml_config_check_print(const gml_config *c, size_t granularity, const char *prefix, FILE *msgs)
{
    char why[GML_PATH_MAX + 300];
    if (gml_config_check(c, granularity, why, sizeof why) == 0)
        return 0;
    fprintf(msgs ? msgs : stderr, "%s: invalid settings: %s\n", prefix, why);
    return -1;
}
