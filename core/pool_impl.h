/*
 * pool_impl.h — the pool's records and the internal functions shared by the core and stitch
 * layers.
 * Only the core and stitch sources include this; everything here runs with the pool lock held.
 *
 * Invariants (checked by gml_pool_check, check.c):
 *  I1 every mapped slot holds one chunk with exactly one home mapping; reserved = slots x chunk.
 *  I2 the home mappings are tiled by blocks without overlap; blocks of one space that touch are
 *     linked prev/next; a small block lies inside one small chunk; a large one on large chunks.
 *  I3 slot.owner is the block holding the slot's last byte.
 *  I4 two free neighbours are never in the same bin (they would have been merged).
 *  I5 a free block is in its bin's size tree and nowhere else; a live one in the live hash.
 *  I6 a chunk is used by at most one live block: a PART belongs to exactly one live stitched
 *     block, and the parts of a live stitched block cover exactly its chunks.
 *  I7 slot.stitch_refs = the number of stitched blocks (live or cached) that map the chunk.
 *  I8 active = sum of live request sizes; the counters agree with the records.
 */
#ifndef GML_POOL_IMPL_H
#define GML_POOL_IMPL_H

#include <bsd/sys/queue.h>
#include <bsd/sys/tree.h>
#include <pthread.h>
#include <uthash.h>

#include "pool.h"

/* uthash on pointer-sized keys: a cheap multiplicative hash instead of Jenkins. */
#undef HASH_FUNCTION
#define HASH_FUNCTION(keyptr, keylen, hashv)                                                      \
    do {                                                                                          \
        uint64_t k_ = *(const uint64_t *)(keyptr);                                                \
        k_ ^= k_ >> 29;                                                                           \
        k_ *= UINT64_C(0xbf58476d1ce4e5b9);                                                       \
        (hashv) = (unsigned)(k_ >> 32);                                                           \
    } while (0)

enum gml_space { GML_SPACE_LARGE = 0, GML_SPACE_SMALL = 1, GML_NSPACES = 2, GML_SPACE_STITCHED = 3 };
enum gml_state { GML_B_FREE = 0, GML_B_LIVE, GML_B_PART, GML_B_STITCHED };
enum gml_slot_state { GML_SLOT_EMPTY = 0, GML_SLOT_LARGE, GML_SLOT_SMALL };

typedef struct gml_bin gml_bin;
typedef struct gml_sblock gml_sblock;

typedef struct gml_block {
    uintptr_t addr;
    size_t size;
    size_t req;                      /* LIVE / STITCHED: bytes asked for */
    struct gml_block *prev, *next;   /* home neighbours of one space (NULL at a gap) */
    RB_ENTRY(gml_block) snode;       /* FREE: in bin->free[space] */
    UT_hash_handle hh;               /* LIVE / STITCHED: in pool->live */
    gml_bin *bin;                    /* FREE: its bin */
    uint64_t seq;                    /* FREE: pool->seq at the free (for stream promotion) */
    uint8_t state, space;
    gml_sblock *sb;                  /* PART: its stitched block */
    struct gml_block *part_next;     /* PART: next part of the same stitched block */
} gml_block;

RB_HEAD(gml_size_tree, gml_block);
RB_PROTOTYPE(gml_size_tree, gml_block, snode, gml_size_cmp)

struct gml_bin {
    gml_stream stream;               /* key; GML_STREAM_NONE for the ready bin; a retired bin's is
                                        GML_BIN_RETIRED | n, which no stream names */
    struct gml_size_tree free[GML_NSPACES];
    size_t nfree;
    gml_event ev;                    /* created on first need */
    uint64_t ev_seq;                 /* pool->seq when ev was recorded (0: never) */
    uint64_t done_seq;               /* work up to this seq is known complete */
    bool retired;                    /* its stream was destroyed: no event is recorded any more */
    uint64_t retire_seq;             /* retired: pool->seq at the retirement */
    bool want_record;                /* another thread needs an event only this stream's own thread
                                        (or context) can record: the next call on it records */
    gml_pool *pool;
    LIST_ENTRY(gml_bin) holding;     /* bins with nfree > 0 (the ready bin too): pool->holding */
    UT_hash_handle hh;
};
LIST_HEAD(gml_bin_list, gml_bin);
#define GML_BIN_RETIRED ((gml_stream)1 << 60)

typedef struct gml_slot {
    gml_block *owner;                /* block holding the slot's last byte */
    gml_handle handle;
    uint32_t stitch_refs;
    uint8_t state;
} gml_slot;

/* A stitched block: `b` is its record in the live hash (state STITCHED while live). */
struct gml_sblock {
    gml_block b;
    uint32_t *slots;                 /* the chunks, in virtual order */
    uint32_t nchunks;
    bool live;
    gml_block *parts;                /* LIVE: home parts carved for it */
    gml_bin *bin;                    /* CACHED: bin of the last free */
    uint64_t free_seq;               /* CACHED: pool->seq at the last free */
    uint64_t last_use;               /* LRU clock */
    gml_sblock *lru_prev, *lru_next; /* all stitched blocks, most recently used first */
};

typedef struct gml_counters {
    uint64_t active, peak_active, reserved, peak_reserved;
    uint64_t allocations, frees, live, failed;
    uint64_t stitches, stitch_reuses, stitch_evictions, cache_releases;
} gml_counters;

struct gml_pool {
    pthread_mutex_t mu;
    gml_device *dev;
    gml_pool_settings set;
    size_t chunk;
    unsigned chunk_shift;
    size_t limit;
    uintptr_t arena;
    size_t arena_size, nslots, slot_hint, mapped_slots;
    gml_slot *slots;
    gml_bin *bins;                   /* hash by stream */
    struct gml_bin_list holding;     /* bins holding free blocks (what a miss looks at) */
    gml_bin *ready;
    gml_bin *last_bin;
    gml_block *live;                 /* hash by addr */
    gml_block *rec_free;             /* recycled records (linked by next) */
    void **slabs;
    size_t nslabs, cap_slabs;
    uint64_t seq;
    uint64_t synced_seq;             /* the device was synchronised after every free up to this seq */
    uint64_t retired_bins;           /* bins retired so far (their keys) */
    gml_sblock *lru_head, *lru_tail; /* every stitched block mapped now */
    size_t stitched_count, stitched_bytes;
    uint64_t lru_clock;
    gml_counters c;
};

/* ---- blocks.c: records, trees, split / merge / carve ---- */
gml_block *gml_rec_get(gml_pool *p);
void gml_rec_put(gml_pool *p, gml_block *b);
void gml_free_tree_remove(gml_block *b);
/* Makes b (detached from any tree, linked to its neighbours) free in `bin`, merging with free
 * neighbours of the same bin; returns the surviving record. */
gml_block *gml_free_insert(gml_pool *p, gml_block *b, gml_bin *bin);
/* Best fit among the blocks usable by `bin` (its own and the ready bin's). */
gml_block *gml_best_fit(gml_pool *p, gml_bin *bin, int space, size_t need);
/* Takes `need` bytes from the tail of free block f as a live block of request `req`. */
gml_block *gml_take(gml_pool *p, gml_block *f, size_t need, size_t req);
/* Cuts [a, a+len) out of free block f (a, len chunk-aligned); head and tail stay free in f's
 * bin; returns the cut record, unlinked from no one (still a home neighbour), out of all trees. */
gml_block *gml_carve(gml_pool *p, gml_block *f, uintptr_t a, size_t len);
/* Unlinks b from its home neighbours (its range leaves the space). */
void gml_detach(gml_block *b);
/* Sets slot owners over [addr, addr+size) to b. */
void gml_claim(gml_pool *p, gml_block *b, uintptr_t addr, size_t size);
/* The block holding byte `addr` of a mapped slot. */
gml_block *gml_block_at(gml_pool *p, uintptr_t addr);
bool gml_usable(const gml_block *b, const gml_bin *bin, const gml_pool *p);

/* ---- arena.c: slots, growth, release, moving chunks between spaces ---- */
static inline size_t gml_slot_of(const gml_pool *p, uintptr_t a) { return (a - p->arena) >> p->chunk_shift; }
static inline uintptr_t gml_slot_addr(const gml_pool *p, size_t i) { return p->arena + (i << p->chunk_shift); }
/* Creates and maps k chunks and hands them to `space` as one free run: in the ready bin, or with
 * extend != NULL in extend's bin, starting where that free block ends.  Returns the free block or NULL
 * (*rc says why). */
gml_block *gml_grow(gml_pool *p, int space, size_t k, gml_block *extend, int *rc);
/* Grows the large space so that a block of `need` bytes usable by bin exists (creating as few
 * chunks as a free block at the end of a run allows). */
int gml_grow_large(gml_pool *p, gml_bin *bin, size_t need);
/* Gives the small space one more free chunk: a free large chunk if one is usable, else a new one. */
int gml_small_refill(gml_pool *p, gml_bin *bin);
/* Moves every fully free small chunk back to the large space; returns how many. */
size_t gml_small_reclaim(gml_pool *p);
/* Returns every fully free chunk (not mapped by a stitched block) to the device. */
size_t gml_release_free_chunks(gml_pool *p);
void gml_stats_reserved(gml_pool *p, long delta_slots);

/* ---- streams.c: bins, events, promotion ---- */
gml_bin *gml_bin_get(gml_pool *p, gml_stream s); /* NULL on host OOM */
/* True when the work submitted to bin's stream up to `seq` has completed (records and queries
 * an event as needed; with wait, waits for it). */
bool gml_bin_passed(gml_pool *p, gml_bin *bin, uint64_t seq, bool wait);
/* Moves blocks whose work has completed from every stream bin other than `except` to the ready
 * bin, and frees retired bins left empty.  Returns the number of blocks moved.  (`wait` and
 * gml_bin_passed's `wait` ask for no more than a query: nothing waits for the device while the
 * pool is locked; the pool synchronises without its lock first, see gml_pool_sync.) */
size_t gml_promote(gml_pool *p, gml_bin *except, bool wait);
/* Counts a free block into / out of bin (keeps pool->holding). */
static inline void gml_bin_count(gml_bin *bin, int delta)
{
    if (delta > 0 && bin->nfree++ == 0)
        LIST_INSERT_HEAD(&bin->pool->holding, bin, holding);
    else if (delta < 0 && --bin->nfree == 0)
        LIST_REMOVE(bin, holding);
}
/* Records bin's event now if its stream can be named here (the want_record request). */
void gml_bin_record(gml_pool *p, gml_bin *bin);
/* Whether some stream bin other than `except` holds free blocks (a device wait could free them). */
bool gml_bins_hold_blocks(gml_pool *p, gml_bin *except);
/* The stream of bin was destroyed: records an event covering its frees (the stream still exists),
 * and takes the bin out of the stream's name so that a new stream with the same handle starts
 * afresh; its blocks reach the ready bin once that event (or a device synchronisation) passed. */
void gml_bin_retire(gml_pool *p, gml_bin *bin);
void gml_bins_destroy(gml_pool *p);

/* ---- check.c ---- */
int gml_pool_check_locked(gml_pool *p, char *why, size_t whylen);

/* ---- stats ---- */
static inline void gml_stats_active(gml_pool *p, long long delta)
{
    p->c.active += (uint64_t)delta;
    if (p->c.active > p->c.peak_active)
        p->c.peak_active = p->c.active;
}

#define GML_ROUND_UP(x, a) (((x) + (a) - 1) / (a) * (a))

#endif /* GML_POOL_IMPL_H */
