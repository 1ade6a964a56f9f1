/* graphmem_fuzz.c — a whitebox differential fuzzer of interpose/graphmem.c's free indexes (written
 * by the review of the session-28 index): random operations through its API and its static
 * functions (allocations on two devices and three streams, frees inside the owning capture, inside
 * another and outside any, double frees, captures begun, ended, invalidated, destroyed and reaped,
 * pools named mid-capture and renamed, streams retired, device resets, host allocations failing),
 * the invariants after each (each capture's tree holds exactly its slabs' freed pieces, each pool's
 * tree only pieces of its slabs, the flags agree, no block goes back while the program holds a
 * piece of it), and each reuse compared with the linear search the index replaced (kept here as
 * the oracle).  The pool and the log are stand-ins; no CUDA.
 *   graphmem_fuzz [OPS] [SEED] [CALLOC_FAIL_PERMILLE] [RESETS 0|1]   (prints one ok line, or aborts) */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <stdbool.h>
static unsigned long long rs = 88172645463325252ull;
static unsigned rnd(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (unsigned)(rs >> 11); }
static int calloc_fail_permille, calloc_failures;
static void *t_calloc(size_t n, size_t s)
{
    if (calloc_fail_permille && (int)(rnd() % 1000) < calloc_fail_permille) {
        calloc_failures++;
        return NULL;
    }
    return calloc(n, s);
}
#define calloc t_calloc
#include "interpose/graphmem.c"
#undef calloc

struct gml_real gml_real;
GML_TLS int gml_depth;
void *gml_resolve_one(void **slot, const char *name) { return NULL; }
void gml_ipc_forget(uintptr_t b) {}
void gml_log(int level, const char *fmt, ...) {}
int gml_pool_sync(gml_pool *p) { return GMLAKE_OK; }

/* ---- the model: blocks of two pools, program-held pointers, captures ---- */
enum { NDEV = 2, NSTREAM = 3, MAXB = 100000, MAXH = 100000, MAXC = 4096 };
static char pool_obj[NDEV][64];
#define POOL(d) ((gml_pool *)pool_obj[d])
static struct { uintptr_t ptr; size_t size; int dev; bool live; } blocks[MAXB];
static int nblocks;
static uintptr_t next_addr[NDEV] = {0x100000000ull, 0x900000000000ull};
static struct { uintptr_t ptr; uint64_t owner; int dev; } held[MAXH];
static int nheld;
static struct { uint64_t id; int stream; int state; /* 0 active 1 ended 2 gone */ } caps[MAXC];
static int ncaps;
static uint64_t next_id = 1;
static const uintptr_t streams[NSTREAM] = {0x1100, 0x2200, 0x3300};
static long ops, reuses, share_reuses;

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "op %ld: CHECK failed %s: ", ops, #c); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); abort(); } } while (0)

int gml_pool_free(gml_pool *p, uintptr_t ptr, gml_stream stream)
{
    for (int i = 0; i < nblocks; i++)
        if (blocks[i].live && blocks[i].ptr == ptr) {
            CHECK(POOL(blocks[i].dev) == p, "pool");
            for (int h = 0; h < nheld; h++)
                CHECK(held[h].ptr < ptr || held[h].ptr >= ptr + blocks[i].size, "block %#lx (%zu bytes, dev %d) given back while the program holds %#lx (owner %lu, dev %d)", ptr, blocks[i].size, blocks[i].dev, held[h].ptr, (unsigned long)held[h].owner, held[h].dev);
            blocks[i].live = false;
            return GMLAKE_OK;
        }
    CHECK(0, "free of unknown block %#lx", ptr);
    return 1;
}

/* the parent commit's search */
static void old_best_piece(gslab *list, uint64_t share, int device, gml_stream s, size_t size, gblock **best)
{
    for (gslab *sl = list; sl; sl = sl->next) {
        if (sl->device != device || (share && sl->share != share))
            continue;
        for (gblock *b = sl->pieces; b; b = b->next)
            if (b->state == FREED_IN_CAPTURE && b->freed_on == s && b->size >= size && (!*best || b->size < (*best)->size))
                *best = b;
    }
}
static gblock *old_reuse_pick(uint64_t id, int device, gml_stream s, uintptr_t stream, size_t size, bool *own)
{
    gblock *best = NULL;
    gcap *c = cap_of(id, false);
    uint64_t share = c && c->share ? c->share : share_of(stream);
    if (c)
        old_best_piece(c->slabs, 0, device, s, size, &best);
    *own = best != NULL;
    if (!best && share) {
        gcap *o, *tmp;
        HASH_ITER(hh, by_id, o, tmp)
            if (o != c && o->share == share)
                old_best_piece(o->slabs, share, device, s, size, &best);
        old_best_piece(orphans, share, device, s, size, &best);
    }
    return best;
}

static bool in_own_tree(gcap *c, gblock *b) { return RB_FIND(gfree_tree, &c->own_free, b) == b; }

static void check_piece(gblock *b, gslab *sl, gcap *cap)
{
    gblock *f = NULL;
    HASH_FIND(hh, by_ptr, &b->ptr, sizeof b->ptr, f);
    CHECK(f == b, "piece %#lx not in by_ptr", b->ptr);
    CHECK(b->slab == sl, "slab");
    CHECK(sl->cap == cap, "cap");
    if (b->state != FREED_IN_CAPTURE) {
        CHECK(!b->in_own && !b->in_share, "non-free piece %#lx indexed (state %d own %d share %d)", b->ptr, b->state, b->in_own, b->in_share);
        return;
    }
    CHECK(b->in_own == (cap != NULL), "free piece %#lx: in_own %d, cap %p", b->ptr, b->in_own, (void *)cap);
    if (cap)
        CHECK(in_own_tree(cap, b), "free piece %#lx not in its capture's tree", b->ptr);
    if (!calloc_failures)
        CHECK(b->in_share == (sl->share != 0), "free piece %#lx share %lu in_share %d", b->ptr, (unsigned long)sl->share, b->in_share);
    if (b->in_share) {
        gshare *g = share_entry(sl->share, false);
        CHECK(g, "free piece %#lx in_share but no entry for %lu", b->ptr, (unsigned long)sl->share);
        CHECK(RB_FIND(gshare_tree, &g->free, b) == b, "free piece %#lx not in its pool's tree %lu", b->ptr, (unsigned long)sl->share);
    }
}

static void check_all(void)
{
    long own_flagged = 0, share_flagged = 0, own_nodes = 0, share_nodes = 0;
    gcap *c, *tmp;
    HASH_ITER(hh, by_id, c, tmp) {
        for (gslab *sl = c->slabs; sl; sl = sl->next) {
            CHECK(sl->share == 0 || sl->share == c->share, "slab share %lu, cap share %lu", (unsigned long)sl->share, (unsigned long)c->share);
            uintptr_t at = sl->ptr;
            for (gblock *b = sl->pieces; b; b = b->next) {
                CHECK(b->ptr == at, "tiling");
                at += b->size;
                check_piece(b, sl, c);
                own_flagged += b->in_own;
                share_flagged += b->in_share;
            }
        }
        gblock *prev = NULL, *b;
        RB_FOREACH(b, gfree_tree, &c->own_free) {
            CHECK(b->state == FREED_IN_CAPTURE && b->in_own && b->slab->cap == c, "own tree node %#lx state %d", b->ptr, b->state);
            CHECK(!prev || gfree_cmp(prev, b) < 0, "own order");
            prev = b;
            own_nodes++;
        }
    }
    for (gslab *sl = orphans; sl; sl = sl->next)
        for (gblock *b = sl->pieces; b; b = b->next) {
            check_piece(b, sl, NULL);
            share_flagged += b->in_share;
        }
    for (gslab *sl = parked; sl; sl = sl->next)
        CHECK(!sl->pieces, "parked with pieces");
    gshare *g, *gt;
    HASH_ITER(hh, share_index, g, gt) {
        CHECK(!RB_EMPTY(&g->free), "empty entry %lu", (unsigned long)g->key);
        gblock *prev = NULL, *b;
        RB_FOREACH(b, gshare_tree, &g->free) {
            CHECK(b->state == FREED_IN_CAPTURE && b->in_share && b->slab->share == g->key, "share tree %lu node %#lx: state %d slab share %lu", (unsigned long)g->key, b->ptr, b->state, (unsigned long)b->slab->share);
            CHECK(!prev || gfree_cmp(prev, b) < 0, "share order");
            prev = b;
            share_nodes++;
        }
    }
    CHECK(own_flagged == own_nodes, "own flagged %ld nodes %ld", own_flagged, own_nodes);
    CHECK(share_flagged == share_nodes, "share flagged %ld nodes %ld", share_flagged, share_nodes);
    CHECK(HASH_COUNT(by_ptr) == (unsigned)atomic_load(&tracked), "tracked");
}

static int active_of_stream(int s)
{
    for (int i = 0; i < ncaps; i++)
        if (caps[i].state == 0 && caps[i].stream == s)
            return i;
    return -1;
}
static int pick_cap(int state)
{
    int idx[MAXC], n = 0;
    for (int i = 0; i < ncaps; i++)
        if (caps[i].state == state)
            idx[n++] = i;
    return n ? idx[rnd() % n] : -1;
}

static void op_alloc(void)
{
    int ci = pick_cap(0);
    if (ci < 0)
        return;
    uint64_t id = caps[ci].id;
    int dev = rnd() % 8 == 0 ? 1 : 0;
    gml_stream s = rnd() % 4 ? streams[caps[ci].stream] : streams[rnd() % NSTREAM];
    static const size_t sizes[] = {512, 1000, 4096, 65536, 1 << 20, 3 << 19, 2 << 20, 4 << 20, 8 << 20};
    size_t size = sizes[rnd() % (sizeof sizes / sizeof *sizes)];
    if (rnd() % 4 == 0)
        size = 1 + rnd() % (4 << 20);
    bool own;
    gblock *old = old_reuse_pick(id, dev, s, s, size, &own);
    size_t old_size = old ? old->size : 0;
    if (!calloc_failures) {
        pthread_mutex_lock(&mu);
        gcap *c = cap_of(id, false);
        uint64_t share = c && c->share ? c->share : share_of(s);
        gblock *nb = c ? best_fit(c, 0, dev, s, size) : NULL;
        if (!nb && share)
            nb = best_fit(NULL, share, dev, s, size);
        pthread_mutex_unlock(&mu);
        CHECK((nb ? nb->size : 0) == old_size, "new pick size %zu, old %zu", nb ? nb->size : 0, old_size);
    }
    uintptr_t out = 0;
    bool hit = gml_graph_reuse(id, dev, s, s, size, &out);
    if (!calloc_failures) {
        CHECK(hit == (old != NULL), "reuse hit %d, old %d (size %zu dev %d stream %#lx cap %lu)", hit, old != NULL, size, dev, s, (unsigned long)id);
        if (hit) {
            gblock *b = NULL;
            HASH_FIND(hh, by_ptr, &out, sizeof out, b);
            CHECK(b && b->state == LIVE, "live");
            /* the piece may have been cut: its original size is what old saw */
            size_t got = b->size + (b->next && b->next->ptr == b->ptr + b->size && b->next->state == FREED_IN_CAPTURE && b->next->freed_on == s ? 0 : 0);
            (void)got;
            CHECK(b->slab->device == dev, "device");
            if (own)
                CHECK(b->slab->cap && b->slab->cap->id == id, "own pick expected, got slab of cap %p", (void *)b->slab->cap);
        }
    }
    (void)old_size;
    if (hit) {
        reuses++;
        gblock *b = NULL;
        HASH_FIND(hh, by_ptr, &out, sizeof out, b);
        CHECK(b && b->state == LIVE && b->size >= size && b->slab->device == dev, "hit piece");
        if (!(b->slab->cap && b->slab->cap->id == id))
            share_reuses++;
    } else {
        out = next_addr[dev];
        size_t bs = (size + 511) & ~(size_t)511;
        next_addr[dev] += bs + 4096;
        CHECK(nblocks < MAXB, "blocks");
        blocks[nblocks++] = (typeof(blocks[0])){out, bs, dev, true};
        if (!gml_graph_note(id, POOL(dev), dev, s, out, size)) {
            blocks[nblocks - 1].live = false;
            return;
        }
    }
    CHECK(nheld < MAXH, "held");
    held[nheld++] = (typeof(held[0])){out, id, dev};
}

static void op_free(void)
{
    if (!nheld)
        return;
    int h = rnd() % nheld;
    uintptr_t ptr = held[h].ptr;
    uint64_t owner = held[h].owner;
    int mode = rnd() % 10; if (rnd() % 2) { for (int i = 0; i < ncaps; i++) if (caps[i].id == owner && caps[i].state == 0) mode = 0; }
    uint64_t in = 0;
    gml_stream s;
    if (mode < 6) { /* inside its own capture when it is still active */
        int ci = -1;
        for (int i = 0; i < ncaps; i++)
            if (caps[i].id == owner && caps[i].state == 0)
                ci = i;
        if (ci < 0)
            return;
        in = owner;
        s = rnd() % 5 ? streams[caps[ci].stream] : streams[rnd() % NSTREAM];
    } else if (mode < 8) { /* in another capture */
        int ci = pick_cap(0);
        if (ci < 0)
            return;
        in = caps[ci].id;
        s = streams[caps[ci].stream];
    } else
        s = rnd() % 2 ? GML_STREAM_NONE : streams[rnd() % NSTREAM];
    typeof(held[0]) keep = held[h];
    held[h] = held[--nheld];
    int r = gml_graph_free(ptr, in, s, rnd() % 2);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        held[nheld++] = keep;
        return;
    }
    CHECK(r == CUDA_SUCCESS, "free %#lx: %d", ptr, r);
    if (rnd() % 8 == 0) {
        int r2 = gml_graph_free(ptr, in, s, true);
        CHECK(r2 == CUDA_ERROR_INVALID_VALUE || r2 == GML_GRAPH_NOT_MINE, "double free");
    }
}

static void op_begin(void)
{
    int s = rnd() % NSTREAM;
    if (active_of_stream(s) >= 0 || ncaps == MAXC)
        return;
    caps[ncaps++] = (typeof(caps[0])){next_id++, s, 0};
}
static void op_end(void)
{
    int ci = pick_cap(0);
    if (ci < 0)
        return;
    caps[ci].state = 1;
    if (rnd() % 10 == 0) { /* invalidated: released at its end */
        gml_graph_ended(caps[ci].id, NULL);
        caps[ci].state = 2;
    }
}
static void op_destroy(void)
{
    int ci = pick_cap(1);
    if (ci < 0)
        return;
    caps[ci].state = 2;
    pthread_mutex_lock(&mu);
    gcap *c = cap_of(caps[ci].id, false);
    pthread_mutex_unlock(&mu);
    if (c)
        graph_gone(c);
    if (rnd() % 2)
        gml_graph_reap(rnd() % 2);
}
static void op_name(void)
{
    int s = rnd() % NSTREAM;
    uint64_t pool = rnd() % 4;
    gmlake_graph_pool((void *)streams[s], pool);
}
static void op_rename(void)
{
    uint64_t from = 1 + rnd() % 4, to = 1 + rnd() % 4;
    CHECK(gmlake_graph_pool_rename(from, to) == GMLAKE_OK, "rename");
}
static void op_reset(void)
{
    int dev = rnd() % NDEV;
    gml_graph_forget_pool(POOL(dev));
    for (int i = 0; i < nheld;)
        if (held[i].dev == dev)
            held[i] = held[--nheld];
        else
            i++;
    for (int i = 0; i < nblocks; i++)
        if (blocks[i].dev == dev)
            blocks[i].live = false;
}
static void op_retire(void) { gml_graph_stream_retired(streams[rnd() % NSTREAM]); }

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    rs ^= argc > 2 ? strtoull(argv[2], NULL, 0) * 0x9E3779B97F4A7C15ull : 0;
    calloc_fail_permille = argc > 3 ? atoi(argv[3]) : 0;
    bool resets = argc > 4 ? atoi(argv[4]) : 1;
    for (ops = 0; ops < n; ops++) {
        unsigned k = rnd() % 1000;
        if (k < 350) op_alloc();
        else if (k < 700) op_free();
        else if (k < 760) op_begin();
        else if (k < 820) op_end();
        else if (k < 900) op_destroy();
        else if (k < 950) op_name();
        else if (k < 975) op_rename();
        else if (k < 980) op_retire();
        else if (k < 982 && resets) op_reset();
        else gml_graph_reap(rnd() % 2);
        check_all();
    }
    printf("ok: %ld ops, %ld reuses (%ld from others), %d calloc failures, %u pieces tracked\n", ops, reuses, share_reuses, calloc_failures, HASH_COUNT(by_ptr));
    return 0;
}
