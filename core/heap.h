/*
 * heap.h — tier 1, the heap mechanics: chunks, their home mappings, blocks, bins.  Built on the
 * device (device.h) only; it knows nothing of stitching or of the pool above it, which call it
 * with their lock held (the heap has none of its own).  Growth makes its driver calls without
 * that lock when the layer above names it (gml_heap_set_lock): see gml_grow.
 *
 * Vocabulary
 *  chunk          the address grain: `chunk` bytes (2 MiB by default); slot i of the arena is
 *                 arena + i * chunk.  Blocks of the small space live inside one chunk.
 *  extent         one physical allocation (one CUDA handle) of one or more consecutive chunks,
 *                 at most extent_size; the unit the device is asked for, released in and stitched
 *                 (CUDA maps a handle whole, only at offset 0).  The driver charges per handle, so
 *                 growth makes few large extents, as large as the memory held allows without
 *                 stranding much (see arena.c: the extent unit).
 *  home mapping   every extent held is mapped exactly once in the arena, a virtual range reserved
 *                 at creation, over its chunks' slots.
 *  block          a byte range of home mappings, one record (gml_block): FREE (in a bin), LIVE
 *                 (handed out by gml_take), or HELD (carved out by gml_carve for an upper layer,
 *                 which links it through holder / held).  The home mappings are tiled by
 *                 blocks; neighbours of one space are linked prev / next.
 *  space          large blocks span any run of large chunks; small blocks live inside small
 *                 chunks (one chunk each), so that small requests never pin chunks that large
 *                 requests, stitching or release could use.  A fully free chunk changes space
 *                 without device calls.
 *  bin            the free blocks last freed on one stream.  The ready bin's blocks may serve any
 *                 stream.  Whether a bin's blocks may serve a stream is decided in one place:
 *                 gml_bin_serves (bins.c); every search goes through it.
 *  pin            a chunk mapped by a view an upper layer made of it (a stitched range) is pinned
 *                 (gml_chunk_pin); release never returns an extent with a pinned chunk.
 *  VIEW           a record state the heap never tiles: an upper layer's allocation outside the
 *                 arena (a stitched block) kept in the same live map as LIVE blocks.
 *
 * Decisions owned here (one function each)
 *  best fit            gml_best_fit (blocks.c): smallest block >= need among the serving bins.
 *  cross-stream reuse  gml_bin_serves (bins.c); promotion gml_promote (streams.c).
 *  growth unit, amount gml_grow (arena.c, its extent_unit and plan_growth).
 *  release             gml_release_free_chunks (arena.c): whole unpinned extents of the ready bin.
 *
 * Invariants (gml_heap_check)
 *  H1 every mapped slot lies in exactly one extent (its head slot holds the handle and the length)
 *     with exactly one home mapping; reserved = mapped slots x chunk.
 *  H2 the home mappings are tiled by blocks without overlap; blocks of one space that touch are
 *     linked prev/next; a small block lies inside one small chunk; a large one on large chunks.
 *  H3 slot.owner is the block holding the slot's last byte.
 *  H4 two free neighbours are never in the same bin (they would have been merged); a free block
 *     is never merged with a neighbour of another bin.
 *  H5 a free block is in its bin's size tree and nowhere else.
 *  H6 the indexes a miss searches agree with the trees (bins.c): a stream bin's free block is
 *     either passed (seq <= its bin's threshold; in heap->passed and its bin's list) or pending
 *     (in its bin's pending list, in seq order), with the counts and lists of bins to match; a
 *     bin is in heap->cand_* by its largest block (or marked to be placed again);
 *     heap->small_whole lists the free whole small chunks.
 * Functions returning int give GMLAKE_OK, GMLAKE_ERR_NOMEM (device, limit or host memory) or
 * GMLAKE_ERR_DEVICE (the driver failed; everything done so far is undone); also GMLAKE_ERR_INVALID
 * (settings: gml_heap_settings_check, gml_heap_init) and GMLAKE_ERR_CORRUPT (gml_heap_check).
 */
#ifndef GML_HEAP_H
#define GML_HEAP_H

#include <pthread.h>

#include <bsd/sys/queue.h>
#include <bsd/sys/tree.h>
/* uthash grows a table when a bucket holds 10 x (its expansions + 1) records by default: with
 * 10^6 bins (a stream per request) lookups walked long chains of cold records.  Grow sooner. */
#ifndef HASH_BKT_CAPACITY_THRESH
#define HASH_BKT_CAPACITY_THRESH 3U
#endif
#include <uthash.h>

#include "../config/settings.h"
#include "device.h"
#include "vec.h"

/* uthash on pointer-sized keys: one multiply, its two halves folded, instead of Jenkins.  (The
 * product's high half alone was used before: on 10^6 consecutive keys, such as stream keys,
 * uthash found its buckets badly filled, stopped expanding at 32,768 buckets and every lookup
 * walked ~30 records.) */
#undef HASH_FUNCTION
#define HASH_FUNCTION(keyptr, keylen, hashv)                                                      \
    do {                                                                                          \
        uint64_t k_ = *(const uint64_t *)(keyptr);                                                \
        k_ ^= k_ >> 29;                                                                           \
        k_ *= UINT64_C(0xbf58476d1ce4e5b9);                                                       \
        (hashv) = (unsigned)(k_ ^ (k_ >> 32));                                                    \
    } while (0)

enum gml_space { GML_SPACE_LARGE = 0, GML_SPACE_SMALL = 1, GML_NSPACES = 2 };
enum gml_state { GML_B_FREE = 0, GML_B_LIVE, GML_B_HELD, GML_B_VIEW };
/* GROWING: reserved by a growth whose driver calls are under way without the lock (no handle, no
 * block, not counted as reserved yet); no one else grows there, and nothing else touches it. */
enum gml_slot_state { GML_SLOT_EMPTY = 0, GML_SLOT_LARGE, GML_SLOT_SMALL, GML_SLOT_GROWING };

typedef struct gml_bin gml_bin;

typedef struct gml_block {
    /* Laid out by use (session 21): the first cache line holds what every allocation and free
     * reads or writes, the second the links of the trees and lists a free block is on, the
     * third the rarer ones.  A record is 3 lines. */
    uintptr_t addr;
    size_t size;
    size_t req;                      /* LIVE / VIEW: bytes asked for */
    struct gml_block *prev, *next;   /* home neighbours of one space (NULL at a gap) */
    gml_bin *bin;                    /* FREE: its bin; HELD: the bin it was carved from (for an
                                      * undo within the carving operation only) */
    uint64_t seq;                    /* FREE: heap->seq at the free (for stream promotion) */
    uint8_t state, space;
    uint8_t where;                   /* FREE: GML_IN_READY, GML_IN_PENDING or GML_IN_PASSED */
    bool whole;                      /* FREE: on heap->small_whole */
    RB_ENTRY(gml_block) snode;       /* FREE: in bin->free[space] */
    TAILQ_ENTRY(gml_block) qnode;    /* pending: in its bin's `pending` list */
    LIST_ENTRY(gml_block) lnode;     /* passed: in its bin's `passed` list */
    RB_ENTRY(gml_block) pnode;       /* FREE in a stream bin: in heap->passed[space] when its work
                                        is known to have completed (seq <= gml_bin_threshold),
                                        else in its bin's `pending` list */
    LIST_ENTRY(gml_block) wnode;     /* FREE whole small chunk: in heap->small_whole */
    void *holder;                    /* HELD: the upper layer's record */
    STAILQ_ENTRY(gml_block) held;    /* HELD: in the holder's list */
} gml_block;

typedef GML_VEC(gml_block *) gml_block_vec;

RB_HEAD(gml_size_tree, gml_block);
RB_PROTOTYPE(gml_size_tree, gml_block, snode, gml_size_cmp)
enum { GML_IN_READY = 0, GML_IN_PENDING, GML_IN_PASSED };
/* Free blocks of stream bins known to have passed, all bins together, by (size, bin holding
 * order, addr): what a miss promotes (bins.c keeps it, streams.c reads it). */
RB_HEAD(gml_passed_tree, gml_block);
RB_PROTOTYPE(gml_passed_tree, gml_block, pnode, gml_passed_cmp)
/* One bin's free blocks not known to have passed, in seq order (a new free has the largest seq;
 * a block that keeps its seq keeps its place: gml_pend_pos). */
TAILQ_HEAD(gml_pend_list, gml_block);
LIST_HEAD(gml_block_list, gml_block);
/* Stream bins holding blocks of one space, by (their largest free block there, holding order,
 * address): one tree per space. */
RB_HEAD(gml_cand_large, gml_bin);
RB_HEAD(gml_cand_small, gml_bin);

struct gml_bin {
    gml_stream stream;               /* key; GML_STREAM_NONE for the ready bin; a retired bin's is
                                        GML_BIN_RETIRED | n, which no stream names */
    struct gml_size_tree free[GML_NSPACES];
    size_t nfree;
    gml_event ev;                    /* created on first need */
    uintptr_t ev_ctx;                /* the context ev was made in (device.h current_context): ev
                                        dies with it (gml_bins_context_ends) */
    uint64_t ev_seq;                 /* heap->seq when ev was recorded (0: never) */
    uint64_t done_seq;               /* work up to this seq is known complete */
    bool retired;                    /* its stream was destroyed: no event is recorded any more */
    bool foreign;                    /* its stream is another device's, or another context's than
                                        the device's primary one: a synchronisation of this device
                                        does not cover it (heap->synced_seq), only its event */
    uint64_t retire_seq;             /* retired: heap->seq at the retirement */
    bool want_record;                /* another thread needs an event only this stream's own thread
                                        (or context) can record: the next call on it records */
    uint32_t held;                   /* upper layers' records naming this bin (a cached stitched
                                        block last freed on it): gml_bin_hold / gml_bin_unhold */
    struct gml_heap *heap;
    LIST_ENTRY(gml_bin) all;         /* every bin: heap->all_bins */
    LIST_ENTRY(gml_bin) holding;     /* bins with nfree > 0 (the ready bin too): heap->holding */
    uint64_t hold_stamp;             /* heap->hold_clock when it last joined heap->holding */
    uint64_t asked;                  /* heap->ask_round of the last promotion that asked it */
    /* stream bins only (bins.c keeps them, through gml_bin_block_in / _out): */
    struct gml_pend_list pending;    /* free blocks not known to have passed, by seq */
    size_t npend[GML_NSPACES];
    LIST_ENTRY(gml_bin) pend_link[GML_NSPACES]; /* npend[s] > 0: in heap->pend_bins[s] */
    struct gml_block_list passed;    /* free blocks known to have passed (in heap->passed) */
    size_t npassed;
    LIST_ENTRY(gml_bin) passed_link; /* npassed > 0: in heap->passed_bins */
    size_t cmax[GML_NSPACES];        /* its largest free block of the space (0: none) */
    /* its place in heap->cand_* (by ckey_max > 0, then ckey_stamp): cmax and hold_stamp as they
     * were when it was last placed; a bin whose cmax or stamp changed since is `cdirty`, on
     * heap->cand_dirty, and placed again at the next promotion (the hot path only marks it) */
    size_t ckey_max[GML_NSPACES];
    uint64_t ckey_stamp[GML_NSPACES];
    bool cdirty;
    LIST_ENTRY(gml_bin) dirty_link;
    RB_ENTRY(gml_bin) cnode_large;   /* ckey_max[LARGE] > 0: in heap->cand_large */
    RB_ENTRY(gml_bin) cnode_small;   /* ckey_max[SMALL] > 0: in heap->cand_small */
};
LIST_HEAD(gml_bin_list, gml_bin);
RB_PROTOTYPE(gml_cand_large, gml_bin, cnode_large, gml_cand_cmp)
RB_PROTOTYPE(gml_cand_small, gml_bin, cnode_small, gml_cand_cmp)
#define GML_BIN_RETIRED ((gml_stream)1 << 60)

typedef struct gml_slot {
    gml_block *owner;                /* block holding the slot's last byte */
    gml_handle handle;               /* extent head: the extent's handle (0 elsewhere) */
    uint32_t head;                   /* the first slot of the slot's extent */
    uint32_t len;                    /* extent head: the extent's chunks */
    uint32_t pins;                   /* views of the chunk that upper layers hold */
    uint8_t state;
} gml_slot;

typedef struct gml_heap {
    gml_device *dev;
    size_t chunk, small_limit, round, limit;
    size_t extent_chunks;            /* most chunks in one extent */
    size_t extent_share;             /* an extent <= the larger of most_slots and the growth's
                                        chunks / extent_share (0: no bound) */
    bool stream_wait;                /* gml_borrow may make a stream wait for another's work */
    unsigned chunk_shift;
    uintptr_t arena;
    size_t arena_size, nslots, slot_hint, mapped_slots;
    gml_slot *slots;
    /* bins by stream key: open addressing, linear probing, at most half full (a lookup of a stream
     * not seen yet, as with a stream per request, reads one or two lines; a retired bin's key
     * names no stream, so it leaves the map and stays only on all_bins) */
    struct gml_bin_slot {
        gml_stream key;              /* the bin's stream, kept here: a probe reads no bin */
        gml_bin *bin;                /* NULL: an empty slot */
    } *bin_map;
    size_t bin_cap, bin_used;
    struct gml_bin_list all_bins;    /* every bin, for walks (checker, figures, destroy) */
    size_t nbins;
    struct gml_bin_list holding;     /* bins holding free blocks */
    uint64_t hold_clock;             /* stamps bins joining `holding` (bin->hold_stamp) */
    /* the indexes a miss searches (bins.c): cost logarithmic in blocks and bins */
    struct gml_passed_tree passed[GML_NSPACES]; /* stream bins' blocks known to have passed */
    struct gml_bin_list passed_bins; /* stream bins with such blocks */
    struct gml_bin_list pend_bins[GML_NSPACES]; /* stream bins with blocks of the space not
                                        known to have passed */
    struct gml_cand_large cand_large; /* stream bins holding large blocks */
    struct gml_cand_small cand_small; /* stream bins holding small blocks */
    struct gml_bin_list cand_dirty;  /* bins to place again in cand_* (gml_bin_cand_flush) */
    uint64_t synced_applied;         /* synced_seq as far as the indexes know it */
    uint64_t ask_round;              /* promotions so far (gml_bin.asked) */
    struct gml_block_list small_whole; /* free small blocks of a whole chunk (gml_small_reclaim) */
    gml_bin *ready;
    gml_block *rec_free;             /* recycled records (linked by next) */
    GML_VEC(gml_block *) slabs;
    bool no_new_slabs;               /* tests: the record allocator fails once rec_free is empty */
    uint64_t seq;
    uint64_t synced_seq;             /* the device was synchronised after every free up to this seq
                                        (set by the layer that synchronised, without its lock) */
    uint64_t retired_bins;           /* bins retired so far (their keys) */
    uint64_t reserved, peak_reserved;
    size_t most_slots;               /* the most slots ever mapped at once (the extent unit's base
                                        once memory was given back; never reset) */
    pthread_mutex_t *mu;             /* the caller's lock, dropped around growth's driver calls
                                        (NULL: kept) */
    pthread_cond_t grown;            /* broadcast (with mu) when a growth in flight ends */
    size_t growing_slots;            /* slots in state GROWING (counted against the limit) */
} gml_heap;

/* Free-memory figures (gml_heap_free_stats). */
typedef struct gml_heap_free {
    uint64_t free_bytes;             /* bytes in free blocks, every bin and space */
    uint64_t largest_free_bytes;     /* the largest free block */
    uint64_t whole_extent_bytes;     /* bytes of the whole extents inside free large blocks */
} gml_heap_free;

#define GML_ROUND_UP(x, a) (((x) + (a) - 1) / (a) * (a))

/* ---- arena.c: the heap's life, slots, growth, release, moving chunks between spaces ---- */
/* The heap's rules on settings s for a device of granularity g (0: not known yet, chunk_size taken
 * as given): GMLAKE_OK, or GMLAKE_ERR_INVALID with *why naming the setting. */
int gml_heap_settings_check(const gml_pool_settings *s, size_t granularity, const char **why);
/* Checks the heap fields of s, reserves the arena; GMLAKE_OK, or an error with *why set. */
int gml_heap_init(gml_heap *h, gml_device *dev, const gml_pool_settings *s, const char **why);
/* Growth drops *mu (the lock every heap call is made under) around its driver calls, and so may
 * the layers above on what they reserved (gml_heap_unlock / gml_heap_relock). */
void gml_heap_set_lock(gml_heap *h, pthread_mutex_t *mu);
static inline void gml_heap_unlock(gml_heap *h)
{
    if (h->mu)
        pthread_mutex_unlock(h->mu);
}
static inline void gml_heap_relock(gml_heap *h)
{
    if (h->mu)
        pthread_mutex_lock(h->mu);
}
/* Returns every chunk and the arena to the device; records and bins are freed. */
void gml_heap_destroy(gml_heap *h);
/* Returns every chunk to the device, those of live blocks too, frees every record and bin (their
 * events destroyed), and leaves the heap as gml_heap_init made it, over the same arena and slot
 * table with the same settings (peak_reserved kept), asking the device nothing else (its context
 * may have faulted): for a device whose context is about to be reset, which destroys every
 * allocation and event.  No other thread may be in the heap.  GMLAKE_OK, or GMLAKE_ERR_NOMEM
 * (host memory for the ready bin): the heap then has no ready bin and must not serve. */
int gml_heap_reset(gml_heap *h);
static inline size_t gml_slot_of(const gml_heap *h, uintptr_t a) { return (a - h->arena) >> h->chunk_shift; }
static inline uintptr_t gml_slot_addr(const gml_heap *h, size_t i) { return h->arena + (i << h->chunk_shift); }
static inline bool gml_in_arena(const gml_heap *h, uintptr_t a) { return a - h->arena < h->arena_size; }

enum gml_grow_goal {
    GML_GROW_BLOCK,  /* one free block of `need` bytes usable by the bin */
    GML_GROW_CHUNKS, /* whole free chunks usable by the bin adding up to `need` (to stitch) */
};
/* Grows `space` for a request of `need` bytes on `bin`: the one owner of the growth unit and
 * amount (see arena.c).  New chunks go to `bin`, or to the bin of the free block they extend.
 * With a lock named (gml_heap_set_lock) the driver calls run without it, on slots reserved
 * GROWING, so any free block, cached record or plan of the caller may have changed on return
 * (bins held with gml_bin_hold stay); `bin` must be held by the caller.  GMLAKE_OK also when the
 * growth waited for other growths in flight to end instead (the limit left no room): look again.
 * A growth of GML_GROW_CHECK chunks or more fails at once (GMLAKE_ERR_NOMEM, no driver call but
 * the query) where the device has less free memory than it needs. */
#define GML_GROW_CHECK 16
int gml_grow(gml_heap *h, gml_bin *bin, int space, enum gml_grow_goal goal, size_t need);
/* Gives the small space one more free chunk: a free large chunk `bin` may use, else a new one. */
int gml_small_refill(gml_heap *h, gml_bin *bin);
/* Moves every fully free small chunk back to the large space; returns how many. */
size_t gml_small_reclaim(gml_heap *h);
/* Returns to the device every whole unpinned extent of the free blocks that every stream may use
 * (the ready bin); the caller promotes what it can first.  Returns the number of chunks. */
size_t gml_release_free_chunks(gml_heap *h);
static inline void gml_chunk_pin(gml_heap *h, size_t slot) { h->slots[slot].pins++; }
static inline void gml_chunk_unpin(gml_heap *h, size_t slot) { h->slots[slot].pins--; }

/* ---- blocks.c: records, trees, best fit, split / merge / carve ---- */
gml_block *gml_rec_get(gml_heap *h); /* NULL on host out of memory */
void gml_rec_put(gml_heap *h, gml_block *b);
void gml_free_tree_remove(gml_block *b);
/* Makes b (out of every tree, linked to its neighbours) free in `bin`, merging it with free
 * neighbours of that bin only; returns the surviving record. */
gml_block *gml_free_insert(gml_heap *h, gml_block *b, gml_bin *bin);
/* Free block f of a stream bin and the run of free blocks around it that are its bin's or the
 * ready bin's (the two alternate: a free never merges across bins): the size they make together
 * (gml_ready_run), and the one block of f's bin they become (gml_join_ready: memory every stream
 * could use becomes that stream's, with a fresh seq). */
size_t gml_ready_run(const gml_heap *h, const gml_block *f);
gml_block *gml_join_ready(gml_heap *h, gml_block *f);
/* Best fit: the smallest free block of `space` >= need among the bins that serve `bin`. */
gml_block *gml_best_fit(gml_heap *h, gml_bin *bin, int space, size_t need);
/* Takes `need` bytes from the tail of free block f as a LIVE block of request `req` (not put in
 * any map: that is the caller's).  NULL on host out of memory, f unchanged. */
gml_block *gml_take(gml_heap *h, gml_block *f, size_t need, size_t req);
/* gml_take for a block that growth has just made or extended: when f ends where empty slots
 * begin (the frontier), `need` bytes are cut from its head instead, so that the remainder (below a
 * chunk when growth sized it) stays where the next growth extends it rather than between two live
 * blocks (docs/ARCHITECTURE.md "Extents", the ViT trace). */
gml_block *gml_take_grown(gml_heap *h, gml_block *f, size_t need, size_t req);
/* Cuts [a, a+len) out of free block f; head and tail stay free in f's bin; returns the cut as a
 * HELD record (still a home neighbour) remembering f's bin, or NULL on host out of memory. */
gml_block *gml_carve(gml_heap *h, gml_block *f, uintptr_t a, size_t len);
/* Unlinks b from its home neighbours (its range leaves the space). */
void gml_detach(gml_block *b);
/* Sets slot owners over [addr, addr+size) to b. */
void gml_claim(gml_heap *h, gml_block *b, uintptr_t addr, size_t size);
/* The block holding byte `addr` of a mapped slot. */
gml_block *gml_block_at(gml_heap *h, uintptr_t addr);
/* The whole chunks inside block b: [*lo, *hi), empty when *hi <= *lo. */
void gml_whole_chunks(const gml_heap *h, const gml_block *b, uintptr_t *lo, uintptr_t *hi);
/* The whole extents inside [a, e) of large home blocks: [*lo, *hi), empty when *hi <= *lo. */
void gml_range_whole_extents(const gml_heap *h, uintptr_t a, uintptr_t e, uintptr_t *lo, uintptr_t *hi);
/* The whole extents inside free large block b. */
void gml_whole_extents(const gml_heap *h, const gml_block *b, uintptr_t *lo, uintptr_t *hi);
/* Runs.  Free blocks that touch but sit in different bins never merge (H4), so the free memory a
 * stream may use (its bin's and the ready bin's, alternating) can lie in several blocks at once,
 * and an extent can be wholly free without lying inside one block.  A run is a maximal sequence
 * of touching free large blocks that all serve `to` (gml_usable); what may map whole extents
 * (stitching, and the growth that counts what a stitch has) looks at runs.  Whether free block f
 * begins its run (its lower neighbour does not serve `to`): */
bool gml_run_head(const gml_heap *h, const gml_block *f, const gml_bin *to);
/* The last block of the run that begins at f; *e: the byte after it. */
gml_block *gml_run_last(const gml_heap *h, gml_block *f, const gml_bin *to, uintptr_t *e);
/* The extent holding slot s: its first slot and its length in chunks. */
static inline size_t gml_extent_head(const gml_heap *h, size_t s) { return h->slots[s].head; }
static inline size_t gml_extent_len(const gml_heap *h, size_t s) { return h->slots[h->slots[s].head].len; }
/* The first byte of the extent holding byte a of a mapped slot, and the byte after its last. */
static inline uintptr_t gml_extent_lo(const gml_heap *h, uintptr_t a)
{
    return gml_slot_addr(h, gml_extent_head(h, gml_slot_of(h, a)));
}
static inline uintptr_t gml_extent_hi(const gml_heap *h, uintptr_t a)
{
    size_t s = gml_slot_of(h, a);
    return gml_slot_addr(h, gml_extent_head(h, s) + gml_extent_len(h, s));
}
/* The first and the last extent boundary (an extent's first byte, or the byte after its last)
 * inside [a, e] of large home blocks; false when [a, e) lies strictly inside one extent.
 * [*b1, *b2) are the whole extents inside it. */
bool gml_extent_bounds(const gml_heap *h, uintptr_t a, uintptr_t e, uintptr_t *b1, uintptr_t *b2);

/* ---- streams.c: bins' identity, events, retirement, promotion ---- */
gml_bin *gml_bin_get(gml_heap *p, gml_stream s); /* NULL on host OOM */
/* The bin of stream s, NULL if it has none (retired bins are no stream's). */
gml_bin *gml_bin_find(gml_heap *p, gml_stream s);
/* True when the work submitted to bin's stream up to `seq` has completed (a device
 * synchronisation up to heap->synced_seq, or an event recorded and queried as needed).  Nothing
 * here waits for the device: the layer above synchronises without its lock first. */
bool gml_bin_passed(gml_heap *p, gml_bin *bin, uint64_t seq);
/* Moves blocks whose work has completed from the stream bins other than `except` to the ready
 * bin, and frees retired bins left empty; returns the number of blocks moved.  need == 0: every
 * such block.  need > 0 (a miss of `space` by bin `except`): one such block >= need when there is
 * one (the smallest of those known to have passed without a device call, else the first found by
 * asking the bins whose largest block is that large, the tightest first), moved to `except` when
 * that is a stream bin (as gml_borrow's block, so that the asking stream's later frees merge with
 * what its request leaves of it), else to the ready bin; the rest staying with its stream, where
 * that stream's later frees merge with it; else every such block, asking each bin
 * with blocks not known to have passed at most once (for a large miss only those with large
 * ones).  Cost: logarithmic in blocks and bins, plus one step per bin asked (bins.c). */
size_t gml_promote(gml_heap *p, gml_bin *except, int space, size_t need);
/* After gml_promote found nothing for stream bin `bin`: a free block of `space` >= need that
 * another stream's bin holds and whose work may still run moves to `bin`, once bin's stream was
 * made to wait on the GPU for that work (an event recorded on the other stream after the block's
 * free; gml_dev_stream_wait), as CUDA's pool does with its internal dependencies.  The smallest
 * such block of the bin whose largest block is the tightest fit first.  Returns 1 if a block
 * moved; 0 when the heap's stream_wait is off, bin is the ready bin or retired, this thread
 * cannot name bin's stream, or no other bin can record an event covering a fitting block. */
size_t gml_borrow(gml_heap *p, gml_bin *bin, int space, size_t need);
/* Before a stitch for stream bin `bin` grows the pool: every free block of `space` that the other
 * stream bins hold (at most GML_BORROW_BINS of them, those whose largest block is the largest
 * first) moves to `bin`, once bin's stream was made to wait on the GPU for each such bin's work
 * up to its frees (as gml_borrow), so that the stitch may take their memory instead of new memory:
 * where the GPU runs far behind the host, the other streams' frees are still pending when a large
 * request of the main stream misses.  Nothing moves (no event, no wait) when those bins' free
 * bytes together are below `want` (what the stitch lacks: the waits could not spare the growth).
 * Returns the number of blocks moved; 0 then and under the conditions gml_borrow names. */
#define GML_BORROW_BINS 8
size_t gml_borrow_all(gml_heap *p, gml_bin *bin, int space, size_t want);
/* After a large miss of stream bin `bin`: one of bin's free blocks that, joined with its free
 * neighbours of the ready bin, makes a block >= need becomes that block (gml_join_ready); the
 * largest of bin's blocks first, at most GML_JOIN_TRIES of them.  A ready block that no single
 * stream's request needs stays usable by every stream (a free never joins it).  Returns 1 if
 * it joined. */
#define GML_JOIN_TRIES 64
size_t gml_join_for(gml_heap *p, gml_bin *bin, int space, size_t need);
/* Records bin's event now if its stream can be named here (the want_record request). */
void gml_bin_record(gml_heap *p, gml_bin *bin);
/* Whether some stream bin (not the ready bin) holds free blocks: a device wait would let them serve
 * every stream and be released (the asking stream's own too: release takes ready memory only). */
bool gml_bins_hold_blocks(gml_heap *p);
/* The stream of bin was destroyed: records an event covering its frees (the stream still exists),
 * and takes the bin out of the stream's name so that a new stream with the same handle starts
 * afresh; its blocks reach the ready bin once that event (or a device synchronisation) passed,
 * and the bin goes once it holds no block and no upper record names it. */
void gml_bin_retire(gml_heap *p, gml_bin *bin);
/* An upper layer's record names bin (its memory was last freed there; gml_bin_passed tells when
 * it may serve others): a retired bin stays until every such record let it go. */
static inline void gml_bin_hold(gml_bin *bin) { bin->held++; }
void gml_bin_unhold(gml_heap *p, gml_bin *bin);
void gml_bins_destroy(gml_heap *p);
/* Context ctx is about to end (destroyed, or a primary one released; it still exists): its events
 * would crash the process once it is gone.  Every event made in ctx is destroyed.  A bin whose
 * stream is known to be of ctx (its event was recorded there: an event and its stream share a
 * context; or ctx's legacy stream) is retired with no event recorded, since the stream ends with
 * the context, and, if `synced` (the caller synchronised ctx), its blocks are known to have
 * passed; else they wait for a synchronisation of the device (a foreign bin's too: ctx's work
 * ends with ctx, so a synchronisation after the end covers it).  A bin whose event was made in ctx
 * but never recorded only loses the event (its next record makes one where it is asked). */
void gml_bins_context_ends(gml_heap *p, uintptr_t ctx, bool synced);
/* ---- bins.c: the bins' trees, the one rule of cross-stream reuse, the miss indexes ---- */
/* The reuse rule: the free blocks of bin `from` may serve a request on bin `to`'s stream now
 * (to == NULL: every stream, as release needs) without waiting for any work. */
bool gml_bin_serves(const gml_heap *h, const gml_bin *from, const gml_bin *to);
/* Whether block b is free and may serve `to` now (gml_bin_serves on its bin). */
bool gml_usable(const gml_heap *h, const gml_block *b, const gml_bin *to);
/* The bins that serve `to`, in search order (its own first): prev NULL gives the first. */
gml_bin *gml_serving_bin_next(const gml_heap *h, const gml_bin *to, const gml_bin *prev);
#define GML_FOR_SERVING_BINS(h, to, it)                                                           \
    for (gml_bin *it = gml_serving_bin_next((h), (to), NULL); it;                                 \
         it = gml_serving_bin_next((h), (to), it))

/* Where a pending block was in its bin's pending list, so that the same block (or a piece of it
 * with its seq) goes back there: the hot path's split and the carve keep the list in seq order at
 * no cost. */
typedef struct gml_pend_pos {
    bool pending;
    gml_block *prev;                 /* the block before it (NULL: it was first) */
} gml_pend_pos;
/* Free block b has just entered / is about to leave its bin's size tree: counts it (keeps
 * heap->holding) and keeps the indexes a miss searches (heap->passed, the bin's pending list,
 * heap->cand, heap->small_whole).  `out` fills *pos (may be NULL); `in` with pos NULL appends a
 * pending block (a new free: the largest seq), else puts it after pos->prev. */
void gml_bin_block_in(gml_heap *p, gml_block *b, const gml_pend_pos *pos);
void gml_bin_block_out(gml_heap *p, gml_block *b, gml_pend_pos *pos);
/* Free block b (in its bin's tree) shrinks to `size`, keeping its address, seq and place: the hot
 * path's split, with no work on the indexes but the size tree (and heap->passed if passed). */
void gml_bin_block_shrink(gml_heap *p, gml_block *b, size_t size);
/* Places the bins whose largest block or holding order changed in heap->cand_* again. */
void gml_bin_cand_flush(gml_heap *p);
/* Takes a bin about to be freed out of every index. */
void gml_bin_forget(gml_heap *p, gml_bin *bin);
/* What is known of bin's work without a device call: done up to this seq (a device
 * synchronisation covers every bin of a stream of this device; remembered in done_seq). */
uint64_t gml_bin_known_done(gml_heap *p, gml_bin *bin);
/* The seq up to which bin's blocks are known to have passed, without a device call (a retired
 * bin: all or none). */
uint64_t gml_bin_threshold(gml_heap *p, gml_bin *bin);
/* Brings bin's blocks in line with its threshold after it rose (or fell: a retirement): pending
 * ones below it move to heap->passed, and a retired bin not known to have passed holds none. */
void gml_bin_settle(gml_heap *p, gml_bin *bin);

/* ---- heap_check.c ---- */
/* H1..H6, given the blocks the layers above hold: every LIVE and HELD block (`used`). */
int gml_heap_check(gml_heap *h, gml_block *const *used, size_t nused, char *why, size_t whylen);
/* Free-memory figures, walking every bin. */
void gml_heap_free_stats(gml_heap *h, gml_heap_free *out);

static inline void gml_heap_reserved(gml_heap *h, long delta_slots)
{
    h->mapped_slots += (size_t)delta_slots;
    h->reserved = (uint64_t)h->mapped_slots * h->chunk;
    if (h->mapped_slots > h->most_slots)
        h->most_slots = h->mapped_slots;
    if (h->reserved > h->peak_reserved)
        h->peak_reserved = h->reserved;
}

#endif /* GML_HEAP_H */
