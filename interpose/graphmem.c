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
 *    through) is served by gmlake for that capture (its id, cuStreamGetCaptureInfo).  The capture
 *    keeps its memory as slabs (blocks of the pool) cut into pieces (one per allocation, 512-byte
 *    aligned, tiling the slab): first the smallest piece this capture freed on the same stream
 *    that holds the request, cut in two where the rest is 512 bytes or more (the rest stays free
 *    for the capture on that stream): stream order inside the graph makes the reuse safe, as in
 *    one stream's bin; else a new slab of the pool taken as cudaMalloc takes one (GML_STREAM_NONE:
 *    memory no stream still uses, whichever stream launches the graph later).  So a capture holds
 *    about what its allocations needed at once, as a pool's private bin would, not one block per
 *    size it asked for (before session 27 only a freed block at most a quarter larger was reused).
 *    The freed pieces are indexed by (device, stream, size, address) per capture and per graph
 *    pool, so the best fit is one lookup whatever the number of graphs captured.
 *  - A free of a piece during its own capture marks it free for that capture's later
 *    allocations on the free's stream, and merges it with neighbours freed there; outside the
 *    capture (or during another) the program's free succeeds but the piece stays allocated, held
 *    by the graph.  A second free of a piece the program already freed is
 *    CUDA_ERROR_INVALID_VALUE (a double free), the tables unchanged.  A piece may start inside a
 *    block of the pool: pointer queries (cuMemGetAddressRange, IPC) answer with the slab.
 *  - At the capture's end (capture.c: gml_graph_ended) a CUDA user object is retained by the
 *    graph (moved into it).  CUDA keeps that reference with the graph, its clones, its executable
 *    graphs and child-graph nodes made from it, and releases it only once all of those are
 *    destroyed and their launches have finished; its destructor (a CUDA thread, which may make no
 *    CUDA call) only queues the capture.  The next allocation or free in the process
 *    (gml_graph_reap) then returns the slabs none of whose pieces the program holds to the pool
 *    (no launch uses them any more); a slab the program still holds pieces of goes back when it
 *    frees the last of them.  Either goes back on the stream of the program's frees of its
 *    pieces (none: as cudaFree would), or after a wait for the device where they came on
 *    several streams or on one destroyed since.  A free of a piece captured into another graph
 *    runs at that graph's launches: the slab then waits for that capture's release too (a
 *    hold, gborrow).  A capture's reuse stays within the pool (device) the allocation asks.
 *    A capture that ends without a graph (invalidated) is released at its end.  Where the user
 *    object cannot be made or retained, the capture's blocks are kept until the process exits
 *    (logged once): never reused under a graph that may still run.
 *  - Cost where no graph was captured: two relaxed atomic loads per allocation and three per
 *    free (whether anything waits to be reaped; whether any piece is tracked: the caller asks
 *    gml_graph_tracking before gml_graph_free, and whether a capture is under way only then).
 *  - No device wait while a capture may be under way (a wait is an unsafe call there): a slab
 *    that needs one is parked and given back by the first reap outside captures.
 */
#include <bsd/sys/tree.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <uthash.h>

#include "interpose.h"

enum { LIVE, FREED_IN_CAPTURE, HELD }; /* a piece's state: the program's, free for its capture, the graph's */
enum { PIECE_ALIGN = 512 };              /* a piece starts where the pool's blocks may: 512 bytes */

typedef struct gcap gcap;
typedef struct gslab gslab;

typedef struct gblock {  /* a piece of a slab: what one allocation of the capture was handed */
    uintptr_t ptr;
    size_t size;         /* bytes of the slab it spans */
    gml_stream freed_on; /* FREED_IN_CAPTURE: the stream of that free */
    uint64_t owner;      /* LIVE or HELD: the capture whose allocation it is */
    int state;
    gslab *slab;
    struct gblock *prev, *next; /* the slab's pieces in address order */
    UT_hash_handle hh;          /* by ptr */
    /* FREED_IN_CAPTURE: in the free index of its slab's capture and, where the slab is shared into
     * a graph pool, in that pool's (by device, stream, size, address: a best fit is one lookup) */
    RB_ENTRY(gblock) own_node, share_node;
    bool in_own, in_share;
} gblock;

RB_HEAD(gfree_tree, gblock);  /* over own_node */
RB_HEAD(gshare_tree, gblock); /* over share_node */

struct gslab {           /* one block of the pool, taken by a capture */
    uintptr_t ptr;
    size_t size;         /* bytes asked of the pool (the capture's first request for it) */
    gml_pool *pool;
    int device;          /* the pool's */
    uint64_t share;      /* its capture's graph pool (0: none): what other captures may reuse */
    gcap *cap;           /* NULL: its graph is gone; an orphan while the program or another
                            graph still holds pieces of it */
    gblock *pieces;      /* address order, tiling [ptr, ptr + size) */
    size_t live;         /* LIVE pieces */
    unsigned holds;      /* other captures that froze a free of one of its pieces (gborrow) */
    gml_stream last_free; /* after the graph went: the stream of the program's frees ... */
    bool frees, mixed;    /* ... whether there were any, and on more than one stream */
    gslab *next;         /* the capture's slabs, the orphans, or a list to give back */
};

typedef struct gborrow {  /* a slab of another capture, a free of whose piece this capture holds */
    gslab *slab;
    struct gborrow *next;
} gborrow;

struct gcap {
    uint64_t id;
    uint64_t share;      /* the graph pool the program captures it into (0: its own memory) */
    bool pinned;         /* kept until the process exits */
    gslab *slabs;
    struct gfree_tree own_free; /* the FREED_IN_CAPTURE pieces of its slabs */
    gborrow *borrowed;
    size_t taken, live_bytes, peak_bytes; /* bytes of its slabs; of its LIVE pieces, now and at most */
    gcap *next_dead;     /* the queue of released captures */
    UT_hash_handle hh;   /* open or owned by a graph, by id */
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static gblock *by_ptr;
static gcap *by_id;
static gslab *orphans;                  /* slabs whose graph is gone, with LIVE pieces */
static gslab *parked;                   /* slabs to give back after a device wait, once no capture is under way */
static _Atomic bool any_parked;
static _Atomic long tracked;            /* pieces in by_ptr: frees skip the lookup while 0 */
static _Atomic(gcap *) dead;            /* captures CUDA released, not reaped yet */
enum { GML_SHARES = 64 };
static struct {
    uintptr_t stream;
    pthread_t thread;                   /* the per-thread default stream's: the thread that named it */
    uint64_t pool;
} shares[GML_SHARES];                   /* streams whose next captures go into a named pool */
static int nshares;

typedef struct gshare {   /* a graph pool's free index: FREED_IN_CAPTURE pieces of slabs shared into it */
    uint64_t key;
    struct gshare_tree free;
    UT_hash_handle hh;
} gshare;
static gshare *share_index; /* by key; an entry goes when its tree empties */

/* Best fit order: device, stream of the free, size, address. */
static int gfree_cmp(const gblock *a, const gblock *b)
{
    if (a->slab->device != b->slab->device)
        return a->slab->device < b->slab->device ? -1 : 1;
    if (a->freed_on != b->freed_on)
        return a->freed_on < b->freed_on ? -1 : 1;
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    return a->ptr < b->ptr ? -1 : a->ptr > b->ptr;
}

/* RB_GENERATE_STATIC spells its attribute __unused, which glibc leaves undefined */
RB_GENERATE_INTERNAL(gfree_tree, gblock, own_node, gfree_cmp, __attribute__((unused)) static)
RB_GENERATE_INTERNAL(gshare_tree, gblock, share_node, gfree_cmp, __attribute__((unused)) static)

/* With mu held: graph pool `key`'s free index, made where `make` (NULL: none, or no host memory:
 * the pool's pieces are then reused by their own capture only). */
static gshare *share_entry(uint64_t key, bool make)
{
    gshare *g = NULL;
    HASH_FIND(hh, share_index, &key, sizeof key, g);
    if (!g && make && (g = calloc(1, sizeof *g))) {
        g->key = key;
        RB_INIT(&g->free);
        HASH_ADD(hh, share_index, key, sizeof g->key, g);
    }
    return g;
}

/* With mu held: FREED_IN_CAPTURE piece b (its slab, stream and size set) enters the free indexes
 * of its slab's capture and graph pool. */
static void free_index_add(gblock *b)
{
    gslab *sl = b->slab;
    if (sl->cap) {
        RB_INSERT(gfree_tree, &sl->cap->own_free, b);
        b->in_own = true;
    }
    gshare *g = sl->share ? share_entry(sl->share, true) : NULL;
    if (g) {
        RB_INSERT(gshare_tree, &g->free, b);
        b->in_share = true;
    }
}

/* With mu held: b leaves the free indexes it is in (before its size, slab or capture change). */
static void free_index_drop(gblock *b)
{
    if (b->in_own) {
        RB_REMOVE(gfree_tree, &b->slab->cap->own_free, b);
        b->in_own = false;
    }
    gshare *g = b->in_share ? share_entry(b->slab->share, false) : NULL;
    if (g) {
        RB_REMOVE(gshare_tree, &g->free, b);
        if (RB_EMPTY(&g->free)) {
            HASH_DEL(share_index, g);
            free(g);
        }
    }
    b->in_share = false;
}

/* With mu held: the smallest piece free for a capture on stream s of `device` that holds `size`
 * bytes, in capture c's index, or (c NULL) in graph pool `share`'s. */
static gblock *best_fit(gcap *c, uint64_t share, int device, gml_stream s, size_t size)
{
    gslab dev = {.device = device};
    gblock key = {.slab = &dev, .freed_on = s, .size = size}, *b = NULL;
    gshare *g;
    if (c)
        b = RB_NFIND(gfree_tree, &c->own_free, &key);
    else if ((g = share_entry(share, false)))
        b = RB_NFIND(gshare_tree, &g->free, &key);
    return b && b->slab->device == device && b->freed_on == s ? b : NULL;
}

int gml_free_served(gml_pool *p, uintptr_t ptr, gml_stream stream)
{
    gml_depth++;
    int rc = gml_pool_free(p, ptr, stream);
    gml_depth--;
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

/* With mu held: the entry of stream `stream` as the calling thread names it (CU_STREAM_PER_THREAD:
 * this thread's own default stream), or nshares. */
static int share_at(uintptr_t stream)
{
    int i = 0;
    bool ptds = stream == (uintptr_t)CU_STREAM_PER_THREAD;
    while (i < nshares && (shares[i].stream != stream || (ptds && !pthread_equal(shares[i].thread, pthread_self()))))
        i++;
    return i;
}

/* With mu held: the graph pool that captures on `stream` (the program's handle) go into, 0 if none
 * was named. */
static uint64_t share_of(uintptr_t stream)
{
    int i = share_at(stream);
    return i < nshares ? shares[i].pool : 0;
}

/* A thread that named a pool for its per-thread stream ends: its entry goes (a later thread may
 * get its pthread_t and has promised nothing). */
static pthread_key_t ptds_named;
static pthread_once_t ptds_named_once = PTHREAD_ONCE_INIT;

static void ptds_named_end(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&mu);
    int i = share_at((uintptr_t)CU_STREAM_PER_THREAD);
    if (i < nshares)
        shares[i] = shares[--nshares];
    pthread_mutex_unlock(&mu);
}

static void ptds_named_init(void)
{
    pthread_key_create(&ptds_named, ptds_named_end);
}

GMLAKE_API int gmlake_graph_pool(void *stream, uint64_t pool)
{
    int rc = GMLAKE_OK;
    /* NULL cannot capture as the legacy stream: it is stream 0 of a per-thread program */
    uintptr_t h = stream ? (uintptr_t)stream : (uintptr_t)CU_STREAM_PER_THREAD;
    if (pool && h == (uintptr_t)CU_STREAM_PER_THREAD) {
        pthread_once(&ptds_named_once, ptds_named_init);
        pthread_setspecific(ptds_named, &ptds_named); /* any non-NULL value: the destructor runs */
    }
    pthread_mutex_lock(&mu);
    int i = share_at(h);
    if (!pool && i < nshares)
        shares[i] = shares[--nshares];
    else if (pool && i < nshares)
        shares[i].pool = pool;
    else if (pool && nshares < GML_SHARES) {
        shares[nshares].stream = h;
        shares[nshares].thread = pthread_self();
        shares[nshares++].pool = pool;
    } else if (pool)
        rc = GMLAKE_ERR_NOMEM; /* that capture keeps its memory to itself */
    pthread_mutex_unlock(&mu);
    return rc;
}

/* With mu held: the slabs on `list` shared into graph pool `from` are now in `to`. */
static void rename_slabs(gslab *list, uint64_t from, uint64_t to)
{
    for (; list; list = list->next)
        if (list->share == from)
            list->share = to;
}

GMLAKE_API int gmlake_graph_pool_rename(uint64_t from, uint64_t to)
{
    if (!from || !to)
        return GMLAKE_ERR_INVALID;
    pthread_mutex_lock(&mu);
    gshare *f = from != to ? share_entry(from, false) : NULL;
    if (f) {
        /* its free pieces go to `to`'s index (none of it without host memory: then only their
         * own captures reuse them) */
        HASH_DEL(share_index, f);
        gshare *t = share_entry(to, true);
        for (gblock *b; (b = RB_MIN(gshare_tree, &f->free));) {
            RB_REMOVE(gshare_tree, &f->free, b);
            if (t)
                RB_INSERT(gshare_tree, &t->free, b);
            b->in_share = t != NULL;
        }
        free(f);
    }
    gcap *c, *tmp;
    HASH_ITER(hh, by_id, c, tmp) {
        if (c->share == from)
            c->share = to;
        rename_slabs(c->slabs, from, to);
    }
    rename_slabs(orphans, from, to);
    rename_slabs(parked, from, to);
    for (int i = 0; i < nshares; i++)
        if (shares[i].pool == from)
            shares[i].pool = to;
    pthread_mutex_unlock(&mu);
    return GMLAKE_OK;
}

static size_t piece_bytes(size_t size)
{
    return (size + PIECE_ALIGN - 1) & ~(size_t)(PIECE_ALIGN - 1);
}

static void piece_add(gblock *b)
{
    HASH_ADD(hh, by_ptr, ptr, sizeof b->ptr, b);
    atomic_fetch_add(&tracked, 1);
}

static void piece_drop(gblock *b)
{
    free_index_drop(b);
    HASH_DELETE(hh, by_ptr, b);
    atomic_fetch_sub(&tracked, 1);
    free(b);
}

/* With mu held: every piece of s out of the tables (s itself stays the caller's). */
static void slab_forget(gslab *s)
{
    for (gblock *b = s->pieces, *next; b; b = next) {
        next = b->next;
        piece_drop(b);
    }
    s->pieces = NULL;
}

/* With mu held: takes s off the list *head. */
static void slab_unlink(gslab **head, gslab *s)
{
    for (gslab **link = head; *link; link = &(*link)->next)
        if (*link == s) {
            *link = s->next;
            return;
        }
}

/* With mu held: b absorbs its next piece n (both free for the capture on one stream). */
static void piece_merge(gblock *b, gblock *n)
{
    b->size += n->size;
    b->next = n->next;
    if (n->next)
        n->next->prev = b;
    piece_drop(n);
}

/* With mu held: capture `id` (not s's own) records a free of a piece of s: the free runs at that
 * graph's launches, so s stays allocated until that capture too is released.  false: no host
 * memory (nothing changed). */
static bool borrow(gslab *s, uint64_t id)
{
    gborrow *w = malloc(sizeof *w);
    gcap *c = w ? cap_of(id, true) : NULL;
    if (!c) {
        free(w);
        return false;
    }
    *w = (gborrow){.slab = s, .next = c->borrowed};
    c->borrowed = w;
    s->holds++;
    return true;
}

bool gml_graph_reuse(uint64_t id, int device, gml_stream s, uintptr_t stream, size_t size, uintptr_t *out)
{
    size_t need = piece_bytes(size);
    gblock *best = NULL, *rest = NULL;
    pthread_mutex_lock(&mu);
    gcap *c = cap_of(id, false);
    uint64_t share = c && c->share ? c->share : share_of(stream);
    if (c)
        best = best_fit(c, 0, device, s, size);
    if (!best && share) {
        /* what earlier captures into the same graph pool freed inside themselves (the pool's
         * index holds this capture's own pieces too, none of which fits): PyTorch's contract
         * for a shared pool is that its graphs never run at once */
        best = best_fit(NULL, share, device, s, size);
        if (best && (!(c = c ? c : cap_of(id, true)) || !borrow(best->slab, id)))
            best = NULL; /* no host memory: a new slab instead */
    }
    if (c && !c->share)
        c->share = share;
    if (best)
        free_index_drop(best);
    if (best && best->size > need && best->size - need >= PIECE_ALIGN && (rest = calloc(1, sizeof *rest))) {
        /* the rest stays free for captures on s: best fit with splitting, as in a pool */
        *rest = (gblock){.ptr = best->ptr + need, .size = best->size - need, .freed_on = s,
                         .state = FREED_IN_CAPTURE, .slab = best->slab, .prev = best, .next = best->next};
        if (best->next)
            best->next->prev = rest;
        best->next = rest;
        best->size = need;
        piece_add(rest);
        free_index_add(rest);
    }
    if (best) {
        best->state = LIVE;
        best->owner = id;
        best->slab->live++;
        c->live_bytes += best->size;
        if (c->live_bytes > c->peak_bytes)
            c->peak_bytes = c->live_bytes;
        *out = best->ptr;
    }
    pthread_mutex_unlock(&mu);
    return best != NULL;
}

bool gml_graph_note(uint64_t id, gml_pool *p, int device, uintptr_t stream, uintptr_t ptr, size_t size)
{
    gblock *b = calloc(1, sizeof *b);
    gslab *s = b ? calloc(1, sizeof *s) : NULL;
    pthread_mutex_lock(&mu);
    gcap *c = s ? cap_of(id, true) : NULL;
    if (c) {
        if (!c->share)
            c->share = share_of(stream);
        *s = (gslab){.ptr = ptr, .size = size, .pool = p, .device = device, .share = c->share,
                     .cap = c, .pieces = b, .live = 1, .next = c->slabs};
        *b = (gblock){.ptr = ptr, .size = size, .owner = id, .state = LIVE, .slab = s};
        c->slabs = s;
        piece_add(b);
        c->taken += size;
        c->live_bytes += size;
        if (c->live_bytes > c->peak_bytes)
            c->peak_bytes = c->live_bytes;
    }
    pthread_mutex_unlock(&mu);
    if (!c) {
        free(s);
        free(b); /* the caller frees the block: unrecorded, the program's free would hand it
                    to the pool under the graph */
    }
    return c != NULL;
}

bool gml_graph_piece(uintptr_t ptr, gml_pool **p, int *device)
{
    if (!atomic_load_explicit(&tracked, memory_order_relaxed))
        return false;
    pthread_mutex_lock(&mu);
    gblock *b = NULL;
    HASH_FIND(hh, by_ptr, &ptr, sizeof ptr, b);
    if (b) {
        *p = b->slab->pool;
        *device = b->slab->device;
    }
    pthread_mutex_unlock(&mu);
    return b != NULL;
}

/* With mu held: the program freed a piece of s on stream `on` (outside s's capture). */
static void note_free(gslab *s, gml_stream on)
{
    if (s->frees && s->last_free != on)
        s->mixed = true;
    s->frees = true;
    s->last_free = on;
}

/* Returns slab s (out of the tables, no piece LIVE) to its pool (no lock held): on the stream of
 * the program's frees of its pieces, or, where they came on several, after a wait for the
 * device, so that none of their work can still be running.  That wait is an unsafe call in a
 * capture: unless may_wait (no capture under way), s is parked for gml_graph_reap. */
static void slab_give(gslab *s, bool may_wait)
{
    gml_stream on = s->frees ? s->last_free : GML_STREAM_NONE;
    if (s->mixed) {
        if (!may_wait) {
            pthread_mutex_lock(&mu);
            s->next = parked;
            parked = s;
            atomic_store(&any_parked, true);
            pthread_mutex_unlock(&mu);
            return;
        }
        gml_depth++; /* the pool's driver calls are real calls: routing off */
        int rc = gml_pool_sync(s->pool);
        gml_depth--;
        if (rc != GMLAKE_OK) {
            gml_log(GML_LOG_WARN, "a graph's block (%#lx) stays allocated: waiting for its device failed",
                    (unsigned long)s->ptr);
            free(s);
            return;
        }
        on = GML_STREAM_NONE;
    }
    gml_free_served(s->pool, s->ptr, on);
    free(s);
}

int gml_graph_free(uintptr_t ptr, uint64_t capture, gml_stream s, bool may_wait)
{
    int r = CUDA_SUCCESS;
    gslab *give = NULL;
    pthread_mutex_lock(&mu);
    gblock *b = NULL;
    HASH_FIND(hh, by_ptr, &ptr, sizeof ptr, b);
    gslab *sl = b ? b->slab : NULL;
    if (!b) {
        r = GML_GRAPH_NOT_MINE;
    } else if (b->state != LIVE) {
        r = CUDA_ERROR_INVALID_VALUE;
    } else if (capture && capture != b->owner && !borrow(sl, capture)) {
        r = CUDA_ERROR_OUT_OF_MEMORY; /* no host memory to record it: the piece stays LIVE */
    } else {
        gcap *oc = cap_of(b->owner, false);
        if (oc)
            oc->live_bytes -= b->size;
        sl->live--;
        if (capture && capture == b->owner) {
            /* inside the capture that allocated it: free for that capture's (and its graph
             * pool's) later allocations on s */
            b->state = FREED_IN_CAPTURE;
            b->freed_on = s;
            if (b->next && b->next->state == FREED_IN_CAPTURE && b->next->freed_on == s)
                piece_merge(b, b->next);
            if (b->prev && b->prev->state == FREED_IN_CAPTURE && b->prev->freed_on == s) {
                gblock *prev = b->prev;
                free_index_drop(prev); /* it grows: its place in the indexes moves */
                piece_merge(prev, b);
                b = prev;
            }
            free_index_add(b);
        } else {
            /* the program's free, or one captured into another graph (that graph's: borrow()
             * above): held until the graphs are gone */
            b->state = HELD;
            if (!capture)
                note_free(sl, s);
            if (!sl->cap && !sl->live && !sl->holds) {
                slab_unlink(&orphans, sl);
                slab_forget(sl);
                give = sl;
            }
        }
    }
    pthread_mutex_unlock(&mu);
    if (r == CUDA_ERROR_INVALID_VALUE)
        gml_log(GML_LOG_ERROR, "free(%#lx): a graph's block freed twice; unchanged", (unsigned long)ptr);
    if (give)
        slab_give(give, may_wait);
    return r;
}

/* With mu held: a slab whose pieces the program freed last on stream s, now retired, counts as
 * freed on several streams: a later stream with the same handle is another stream. */
static void retire_on(gslab *list, gml_stream s)
{
    for (; list; list = list->next)
        if (list->frees && list->last_free == s)
            list->mixed = true;
}

void gml_graph_stream_retired(gml_stream s)
{
    if (!atomic_load(&tracked))
        return;
    pthread_mutex_lock(&mu);
    gcap *c, *tmp;
    HASH_ITER(hh, by_id, c, tmp)
        retire_on(c->slabs, s);
    retire_on(orphans, s);
    pthread_mutex_unlock(&mu);
}

/* With mu held: drops every slab of pool p from the list *head, and its pieces. */
static void forget_slabs(gslab **head, gml_pool *p)
{
    for (gslab **link = head; *link;) {
        gslab *s = *link;
        if (s->pool != p) {
            link = &s->next;
            continue;
        }
        *link = s->next;
        slab_forget(s);
        free(s);
    }
}

/* With mu held: drops capture c's holds on slabs of pool p. */
static void forget_borrows(gcap *c, gml_pool *p)
{
    for (gborrow **link = &c->borrowed; *link;) {
        gborrow *w = *link;
        if (w->slab->pool != p) {
            link = &w->next;
            continue;
        }
        *link = w->next;
        free(w);
    }
}

void gml_graph_forget_pool(gml_pool *p)
{
    if (!atomic_load(&tracked) && !atomic_load(&any_parked))
        return;
    pthread_mutex_lock(&mu);
    gcap *c, *tmp;
    HASH_ITER(hh, by_id, c, tmp) /* first: a hold names a slab the loop below may free */
        forget_borrows(c, p);
    HASH_ITER(hh, by_id, c, tmp)
        forget_slabs(&c->slabs, p);
    forget_slabs(&orphans, p);
    forget_slabs(&parked, p);
    pthread_mutex_unlock(&mu);
}

/* With mu held: takes c out of the tables.  A slab none of whose pieces the program holds goes
 * on *give (to return to the pool); one it still holds pieces of stays, an orphan, until the
 * program frees the last of them. */
static void release(gcap *c, gslab **give)
{
    HASH_DELETE(hh, by_id, c);
    for (gborrow *w = c->borrowed, *next; w; w = next) {
        next = w->next;
        gslab *s = w->slab;
        free(w);
        if (--s->holds || s->cap || s->live)
            continue; /* still held by its own graph, another one or the program */
        slab_unlink(&orphans, s);
        slab_forget(s);
        s->next = *give;
        *give = s;
    }
    for (gslab *s = c->slabs, *next; s; s = next) {
        next = s->next;
        for (gblock *b = s->pieces; b; b = b->next)
            if (b->in_own) { /* c's index goes with c; a shared slab's pieces stay in its pool's */
                RB_REMOVE(gfree_tree, &c->own_free, b);
                b->in_own = false;
            }
        s->cap = NULL;
        if (s->live || s->holds) {
            s->next = orphans;
            orphans = s;
        } else {
            /* pieces the program freed while the graph lived go back in the order of those
             * frees: on their stream, or after a wait for the device where they came on several
             * streams or on one since destroyed (slab_give) */
            slab_forget(s);
            s->next = *give;
            *give = s;
        }
    }
    free(c);
}

/* Returns the slabs on `give` to their pools (no lock held; the device is done with them). */
static void give_back(gslab *give, bool may_wait)
{
    size_t n = 0, bytes = 0;
    for (gslab *s = give, *next; s; s = next) {
        next = s->next;
        n++;
        bytes += s->size;
        slab_give(s, may_wait);
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

bool gml_graph_tracking(void)
{
    return atomic_load_explicit(&tracked, memory_order_relaxed) != 0;
}

bool gml_graph_reap_pending(void)
{
    return atomic_load_explicit(&dead, memory_order_relaxed) ||
           atomic_load_explicit(&any_parked, memory_order_relaxed);
}

void gml_graph_reap(bool may_wait)
{
    if (!gml_graph_reap_pending())
        return;
    gcap *c = atomic_exchange(&dead, NULL);
    gslab *give = NULL;
    pthread_mutex_lock(&mu);
    if (may_wait) {
        give = parked;
        parked = NULL;
        atomic_store(&any_parked, false);
    }
    for (gcap *next; c; c = next) {
        next = c->next_dead;
        if (!c->pinned)
            release(c, &give);
    }
    pthread_mutex_unlock(&mu);
    give_back(give, may_wait);
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
    gslab *give = NULL;
    bool untied = false;
    pthread_mutex_lock(&mu);
    gcap *c = id ? cap_of(id, false) : NULL;
    size_t taken = c ? c->taken : 0, peak = c ? c->peak_bytes : 0, live = c ? c->live_bytes : 0;
    if (c && !g)
        release(c, &give); /* no graph: nothing will run on its blocks */
    else if (c)
        untied = !tie(c, g);
    pthread_mutex_unlock(&mu);
    if (c)
        gml_log(GML_LOG_DEBUG, "capture %llu ended: %zu bytes taken from the pool for allocations "
                "that peaked at %zu bytes live; %zu bytes live at its end", (unsigned long long)id,
                taken, peak, live);
    give_back(give, false);
    if (untied && !atomic_exchange(&warned, 1))
        gml_log(GML_LOG_WARN, "cannot tie a captured graph's memory to the graph's life (CUDA user "
                "objects); its blocks stay allocated until the process exits");
}
