/*
 * check.c — the whole-pool consistency checker (invariants I1..I8 of pool_impl.h).
 * It rebuilds the picture from the records (every free, live and part block, sorted by address)
 * independently of the slot owners and links it then verifies.  O(blocks log blocks + slots).
 */
#include <stdio.h>
#include <stdlib.h>

#include "../stitch/stitch.h"
#include "pool_impl.h"

typedef struct vec {
    gml_block **v;
    size_t n, cap;
} vec;

static bool push(vec *a, gml_block *b)
{
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 256;
        gml_block **nv = realloc(a->v, nc * sizeof *nv);
        if (!nv)
            return false;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = b;
    return true;
}

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

static bool linked_expected(const gml_pool *p, const gml_block *a, const gml_block *b)
{
    if (!b || a->addr + a->size != b->addr || a->space != b->space)
        return false;
    return a->space == GML_SPACE_LARGE || gml_slot_of(p, a->addr) == gml_slot_of(p, b->addr);
}

int gml_pool_check_locked(gml_pool *p, char *why, size_t whylen)
{
    int rc = GMLAKE_OK;
    vec all = {0};
    size_t *covered = calloc(p->nslots, sizeof *covered);
    if (!covered)
        FAIL("out of host memory in the checker");
    /* gather */
    gml_bin *bin, *tmp;
    size_t holding = 0;
    LIST_FOREACH(bin, &p->holding, holding)
        if (bin->nfree == 0 || ++holding > HASH_COUNT(p->bins))
            FAIL("bin of stream %#lx is on the holding list with %zu free blocks",
                 (unsigned long)bin->stream, bin->nfree);
    HASH_ITER(hh, p->bins, bin, tmp) {
        if (bin->nfree && holding-- == 0)
            FAIL("more bins hold free blocks than the holding list has");
        size_t inbin = 0;
        for (int s = 0; s < GML_NSPACES; s++) {
            gml_block *f;
            RB_FOREACH(f, gml_size_tree, &bin->free[s]) {
                if (f->state != GML_B_FREE || f->bin != bin || f->space != s)
                    FAIL("block %#lx in a free tree is state %d bin %p space %d",
                         (unsigned long)f->addr, f->state, (void *)f->bin, f->space);
                if (!push(&all, f))
                    FAIL("out of host memory in the checker");
                inbin++;
            }
        }
        if (inbin != bin->nfree)
            FAIL("bin of stream %#lx counts %zu free blocks, its trees hold %zu",
                 (unsigned long)bin->stream, bin->nfree, inbin);
    }
    if (holding)
        FAIL("the holding list has %zu bins that are not in the pool", holding);
    uint64_t active = 0, nlive = 0;
    for (gml_block *b = p->live; b; b = b->hh.next) {
        nlive++;
        active += b->req;
        if (b->state == GML_B_STITCHED)
            continue;
        if (b->state != GML_B_LIVE)
            FAIL("block %#lx in the live map has state %d", (unsigned long)b->addr, b->state);
        if (b->req == 0 || b->size != GML_ROUND_UP(b->req, p->set.round))
            FAIL("live block %#lx: size %zu for a request of %zu", (unsigned long)b->addr, b->size,
                 b->req);
        if (!push(&all, b))
            FAIL("out of host memory in the checker");
    }
    for (gml_sblock *sb = p->lru_head; sb; sb = sb->lru_next)
        for (gml_block *q = sb->parts; q; q = q->part_next)
            if (!push(&all, q))
                FAIL("out of host memory in the checker");
    if (nlive != p->c.live || active != p->c.active)
        FAIL("counters say %lu live / %lu active bytes, records say %lu / %lu",
             (unsigned long)p->c.live, (unsigned long)p->c.active, (unsigned long)nlive,
             (unsigned long)active);
    if (p->c.peak_active < p->c.active || p->c.peak_reserved < p->c.reserved)
        FAIL("a peak is below its current value");
    if (all.n)
        qsort(all.v, all.n, sizeof *all.v, by_addr);
    /* tiling, spaces, links, owners */
    for (size_t i = 0; i < all.n; i++) {
        gml_block *b = all.v[i], *n = i + 1 < all.n ? all.v[i + 1] : NULL;
        if (b->size == 0 || b->addr % p->set.round || b->addr < p->arena ||
            b->addr + b->size > p->arena + p->arena_size)
            FAIL("block %#lx+%zu is malformed or outside the arena", (unsigned long)b->addr, b->size);
        if (n && b->addr + b->size > n->addr)
            FAIL("blocks %#lx+%zu and %#lx overlap", (unsigned long)b->addr, b->size,
                 (unsigned long)n->addr);
        size_t s0 = gml_slot_of(p, b->addr), s1 = gml_slot_of(p, b->addr + b->size - 1);
        if (b->space == GML_SPACE_SMALL && s0 != s1)
            FAIL("small block %#lx+%zu crosses a chunk", (unsigned long)b->addr, b->size);
        for (size_t s = s0; s <= s1; s++) {
            int want = b->space == GML_SPACE_SMALL ? GML_SLOT_SMALL : GML_SLOT_LARGE;
            if (p->slots[s].state != want)
                FAIL("block %#lx (space %d) lies on slot %zu in state %d", (unsigned long)b->addr,
                     b->space, s, p->slots[s].state);
            uintptr_t lo = gml_slot_addr(p, s), hi = lo + p->chunk;
            uintptr_t a = b->addr > lo ? b->addr : lo, e = b->addr + b->size < hi ? b->addr + b->size : hi;
            covered[s] += e - a;
            if (b->addr + b->size - 1 >= hi - 1 && b->addr <= hi - 1 && p->slots[s].owner != b)
                FAIL("slot %zu's owner is not the block %#lx holding its last byte", s,
                     (unsigned long)b->addr);
        }
        bool want_link = linked_expected(p, b, n);
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
    size_t mapped = 0;
    for (size_t s = 0; s < p->nslots; s++) {
        if (p->slots[s].state == GML_SLOT_EMPTY) {
            if (p->slots[s].stitch_refs || p->slots[s].owner)
                FAIL("empty slot %zu still has an owner or stitched views", s);
            continue;
        }
        mapped++;
        if (covered[s] != p->chunk)
            FAIL("slot %zu: blocks cover %zu of %zu bytes", s, covered[s], p->chunk);
    }
    if (mapped != p->mapped_slots || p->c.reserved != (uint64_t)mapped * p->chunk)
        FAIL("%zu slots mapped, counters say %zu slots / %lu reserved bytes", mapped,
             p->mapped_slots, (unsigned long)p->c.reserved);
    rc = gml_stitch_check(p, why, whylen);
out:
    free(all.v);
    free(covered);
    return rc;
}

int gml_pool_check(gml_pool *p, char *why, size_t whylen)
{
    pthread_mutex_lock(&p->mu);
    int rc = gml_pool_check_locked(p, why, whylen);
    pthread_mutex_unlock(&p->mu);
    return rc;
}
