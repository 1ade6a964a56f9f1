/* common.c — the caching-allocator model's shared mechanism (contract in caching.h): the block
 * trees, blocks, splicing and merging of neighbours, fake virtual addresses and overflow-checked
 * rounding.  Both pytorch.c and expandable.c call these; this file calls neither. */
#include "caching.h"

#include <stdlib.h>

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
    uint64_t p = a->next_va, rounded;
    if (!pt_round_up(size, kRoundLarge, &rounded))
        rounded = kRoundLarge; /* cannot happen: sizes are checked against the capacity first */
    a->next_va += rounded;
    return p;
}

bool pt_round_up(uint64_t size, uint64_t multiple, uint64_t *out)
{
    uint64_t r = size % multiple;
    if (r == 0) {
        *out = size;
        return true;
    }
    if (size > UINT64_MAX - (multiple - r))
        return false;
    *out = size + (multiple - r);
    return true;
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
