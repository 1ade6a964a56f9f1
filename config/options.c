/*
 * options.c — the one table of gmlake's settings, and the code that reads, checks and prints a
 * value of each type (the mechanism: which field, which type, which range).  Adding a setting: a
 * row here and a case in field_of().  Calls only units.c and filename.c; everything else in
 * config/ is above it.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "units.h"

/* the names of gml_stitch_strategy (stitch/stitch.h), in its order: written here only */
static const char *const strategies[] = {"largest", "bestfit", NULL};
static const char *const levels[] = {"error", "warn", "info", "debug", NULL};

#define TiB 1099511627776.0

const gml_option gml_options[] = {
    {"enable", NULL, GML_OPT_BOOL, "on", 0, 0, NULL,
     "serve CUDA allocations from gmlake; off passes every call to CUDA untouched"},
    {"stitch", "vmmDefragment", GML_OPT_BOOL, "on", 0, 0, NULL,
     "virtual memory stitching: map free chunks into one range when no single block fits"},
    {"frag_limit", "fragLimit", GML_OPT_SIZE, "2MiB", 0, TiB, NULL,
     "smallest request stitched while the device can still grow (once it cannot, any is)"},
    {"reuse_limit", "reuseLimit", GML_OPT_DOUBLE, "1.25", 1, 64, NULL,
     "a cached stitched block serves a request if its size <= request x this"},
    {"defrag_level", "defragLevel", GML_OPT_INT, "0", 0, 2, NULL,
     "when to stitch: 0 before growing, 1 after growing failed, 2 after releasing the cache"},
    {"auto_gc", "autoGC", GML_OPT_UINT, "128", 0, 1000000, NULL,
     "most stitched blocks kept mapped (0: no bound); least recently used stale ones go first"},
    {"stitch_bytes_limit", NULL, GML_OPT_SIZE, "0", 0, 0, NULL,
     "most virtual bytes in stitched blocks (0: no bound)"},
    {"stitch_strategy", NULL, GML_OPT_ENUM, "largest", 0, 0, strategies,
     "which free chunks a stitch takes: largest (GMLake's) or bestfit"},
    {"chunk_size", NULL, GML_OPT_SIZE, "2MiB", 2097152, 1073741824, NULL,
     "physical chunk size (a power of two, rounded up to the device granularity)"},
    {"small_limit", NULL, GML_OPT_SIZE, "1MiB", 512, 1073741824, NULL,
     "requests below this are packed into shared small chunks (at most chunk_size)"},
    {"memory_limit", NULL, GML_OPT_SIZE, "0", 0, 0, NULL,
     "most device memory gmlake may reserve in this process, per device (0: the whole device; "
     "else at least chunk_size)"},
    {"log_level", NULL, GML_OPT_ENUM, "warn", 0, 0, levels, "error, warn, info or debug"},
    {"log_file", NULL, GML_OPT_PATH, "", 0, 0, NULL, "where messages go (empty: standard error)"},
    {"stats_file", NULL, GML_OPT_PATH, "", 0, 0, NULL,
     "JSON statistics written at exit (empty: none)"},
    {"trace_file", NULL, GML_OPT_PATH, "", 0, 0, NULL,
     "record a gmlake-trace v1 of every allocation and free (empty: none); a trace is one device: "
     "a process's devices after its first each get one with .devN before the extension (a "
     "trace_file that is no regular file, a FIFO or /dev/stdout, takes the first device's only)"},
    {"pytorch_backend", NULL, GML_OPT_BOOL, "on", 0, 0, NULL,
     "when neither PYTORCH_ALLOC_CONF nor PYTORCH_CUDA_ALLOC_CONF names an allocator backend, "
     "set backend:cudaMallocAsync so that PyTorch hands every tensor to gmlake"},
    {"extent_size", NULL, GML_OPT_SIZE, "64MiB", 2097152, 1073741824, NULL,
     "largest physical extent (one CUDA handle) growth creates; rounded down to whole chunks"},
    {"extent_share", NULL, GML_OPT_UINT, "480", 0, 1000000, NULL,
     "an extent is at most 1/extent_share of the most memory reserved at once so far, or of the "
     "growth where that is larger (4/extent_share while the pool, having given memory back, holds "
     "less than that most; at least one chunk; 0: no bound but extent_size)"},
    {"stream_wait", NULL, GML_OPT_BOOL, "on", 0, 0, NULL,
     "a stream may take a block another stream freed while that stream's work may still run, by "
     "making its own work wait for it on the GPU (cuStreamWaitEvent), as CUDA's pool does; off: "
     "only once that work is known complete (else the pool grows)"},
    {"churn_limit", NULL, GML_OPT_SIZE, "32MiB", 0, TiB, NULL,
     "while stitching churns (a new stitched block tore a cached one down, or patched one, within the last "
     GML_STR(GML_CHURN_WINDOW) " allocations), the smallest request stitched while the device can still grow (defrag_level "
     "0): a smaller miss takes a cached stitched block or grows first; 0: off"},
    {"stitch_patch", NULL, GML_OPT_BOOL, "on", 0, 0, NULL,
     "a stitch may keep the free extents of a stale cached stitched block mapped where they are "
     "and map only what they lack after them (fewer device calls); off: every stitch maps a "
     "fresh range"},
    {"stitch_borrow", NULL, GML_OPT_BOOL, "off", 0, 0, NULL,
     "before a stitch grows the pool for a request of at least 1/16 of it, take the free memory "
     "of the other streams whose work may still run, by a wait on the GPU (stream_wait); guards "
     "against growth where the GPU runs far behind the host (measured: docs/ARCHITECTURE.md)"},
};
const int gml_option_count = (int)(sizeof gml_options / sizeof gml_options[0]);
_Static_assert(sizeof gml_options / sizeof gml_options[0] <= GML_OPTION_MAX, "GML_OPTION_MAX rows at most");

/* The field option i sets. */
static void *field_of(gml_config *c, int i)
{
    switch (i) {
    case 0: return &c->enable;
    case 1: return &c->pool.vmm_defragment;
    case 2: return &c->pool.frag_limit;
    case 3: return &c->pool.reuse_limit;
    case 4: return &c->pool.defrag_level;
    case 5: return &c->pool.auto_gc;
    case 6: return &c->pool.stitch_bytes_limit;
    case 7: return &c->pool.strategy;
    case 8: return &c->pool.chunk_size;
    case 9: return &c->pool.small_limit;
    case 10: return &c->pool.limit_bytes;
    case 11: return &c->log_level;
    case 12: return c->log_file;
    case 13: return c->stats_file;
    case 14: return c->trace_file;
    case 15: return &c->pytorch_backend;
    case 16: return &c->pool.extent_size;
    case 17: return &c->pool.extent_share;
    case 18: return &c->pool.stream_wait;
    case 19: return &c->pool.churn_limit;
    case 20: return &c->pool.stitch_patch;
    case 21: return &c->pool.stitch_borrow;
    default: return NULL;
    }
}

bool gml_option_is_pool(int i)
{
    gml_config c;
    const char *f = field_of(&c, i), *pool = (const char *)&c.pool;
    return f && f >= pool && f < pool + sizeof c.pool;
}

/* Whether a file setting's name gets ".rank%r" where several processes run and it names neither
 * %p nor %r: stats_file and trace_file (interpose/summary.c, trace.c), not log_file, one file
 * that every process shares (interpose/log.c). */
static bool gets_rank(const gml_option *o) { return strcmp(o->key, "log_file") != 0; }

void gml_option_accepted(const gml_option *o, char *buf, size_t len)
{
    switch (o->type) {
    case GML_OPT_BOOL: snprintf(buf, len, "on/off, true/false, yes/no, 1/0"); break;
    case GML_OPT_SIZE:
        if (o->max > 0)
            snprintf(buf, len, "a size from %.0f to %.0f bytes, with an optional unit (512KiB, 2MiB, 1G)",
                     o->min, o->max);
        else
            snprintf(buf, len, "a size in bytes with an optional unit (512KiB, 2MiB, 1G)");
        break;
    case GML_OPT_DOUBLE: snprintf(buf, len, "a number from %g to %g", o->min, o->max); break;
    case GML_OPT_INT:
    case GML_OPT_UINT: snprintf(buf, len, "an integer from %.0f to %.0f", o->min, o->max); break;
    case GML_OPT_ENUM: {
        size_t n = 0;
        buf[0] = 0;
        for (int k = 0; o->choices[k] && n < len; k++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", k ? ", " : "one of ", o->choices[k]);
        break;
    }
    default:
        if (gets_rank(o))
            snprintf(buf, len, "a file path of at most %d bytes once expanded (%%p counted as 10 "
                     "bytes, %%r as %d, and %d more for the .rank%%r a name with neither gets)",
                     GML_PATH_MAX - 1, GML_RANK_MAX, 5 + GML_RANK_MAX);
        else
            snprintf(buf, len, "a file path of at most %d bytes once expanded (%%p counted as 10 "
                     "bytes, %%r as %d)", GML_PATH_MAX - 1, GML_RANK_MAX);
        break;
    }
}

/* Whether number v is in option o's range: NULL, or why not. */
static const char *out_of_range(const gml_option *o, double v)
{
    if (v < o->min)
        return v < 0 ? "negative" : "below the allowed range";
    if (o->max > 0 && v > o->max)
        return "above the allowed range";
    return NULL;
}

/* Whether a file setting is too long, NULL if not: its name must fit GML_PATH_MAX whatever the
 * pid and rank (filename.c), so that no file is ever opened under a name cut short. */
static const char *path_too_long(const gml_option *o, const char *text)
{
    if (strlen(text) >= GML_PATH_MAX)
        return "too long";
    return gml_file_name_longest(text, gets_rank(o)) >= GML_PATH_MAX ? "too long once expanded"
                                                                     : NULL;
}

int gml_option_parse(gml_config *c, int i, const char *text, const char **why, char *acc,
                     size_t acclen)
{
    const gml_option *o = &gml_options[i];
    void *f = field_of(c, i);
    const char *w = "not one of the accepted values";
    switch (o->type) {
    case GML_OPT_BOOL: {
        bool v;
        if (gml_parse_bool(text, &v) == 0) {
            *(bool *)f = v;
            return 0;
        }
        w = "not a boolean";
        break;
    }
    case GML_OPT_SIZE: {
        size_t v;
        if (gml_parse_size_why(text, &v, &w) == 0 && !(w = out_of_range(o, (double)v))) {
            *(size_t *)f = v;
            return 0;
        }
        break;
    }
    case GML_OPT_DOUBLE: {
        double v;
        if (gml_parse_double_why(text, &v, &w) == 0 && !(w = out_of_range(o, v))) {
            *(double *)f = v;
            return 0;
        }
        break;
    }
    case GML_OPT_INT:
    case GML_OPT_UINT: {
        long v;
        if (gml_parse_int_why(text, &v, &w) == 0 && !(w = out_of_range(o, (double)v))) {
            if (o->type == GML_OPT_UINT)
                *(unsigned *)f = (unsigned)v;
            else
                *(int *)f = (int)v;
            return 0;
        }
        break;
    }
    case GML_OPT_ENUM:
        for (int k = 0; o->choices[k]; k++)
            if (strcmp(text, o->choices[k]) == 0) {
                *(int *)f = k;
                return 0;
            }
        w = "not one of the choices";
        break;
    case GML_OPT_PATH:
        if (!(w = path_too_long(o, text))) {
            snprintf((char *)f, GML_PATH_MAX, "%s", text);
            return 0;
        }
        break;
    }
    if (why)
        *why = w;
    gml_option_accepted(o, acc, acclen);
    return -1;
}

const char *gml_option_check(const gml_config *cc, int i)
{
    const gml_option *o = &gml_options[i];
    const void *f = field_of((gml_config *)cc, i);
    switch (o->type) {
    case GML_OPT_SIZE: return out_of_range(o, (double)*(const size_t *)f);
    case GML_OPT_DOUBLE:
        return isfinite(*(const double *)f) ? out_of_range(o, *(const double *)f) : "not a number";
    case GML_OPT_INT: return out_of_range(o, *(const int *)f);
    case GML_OPT_UINT: return out_of_range(o, *(const unsigned *)f);
    case GML_OPT_ENUM: {
        int k = *(const int *)f, n = 0;
        while (o->choices[n])
            n++;
        return k >= 0 && k < n ? NULL : "not one of the choices";
    }
    case GML_OPT_PATH: return memchr(f, 0, GML_PATH_MAX) ? path_too_long(o, f) : "too long";
    default: return NULL;
    }
}

void gml_config_value_text(const gml_config *cc, int i, char *buf, size_t len)
{
    gml_config *c = (gml_config *)cc;
    const gml_option *o = &gml_options[i];
    void *f = field_of(c, i);
    switch (o->type) {
    case GML_OPT_BOOL: snprintf(buf, len, "%s", *(bool *)f ? "on" : "off"); break;
    case GML_OPT_SIZE: snprintf(buf, len, "%zu", *(size_t *)f); break;
    case GML_OPT_DOUBLE: snprintf(buf, len, "%g", *(double *)f); break;
    case GML_OPT_INT: snprintf(buf, len, "%d", *(int *)f); break;
    case GML_OPT_UINT: snprintf(buf, len, "%u", *(unsigned *)f); break;
    case GML_OPT_ENUM: snprintf(buf, len, "%s", o->choices[*(int *)f]); break;
    default: snprintf(buf, len, "%s", (char *)f); break;
    }
}

void gml_config_defaults(gml_config *c)
{
    memset(c, 0, sizeof *c);
    char acc[160];
    for (int i = 0; i < gml_option_count; i++)
        gml_option_parse(c, i, gml_options[i].def, NULL, acc, sizeof acc);
}

void gml_pool_settings_default(gml_pool_settings *s)
{
    gml_config c;
    gml_config_defaults(&c);
    *s = c.pool;
}

int gml_setting_choice(const char *key, const char *name)
{
    for (int i = 0; i < gml_option_count; i++) {
        const gml_option *o = &gml_options[i];
        if (o->type != GML_OPT_ENUM || strcmp(o->key, key) != 0)
            continue;
        for (int k = 0; o->choices[k]; k++)
            if (strcmp(o->choices[k], name) == 0)
                return k;
    }
    return -1;
}
