/*
 * device.h — everything the pool asks of a GPU, behind one small ops table.
 *
 * Contract (for every implementation):
 *  - Functions return GMLAKE_OK (0) on success; GMLAKE_ERR_NOMEM when the device has no physical
 *    memory left for chunk_create; GMLAKE_ERR_BUSY only from event_query (not complete yet);
 *    GMLAKE_ERR_DEVICE for any other failure.  Pointer arguments are never NULL.
 *  - A chunk is one physical allocation (its own handle) of the pool's chunk size, a multiple of
 *    granularity().  map() maps a whole chunk at offset 0 (CUDA requires offset 0) into a reserved
 *    virtual range; the range is not accessible until set_access() covers it.  unmap() covers one
 *    or more whole mappings.  A released chunk's memory returns to the device once it is unmapped
 *    everywhere.  va_free() needs the range to hold no mapping.
 *  - Events: event_record() captures the work submitted to a stream so far; event_query() says
 *    whether it has completed; event_sync() waits for it; synchronize() waits for the device's
 *    streams that stream_local() names, whichever context is current on the calling thread (on
 *    CUDA those of the device's primary context, and of the current context if it is the device's).
 *  - Streams are named by keys (below).  A key of an implicit stream names one thread's or one
 *    context's stream: stream_here() says whether the calling thread can name it now, and only
 *    then may an event be created for it and recorded on it.  stream_local() says whether
 *    synchronize() waits for a stream at all, from any thread (a stream-ordered free may name a
 *    stream of another device, or of another context of this device, whose work a
 *    synchronisation of this one does not wait for).
 *
 * Implementations: sim (device_sim.c, host memory, for tests and replay) and cuda (device_cuda.c,
 * the driver API resolved at run time).  Callers go through the gml_dev_* wrappers below, which
 * count every call by kind (the counts are the pool's "device calls") and time it (the wall time
 * of the calling thread inside the implementation; gml_dev_seconds).
 */
#ifndef GML_DEVICE_H
#define GML_DEVICE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gmlake.h"

typedef uint64_t gml_handle;  /* physical chunk (CUmemGenericAllocationHandle, or sim's) */
typedef uintptr_t gml_stream; /* a stream key: a created stream's CUstream handle, or a tag below */
typedef void *gml_event;

/* "No stream": a free that promises the device is idle for this block (cudaFree semantics). */
#define GML_STREAM_NONE ((gml_stream)UINTPTR_MAX)
/* Implicit streams (CUstream 0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) name a different stream
 * on each thread or context, so their keys say whose:
 *  GML_STREAM_PTDS | thread << 6 | device   a thread's per-thread default stream on a device;
 *  GML_STREAM_LEGACY | context              a context's legacy stream (CUcontext value).
 * Any other value is a created stream's handle (or, in replay and tests, a plain number). */
#define GML_STREAM_PTDS ((gml_stream)1 << 62)
#define GML_STREAM_LEGACY ((gml_stream)1 << 61)
#define GML_STREAM_TAGS (GML_STREAM_PTDS | GML_STREAM_LEGACY)
/* gmlake's thread-local variables use the initial-exec model: one thread-pointer-relative access,
 * where the default model for a shared library calls __tls_get_addr at each access (7.5% of the
 * instructions of an allocate+free pair through the hooks, several accesses a hooked call).
 * libgmlake is loaded with the program (LD_PRELOAD, or linked to it), so its thread-local block
 * is part of the static block every thread starts with; a library this small (under 64 bytes of
 * it) would still fit the surplus glibc keeps for a later dlopen. */
#define GML_TLS __thread __attribute__((tls_model("initial-exec")))
/* A number for the calling thread, never reused in the process (device.c). */
uint64_t gml_thread_id(void);
static inline gml_stream gml_stream_ptds(int device)
{
    return GML_STREAM_PTDS | (gml_thread_id() << 6) | (gml_stream)(device & 63);
}
static inline gml_stream gml_stream_legacy(uintptr_t context) { return GML_STREAM_LEGACY | context; }
static inline bool gml_stream_is_ptds(gml_stream s)
{
    return s != GML_STREAM_NONE && (s & GML_STREAM_TAGS) == GML_STREAM_PTDS;
}
static inline bool gml_stream_is_legacy(gml_stream s)
{
    return s != GML_STREAM_NONE && (s & GML_STREAM_TAGS) == GML_STREAM_LEGACY;
}

typedef struct gml_device_ops {
    const char *name;
    int (*chunk_create)(void *ctx, size_t size, gml_handle *out);
    int (*chunk_release)(void *ctx, gml_handle h);
    int (*va_reserve)(void *ctx, size_t size, size_t align, uintptr_t *out);
    int (*va_free)(void *ctx, uintptr_t va, size_t size);
    int (*map)(void *ctx, uintptr_t va, size_t size, gml_handle h);
    int (*unmap)(void *ctx, uintptr_t va, size_t size);
    int (*set_access)(void *ctx, uintptr_t va, size_t size);
    int (*event_create)(void *ctx, gml_event *out);
    int (*event_destroy)(void *ctx, gml_event ev);
    int (*event_record)(void *ctx, gml_event ev, gml_stream s);
    int (*event_query)(void *ctx, gml_event ev);
    int (*event_sync)(void *ctx, gml_event ev);
    int (*synchronize)(void *ctx);
    /* Work submitted to stream s from now on runs after the work event ev captured (a GPU-side
     * dependency: the caller does not wait).  s must be nameable here (stream_here). */
    int (*stream_wait)(void *ctx, gml_stream s, gml_event ev);
    /* Whether the calling thread can name stream s now (NULL: always); see gml_dev_stream_here. */
    bool (*stream_here)(void *ctx, gml_stream s);
    /* Whether synchronize() waits for s whichever context is current (NULL: always). */
    bool (*stream_local)(void *ctx, gml_stream s);
    /* The calling thread's current context (a CUcontext value), where event_create makes its
     * events: an event dies with its context (NULL: the device has one context, 0). */
    uintptr_t (*current_context)(void *ctx);
    /* The driver time of the calls of `kind` so far by the implementation's own account, in
     * seconds (NULL: the wrappers' measured wall time is the answer; the sim answers its cost
     * model's estimate, core/cost.h). */
    double (*modeled_seconds)(void *ctx, int kind);
    size_t (*granularity)(void *ctx);
    int (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);
    /* IPC (NULL: not supported): handle_export gives a new file descriptor for chunk h that
     * another process may import (the caller closes it); handle_import makes a handle of `size`
     * bytes from such a descriptor (not taken: the caller closes it), released with
     * chunk_release. */
    int (*handle_export)(void *ctx, gml_handle h, int *fd);
    int (*handle_import)(void *ctx, int fd, size_t size, gml_handle *out);
    /* Whether handle_export can export this device's chunks (NULL: no). */
    bool (*can_export)(void *ctx);
    void (*destroy)(void *ctx);
} gml_device_ops;

typedef struct gml_device {
    const gml_device_ops *ops;
    void *ctx;
    int ordinal;
    bool timed; /* the wrappers time the calls: the implementation has no account of its own */
    _Atomic uint64_t calls[GMLAKE_DC_COUNT];
    _Atomic uint64_t ns[GMLAKE_DC_COUNT]; /* wall time inside the calls of each kind */
} gml_device;

/* Wraps an implementation; the device owns ctx and calls ops->destroy(ctx) in gml_device_destroy. */
gml_device *gml_device_new(const gml_device_ops *ops, void *ctx, int ordinal);
void gml_device_destroy(gml_device *dev);

/* A monotonic clock in nanoseconds (device.c). */
uint64_t gml_dev_now_ns(void);
/* A cheaper clock for timing hot paths: the CPU's constant-rate counter where there is one
 * (x86-64 TSC, AArch64 virtual counter: a few nanoseconds a read against ~25 for
 * gml_dev_now_ns), else gml_dev_now_ns.  Its unit is converted by a gml_ticks_clock. */
static inline uint64_t gml_dev_ticks(void)
{
#if defined(__x86_64__)
    return __builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#else
    return gml_dev_now_ns();
#endif
}
/* The ticks since t0, a gml_dev_ticks reading of this thread: 0 where the counter reads lower
 * (a thread moved to a CPU whose counter lags), never a wrapped-around count. */
static inline uint64_t gml_dev_ticks_since(uint64_t t0)
{
    uint64_t t = gml_dev_ticks();
    return t > t0 ? t - t0 : 0;
}
/* Ticks to seconds: the ratio of nanoseconds to ticks since `start` was taken, measured when
 * asked (a counter that runs at a constant rate, as modern CPUs' do, converts exactly). */
typedef struct gml_ticks_clock {
    uint64_t ticks0, ns0;
} gml_ticks_clock;
gml_ticks_clock gml_ticks_clock_start(void);
double gml_ticks_seconds(const gml_ticks_clock *c, uint64_t ticks);
/* Counts one call of `kind` and adds the wall time of `call` (an expression giving its status). */
#define GML_DEV_CALL(d, kind, call)                                                               \
    do {                                                                                          \
        atomic_fetch_add_explicit(&(d)->calls[kind], 1, memory_order_relaxed);                    \
        if (!(d)->timed) /* the sim: its cost model answers gml_dev_seconds, no clock read */      \
            return (call);                                                                        \
        uint64_t t0_ = gml_dev_now_ns();                                                          \
        int rc_ = (call);                                                                         \
        atomic_fetch_add_explicit(&(d)->ns[kind], gml_dev_now_ns() - t0_, memory_order_relaxed);  \
        return rc_;                                                                               \
    } while (0)
/* The driver time of the calls of `kind` so far, in seconds: the implementation's own account
 * where it has one (the sim's cost model), else the measured wall time. */
double gml_dev_seconds(gml_device *d, int kind);

static inline int gml_dev_chunk_create(gml_device *d, size_t size, gml_handle *out)
{ GML_DEV_CALL(d, GMLAKE_DC_CHUNK_CREATE, d->ops->chunk_create(d->ctx, size, out)); }
static inline int gml_dev_chunk_release(gml_device *d, gml_handle h)
{ GML_DEV_CALL(d, GMLAKE_DC_CHUNK_RELEASE, d->ops->chunk_release(d->ctx, h)); }
static inline int gml_dev_va_reserve(gml_device *d, size_t size, size_t align, uintptr_t *out)
{ GML_DEV_CALL(d, GMLAKE_DC_VA_RESERVE, d->ops->va_reserve(d->ctx, size, align, out)); }
static inline int gml_dev_va_free(gml_device *d, uintptr_t va, size_t size)
{ GML_DEV_CALL(d, GMLAKE_DC_VA_FREE, d->ops->va_free(d->ctx, va, size)); }
static inline int gml_dev_map(gml_device *d, uintptr_t va, size_t size, gml_handle h)
{ GML_DEV_CALL(d, GMLAKE_DC_MAP, d->ops->map(d->ctx, va, size, h)); }
static inline int gml_dev_unmap(gml_device *d, uintptr_t va, size_t size)
{ GML_DEV_CALL(d, GMLAKE_DC_UNMAP, d->ops->unmap(d->ctx, va, size)); }
static inline int gml_dev_set_access(gml_device *d, uintptr_t va, size_t size)
{ GML_DEV_CALL(d, GMLAKE_DC_SET_ACCESS, d->ops->set_access(d->ctx, va, size)); }
static inline int gml_dev_event_create(gml_device *d, gml_event *out)
{ GML_DEV_CALL(d, GMLAKE_DC_EVENT_CREATE, d->ops->event_create(d->ctx, out)); }
static inline int gml_dev_event_destroy(gml_device *d, gml_event ev)
{ GML_DEV_CALL(d, GMLAKE_DC_EVENT_DESTROY, d->ops->event_destroy(d->ctx, ev)); }
static inline int gml_dev_event_record(gml_device *d, gml_event ev, gml_stream s)
{ GML_DEV_CALL(d, GMLAKE_DC_EVENT_RECORD, d->ops->event_record(d->ctx, ev, s)); }
static inline int gml_dev_event_query(gml_device *d, gml_event ev)
{ GML_DEV_CALL(d, GMLAKE_DC_EVENT_QUERY, d->ops->event_query(d->ctx, ev)); }
static inline int gml_dev_event_sync(gml_device *d, gml_event ev)
{ GML_DEV_CALL(d, GMLAKE_DC_EVENT_SYNC, d->ops->event_sync(d->ctx, ev)); }
static inline int gml_dev_synchronize(gml_device *d)
{ GML_DEV_CALL(d, GMLAKE_DC_SYNCHRONIZE, d->ops->synchronize(d->ctx)); }
static inline int gml_dev_stream_wait(gml_device *d, gml_stream s, gml_event ev)
{ GML_DEV_CALL(d, GMLAKE_DC_STREAM_WAIT, d->ops->stream_wait(d->ctx, s, ev)); }
/* Whether this thread may create and record an event for s now: a per-thread default stream only
 * on its own thread (elsewhere CU_STREAM_PER_THREAD names another stream), and what the
 * implementation adds (cuda: a legacy stream only while its context is current).  Not counted. */
static inline bool gml_dev_stream_here(gml_device *d, gml_stream s)
{
    if (gml_stream_is_ptds(s) && ((s & ~GML_STREAM_TAGS) >> 6) != gml_thread_id())
        return false;
    return !d->ops->stream_here || d->ops->stream_here(d->ctx, s);
}
/* Whether synchronize() waits for stream s's work: false for a stream of another device (asked
 * once per stream, when its bin is made).  Not counted. */
static inline bool gml_dev_stream_local(gml_device *d, gml_stream s)
{
    return s == GML_STREAM_NONE || !d->ops->stream_local || d->ops->stream_local(d->ctx, s);
}
/* The context an event created now is made in (0 where the device has one context).  Not
 * counted: asked once per event created. */
static inline uintptr_t gml_dev_current_context(gml_device *d)
{
    return d->ops->current_context ? d->ops->current_context(d->ctx) : 0;
}
/* granularity and mem_info are queries of fixed facts and are not counted. */
static inline size_t gml_dev_granularity(gml_device *d) { return d->ops->granularity(d->ctx); }
static inline int gml_dev_mem_info(gml_device *d, size_t *free_bytes, size_t *total_bytes)
{ return d->ops->mem_info(d->ctx, free_bytes, total_bytes); }

/* IPC export and import (contract in the ops table): not counted among the device calls (rare,
 * and not part of any allocation); GMLAKE_ERR_DEVICE where the implementation has none. */
static inline int gml_dev_handle_export(gml_device *d, gml_handle h, int *fd)
{ return d->ops->handle_export ? d->ops->handle_export(d->ctx, h, fd) : GMLAKE_ERR_DEVICE; }
static inline int gml_dev_handle_import(gml_device *d, int fd, size_t size, gml_handle *out)
{ return d->ops->handle_import ? d->ops->handle_import(d->ctx, fd, size, out) : GMLAKE_ERR_DEVICE; }
static inline bool gml_dev_can_export(gml_device *d)
{ return d->ops->can_export && d->ops->can_export(d->ctx); }

/* ---- sim: host-memory device (device_sim.c) ---- */
typedef struct gml_sim_config {
    size_t capacity;    /* physical bytes the device has */
    size_t granularity; /* allocation granularity (2 MiB if 0) */
    bool backed;        /* false: no host memory behind chunks, fake addresses (replay mode) */
} gml_sim_config;

/* NULL on bad config (capacity not a positive multiple of granularity) or host failure. */
gml_device *gml_sim_create(const gml_sim_config *cfg);
/* Work: gml_sim_launch submits one unit of work to a stream (by key); it completes at
 * gml_sim_finish of that stream, gml_sim_complete_events, a wait for an event recorded after it,
 * or synchronize.  An event captures its stream's work submitted so far.
 * Manual events: besides, a recorded event completes only at gml_sim_complete_events /
 * event_sync / synchronize.  Off by default (an event on a stream with no pending work has
 * completed at once). */
int gml_sim_launch(gml_device *dev, gml_stream stream);
void gml_sim_finish(gml_device *dev, gml_stream stream);
/* Completes `stream`'s work up to its unit `unit` (the value gml_sim_submitted had after that
 * unit's launch), and the work it waited for; later units stay pending. */
void gml_sim_finish_to(gml_device *dev, gml_stream stream, uint64_t unit);
void gml_sim_set_manual_events(gml_device *dev, bool manual);
void gml_sim_complete_events(gml_device *dev);
/* Tests' ordering oracle.  gml_sim_backing: the physical byte behind mapped address va (its offset
 * in the device's memory), false if va is not mapped.  gml_sim_submitted: the units of work
 * submitted to `stream` so far.  gml_sim_ordered: whether unit `unit` of stream `s` has completed
 * or, unless `now`, will have completed before the next work of stream `next` runs (through the
 * GPU-side waits next made, directly or through other streams'). */
bool gml_sim_backing(gml_device *dev, uintptr_t va, uintptr_t *phys);
uint64_t gml_sim_submitted(gml_device *dev, gml_stream stream);
bool gml_sim_ordered(gml_device *dev, gml_stream s, uint64_t unit, gml_stream next, bool now);
/* Physical bytes held by chunks not yet freed, and live chunk / mapping / reservation counts. */
size_t gml_sim_bytes_in_use(gml_device *dev);
size_t gml_sim_mapping_count(gml_device *dev);
size_t gml_sim_reservation_count(gml_device *dev);
/* Estimated driver seconds of the successful calls so far (core/cost.h charges each one); 0 for a
 * device that is not a sim. */
double gml_sim_device_seconds(gml_device *dev);
/* Make the n-th next call of `kind` (1 = the next one) fail with GMLAKE_ERR_DEVICE. */
void gml_sim_fail_call(gml_device *dev, int kind, int nth);
/* Tests: fn(arg) runs at the start of every chunk_create, map, unmap or set_access call of `kind`,
 * outside the device's lock, so that it may hold that driver call in flight; fn NULL: none. */
void gml_sim_hook_call(gml_device *dev, int kind, void (*fn)(void *), void *arg);

/* ---- cuda: the real driver (device_cuda.c) ---- */
/* Looks a driver symbol up; the interposer passes one that reaches the real libcuda. */
typedef void *(*gml_sym_resolver)(const char *name);
/* NULL when the driver or a needed function is missing; *err (if not NULL) says why. */
gml_device *gml_cuda_device_create(int ordinal, gml_sym_resolver resolve, const char **err);
/* Device `accessor` may read and write dev's memory from now on (peer access): every present and
 * future mapping of dev grants it.  GMLAKE_ERR_INVALID for a device that is not a cuda device or
 * a bad ordinal; GMLAKE_ERR_DEVICE if the driver refused it for a mapping (the grant stays recorded
 * and reaches every other mapping). */
int gml_cuda_device_grant(gml_device *dev, int accessor);
/* The CUresult of the calling thread's last failed driver call made by a cuda device (0: none). */
int gml_cuda_last_error(void);
/* Fork handlers: takes (hold) or releases every lock of every cuda device (its mappings and peer
 * grants, its primary context), so that no thread that does not exist in a forked child holds
 * one there.  Hold with no device lock held; release in the parent and in the child. */
void gml_cuda_fork_hold(bool hold);

#endif /* GML_DEVICE_H */
