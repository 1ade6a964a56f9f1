/* trace.c — the trace reader and the replay loop (contract in trace.h). */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uthash.h>
#include <zlib.h>

int gml_trace_load(const char *path, gml_trace *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    gzFile f = gzopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
        return -1;
    }
    size_t cap = 0;
    char buf[512];
    uint32_t line = 0;
    int rc = 0;
    while (gzgets(f, buf, sizeof buf)) {
        line++;
        size_t len = strlen(buf);
        if (len == sizeof buf - 1 && buf[len - 1] != '\n') {
            snprintf(err, errlen, "%s:%u: line too long", path, line);
            rc = -1;
            break;
        }
        char *s = buf;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == '#' || *s == '\n' || *s == '\r' || *s == 0)
            continue;
        if (out->n == cap) {
            cap = cap ? cap * 2 : 4096;
            gml_trace_event *ne = realloc(out->ev, cap * sizeof *ne);
            if (!ne) {
                snprintf(err, errlen, "%s:%u: out of memory", path, line);
                rc = -1;
                break;
            }
            out->ev = ne;
        }
        const char *why = NULL;
        gml_trace_event *e = &out->ev[out->n];
        gml_trace_rec r;
        if (gml_trace_parse_line(s, &r, &why)) {
            snprintf(err, errlen, "%s:%u: %s", path, line, why);
            rc = -1;
            break;
        }
        *e = (gml_trace_event){.op = r.op, .ptr = r.ptr, .size = r.size, .stream = r.stream,
                               .t_us = r.t_us, .line = line};
        out->n++;
    }
    int zerr = 0;
    const char *zmsg = gzerror(f, &zerr);
    if (rc == 0 && zerr != Z_OK && zerr != Z_STREAM_END) {
        snprintf(err, errlen, "%s:%u: read error: %s", path, line + 1, zmsg);
        rc = -1;
    }
    gzclose(f);
    if (rc == 0 && out->n == 0) {
        snprintf(err, errlen, "%s: no events", path);
        rc = -1;
    }
    if (rc) {
        free(out->ev);
        out->ev = NULL;
        out->n = 0;
        return -1;
    }
    out->path = strdup(path);
    return 0;
}

void gml_trace_free(gml_trace *t)
{
    free(t->ev);
    free(t->path);
    memset(t, 0, sizeof *t);
}

typedef struct live_ptr {
    uint64_t trace_ptr;
    uintptr_t ptr; /* 0: the allocation failed */
    UT_hash_handle hh;
} live_ptr;

static uint64_t total_calls(const gmlake_stats *s)
{
    uint64_t n = 0;
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        n += s->device_calls[i];
    return n;
}

int gml_replay(gml_pool *p, const gml_trace *t, size_t check_every, gml_replay_result *res,
               char *err, size_t errlen)
{
    memset(res, 0, sizeof *res);
    live_ptr *live = NULL, *slab = calloc(t->n ? t->n : 1, sizeof *slab);
    if (!slab) {
        snprintf(err, errlen, "%s: out of memory", t->path);
        return -1;
    }
    size_t nslab = 0;
    int rc = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    gmlake_stats st;
    gml_pool_stats(p, &st);
    uint64_t calls0 = total_calls(&st), calls_half = calls0;
    gml_device *dev = gml_pool_device(p);
    double secs0 = gml_sim_device_seconds(dev), secs_half = secs0;
    for (size_t i = 0; i < t->n && rc == 0; i++) {
        const gml_trace_event *e = &t->ev[i];
        if (i == t->n / 2) {
            gml_pool_stats(p, &st);
            calls_half = total_calls(&st);
            secs_half = gml_sim_device_seconds(dev);
            memcpy(res->calls_first_half, st.device_calls, sizeof st.device_calls);
        }
        live_ptr *l = NULL;
        HASH_FIND(hh, live, &e->ptr, sizeof e->ptr, l);
        if (e->op == 'A') {
            if (l) {
                snprintf(err, errlen, "%s:%u: pointer %#" PRIx64 " is allocated while still live",
                         t->path, e->line, e->ptr);
                rc = -1;
                break;
            }
            l = &slab[nslab++];
            l->trace_ptr = e->ptr;
            int r = gml_pool_alloc(p, e->size, (gml_stream)e->stream, &l->ptr);
            if (r == GMLAKE_OK)
                res->allocations++;
            else if (r == GMLAKE_ERR_NOMEM) {
                res->failed++;
                l->ptr = 0;
            } else {
                snprintf(err, errlen, "%s:%u: allocation of %" PRIu64 " bytes failed: %s",
                         t->path, e->line, e->size, gmlake_strerror(r));
                rc = -1;
                break;
            }
            HASH_ADD(hh, live, trace_ptr, sizeof l->trace_ptr, l);
        } else {
            if (!l) {
                snprintf(err, errlen, "%s:%u: free of pointer %#" PRIx64 " that is not live",
                         t->path, e->line, e->ptr);
                rc = -1;
                break;
            }
            HASH_DEL(live, l);
            if (l->ptr) {
                int r = gml_pool_free(p, l->ptr, (gml_stream)e->stream);
                if (r != GMLAKE_OK) {
                    snprintf(err, errlen, "%s:%u: free failed: %s", t->path, e->line,
                             gmlake_strerror(r));
                    rc = -1;
                    break;
                }
                res->frees++;
            }
        }
        if (check_every && (i + 1) % check_every == 0) {
            char why[256];
            if (gml_pool_check(p, why, sizeof why) != GMLAKE_OK) {
                snprintf(err, errlen, "%s:%u: pool check failed after this event: %s", t->path,
                         e->line, why);
                rc = -1;
            }
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    res->seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    gml_pool_stats(p, &res->stats);
    res->calls_total = total_calls(&res->stats) - calls0;
    res->calls_second_half = total_calls(&res->stats) - calls_half;
    res->device_seconds = gml_sim_device_seconds(dev) - secs0;
    res->device_seconds_second_half = gml_sim_device_seconds(dev) - secs_half;
    HASH_CLEAR(hh, live);
    free(slab);
    return rc;
}
