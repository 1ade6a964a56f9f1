/*
 * caching.h — the records of the caching-allocator model, shared by pytorch.c (pools, malloc/free,
 * release: the decisions), expandable.c (expandable segments: pages mapped into one growing
 * virtual range) and common.c (the mechanism both use: block trees, blocks, splice, merge,
 * rounding).  Calls go one way: pytorch.c -> expandable.c -> common.c, pytorch.c -> common.c,
 * and pytorch.c and expandable.c -> ../charge.c; never back up.  Names follow CUDACachingAllocator.cpp, so that the two can be read side by
 * side.  Only the two model sources include this.
 *
 * Invariants (checked by pt_check):
 *  - the blocks of a segment tile it: linked prev/next in address order, ptr + size = next->ptr;
 *  - a block that is neither allocated nor unmapped is in its pool's `blocks` tree, an unmapped
 *    one in `unmapped`, an allocated one in the live hash; two free blocks of the same mapped
 *    state are never neighbours (they are merged);
 *  - reserved = bytes of cudaMalloc'd segments + pages mapped.
 */
#ifndef GML_MODELS_CACHING_H
#define GML_MODELS_CACHING_H

#include <bsd/sys/tree.h>
#include <stdbool.h>
#include <uthash.h>

#include "models.h"

#define kMinBlockSize ((uint64_t)512)
#define kSmallSize ((uint64_t)1 << 20)
#define kSmallBuffer ((uint64_t)2 << 20)
#define kLargeBuffer ((uint64_t)20 << 20)
#define kMinLargeAlloc ((uint64_t)10 << 20)
#define kRoundLarge ((uint64_t)2 << 20)

typedef struct pt_pool pt_pool;
typedef struct pt_segment pt_segment;

typedef struct pt_block {
    uint64_t ptr, size, requested, stream;
    bool allocated, mapped;
    pt_pool *pool;
    pt_segment *es;                /* the expandable segment, NULL for a cudaMalloc'd one */
    struct pt_block *prev, *next;  /* neighbours in the segment */
    RB_ENTRY(pt_block) node;       /* in pool->blocks (free, mapped) or pool->unmapped */
    UT_hash_handle hh;             /* allocated: in the live hash, by ptr */
} pt_block;

RB_HEAD(pt_size_tree, pt_block);   /* by stream, size, ptr (BlockComparatorSize) */
RB_HEAD(pt_addr_tree, pt_block);   /* by stream, ptr (BlockComparatorAddress) */
RB_PROTOTYPE(pt_size_tree, pt_block, node, pt_size_cmp)
RB_PROTOTYPE(pt_addr_tree, pt_block, node, pt_addr_cmp)

struct pt_pool {
    struct pt_size_tree blocks;
    struct pt_addr_tree unmapped;
    bool is_small;
};

/* One expandable segment: a virtual range of max_pages pages of `page` bytes. */
struct pt_segment {
    uint64_t base, page, max_pages;
    uint8_t *mapped;               /* per page: a physical handle is mapped there */
    uint64_t stream;
    pt_segment *next_seg;
};

typedef struct pt_alloc {
    gml_policy base;
    gml_model_settings opt;
    bool expandable;
    pt_pool large, small;
    pt_block *live;
    pt_segment *segments;
    uint64_t next_va;              /* fake virtual addresses, never reused */
} pt_alloc;

/* common.c */
pt_block *pt_block_new(pt_alloc *a, pt_pool *pool, uint64_t stream, uint64_t ptr, uint64_t size);
uint64_t pt_va(pt_alloc *a, uint64_t size);
/* links b between before and after (either may be NULL), as Block::splice */
void pt_splice(pt_block *b, pt_block *before, pt_block *after);
/* combine a free neighbour `src` into `dst`; returns the bytes subsumed (0: not merged). */
uint64_t pt_try_merge(pt_alloc *a, pt_block *dst, pt_block *src);
/* size rounded up to a multiple of `multiple` in *out; false when that does not fit in 64 bits */
bool pt_round_up(uint64_t size, uint64_t multiple, uint64_t *out);

/* expandable.c */
pt_block *pt_try_allocate_expandable(pt_alloc *a, pt_pool *pool, uint64_t stream, uint64_t size);
void pt_unmap_block(pt_alloc *a, pt_block *b);
/* b is a whole unmapped segment: returns it to the device. */
void pt_release_expandable_segment(pt_alloc *a, pt_block *b);
void pt_segments_free(pt_alloc *a);

#endif /* GML_MODELS_CACHING_H */
