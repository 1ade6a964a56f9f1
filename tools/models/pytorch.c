/* pytorch.c — the caching allocator's blocks, pools, malloc/free and release (contract in
 * models.h; records in caching.h).  Follows DeviceCachingAllocator in CUDACachingAllocator.cpp. */
#include "caching.h"

#include "../charge.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned floor_log2(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

/* false when the rounded size would not fit in 64 bits */
static bool roundup_power2_next_division(uint64_t size, uint64_t divisions, uint64_t *out)
{
    if ((size & (size - 1)) == 0) {
        *out = size;
        return true;
    }
    uint64_t power2_floor = (uint64_t)1 << floor_log2(size);
    uint64_t division = power2_floor >> floor_log2(divisions);
    if (division == 0) {
        *out = power2_floor << 1;
        return power2_floor <= (UINT64_MAX >> 1);
    }
    return pt_round_up(size, division, out);
}

static bool round_size(const pt_alloc *a, uint64_t size, uint64_t *out)
{
    if (size < kMinBlockSize) {
        *out = kMinBlockSize;
        return true;
    }
    uint64_t div = a->opt.roundup_divisions;
    if (div > 1 && size > kMinBlockSize * div)
        return roundup_power2_next_division(size, div, out);
    return pt_round_up(size, kMinBlockSize, out);
}

static bool get_allocation_size(uint64_t size, uint64_t *out)
{
    if (size <= kSmallSize)
        *out = kSmallBuffer;
    else if (size < kMinLargeAlloc)
        *out = kLargeBuffer;
    else
        return pt_round_up(size, kRoundLarge, out);
    return true;
}

static uint64_t expandable_size(const pt_block *b)
{
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

static pt_block *get_free_block(pt_alloc *a, pt_pool *pool, uint64_t stream, uint64_t size)
{
    pt_block key = {.stream = stream, .size = size, .ptr = 0};
    pt_block *it = RB_NFIND(pt_size_tree, &pool->blocks, &key);
    if (!it || it->stream != stream)
        return NULL;
    if (it->es) {
        /* the block that can grow into unmapped pages counts at the size it can grow to */
        pt_block *next = RB_NEXT(pt_size_tree, &pool->blocks, it);
        while (it->es && next && next->stream == stream && expandable_size(next) < expandable_size(it)) {
            it = next;
            next = RB_NEXT(pt_size_tree, &pool->blocks, next);
        }
    }
    uint64_t mss = a->opt.max_split_size;
    if (size < mss && it->size >= mss)
        return NULL; /* no oversized block for a smaller request */
    if (size >= mss && it->size >= size + kLargeBuffer)
        return NULL; /* an oversized block serves requests within 20 MiB of its size */
    RB_REMOVE(pt_size_tree, &pool->blocks, it);
    return it;
}

static pt_block *alloc_block(pt_alloc *a, pt_pool *pool, uint64_t stream, uint64_t size,
                             uint64_t alloc_size)
{
    if (a->expandable)
        return pt_try_allocate_expandable(a, pool, stream, size);
    if (alloc_size > a->base.capacity - a->base.reserved)
        return NULL; /* cudaMalloc: out of memory */
    pt_block *b = pt_block_new(a, pool, stream, pt_va(a, alloc_size), alloc_size);
    if (!b)
        return NULL;
    a->base.reserved += alloc_size;
    gml_policy_call(&a->base, GML_CALL_CUDA_MALLOC, alloc_size, 1);
    return b;
}

static void release_block(pt_alloc *a, pt_block *b)
{
    gml_policy_call(&a->base, GML_CALL_CUDA_FREE, b->size, 1);
    a->base.reserved -= b->size;
    RB_REMOVE(pt_size_tree, &b->pool->blocks, b);
    free(b);
}

/* Frees oversize cached blocks of the request's stream, only enough for the request. */
static bool release_available_cached_blocks(pt_alloc *a, pt_pool *pool, uint64_t stream,
                                            uint64_t size)
{
    uint64_t mss = a->opt.max_split_size;
    if (mss == UINT64_MAX || a->expandable)
        return false;
    pt_block key = {.stream = stream, .size = size < mss ? mss : size, .ptr = 0};
    pt_block *it = RB_NFIND(pt_size_tree, &pool->blocks, &key);
    if (!it || it->stream != stream) {
        /* no single block is large enough: free oversize blocks, the largest first */
        it = it ? RB_PREV(pt_size_tree, &pool->blocks, it) : RB_MAX(pt_size_tree, &pool->blocks);
        uint64_t released = 0;
        while (it && released < key.size && it->size >= mss && it->stream == stream) {
            pt_block *cur = it;
            it = RB_PREV(pt_size_tree, &pool->blocks, it);
            if (cur->prev || cur->next)
                continue; /* a piece of a segment cannot be cudaFree'd */
            released += cur->size;
            release_block(a, cur);
        }
        return released >= key.size;
    }
    if (it->prev || it->next)
        return false;
    release_block(a, it);
    return true;
}

static void release_blocks(pt_alloc *a, pt_pool *pool)
{
    size_t n = 0, cap = 16;
    pt_block **to_unmap = malloc(cap * sizeof *to_unmap);
    pt_block *b, *nb;
    for (b = RB_MIN(pt_size_tree, &pool->blocks); b; b = nb) {
        nb = RB_NEXT(pt_size_tree, &pool->blocks, b);
        if (b->es) {
            if (n == cap) {
                pt_block **g = to_unmap ? realloc(to_unmap, 2 * cap * sizeof *g) : NULL;
                if (!g)
                    continue; /* out of memory: this block stays mapped */
                to_unmap = g;
                cap *= 2;
            }
            if (to_unmap)
                to_unmap[n++] = b;
        } else if (!b->prev && !b->next) {
            release_block(a, b);
        }
    }
    for (size_t i = 0; i < n; i++) {
        pt_unmap_block(a, to_unmap[i]);
        if (!to_unmap[i]->mapped && !to_unmap[i]->prev && !to_unmap[i]->next)
            pt_release_expandable_segment(a, to_unmap[i]);
    }
    free(to_unmap);
}

static bool release_cached_blocks(pt_alloc *a)
{
    release_blocks(a, &a->large);
    release_blocks(a, &a->small);
    return true;
}

static bool should_split(const pt_alloc *a, const pt_block *b, uint64_t size)
{
    uint64_t remaining = b->size - size;
    if (b->pool->is_small || a->expandable)
        return remaining >= kMinBlockSize;
    return size < a->opt.max_split_size && remaining > kSmallSize;
}

static int pt_malloc(gml_policy *pol, uint64_t orig_size, uint64_t stream, uint64_t *addr)
{
    pt_alloc *a = (pt_alloc *)pol;
    if (orig_size == 0)
        return GMLAKE_ERR_INVALID;
    uint64_t size, alloc_size;
    /* a size that cannot be rounded within 64 bits (within 2 MiB of 2^64) or is larger than the
     * device could ever hold: cudaMalloc (cuMemCreate) would fail, and no cached block fits */
    if (!round_size(a, orig_size, &size) || !get_allocation_size(size, &alloc_size) ||
        alloc_size > a->base.capacity)
        return GMLAKE_ERR_NOMEM;
    pt_pool *pool = size <= kSmallSize ? &a->small : &a->large;
    pt_block *b = get_free_block(a, pool, stream, size);
    if (!b) {
        b = alloc_block(a, pool, stream, size, alloc_size);
        if (!b && release_available_cached_blocks(a, pool, stream, size))
            b = alloc_block(a, pool, stream, size, alloc_size);
        if (!b && release_cached_blocks(a))
            b = alloc_block(a, pool, stream, size, alloc_size);
        if (!b)
            return GMLAKE_ERR_NOMEM;
    }
    if (should_split(a, b, size)) {
        pt_block *rest = b;
        b = pt_block_new(a, pool, stream, rest->ptr, size);
        if (!b) {
            RB_INSERT(pt_size_tree, &pool->blocks, rest);
            return GMLAKE_ERR_NOMEM;
        }
        b->es = rest->es;
        pt_splice(b, rest->prev, rest);
        rest->ptr += size;
        rest->size -= size;
        RB_INSERT(pt_size_tree, &pool->blocks, rest);
    }
    b->allocated = true;
    b->requested = orig_size;
    HASH_ADD(hh, a->live, ptr, sizeof b->ptr, b);
    *addr = b->ptr;
    return GMLAKE_OK;
}

static int pt_free(gml_policy *pol, uint64_t addr, uint64_t stream)
{
    (void)stream; /* the block returns to the pool of the stream it was allocated on */
    pt_alloc *a = (pt_alloc *)pol;
    pt_block *b;
    HASH_FIND(hh, a->live, &addr, sizeof addr, b);
    if (!b)
        return GMLAKE_ERR_INVALID;
    HASH_DEL(a->live, b);
    b->allocated = false;
    pt_try_merge(a, b, b->prev);
    pt_try_merge(a, b, b->next);
    RB_INSERT(pt_size_tree, &b->pool->blocks, b);
    return GMLAKE_OK;
}

/* Walks every segment from its first block; checks the invariants of caching.h. */
static int pt_check(gml_policy *pol, char *why, size_t whylen)
{
    pt_alloc *a = (pt_alloc *)pol;
    uint64_t bytes = 0, nfree = 0, nunmapped = 0, nlive = 0;
    pt_pool *pools[2] = {&a->large, &a->small};
    pt_block *b;
    for (int p = 0; p < 2; p++) {
        RB_FOREACH(b, pt_size_tree, &pools[p]->blocks) {
            nfree++;
        }
        RB_FOREACH(b, pt_addr_tree, &pools[p]->unmapped) {
            nunmapped++;
        }
    }
    nlive = HASH_COUNT(a->live);
    uint64_t seen_free = 0, seen_unmapped = 0, seen_live = 0;
    for (int p = 0; p < 2; p++) {
        for (int tree = 0; tree < 3; tree++) {
            pt_block *start = tree == 0 ? RB_MIN(pt_size_tree, &pools[p]->blocks)
                            : tree == 1 ? RB_MIN(pt_addr_tree, &pools[p]->unmapped)
                                        : a->live;
            for (pt_block *h = start; h;
                 h = tree == 0 ? RB_NEXT(pt_size_tree, &pools[p]->blocks, h)
                   : tree == 1 ? RB_NEXT(pt_addr_tree, &pools[p]->unmapped, h)
                               : h->hh.next) {
                if (h->prev || h->pool != pools[p])
                    continue; /* each segment once, from its first block */
                uint64_t seg_bytes = 0;
                for (pt_block *x = h; x; x = x->next) {
                    if (x->next && (x->next->prev != x || x->ptr + x->size != x->next->ptr)) {
                        snprintf(why, whylen, "blocks at %#llx and %#llx do not tile their segment",
                                 (unsigned long long)x->ptr, (unsigned long long)x->next->ptr);
                        return GMLAKE_ERR_CORRUPT;
                    }
                    if (x->next && !x->allocated && !x->next->allocated &&
                        x->mapped == x->next->mapped) {
                        snprintf(why, whylen, "free neighbours at %#llx were not merged",
                                 (unsigned long long)x->ptr);
                        return GMLAKE_ERR_CORRUPT;
                    }
                    if (x->allocated)
                        seen_live++;
                    else if (x->mapped)
                        seen_free++;
                    else
                        seen_unmapped++;
                    if (x->mapped)
                        seg_bytes += x->size;
                }
                bytes += seg_bytes;
            }
        }
    }
    if (seen_free != nfree || seen_unmapped != nunmapped || seen_live != nlive) {
        snprintf(why, whylen, "blocks in segments (free %llu, unmapped %llu, live %llu) disagree "
                 "with the trees and the live hash (%llu, %llu, %llu)",
                 (unsigned long long)seen_free, (unsigned long long)seen_unmapped,
                 (unsigned long long)seen_live, (unsigned long long)nfree,
                 (unsigned long long)nunmapped, (unsigned long long)nlive);
        return GMLAKE_ERR_CORRUPT;
    }
    if (bytes != a->base.reserved) {
        snprintf(why, whylen, "reserved %llu but the segments hold %llu bytes",
                 (unsigned long long)a->base.reserved, (unsigned long long)bytes);
        return GMLAKE_ERR_CORRUPT;
    }
    return GMLAKE_OK;
}

static void pt_destroy(gml_policy *pol)
{
    pt_alloc *a = (pt_alloc *)pol;
    pt_block *b, *nb;
    HASH_ITER(hh, a->live, b, nb) {
        HASH_DEL(a->live, b);
        free(b);
    }
    pt_pool *pools[2] = {&a->large, &a->small};
    for (int p = 0; p < 2; p++) {
        for (b = RB_MIN(pt_size_tree, &pools[p]->blocks); b; b = nb) {
            nb = RB_NEXT(pt_size_tree, &pools[p]->blocks, b);
            RB_REMOVE(pt_size_tree, &pools[p]->blocks, b);
            free(b);
        }
        for (b = RB_MIN(pt_addr_tree, &pools[p]->unmapped); b; b = nb) {
            nb = RB_NEXT(pt_addr_tree, &pools[p]->unmapped, b);
            RB_REMOVE(pt_addr_tree, &pools[p]->unmapped, b);
            free(b);
        }
    }
    pt_segments_free(a);
    free(a);
}

/* torch.cuda.empty_cache(): every free segment released (expandable ones unmapped), as at the
 * last step of an out of memory. */
static void pt_empty_cache(gml_policy *pol) { release_cached_blocks((pt_alloc *)pol); }

static const gml_policy_ops pt_ops = {pt_malloc, pt_free, pt_check, pt_empty_cache, pt_destroy};

gml_policy *gml_model_caching_create(const char *name, uint64_t capacity,
                                     const gml_model_settings *o, bool expandable, char *err,
                                     size_t errlen)
{
    pt_alloc *a = calloc(1, sizeof *a);
    if (!a) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    a->base.ops = &pt_ops;
    snprintf(a->base.name, sizeof a->base.name, "%s", name);
    a->base.capacity = capacity;
    a->opt = *o;
    a->expandable = expandable;
    RB_INIT(&a->large.blocks);
    RB_INIT(&a->large.unmapped);
    RB_INIT(&a->small.blocks);
    RB_INIT(&a->small.unmapped);
    a->small.is_small = true;
    a->next_va = (uint64_t)1 << 40;
    return &a->base;
}
