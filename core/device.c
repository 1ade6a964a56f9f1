/* device.c — the counting wrapper around a device implementation (contract in device.h). */
#include "device.h"

#include <stdlib.h>
#include <stdint.h>
#include <time.h>

static const char *const devcall_names[GMLAKE_DC_COUNT] = {
    "chunk_create", "chunk_release", "va_reserve", "va_free", "map", "unmap", "set_access",
    "event_create", "event_destroy", "event_record", "event_query", "event_sync", "synchronize",
    "stream_wait",
};

const char *gmlake_devcall_name(int kind)
{
    if (kind < 0 || kind >= GMLAKE_DC_COUNT)
        return "unknown";
    return devcall_names[kind];
}

uint64_t gml_thread_id(void)
{
    static _Atomic uint64_t next;
    static GML_TLS uint64_t me;
    if (__builtin_expect(me == 0, 0))
        me = atomic_fetch_add_explicit(&next, 1, memory_order_relaxed) + 1;
    return me;
}

uint64_t gml_dev_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A tick count and the nanosecond clock read together: the tick counter read on both sides of
 * the clock, the narrowest of three tries kept (a thread preempted between two reads would
 * otherwise pair them wrongly, and every conversion after would carry the error). */
static void read_together(uint64_t *ticks, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 3; i++) {
        uint64_t a = gml_dev_ticks(), n = gml_dev_now_ns(), b = gml_dev_ticks();
        if (b >= a && b - a < best) {
            best = b - a;
            *ticks = a + (b - a) / 2;
            *ns = n;
        }
    }
    if (best == UINT64_MAX) /* the counter went backwards each time: pair the last reads */
        *ticks = gml_dev_ticks(), *ns = gml_dev_now_ns();
}

gml_ticks_clock gml_ticks_clock_start(void)
{
    gml_ticks_clock c;
    read_together(&c.ticks0, &c.ns0);
    return c;
}

double gml_ticks_seconds(const gml_ticks_clock *c, uint64_t ticks)
{
    uint64_t t, n;
    read_together(&t, &n);
    if (t <= c->ticks0 || n <= c->ns0) /* asked at once: too little elapsed to measure the rate */
        return 0.0;
    return (double)ticks * ((double)(n - c->ns0) / (double)(t - c->ticks0)) * 1e-9;
}

double gml_dev_seconds(gml_device *d, int kind)
{
    if (d->ops->modeled_seconds)
        return d->ops->modeled_seconds(d->ctx, kind);
    return (double)atomic_load_explicit(&d->ns[kind], memory_order_relaxed) * 1e-9;
}

gml_device *gml_device_new(const gml_device_ops *ops, void *ctx, int ordinal)
{
    gml_device *dev = calloc(1, sizeof *dev);
    if (!dev)
        return NULL;
    dev->ops = ops;
    dev->ctx = ctx;
    dev->ordinal = ordinal;
    dev->timed = !ops->modeled_seconds; /* gml_dev_seconds reads the wrappers' times only then */
    return dev;
}

void gml_device_destroy(gml_device *dev)
{
    if (!dev)
        return;
    if (dev->ops->destroy)
        dev->ops->destroy(dev->ctx);
    free(dev);
}
