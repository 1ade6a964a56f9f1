/*
 * cache.c — the stitched-block cache: reuse without device calls, staleness, StitchFree, auto GC.
 *
 * Every stitched block mapped now (live or cached) is on one list, most recently used first.
 * Reuse: the smallest cached block with need <= size <= need x reuse_limit whose chunks are all
 * free at home and usable by the request's stream; its chunks are carved out of their home
 * blocks again (no device call).
 * Teardown (StitchFree) happens here only: when the bounds are exceeded after a new stitch, or
 * when the pool must release chunks.  Stale blocks go first, least recently used first, then any
 * cached block.  A block is unmapped only after the work given to the stream of its last free
 * has completed (an event query; when tearing everything down, a wait).
 */
#include <stdio.h>
#include <stdlib.h>

#include "stitch.h"

static gml_sblock *sb_of(gml_block *b) { return (gml_sblock *)((char *)b - offsetof(gml_sblock, b)); }

static void lru_unlink(gml_pool *p, gml_sblock *sb)
{
    if (sb->lru_prev)
        sb->lru_prev->lru_next = sb->lru_next;
    else
        p->lru_head = sb->lru_next;
    if (sb->lru_next)
        sb->lru_next->lru_prev = sb->lru_prev;
    else
        p->lru_tail = sb->lru_prev;
    sb->lru_prev = sb->lru_next = NULL;
}

static void lru_push_front(gml_pool *p, gml_sblock *sb)
{
    sb->lru_next = p->lru_head;
    sb->lru_prev = NULL;
    if (p->lru_head)
        p->lru_head->lru_prev = sb;
    p->lru_head = sb;
    if (!p->lru_tail)
        p->lru_tail = sb;
    sb->last_use = ++p->lru_clock;
}

void gml_stitch_link_new(gml_pool *p, gml_sblock *sb)
{
    lru_push_front(p, sb);
    p->stitched_count++;
    p->stitched_bytes += sb->b.size;
}

/* The free home block that covers chunk `slot` entirely, or NULL. */
static gml_block *free_cover(gml_pool *p, uint32_t slot)
{
    if (p->slots[slot].state != GML_SLOT_LARGE)
        return NULL;
    gml_block *o = p->slots[slot].owner;
    if (o->state != GML_B_FREE || o->addr > gml_slot_addr(p, slot))
        return NULL;
    return o;
}

static bool available(gml_pool *p, const gml_sblock *sb, const gml_bin *bin)
{
    for (uint32_t i = 0; i < sb->nchunks; i++) {
        gml_block *f = free_cover(p, sb->slots[i]);
        if (!f || (bin && !gml_usable(f, bin, p)))
            return false;
    }
    return true;
}

int gml_stitch_cache_take(gml_pool *p, gml_bin *bin, size_t need, size_t req, uintptr_t *out)
{
    gml_sblock *best = NULL;
    double cap = (double)need * p->set.reuse_limit;
    for (gml_sblock *sb = p->lru_head; sb; sb = sb->lru_next) {
        if (sb->live || sb->b.size < need || (double)sb->b.size > cap)
            continue;
        if (best && best->b.size <= sb->b.size)
            continue;
        if (available(p, sb, bin))
            best = sb;
    }
    if (!best)
        return GMLAKE_ERR_NOMEM;
    gml_sblock *sb = best;
    gml_block **tail = &sb->parts;
    for (uint32_t i = 0; i < sb->nchunks;) {
        uint32_t s = sb->slots[i];
        gml_block *f = free_cover(p, s);
        uint32_t m = 1;
        while (i + m < sb->nchunks && sb->slots[i + m] == s + m &&
               f->addr + f->size >= gml_slot_addr(p, s + m + 1))
            m++;
        gml_block *part = gml_carve(p, f, gml_slot_addr(p, s), (size_t)m << p->chunk_shift);
        if (!part) { /* host out of memory: undo the parts carved so far */
            for (gml_block *q = sb->parts, *nx; q; q = nx) {
                nx = q->part_next;
                q->part_next = NULL;
                q->sb = NULL;
                gml_free_insert(p, q, p->ready);
            }
            sb->parts = NULL;
            return GMLAKE_ERR_NOMEM;
        }
        part->sb = sb;
        *tail = part;
        tail = &part->part_next;
        i += m;
    }
    sb->live = true;
    sb->b.req = req;
    sb->b.state = GML_B_STITCHED;
    HASH_ADD(hh, p->live, addr, sizeof sb->b.addr, &sb->b);
    lru_unlink(p, sb);
    lru_push_front(p, sb);
    p->c.stitch_reuses++;
    *out = sb->b.addr;
    return GMLAKE_OK;
}

void gml_stitch_free(gml_pool *p, gml_block *b, gml_bin *bin)
{
    gml_sblock *sb = sb_of(b);
    for (gml_block *q = sb->parts, *nx; q; q = nx) {
        nx = q->part_next;
        q->part_next = NULL;
        q->sb = NULL;
        gml_free_insert(p, q, bin);
    }
    sb->parts = NULL;
    sb->live = false;
    sb->bin = bin;
    sb->free_seq = p->seq;
    lru_unlink(p, sb);
    lru_push_front(p, sb);
}

static void evict(gml_pool *p, gml_sblock *sb)
{
    bool ok = true;
    for (uint32_t i = 0; i < sb->nchunks; i++) {
        if (gml_dev_unmap(p->dev, sb->b.addr + ((size_t)i << p->chunk_shift), p->chunk))
            ok = false;
        p->slots[sb->slots[i]].stitch_refs--;
    }
    if (!ok || gml_dev_va_free(p->dev, sb->b.addr, sb->b.size))
        fprintf(stderr, "gmlake: warning: tearing down a stitched range at %#lx failed; "
                        "its %zu virtual bytes stay reserved\n", (unsigned long)sb->b.addr, sb->b.size);
    lru_unlink(p, sb);
    p->stitched_count--;
    p->stitched_bytes -= sb->b.size;
    p->c.stitch_evictions++;
    free(sb->slots);
    free(sb);
}

static bool over_bounds(const gml_pool *p)
{
    return (p->set.auto_gc && p->stitched_count > p->set.auto_gc) ||
           (p->set.stitch_bytes_limit && p->stitched_bytes > p->set.stitch_bytes_limit);
}

size_t gml_stitch_gc(gml_pool *p, bool all)
{
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (gml_sblock *sb = p->lru_tail, *prev; sb && (all || over_bounds(p)); sb = prev) {
            prev = sb->lru_prev;
            if (sb->live || (pass == 0 && !all && available(p, sb, NULL)))
                continue; /* pass 0 takes stale blocks only */
            if (!gml_bin_passed(p, sb->bin, sb->free_seq, all))
                continue;
            evict(p, sb);
            n++;
        }
    }
    return n;
}

bool gml_stitch_owns(gml_pool *p, uintptr_t ptr)
{
    for (gml_sblock *sb = p->lru_head; sb; sb = sb->lru_next)
        if (ptr >= sb->b.addr && ptr < sb->b.addr + sb->b.size)
            return true;
    return false;
}

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        snprintf(why, whylen, __VA_ARGS__);                                                       \
        free(refs);                                                                               \
        free(owner);                                                                              \
        return GMLAKE_ERR_CORRUPT;                                                                \
    } while (0)

int gml_stitch_check(gml_pool *p, char *why, size_t whylen)
{
    uint32_t *refs = calloc(p->nslots, sizeof *refs);
    gml_sblock **owner = calloc(p->nslots, sizeof *owner);
    if (!refs || !owner)
        FAIL("out of host memory in the checker");
    size_t count = 0, bytes = 0;
    for (gml_sblock *sb = p->lru_head; sb; sb = sb->lru_next) {
        count++;
        bytes += sb->b.size;
        if (sb->lru_next && sb->lru_next->lru_prev != sb)
            FAIL("stitched LRU list broken at %#lx", (unsigned long)sb->b.addr);
        if (sb->b.size != (size_t)sb->nchunks << p->chunk_shift)
            FAIL("stitched block %#lx: size %zu for %u chunks", (unsigned long)sb->b.addr,
                 sb->b.size, sb->nchunks);
        gml_block *h = NULL;
        HASH_FIND(hh, p->live, &sb->b.addr, sizeof sb->b.addr, h);
        if (sb->live != (h == &sb->b))
            FAIL("stitched block %#lx: live=%d but the live map says otherwise",
                 (unsigned long)sb->b.addr, sb->live);
        for (uint32_t i = 0; i < sb->nchunks; i++) {
            uint32_t s = sb->slots[i];
            if (s >= p->nslots || p->slots[s].state == GML_SLOT_EMPTY)
                FAIL("stitched block %#lx maps an empty slot %u", (unsigned long)sb->b.addr, s);
            refs[s]++;
            if (sb->live) {
                if (owner[s])
                    FAIL("chunk %u is in two live stitched blocks", s);
                owner[s] = sb;
            }
        }
        if (!sb->live) {
            if (sb->parts)
                FAIL("cached stitched block %#lx still holds parts", (unsigned long)sb->b.addr);
            continue;
        }
        size_t covered = 0;
        for (gml_block *q = sb->parts; q; q = q->part_next) {
            if (q->state != GML_B_PART || q->sb != sb)
                FAIL("part %#lx of stitched block %#lx is not marked as its part",
                     (unsigned long)q->addr, (unsigned long)sb->b.addr);
            for (uintptr_t a = q->addr; a < q->addr + q->size; a += p->chunk) {
                size_t s = gml_slot_of(p, a);
                if (owner[s] != sb)
                    FAIL("part chunk %zu is not a chunk of stitched block %#lx", s,
                         (unsigned long)sb->b.addr);
                covered++;
            }
        }
        if (covered != sb->nchunks)
            FAIL("stitched block %#lx: parts cover %zu of %u chunks", (unsigned long)sb->b.addr,
                 covered, sb->nchunks);
    }
    if (count != p->stitched_count || bytes != p->stitched_bytes)
        FAIL("stitched counters %zu blocks / %zu bytes, list has %zu / %zu", p->stitched_count,
             p->stitched_bytes, count, bytes);
    for (size_t s = 0; s < p->nslots; s++)
        if (refs[s] != p->slots[s].stitch_refs)
            FAIL("slot %zu: stitch_refs %u, stitched blocks map it %u times", s,
                 p->slots[s].stitch_refs, refs[s]);
    free(refs);
    free(owner);
    return GMLAKE_OK;
}
