/*
 * bins.c — what a bin holds and what is known of it, under both blocks.c (which puts blocks in
 * and takes them out) and streams.c (which decides what moves between bins): the bins' size trees,
 * the one rule of cross-stream reuse (gml_bin_serves, and the serving-bin iterator every search
 * goes through), what is known of a bin's work without a device call (gml_bin_known_done,
 * gml_bin_threshold), and the indexes a miss searches (tier 1, contract in heap.h).  It calls
 * neither file, so the two never call each other (tests/calls.py).
 *
 * The reuse rule: a block freed on stream S goes to S's bin and may serve S at once; any other
 * stream only once it reached that stream's bin or the ready bin (streams.c: gml_promote moves it
 * once S's work up to the free has passed, gml_borrow after a GPU-side wait).
 */
#include <stdlib.h>

#include "heap.h"

static int gml_size_cmp(const gml_block *a, const gml_block *b)
{
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    return a->addr < b->addr ? -1 : (a->addr > b->addr);
}

RB_GENERATE(gml_size_tree, gml_block, snode, gml_size_cmp)

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

/* What is known without a device call: a device synchronisation covers every bin of a stream of
 * this device. */
uint64_t gml_bin_known_done(gml_heap *p, gml_bin *bin)
{
    if (!bin->foreign && p->synced_seq > bin->done_seq)
        bin->done_seq = p->synced_seq;
    return bin->done_seq;
}

/* ---- the indexes a miss searches ----
 * A miss must not walk every bin, block or pending free (a server making a stream per request
 * has as many bins as requests).  Every free block of a stream bin is in exactly one of:
 *  heap->passed[space]  known to have passed (seq <= gml_bin_threshold of its bin, no device call
 *                       needed), all bins together, by (size, bin holding order, addr): the
 *                       smallest that fits is the one a miss promotes first; also on its bin's
 *                       `passed` list (a promotion of every passed block walks heap->passed_bins);
 *  bin->pending         not known yet, a list in seq order (a new free has the largest seq and
 *                       goes last; a split or a carve keeps the block's place, gml_pend_pos):
 *                       when the bin's threshold rises (an event query, a device
 *                       synchronisation) the blocks below it move to heap->passed from its head.
 * heap->cand_large / cand_small order the stream bins holding blocks of a space by their largest
 * one: the bins a miss may ask (record and query an event) are those whose largest block fits.
 * The hot path only marks a bin whose largest block changed (heap->cand_dirty); the next
 * promotion places it again (gml_bin_cand_flush): one placement per promotion and marked bin.
 * heap->pend_bins[space] lists the bins with pending blocks of a space: the ones a promotion of
 * everything asks.  A device synchronisation (heap->synced_seq, written by the layer above) is
 * applied to the indexes at the next promotion (settle_synced). */

static int gml_passed_cmp(const gml_block *a, const gml_block *b)
{
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    if (a->bin->hold_stamp != b->bin->hold_stamp) /* holding order: the latest first */
        return a->bin->hold_stamp > b->bin->hold_stamp ? -1 : 1;
    return a->addr < b->addr ? -1 : (a->addr > b->addr);
}

static int gml_cand_cmp(const gml_bin *a, const gml_bin *b, int space)
{
    if (a->ckey_max[space] != b->ckey_max[space])
        return a->ckey_max[space] < b->ckey_max[space] ? -1 : 1;
    if (a->ckey_stamp[space] != b->ckey_stamp[space])
        return a->ckey_stamp[space] > b->ckey_stamp[space] ? -1 : 1;
    return a < b ? -1 : (a > b);
}
static int cand_large_cmp(const gml_bin *a, const gml_bin *b) { return gml_cand_cmp(a, b, GML_SPACE_LARGE); }
static int cand_small_cmp(const gml_bin *a, const gml_bin *b) { return gml_cand_cmp(a, b, GML_SPACE_SMALL); }

RB_GENERATE(gml_passed_tree, gml_block, pnode, gml_passed_cmp)
RB_GENERATE(gml_cand_large, gml_bin, cnode_large, cand_large_cmp)
RB_GENERATE(gml_cand_small, gml_bin, cnode_small, cand_small_cmp)

uint64_t gml_bin_threshold(gml_heap *p, gml_bin *bin)
{
    uint64_t d = gml_bin_known_done(p, bin);
    if (bin->retired) /* all its blocks go once the work up to its retirement passed (moves
                       * inside the bin renumber blocks, but no stream frees into it any more) */
        return d >= bin->retire_seq ? UINT64_MAX : 0;
    return d;
}

/* bin's largest block or holding order changed: it is placed again at the next promotion. */
static inline void cand_touch(gml_heap *p, gml_bin *bin)
{
    if (!bin->cdirty) {
        bin->cdirty = true;
        LIST_INSERT_HEAD(&p->cand_dirty, bin, dirty_link);
    }
}

static void cand_place(gml_heap *p, gml_bin *bin, int space, bool in)
{
    if (space == GML_SPACE_LARGE) {
        if (in)
            RB_INSERT(gml_cand_large, &p->cand_large, bin);
        else
            RB_REMOVE(gml_cand_large, &p->cand_large, bin);
    } else {
        if (in)
            RB_INSERT(gml_cand_small, &p->cand_small, bin);
        else
            RB_REMOVE(gml_cand_small, &p->cand_small, bin);
    }
}

void gml_bin_cand_flush(gml_heap *p)
{
    gml_bin *bin;
    while ((bin = LIST_FIRST(&p->cand_dirty))) {
        LIST_REMOVE(bin, dirty_link);
        bin->cdirty = false;
        for (int s = 0; s < GML_NSPACES; s++) {
            if (bin->ckey_max[s] == bin->cmax[s] && bin->ckey_stamp[s] == bin->hold_stamp)
                continue;
            if (bin->ckey_max[s])
                cand_place(p, bin, s, false);
            bin->ckey_max[s] = bin->cmax[s];
            bin->ckey_stamp[s] = bin->hold_stamp;
            if (bin->ckey_max[s])
                cand_place(p, bin, s, true);
        }
    }
}

void gml_bin_forget(gml_heap *p, gml_bin *bin)
{
    if (bin->cdirty)
        LIST_REMOVE(bin, dirty_link);
    bin->cdirty = false;
    for (int s = 0; s < GML_NSPACES; s++)
        if (bin->ckey_max[s]) {
            cand_place(p, bin, s, false);
            bin->ckey_max[s] = 0;
        }
}

/* Appends b to bin's pending list (after `after`; at the head when after is NULL and at_tail
 * false). */
static void pending_add(gml_heap *p, gml_bin *bin, gml_block *b, gml_block *after, bool at_tail)
{
    b->where = GML_IN_PENDING;
    if (at_tail)
        TAILQ_INSERT_TAIL(&bin->pending, b, qnode);
    else if (after)
        TAILQ_INSERT_AFTER(&bin->pending, after, b, qnode);
    else
        TAILQ_INSERT_HEAD(&bin->pending, b, qnode);
    if (bin->npend[b->space]++ == 0)
        LIST_INSERT_HEAD(&p->pend_bins[b->space], bin, pend_link[b->space]);
}

static void pending_del(gml_bin *bin, gml_block *b)
{
    TAILQ_REMOVE(&bin->pending, b, qnode);
    if (--bin->npend[b->space] == 0)
        LIST_REMOVE(bin, pend_link[b->space]);
}

static void passed_add(gml_heap *p, gml_bin *bin, gml_block *b)
{
    b->where = GML_IN_PASSED;
    RB_INSERT(gml_passed_tree, &p->passed[b->space], b);
    LIST_INSERT_HEAD(&bin->passed, b, lnode);
    if (bin->npassed++ == 0)
        LIST_INSERT_HEAD(&p->passed_bins, bin, passed_link);
}

static void passed_del(gml_heap *p, gml_bin *bin, gml_block *b)
{
    RB_REMOVE(gml_passed_tree, &p->passed[b->space], b);
    LIST_REMOVE(b, lnode);
    if (--bin->npassed == 0)
        LIST_REMOVE(bin, passed_link);
}

void gml_bin_block_in(gml_heap *p, gml_block *b, const gml_pend_pos *pos)
{
    gml_bin *bin = b->bin;
    if (bin->nfree++ == 0) {
        bin->hold_stamp = ++p->hold_clock;
        LIST_INSERT_HEAD(&p->holding, bin, holding);
        if (bin != p->ready)
            cand_touch(p, bin);
    }
    b->whole = b->space == GML_SPACE_SMALL && b->size == p->chunk;
    if (b->whole)
        LIST_INSERT_HEAD(&p->small_whole, b, wnode);
    b->where = GML_IN_READY;
    if (bin == p->ready)
        return;
    if (b->size > bin->cmax[b->space]) {
        bin->cmax[b->space] = b->size;
        cand_touch(p, bin);
    }
    if (b->seq <= gml_bin_threshold(p, bin))
        passed_add(p, bin, b);
    else if (pos && pos->pending)
        pending_add(p, bin, b, pos->prev, false);
    else
        pending_add(p, bin, b, NULL, true);
}

void gml_bin_block_out(gml_heap *p, gml_block *b, gml_pend_pos *pos)
{
    gml_bin *bin = b->bin;
    if (pos) {
        pos->pending = b->where == GML_IN_PENDING;
        pos->prev = pos->pending ? TAILQ_PREV(b, gml_pend_list, qnode) : NULL;
    }
    if (b->whole)
        LIST_REMOVE(b, wnode);
    b->whole = false;
    if (b->where == GML_IN_PASSED)
        passed_del(p, bin, b);
    else if (b->where == GML_IN_PENDING)
        pending_del(bin, b);
    b->where = GML_IN_READY;
    if (bin != p->ready && !RB_NEXT(gml_size_tree, NULL, b)) { /* b is the largest */
        gml_block *prev = RB_PREV(gml_size_tree, NULL, b);
        bin->cmax[b->space] = prev ? prev->size : 0;
        cand_touch(p, bin);
    }
    if (--bin->nfree == 0)
        LIST_REMOVE(bin, holding);
}

/* Brings bin's blocks in line with its threshold: the pending ones below it move to
 * heap->passed; a retired bin not known to have passed holds none passed. */
static int by_seq(const void *x, const void *y)
{
    const gml_block *a = *(gml_block *const *)x, *b = *(gml_block *const *)y;
    return a->seq < b->seq ? -1 : (a->seq > b->seq);
}

/* A retired bin not known to have passed: its passed blocks go back among the pending ones, in
 * seq order (once per retirement: sorted, then merged into the list). */
static void unpass_all(gml_heap *p, gml_bin *bin)
{
    GML_VEC(gml_block *) v = {0};
    gml_block *b;
    LIST_FOREACH(b, &bin->passed, lnode)
        if (!gml_vec_push(&v, b))
            break;
    qsort(v.v, v.n, sizeof *v.v, by_seq);
    gml_block *at = TAILQ_FIRST(&bin->pending), *after = NULL;
    for (size_t i = 0; i < v.n; i++) {
        while (at && at->seq <= v.v[i]->seq) {
            after = at;
            at = TAILQ_NEXT(at, qnode);
        }
        passed_del(p, bin, v.v[i]);
        pending_add(p, bin, v.v[i], after, false);
        after = v.v[i];
    }
    gml_vec_free(&v);
}

void gml_bin_settle(gml_heap *p, gml_bin *bin)
{
    if (bin == p->ready)
        return;
    uint64_t t = gml_bin_threshold(p, bin);
    gml_block *b;
    while ((b = TAILQ_FIRST(&bin->pending)) && b->seq <= t) {
        pending_del(bin, b);
        passed_add(p, bin, b);
    }
    if (t == 0 && bin->npassed)
        unpass_all(p, bin);
}

void gml_bin_block_shrink(gml_heap *p, gml_block *b, size_t size)
{
    gml_bin *bin = b->bin;
    struct gml_size_tree *t = &bin->free[b->space];
    bool was_max = bin != p->ready && !RB_NEXT(gml_size_tree, NULL, b);
    bool passed = b->where == GML_IN_PASSED;
    gml_block *below = RB_PREV(gml_size_tree, NULL, b);
    /* still above the block below it in (size, addr): its place in the tree stays (the usual
     * case of the hot path's split, which then costs no tree work at all) */
    bool in_place = !below || below->size < size || (below->size == size && below->addr < b->addr);
    if (!in_place)
        RB_REMOVE(gml_size_tree, t, b);
    if (passed)
        RB_REMOVE(gml_passed_tree, &p->passed[b->space], b);
    if (b->whole)
        LIST_REMOVE(b, wnode);
    if (bin->nfree == 1) { /* as if it left and came back: the bin begins holding again */
        LIST_REMOVE(bin, holding);
        LIST_INSERT_HEAD(&p->holding, bin, holding);
        bin->hold_stamp = ++p->hold_clock;
        if (bin != p->ready)
            cand_touch(p, bin);
    }
    b->size = size;
    if (!in_place)
        RB_INSERT(gml_size_tree, t, b);
    b->whole = b->space == GML_SPACE_SMALL && b->size == p->chunk;
    if (b->whole)
        LIST_INSERT_HEAD(&p->small_whole, b, wnode);
    if (passed)
        RB_INSERT(gml_passed_tree, &p->passed[b->space], b);
    if (was_max) {
        bin->cmax[b->space] = below && below->size > size ? below->size : size;
        cand_touch(p, bin);
    }
}
