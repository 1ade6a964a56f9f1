/* device.c — the counting wrapper around a device implementation (contract in device.h). */
#include "device.h"

#include <stdlib.h>
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
    static __thread uint64_t me;
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

gml_ticks_clock gml_ticks_clock_start(void)
{
    return (gml_ticks_clock){.ticks0 = gml_dev_ticks(), .ns0 = gml_dev_now_ns()};
}

double gml_ticks_seconds(const gml_ticks_clock *c, uint64_t ticks)
{
    uint64_t dt = gml_dev_ticks() - c->ticks0, dns = gml_dev_now_ns() - c->ns0;
    if (dt == 0 || dns == 0) /* asked at once: too little elapsed to measure the rate */
        return 0.0;
    return (double)ticks * ((double)dns / (double)dt) * 1e-9;
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
