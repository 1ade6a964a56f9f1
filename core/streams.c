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
 * Under memory pressure the pool waits for the events instead of querying them.
 * The rule itself is gml_bin_serves, which every search of the heap (best fit, growth next to a
 * free block, small refill), of stitching and of release calls (tier 1, contract in heap.h).
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
    for (int i = 0; i < GML_NSPACES; i++)
        RB_INIT(&b->free[i]);
    HASH_ADD(hh, p->bins, stream, sizeof b->stream, b);
    return b;
}

bool gml_bin_passed(gml_heap *p, gml_bin *bin, uint64_t seq, bool wait)
{
    if (bin == p->ready || bin->done_seq >= seq)
        return true;
    /* an event recorded earlier may have completed: learn that before recording a newer one */
    if (bin->ev && bin->ev_seq > bin->done_seq &&
        gml_dev_event_query(p->dev, bin->ev) == GMLAKE_OK) {
        bin->done_seq = bin->ev_seq;
        if (bin->done_seq >= seq)
            return true;
    }
    if (!bin->ev && gml_dev_event_create(p->dev, &bin->ev) != GMLAKE_OK) {
        bin->ev = NULL;
        return false;
    }
    if (bin->ev_seq < seq) {
        if (gml_dev_event_record(p->dev, bin->ev, bin->stream) != GMLAKE_OK)
            return false;
        bin->ev_seq = p->seq;
    }
    int rc = wait ? gml_dev_event_sync(p->dev, bin->ev) : gml_dev_event_query(p->dev, bin->ev);
    if (rc != GMLAKE_OK)
        return false;
    bin->done_seq = bin->ev_seq;
    return true;
}

size_t gml_promote(gml_heap *p, gml_bin *except, bool wait)
{
    size_t moved = 0;
    GML_VEC(gml_block *) v = {0};
    gml_bin *bin, *tmp;
    HASH_ITER(hh, p->bins, bin, tmp) {
        if (bin == p->ready || bin == except || bin->nfree == 0)
            continue;
        if (!gml_bin_passed(p, bin, p->seq, wait) && bin->done_seq == 0)
            continue;
        /* collect first: moving blocks merges and frees records */
        v.n = 0;
        gml_block *f;
        for (int s = 0; s < GML_NSPACES; s++)
            RB_FOREACH(f, gml_size_tree, &bin->free[s]) {
                if (f->seq <= bin->done_seq && !gml_vec_push(&v, f))
                    goto out;
            }
        for (size_t i = 0; i < v.n; i++) {
            gml_free_tree_remove(v.v[i]);
            gml_free_insert(p, v.v[i], p->ready);
        }
        moved += v.n;
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
