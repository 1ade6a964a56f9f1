/*
 * cache.c — the stitched-block cache: reuse without device calls, staleness, StitchFree, auto GC,
 * and stitching's checker (tier 2, contract in stitch.h).
 *
 * Every stitched block mapped now (live or cached) is on one LRU list, most recently used first;
 * the cached ones are also in a size index ordered by (size, most recently used first).
 * Reuse: the smallest cached block with need <= size <= need x reuse_limit whose chunks are all
 * free at home and may serve the request's stream (the most recently used among equal sizes);
 * its chunks are carved out of their home blocks again (no device call).
 * Windows: which stale cached block a patch keeps part of (gml_stitch_window), by the driver time
 * it saves (core/cost.h's estimates: the window's maps and set access, less the unmaps of the
 * block's other extents).
 * Teardown (StitchFree) happens here only: when the bounds are exceeded by a new stitch, or
 * when the pool must release chunks.  Stale blocks go first, least recently used first, then any
 * cached block.  A block is unmapped only after the work given to the stream of its last free
 * has completed (an event query, a stream found with work running asked once a search, not again
 * for each of its blocks; before tearing everything down the pool synchronises).
 * Its driver calls (one unmap per extent, the range free) run without the pool lock: under the
 * lock the victim is unlinked (off the LRU and the size index, out of the counters, its bin let
 * go) onto st->evicting, where no one can take, count, claim or pick it, but where the checker
 * still counts its pins; the lock is dropped for the calls (gml_stitch_gc, or a new stitch's own
 * unlocked window in stitch.c), and once it is back the victim's chunks are unpinned and its
 * record freed.  Its pins keep release from returning an extent that the range still maps, and
 * keep that extent's slot fields (which the unmaps read) from being rewritten meanwhile.
 */
#include <stdio.h>
#include <stdlib.h>

#include "../core/cost.h"
#include "stitch.h"

static int cached_cmp(const gml_sblock *a, const gml_sblock *b)
{
    if (a->b.size != b->b.size)
        return a->b.size < b->b.size ? -1 : 1;
    return a->last_use > b->last_use ? -1 : (a->last_use < b->last_use);
}

RB_GENERATE(gml_sblock_tree, gml_sblock, cnode, cached_cmp)

static gml_sblock *sb_of(gml_block *b) { return (gml_sblock *)((char *)b - offsetof(gml_sblock, b)); }

static size_t va_bytes(const gml_stitch *st, const gml_sblock *sb)
{
    return (size_t)sb->nchunks << st->h->chunk_shift;
}

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
    st->bytes += va_bytes(st, sb);
}

/* The free large block holding home byte a, or NULL. */
static gml_block *free_at(gml_heap *h, uintptr_t a)
{
    if (h->slots[gml_slot_of(h, a)].state != GML_SLOT_LARGE)
        return NULL;
    gml_block *f = gml_block_at(h, a);
    return f && f->state == GML_B_FREE ? f : NULL;
}

/* Calls fn on each home byte range sb hands out (its virtual range [b.addr, b.addr + b.size)
 * through its chunks, cut where its chunks stop being consecutive), in virtual order; false as
 * soon as fn says false. */
static bool for_each_range(gml_stitch *st, const gml_sblock *sb,
                           bool (*fn)(gml_stitch *, const gml_sblock *, uintptr_t, uintptr_t, void *),
                           void *arg)
{
    gml_heap *h = st->h;
    size_t vlo = sb->head_off, vhi = va_bytes(st, sb) - sb->tail_cut;
    for (uint32_t i = 0; i < sb->nchunks;) {
        uint32_t s = sb->slots[i], m = 1;
        while (i + m < sb->nchunks && sb->slots[i + m] == s + m)
            m++;
        size_t r0 = (size_t)i << h->chunk_shift, r1 = (size_t)(i + m) << h->chunk_shift;
        size_t lo = r0 > vlo ? r0 : vlo, hi = r1 < vhi ? r1 : vhi;
        uintptr_t a = gml_slot_addr(h, s) + (lo - r0);
        if (lo < hi && !fn(st, sb, a, a + (hi - lo), arg))
            return false;
        i += m;
    }
    return true;
}

typedef struct part_walk {
    bool (*fn)(gml_stitch *, const gml_sblock *, gml_block *, uintptr_t, size_t, void *);
    void *arg;
} part_walk;

/* A range cut where free blocks end: fn on each free block and its part; false on one not free. */
static bool range_parts(gml_stitch *st, const gml_sblock *sb, uintptr_t a, uintptr_t e, void *arg)
{
    const part_walk *w = arg;
    while (a < e) {
        gml_block *f = free_at(st->h, a);
        if (!f)
            return false;
        size_t len = (f->addr + f->size < e ? f->addr + f->size : e) - a;
        if (!w->fn(st, sb, f, a, len, w->arg))
            return false;
        a += len;
    }
    return true;
}

/* Calls fn on each free home block holding bytes sb hands out and on the part of it, in virtual
 * order; false when a byte is not free (fn is not called for it) or fn says false. */
static bool for_each_part(gml_stitch *st, const gml_sblock *sb,
                          bool (*fn)(gml_stitch *, const gml_sblock *, gml_block *, uintptr_t,
                                     size_t, void *),
                          void *arg)
{
    part_walk w = {fn, arg};
    return for_each_range(st, sb, range_parts, &w);
}

static bool usable_part(gml_stitch *st, const gml_sblock *sb, gml_block *f, uintptr_t a, size_t len,
                        void *bin)
{
    (void)sb, (void)a, (void)len;
    return !bin || gml_usable(st->h, f, bin);
}

/* Whether every byte sb hands out is free at home and (bin != NULL) may serve bin's stream. */
static bool available(gml_stitch *st, const gml_sblock *sb, const gml_bin *bin)
{
    return for_each_part(st, sb, usable_part, (void *)bin);
}

static bool carve_part(gml_stitch *st, const gml_sblock *sb, gml_block *f, uintptr_t a, size_t len,
                       void *arg)
{
    (void)arg;
    gml_block *part = gml_carve(st->h, f, a, len);
    if (!part)
        return false;
    part->holder = (void *)sb;
    STAILQ_INSERT_TAIL(&((gml_sblock *)sb)->parts, part, held);
    return true;
}

bool gml_stitch_carve(gml_stitch *st, gml_sblock *sb)
{
    if (for_each_part(st, sb, carve_part, NULL))
        return true;
    gml_stitch_parts_home(st, sb, NULL);
    return false;
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
    if (!gml_stitch_carve(st, sb))
        return GMLAKE_ERR_NOMEM; /* host out of memory: the parts carved went home */
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

/* Whether the stitched blocks mapped now and those being made exceed the auto GC bounds. */
static bool over_bounds(const gml_stitch *st)
{
    size_t count = st->count, bytes = st->bytes;
    const gml_sblock *sb;
    TAILQ_FOREACH(sb, &st->making, lru) {
        count++;
        bytes += va_bytes(st, sb);
    }
    return (st->auto_gc && count > st->auto_gc) || (st->bytes_limit && bytes > st->bytes_limit);
}

/* Takes cached block sb out of reach for its teardown: out of the LRU, the size index and the
 * counters, onto st->evicting; its bin is let go.  It keeps its pins until gml_stitch_evict_done,
 * so that release never returns an extent its range still maps. */
static void unlink_cached(gml_stitch *st, gml_sblock *sb)
{
    TAILQ_REMOVE(&st->lru, sb, lru);
    RB_REMOVE(gml_sblock_tree, &st->cached, sb);
    gml_bin_unhold(st->h, sb->bin);
    sb->bin = NULL;
    st->count--;
    st->bytes -= va_bytes(st, sb);
    TAILQ_INSERT_TAIL(&st->evicting, sb, lru);
}

static void unlink_victim(gml_stitch *st, gml_sblock *sb)
{
    unlink_cached(st, sb);
    st->evictions++;
}

void gml_stitch_unlink_for_patch(gml_stitch *st, gml_sblock *sb)
{
    unlink_cached(st, sb);
    st->patching++; /* until the patch ends: a patch made, or an eviction */
}

/* Whether the bytes sb hands out of its extent at chunk i (len chunks) are all free at home and
 * may serve bin (an extent handing out none of them is not: a window keeps what it hands out). */
static bool extent_available(gml_stitch *st, const gml_sblock *sb, uint32_t i, uint32_t len,
                             const gml_bin *bin)
{
    gml_heap *h = st->h;
    size_t vlo = sb->head_off, vhi = va_bytes(st, sb) - sb->tail_cut;
    size_t r0 = (size_t)i << h->chunk_shift, r1 = (size_t)(i + len) << h->chunk_shift;
    size_t lo = r0 > vlo ? r0 : vlo, hi = r1 < vhi ? r1 : vhi;
    if (lo >= hi)
        return false;
    uintptr_t a = gml_slot_addr(h, sb->slots[i]) + (lo - r0);
    part_walk w = {usable_part, (void *)bin};
    return range_parts(st, sb, a, a + (hi - lo), &w);
}

/* The driver time an extent of `len` chunks costs a stitch (its map and its share of the set
 * access) and a patch that unmaps it (core/cost.h: the estimates the replay charges). */
static double extent_map_cost(const gml_heap *h, uint32_t len)
{
    size_t bytes = (size_t)len << h->chunk_shift;
    return gml_cost_call(GMLAKE_DC_MAP, bytes) + gml_cost_call(GMLAKE_DC_SET_ACCESS, bytes);
}
static double extent_unmap_cost(const gml_heap *h, uint32_t len)
{
    return gml_cost_call(GMLAKE_DC_UNMAP, (size_t)len << h->chunk_shift);
}

/* The window of sb for need (see gml_stitch_window): its runs of available extents, each cut to
 * the fewest extents that cover need; the one that saves the most driver time (its extents'
 * maps and set access, less the unmaps of sb's other extents).  The last extent counts only
 * without a tail cut (a window that a patch extends ends on an extent boundary). */
static void best_window(gml_stitch *st, gml_sblock *sb, const gml_bin *bin, size_t need,
                        gml_window *w)
{
    gml_heap *h = st->h;
    double unmap_all = 0;
    for (uint32_t i = 0; i < sb->nchunks; i += (uint32_t)gml_extent_len(h, sb->slots[i]))
        unmap_all += extent_unmap_cost(h, (uint32_t)gml_extent_len(h, sb->slots[i]));
    uint32_t start = 0;
    size_t bytes = 0; /* handed-out bytes of the current run [start, i) */
    double gain = 0;  /* what keeping [start, i) mapped saves, before the unmaps of the rest */
    for (uint32_t i = 0; i < sb->nchunks;) {
        uint32_t len = (uint32_t)gml_extent_len(h, sb->slots[i]);
        bool last = i + len == sb->nchunks;
        if (!extent_available(st, sb, i, len, bin) || (last && sb->tail_cut)) {
            start = i + len;
            bytes = 0;
            gain = 0;
            i += len;
            continue;
        }
        bytes += ((size_t)len << h->chunk_shift) - (i == 0 ? sb->head_off : 0);
        gain += extent_map_cost(h, len) + extent_unmap_cost(h, len);
        i += len;
        /* drop extents from the run's start while it still covers need without them */
        while (start < i) {
            uint32_t l0 = (uint32_t)gml_extent_len(h, sb->slots[start]);
            size_t b0 = ((size_t)l0 << h->chunk_shift) - (start == 0 ? sb->head_off : 0);
            if (bytes - b0 < need)
                break;
            bytes -= b0;
            gain -= extent_map_cost(h, l0) + extent_unmap_cost(h, l0);
            start += l0;
        }
        if (gain - unmap_all > w->saved)
            *w = (gml_window){.sb = sb, .lo = start, .hi = i, .bytes = bytes, .saved = gain - unmap_all};
    }
}

/* The bins found with work running during one search of the cache: what is known of them is
 * current, so another of their blocks is judged without a device call. */
typedef struct running_bins {
    gml_bin *bin[8];
    size_t n;
} running_bins;

/* Whether the work of sb's last free has passed: its stream asked (an event query) at most once
 * a search while that work runs. */
static bool last_free_passed(gml_stitch *st, const gml_sblock *sb, running_bins *r)
{
    for (size_t i = 0; i < r->n; i++)
        if (r->bin[i] == sb->bin)
            return gml_bin_known_done(st->h, sb->bin) >= sb->free_seq;
    if (gml_bin_passed(st->h, sb->bin, sb->free_seq))
        return true;
    if (r->n < sizeof r->bin / sizeof r->bin[0])
        r->bin[r->n++] = sb->bin;
    return false;
}

bool gml_stitch_window(gml_stitch *st, const gml_bin *bin, size_t need, gml_window *w)
{
    *w = (gml_window){0};
    running_bins running = {.n = 0};
    gml_sblock *sb;
    RB_FOREACH(sb, gml_sblock_tree, &st->cached) {
        if (available(st, sb, bin))
            continue; /* not stale: the cache serves it as it is */
        if (last_free_passed(st, sb, &running))
            best_window(st, sb, bin, need, w);
    }
    return w->sb != NULL;
}

size_t gml_stitch_evict_pick(gml_stitch *st, bool all, gml_sblock_vec *v)
{
    size_t n = 0;
    running_bins running = {.n = 0};
    for (int pass = 0; pass < 2; pass++) {
        for (gml_sblock *sb = TAILQ_LAST(&st->lru, gml_sblock_list), *prev;
             sb && (all || over_bounds(st)); sb = prev) {
            prev = TAILQ_PREV(sb, gml_sblock_list, lru);
            if (sb->live || (pass == 0 && !all && available(st, sb, NULL)))
                continue; /* pass 0 takes stale blocks only */
            if (!last_free_passed(st, sb, &running))
                continue;
            if (!gml_vec_push(v, sb))
                return n; /* host out of memory: the others stay cached */
            unlink_victim(st, sb);
            n++;
        }
    }
    return n;
}

void gml_stitch_evict_calls(gml_stitch *st, const gml_sblock_vec *v)
{
    gml_heap *h = st->h;
    for (size_t i = 0; i < v->n; i++) {
        const gml_sblock *sb = v->v[i];
        uintptr_t va = sb->b.addr - sb->head_off;
        if (!gml_stitch_unmap(h, va, sb->slots, sb->nchunks) ||
            gml_dev_va_free(h->dev, sb->res_va, sb->res_bytes))
            gml_stitch_warn_kept(sb, "tearing down");
    }
}

void gml_stitch_unlinked_done(gml_stitch *st, gml_sblock *sb)
{
    TAILQ_REMOVE(&st->evicting, sb, lru);
    for (uint32_t k = 0; k < sb->nchunks; k++)
        gml_chunk_unpin(st->h, sb->slots[k]);
    free(sb->slots);
    free(sb);
}

void gml_stitch_evict_done(gml_stitch *st, gml_sblock_vec *v)
{
    for (size_t i = 0; i < v->n; i++)
        gml_stitch_unlinked_done(st, v->v[i]);
    gml_vec_free(v);
}

/* gml_stitch_gc; with `unlock`, the driver calls run without the lock named to the heap. */
static size_t gc(gml_stitch *st, bool all, bool unlock)
{
    gml_sblock_vec v = {0};
    size_t n = gml_stitch_evict_pick(st, all, &v);
    if (n && unlock)
        gml_heap_unlock(st->h);
    gml_stitch_evict_calls(st, &v);
    if (n && unlock)
        gml_heap_relock(st->h);
    gml_stitch_evict_done(st, &v);
    return n;
}

size_t gml_stitch_gc(gml_stitch *st, bool all) { return gc(st, all, true); }

void gml_stitch_destroy(gml_stitch *st)
{
    gml_sblock *sb;
    while ((sb = TAILQ_FIRST(&st->lru))) {
        if (sb->live)
            gml_stitch_free(st, &sb->b, st->h->ready);
        gc(st, true, false); /* no other thread: the caller holds no lock */
        if (TAILQ_FIRST(&st->lru) == sb)
            break; /* its stream has not passed: leave it to process exit */
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

/* Stops at the first part whose block may not serve every stream, naming its bin in *arg: the one
 * stream that may take the whole block, if any. */
static bool stream_bin(gml_stitch *st, const gml_sblock *sb, gml_block *f, uintptr_t a, size_t len,
                       void *arg)
{
    (void)sb, (void)a, (void)len;
    if (gml_bin_serves(st->h, f->bin, NULL))
        return true;
    *(gml_bin **)arg = f->bin;
    return false;
}

size_t gml_stitch_largest_available(gml_stitch *st)
{
    gml_sblock *sb;
    RB_FOREACH_REVERSE(sb, gml_sblock_tree, &st->cached) {
        gml_bin *to = st->h->ready;
        for_each_part(st, sb, stream_bin, &to);
        if (available(st, sb, to))
            return sb->b.size;
    }
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

/* The checker's walk over the parts of one stitched block against its ranges. */
typedef struct part_cursor {
    gml_block *q;   /* the next part to match */
    const char *bad;
} part_cursor;

static bool match_range(gml_stitch *st, const gml_sblock *sb, uintptr_t a, uintptr_t e, void *arg)
{
    (void)st;
    part_cursor *c = arg;
    while (a < e) {
        gml_block *q = c->q;
        if (!q || q->addr != a || q->size > e - a) {
            c->bad = "parts do not tile what it hands out, in order";
            return false;
        }
        if (q->state != GML_B_HELD || q->holder != sb) {
            c->bad = "a part is not marked as its part";
            return false;
        }
        a += q->size;
        c->q = STAILQ_NEXT(q, held);
    }
    return true;
}

/* NULL when the parts of sb tile the home ranges it hands out, in order; else what is wrong. */
static const char *parts_tile(gml_stitch *st, const gml_sblock *sb)
{
    part_cursor c = {STAILQ_FIRST(&sb->parts), NULL};
    if (!for_each_range(st, sb, match_range, &c))
        return c.bad;
    return c.q ? "it holds parts beyond what it hands out" : NULL;
}

/* S1's shape of stitched block sb (its size within its chunks, whole extents in order, every
 * slot mapped, a live one a VIEW) and its pins counted into refs; false with *why set if not. */
static bool maps_whole_extents(gml_stitch *st, const gml_sblock *sb, uint32_t *refs, char *why,
                               size_t whylen)
{
    gml_heap *h = st->h;
    unsigned long a = (unsigned long)sb->b.addr;
    if (!sb->nchunks || sb->b.size + sb->head_off + sb->tail_cut != va_bytes(st, sb) ||
        sb->head_off >= gml_extent_len(h, sb->slots[0]) << h->chunk_shift ||
        sb->tail_cut >= gml_extent_len(h, sb->slots[sb->nchunks - 1]) << h->chunk_shift) {
        snprintf(why, whylen, "stitched block %#lx: size %zu, %zu bytes before and %zu after it in "
                 "%u chunks", a, sb->b.size, sb->head_off, sb->tail_cut, sb->nchunks);
        return false;
    }
    if (sb->live && sb->b.state != GML_B_VIEW) {
        snprintf(why, whylen, "live stitched block %#lx has state %d", a, sb->b.state);
        return false;
    }
    for (uint32_t i = 0; i < sb->nchunks; i++) {
        uint32_t s = sb->slots[i];
        if (s >= h->nslots || h->slots[s].state == GML_SLOT_EMPTY ||
            h->slots[s].state == GML_SLOT_GROWING) {
            snprintf(why, whylen, "stitched block %#lx maps an unmapped slot %u", a, s);
            return false;
        }
        refs[s]++;
    }
    for (uint32_t i = 0; i < sb->nchunks;) {
        uint32_t s = sb->slots[i], len = (uint32_t)gml_extent_len(h, s);
        if (gml_extent_head(h, s) != s || i + len > sb->nchunks) {
            snprintf(why, whylen, "stitched block %#lx maps part of an extent at slot %u", a, s);
            return false;
        }
        for (uint32_t j = 1; j < len; j++)
            if (sb->slots[i + j] != s + j) {
                snprintf(why, whylen, "stitched block %#lx maps extent %u out of order", a, s);
                return false;
            }
        i += len;
    }
    return true;
}

/* the checker's exit with *why already written */
#define FAILED()                                                                                  \
    do {                                                                                          \
        free(refs);                                                                               \
        return GMLAKE_ERR_CORRUPT;                                                                \
    } while (0)
#define FAIL(...)                                                                                 \
    do {                                                                                          \
        snprintf(why, whylen, __VA_ARGS__);                                                       \
        FAILED();                                                                                 \
    } while (0)

int gml_stitch_check(gml_stitch *st, size_t live_views, char *why, size_t whylen)
{
    gml_heap *h = st->h;
    uint32_t *refs = calloc(h->nslots, sizeof *refs);
    if (!refs)
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
        bytes += va_bytes(st, sb);
        gml_sblock *nx = TAILQ_NEXT(sb, lru);
        if (nx && nx->last_use >= sb->last_use)
            FAIL("stitched LRU list out of order at %#lx", (unsigned long)sb->b.addr);
        if (!maps_whole_extents(st, sb, refs, why, whylen))
            FAILED();
        if (!sb->live) {
            if (!STAILQ_EMPTY(&sb->parts))
                FAIL("cached stitched block %#lx still holds parts", (unsigned long)sb->b.addr);
            continue;
        }
        live++;
        const char *bad = parts_tile(st, sb);
        if (bad)
            FAIL("stitched block %#lx: %s", (unsigned long)sb->b.addr, bad);
    }
    TAILQ_FOREACH(sb, &st->making, lru) { /* parts carved, driver calls under way */
        const char *bad = parts_tile(st, sb);
        if (bad)
            FAIL("a stitched block being made: %s", bad);
    }
    TAILQ_FOREACH(sb, &st->evicting, lru) { /* unlinked, driver calls under way: still pinned */
        if (sb->live || !STAILQ_EMPTY(&sb->parts))
            FAIL("stitched block %#lx being torn down is live or holds parts",
                 (unsigned long)sb->b.addr);
        if (!maps_whole_extents(st, sb, refs, why, whylen))
            FAILED();
    }
    if (count != st->count || bytes != st->bytes)
        FAIL("stitched counters %zu blocks / %zu bytes, list has %zu / %zu", st->count, st->bytes,
             count, bytes);
    if (st->stitches != st->count + st->evictions + st->patches + st->patching)
        FAIL("%lu stitches made, but %zu mapped, %lu torn down, %lu patched and %zu being patched",
             (unsigned long)st->stitches, st->count, (unsigned long)st->evictions,
             (unsigned long)st->patches, st->patching);
    if (live != live_views || cached != count - live)
        FAIL("%zu live and %zu cached stitched blocks, but %zu in the live map and %zu indexed",
             live, count - live, live_views, cached);
    for (size_t s = 0; s < h->nslots; s++)
        if (refs[s] != h->slots[s].pins)
            FAIL("slot %zu: %u pins, stitched blocks map it %u times", s, h->slots[s].pins,
                 refs[s]);
    free(refs);
    return GMLAKE_OK;
}
