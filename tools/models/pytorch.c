/* pytorch.c — the caching allocator's blocks, pools, malloc/free and release (contract in
 * models.h; records in caching.h).  Follows DeviceCachingAllocator in CUDACachingAllocator.cpp. */
#include "caching.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_u64(uint64_t a, uint64_t b)
{
    return a < b ? -1 : a > b;
}

static int pt_size_cmp(const pt_block *a, const pt_block *b)
{
    int c = cmp_u64(a->stream, b->stream);
    if (!c)
        c = cmp_u64(a->size, b->size);
    return c ? c : cmp_u64(a->ptr, b->ptr);
}

static int pt_addr_cmp(const pt_block *a, const pt_block *b)
{
    int c = cmp_u64(a->stream, b->stream);
    return c ? c : cmp_u64(a->ptr, b->ptr);
}

RB_GENERATE(pt_size_tree, pt_block, node, pt_size_cmp)
RB_GENERATE(pt_addr_tree, pt_block, node, pt_addr_cmp)

pt_block *pt_block_new(pt_alloc *a, pt_pool *pool, uint64_t stream, uint64_t ptr, uint64_t size)
{
    (void)a;
    pt_block *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->pool = pool;
    b->stream = stream;
    b->ptr = ptr;
    b->size = size;
    b->mapped = true;
    return b;
}

uint64_t pt_va(pt_alloc *a, uint64_t size)
{
    uint64_t p = a->next_va;
    a->next_va += (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
    return p;
}

void pt_splice(pt_block *b, pt_block *before, pt_block *after)
{
    if (before)
        before->next = b;
    b->prev = before;
    if (after)
        after->prev = b;
    b->next = after;
}

uint64_t pt_try_merge(pt_alloc *a, pt_block *dst, pt_block *src)
{
    (void)a;
    if (!src || src->allocated || dst->mapped != src->mapped)
        return 0;
    if (dst->prev == src) {
        dst->ptr = src->ptr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
    } else {
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    uint64_t subsumed = src->size;
    dst->size += subsumed;
    if (src->mapped)
        RB_REMOVE(pt_size_tree, &src->pool->blocks, src);
    else
        RB_REMOVE(pt_addr_tree, &src->pool->unmapped, src);
    free(src);
    return subsumed;
}

static unsigned floor_log2(uint64_t v)
{
    return 63u - (unsigned)__builtin_clzll(v);
}

static uint64_t roundup_power2_next_division(uint64_t size, uint64_t divisions)
{
    if ((size & (size - 1)) == 0)
        return size;
    uint64_t power2_floor = (uint64_t)1 << floor_log2(size);
    uint64_t division = power2_floor >> floor_log2(divisions);
    if (division == 0)
        return power2_floor << 1;
    uint64_t floor = size & ~(division - 1);
    return floor == size ? size : floor + division;
}

static uint64_t round_size(const pt_alloc *a, uint64_t size)
{
    if (size < kMinBlockSize)
        return kMinBlockSize;
    uint64_t div = a->opt.roundup_divisions;
    if (div > 1 && size > kMinBlockSize * div)
        return roundup_power2_next_division(size, div);
    return (size + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

static uint64_t get_allocation_size(uint64_t size)
{
    if (size <= kSmallSize)
        return kSmallBuffer;
    if (size < kMinLargeAlloc)
        return kLargeBuffer;
    return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
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
    if (a->base.reserved + alloc_size > a->base.capacity)
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
    uint64_t size = round_size(a, orig_size);
    pt_pool *pool = size <= kSmallSize ? &a->small : &a->large;
    uint64_t alloc_size = get_allocation_size(size);
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

static const gml_policy_ops pt_ops = {pt_malloc, pt_free, pt_check, pt_destroy};

gml_policy *gml_model_caching_create(const char *name, uint64_t capacity,
                                     const gml_model_options *o, bool expandable, char *err,
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
    if (o)
        a->opt = *o;
    else
        gml_model_options_default(&a->opt);
    a->expandable = expandable;
    RB_INIT(&a->large.blocks);
    RB_INIT(&a->large.unmapped);
    RB_INIT(&a->small.blocks);
    RB_INIT(&a->small.unmapped);
    a->small.is_small = true;
    a->next_va = (uint64_t)1 << 40;
    return &a->base;
}
