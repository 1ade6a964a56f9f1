/*
 * heap_check.c — the heap's consistency checker (invariants H1..H5 of heap.h) and its free-memory
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

int gml_heap_check(gml_heap *h, gml_block *const *used, size_t nused, char *why, size_t whylen)
{
    int rc = GMLAKE_OK;
    GML_VEC(gml_block *) all = {0};
    size_t *covered = calloc(h->nslots, sizeof *covered);
    if (!covered)
        FAIL("out of host memory in the checker");
    /* gather */
    gml_bin *bin, *tmp;
    size_t holding = 0;
    LIST_FOREACH(bin, &h->holding, holding)
        if (bin->nfree == 0 || ++holding > HASH_COUNT(h->bins))
            FAIL("bin of stream %#lx is on the holding list with %zu free blocks",
                 (unsigned long)bin->stream, bin->nfree);
    HASH_ITER(hh, h->bins, bin, tmp) {
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
    gml_bin *bin, *tmp;
    HASH_ITER(hh, h->bins, bin, tmp) {
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
