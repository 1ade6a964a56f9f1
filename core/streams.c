/*
 * streams.c — when a freed block may be reused by another stream.
 *
 * A block freed on stream S goes to S's bin: S may reuse it at once, because S's later work runs
 * after the work that used the block.  Another stream T may use it only once the work S had been
 * given before the free has completed.  gmlake records no event per free (a steady loop must make
 * no device calls); instead, when T misses and S's bin holds free blocks, the pool records one
 * event on S (covering every free on S so far, seq <= ev_seq) and queries it.  Once it has
 * completed, blocks may move.  A miss moves only the one block it needs when one fits
 * (gml_promote with need: the smallest block >= need among those known to have passed, else asking
 * only the bins holding one that large), into T's bin, where T's later frees merge with what T's
 * request leaves of it; and every passed block, to the ready bin that every stream searches, only
 * when none fits (for stitching, refills, release).  Moving more would strand S's memory in
 * pieces: S's later frees never merge with a ready neighbour (blocks.c), so S's memory split
 * between its bin and the ready bin no longer serves S's large requests whole.  On issue 10's
 * two-stream offload trace, where a side stream's 16-64 KiB misses used to move all of the main
 * stream's free memory, that cost 11 more stitches and 3,180 device calls in its second half.
 * A free with GML_STREAM_NONE (cudaFree, which synchronizes) goes straight to the ready bin.
 * Under memory pressure the pool synchronises the device without its lock (gml_pool_sync):
 * every free up to heap->synced_seq has then passed, on every stream of this device.  A bin of
 * another device's stream (a stream-ordered free may name any stream; gml_dev_stream_local,
 * asked once when the bin is made) is `foreign`: only its own event says its work passed.
 * Nothing here waits.
 * The rule itself is gml_bin_serves (bins.c), which every search of the heap (best fit, growth
 * next to a free block, small refill), of stitching and of release calls (tier 1, contract in
 * heap.h).  A miss walks no list of bins or blocks: the blocks known to have passed are in one
 * size tree over every bin, the others in their bin's tree by seq, and the bins a miss may ask
 * are ordered by their largest block (bins.c keeps these indexes as blocks come and go); a
 * promotion costs the logarithm of blocks and bins, plus one step per bin it asks (an event
 * record and query, as before) and per block it moves.  Among bins holding a block that fits,
 * the one whose largest block is the smallest is asked first (until issue 23, the bin that last
 * began holding blocks); a bin whose blocks are all known to have passed is not asked.
 *
 * Identity: a bin is keyed by its stream's key (device.h).  Implicit streams name one thread's
 * (per-thread default stream) or one context's (legacy stream) stream, so their keys carry the
 * thread or context, and their events can be recorded only where the stream can be named
 * (gml_dev_stream_here): a thread that cannot sets want_record, and the stream's next call on
 * its bin records (gml_bin_record).  A created stream is keyed by its handle until the program
 * destroys it; then its bin is retired (gml_bin_retire): an event covering its frees is recorded
 * before the real destroy, the bin leaves the handle's name (a new stream reusing the handle gets
 * a fresh bin), and once its blocks have moved to the ready bin and no upper record names it
 * (gml_bin_hold) it is freed with its event.
 */
#include <stdlib.h>

#include "heap.h"

/* ---- the map of bins by stream key ---- */
static inline size_t home_of(const gml_heap *p, gml_stream s)
{
    uint64_t k = s ^ (s >> 29);
    k *= UINT64_C(0xbf58476d1ce4e5b9);
    return (size_t)(k ^ (k >> 32)) & (p->bin_cap - 1);
}

gml_bin *gml_bin_find(gml_heap *p, gml_stream s)
{
    if (!p->bin_cap)
        return NULL;
    for (size_t i = home_of(p, s);; i = (i + 1) & (p->bin_cap - 1)) {
        const struct gml_bin_slot *e = &p->bin_map[i];
        if (!e->bin || e->key == s)
            return e->bin;
    }
}

static void map_put(gml_heap *p, gml_bin *bin)
{
    size_t i = home_of(p, bin->stream);
    while (p->bin_map[i].bin)
        i = (i + 1) & (p->bin_cap - 1);
    p->bin_map[i] = (struct gml_bin_slot){bin->stream, bin};
    p->bin_used++;
}

/* Room for one more (at most half full); false on host out of memory. */
static bool map_room(gml_heap *p)
{
    if (2 * (p->bin_used + 1) <= p->bin_cap)
        return true;
    size_t cap = p->bin_cap ? 2 * p->bin_cap : 16, old = p->bin_cap;
    struct gml_bin_slot *m = calloc(cap, sizeof *m), *was = p->bin_map;
    if (!m)
        return false;
    p->bin_map = m;
    p->bin_cap = cap;
    p->bin_used = 0;
    for (size_t i = 0; i < old; i++)
        if (was[i].bin)
            map_put(p, was[i].bin);
    free(was);
    return true;
}

/* Takes bin out of the map (backward shift: no tombstones). */
static void map_del(gml_heap *p, gml_bin *bin)
{
    size_t mask = p->bin_cap - 1, i = home_of(p, bin->stream);
    while (p->bin_map[i].bin != bin)
        i = (i + 1) & mask;
    for (size_t j = (i + 1) & mask; p->bin_map[j].bin; j = (j + 1) & mask) {
        size_t k = home_of(p, p->bin_map[j].key);
        /* the entry at j may move to the hole at i unless its home lies in (i, j] */
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (!stays) {
            p->bin_map[i] = p->bin_map[j];
            i = j;
        }
    }
    p->bin_map[i] = (struct gml_bin_slot){0, NULL};
    p->bin_used--;
}

gml_bin *gml_bin_get(gml_heap *p, gml_stream s)
{
    gml_bin *b = gml_bin_find(p, s);
    if (b)
        return b;
    if (!map_room(p) || !(b = calloc(1, sizeof *b)))
        return NULL;
    b->stream = s;
    b->foreign = !gml_dev_stream_local(p->dev, s);
    b->heap = p;
    for (int i = 0; i < GML_NSPACES; i++)
        RB_INIT(&b->free[i]);
    TAILQ_INIT(&b->pending);
    map_put(p, b);
    LIST_INSERT_HEAD(&p->all_bins, b, all);
    p->nbins++;
    return b;
}

/* Creates bin's event (in this thread's context) if needed and records it on bin's stream. */
static bool record(gml_heap *p, gml_bin *bin)
{
    if (!gml_dev_stream_here(p->dev, bin->stream)) {
        bin->want_record = true;
        return false;
    }
    bin->want_record = false;
    if (!bin->ev) {
        if (gml_dev_event_create(p->dev, &bin->ev) != GMLAKE_OK) {
            bin->ev = NULL;
            return false;
        }
        bin->ev_ctx = gml_dev_current_context(p->dev);
    }
    if (gml_dev_event_record(p->dev, bin->ev, bin->stream) != GMLAKE_OK)
        return false;
    bin->ev_seq = p->seq;
    return true;
}

void gml_bin_record(gml_heap *p, gml_bin *bin)
{
    if (!bin->retired && bin != p->ready)
        record(p, bin);
}

/* gml_bin_passed's answer; the bin's blocks are settled by the caller. */
static bool bin_passed(gml_heap *p, gml_bin *bin, uint64_t seq)
{
    if (bin == p->ready || gml_bin_known_done(p, bin) >= seq)
        return true;
    /* an event recorded earlier may have completed: learn that before recording a newer one;
     * one that covers seq and has not completed is the answer (asked again, it would tell the
     * same: a second query of it here doubled every miss's) */
    if (bin->ev && bin->ev_seq > bin->done_seq) {
        if (gml_dev_event_query(p->dev, bin->ev) != GMLAKE_OK) {
            if (bin->ev_seq >= seq)
                return false;
        } else {
            bin->done_seq = bin->ev_seq;
            if (bin->done_seq >= seq)
                return true;
        }
    }
    if (bin->retired)
        return false; /* the stream is gone: only its last event or a device sync can tell */
    if (bin->ev_seq < seq && !record(p, bin))
        return false;
    if (!bin->ev || gml_dev_event_query(p->dev, bin->ev) != GMLAKE_OK)
        return false;
    bin->done_seq = bin->ev_seq;
    return bin->done_seq >= seq;
}

bool gml_bin_passed(gml_heap *p, gml_bin *bin, uint64_t seq)
{
    uint64_t before = bin->done_seq;
    bool passed = bin_passed(p, bin, seq);
    if (bin->done_seq != before)
        gml_bin_settle(p, bin);
    return passed;
}

static void bin_free(gml_heap *p, gml_bin *bin)
{
    gml_bin_forget(p, bin);
    if (bin->ev)
        gml_dev_event_destroy(p->dev, bin->ev);
    if (!bin->retired)
        map_del(p, bin);
    LIST_REMOVE(bin, all);
    p->nbins--;
    free(bin);
}

/* A retired bin goes once it holds no block and no upper record names it. */
static void retired_reap(gml_heap *p, gml_bin *bin)
{
    if (bin->retired && !bin->nfree && !bin->held)
        bin_free(p, bin);
}

void gml_bin_unhold(gml_heap *p, gml_bin *bin)
{
    bin->held--;
    retired_reap(p, bin);
}

/* Retires bin with the event it has (gml_bin_retire, gml_bins_context_ends). */
static void retire(gml_heap *p, gml_bin *bin)
{
    map_del(p, bin); /* out of the stream's name: a new stream with its handle starts afresh */
    bin->retired = true;
    bin->retire_seq = p->seq;
    bin->want_record = false;
    bin->stream = GML_BIN_RETIRED | ++p->retired_bins;
    gml_bin_settle(p, bin); /* all its blocks or none, from now on */
    retired_reap(p, bin);
}

void gml_bin_retire(gml_heap *p, gml_bin *bin)
{
    if (bin == p->ready || bin->retired)
        return;
    if (bin->nfree || bin->held)
        record(p, bin); /* the stream exists until the real destroy: cover its frees */
    retire(p, bin);
}

/* Whether bin's stream is known to be of context ctx: its event of ctx was recorded on it (ev_seq
 * > 0 only after a record succeeded), or it is ctx's legacy stream. */
static bool stream_of_context(const gml_bin *bin, uintptr_t ctx)
{
    return (bin->ev && bin->ev_ctx == ctx && bin->ev_seq) || bin->stream == gml_stream_legacy(ctx);
}

/* ctx ends (contract in heap.h); bin is a stream bin. */
static void context_ends(gml_heap *p, gml_bin *bin, uintptr_t ctx, bool synced)
{
    bool ours = stream_of_context(bin, ctx);
    if (bin->ev && bin->ev_ctx == ctx) {
        gml_dev_event_destroy(p->dev, bin->ev);
        bin->ev = NULL; /* a retired bin then waits for a device sync; another records anew */
    }
    if (!ours)
        return;
    if (synced && bin->done_seq < p->seq)
        bin->done_seq = p->seq; /* its stream is ctx's, and ctx's work has completed */
    if (!synced)
        bin->foreign = false; /* ctx's work ends with it: a synchronisation of this device after
                               * the end covers it (another context of this device, or another
                               * device's) */
    if (bin->retired)
        gml_bin_settle(p, bin);
    else
        retire(p, bin); /* settles; the stream ends with its context */
}

void gml_bins_context_ends(gml_heap *p, uintptr_t ctx, bool synced)
{
    gml_bin *bin, *tmp;
    LIST_FOREACH_SAFE(bin, &p->all_bins, all, tmp)
        if (bin != p->ready)
            context_ends(p, bin, ctx, synced);
}

bool gml_bins_hold_blocks(gml_heap *p)
{
    gml_bin *bin;
    LIST_FOREACH(bin, &p->holding, holding)
        if (bin != p->ready)
            return true;
    return false;
}

/* A device synchronisation since the last look: every bin of this device with pending blocks
 * learns it (each such bin is visited once per synchronisation; almost all of them empty their
 * pending blocks, which were freed before it). */
static void settle_synced(gml_heap *p)
{
    if (p->synced_seq <= p->synced_applied)
        return;
    p->synced_applied = p->synced_seq;
    for (int s = 0; s < GML_NSPACES; s++) {
        gml_bin *bin, *tmp;
        LIST_FOREACH_SAFE(bin, &p->pend_bins[s], pend_link[s], tmp)
            if (!bin->foreign)
                gml_bin_settle(p, bin);
    }
}

/* Asks bin (an event record and query as needed) whether its work up to now has passed; its
 * blocks below what it learnt move to heap->passed. */
static void ask(gml_heap *p, gml_bin *bin)
{
    gml_bin_passed(p, bin, bin->retired ? bin->retire_seq : p->seq);
}

/* Moves free block f into bin `to` (a fresh seq there: what to's stream does from now on). */
static void move_to(gml_heap *p, gml_block *f, gml_bin *to)
{
    gml_free_tree_remove(f);
    gml_free_insert(p, f, to);
}

static void to_ready(gml_heap *p, gml_block *f) { move_to(p, f, p->ready); }

/* The smallest block of `space` >= need known to have passed, not of bin `except` (the first bin
 * in holding order, the lowest address, among equal sizes). */
static gml_block *passed_first(gml_heap *p, gml_bin *except, int space, size_t need)
{
    gml_bin kb;
    kb.hold_stamp = UINT64_MAX;
    gml_block key;
    key.size = need;
    key.addr = 0;
    key.bin = &kb;
    gml_block *f = RB_NFIND(gml_passed_tree, &p->passed[space], &key);
    while (f && f->bin == except)
        f = RB_NEXT(gml_passed_tree, &p->passed[space], f);
    return f;
}

static gml_bin *cand_first(gml_heap *p, int space, size_t need)
{
    gml_bin key;
    key.ckey_stamp[space] = UINT64_MAX;
    key.ckey_max[space] = need;
    return space == GML_SPACE_LARGE ? RB_NFIND(gml_cand_large, &p->cand_large, &key)
                                    : RB_NFIND(gml_cand_small, &p->cand_small, &key);
}

static gml_bin *cand_next(int space, gml_bin *bin)
{
    return space == GML_SPACE_LARGE ? RB_NEXT(gml_cand_large, NULL, bin)
                                    : RB_NEXT(gml_cand_small, NULL, bin);
}

/* The bin whose largest block of `space` is the largest, and the ones before it in that order. */
static gml_bin *cand_last(gml_heap *p, int space)
{
    return space == GML_SPACE_LARGE ? RB_MAX(gml_cand_large, &p->cand_large)
                                    : RB_MAX(gml_cand_small, &p->cand_small);
}

static gml_bin *cand_prev(int space, gml_bin *bin)
{
    return space == GML_SPACE_LARGE ? RB_PREV(gml_cand_large, NULL, bin)
                                    : RB_PREV(gml_cand_small, NULL, bin);
}

/* One block of `space` >= need, of a stream bin other than `except`, whose work has completed:
 * the smallest of those known to have completed (no device call), else the first found by asking
 * the bins that hold a block large enough (an event each; the bin whose largest block is the
 * smallest first), else NULL. */
static gml_block *passed_fit(gml_heap *p, gml_bin *except, int space, size_t need)
{
    gml_block *f = passed_first(p, except, space, need);
    if (f)
        return f;
    /* none fits among the known: the blocks that fit are all pending, so a block that passes
     * when a bin is asked is that bin's */
    for (gml_bin *bin = cand_first(p, space, need); bin; bin = cand_next(space, bin)) {
        if (bin == except)
            continue;
        bin->asked = p->ask_round;
        ask(p, bin);
        if ((f = passed_first(p, except, space, need)))
            return f;
    }
    return NULL;
}

static void reap_if_empty(gml_heap *p, gml_bin *bin)
{
    if (!bin->nfree)
        retired_reap(p, bin);
}

size_t gml_promote(gml_heap *p, gml_bin *except, int space, size_t need)
{
    settle_synced(p);
    gml_bin_cand_flush(p);
    p->ask_round++; /* bins asked in this promotion: bin->asked == ask_round */
    if (need) {
        gml_block *f = passed_fit(p, except, space, need);
        if (f) {
            gml_bin *from = f->bin;
            /* to the asking stream's bin, where its own frees merge with what its request
             * leaves of the block (in the ready bin they never would: blocks.c) */
            move_to(p, f, except && !except->retired ? except : p->ready);
            retired_reap(p, from);
            return 1;
        }
    }
    /* Ask each bin with pending blocks once (passed_fit asked those holding a block >= need; for
     * a large miss, a bin whose pending blocks are all small cannot help), then move every
     * block known to have passed. */
    bool any = !need || space == GML_SPACE_SMALL;
    for (int s = any ? GML_SPACE_SMALL : GML_SPACE_LARGE; s >= 0; s--) {
        gml_bin *bin, *tmp;
        LIST_FOREACH_SAFE(bin, &p->pend_bins[s], pend_link[s], tmp)
            if (bin != except && bin->asked != p->ask_round) {
                bin->asked = p->ask_round;
                ask(p, bin);
            }
    }
    size_t moved = 0;
    GML_VEC(gml_block *) v = {0};
    gml_bin *bin, *tmp;
    LIST_FOREACH_SAFE(bin, &p->passed_bins, passed_link, tmp) {
        if (bin == except)
            continue;
        /* collect first: moving blocks merges and frees records; moving the bin's last block
         * may free the bin (retired), so it leaves passed_bins first */
        v.n = 0;
        gml_block *f;
        LIST_FOREACH(f, &bin->passed, lnode)
            if (!gml_vec_push(&v, f))
                goto out;
        for (size_t i = 0; i < v.n; i++)
            to_ready(p, v.v[i]);
        moved += v.n;
        reap_if_empty(p, bin);
    }
out:
    gml_vec_free(&v);
    return moved;
}

/* Whether stream bin `bin` may take another stream's busy blocks by a GPU-side wait. */
static bool may_borrow(gml_heap *p, const gml_bin *bin)
{
    return p->stream_wait && bin != p->ready && !bin->retired && gml_dev_stream_here(p->dev, bin->stream);
}

/* Makes bin's stream wait on the GPU for the work of `from` up to `seq` (from's event when it was
 * recorded after seq, else a new one); false when that cannot be done. */
static bool wait_for(gml_heap *p, gml_bin *bin, gml_bin *from, uint64_t seq)
{
    /* the event the wait names must capture the block's free: one recorded after it */
    if (!from->ev || from->ev_seq < seq) {
        if (from->retired || !record(p, from))
            return false;
    }
    return gml_dev_stream_wait(p->dev, bin->stream, from->ev) == GMLAKE_OK;
}

size_t gml_borrow(gml_heap *p, gml_bin *bin, int space, size_t need)
{
    if (!may_borrow(p, bin))
        return 0;
    gml_bin_cand_flush(p);
    for (gml_bin *from = cand_first(p, space, need); from; from = cand_next(space, from)) {
        if (from == bin)
            continue;
        gml_block key;
        key.size = need;
        key.addr = 0;
        gml_block *f = RB_NFIND(gml_size_tree, &from->free[space], &key);
        if (!f || !wait_for(p, bin, from, f->seq))
            continue;
        move_to(p, f, bin);
        retired_reap(p, from);
        return 1;
    }
    return 0;
}

size_t gml_borrow_all(gml_heap *p, gml_bin *bin, int space, size_t want)
{
    if (!may_borrow(p, bin))
        return 0;
    gml_bin_cand_flush(p);
    gml_bin *lenders[GML_BORROW_BINS];
    uint64_t latest[GML_BORROW_BINS]; /* the latest free among a lender's blocks: its wait covers them all */
    size_t bytes = 0;
    int n = 0;
    gml_bin *from;
    for (from = cand_last(p, space); from && n < GML_BORROW_BINS; from = cand_prev(space, from)) {
        if (from == bin || from == p->ready || from->retired || RB_EMPTY(&from->free[space]))
            continue;
        gml_block *f;
        latest[n] = 0;
        RB_FOREACH(f, gml_size_tree, &from->free[space]) {
            bytes += f->size;
            if (f->seq > latest[n])
                latest[n] = f->seq;
        }
        lenders[n++] = from;
    }
    if (bytes < want) /* waits that cannot spare the growth: none */
        return 0;
    size_t moved = 0;
    for (int i = 0; i < n; i++) {
        from = lenders[i];
        if (!wait_for(p, bin, from, latest[i]))
            continue;
        gml_block *f;
        while ((f = RB_MIN(gml_size_tree, &from->free[space]))) {
            move_to(p, f, bin);
            moved++;
        }
    }
    return moved;
}

size_t gml_join_for(gml_heap *p, gml_bin *bin, int space, size_t need)
{
    if (bin == p->ready)
        return 0;
    int tries = 0;
    for (gml_block *f = RB_MAX(gml_size_tree, &bin->free[space]); f && tries < GML_JOIN_TRIES;
         f = RB_PREV(gml_size_tree, &bin->free[space], f), tries++) {
        if (gml_ready_run(p, f) >= need) {
            gml_join_ready(p, f);
            return 1;
        }
    }
    return 0;
}

void gml_bins_destroy(gml_heap *p)
{
    gml_bin *bin;
    while ((bin = LIST_FIRST(&p->all_bins))) {
        if (bin->ev)
            gml_dev_event_destroy(p->dev, bin->ev);
        LIST_REMOVE(bin, all);
        free(bin);
    }
    free(p->bin_map);
    p->bin_map = NULL;
    p->bin_cap = p->bin_used = p->nbins = 0;
    p->ready = NULL;
}
