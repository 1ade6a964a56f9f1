/*
 * heap_check.c — the heap's consistency checker (invariants H1..H6 of heap.h) and its free-memory
 * figures (tier 1).  The checker rebuilds the picture from the records (every free block of the
 * bins, plus the LIVE and HELD blocks the layers above hold, sorted by address) independently of
 * the slot owners and links, which it then verifies.  O(blocks log blocks + slots).
 */
#include <stdio.h>
#include <stdlib.h>

#include "heap.h"

static int by_addr(const void *x, const void *y)
{
    const gml_block *a = *(gml_block *const *)x, *b = *(gml_block *const *)y;
    return a->addr < b->addr ? -1 : (a->addr > b->addr);
}

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        snprintf(why, whylen, __VA_ARGS__);                                                       \
        rc = GMLAKE_ERR_CORRUPT;                                                                  \
        goto out;                                                                                 \
    } while (0)

static bool linked_expected(const gml_heap *h, const gml_block *a, const gml_block *b)
{
    if (!b || a->addr + a->size != b->addr || a->space != b->space)
        return false;
    return a->space == GML_SPACE_LARGE || gml_slot_of(h, a->addr) == gml_slot_of(h, b->addr);
}

/* What the threshold of bin is, as gml_bin_threshold gives it, without learning anything. */
static uint64_t threshold_now(const gml_heap *h, const gml_bin *bin)
{
    uint64_t d = bin->done_seq;
    if (!bin->foreign && h->synced_seq > d)
        d = h->synced_seq;
    if (bin->retired)
        return d >= bin->retire_seq ? UINT64_MAX : 0;
    return d;
}

static size_t list_len_passed(const gml_bin *bin)
{
    size_t n = 0;
    const gml_block *f;
    LIST_FOREACH(f, &bin->passed, lnode)
        n++;
    return n;
}

/* H6: the indexes a miss searches (bins.c) agree with the bins' trees. */
static int check_indexes(gml_heap *h, char *why, size_t whylen)
{
    int rc = GMLAKE_OK;
    size_t passed_total[GML_NSPACES] = {0}, pend_bins[GML_NSPACES] = {0}, passed_bins = 0, whole = 0;
    gml_bin *bin;
    gml_block *f;
    LIST_FOREACH(bin, &h->all_bins, all) {
        size_t npend[GML_NSPACES] = {0}, npassed = 0, max[GML_NSPACES] = {0};
        for (int s = 0; s < GML_NSPACES; s++)
            RB_FOREACH(f, gml_size_tree, &bin->free[s]) {
                max[s] = f->size;
                if (f->whole != (s == GML_SPACE_SMALL && f->size == h->chunk))
                    FAIL("free block %#lx: whole-chunk mark %d", (unsigned long)f->addr, f->whole);
                whole += f->whole;
                if (bin == h->ready) {
                    if (f->where != GML_IN_READY)
                        FAIL("ready block %#lx is indexed as %d", (unsigned long)f->addr, f->where);
                } else if (f->where == GML_IN_PASSED) {
                    npassed++;
                    if (f->seq > threshold_now(h, bin) ||
                        RB_FIND(gml_passed_tree, &h->passed[s], f) != f)
                        FAIL("block %#lx is indexed as passed (seq %lu) but is not", (unsigned long)f->addr,
                             (unsigned long)f->seq);
                } else if (f->where == GML_IN_PENDING) {
                    npend[s]++;

                } else {
                    FAIL("block %#lx of a stream bin is in no index", (unsigned long)f->addr);
                }
            }
        if (bin == h->ready)
            continue;
        size_t intree = 0;
        uint64_t last = 0;
        TAILQ_FOREACH(f, &bin->pending, qnode) {
            if (f->where != GML_IN_PENDING || f->bin != bin || f->state != GML_B_FREE || f->seq < last)
                FAIL("bin of stream %#lx: its pending list is wrong at %#lx (seq %lu after %lu)",
                     (unsigned long)bin->stream, (unsigned long)f->addr, (unsigned long)f->seq,
                     (unsigned long)last);
            last = f->seq;
            intree++;
        }
        if (intree != npend[0] + npend[1] || list_len_passed(bin) != npassed || bin->npassed != npassed)
            FAIL("bin of stream %#lx: %zu pending and %zu passed blocks, indexes say %zu and %zu",
                 (unsigned long)bin->stream, npend[0] + npend[1], npassed, intree, bin->npassed);
        passed_bins += npassed > 0;
        for (int s = 0; s < GML_NSPACES; s++) {
            pend_bins[s] += npend[s] > 0;
            if (bin->npend[s] != npend[s] || bin->cmax[s] != max[s])
                FAIL("bin of stream %#lx, space %d: counts %zu pending, largest %zu; trees say %zu, %zu",
                     (unsigned long)bin->stream, s, bin->npend[s], bin->cmax[s], npend[s], max[s]);
            gml_bin *c = s == GML_SPACE_LARGE ? RB_FIND(gml_cand_large, &h->cand_large, bin)
                                              : RB_FIND(gml_cand_small, &h->cand_small, bin);
            if ((c == bin) != (bin->ckey_max[s] > 0))
                FAIL("bin of stream %#lx is %s the bins of space %d by largest block",
                     (unsigned long)bin->stream, c == bin ? "wrongly in" : "missing from", s);
            if (!bin->cdirty && (bin->ckey_max[s] != max[s] ||
                                 (max[s] && bin->ckey_stamp[s] != bin->hold_stamp)))
                FAIL("bin of stream %#lx is placed by a largest block of %zu in space %d, has %zu, "
                     "and is not marked to be placed again", (unsigned long)bin->stream,
                     bin->ckey_max[s], s, max[s]);
        }
        gml_block *p;
        LIST_FOREACH(p, &bin->passed, lnode)
            passed_total[p->space]++;
    }
    for (int s = 0; s < GML_NSPACES; s++) {
        size_t n = 0;
        RB_FOREACH(f, gml_passed_tree, &h->passed[s])
            n++;
        if (n != passed_total[s])
            FAIL("%zu blocks of space %d indexed as passed, the bins hold %zu", n, s, passed_total[s]);
        n = 0;
        LIST_FOREACH(bin, &h->pend_bins[s], pend_link[s])
            if (!bin->npend[s] || ++n > pend_bins[s])
                FAIL("the list of bins with pending blocks of space %d is wrong", s);
        if (n != pend_bins[s])
            FAIL("%zu bins hold pending blocks of space %d, the list has %zu", pend_bins[s], s, n);
    }
    size_t n = 0;
    LIST_FOREACH(bin, &h->cand_dirty, dirty_link)
        if (!bin->cdirty || bin == h->ready)
            FAIL("bin of stream %#lx is on the list of bins to place again, unmarked",
                 (unsigned long)bin->stream);
    LIST_FOREACH(bin, &h->passed_bins, passed_link)
        if (!bin->npassed || ++n > passed_bins)
            FAIL("the list of bins with passed blocks is wrong");
    if (n != passed_bins)
        FAIL("%zu bins hold passed blocks, the list has %zu", passed_bins, n);
    n = 0;
    LIST_FOREACH(f, &h->small_whole, wnode)
        if (!f->whole || f->state != GML_B_FREE || ++n > whole)
            FAIL("the list of whole free small chunks is wrong at %#lx", (unsigned long)f->addr);
    if (n != whole)
        FAIL("%zu whole free small chunks, the list has %zu", whole, n);
out:
    return rc;
}

int gml_heap_check(gml_heap *h, gml_block *const *used, size_t nused, char *why, size_t whylen)
{
    int rc = GMLAKE_OK;
    GML_VEC(gml_block *) all = {0};
    size_t *covered = calloc(h->nslots, sizeof *covered);
    if (!covered)
        FAIL("out of host memory in the checker");
    /* gather */
    gml_bin *bin;
    size_t holding = 0;
    LIST_FOREACH(bin, &h->holding, holding)
        if (bin->nfree == 0 || ++holding > h->nbins)
            FAIL("bin of stream %#lx is on the holding list with %zu free blocks",
                 (unsigned long)bin->stream, bin->nfree);
    size_t nbins = 0, by_stream = 0;
    LIST_FOREACH(bin, &h->all_bins, all) {
        nbins++;
        if (!bin->retired && gml_bin_find(h, bin->stream) != bin)
            FAIL("bin of stream %#lx is not found by its stream", (unsigned long)bin->stream);
        by_stream += !bin->retired;
        if (bin->nfree && holding-- == 0)
            FAIL("more bins hold free blocks than the holding list has");
        size_t inbin = 0;
        for (int s = 0; s < GML_NSPACES; s++) {
            gml_block *f;
            RB_FOREACH(f, gml_size_tree, &bin->free[s]) {
                if (f->state != GML_B_FREE || f->bin != bin || f->space != s)
                    FAIL("block %#lx in a free tree is state %d bin %p space %d",
                         (unsigned long)f->addr, f->state, (void *)f->bin, f->space);
                if (!gml_vec_push(&all, f))
                    FAIL("out of host memory in the checker");
                inbin++;
            }
        }
        if (inbin != bin->nfree)
            FAIL("bin of stream %#lx counts %zu free blocks, its trees hold %zu",
                 (unsigned long)bin->stream, bin->nfree, inbin);
    }
    if (holding)
        FAIL("the holding list has %zu bins that are not in the heap", holding);
    if (nbins != h->nbins || by_stream != h->bin_used)
        FAIL("%zu bins (%zu by stream), the heap counts %zu (%zu in its map)", nbins, by_stream, h->nbins,
             h->bin_used);
    if ((rc = check_indexes(h, why, whylen)) != GMLAKE_OK)
        goto out;
    for (size_t i = 0; i < nused; i++) {
        if (used[i]->state != GML_B_LIVE && used[i]->state != GML_B_HELD)
            FAIL("block %#lx held above the heap has state %d", (unsigned long)used[i]->addr,
                 used[i]->state);
        if (!gml_vec_push(&all, used[i]))
            FAIL("out of host memory in the checker");
    }
    if (h->peak_reserved < h->reserved)
        FAIL("peak reserved is below reserved");
    if (all.n)
        qsort(all.v, all.n, sizeof *all.v, by_addr);
    /* tiling, spaces, links, owners */
    for (size_t i = 0; i < all.n; i++) {
        gml_block *b = all.v[i], *n = i + 1 < all.n ? all.v[i + 1] : NULL;
        if (b->size == 0 || b->addr % h->round || !gml_in_arena(h, b->addr) ||
            b->addr + b->size > h->arena + h->arena_size)
            FAIL("block %#lx+%zu is malformed or outside the arena", (unsigned long)b->addr, b->size);
        if (n && b->addr + b->size > n->addr)
            FAIL("blocks %#lx+%zu and %#lx overlap", (unsigned long)b->addr, b->size,
                 (unsigned long)n->addr);
        size_t s0 = gml_slot_of(h, b->addr), s1 = gml_slot_of(h, b->addr + b->size - 1);
        if (b->space == GML_SPACE_SMALL && s0 != s1)
            FAIL("small block %#lx+%zu crosses a chunk", (unsigned long)b->addr, b->size);
        for (size_t s = s0; s <= s1; s++) {
            int want = b->space == GML_SPACE_SMALL ? GML_SLOT_SMALL : GML_SLOT_LARGE;
            if (h->slots[s].state != want)
                FAIL("block %#lx (space %d) lies on slot %zu in state %d", (unsigned long)b->addr,
                     b->space, s, h->slots[s].state);
            uintptr_t lo = gml_slot_addr(h, s), hi = lo + h->chunk;
            uintptr_t a = b->addr > lo ? b->addr : lo, e = b->addr + b->size < hi ? b->addr + b->size : hi;
            covered[s] += e - a;
            if (b->addr + b->size - 1 >= hi - 1 && b->addr <= hi - 1 && h->slots[s].owner != b)
                FAIL("slot %zu's owner is not the block %#lx holding its last byte", s,
                     (unsigned long)b->addr);
        }
        bool want_link = linked_expected(h, b, n);
        if (want_link && (b->next != n || n->prev != b))
            FAIL("neighbours %#lx and %#lx are not linked", (unsigned long)b->addr,
                 (unsigned long)n->addr);
        if (!want_link && b->next)
            FAIL("block %#lx links to %#lx which is not its neighbour", (unsigned long)b->addr,
                 (unsigned long)b->next->addr);
        if (want_link && b->state == GML_B_FREE && n->state == GML_B_FREE && b->bin == n->bin)
            FAIL("free neighbours %#lx and %#lx of one bin were not merged",
                 (unsigned long)b->addr, (unsigned long)n->addr);
        if (b->prev && b->prev->next != b)
            FAIL("block %#lx: prev does not link back", (unsigned long)b->addr);
    }
    size_t mapped = 0, growing = 0;
    for (size_t s = 0; s < h->nslots; s++) {
        const gml_slot *sl = &h->slots[s];
        if (sl->state == GML_SLOT_EMPTY || sl->state == GML_SLOT_GROWING) {
            /* a growing slot: its driver calls are under way, nothing above may know it yet */
            if (sl->pins || sl->owner || sl->handle || sl->len || covered[s])
                FAIL("%s slot %zu has an owner, pins, an extent or blocks",
                     sl->state == GML_SLOT_EMPTY ? "empty" : "growing", s);
            growing += sl->state == GML_SLOT_GROWING;
            continue;
        }
        mapped++;
        const gml_slot *hd = &h->slots[sl->head];
        if (sl->head > s || hd->head != sl->head || hd->len == 0 || s >= sl->head + hd->len ||
            !hd->handle || hd->state == GML_SLOT_EMPTY || (sl->head != s && (sl->handle || sl->len)))
            FAIL("slot %zu is not inside a well-formed extent (head %u)", s, sl->head);
        if (covered[s] != h->chunk)
            FAIL("slot %zu: blocks cover %zu of %zu bytes", s, covered[s], h->chunk);
    }
    if (growing != h->growing_slots)
        FAIL("%zu slots growing, the counter says %zu", growing, h->growing_slots);
    if (mapped != h->mapped_slots || h->reserved != (uint64_t)mapped * h->chunk)
        FAIL("%zu slots mapped, counters say %zu slots / %lu reserved bytes", mapped,
             h->mapped_slots, (unsigned long)h->reserved);
out:
    gml_vec_free(&all);
    free(covered);
    return rc;
}

void gml_heap_free_stats(gml_heap *h, gml_heap_free *o)
{
    *o = (gml_heap_free){0};
    gml_bin *bin;
    LIST_FOREACH(bin, &h->all_bins, all) {
        for (int s = 0; s < GML_NSPACES; s++) {
            gml_block *f;
            RB_FOREACH(f, gml_size_tree, &bin->free[s]) {
                o->free_bytes += f->size;
                if (f->size > o->largest_free_bytes)
                    o->largest_free_bytes = f->size;
                uintptr_t lo = 0, hi = 0;
                if (s == GML_SPACE_LARGE)
                    gml_whole_extents(h, f, &lo, &hi);
                else if (f->size == h->chunk && gml_extent_len(h, gml_slot_of(h, f->addr)) == 1)
                    lo = f->addr, hi = f->addr + f->size; /* a free one-chunk small extent */
                if (hi > lo)
                    o->whole_extent_bytes += hi - lo;
            }
        }
    }
}
