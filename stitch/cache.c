/*
 * cache.c — the stitched-block cache: reuse without device calls, staleness, StitchFree, auto GC,
 * and stitching's checker (tier 2, contract in stitch.h).
 *
 * Every stitched block mapped now (live or cached) is on one LRU list, most recently used first;
 * the cached ones are also in a size index ordered by (size, most recently used first).
 * Reuse: the smallest cached block with need <= size <= need x reuse_limit whose chunks are all
 * free at home and may serve the request's stream (the most recently used among equal sizes);
 * its chunks are carved out of their home blocks again (no device call).
 * Teardown (StitchFree) happens here only: when the bounds are exceeded after a new stitch, or
 * when the pool must release chunks.  Stale blocks go first, least recently used first, then any
 * cached block.  A block is unmapped only after the work given to the stream of its last free
 * has completed (an event query; when tearing everything down, a wait).
 */
#include <stdio.h>
#include <stdlib.h>

#include "stitch.h"

static int cached_cmp(const gml_sblock *a, const gml_sblock *b)
{
    if (a->b.size != b->b.size)
        return a->b.size < b->b.size ? -1 : 1;
    return a->last_use > b->last_use ? -1 : (a->last_use < b->last_use);
}

RB_GENERATE(gml_sblock_tree, gml_sblock, cnode, cached_cmp)

static gml_sblock *sb_of(gml_block *b) { return (gml_sblock *)((char *)b - offsetof(gml_sblock, b)); }

/* Moves sb to the front of the LRU (the most recently used). */
static void touch(gml_stitch *st, gml_sblock *sb, bool linked)
{
    if (linked)
        TAILQ_REMOVE(&st->lru, sb, lru);
    TAILQ_INSERT_HEAD(&st->lru, sb, lru);
    sb->last_use = ++st->clock;
}

void gml_stitch_link_new(gml_stitch *st, gml_sblock *sb)
{
    touch(st, sb, false);
    st->count++;
    st->bytes += sb->b.size;
}

/* Whether every chunk of sb is free at home and (bin != NULL) may serve bin's stream. */
static bool available(gml_stitch *st, const gml_sblock *sb, const gml_bin *bin)
{
    for (uint32_t i = 0; i < sb->nchunks; i++) {
        gml_block *f = gml_chunk_free_block(st->h, sb->slots[i]);
        if (!f || (bin && !gml_usable(st->h, f, bin)))
            return false;
    }
    return true;
}

void gml_stitch_parts_home(gml_stitch *st, gml_sblock *sb, gml_bin *bin)
{
    gml_block *q;
    while ((q = STAILQ_FIRST(&sb->parts))) {
        STAILQ_REMOVE_HEAD(&sb->parts, held);
        q->holder = NULL;
        gml_free_insert(st->h, q, bin ? bin : q->bin);
    }
}

int gml_stitch_cache_take(gml_stitch *st, gml_bin *bin, size_t need, size_t req, gml_block **out)
{
    gml_heap *h = st->h;
    double cap = (double)need * st->reuse_limit;
    gml_sblock key = {.b.size = need, .last_use = UINT64_MAX}, *sb;
    for (sb = RB_NFIND(gml_sblock_tree, &st->cached, &key); sb && (double)sb->b.size <= cap;
         sb = RB_NEXT(gml_sblock_tree, &st->cached, sb))
        if (available(st, sb, bin))
            break;
    if (!sb || (double)sb->b.size > cap)
        return GMLAKE_ERR_NOMEM;
    for (uint32_t i = 0; i < sb->nchunks;) {
        uint32_t s = sb->slots[i];
        gml_block *f = gml_chunk_free_block(h, s);
        uint32_t m = 1;
        while (i + m < sb->nchunks && sb->slots[i + m] == s + m &&
               f->addr + f->size >= gml_slot_addr(h, s + m + 1))
            m++;
        gml_block *part = gml_carve(h, f, gml_slot_addr(h, s), (size_t)m << h->chunk_shift);
        if (!part) { /* host out of memory: undo the parts carved so far */
            gml_stitch_parts_home(st, sb, NULL);
            return GMLAKE_ERR_NOMEM;
        }
        part->holder = sb;
        STAILQ_INSERT_TAIL(&sb->parts, part, held);
        i += m;
    }
    RB_REMOVE(gml_sblock_tree, &st->cached, sb);
    gml_bin_unhold(h, sb->bin);
    sb->bin = NULL;
    sb->live = true;
    sb->b.req = req;
    sb->b.state = GML_B_VIEW;
    touch(st, sb, true);
    st->reuses++;
    *out = &sb->b;
    return GMLAKE_OK;
}

void gml_stitch_free(gml_stitch *st, gml_block *b, gml_bin *bin)
{
    gml_sblock *sb = sb_of(b);
    gml_stitch_parts_home(st, sb, bin);
    sb->live = false;
    sb->bin = bin;
    gml_bin_hold(bin);
    sb->free_seq = st->h->seq;
    touch(st, sb, true);
    RB_INSERT(gml_sblock_tree, &st->cached, sb);
}

/* Tears cached block sb down. */
static void evict(gml_stitch *st, gml_sblock *sb)
{
    gml_heap *h = st->h;
    bool ok = gml_stitch_unmap(h, sb->b.addr, sb->slots, sb->nchunks);
    for (uint32_t i = 0; i < sb->nchunks; i++)
        gml_chunk_unpin(h, sb->slots[i]);
    if (!ok || gml_dev_va_free(h->dev, sb->b.addr, sb->b.size))
        fprintf(stderr, "gmlake: warning: tearing down a stitched range at %#lx failed; "
                        "its %zu virtual bytes stay reserved\n", (unsigned long)sb->b.addr, sb->b.size);
    TAILQ_REMOVE(&st->lru, sb, lru);
    RB_REMOVE(gml_sblock_tree, &st->cached, sb);
    gml_bin_unhold(h, sb->bin);
    st->count--;
    st->bytes -= sb->b.size;
    st->evictions++;
    free(sb->slots);
    free(sb);
}

static bool over_bounds(const gml_stitch *st)
{
    return (st->auto_gc && st->count > st->auto_gc) ||
           (st->bytes_limit && st->bytes > st->bytes_limit);
}

size_t gml_stitch_gc(gml_stitch *st, bool all)
{
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (gml_sblock *sb = TAILQ_LAST(&st->lru, gml_sblock_list), *prev;
             sb && (all || over_bounds(st)); sb = prev) {
            prev = TAILQ_PREV(sb, gml_sblock_list, lru);
            if (sb->live || (pass == 0 && !all && available(st, sb, NULL)))
                continue; /* pass 0 takes stale blocks only */
            if (!gml_bin_passed(st->h, sb->bin, sb->free_seq))
                continue;
            evict(st, sb);
            n++;
        }
    }
    return n;
}

void gml_stitch_destroy(gml_stitch *st)
{
    gml_sblock *sb;
    while ((sb = TAILQ_FIRST(&st->lru))) {
        if (sb->live)
            gml_stitch_free(st, &sb->b, st->h->ready);
        gml_stitch_gc(st, true);
        if (TAILQ_FIRST(&st->lru) == sb)
            break; /* the device refused to unmap: leave it to process exit */
    }
}

bool gml_stitch_owns(gml_stitch *st, uintptr_t ptr)
{
    gml_sblock *sb;
    TAILQ_FOREACH(sb, &st->lru, lru)
        if (ptr >= sb->b.addr && ptr < sb->b.addr + sb->b.size)
            return true;
    return false;
}

size_t gml_stitch_largest_available(gml_stitch *st)
{
    gml_sblock *sb;
    RB_FOREACH_REVERSE(sb, gml_sblock_tree, &st->cached)
        if (available(st, sb, NULL))
            return sb->b.size;
    return 0;
}

bool gml_stitch_parts(gml_stitch *st, gml_block_vec *parts)
{
    gml_sblock *sb;
    gml_block *q;
    TAILQ_FOREACH(sb, &st->lru, lru)
        STAILQ_FOREACH(q, &sb->parts, held)
            if (!gml_vec_push(parts, q))
                return false;
    TAILQ_FOREACH(sb, &st->making, lru)
        STAILQ_FOREACH(q, &sb->parts, held)
            if (!gml_vec_push(parts, q))
                return false;
    return true;
}

#define FAIL(...)                                                                                 \
    do {                                                                                          \
        snprintf(why, whylen, __VA_ARGS__);                                                       \
        free(refs);                                                                               \
        free(owner);                                                                              \
        return GMLAKE_ERR_CORRUPT;                                                                \
    } while (0)

int gml_stitch_check(gml_stitch *st, size_t live_views, char *why, size_t whylen)
{
    gml_heap *h = st->h;
    uint32_t *refs = calloc(h->nslots, sizeof *refs);
    gml_sblock **owner = calloc(h->nslots, sizeof *owner);
    if (!refs || !owner)
        FAIL("out of host memory in the checker");
    size_t count = 0, bytes = 0, live = 0, cached = 0;
    gml_sblock *sb;
    RB_FOREACH(sb, gml_sblock_tree, &st->cached) {
        if (sb->live)
            FAIL("live stitched block %#lx is in the cache index", (unsigned long)sb->b.addr);
        cached++;
    }
    TAILQ_FOREACH(sb, &st->lru, lru) {
        count++;
        bytes += sb->b.size;
        gml_sblock *nx = TAILQ_NEXT(sb, lru);
        if (nx && nx->last_use >= sb->last_use)
            FAIL("stitched LRU list out of order at %#lx", (unsigned long)sb->b.addr);
        if (sb->b.size != (size_t)sb->nchunks << h->chunk_shift)
            FAIL("stitched block %#lx: size %zu for %u chunks", (unsigned long)sb->b.addr,
                 sb->b.size, sb->nchunks);
        if (sb->live && sb->b.state != GML_B_VIEW)
            FAIL("live stitched block %#lx has state %d", (unsigned long)sb->b.addr, sb->b.state);
        for (uint32_t i = 0; i < sb->nchunks; i++) {
            uint32_t s = sb->slots[i];
            if (s >= h->nslots || h->slots[s].state == GML_SLOT_EMPTY ||
                h->slots[s].state == GML_SLOT_GROWING)
                FAIL("stitched block %#lx maps an unmapped slot %u", (unsigned long)sb->b.addr, s);
            refs[s]++;
            if (sb->live) {
                if (owner[s])
                    FAIL("chunk %u is in two live stitched blocks", s);
                owner[s] = sb;
            }
        }
        for (uint32_t i = 0; i < sb->nchunks;) {
            uint32_t s = sb->slots[i], len = (uint32_t)gml_extent_len(h, s);
            if (gml_extent_head(h, s) != s || i + len > sb->nchunks)
                FAIL("stitched block %#lx maps part of an extent at slot %u",
                     (unsigned long)sb->b.addr, s);
            for (uint32_t j = 1; j < len; j++)
                if (sb->slots[i + j] != s + j)
                    FAIL("stitched block %#lx maps extent %u out of order", (unsigned long)sb->b.addr, s);
            i += len;
        }
        if (!sb->live) {
            if (!STAILQ_EMPTY(&sb->parts))
                FAIL("cached stitched block %#lx still holds parts", (unsigned long)sb->b.addr);
            continue;
        }
        live++;
        size_t covered = 0;
        gml_block *q;
        STAILQ_FOREACH(q, &sb->parts, held) {
            if (q->state != GML_B_HELD || q->holder != sb)
                FAIL("part %#lx of stitched block %#lx is not marked as its part",
                     (unsigned long)q->addr, (unsigned long)sb->b.addr);
            for (uintptr_t a = q->addr; a < q->addr + q->size; a += h->chunk) {
                size_t s = gml_slot_of(h, a);
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
    TAILQ_FOREACH(sb, &st->making, lru) { /* parts carved, driver calls under way */
        size_t covered = 0;
        gml_block *q;
        STAILQ_FOREACH(q, &sb->parts, held) {
            if (q->state != GML_B_HELD || q->holder != sb)
                FAIL("part %#lx of a stitched block being made is not marked as its part",
                     (unsigned long)q->addr);
            for (uintptr_t a = q->addr; a < q->addr + q->size; a += h->chunk) {
                size_t s = gml_slot_of(h, a);
                if (owner[s])
                    FAIL("chunk %zu is in a live stitched block and one being made", s);
                owner[s] = sb;
                covered++;
            }
        }
        if (covered != sb->nchunks)
            FAIL("a stitched block being made: parts cover %zu of %u chunks", covered, sb->nchunks);
    }
    if (count != st->count || bytes != st->bytes)
        FAIL("stitched counters %zu blocks / %zu bytes, list has %zu / %zu", st->count, st->bytes,
             count, bytes);
    if (live != live_views || cached != count - live)
        FAIL("%zu live and %zu cached stitched blocks, but %zu in the live map and %zu indexed",
             live, count - live, live_views, cached);
    for (size_t s = 0; s < h->nslots; s++)
        if (refs[s] != h->slots[s].pins)
            FAIL("slot %zu: %u pins, stitched blocks map it %u times", s, h->slots[s].pins,
                 refs[s]);
    free(refs);
    free(owner);
    return GMLAKE_OK;
}
