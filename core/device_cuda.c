/*
 * device_cuda.c — the device ops over the CUDA driver API.  No link-time libcuda: every function
 * is looked up through the resolver the caller gives (the interposer's reaches the real libcuda,
 * past its own hooks).  The pool's calls run in the caller's current context; the device records
 * the ordinal it was created for; a synchronisation waits for the current context if it is on the
 * ordinal and for the ordinal's primary context (pushed for the call), so that the streams it
 * counts as local (those of the primary context: cu_stream_local) are waited for whichever
 * context is current; another context's streams pass only by their own events.
 * Stream keys (device.h) become CU_STREAM_PER_THREAD / CU_STREAM_LEGACY: a per-thread default
 * stream is named only on its own thread and device, a legacy stream only in its context.
 *
 * Chunks: cuMemCreate of pinned device memory on this ordinal; access is read/write for this
 * device and for the peers granted with gml_cuda_device_grant (peer access): the device keeps the
 * list of its mappings (under its lock, never held across a map or an unmap) so that a grant
 * reaches memory mapped before it, and a grant walks the whole list whatever one mapping refuses.
 * Maps and unmaps run on several threads without the pool lock, while a grant may run: the list
 * holds only mapped ranges.  A map joins it once mapped (a grant before that is covered by the
 * set_access that follows every map, which reads the grants under the lock); an unmap takes its
 * mappings out before unmapping (the driver refuses access on a range that is not mapped) and, if
 * the unmap fails, puts them back with the access of any grant made meanwhile.  Events are
 * created with CU_EVENT_DISABLE_TIMING (cheaper to record and query).
 *
 * Graph capture: the pool's own driver calls (memory management, the memory query and events;
 * not synchronize, which stands for the program's cudaFree) run in relaxed capture mode, so that another thread's capture
 * (global mode) is neither refused nor invalidated by them, and no event is recorded (nor a
 * stream_wait made) on a stream that is capturing (it would become a node of that graph) or on the legacy stream while a
 * blocking stream captures: such a record fails, and the pool keeps the stream's blocks to it.
 */
#include <cuda.h>
#include <pthread.h>
#include <stdlib.h>
#include <uthash.h>

#include "device.h"

/* The driver functions, named for what they do (a field never shares a name with a CUDA symbol,
 * which the interposer's hooks carry). */
typedef struct cuda_fns {
    CUresult (*mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                            unsigned long long);
    CUresult (*mem_release)(CUmemGenericAllocationHandle);
    CUresult (*mem_address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*mem_address_free)(CUdeviceptr, size_t);
    CUresult (*mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                         unsigned long long);
    CUresult (*mem_unmap)(CUdeviceptr, size_t);
    CUresult (*mem_set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*mem_get_allocation_granularity)(size_t *, const CUmemAllocationProp *,
                                              CUmemAllocationGranularity_flags);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_destroy)(CUevent);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_query)(CUevent);
    CUresult (*event_synchronize)(CUevent);
    CUresult (*stream_wait_event)(CUstream, CUevent, unsigned int); /* optional */
    CUresult (*ctx_synchronize)(void);
    CUresult (*mem_get_info)(size_t *, size_t *);
    CUresult (*ctx_get_current)(CUcontext *);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*device_primary_ctx_retain)(CUcontext *, CUdevice);
    CUresult (*ctx_get_device)(CUdevice *);
    CUresult (*ctx_push_current)(CUcontext);
    CUresult (*ctx_pop_current)(CUcontext *);
    /* optional (NULL if the driver lacks them) */
    CUresult (*thread_exchange_stream_capture_mode)(CUstreamCaptureMode *);
    CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus *);
    CUresult (*stream_get_ctx)(CUstream, CUcontext *);
    CUresult (*primary_ctx_get_state)(CUdevice, unsigned int *, int *);
    CUresult (*primary_ctx_release)(CUdevice);
    CUresult (*mem_export_to_shareable_handle)(void *, CUmemGenericAllocationHandle,
                                               CUmemAllocationHandleType, unsigned long long);
    CUresult (*mem_import_from_shareable_handle)(CUmemGenericAllocationHandle *, void *,
                                                 CUmemAllocationHandleType);
    CUresult (*device_get_attribute)(int *, CUdevice_attribute, CUdevice);
} cuda_fns;

typedef struct mapping {
    uintptr_t va;
    size_t size;
    struct mapping *next_out; /* in the list an unmap took out of maps (cu_unmap) */
    UT_hash_handle hh;
} mapping;

typedef struct cuda_dev {
    cuda_fns drv;
    int ordinal;
    size_t granularity;
    CUmemAllocationProp prop;
    CUcontext primary;           /* retained once (primary_ctx), read without a lock */
    pthread_mutex_t primary_mu;  /* the one retain */
    pthread_mutex_t mu; /* peers and maps */
    uint64_t peers;     /* bit i: device i may access this device's memory */
    mapping *maps;      /* every live mapping, by address */
    struct cuda_dev *next, **prev; /* in the list of live devices (devs, under devs_mu) */
} cuda_dev;

/* Every live cuda device, for gml_cuda_fork_hold.  devs_mu is taken with no device lock held. */
static cuda_dev *devs;
static pthread_mutex_t devs_mu = PTHREAD_MUTEX_INITIALIZER;

/* The lock order, which every thread follows: devs_mu, then per device (in list order) mu, then
 * primary_mu (a grant holds mu across ensure_ctx).  The list stays held until release. */
void gml_cuda_fork_hold(bool hold)
{
    if (hold) {
        pthread_mutex_lock(&devs_mu);
        for (cuda_dev *d = devs; d; d = d->next) {
            pthread_mutex_lock(&d->mu);
            pthread_mutex_lock(&d->primary_mu);
        }
        return;
    }
    for (cuda_dev *d = devs; d; d = d->next) {
        pthread_mutex_unlock(&d->primary_mu);
        pthread_mutex_unlock(&d->mu);
    }
    pthread_mutex_unlock(&devs_mu);
}

/* The pool's driver calls need a current context; a thread that made none current gets the
 * device's primary context (the one the runtime uses). */
/* The device's primary context, retained once for the device's life: threads get here without
 * the pool lock (the pool synchronises outside it, cu_synchronize). */
static CUresult primary_ctx(cuda_dev *d, CUcontext *out)
{
    CUresult r = CUDA_SUCCESS;
    CUcontext c = __atomic_load_n(&d->primary, __ATOMIC_ACQUIRE);
    if (!c) {
        pthread_mutex_lock(&d->primary_mu);
        c = __atomic_load_n(&d->primary, __ATOMIC_ACQUIRE);
        if (!c && (r = d->drv.device_primary_ctx_retain(&c, d->ordinal)) == CUDA_SUCCESS)
            __atomic_store_n(&d->primary, c, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&d->primary_mu);
    }
    *out = c;
    return r;
}

static void ensure_ctx(cuda_dev *d)
{
    CUcontext c = NULL;
    if (d->drv.ctx_get_current(&c) == CUDA_SUCCESS && c)
        return;
    if (primary_ctx(d, &c) == CUDA_SUCCESS)
        d->drv.ctx_set_current(c);
}

static GML_TLS CUresult last_error;

int gml_cuda_last_error(void) { return (int)last_error; }

static int st(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return GMLAKE_OK;
    last_error = r;
    if (r == CUDA_ERROR_OUT_OF_MEMORY)
        return GMLAKE_ERR_NOMEM;
    if (r == CUDA_ERROR_NOT_READY)
        return GMLAKE_ERR_BUSY;
    return GMLAKE_ERR_DEVICE;
}

/* The pool's own driver calls run in relaxed capture mode (see the top of the file). */
static CUstreamCaptureMode relax(cuda_dev *d)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (d->drv.thread_exchange_stream_capture_mode)
        d->drv.thread_exchange_stream_capture_mode(&m);
    return m;
}

static void restore(cuda_dev *d, CUstreamCaptureMode m)
{
    if (d->drv.thread_exchange_stream_capture_mode)
        d->drv.thread_exchange_stream_capture_mode(&m);
}

/* The CUresult of `call`, made in relaxed capture mode. */
#define RELAXED(d, call)                                                                          \
    ({                                                                                            \
        CUstreamCaptureMode m_ = relax(d);                                                        \
        CUresult r_ = (call);                                                                     \
        restore(d, m_);                                                                           \
        r_;                                                                                       \
    })

static int cu_chunk_create(void *ctx, size_t size, gml_handle *out)
{
    cuda_dev *d = ctx;
    ensure_ctx(d);
    CUmemGenericAllocationHandle h;
    int rc = st(RELAXED(d, d->drv.mem_create(&h, size, &d->prop, 0)));
    if (rc == GMLAKE_OK)
        *out = (gml_handle)h;
    return rc;
}

static int cu_chunk_release(void *ctx, gml_handle h)
{
    cuda_dev *d = ctx;
    return st(RELAXED(d, d->drv.mem_release((CUmemGenericAllocationHandle)h)));
}

static int cu_va_reserve(void *ctx, size_t size, size_t align, uintptr_t *out)
{
    cuda_dev *d = ctx;
    CUdeviceptr p;
    ensure_ctx(d);
    int rc = st(RELAXED(d, d->drv.mem_address_reserve(&p, size, align, 0, 0)));
    if (rc == GMLAKE_OK)
        *out = (uintptr_t)p;
    return rc == GMLAKE_ERR_NOMEM ? GMLAKE_ERR_DEVICE : rc;
}

static int cu_va_free(void *ctx, uintptr_t va, size_t size)
{
    cuda_dev *d = ctx;
    return st(RELAXED(d, d->drv.mem_address_free((CUdeviceptr)va, size)));
}

static int cu_map(void *ctx, uintptr_t va, size_t size, gml_handle h)
{
    cuda_dev *d = ctx;
    mapping *m = malloc(sizeof *m);
    if (!m)
        return GMLAKE_ERR_DEVICE;
    int rc = st(RELAXED(d, d->drv.mem_map((CUdeviceptr)va, size, 0, (CUmemGenericAllocationHandle)h, 0)));
    if (rc != GMLAKE_OK) {
        free(m);
        return rc == GMLAKE_ERR_NOMEM ? GMLAKE_ERR_DEVICE : rc;
    }
    *m = (mapping){.va = va, .size = size};
    pthread_mutex_lock(&d->mu);
    HASH_ADD(hh, d->maps, va, sizeof m->va, m);
    pthread_mutex_unlock(&d->mu);
    return GMLAKE_OK;
}

/* Read/write access over [va, va+size) for the device and its peers; d->mu held. */
static int access_locked(cuda_dev *d, uintptr_t va, size_t size)
{
    CUmemAccessDesc a[64];
    size_t n = 0;
    a[n++] = (CUmemAccessDesc){.location = d->prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int i = 0; i < 64; i++)
        if ((d->peers >> i & 1) && i != d->ordinal)
            a[n++] = (CUmemAccessDesc){.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = i},
                                       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    int rc = st(RELAXED(d, d->drv.mem_set_access((CUdeviceptr)va, size, a, n)));
    return rc == GMLAKE_ERR_NOMEM ? GMLAKE_ERR_DEVICE : rc;
}

/* Puts back the records cu_unmap took out (its unmap failed: the range is still mapped), with the
 * access of a grant made meanwhile (`peers`: the grants when they were taken out). */
static void maps_put_back(cuda_dev *d, mapping *back, uint64_t peers)
{
    CUresult failed = last_error; /* the unmap's error stays the one reported */
    ensure_ctx(d);
    pthread_mutex_lock(&d->mu);
    for (mapping *m = back, *next; m; m = next) {
        next = m->next_out;
        HASH_ADD(hh, d->maps, va, sizeof m->va, m);
        if (d->peers != peers)
            access_locked(d, m->va, m->size);
    }
    pthread_mutex_unlock(&d->mu);
    last_error = failed;
}

static int cu_unmap(void *ctx, uintptr_t va, size_t size)
{
    cuda_dev *d = ctx;
    /* The records leave the list before the range is unmapped: a grant made meanwhile must not
     * set access on it (the driver refuses a range that is not mapped). */
    mapping *out = NULL, **tail = &out;
    pthread_mutex_lock(&d->mu);
    uint64_t peers = d->peers;
    for (uintptr_t at = va; at < va + size;) { /* whole mappings, one after the other */
        mapping *m;
        HASH_FIND(hh, d->maps, &at, sizeof at, m);
        if (!m)
            break;
        at += m->size;
        HASH_DEL(d->maps, m);
        m->next_out = NULL;
        *tail = m;
        tail = &m->next_out;
    }
    pthread_mutex_unlock(&d->mu);
    int rc = st(RELAXED(d, d->drv.mem_unmap((CUdeviceptr)va, size)));
    if (rc != GMLAKE_OK) {
        maps_put_back(d, out, peers);
        return rc;
    }
    for (mapping *m = out, *next; m; m = next) {
        next = m->next_out;
        free(m);
    }
    return GMLAKE_OK;
}

static int cu_set_access(void *ctx, uintptr_t va, size_t size)
{
    cuda_dev *d = ctx;
    pthread_mutex_lock(&d->mu);
    int rc = access_locked(d, va, size);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

static const gml_device_ops cuda_ops;

int gml_cuda_device_grant(gml_device *dev, int accessor)
{
    if (dev->ops != &cuda_ops || accessor < 0 || accessor >= 64)
        return GMLAKE_ERR_INVALID;
    cuda_dev *d = dev->ctx;
    int rc = GMLAKE_OK;
    pthread_mutex_lock(&d->mu);
    if (!(d->peers >> accessor & 1) && accessor != d->ordinal) {
        d->peers |= (uint64_t)1 << accessor;
        ensure_ctx(d);
        for (mapping *m = d->maps; m; m = m->hh.next) { /* all of them, whatever one refuses */
            int r = access_locked(d, m->va, m->size);
            if (rc == GMLAKE_OK)
                rc = r;
        }
    }
    pthread_mutex_unlock(&d->mu);
    return rc;
}


static int cu_event_create(void *ctx, gml_event *out)
{
    CUevent e;
    ensure_ctx(ctx);
    int rc = st(((cuda_dev *)ctx)->drv.event_create(&e, CU_EVENT_DISABLE_TIMING));
    if (rc == GMLAKE_OK)
        *out = e;
    return rc == GMLAKE_ERR_NOMEM ? GMLAKE_ERR_DEVICE : rc;
}

static int cu_event_destroy(void *ctx, gml_event ev)
{
    return st(((cuda_dev *)ctx)->drv.event_destroy((CUevent)ev));
}

static CUstream stream_of(gml_stream s)
{
    if (gml_stream_is_ptds(s))
        return CU_STREAM_PER_THREAD;
    if (gml_stream_is_legacy(s))
        return CU_STREAM_LEGACY;
    return (CUstream)s;
}

static bool cu_stream_here(void *ctx, gml_stream s)
{
    cuda_dev *d = ctx;
    CUcontext c = NULL;
    CUdevice dev = -1;
    if (gml_stream_is_ptds(s))
        return d->drv.ctx_get_device(&dev) == CUDA_SUCCESS && dev == (CUdevice)(s & 63);
    if (gml_stream_is_legacy(s))
        return d->drv.ctx_get_current(&c) == CUDA_SUCCESS && (uintptr_t)c == (s & ~GML_STREAM_TAGS);
    return true;
}

static uintptr_t cu_current_context(void *ctx)
{
    CUcontext c = NULL;
    return ((cuda_dev *)ctx)->drv.ctx_get_current(&c) == CUDA_SUCCESS ? (uintptr_t)c : 0;
}

/* The device of context c (pushed for the query), -1 if not known. */
static int ctx_device(cuda_dev *d, CUcontext c)
{
    CUdevice dev = -1;
    CUcontext popped;
    if (!c || d->drv.ctx_push_current(c) != CUDA_SUCCESS)
        return -1;
    if (d->drv.ctx_get_device(&dev) != CUDA_SUCCESS)
        dev = -1;
    d->drv.ctx_pop_current(&popped);
    return (int)dev;
}

/* The device's primary context in *p if it is in use, referenced until let_primary_go (*temp: a
 * reference of the caller's, where gmlake holds none for good: the program's last release must
 * still end it); false when it is not in use (an inactive one is not made) or cannot be had. */
static bool hold_primary(cuda_dev *d, CUcontext *p, bool *temp)
{
    *temp = false;
    *p = __atomic_load_n(&d->primary, __ATOMIC_ACQUIRE);
    if (*p)
        return true;
    unsigned flags = 0;
    int active = 0;
    if (!d->drv.primary_ctx_get_state || !d->drv.primary_ctx_release ||
        d->drv.primary_ctx_get_state((CUdevice)d->ordinal, &flags, &active) != CUDA_SUCCESS || !active ||
        d->drv.device_primary_ctx_retain(p, (CUdevice)d->ordinal) != CUDA_SUCCESS)
        return false;
    *temp = true;
    return true;
}

static void let_primary_go(cuda_dev *d, bool temp)
{
    if (temp)
        d->drv.primary_ctx_release((CUdevice)d->ordinal);
}

/* Whether context c is the device's primary context (not known: no). */
static bool is_primary(cuda_dev *d, CUcontext c)
{
    CUcontext p;
    bool temp, is = hold_primary(d, &p, &temp) && c == p;
    let_primary_go(d, temp);
    return is;
}

/* Whether synchronize() waits for stream s: a per-thread stream is on the device its key names (in
 * its primary context, the runtime's); a legacy stream is its context's, a created stream its
 * context's (cuStreamGetCtx): only one of this device's primary context is waited for by every
 * synchronisation.  A stream of another context of this device is not: a synchronisation from a
 * thread whose current context is the primary one leaves its work running (session 31: its frees
 * served cudaMalloc after a cudaFree in the primary context while that work ran), so, as a stream
 * of another device, it passes only by its own event.  Not known: this device's. */
static bool cu_stream_local(void *ctx, gml_stream s)
{
    cuda_dev *d = ctx;
    CUcontext c = NULL;
    if (gml_stream_is_ptds(s))
        return (int)(s & 63) == d->ordinal;
    if (gml_stream_is_legacy(s))
        c = (CUcontext)(s & ~GML_STREAM_TAGS);
    else if (!d->drv.stream_get_ctx || d->drv.stream_get_ctx((CUstream)s, &c) != CUDA_SUCCESS)
        return true;
    int dev = ctx_device(d, c);
    return dev < 0 || (dev == d->ordinal && is_primary(d, c));
}

/* Whether stream s is not capturing a graph (work gmlake puts on a capturing stream would become a
 * node of that graph); called in relaxed capture mode. */
static bool not_capturing(cuda_dev *d, CUstream s)
{
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    return !d->drv.stream_is_capturing ||
           (d->drv.stream_is_capturing(s, &cs) == CUDA_SUCCESS && cs == CU_STREAM_CAPTURE_STATUS_NONE);
}

static int cu_event_record(void *ctx, gml_event ev, gml_stream s)
{
    cuda_dev *d = ctx;
    CUstream cu_s = stream_of(s);
    CUstreamCaptureMode m = relax(d);
    int rc = not_capturing(d, cu_s) ? st(d->drv.event_record((CUevent)ev, cu_s)) : GMLAKE_ERR_DEVICE;
    restore(d, m);
    return rc;
}

static int cu_stream_wait(void *ctx, gml_stream s, gml_event ev)
{
    cuda_dev *d = ctx;
    if (!d->drv.stream_wait_event)
        return GMLAKE_ERR_DEVICE; /* the pool then waits for the event to complete, or grows */
    CUstream cu_s = stream_of(s);
    CUstreamCaptureMode m = relax(d);
    int rc = not_capturing(d, cu_s) ? st(d->drv.stream_wait_event(cu_s, (CUevent)ev, 0)) : GMLAKE_ERR_DEVICE;
    restore(d, m);
    return rc;
}

static int cu_event_query(void *ctx, gml_event ev)
{
    cuda_dev *d = ctx;
    return st(RELAXED(d, d->drv.event_query((CUevent)ev)));
}

static int cu_event_sync(void *ctx, gml_event ev)
{
    cuda_dev *d = ctx;
    return st(RELAXED(d, d->drv.event_synchronize((CUevent)ev)));
}

/* The current context if it is on the ordinal (a cudaFree there waits for its work), and the
 * primary context, whose streams are the ones the pool counts as passed after it (cu_stream_local). */
static int cu_synchronize(void *ctx)
{
    cuda_dev *d = ctx;
    CUdevice cur = -1;
    CUcontext here = NULL, primary;
    bool temp = false;
    int rc;
    ensure_ctx(d);
    if (d->drv.ctx_get_device(&cur) == CUDA_SUCCESS && cur == d->ordinal) {
        rc = st(d->drv.ctx_synchronize());
        if (rc != GMLAKE_OK || (d->drv.ctx_get_current(&here) == CUDA_SUCCESS && is_primary(d, here)) ||
            !hold_primary(d, &primary, &temp))
            return rc;
    } else if ((rc = st(primary_ctx(d, &primary))) != GMLAKE_OK) {
        return rc;
    }
    rc = st(d->drv.ctx_push_current(primary));
    if (rc == GMLAKE_OK) {
        rc = st(d->drv.ctx_synchronize());
        CUcontext popped;
        d->drv.ctx_pop_current(&popped);
    }
    let_primary_go(d, temp);
    return rc;
}

static size_t cu_granularity(void *ctx) { return ((cuda_dev *)ctx)->granularity; }

static int cu_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    ensure_ctx(ctx);
    cuda_dev *d = ctx;
    return st(RELAXED(d, d->drv.mem_get_info(free_bytes, total_bytes)));
}

static void cu_destroy(void *ctx)
{
    cuda_dev *d = ctx;
    pthread_mutex_lock(&devs_mu);
    if (d->prev) {
        *d->prev = d->next;
        if (d->next)
            d->next->prev = d->prev;
    }
    pthread_mutex_unlock(&devs_mu);
    mapping *m, *tmp;
    HASH_ITER(hh, d->maps, m, tmp) {
        HASH_DEL(d->maps, m);
        free(m);
    }
    pthread_mutex_destroy(&d->mu);
    pthread_mutex_destroy(&d->primary_mu);
    free(d);
}

/* IPC: chunks are created exportable as POSIX file descriptors where the device supports it
 * (checked once, at creation: prop.requestedHandleTypes); an imported chunk is a handle of the
 * exporter's memory, which this device maps like its own. */
static bool cu_can_export(void *ctx)
{
    cuda_dev *d = ctx;
    return d->drv.mem_export_to_shareable_handle &&
           d->prop.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
}

static int cu_handle_export(void *ctx, gml_handle h, int *fd)
{
    cuda_dev *d = ctx;
    if (!cu_can_export(ctx))
        return GMLAKE_ERR_DEVICE;
    int out = -1;
    int rc = st(d->drv.mem_export_to_shareable_handle(&out, (CUmemGenericAllocationHandle)h,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (rc == GMLAKE_OK)
        *fd = out;
    return rc;
}

static int cu_handle_import(void *ctx, int fd, size_t size, gml_handle *out)
{
    cuda_dev *d = ctx;
    (void)size; /* the descriptor carries its size */
    if (!d->drv.mem_import_from_shareable_handle)
        return GMLAKE_ERR_DEVICE;
    CUmemGenericAllocationHandle h;
    ensure_ctx(d);
    int rc = st(d->drv.mem_import_from_shareable_handle(&h, (void *)(uintptr_t)fd,
                                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    if (rc == GMLAKE_OK)
        *out = (gml_handle)h;
    return rc;
}

static const gml_device_ops cuda_ops = {
    .name = "cuda",
    .chunk_create = cu_chunk_create,
    .chunk_release = cu_chunk_release,
    .va_reserve = cu_va_reserve,
    .va_free = cu_va_free,
    .map = cu_map,
    .unmap = cu_unmap,
    .set_access = cu_set_access,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .synchronize = cu_synchronize,
    .stream_wait = cu_stream_wait,
    .stream_here = cu_stream_here,
    .stream_local = cu_stream_local,
    .current_context = cu_current_context,
    .granularity = cu_granularity,
    .mem_info = cu_mem_info,
    .handle_export = cu_handle_export,
    .can_export = cu_can_export,
    .handle_import = cu_handle_import,
    .destroy = cu_destroy,
};

#define RESOLVE(field, symbol)                                                                    \
    do {                                                                                          \
        *(void **)&d->drv.field = resolve(#symbol);                                               \
        if (!d->drv.field) {                                                                      \
            if (err)                                                                              \
                *err = "the CUDA driver lacks " #symbol;                                          \
            free(d);                                                                              \
            return NULL;                                                                          \
        }                                                                                         \
    } while (0)

gml_device *gml_cuda_device_create(int ordinal, gml_sym_resolver resolve, const char **err)
{
    cuda_dev *d = calloc(1, sizeof *d);
    if (!d) {
        if (err)
            *err = "out of host memory";
        return NULL;
    }
    RESOLVE(mem_create, cuMemCreate);
    RESOLVE(mem_release, cuMemRelease);
    RESOLVE(mem_address_reserve, cuMemAddressReserve);
    RESOLVE(mem_address_free, cuMemAddressFree);
    RESOLVE(mem_map, cuMemMap);
    RESOLVE(mem_unmap, cuMemUnmap);
    RESOLVE(mem_set_access, cuMemSetAccess);
    RESOLVE(mem_get_allocation_granularity, cuMemGetAllocationGranularity);
    RESOLVE(event_create, cuEventCreate);
    RESOLVE(event_destroy, cuEventDestroy_v2);
    RESOLVE(event_record, cuEventRecord);
    RESOLVE(event_query, cuEventQuery);
    RESOLVE(event_synchronize, cuEventSynchronize);
    RESOLVE(ctx_synchronize, cuCtxSynchronize);
    RESOLVE(mem_get_info, cuMemGetInfo_v2);
    RESOLVE(ctx_get_current, cuCtxGetCurrent);
    RESOLVE(ctx_set_current, cuCtxSetCurrent);
    RESOLVE(device_primary_ctx_retain, cuDevicePrimaryCtxRetain);
    RESOLVE(ctx_get_device, cuCtxGetDevice);
    RESOLVE(ctx_push_current, cuCtxPushCurrent_v2);
    RESOLVE(ctx_pop_current, cuCtxPopCurrent_v2);
    *(void **)&d->drv.thread_exchange_stream_capture_mode = resolve("cuThreadExchangeStreamCaptureMode");
    *(void **)&d->drv.stream_is_capturing = resolve("cuStreamIsCapturing");
    *(void **)&d->drv.stream_get_ctx = resolve("cuStreamGetCtx");
    *(void **)&d->drv.primary_ctx_get_state = resolve("cuDevicePrimaryCtxGetState");
    *(void **)&d->drv.primary_ctx_release = resolve("cuDevicePrimaryCtxRelease_v2");
    *(void **)&d->drv.stream_wait_event = resolve("cuStreamWaitEvent");
    *(void **)&d->drv.mem_export_to_shareable_handle = resolve("cuMemExportToShareableHandle");
    *(void **)&d->drv.mem_import_from_shareable_handle = resolve("cuMemImportFromShareableHandle");
    *(void **)&d->drv.device_get_attribute = resolve("cuDeviceGetAttribute");
    pthread_mutex_init(&d->mu, NULL);
    pthread_mutex_init(&d->primary_mu, NULL);
    d->ordinal = ordinal;
    d->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    d->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d->prop.location.id = ordinal;
    ensure_ctx(d);
    int fd_ok = 0; /* exportable chunks (IPC) where the device can share them as descriptors */
    if (d->drv.device_get_attribute && d->drv.mem_export_to_shareable_handle &&
        d->drv.device_get_attribute(&fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                    ordinal) == CUDA_SUCCESS && fd_ok)
        d->prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    if (d->drv.mem_get_allocation_granularity(&d->granularity, &d->prop,
                                             CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
        d->granularity == 0) {
        if (err)
            *err = "cuMemGetAllocationGranularity failed (does the device support virtual memory management?)";
        free(d);
        return NULL;
    }
    gml_device *dev = gml_device_new(&cuda_ops, d, ordinal);
    if (!dev) {
        free(d);
        if (err)
            *err = "out of host memory";
        return NULL;
    }
    pthread_mutex_lock(&devs_mu);
    d->next = devs;
    d->prev = &devs;
    if (devs)
        devs->prev = &d->next;
    devs = d;
    pthread_mutex_unlock(&devs_mu);
    return dev;
}
