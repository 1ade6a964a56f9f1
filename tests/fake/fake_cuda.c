/* fake_cuda.c — a fake libcuda.so.1 for the interposer tests (see fake_cuda.h).  Virtual memory
 * management goes to a backed sim device of 256 MiB; cuMemAlloc and friends (what gmlake passes
 * through) are plain host allocations remembered in a small table.  Two devices with a primary
 * context each, per-range access rights, per-device memory pools, stream capture with CUDA's
 * capture-mode rules, a sticky fault, and a count of routing calls made from inside the runtime. */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "core/device.h"
#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))

static fake_counts counts;
#define COUNT(field) __atomic_fetch_add(&counts.field, 1, __ATOMIC_RELAXED)
static gml_device *sim;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t own[4096];

EXPORT fake_counts *fake_cuda_counts(void) { return &counts; }

static gml_device *dev(void)
{
    pthread_mutex_lock(&mu);
    if (!sim) {
        gml_sim_config c = {.capacity = (size_t)256 << 20, .backed = true};
        sim = gml_sim_create(&c);
    }
    pthread_mutex_unlock(&mu);
    return sim;
}

static CUresult res(int rc)
{
    return rc == GMLAKE_OK ? CUDA_SUCCESS : rc == GMLAKE_ERR_NOMEM ? CUDA_ERROR_OUT_OF_MEMORY
                                          : rc == GMLAKE_ERR_BUSY ? CUDA_ERROR_NOT_READY
                                                                  : CUDA_ERROR_INVALID_VALUE;
}

EXPORT int fake_cuda_owns(uintptr_t p)
{
    pthread_mutex_lock(&mu);
    int found = 0;
    for (int i = 0; i < 4096 && !found; i++)
        found = own[i] == p;
    pthread_mutex_unlock(&mu);
    return found;
}

static CUresult host_alloc(CUdeviceptr *d, size_t n)
{
    void *p = NULL;
    if (n > ((size_t)64 << 20) || posix_memalign(&p, 512, n ? n : 1))
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 4096; i++)
        if (!own[i]) {
            own[i] = (uintptr_t)p;
            break;
        }
    pthread_mutex_unlock(&mu);
    *d = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

static CUresult host_free(CUdeviceptr d)
{
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < 4096 && own[i] != (uintptr_t)d)
        i++;
    if (i < 4096)
        own[i] = 0;
    pthread_mutex_unlock(&mu);
    if (i == 4096)
        return CUDA_ERROR_INVALID_VALUE;
    free((void *)d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) { COUNT(mem_alloc); return host_alloc(d, n); }
EXPORT CUresult cuMemFree_v2(CUdeviceptr d) { COUNT(mem_free); return host_free(d); }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) { COUNT(mem_alloc_async); return host_alloc(d, n); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) { COUNT(mem_free_async); return host_free(d); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) { COUNT(mem_alloc_async); return host_alloc(d, n); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { COUNT(mem_free_async); return host_free(d); }
/* internal calls go to the fake's own code, as inside the real driver */
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s) { COUNT(mem_alloc_async); return host_alloc(d, n); }
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s) { COUNT(mem_alloc_async); return host_alloc(d, n); }
EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { return res(gml_dev_mem_info(dev(), f, t)); }
static void drop_access(uintptr_t p, size_t n);

/* ---- routing calls from inside the runtime ----
 * The fake runtime marks its entry points (fake_runtime_enter/leave); the driver calls gmlake
 * makes to route a call (device, capture status, default pool) are counted in `reentered` when
 * they happen inside one: a pass-through runtime call whose driver calls gmlake routes again. */
static __thread int in_runtime;
EXPORT void fake_runtime_enter(void) { in_runtime++; }
EXPORT void fake_runtime_leave(void) { in_runtime--; }
static void routing_call(void)
{
    if (in_runtime)
        COUNT(reentered);
}

/* ---- devices and contexts: context FAKE_DEVICES..1 is device 0..; no current context means
 * device 0's primary context (as the runtime makes it current on first use) ---- */
static __thread CUcontext current;
static __thread CUcontext stack[8];
static __thread int depth;
static CUcontext ctx_of(int d) { return (CUcontext)(uintptr_t)(d + 1); }
static int dev_of(CUcontext c) { return c ? (int)(uintptr_t)c - 1 : 0; }
EXPORT int fake_current_device(void) { return dev_of(current); }
EXPORT void fake_set_device(int d) { current = ctx_of(d); }
EXPORT CUresult cuCtxGetDevice(CUdevice *d) { routing_call(); *d = dev_of(current); return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int *n) { *n = FAKE_DEVICES; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { *c = current; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c) { current = c; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    if (depth == 8)
        return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = current;
    current = c;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
    if (depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (c)
        *c = current;
    current = stack[--depth];
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    *c = ctx_of(d);
    return CUDA_SUCCESS;
}
static _Atomic uint64_t peer_enabled[FAKE_DEVICES]; /* bit p: this device may access p's memory */
EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    int me = dev_of(current), p = dev_of(peer);
    if (flags || p < 0 || p >= FAKE_DEVICES || p == me)
        return CUDA_ERROR_INVALID_VALUE;
    if (atomic_fetch_or(&peer_enabled[me], (uint64_t)1 << p) >> p & 1)
        return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    return CUDA_SUCCESS;
}

/* ---- memory pools: device d's default pool is FAKE_DEFAULT_POOL + d ---- */
static _Atomic(CUmemoryPool) cur_pool[FAKE_DEVICES];
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice d)
{
    routing_call();
    return (CUresult)fake_default_pool((void **)p, d);
}
EXPORT int fake_default_pool(void **p, int d)
{
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    *p = (void *)((uintptr_t)FAKE_DEFAULT_POOL + d);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool p)
{
    if (d < 0 || d >= FAKE_DEVICES || !p)
        return CUDA_ERROR_INVALID_VALUE;
    cur_pool[d] = p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *p, CUdevice d)
{
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    *p = cur_pool[d] ? cur_pool[d] : (CUmemoryPool)((uintptr_t)FAKE_DEFAULT_POOL + d);
    return CUDA_SUCCESS;
}

/* ---- a sticky fault: every later synchronisation returns it ---- */
static _Atomic CUresult fault;
EXPORT void fake_cuda_fault(int code) { fault = (CUresult)code; }
EXPORT int fake_cuda_faulted(void) { return (int)fault; }

/* ---- stream capture ----
 * A capture is begun on a stream (CU_STREAM_PER_THREAD: this thread's) in a mode.  A thread whose
 * own mode is not relaxed may not make potentially unsafe calls (event query and sync, context
 * sync) while it has a non-relaxed capture of its own, or, in global mode, while any thread has a
 * global capture: the call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates those
 * captures.  An event recorded on a capturing stream becomes a node of the graph (counted in
 * capture_nodes) and cannot be queried (CUDA_ERROR_CAPTURED_EVENT).  The legacy stream cannot be
 * queried or recorded while a capture is active (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; a record also
 * invalidates the captures).  FAKE_CAPTURING_STREAM always reports an active capture. */
typedef struct capture {
    CUstream s;
    pthread_t thread; /* who began it (and whose per-thread stream it is) */
    CUstreamCaptureMode mode;
    bool active, invalid;
} capture;
static capture caps[8];
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
enum { CAPTURED_MAX = 64 };
static CUevent captured[CAPTURED_MAX];

static capture *find_capture(CUstream s)
{
    for (int i = 0; i < 8; i++)
        if (caps[i].active && caps[i].s == s &&
            (s != CU_STREAM_PER_THREAD || pthread_equal(caps[i].thread, pthread_self())))
            return &caps[i];
    return NULL;
}

static bool any_capture(void)
{
    for (int i = 0; i < 8; i++)
        if (caps[i].active)
            return true;
    return false;
}

static void invalidate_all(void)
{
    for (int i = 0; i < 8; i++)
        if (caps[i].active)
            caps[i].invalid = true;
}

/* CUDA_SUCCESS, or the error of a potentially unsafe call now (and the captures invalidated). */
static CUresult unsafe_call(void)
{
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 8; i++) {
        capture *c = &caps[i];
        if (c->active && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
            (pthread_equal(c->thread, pthread_self()) ||
             (thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL))) {
            c->invalid = true;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS)
        COUNT(capture_violations);
    return r;
}

EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
    if (!s)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    pthread_mutex_lock(&mu);
    CUresult r = CUDA_ERROR_ILLEGAL_STATE;
    for (int i = 0; i < 8 && r != CUDA_SUCCESS; i++)
        if (!caps[i].active) {
            caps[i] = (capture){.s = s, .thread = pthread_self(), .mode = mode, .active = true};
            r = CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    pthread_mutex_lock(&mu);
    capture *c = find_capture(s);
    CUresult r = !c ? CUDA_ERROR_ILLEGAL_STATE : c->invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
    if (c)
        c->active = false;
    pthread_mutex_unlock(&mu);
    *g = r == CUDA_SUCCESS ? (CUgraph)0x6 : NULL;
    return r;
}

EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m)
{
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *m;
    *m = old;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
    routing_call();
    int cs;
    CUresult r = (CUresult)fake_capture_status(s, &cs);
    *st = (CUstreamCaptureStatus)cs;
    return r;
}

EXPORT int fake_capture_status(void *s, int *st)
{
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    if ((void *)s == FAKE_CAPTURING_STREAM) {
        *st = CU_STREAM_CAPTURE_STATUS_ACTIVE;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&mu);
    CUresult r = CUDA_SUCCESS;
    capture *c = s ? find_capture(s) : NULL;
    if (!s && any_capture())
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else if (c)
        *st = c->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuCtxSynchronize(void)
{
    COUNT(ctx_sync);
    CUresult r = unsafe_call();
    if (r == CUDA_SUCCESS && fault)
        r = fault;
    return r != CUDA_SUCCESS ? r : res(gml_dev_synchronize(dev()));
}
EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p, CUmemAllocationGranularity_flags f)
{
    *g = gml_dev_granularity(dev());
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *p, unsigned long long f)
{
    COUNT(vmm_create);
    gml_handle x;
    CUresult r = res(gml_dev_chunk_create(dev(), n, &x));
    if (r == CUDA_SUCCESS)
        *h = (CUmemGenericAllocationHandle)x;
    return r;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) { return res(gml_dev_chunk_release(dev(), h)); }
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t a, CUdeviceptr addr, unsigned long long f)
{
    uintptr_t v;
    CUresult r = res(gml_dev_va_reserve(dev(), n, a, &v));
    if (r == CUDA_SUCCESS)
        *p = (CUdeviceptr)v;
    return r;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t n) { return res(gml_dev_va_free(dev(), p, n)); }
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f)
{
    return off ? CUDA_ERROR_INVALID_VALUE : res(gml_dev_map(dev(), p, n, h));
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n)
{
    CUresult r = res(gml_dev_unmap(dev(), p, n));
    if (r == CUDA_SUCCESS)
        drop_access(p, n);
    return r;
}
/* Access rights by granule: bit d set when device d may read and write it.  Set by cuMemSetAccess,
 * dropped by cuMemUnmap. */
typedef struct granule {
    uintptr_t va;
    uint64_t mask;
    UT_hash_handle hh;
} granule;
static granule *granules;

EXPORT uint64_t fake_cuda_access(uintptr_t p)
{
    uintptr_t va = p - p % gml_dev_granularity(dev());
    pthread_mutex_lock(&mu);
    granule *g;
    HASH_FIND(hh, granules, &va, sizeof va, g);
    uint64_t m = g ? g->mask : 0;
    pthread_mutex_unlock(&mu);
    return m;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t c)
{
    uint64_t set = 0, clear = 0;
    for (size_t i = 0; i < c; i++) {
        if (d[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || d[i].location.id < 0 ||
            d[i].location.id >= FAKE_DEVICES)
            return CUDA_ERROR_INVALID_DEVICE;
        if (d[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            set |= (uint64_t)1 << d[i].location.id;
        else
            clear |= (uint64_t)1 << d[i].location.id;
    }
    CUresult r = res(gml_dev_set_access(dev(), p, n));
    if (r != CUDA_SUCCESS)
        return r;
    size_t gran = gml_dev_granularity(dev());
    pthread_mutex_lock(&mu);
    for (uintptr_t va = p; va < p + n; va += gran) {
        granule *g;
        HASH_FIND(hh, granules, &va, sizeof va, g);
        if (!g) {
            g = calloc(1, sizeof *g);
            g->va = va;
            HASH_ADD(hh, granules, va, sizeof g->va, g);
        }
        g->mask = (g->mask | set) & ~clear;
    }
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static void drop_access(uintptr_t p, size_t n)
{
    size_t gran = gml_dev_granularity(dev());
    pthread_mutex_lock(&mu);
    for (uintptr_t va = p; va < p + n; va += gran) {
        granule *g;
        HASH_FIND(hh, granules, &va, sizeof va, g);
        if (g) {
            HASH_DEL(granules, g);
            free(g);
        }
    }
    pthread_mutex_unlock(&mu);
}

static bool is_captured(CUevent e, bool set, bool value)
{
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < CAPTURED_MAX && captured[i] != e)
        i++;
    bool was = i < CAPTURED_MAX;
    if (set && value && !was)
        for (i = 0; i < CAPTURED_MAX; i++)
            if (!captured[i]) {
                captured[i] = e;
                break;
            }
    if (set && !value && was)
        captured[i] = NULL;
    pthread_mutex_unlock(&mu);
    return was;
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned int f) { return res(gml_dev_event_create(dev(), (gml_event *)e)); }
EXPORT CUresult cuEventDestroy_v2(CUevent e) { is_captured(e, true, false); return res(gml_dev_event_destroy(dev(), e)); }
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    pthread_mutex_lock(&mu);
    bool implicit = !s && any_capture();
    if (implicit)
        invalidate_all();
    bool in_graph = s && find_capture(s);
    pthread_mutex_unlock(&mu);
    if (implicit)
        return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    if (in_graph) {
        COUNT(capture_nodes);
        is_captured(e, true, true);
        return CUDA_SUCCESS;
    }
    is_captured(e, true, false);
    return res(gml_dev_event_record(dev(), e, (gml_stream)s));
}
EXPORT CUresult cuEventQuery(CUevent e)
{
    if (is_captured(e, false, false))
        return CUDA_ERROR_CAPTURED_EVENT;
    CUresult r = unsafe_call();
    return r != CUDA_SUCCESS ? r : res(gml_dev_event_query(dev(), e));
}
EXPORT CUresult cuEventSynchronize(CUevent e)
{
    if (is_captured(e, false, false))
        return CUDA_ERROR_CAPTURED_EVENT;
    CUresult r = unsafe_call();
    return r != CUDA_SUCCESS ? r : res(gml_dev_event_sync(dev(), e));
}

/* cuGetProcAddress: the fake's own functions by base name, versioned as the real driver does. */
typedef struct { const char *name; void *fn; } proc;
static const proc procs[] = {
    {"cuGetProcAddress", NULL}, /* filled below */
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync},
    {"cuMemGetInfo", (void *)cuMemGetInfo_v2},
};
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *st)
{
    COUNT(get_proc);
    if (strcmp(sym, "cuGetProcAddress") == 0) {
        *pfn = (void *)cuGetProcAddress_v2;
        return CUDA_SUCCESS;
    }
    bool ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    for (size_t i = 1; i < sizeof procs / sizeof procs[0]; i++)
        if (strcmp(sym, procs[i].name) == 0) {
            *pfn = procs[i].fn;
            if (ptsz && procs[i].fn == (void *)cuMemAllocAsync)
                *pfn = (void *)cuMemAllocAsync_ptsz;
            if (ptsz && procs[i].fn == (void *)cuMemFreeAsync)
                *pfn = (void *)cuMemFreeAsync_ptsz;
            if (st)
                *st = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = NULL;
    if (st)
        *st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
#undef cuGetProcAddress
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
