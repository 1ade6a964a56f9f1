/*
 * streams.c — when a freed block may be reused by another stream.
 *
 * A block freed on stream S goes to S's bin: S may reuse it at once, because S's later work runs
 * after the work that used the block.  Another stream T may use it only once the work S had been
 * given before the free has completed.  gmlake records no event per free (a steady loop must make
 * no device calls); instead, when T misses and S's bin holds free blocks, the pool records one
 * event on S (covering every free on S so far, seq <= ev_seq) and queries it.  Once it has
 * completed, those blocks move to the ready bin, which every stream searches.
 * A free with GML_STREAM_NONE (cudaFree, which synchronizes) goes straight to the ready bin.
 * Under memory pressure the pool synchronises the device without its lock (gml_pool_sync):
 * every free up to p->synced_seq has then passed, on every stream.  Nothing here waits.
 *
 * Identity: a bin is keyed by its stream's key (device.h).  Implicit streams name one thread's
 * (per-thread default stream) or one context's (legacy stream) stream, so their keys carry the
 * thread or context, and their events can be recorded only where the stream can be named
 * (gml_dev_stream_here): a thread that cannot sets want_record, and the stream's next call on
 * its bin records (gml_bin_record).  A created stream is keyed by its handle until the program
 * destroys it; then its bin is retired (gml_bin_retire): an event covering its frees is recorded
 * before the real destroy, the bin leaves the handle's name (a new stream reusing the handle gets
 * a fresh bin), and once its blocks have moved to the ready bin it is freed with its event.
 */
#include <stdlib.h>

#include "pool_impl.h"

gml_bin *gml_bin_get(gml_pool *p, gml_stream s)
{
    gml_bin *b = NULL;
    HASH_FIND(hh, p->bins, &s, sizeof s, b);
    if (b)
        return b;
    b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->stream = s;
    b->pool = p;
    for (int i = 0; i < GML_NSPACES; i++)
        RB_INIT(&b->free[i]);
    HASH_ADD(hh, p->bins, stream, sizeof b->stream, b);
    return b;
}

/* Creates bin's event (in this thread's context) if needed and records it on bin's stream. */
static bool record(gml_pool *p, gml_bin *bin)
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

void gml_bin_record(gml_pool *p, gml_bin *bin)
{
    if (!bin->retired && bin != p->ready)
        record(p, bin);
}

bool gml_bin_passed(gml_pool *p, gml_bin *bin, uint64_t seq, bool wait)
{
    (void)wait;
    if (bin == p->ready || bin->done_seq >= seq)
        return true;
    if (p->synced_seq > bin->done_seq) {
        bin->done_seq = p->synced_seq;
        if (bin->done_seq >= seq)
            return true;
    }
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

static void bin_free(gml_pool *p, gml_bin *bin)
{
    /* cached stitched blocks last freed on this bin: its work has passed, they are ready */
    for (gml_sblock *sb = p->lru_head; sb; sb = sb->lru_next)
        if (sb->bin == bin)
            sb->bin = p->ready;
    if (bin->ev)
        gml_dev_event_destroy(p->dev, bin->ev);
    HASH_DEL(p->bins, bin);
    if (p->last_bin == bin)
        p->last_bin = p->ready;
    free(bin);
}

static bool has_cached_stitch(gml_pool *p, gml_bin *bin)
{
    for (gml_sblock *sb = p->lru_head; sb; sb = sb->lru_next)
        if (!sb->live && sb->bin == bin)
            return true;
    return false;
}

/* A retired bin goes once it holds no block, and, if a cached stitched block was last freed on
 * it, once its work has passed (the stitched block may then serve anyone). */
static void retired_reap(gml_pool *p, gml_bin *bin)
{
    if (!bin->retired || bin->nfree)
        return;
    if (!has_cached_stitch(p, bin) || gml_bin_passed(p, bin, bin->retire_seq, false))
        bin_free(p, bin);
}

void gml_bin_retire(gml_pool *p, gml_bin *bin)
{
    if (bin == p->ready || bin->retired)
        return;
    if (bin->nfree || has_cached_stitch(p, bin))
        record(p, bin); /* the stream exists until the real destroy: cover its frees */
    HASH_DEL(p->bins, bin);
    if (p->last_bin == bin)
        p->last_bin = p->ready;
    bin->retired = true;
    bin->retire_seq = p->seq;
    bin->want_record = false;
    bin->stream = GML_BIN_RETIRED | ++p->retired_bins;
    HASH_ADD(hh, p->bins, stream, sizeof bin->stream, bin);
    retired_reap(p, bin);
}

bool gml_bins_hold_blocks(gml_pool *p, gml_bin *except)
{
    gml_bin *bin;
    LIST_FOREACH(bin, &p->holding, holding)
        if (bin != except && bin != p->ready)
            return true;
    return false;
}

size_t gml_promote(gml_pool *p, gml_bin *except, bool wait)
{
    (void)wait;
    size_t moved = 0, cap = 0;
    gml_block **v = NULL;
    gml_bin *bin, *tmp;
    LIST_FOREACH_SAFE(bin, &p->holding, holding, tmp) {
        if (bin == except || bin == p->ready)
            continue;
        /* a retired bin's blocks all go once the work up to its retirement passed (moves inside
         * the bin renumber blocks, but no stream can free into it any more) */
        uint64_t upto;
        if (bin->retired) {
            upto = gml_bin_passed(p, bin, bin->retire_seq, false) ? UINT64_MAX : 0;
        } else {
            gml_bin_passed(p, bin, p->seq, false);
            upto = bin->done_seq;
        }
        if (upto == 0)
            continue;
        /* collect first: moving blocks merges and frees records */
        size_t n = 0;
        gml_block *f;
        for (int s = 0; s < GML_NSPACES; s++)
            RB_FOREACH(f, gml_size_tree, &bin->free[s]) {
                if (f->seq > upto)
                    continue;
                if (n == cap) {
                    size_t nc = cap ? cap * 2 : 64;
                    gml_block **a = realloc(v, nc * sizeof *a);
                    if (!a)
                        goto out;
                    v = a;
                    cap = nc;
                }
                v[n++] = f;
            }
        for (size_t i = 0; i < n; i++) {
            gml_free_tree_remove(v[i]);
            gml_free_insert(p, v[i], p->ready);
        }
        moved += n;
        retired_reap(p, bin);
    }
out:
    free(v);
    return moved;
}

void gml_bins_destroy(gml_pool *p)
{
    gml_bin *bin, *tmp;
    HASH_ITER(hh, p->bins, bin, tmp) {
        if (bin->ev)
            gml_dev_event_destroy(p->dev, bin->ev);
        HASH_DEL(p->bins, bin);
        free(bin);
    }
    p->ready = p->last_bin = NULL;
}
