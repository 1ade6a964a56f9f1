/* expandable.c — expandable segments (contract in models.h; records in caching.h): one virtual
 * range per stream and pool, sized for 1 1/8 of the device, into which pages of 2 MiB (small
 * pool) or 20 MiB (large pool) are mapped at the lowest address where a request fits.  Follows
 * ExpandableSegment, find_expandable_block, map_block, try_allocate_expandable_block and
 * unmap_block in CUDACachingAllocator.cpp. */
#include "caching.h"

#include "../charge.h"

#include <stdlib.h>

static pt_segment *segment_new(pt_alloc *a, uint64_t stream, bool small)
{
    pt_segment *es = calloc(1, sizeof *es);
    if (!es)
        return NULL;
    es->page = small ? kSmallBuffer : kLargeBuffer;
    uint64_t space = a->base.capacity + a->base.capacity / 8;
    es->max_pages = (space + es->page - 1) / es->page;
    es->mapped = calloc(es->max_pages, 1);
    if (!es->mapped) {
        free(es);
        return NULL;
    }
    es->stream = stream;
    es->base = pt_va(a, es->page * es->max_pages);
    es->next_seg = a->segments;
    a->segments = es;
    gml_policy_call(&a->base, GMLAKE_DC_VA_RESERVE, es->page * es->max_pages, 1);
    return es;
}

/* Maps the pages covering [ptr, ptr + size); returns the bytes mapped, 0 when out of memory. */
static uint64_t segment_map(pt_alloc *a, pt_segment *es, uint64_t ptr, uint64_t size)
{
    uint64_t begin = (ptr - es->base) / es->page;
    uint64_t end = (ptr + size - es->base + es->page - 1) / es->page;
    if (end > es->max_pages)
        end = es->max_pages;
    if (begin >= end)
        return 0;
    uint64_t bytes = (end - begin) * es->page;
    if (bytes > a->base.capacity - a->base.reserved)
        return 0; /* cuMemCreate fails: the device is full */
    for (uint64_t i = begin; i < end; i++) {
        es->mapped[i] = 1;
        gml_policy_call(&a->base, GMLAKE_DC_CHUNK_CREATE, es->page, 1);
        gml_policy_call(&a->base, GMLAKE_DC_MAP, es->page, 1);
    }
    /* one cuMemSetAccess over the range mapped */
    gml_policy_call(&a->base, GMLAKE_DC_SET_ACCESS, es->page, end - begin);
    return bytes;
}

static bool allocatable(const pt_block *b)
{
    return b && !b->allocated;
}

static bool has_available_address_space(const pt_block *b, uint64_t size)
{
    uint64_t bytes = 0;
    while (bytes < size && allocatable(b)) {
        bytes += b->size;
        b = b->next;
    }
    return bytes >= size;
}

/* The lowest address in any segment of this stream and pool with room for size (free and
 * unmapped blocks), or a new segment. */
static pt_block *find_expandable_block(pt_alloc *a, pt_pool *pool, uint64_t stream, uint64_t size)
{
    pt_block key = {.stream = stream, .ptr = 0};
    for (pt_block *it = RB_NFIND(pt_addr_tree, &pool->unmapped, &key); it && it->stream == stream;
         it = RB_NEXT(pt_addr_tree, &pool->unmapped, it)) {
        pt_block *c = it;
        if (allocatable(c->prev))
            c = c->prev;
        if (has_available_address_space(c, size))
            return c;
    }
    pt_segment *es = segment_new(a, stream, pool->is_small);
    if (!es)
        return NULL;
    pt_block *c = pt_block_new(a, pool, stream, es->base, es->page * es->max_pages);
    if (!c)
        return NULL;
    c->mapped = false;
    c->es = es;
    RB_INSERT(pt_addr_tree, &pool->unmapped, c);
    return c;
}

static bool map_block(pt_alloc *a, pt_block *to_map, uint64_t size)
{
    pt_pool *pool = to_map->pool;
    pt_block *rest = pt_block_new(a, pool, to_map->stream, 0, 0); /* the unmapped remainder */
    if (!rest)
        return false;
    uint64_t mapped = segment_map(a, to_map->es, to_map->ptr, size);
    if (mapped == 0) {
        free(rest);
        return false;
    }
    RB_REMOVE(pt_addr_tree, &pool->unmapped, to_map);
    to_map->mapped = true;
    if (mapped < to_map->size) {
        rest->ptr = to_map->ptr + mapped;
        rest->size = to_map->size - mapped;
        rest->mapped = false;
        rest->es = to_map->es;
        pt_splice(rest, to_map, to_map->next);
        RB_INSERT(pt_addr_tree, &pool->unmapped, rest);
        to_map->size = mapped;
    } else {
        free(rest);
    }
    pt_try_merge(a, to_map, to_map->prev);
    pt_try_merge(a, to_map, to_map->next);
    RB_INSERT(pt_size_tree, &pool->blocks, to_map);
    a->base.reserved += mapped;
    return true;
}

pt_block *pt_try_allocate_expandable(pt_alloc *a, pt_pool *pool, uint64_t stream, uint64_t size)
{
    pt_block *c = find_expandable_block(a, pool, stream, size);
    if (!c)
        return NULL;
    if (!c->mapped && !map_block(a, c, c->size < size ? c->size : size))
        return NULL;
    while (c->size < size) {
        /* c is free and followed by unmapped space: map more and merge */
        pt_block *nc = c->next;
        if (!nc || nc->mapped || nc->allocated)
            return NULL;
        uint64_t remaining = size - c->size;
        if (!map_block(a, nc, remaining < nc->size ? remaining : nc->size))
            return NULL;
        c = nc;
    }
    RB_REMOVE(pt_size_tree, &pool->blocks, c);
    return c;
}

void pt_unmap_block(pt_alloc *a, pt_block *b)
{
    pt_segment *es = b->es;
    uint64_t begin = (b->ptr - es->base + es->page - 1) / es->page;
    uint64_t end = (b->ptr + b->size - es->base) / es->page;
    if (begin >= end)
        return; /* no whole page inside the block */
    pt_pool *pool = b->pool;
    /* the free mapped pieces before and after the pages unmapped */
    pt_block *before = pt_block_new(a, pool, b->stream, 0, 0);
    pt_block *after = pt_block_new(a, pool, b->stream, 0, 0);
    if (!before || !after) {
        free(before);
        free(after);
        return; /* the pages stay mapped */
    }
    gml_policy_call(&a->base, GML_CALL_STREAM_SYNC, 0, 0);
    for (uint64_t i = begin; i < end; i++) {
        es->mapped[i] = 0;
        gml_policy_call(&a->base, GMLAKE_DC_UNMAP, es->page, 1);
        gml_policy_call(&a->base, GMLAKE_DC_CHUNK_RELEASE, es->page, 1);
    }
    uint64_t uptr = es->base + begin * es->page, usize = (end - begin) * es->page;
    RB_REMOVE(pt_size_tree, &pool->blocks, b);
    before->ptr = b->ptr;
    before->size = uptr - b->ptr;
    after->ptr = uptr + usize;
    after->size = b->size - before->size - usize;
    pt_block *pieces[2] = {before, after};
    for (int k = 0; k < 2; k++) {
        if (pieces[k]->size == 0) {
            free(pieces[k]);
            continue;
        }
        pieces[k]->es = es;
        if (k == 0)
            pt_splice(before, b->prev, b);
        else
            pt_splice(after, b, b->next);
        RB_INSERT(pt_size_tree, &pool->blocks, pieces[k]);
    }
    b->ptr = uptr;
    b->size = usize;
    b->mapped = false;
    pt_try_merge(a, b, b->prev);
    pt_try_merge(a, b, b->next);
    RB_INSERT(pt_addr_tree, &pool->unmapped, b);
    a->base.reserved -= usize;
}

void pt_release_expandable_segment(pt_alloc *a, pt_block *b)
{
    pt_segment *es = b->es;
    RB_REMOVE(pt_addr_tree, &b->pool->unmapped, b);
    free(b);
    for (pt_segment **pp = &a->segments; *pp; pp = &(*pp)->next_seg)
        if (*pp == es) {
            *pp = es->next_seg;
            break;
        }
    gml_policy_call(&a->base, GMLAKE_DC_VA_FREE, es->page * es->max_pages, 1);
    free(es->mapped);
    free(es);
}

void pt_segments_free(pt_alloc *a)
{
    while (a->segments) {
        pt_segment *es = a->segments;
        a->segments = es->next_seg;
        free(es->mapped);
        free(es);
    }
}
