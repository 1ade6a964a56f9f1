/* fake_streams.c — contexts, streams, events, synchronisation, graph capture and fork of the fake
 * libcuda.so.1, as demanding as the GPU (see fake_cuda.h for what tests control):
 *  - two devices, each with a primary context; more contexts with fake_cuda_ctx_create.  Every
 *    context has its own legacy stream (CUstream 0 or CU_STREAM_LEGACY in it).  A thread with no
 *    current context uses device 0's primary one (as the runtime makes it current on first use).
 *    Peer access is enabled between devices (cuCtxEnablePeerAccess).
 *  - CU_STREAM_PER_THREAD names the calling thread's own stream in the current context.
 *  - created streams get handles from a free list: a destroyed stream's handle is the next one
 *    handed out (or, with fake_cuda_reuse_handles_last, the last one of 4096).  Work on a
 *    destroyed stream still completes later, as on the GPU.
 *  - work: fake_cuda_launch(stream) submits one unit that completes only at fake_cuda_finish_all
 *    or a wait (event or stream or context synchronisation).  An event captures the work submitted
 *    to its stream so far; event and stream must belong to one context (else
 *    CUDA_ERROR_INVALID_HANDLE), a destroyed stream is an invalid handle.
 *  - cuCtxSynchronize waits for every stream of the current context; it can be made to fail
 *    (fake_cuda_fail_sync, or for good after a sticky fault: fake_cuda_fault) or to block until
 *    released (fake_cuda_hold_waits).
 *  - capture: a capture is begun on a created stream or a per-thread default stream in a mode.  A
 *    thread whose own mode is not relaxed may not make potentially unsafe calls (event query and
 *    sync, context sync) while it has a non-relaxed capture of its own, or, in global mode, while
 *    any thread has a global capture: the call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
 *    and invalidates those captures.  An event recorded on a capturing stream becomes a node of
 *    the graph (counted in capture_nodes) and cannot be queried (CUDA_ERROR_CAPTURED_EVENT).  A
 *    legacy stream cannot be queried or recorded while a capture is active
 *    (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; a record also invalidates the captures).
 *    A handle the fake never made (a plain number in a test) reports no capture.  Every status
 *    query (cuStreamIsCapturing, the runtime's cudaStreamIsCapturing, cuStreamGetCaptureInfo_v3)
 *    is counted in capture_queries.  Each capture has an id; a successful end returns a new graph.
 *  - graphs and user objects: graphs hold user objects' references until destroyed, executable
 *    graphs those of their graph; an object's destructor runs when its last reference goes.
 *  - fork: in a forked child every call returns CUDA_ERROR_NOT_INITIALIZED, as CUDA does after
 *    fork.
 *  - reset (cuDevicePrimaryCtxReset(_v2), the runtime's cudaDeviceReset): the primary context's
 *    work completes, its created streams are destroyed (their handles handed out again) and its
 *    events die.  On the GPU a dead event crashes the process when used (cuEventQuery after
 *    cudaDeviceReset: a segmentation fault, bench/gpu/reset_probe.cu); here each use (record,
 *    query, synchronize, wait, destroy) is counted in dead_event_uses and answered
 *    CUDA_ERROR_CONTEXT_IS_DESTROYED.  Virtual memory (reservations, handles, mappings, access)
 *    outlives the reset, as on the GPU.
 *  - a context ends as at a reset: cuCtxDestroy(_v2) of a context fake_cuda_ctx_create made (the
 *    context is invalid from then on: pushing, making current or destroying it again is
 *    CUDA_ERROR_INVALID_CONTEXT; a thread that had it current has none), and the last
 *    cuDevicePrimaryCtxRelease(_v2) of a primary context: each cuDevicePrimaryCtxRetain counts a
 *    reference, each release drops one (CUDA_ERROR_INVALID_CONTEXT with none held), and at zero
 *    the primary context dies (it comes back empty at the next use, as CUDA makes it again).
 *    cuDevicePrimaryCtxGetState says whether references are held.  Using a primary context
 *    without retaining it (the runtime's cudaSetDevice here, fake_cuda_set_device) counts no
 *    reference. */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "fake_internal.h"

enum { NCTX = 8, NHANDLES = 4096, NCAPTURES = 8 };

typedef struct fstream fstream;
/* A cuStreamWaitEvent: the stream's work from `unit` on runs after src's work up to target. */
typedef struct fgate {
    uint64_t unit;
    fstream *src;
    uint64_t target;
} fgate;
#define FAKE_GATES 64

struct fstream {
    CUcontext ctx;
    bool legacy;
    uint64_t submitted, completed;
    fgate gate[FAKE_GATES]; /* the waits not yet known done (oldest first) */
    int ngate;
    struct fstream *all_next;
};

/* Whether s's work up to target has completed, with what it waited for (called with mu held). */
static bool reached(fstream *s, uint64_t target, int depth)
{
    if (s->completed < target)
        return false;
    for (int i = 0; i < s->ngate && s->gate[i].unit <= target && depth < 64; i++)
        if (!reached(s->gate[i].src, s->gate[i].target, depth + 1))
            return false;
    return true;
}

static void complete_to(fstream *s, uint64_t target, int depth)
{
    if (s->completed < target)
        s->completed = target;
    for (int i = 0; i < s->ngate && s->gate[i].unit <= target && depth < 64; i++)
        complete_to(s->gate[i].src, s->gate[i].target, depth + 1);
}

typedef struct fctx {
    int device;
    unsigned life; /* its resets (primary) or destruction so far: its objects die with it */
    unsigned refs; /* a primary context's references (cuDevicePrimaryCtxRetain) */
    bool destroyed; /* a created context after cuCtxDestroy */
    fstream legacy;
} fctx;

typedef struct fevent {
    CUcontext ctx;
    unsigned life; /* its context's life when it was made */
    fstream *s;
    uint64_t target;
    bool captured; /* last recorded into a capture */
} fevent;

typedef struct capture {
    fstream *s;
    pthread_t thread; /* who began it */
    CUstreamCaptureMode mode;
    bool active, invalid;
    uint64_t id; /* unique in the process, from 1 */
} capture;

/* Graphs, executable graphs and user objects: an object is destroyed (its destructor called, at
 * once, on the releasing thread) when its last reference goes; a graph or an executable graph
 * holds references of the objects retained by it (an executable graph, those of its graph when
 * instantiated), and releases them when destroyed. */
enum { FAKE_GRAPH_OBJECTS = 8 };
typedef struct fobject {
    void *ptr;
    CUhostFn destroy;
    unsigned refs;
} fobject;
typedef struct fgraph {
    fobject *obj[FAKE_GRAPH_OBJECTS];
    unsigned count[FAKE_GRAPH_OBJECTS];
    int n;
    struct fgraph *prev, *next; /* the live ones (a test need not destroy its graphs) */
} fgraph;
static fgraph graphs = {.prev = &graphs, .next = &graphs};

static fgraph *graph_new(const fgraph *from); /* a live graph, a copy of `from` if given */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static fctx ctxs[NCTX] = {{.device = 0}, {.device = 1}};
static int nctx = 2;
static fstream *all_streams;               /* every stream ever made (for context waits) */
static fstream *handles[NHANDLES];         /* live created streams by handle index */
/* free handle indexes, a ring: freed ones go to the tail; LIFO takes from the tail (the handle
 * just destroyed comes back first), FIFO from the head (a handle comes back after all others) */
static int free_ring[NHANDLES], ring_head, nfree_handles = -1;
static bool fifo;
static __thread fstream *ptds[NCTX];
static __thread CUcontext current, ctx_stack[8];
static __thread int ctx_depth;
static bool hold_waits;
static int waiting;
static int fail_sync_left;
static CUresult fail_sync_code;
static _Atomic CUresult fault;
static uint64_t peer_enabled[FAKE_DEVICES]; /* bit p: this device may access p's memory */
static capture caps[NCAPTURES];
static int ncaptures; /* active ones, read without mu by fake_capture_status */
static uint64_t capture_ids;
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Set in the child of every fork of a process that has the fake loaded (a flag, not a getpid
 * per call: the fake must stay cheap next to the hooks it serves, bench/bench_hooks.c). */
static _Atomic bool forked_child;
static void on_fork_child(void) { forked_child = true; }
__attribute__((constructor)) static void fake_streams_init(void) { pthread_atfork(NULL, NULL, on_fork_child); }
EXPORT bool fake_forked(void) { return __atomic_load_n(&forked_child, __ATOMIC_RELAXED); }

static int ctx_index(CUcontext c) { return (int)((fctx *)c - ctxs); }
static bool ctx_valid(CUcontext c)
{
    return c && (fctx *)c >= ctxs && ctx_index(c) < __atomic_load_n(&nctx, __ATOMIC_ACQUIRE) &&
           !__atomic_load_n(&((fctx *)c)->destroyed, __ATOMIC_ACQUIRE);
}

/* The current context: the one set on this thread, else device 0's primary (as the runtime
 * would have made it current). */
static CUcontext cur(void) { return current ? current : (CUcontext)&ctxs[0]; }

/* With mu held. */
static void track(fstream *s)
{
    s->all_next = all_streams;
    all_streams = s;
}

/* With mu held: sets up the handles and the primary contexts' legacy streams (once). */
static void init(void)
{
    if (nfree_handles >= 0)
        return;
    for (int i = 0; i < NHANDLES; i++)
        free_ring[i] = i;
    nfree_handles = NHANDLES;
    for (int i = 0; i < NCTX; i++)
        ctxs[i].legacy = (fstream){.ctx = (CUcontext)&ctxs[i], .legacy = true};
    track(&ctxs[0].legacy);
    track(&ctxs[1].legacy);
}

/* With mu held: the stream a CUstream value names on this thread, or NULL (invalid handle). */
static fstream *resolve(CUstream h)
{
    init();
    CUcontext c = cur();
    if (h == NULL || h == CU_STREAM_LEGACY)
        return &((fctx *)c)->legacy;
    if (h == CU_STREAM_PER_THREAD) {
        int i = ctx_index(c);
        if (!ptds[i]) {
            ptds[i] = calloc(1, sizeof *ptds[i]);
            if (!ptds[i])
                return NULL;
            ptds[i]->ctx = c;
            track(ptds[i]);
        }
        return ptds[i];
    }
    uintptr_t v = (uintptr_t)h;
    if (v < FAKE_STREAM_BASE || (v - FAKE_STREAM_BASE) % 16 || (v - FAKE_STREAM_BASE) / 16 >= NHANDLES)
        return NULL;
    return handles[(v - FAKE_STREAM_BASE) / 16];
}

/* ---- devices and contexts ---- */

EXPORT CUresult cuDeviceGetCount(int *n) { GUARD(); *n = FAKE_DEVICES; return CUDA_SUCCESS; }
EXPORT CUresult cuCtxGetCurrent(CUcontext *c) { GUARD(); *c = cur(); return CUDA_SUCCESS; }
EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    GUARD();
    if (c && !ctx_valid(c))
        return CUDA_ERROR_INVALID_CONTEXT;
    current = c;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    GUARD();
    if (!ctx_valid(c) || ctx_depth == 8)
        return CUDA_ERROR_INVALID_CONTEXT;
    ctx_stack[ctx_depth++] = current;
    current = c;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
    GUARD();
    if (!ctx_depth && !current)
        return CUDA_ERROR_INVALID_CONTEXT; /* nothing to pop */
    if (c)
        *c = current;
    current = ctx_depth ? ctx_stack[--ctx_depth] : NULL;
    return CUDA_SUCCESS;
}
EXPORT int fake_current_device(void) { return ((fctx *)cur())->device; }
EXPORT CUresult cuCtxGetDevice(CUdevice *d)
{
    GUARD();
    fake_routing_call();
    *d = fake_current_device();
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    GUARD();
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    __atomic_fetch_add(&ctxs[d].refs, 1, __ATOMIC_RELAXED);
    *c = (CUcontext)&ctxs[d];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
    GUARD();
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = __atomic_load_n(&ctxs[d].refs, __ATOMIC_RELAXED) > 0;
    return CUDA_SUCCESS;
}

EXPORT CUcontext fake_cuda_ctx_create(int device)
{
    pthread_mutex_lock(&mu);
    init();
    CUcontext c = NULL;
    if (nctx < NCTX && device >= 0 && device < FAKE_DEVICES) {
        ctxs[nctx].device = device;
        track(&ctxs[nctx].legacy);
        c = (CUcontext)&ctxs[nctx];
        __atomic_store_n(&nctx, nctx + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
    return c;
}

EXPORT void fake_cuda_set_device(int device) { current = (CUcontext)&ctxs[device]; }

/* With mu held: context c dies (see the top of this file): its work completes, its created
 * streams are destroyed (their handles handed out again; the records stay, as a destroyed
 * stream's do) and its events die. */
static void ctx_end(fctx *c)
{
    init();
    for (fstream *s = all_streams; s; s = s->all_next)
        if (s->ctx == (CUcontext)c) {
            s->completed = s->submitted;
            s->ngate = 0;
        }
    for (int i = 0; i < NHANDLES; i++)
        if (handles[i] && handles[i]->ctx == (CUcontext)c) {
            handles[i] = NULL;
            free_ring[(ring_head + nfree_handles++) % NHANDLES] = i;
            __atomic_fetch_sub(&fake_cuda_counts()->streams_live, 1, __ATOMIC_RELAXED);
        }
    c->life++;
}

/* The primary context of d dies and comes back empty. */
EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    GUARD();
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    ctx_end(&ctxs[d]);
    COUNT(resets);
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}
#undef cuDevicePrimaryCtxReset
EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice d) { return cuDevicePrimaryCtxReset_v2(d); }

/* Drops a reference of d's primary context; the last one ends it. */
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
    GUARD();
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mu);
    CUresult r = ctxs[d].refs ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS && --ctxs[d].refs == 0) {
        ctx_end(&ctxs[d]);
        COUNT(contexts_ended);
    }
    pthread_mutex_unlock(&mu);
    return r;
}
#undef cuDevicePrimaryCtxRelease
EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice d) { return cuDevicePrimaryCtxRelease_v2(d); }

/* Destroys a context fake_cuda_ctx_create made; a primary one is not destroyed this way. */
EXPORT CUresult cuCtxDestroy_v2(CUcontext c)
{
    GUARD();
    pthread_mutex_lock(&mu);
    CUresult r = ctx_valid(c) && ctx_index(c) >= FAKE_DEVICES ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
    if (r == CUDA_SUCCESS) {
        ctx_end((fctx *)c);
        __atomic_store_n(&((fctx *)c)->destroyed, true, __ATOMIC_RELEASE);
        COUNT(contexts_ended);
    }
    pthread_mutex_unlock(&mu);
    if (r == CUDA_SUCCESS && current == c)
        current = NULL;
    return r;
}
#undef cuCtxDestroy
EXPORT CUresult cuCtxDestroy(CUcontext c) { return cuCtxDestroy_v2(c); }

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    GUARD();
    int me = fake_current_device();
    if (flags || !ctx_valid(peer) || ((fctx *)peer)->device == me)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t bit = (uint64_t)1 << ((fctx *)peer)->device;
    if (__atomic_fetch_or(&peer_enabled[me], bit, __ATOMIC_RELAXED) & bit)
        return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
    return CUDA_SUCCESS;
}

/* ---- capture (rules at the top of the file; mu held in the helpers) ---- */

static capture *find_capture(fstream *s)
{
    for (int i = 0; i < NCAPTURES; i++)
        if (caps[i].active && caps[i].s == s)
            return &caps[i];
    return NULL;
}

static bool any_capture(void)
{
    for (int i = 0; i < NCAPTURES; i++)
        if (caps[i].active)
            return true;
    return false;
}

static void invalidate_all(void)
{
    for (int i = 0; i < NCAPTURES; i++)
        if (caps[i].active)
            caps[i].invalid = true;
}

/* CUDA_SUCCESS, or the error of a potentially unsafe call now (and the captures invalidated). */
static CUresult unsafe_call(void)
{
    if (thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < NCAPTURES; i++) {
        capture *c = &caps[i];
        if (c->active && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED &&
            (pthread_equal(c->thread, pthread_self()) ||
             (thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL))) {
            c->invalid = true;
            r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    }
    if (r != CUDA_SUCCESS)
        COUNT(capture_violations);
    return r;
}

EXPORT CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode mode)
{
    GUARD();
    pthread_mutex_lock(&mu);
    fstream *s = resolve(h);
    CUresult r = CUDA_ERROR_ILLEGAL_STATE; /* already capturing, or no capture slot left */
    if (!s)
        r = CUDA_ERROR_INVALID_HANDLE;
    else if (s->legacy)
        r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    else if (!find_capture(s))
        for (int i = 0; i < NCAPTURES && r != CUDA_SUCCESS; i++)
            if (!caps[i].active) {
                caps[i] = (capture){.s = s, .thread = pthread_self(), .mode = mode, .active = true,
                                    .id = ++capture_ids};
                __atomic_add_fetch(&ncaptures, 1, __ATOMIC_RELEASE);
                r = CUDA_SUCCESS;
            }
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuStreamEndCapture(CUstream h, CUgraph *g)
{
    GUARD();
    pthread_mutex_lock(&mu);
    fstream *s = resolve(h);
    capture *c = s ? find_capture(s) : NULL;
    CUresult r = !c ? CUDA_ERROR_ILLEGAL_STATE : c->invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
    if (c) {
        c->active = false;
        __atomic_sub_fetch(&ncaptures, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&mu);
    *g = NULL;
    if (r == CUDA_SUCCESS && !(*g = (CUgraph)graph_new(NULL)))
        r = CUDA_ERROR_OUT_OF_MEMORY;
    return r;
}

EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                          CUgraph *graph, const CUgraphNode **deps,
                                          const CUgraphEdgeData **edges, size_t *ndeps)
{
    GUARD();
    fake_routing_call();
    int cs;
    CUresult r = (CUresult)fake_capture_status(h, &cs);
    *st = (CUstreamCaptureStatus)cs;
    if (r == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE && id) {
        pthread_mutex_lock(&mu);
        fstream *s = resolve(h);
        capture *c = s ? find_capture(s) : NULL;
        *id = c ? c->id : 0;
        pthread_mutex_unlock(&mu);
    }
    if (graph || deps || edges || ndeps)
        return CUDA_ERROR_NOT_SUPPORTED; /* the fake keeps no nodes */
    return r;
}

/* ---- graphs and user objects (rules where fgraph is defined) ---- */

static fgraph *graph_new(const fgraph *from)
{
    fgraph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    if (from)
        *g = *from;
    pthread_mutex_lock(&mu);
    g->prev = &graphs;
    g->next = graphs.next;
    graphs.next->prev = g;
    graphs.next = g;
    pthread_mutex_unlock(&mu);
    return g;
}

static void object_release(fobject *o, unsigned n)
{
    if (__atomic_sub_fetch(&o->refs, n, __ATOMIC_ACQ_REL) == 0) {
        o->destroy(o->ptr);
        free(o);
    }
}

EXPORT CUresult cuUserObjectCreate(CUuserObject *out, void *ptr, CUhostFn destroy, unsigned int refs,
                                   unsigned int flags)
{
    GUARD();
    if (!out || !destroy || !refs || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
        return CUDA_ERROR_INVALID_VALUE;
    fobject *o = calloc(1, sizeof *o);
    if (!o)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *o = (fobject){.ptr = ptr, .destroy = destroy, .refs = refs};
    *out = (CUuserObject)o;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuUserObjectRelease(CUuserObject o, unsigned int count)
{
    GUARD();
    if (!o || !count)
        return CUDA_ERROR_INVALID_VALUE;
    object_release((fobject *)o, count);
    return CUDA_SUCCESS;
}

static bool fail_retain;
EXPORT void fake_cuda_fail_retain(bool fail) { fail_retain = fail; }

EXPORT CUresult cuGraphRetainUserObject(CUgraph g, CUuserObject o, unsigned int count, unsigned int flags)
{
    GUARD();
    fgraph *fg = (fgraph *)g;
    if (!fg || !o || !count || fail_retain)
        return CUDA_ERROR_INVALID_VALUE;
    if (fg->n == FAKE_GRAPH_OBJECTS)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (!(flags & CU_GRAPH_USER_OBJECT_MOVE))
        __atomic_add_fetch(&((fobject *)o)->refs, count, __ATOMIC_ACQ_REL);
    fg->obj[fg->n] = (fobject *)o;
    fg->count[fg->n++] = count;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphDestroy(CUgraph g)
{
    GUARD();
    fgraph *fg = (fgraph *)g;
    if (!fg)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mu);
    fg->prev->next = fg->next;
    fg->next->prev = fg->prev;
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < fg->n; i++)
        object_release(fg->obj[i], fg->count[i]);
    free(fg);
    return CUDA_SUCCESS;
}

/* An executable graph is a graph of its own holding the same references. */
EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g, unsigned long long flags)
{
    GUARD();
    (void)flags;
    fgraph *fg = (fgraph *)g, *e;
    if (!fg || !out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!(e = graph_new(fg)))
        return CUDA_ERROR_OUT_OF_MEMORY;
    for (int i = 0; i < e->n; i++)
        __atomic_add_fetch(&e->obj[i]->refs, e->count[i], __ATOMIC_ACQ_REL);
    *out = (CUgraphExec)e;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuGraphExecDestroy(CUgraphExec e) { return cuGraphDestroy((CUgraph)e); }

EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m)
{
    GUARD();
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *m;
    *m = old;
    return CUDA_SUCCESS;
}

EXPORT int fake_capture_status(void *h, int *st)
{
    *st = CU_STREAM_CAPTURE_STATUS_NONE;
    COUNT(capture_queries);
    if (!__atomic_load_n(&ncaptures, __ATOMIC_ACQUIRE))
        return CUDA_SUCCESS; /* no capture anywhere (the common case, without the lock) */
    pthread_mutex_lock(&mu);
    fstream *s = resolve((CUstream)h);
    CUresult r = CUDA_SUCCESS;
    capture *c = s ? find_capture(s) : NULL;
    if (s && s->legacy && any_capture())
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else if (c)
        *st = c->invalid ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuStreamGetCtx(CUstream h, CUcontext *out)
{
    GUARD();
    pthread_mutex_lock(&mu);
    fstream *s = resolve(h);
    if (s)
        *out = s->ctx;
    pthread_mutex_unlock(&mu);
    return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *st)
{
    GUARD();
    fake_routing_call();
    int cs;
    CUresult r = (CUresult)fake_capture_status(s, &cs);
    *st = (CUstreamCaptureStatus)cs;
    return r;
}

/* ---- streams and work ---- */

EXPORT CUresult cuStreamCreate(CUstream *out, unsigned int flags)
{
    GUARD();
    fstream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    init();
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (nfree_handles > 0) {
        int i;
        if (fifo) {
            i = free_ring[ring_head];
            ring_head = (ring_head + 1) % NHANDLES;
            nfree_handles--;
        } else {
            i = free_ring[(ring_head + --nfree_handles) % NHANDLES];
        }
        s->ctx = cur();
        handles[i] = s;
        track(s);
        *out = (CUstream)(FAKE_STREAM_BASE + (uintptr_t)i * 16);
        COUNT(streams_live);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&mu);
    if (r != CUDA_SUCCESS)
        free(s);
    return r;
}

EXPORT CUresult cuStreamDestroy_v2(CUstream h)
{
    GUARD();
    pthread_mutex_lock(&mu);
    fstream *s = h && h != CU_STREAM_LEGACY && h != CU_STREAM_PER_THREAD ? resolve(h) : NULL;
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    if (s) {
        uintptr_t i = ((uintptr_t)h - FAKE_STREAM_BASE) / 16;
        handles[i] = NULL; /* the record stays (its work may still run), the handle is reused */
        free_ring[(ring_head + nfree_handles++) % NHANDLES] = (int)i;
        __atomic_fetch_sub(&fake_cuda_counts()->streams_live, 1, __ATOMIC_RELAXED);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

#undef cuStreamDestroy
EXPORT CUresult cuStreamDestroy(CUstream h) { return cuStreamDestroy_v2(h); }

EXPORT void fake_cuda_reuse_handles_last(bool yes)
{
    pthread_mutex_lock(&mu);
    fifo = yes;
    pthread_mutex_unlock(&mu);
}

EXPORT int fake_cuda_launch(CUstream h)
{
    pthread_mutex_lock(&mu);
    fstream *s = resolve(h);
    if (s)
        s->submitted++;
    pthread_mutex_unlock(&mu);
    return s ? 0 : -1;
}

EXPORT void fake_cuda_finish_all(void)
{
    pthread_mutex_lock(&mu);
    for (fstream *s = all_streams; s; s = s->all_next)
        s->completed = s->submitted;
    pthread_mutex_unlock(&mu);
}

EXPORT int fake_cuda_pending(CUstream h)
{
    pthread_mutex_lock(&mu);
    fstream *s = resolve(h);
    int n = s ? (int)(s->submitted - s->completed) : -1;
    pthread_mutex_unlock(&mu);
    return n;
}

/* ---- waits ---- */

/* With mu held: waits while the test holds waits back. */
static void wait_point(void)
{
    waiting++;
    pthread_cond_broadcast(&cv);
    while (hold_waits)
        pthread_cond_wait(&cv, &mu);
    waiting--;
}

EXPORT void fake_cuda_hold_waits(bool hold)
{
    pthread_mutex_lock(&mu);
    hold_waits = hold;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
}

EXPORT void fake_cuda_await_waiter(void)
{
    pthread_mutex_lock(&mu);
    while (waiting == 0)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

EXPORT void fake_cuda_fail_sync(CUresult code, int times)
{
    pthread_mutex_lock(&mu);
    fail_sync_code = code;
    fail_sync_left = times;
    pthread_mutex_unlock(&mu);
}

EXPORT void fake_cuda_fault(int code) { fault = (CUresult)code; }
EXPORT int fake_cuda_faulted(void) { return (int)fault; }

EXPORT CUresult cuCtxSynchronize(void)
{
    GUARD();
    COUNT(ctx_sync);
    pthread_mutex_lock(&mu);
    init();
    CUresult r = unsafe_call();
    if (r == CUDA_SUCCESS && fault)
        r = fault;
    if (r == CUDA_SUCCESS && fail_sync_left > 0) {
        fail_sync_left--;
        r = fail_sync_code;
    }
    if (r == CUDA_SUCCESS) {
        wait_point();
        CUcontext c = cur();
        for (fstream *s = all_streams; s; s = s->all_next)
            if (s->ctx == c)
                s->completed = s->submitted;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuStreamSynchronize(CUstream h)
{
    GUARD();
    pthread_mutex_lock(&mu);
    fstream *s = resolve(h);
    if (s) {
        wait_point();
        complete_to(s, s->submitted, 0); /* and the work it waited for */
    }
    pthread_mutex_unlock(&mu);
    return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* ---- events ---- */

/* Whether ev's context was reset since ev was made (counted: every such use is a crash on the
 * GPU). */
static bool dead(const fevent *ev)
{
    if (!ev || ((fctx *)ev->ctx)->life == ev->life)
        return false;
    COUNT(dead_event_uses);
    return true;
}

EXPORT CUresult cuEventCreate(CUevent *e, unsigned int flags)
{
    GUARD();
    fevent *ev = calloc(1, sizeof *ev);
    if (!ev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->ctx = cur();
    ev->life = ((fctx *)ev->ctx)->life;
    COUNT(events_live);
    COUNT(events_created);
    *e = (CUevent)ev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuEventDestroy_v2(CUevent e)
{
    GUARD();
    if (!e)
        return CUDA_ERROR_INVALID_HANDLE;
    __atomic_fetch_sub(&fake_cuda_counts()->events_live, 1, __ATOMIC_RELAXED);
    bool was_dead = dead((fevent *)e);
    free(e);
    return was_dead ? CUDA_ERROR_CONTEXT_IS_DESTROYED : CUDA_SUCCESS;
}

EXPORT CUresult cuEventRecord(CUevent e, CUstream h)
{
    GUARD();
    fevent *ev = (fevent *)e;
    pthread_mutex_lock(&mu);
    fstream *s = resolve(h);
    CUresult r = CUDA_ERROR_INVALID_HANDLE;
    if (dead(ev)) {
        r = CUDA_ERROR_CONTEXT_IS_DESTROYED;
    } else if (!ev || !s || s->ctx != ev->ctx) {
        /* r stays */
    } else if (s->legacy && any_capture()) {
        invalidate_all();
        r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    } else if (find_capture(s)) {
        COUNT(capture_nodes);
        ev->captured = true;
        r = CUDA_SUCCESS;
    } else {
        ev->captured = false;
        ev->s = s;
        ev->target = s->submitted;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&mu);
    return r;
}

/* cuEventQuery (wait: false) and cuEventSynchronize (wait: true). */
static CUresult event_check(CUevent e, bool wait)
{
    fevent *ev = (fevent *)e;
    pthread_mutex_lock(&mu);
    if (dead(ev)) {
        pthread_mutex_unlock(&mu);
        return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    }
    CUresult r = ev->captured ? CUDA_ERROR_CAPTURED_EVENT : unsafe_call();
    if (r == CUDA_SUCCESS && ev->s && !reached(ev->s, ev->target, 0)) {
        if (wait) {
            wait_point();
            complete_to(ev->s, ev->target, 0); /* waiting lets the work finish */
        } else {
            r = CUDA_ERROR_NOT_READY;
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int flags)
{
    GUARD();
    fevent *ev = (fevent *)e;
    pthread_mutex_lock(&mu);
    fstream *s = resolve(h);
    CUresult r = dead(ev) ? CUDA_ERROR_CONTEXT_IS_DESTROYED
                 : !ev || !s || flags ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS && ev->s && !reached(ev->s, ev->target, 0)) {
        if (s->ngate == FAKE_GATES) { /* full: forget the waits already done */
            int k = 0;
            for (int i = 0; i < s->ngate; i++)
                if (!reached(s->gate[i].src, s->gate[i].target, 0))
                    s->gate[k++] = s->gate[i];
            s->ngate = k;
        }
        if (s->ngate == FAKE_GATES) {
            r = CUDA_ERROR_OUT_OF_MEMORY; /* the fake's limit, not CUDA's */
        } else {
            s->submitted++;
            s->gate[s->ngate++] = (fgate){s->submitted, ev->s, ev->target};
        }
    }
    pthread_mutex_unlock(&mu);
    return r;
}

EXPORT CUresult cuEventQuery(CUevent e)
{
    GUARD();
    return event_check(e, false);
}

EXPORT CUresult cuEventSynchronize(CUevent e)
{
    GUARD();
    return event_check(e, true);
}
