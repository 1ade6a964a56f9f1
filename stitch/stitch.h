/*
 * stitch.h — tier 2, virtual memory stitching (GMLake's VMS), built on the heap's API (core/heap.h)
 * only.  The pool (stitch/pool.c, tier 3: the tier above, in the same directory) calls it, with
 * its lock held, when no single free block fits a large request; nothing here includes pool.h.
 * Stitching owns its records (gml_sblock), the LRU of mapped stitched blocks, a size index of the
 * cached ones, its counters, settings, checker and strategy.  It never writes heap fields: it
 * carves and returns blocks, pins chunks and asks for growth through heap functions.
 *
 * Vocabulary
 *  piece           what one run of touching free home blocks that the request's stream may use
 *                  (gml_run_head: its own bin's and the ready bin's, which never merge) gives a
 *                  stitch: whole extents anywhere in the range; at the range's start also the
 *                  run's head (the free tail of an extent a live block starts), at its end the
 *                  run's tail (the free head of an extent a live block ends), each from one
 *                  chunk up.  CUDA maps a handle whole, so every extent touched is mapped whole;
 *                  the bytes of it that are not the piece's are mapped but not handed out
 *                  (head_off, tail_cut).  A run of whole extents that overshoots ends the range,
 *                  which then exceeds the request by less than an extent.
 *  stitched block  a fresh virtual range onto which the extents of several pieces are mapped in
 *                  order, handed out from head_off on.  While it lives the free bytes it hands
 *                  out are carved out of their home blocks (HELD parts, on its STAILQ), so nothing
 *                  else can hand them out; their home mappings stay.  Every chunk it maps is
 *                  pinned (the heap never releases it).  Its record (b, state VIEW) is what the
 *                  pool keeps in its live map.
 *  cached          on free the parts go back to their home blocks (in the freeing stream's bin)
 *                  but the stitched mapping stays.  A later request whose rounded size fits
 *                  (need <= size <= need x reuse_limit) takes it again, with no device call, if
 *                  every byte it hands out is free at home and may serve the request's stream.  A
 *                  cached block one of whose bytes is in use elsewhere is stale.
 *  StitchFree      tearing a cached stitched mapping down (unmap, free the range, unpin): stale
 *                  blocks first, least recently used first, and only once the GPU has finished
 *                  the work given before its last free.  Auto GC keeps the stitched blocks under
 *                  auto_gc blocks and stitch_bytes_limit virtual bytes.
 *  patch          a stitch that keeps a window of a stale cached block: a run of its extents
 *                  whose bytes are free at home and may serve the request's stream stays mapped
 *                  where it is, the block's other extents are unmapped, and only what the window
 *                  lacks is mapped after it, in the room its reservation keeps (a stitched range
 *                  reserves twice its size); the window's own extents cost no device call.  Only
 *                  a block whose last free's work has passed (its other extents are unmapped),
 *                  and only a window whose estimated saving (its maps and set access, less the
 *                  unmaps) is positive.  Its auto GC runs as a new stitch's; it counts as churn.
 *                  A failed unmap fails it with nothing mapped into the range (left reserved, as
 *                  a failed teardown's); a failed map or set access frees the whole range.
 *  borrow         (setting stitch_borrow, off by default: on 2 GPUs it did not show it pays)
 *                 before a stitch grows the pool for a request of at least 1/GML_BORROW_SHARE of
 *                 what the pool reserves, it takes the free memory the other streams' bins hold,
 *                 whose work may still run, by making the request's stream wait for it on the GPU
 *                 (gml_borrow_all, setting stream_wait): where the GPU runs far behind the host,
 *                 a large request of one stream otherwise grows the pool while the other
 *                 streams' frees are pending.  Not for smaller requests: a random-size workload
 *                 with frees on two streams would then stitch instead of growing, and churn; not
 *                 when those bins' free bytes cannot cover what the stitch lacks (a wait that
 *                 cannot spare the growth).
 *  being torn down a block StitchFree picked: unlinked under the lock (off the LRU and the size
 *                  index, not counted, its bin let go, on st->evicting), so no one takes, counts,
 *                  claims (gml_stitch_owns) or picks it again; it keeps its pins while its unmaps
 *                  and range free run without the lock, so release never returns an extent it
 *                  still maps; unpinned and freed once the lock is back.
 *
 * Decisions owned here: which chunks a stitch takes (choose_pieces, stitch.c); which cached block
 * serves a request (gml_stitch_cache_take, cache.c); when a stitched mapping is torn down
 * (gml_stitch_gc, cache.c).  The device calls of a stitched range (map, unmap) are map.c's, under both
 * stitch.c and cache.c: the decisions call down into the mechanism.  stitch.c calls cache.c (the
 * cached block that serves, a patch's window, the auto GC's picks and teardowns for a new stitch),
 * never the reverse (tests/calls.py: no circle).  Growth for a stitch is asked of the heap (gml_grow, GML_GROW_CHUNKS).
 *
 * Contract
 *  gml_stitch_alloc and gml_stitch_gc drop the lock named to the heap (gml_heap_set_lock) around
 *  their driver calls (a growth's, a new stitched block's together with the teardowns its auto GC
 *  picked, a teardown's), so gml_stitch_alloc's `bin` must be held (gml_bin_hold) by the caller,
 *  and anything not held may have changed on return of either (as after gml_grow).  Without a
 *  lock named they just run.
 *  GMLAKE_OK with *out (a VIEW record, or a LIVE heap block when one free block fits: growth
 *  made it, or it appeared while the caller's lock was dropped); GMLAKE_ERR_NOMEM when stitching is off,
 *  or the free chunks (plus, with may_grow, the chunks the device can still give) cannot cover it;
 *  GMLAKE_ERR_DEVICE when the driver failed.  On failure everything done is undone: carved parts
 *  go back to the bins they came from; a borrow is not (the blocks it moved stay in `bin`, behind
 *  the waits it made on bin's stream, whether the stitch succeeds or not).
 *  Invariants (gml_stitch_check): S1 a stitched block maps whole
 *  extents, in order, and hands out b.size bytes from head_off (less than its first extent) to
 *  tail_cut before its end (less than its last); the parts of a live block tile exactly the home
 *  bytes it hands out, in order; S2 a
 *  chunk's pins = the stitched blocks (live, cached or being torn down) that map it; S3 the
 *  counters, the LRU and the size index agree with the records, and every stitched block made is
 *  mapped now, was torn down or was used up by a patch, or is being patched (stitches = count +
 *  evictions + patches + patching).  A stitched block being made (its
 *  driver calls run without the pool lock) holds its parts already, is not pinned, counted nor on
 *  the LRU yet; one being torn down holds no parts, is pinned, and is neither counted nor on the
 *  LRU any more.
 */
#ifndef GML_STITCH_H
#define GML_STITCH_H

#include "../core/heap.h"

#define GML_BORROW_SHARE 16 /* a request of reserved / this or more borrows before it grows */

typedef enum gml_stitch_strategy {
    GML_STITCH_LARGEST = 0, /* GMLake's: largest free pieces first */
    GML_STITCH_BESTFIT = 1, /* fewest pieces, least leftover: best-fit piece for the remainder */
    GML_STITCH_STRATEGY_COUNT
} gml_stitch_strategy;

typedef struct gml_sblock {
    gml_block b;                     /* VIEW: its record in the pool's live map while live */
    uint32_t *slots;                 /* the chunks mapped, whole extents in virtual order */
    uint32_t nchunks;
    size_t head_off;                 /* bytes of the first extent mapped before b.addr */
    size_t tail_cut;                 /* bytes of the last extent mapped after b.addr + b.size */
    uintptr_t res_va;                /* the virtual range reserved for it (its mapping lies
                                        inside, from b.addr - head_off; the rest is room for a
                                        patch to map more extents after a window it keeps) */
    size_t res_bytes;
    bool live;
    STAILQ_HEAD(gml_part_list, gml_block) parts; /* live: home parts carved for it */
    gml_bin *bin;                    /* cached: bin of the last free (held: gml_bin_hold) */
    uint64_t free_seq;               /* cached: heap->seq at the last free */
    uint64_t last_use;               /* LRU clock at the last take or free */
    TAILQ_ENTRY(gml_sblock) lru;     /* every stitched block, most recently used first */
    RB_ENTRY(gml_sblock) cnode;      /* cached: in the size index */
} gml_sblock;

TAILQ_HEAD(gml_sblock_list, gml_sblock);
RB_HEAD(gml_sblock_tree, gml_sblock);
RB_PROTOTYPE(gml_sblock_tree, gml_sblock, cnode, cached_cmp)

typedef struct gml_stitch {
    gml_heap *h;
    bool enabled;
    bool patch;                      /* stitch_patch: patches allowed */
    bool borrow;                     /* stitch_borrow: a large stitch borrows before it grows */
    double reuse_limit;
    unsigned auto_gc;
    size_t bytes_limit;
    gml_stitch_strategy strategy;
    struct gml_sblock_list lru;      /* every stitched block mapped now */
    struct gml_sblock_list making;   /* stitched blocks whose parts are carved and whose driver
                                        calls are under way without the lock (linked by lru) */
    struct gml_sblock_list evicting; /* cached blocks unlinked for their teardown, whose driver
                                        calls are under way without the lock (linked by lru;
                                        still pinned) */
    struct gml_sblock_tree cached;   /* cached ones by (size, most recently used first) */
    size_t count, bytes;             /* stitched blocks mapped now and their virtual bytes */
    uint64_t clock;
    uint64_t stitches, reuses, evictions; /* evictions: counted when unlinked (and a block a
                                        failed patch used up) */
    uint64_t patches;                /* stitches made by patching a stale cached block (of
                                        `stitches`) */
    size_t patching;                 /* stale blocks unlinked by patches under way, whose
                                        outcome (a patch or an eviction) is not counted yet:
                                        stitches = count + evictions + patches + patching */
    uint64_t churns;                 /* new stitched blocks whose auto GC tore cached ones down */
    uint64_t borrow_alls;            /* borrows (gml_borrow_all) that moved blocks */
} gml_stitch;

typedef GML_VEC(gml_sblock *) gml_sblock_vec;

/* Stitching's rules on settings s: GMLAKE_OK, or GMLAKE_ERR_INVALID with *why naming the setting. */
int gml_stitch_settings_check(const gml_pool_settings *s, const char **why);
/* Checks the stitching fields of s; GMLAKE_OK or GMLAKE_ERR_INVALID with *why set. */
int gml_stitch_init(gml_stitch *st, gml_heap *h, const gml_pool_settings *s, const char **why);
/* Frees the live stitched blocks (parts to the ready bin: the caller has synchronized) and tears
 * every mapping down; no other thread may use the pool, and the lock is not held nor dropped. */
void gml_stitch_destroy(gml_stitch *st);
/* -1 when the name is unknown. */
int gml_stitch_strategy_from_name(const char *name);

int gml_stitch_alloc(gml_stitch *st, gml_bin *bin, size_t need, size_t req, bool may_grow,
                     gml_block **out);
/* A window of a stale cached block that a patch keeps: sb's chunks [lo, hi) (whole extents),
 * handing out `bytes` (from head_off when lo is 0). */
typedef struct gml_window {
    gml_sblock *sb;
    uint32_t lo, hi;
    size_t bytes;
    double saved; /* estimated driver seconds it saves against a stitch of its bytes */
} gml_window;
/* The window a patch for `need` bytes on bin's stream would keep: among the stale cached blocks
 * whose last free's work has passed, a run of extents whose handed-out bytes are all free at
 * home and may serve bin, cut to the fewest extents that cover need, the one whose estimated
 * saving (core/cost.h: its maps and set access, less the unmaps of its block's other extents) is
 * the largest; false when none saves anything.  A stale block's stream is asked about its work
 * (an event query) at most once a call. */
bool gml_stitch_window(gml_stitch *st, const gml_bin *bin, size_t need, gml_window *w);
/* Takes cached block sb off the LRU, the size index and the counters for a patch, onto
 * st->evicting (pinned, holding no parts, its bin let go), as for a teardown; not an eviction. */
void gml_stitch_unlink_for_patch(gml_stitch *st, gml_sblock *sb);
/* Takes a cached stitched block for the request (no device call); GMLAKE_ERR_NOMEM if none fits. */
int gml_stitch_cache_take(gml_stitch *st, gml_bin *bin, size_t need, size_t req, gml_block **out);
/* Carves what sb hands out (its range through its chunks) out of the free home blocks as its HELD
 * parts, in virtual order; false (nothing carved) when a byte of it is not free or on host out of
 * memory. */
bool gml_stitch_carve(gml_stitch *st, gml_sblock *sb);
/* Puts a new live stitched block on the LRU. */
void gml_stitch_link_new(gml_stitch *st, gml_sblock *sb);
/* Returns the parts of live stitched block sb home: to `bin`, or with bin NULL each to the bin it
 * was carved from (an undo).  The one way parts leave a stitched block. */
void gml_stitch_parts_home(gml_stitch *st, gml_sblock *sb, gml_bin *bin);
/* Frees the live stitched block whose record is b; its parts go to `bin`. */
void gml_stitch_free(gml_stitch *st, gml_block *b, gml_bin *bin);
/* Tears down cached stitched blocks: with all, every one cached when it is called whose last
 * free's work has passed (the caller synchronised first); otherwise until the auto GC bounds
 * hold (counting the blocks being made: they are about to be mapped).  The driver calls run
 * without the lock named to the heap; it returns once they have ended and the chunks are
 * unpinned (a release after it may free them).  Returns the number torn down. */
size_t gml_stitch_gc(gml_stitch *st, bool all);
/* gml_stitch_gc in three steps, for a caller with an unlocked window of its own.
 * pick (lock held): unlinks the blocks the GC would tear down now onto st->evicting and appends
 *   them to *v; returns their number.  A stream found with work running is asked (an event
 *   query) once a pick, not again for each of its blocks.
 * calls (no lock needed): their unmaps and range frees.
 * done (lock held): unpins their chunks, frees their records, empties *v. */
size_t gml_stitch_evict_pick(gml_stitch *st, bool all, gml_sblock_vec *v);
void gml_stitch_evict_calls(gml_stitch *st, const gml_sblock_vec *v);
void gml_stitch_evict_done(gml_stitch *st, gml_sblock_vec *v);
/* done for one block on st->evicting (a teardown's or a patch's; lock held): off the list, its
 * chunks unpinned, its record freed (its range is the caller's concern). */
void gml_stitch_unlinked_done(gml_stitch *st, gml_sblock *sb);
/* ---- map.c: the device calls of a stitched range (under stitch.c and cache.c) ---- */
/* Reserves a range of twice the bytes of the chunks `slots` (n of them, whole extents, heads
 * first; the second half is room for a patch), maps each extent from its start and sets access
 * over them: GMLAKE_OK with *va_out (the reservation's start), or GMLAKE_ERR_DEVICE with nothing
 * left mapped or reserved.  Reads only slot fields that HELD parts or pins keep fixed (no lock
 * needed). */
int gml_stitch_map(gml_heap *h, const uint32_t *slots, size_t n, uintptr_t *va_out);
/* The bytes gml_stitch_map reserves for n chunks. */
size_t gml_stitch_reserve_bytes(const gml_heap *h, size_t n);
/* Maps the extents of `slots` (n chunks) at va, inside a reserved range, and sets access over
 * them: GMLAKE_OK, or GMLAKE_ERR_DEVICE with none of them left mapped. */
int gml_stitch_map_at(gml_heap *h, uintptr_t va, const uint32_t *slots, size_t n);
/* Unmaps the first `mapped` chunks of a stitched range over `slots` (whole extents), one call per
 * extent; false if the device refused one. */
bool gml_stitch_unmap(gml_heap *h, uintptr_t va, const uint32_t *slots, size_t mapped);
/* Says on standard error that `what` (a teardown, a patch's unmaps) failed on sb's range, whose
 * reservation therefore stays. */
void gml_stitch_warn_kept(const gml_sblock *sb, const char *what);
/* Whether ptr lies inside a live or cached stitched block (not one being torn down: it holds no
 * allocation, and its range stops being the pool's when it is unlinked). */
bool gml_stitch_owns(gml_stitch *st, uintptr_t ptr);
/* The largest cached stitched block that one stream may take now (every byte it hands out free
 * and usable by that stream: servable without device calls). */
size_t gml_stitch_largest_available(gml_stitch *st);
/* The bytes a stitched range could add at its two ends to the whole free extents: the largest
 * head and the largest tail of two different free large blocks, any bin, each block alone (no
 * runs: no stream is asking; 0 on host out of memory). */
size_t gml_stitch_end_bytes(gml_stitch *st);
/* Appends every HELD part of the live stitched blocks and of those being made to *parts (for the
 * heap checker); false on host out of memory. */
bool gml_stitch_parts(gml_stitch *st, gml_block_vec *parts);
/* S1..S3; `live_views` is the number of VIEW records in the pool's live map. */
int gml_stitch_check(gml_stitch *st, size_t live_views, char *why, size_t whylen);

#endif /* GML_STITCH_H */
