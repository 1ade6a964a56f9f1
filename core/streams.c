/*
 * streams.c — when a freed block may be reused by another stream.
 *
 * A block freed on stream S goes to S's bin: S may reuse it at once, because S's later work runs
 * after the work that used the block.  Another stream T may use it only once the work S had been
 * given before the free has completed.  gmlake records no event per free (a steady loop must make
 * no device calls); instead, when T misses and S's bin holds free blocks, the pool records one
 * event on S (covering every free on S so far, seq <= ev_seq) and queries it.  Once it has
 * completed, blocks may move to the ready bin, which every stream searches.  A miss moves only the
 * one block it needs when one fits (gml_promote with need: the smallest block >= need among those
 * known to have passed, else asking only the bins holding one that large), and every passed block
 * only when none fits (for stitching, refills, release).  Moving more would strand S's memory in
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
 * The rule itself is gml_bin_serves, which every search of the heap (best fit, growth next to a
 * free block, small refill), of stitching and of release calls (tier 1, contract in heap.h).
 * A miss walks only the bins holding free blocks (heap->holding, kept by gml_bin_count).
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

bool gml_bin_serves(const gml_heap *h, const gml_bin *from, const gml_bin *to)
{
    return from == h->ready || from == to;
}

bool gml_usable(const gml_heap *h, const gml_block *b, const gml_bin *to)
{
    return b->state == GML_B_FREE && gml_bin_serves(h, b->bin, to);
}

gml_bin *gml_serving_bin_next(const gml_heap *h, const gml_bin *to, const gml_bin *prev)
{
    if (!prev)
        return to ? (gml_bin *)to : h->ready;
    return prev == h->ready ? NULL : h->ready;
}

gml_bin *gml_bin_get(gml_heap *p, gml_stream s)
{
    gml_bin *b = NULL;
    HASH_FIND(hh, p->bins, &s, sizeof s, b);
    if (b)
        return b;
    b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->stream = s;
    b->foreign = !gml_dev_stream_local(p->dev, s);
    b->heap = p;
    for (int i = 0; i < GML_NSPACES; i++)
        RB_INIT(&b->free[i]);
    HASH_ADD(hh, p->bins, stream, sizeof b->stream, b);
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
    if (!bin->ev && gml_dev_event_create(p->dev, &bin->ev) != GMLAKE_OK) {
        bin->ev = NULL;
        return false;
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

/* What is known without a device call: a device synchronisation covers every bin of a stream of
 * this device. */
static inline uint64_t known_done(gml_heap *p, gml_bin *bin)
{
    if (!bin->foreign && p->synced_seq > bin->done_seq)
        bin->done_seq = p->synced_seq;
    return bin->done_seq;
}

bool gml_bin_passed(gml_heap *p, gml_bin *bin, uint64_t seq)
{
    if (bin == p->ready || known_done(p, bin) >= seq)
        return true;
    /* an event recorded earlier may have completed: learn that before recording a newer one */
    if (bin->ev && bin->ev_seq > bin->done_seq &&
        gml_dev_event_query(p->dev, bin->ev) == GMLAKE_OK) {
        bin->done_seq = bin->ev_seq;
        if (bin->done_seq >= seq)
            return true;
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

static void bin_free(gml_heap *p, gml_bin *bin)
{
    if (bin->ev)
        gml_dev_event_destroy(p->dev, bin->ev);
    HASH_DEL(p->bins, bin);
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

void gml_bin_retire(gml_heap *p, gml_bin *bin)
{
    if (bin == p->ready || bin->retired)
        return;
    if (bin->nfree || bin->held)
        record(p, bin); /* the stream exists until the real destroy: cover its frees */
    HASH_DEL(p->bins, bin);
    bin->retired = true;
    bin->retire_seq = p->seq;
    bin->want_record = false;
    bin->stream = GML_BIN_RETIRED | ++p->retired_bins;
    HASH_ADD(hh, p->bins, stream, sizeof bin->stream, bin);
    retired_reap(p, bin);
}

bool gml_bins_hold_blocks(gml_heap *p)
{
    gml_bin *bin;
    LIST_FOREACH(bin, &p->holding, holding)
        if (bin != p->ready)
            return true;
    return false;
}

/* The seq up to which bin's blocks may move to the ready bin (0: none), as far as is known
 * (learning it first when `ask`: an event query, or a record and a query). */
static uint64_t passed_upto(gml_heap *p, gml_bin *bin, bool ask)
{
    /* a retired bin's blocks all go once the work up to its retirement passed (moves inside the
     * bin renumber blocks, but no stream can free into it any more) */
    uint64_t upto = bin->retired ? bin->retire_seq : p->seq;
    bool passed = ask ? gml_bin_passed(p, bin, upto) : known_done(p, bin) >= upto;
    if (bin->retired)
        return passed ? UINT64_MAX : 0;
    return bin->done_seq;
}

static void to_ready(gml_heap *p, gml_block *f)
{
    gml_free_tree_remove(f);
    gml_free_insert(p, f, p->ready);
}

static inline gml_block *nfind(gml_bin *bin, int space, size_t need)
{
    gml_block key = {.size = need, .addr = 0};
    return RB_NFIND(gml_size_tree, &bin->free[space], &key);
}

/* The smallest block of bin's `space` >= need whose work is done up to `upto`, if smaller than
 * `best` (else best). */
static gml_block *passed_in(gml_bin *bin, int space, size_t need, uint64_t upto, gml_block *best)
{
    for (gml_block *f = nfind(bin, space, need); f && (!best || f->size < best->size);
         f = RB_NEXT(gml_size_tree, NULL, f))
        if (f->seq <= upto)
            return f;
    return best;
}

/* One block of `space` >= need, of a stream bin other than `except`, whose work has completed:
 * the smallest of those known to have completed (no device call), else the first found by asking
 * the bins that hold a block large enough (an event each), else NULL. */
static gml_block *passed_fit(gml_heap *p, gml_bin *except, int space, size_t need)
{
    gml_block *best = NULL;
    gml_bin *bin;
    LIST_FOREACH(bin, &p->holding, holding)
        if (bin != except && bin != p->ready)
            best = passed_in(bin, space, need, passed_upto(p, bin, false), best);
    if (best)
        return best;
    LIST_FOREACH(bin, &p->holding, holding)
        if (bin != except && bin != p->ready && nfind(bin, space, need) &&
            (best = passed_in(bin, space, need, passed_upto(p, bin, true), NULL)))
            return best;
    return NULL;
}

size_t gml_promote(gml_heap *p, gml_bin *except, int space, size_t need)
{
    if (need) {
        gml_block *f = passed_fit(p, except, space, need);
        if (f) {
            gml_bin *from = f->bin;
            to_ready(p, f);
            retired_reap(p, from);
            return 1;
        }
    }
    size_t moved = 0;
    GML_VEC(gml_block *) v = {0};
    gml_bin *bin, *tmp;
    LIST_FOREACH_SAFE(bin, &p->holding, holding, tmp) {
        if (bin == except || bin == p->ready)
            continue;
        /* ask each bin once: passed_fit asked those holding a block >= need; a bin holding no
         * block of the large space nor of `space` cannot help this request */
        bool ask = !need || (!nfind(bin, space, need) &&
                             (!RB_EMPTY(&bin->free[GML_SPACE_LARGE]) || !RB_EMPTY(&bin->free[space])));
        uint64_t upto = passed_upto(p, bin, ask);
        if (upto == 0)
            continue;
        /* collect first: moving blocks merges and frees records */
        v.n = 0;
        gml_block *f;
        for (int s = 0; s < GML_NSPACES; s++)
            RB_FOREACH(f, gml_size_tree, &bin->free[s]) {
                if (f->seq <= upto && !gml_vec_push(&v, f))
                    goto out;
            }
        for (size_t i = 0; i < v.n; i++)
            to_ready(p, v.v[i]);
        moved += v.n;
        retired_reap(p, bin);
    }
out:
    gml_vec_free(&v);
    return moved;
}

void gml_bins_destroy(gml_heap *p)
{
    gml_bin *bin, *tmp;
    HASH_ITER(hh, p->bins, bin, tmp) {
        if (bin->ev)
            gml_dev_event_destroy(p->dev, bin->ev);
        HASH_DEL(p->bins, bin);
        free(bin);
    }
    p->ready = NULL;
}
