/*
 * graphmem.c — the memory of graph captures: what a stream allocates while it captures a graph
 * is gmlake's, and stays the graph's for as long as CUDA keeps the graph.
 *
 * Why: a captured kernel writes the same addresses at every replay.  CUDA's own answer is a
 * memory node owned by the graph; PyTorch's native allocator keeps a private pool per graph.
 * Under gmlake's route PyTorch's async backend asks cudaMallocAsync during capture, and a pointer
 * that came from CUDA's pool cannot be freed outside the graph before the graph ran (CUDA answers
 * "invalid argument"), which is where torch.compile's CUDA graphs without graph trees stopped.
 *
 * Contract (hooks.c and capture.c call it; every code is CUresult numbering):
 *  - An allocation on a stream that captures (status active; an invalidated capture passes
 *    through) is served by gmlake for that capture (its id, cuStreamGetCaptureInfo): first a
 *    block this capture freed on the same stream whose size fits (>= the request, at most a
 *    quarter more): stream order inside the graph makes the reuse safe, as in one stream's bin;
 *    else a new block of the pool taken as cudaMalloc takes one (GML_STREAM_NONE: memory no
 *    stream still uses, whichever stream launches the graph later).
 *  - A free of such a block during its own capture marks it free for that capture's later
 *    allocations on the free's stream; outside the capture (or during another) the program's free
 *    succeeds but the block stays allocated, held by the graph.  A second free of a block the
 *    program already freed is CUDA_ERROR_INVALID_VALUE (a double free), the tables unchanged.
 *  - At the capture's end (capture.c: gml_graph_ended) a CUDA user object is retained by the
 *    graph (moved into it).  CUDA keeps that reference with the graph, its clones, its executable
 *    graphs and child-graph nodes made from it, and releases it only once all of those are
 *    destroyed and their launches have finished; its destructor (a CUDA thread, which may make no
 *    CUDA call) only queues the capture.  The next allocation or free in the process
 *    (gml_graph_reap) then returns the blocks the program freed to the pool (as cudaFree would:
 *    no launch uses them any more) and leaves the ones it still holds to it, as ordinary blocks.
 *    A capture that ends without a graph (invalidated) is released at its end.  Where the user
 *    object cannot be made or retained, the capture's blocks are kept until the process exits
 *    (logged once): never reused under a graph that may still run.
 *  - Cost where no graph was captured: one relaxed atomic load per free and per allocation.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <uthash.h>

#include "interpose.h"

enum { LIVE, FREED_IN_CAPTURE, HELD }; /* a block's state: the program's, free for its capture, the graph's */

typedef struct gcap gcap;

typedef struct gblock {
    uintptr_t ptr;
    size_t size;      /* bytes the pool handed out for it (the first request) */
    gml_pool *pool;
    gml_stream freed_on; /* FREED_IN_CAPTURE: the stream of that free */
    int state;
    gcap *cap;
    struct gblock *next; /* the capture's blocks */
    UT_hash_handle hh;   /* by ptr */
} gblock;

struct gcap {
    uint64_t id;
    bool pinned;      /* kept until the process exits */
    gblock *blocks;
    gcap *next_dead;  /* the queue of released captures */
    UT_hash_handle hh; /* open or owned by a graph, by id */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static gblock *by_ptr;
static gcap *by_id;
static _Atomic long tracked;            /* blocks in by_ptr: frees skip the lookup while 0 */
static _Atomic(gcap *) dead;            /* captures CUDA released, not reaped yet */

int gml_free_served(gml_pool *p, uintptr_t ptr, gml_stream stream)
{
    /* The free is logged before the block can serve another thread (gml_trace_free_begin holds
     * the trace lock across it), so a recorded `A X` never precedes the `F X` that freed X. */
    bool tracing = gml_trace_free_begin();
    gml_depth++;
    int rc = gml_pool_free(p, ptr, stream);
    gml_depth--;
    gml_trace_free_end(tracing, rc == GMLAKE_OK, ptr, stream);
    if (rc == GMLAKE_OK)
        gml_ipc_forget(ptr);
    return rc;
}

int gml_graph_capture_id(CUstream s, uint64_t *id, bool *active)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    cuuint64_t v = 0;
    *id = 0;
    if (active)
        *active = false;
    CUresult r = PASS(drv_stream_get_capture_info, NO_DRV, s, &st, &v, NULL, NULL, NULL, NULL);
    if (r != CUDA_SUCCESS)
        return (int)r;
    if (st != CU_STREAM_CAPTURE_STATUS_NONE)
        *id = v;
    if (active)
        *active = st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
    return CUDA_SUCCESS;
}

static gcap *cap_of(uint64_t id, bool make)
{
    gcap *c = NULL;
    HASH_FIND(hh, by_id, &id, sizeof id, c);
    if (!c && make && (c = calloc(1, sizeof *c))) {
        c->id = id;
        HASH_ADD(hh, by_id, id, sizeof c->id, c);
    }
    return c;
}

bool gml_graph_reuse(uint64_t id, gml_stream s, size_t size, uintptr_t *out)
{
    bool found = false;
    pthread_mutex_lock(&mu);
    gcap *c = cap_of(id, false);
    gblock *best = NULL;
    for (gblock *b = c ? c->blocks : NULL; b; b = b->next)
        if (b->state == FREED_IN_CAPTURE && b->freed_on == s && b->size >= size &&
            b->size - size <= size / 4 && (!best || b->size < best->size))
            best = b;
    if (best) {
        best->state = LIVE;
        *out = best->ptr;
        found = true;
    }
    pthread_mutex_unlock(&mu);
    return found;
}

bool gml_graph_note(uint64_t id, gml_pool *p, uintptr_t ptr, size_t size)
{
    gblock *b = calloc(1, sizeof *b);
    pthread_mutex_lock(&mu);
    gcap *c = b ? cap_of(id, true) : NULL;
    if (c) {
        *b = (gblock){.ptr = ptr, .size = size, .pool = p, .state = LIVE, .cap = c, .next = c->blocks};
        c->blocks = b;
        HASH_ADD(hh, by_ptr, ptr, sizeof b->ptr, b);
        atomic_fetch_add(&tracked, 1);
    }
    pthread_mutex_unlock(&mu);
    if (!c)
        free(b); /* the caller frees the block: unrecorded, the program's free would hand it
                    to the pool under the graph */
    return c != NULL;
}

int gml_graph_free(uintptr_t ptr, uint64_t capture, gml_stream s)
{
    if (!atomic_load_explicit(&tracked, memory_order_relaxed))
        return GML_GRAPH_NOT_MINE;
    int r = CUDA_SUCCESS;
    pthread_mutex_lock(&mu);
    gblock *b = NULL;
    HASH_FIND(hh, by_ptr, &ptr, sizeof ptr, b);
    if (!b)
        r = GML_GRAPH_NOT_MINE;
    else if (b->state != LIVE)
        r = CUDA_ERROR_INVALID_VALUE;
    else if (capture && capture == b->cap->id) {
        b->state = FREED_IN_CAPTURE;
        b->freed_on = s;
    } else {
        b->state = HELD;
    }
    pthread_mutex_unlock(&mu);
    if (r == CUDA_ERROR_INVALID_VALUE)
        gml_log(GML_LOG_ERROR, "free(%#lx): a graph's block freed twice; unchanged", (unsigned long)ptr);
    return r;
}

void gml_graph_forget_pool(gml_pool *p)
{
    if (!atomic_load(&tracked))
        return;
    pthread_mutex_lock(&mu);
    gcap *c, *tmp;
    HASH_ITER(hh, by_id, c, tmp) {
        for (gblock **link = &c->blocks; *link;) {
            gblock *b = *link;
            if (b->pool != p) {
                link = &b->next;
                continue;
            }
            *link = b->next;
            HASH_DELETE(hh, by_ptr, b);
            atomic_fetch_sub(&tracked, 1);
            free(b);
        }
    }
    pthread_mutex_unlock(&mu);
}

/* With mu held: takes c out of the tables; the blocks to return to the pool go on *give. */
static void release(gcap *c, gblock **give)
{
    HASH_DELETE(hh, by_id, c);
    for (gblock *b = c->blocks, *next; b; b = next) {
        next = b->next;
        HASH_DELETE(hh, by_ptr, b);
        atomic_fetch_sub(&tracked, 1);
        if (b->state == LIVE) {
            free(b); /* the program's: its free goes to the pool as any other */
        } else {
            b->next = *give;
            *give = b;
        }
    }
    free(c);
}

/* Returns the blocks on `give` to their pools (no lock held; the device is done with them). */
static void give_back(gblock *give)
{
    size_t n = 0, bytes = 0;
    for (gblock *b = give, *next; b; b = next) {
        next = b->next;
        if (gml_free_served(b->pool, b->ptr, GML_STREAM_NONE) == GMLAKE_OK) {
            n++;
            bytes += b->size;
        }
        free(b);
    }
    if (n)
        gml_log(GML_LOG_DEBUG, "a graph is gone: %zu of its blocks (%zu bytes) returned to the pool", n, bytes);
}

/* The user object's destructor: on a CUDA thread, which may make no CUDA call. */
static void CUDA_CB graph_gone(void *arg)
{
    gcap *c = arg;
    gcap *head = atomic_load(&dead);
    do
        c->next_dead = head;
    while (!atomic_compare_exchange_weak(&dead, &head, c));
}

void gml_graph_reap(void)
{
    if (!atomic_load_explicit(&dead, memory_order_relaxed))
        return;
    gcap *c = atomic_exchange(&dead, NULL);
    gblock *give = NULL;
    pthread_mutex_lock(&mu);
    for (gcap *next; c; c = next) {
        next = c->next_dead;
        if (!c->pinned)
            release(c, &give);
    }
    pthread_mutex_unlock(&mu);
    give_back(give);
}

/* Ties capture c's life to graph g: a user object whose last reference the graph owns.  Where
 * that fails c is pinned (before the release below, whose destructor then leaves it alone). */
static bool tie(gcap *c, CUgraph g)
{
    CUuserObject o;
    c->pinned = true;
    if (PASS(drv_user_object_create, NO_DRV, &o, c, graph_gone, 1, CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) !=
        CUDA_SUCCESS)
        return false;
    if (PASS(drv_graph_retain_user_object, NO_DRV, g, o, 1, CU_GRAPH_USER_OBJECT_MOVE) != CUDA_SUCCESS) {
        PASS(drv_user_object_release, NO_DRV, o, 1);
        return false;
    }
    c->pinned = false;
    return true;
}

void gml_graph_ended(uint64_t id, CUgraph g)
{
    static _Atomic int warned;
    gblock *give = NULL;
    bool untied = false;
    pthread_mutex_lock(&mu);
    gcap *c = id ? cap_of(id, false) : NULL;
    if (c && !g)
        release(c, &give); /* no graph: nothing will run on its blocks */
    else if (c)
        untied = !tie(c, g);
    pthread_mutex_unlock(&mu);
    give_back(give);
    if (untied && !atomic_exchange(&warned, 1))
        gml_log(GML_LOG_WARN, "cannot tie a captured graph's memory to the graph's life (CUDA user "
                "objects); its blocks stay allocated until the process exits");
}
