/*
 * pool.h — the per-device pool: the layer every allocation goes through.
 *
 * Vocabulary
 *  chunk          one physical allocation of `chunk_size` bytes (2 MiB by default), its own handle,
 *                 so that it can be mapped on its own (CUDA maps a handle only at offset 0).
 *  home mapping   every chunk held is mapped exactly once in the pool's arena, a large virtual
 *                 range reserved at pool creation; slot i of the arena is arena + i * chunk_size.
 *  block          a byte range of home mappings: free, live (handed out), or a part of a stitched
 *                 block.  The home mappings are tiled by blocks; neighbours in one space are linked.
 *  space          large blocks (requests >= small_limit) span any run of large chunks; small blocks
 *                 live inside small chunks (one chunk each), so that small requests never pin chunks
 *                 that stitching or release could use.  A fully free chunk moves between spaces
 *                 without device calls.
 *  stitched block a fresh virtual range onto which several free chunks are mapped in order (VMS,
 *                 see stitch/stitch.h); an extra view of chunks that keep their home mapping.
 *  bin            the free blocks last freed on one stream; blocks of the ready bin may serve any
 *                 stream (see streams.c for when a block crosses streams).
 *
 * Contract
 *  - gml_pool_alloc returns GMLAKE_OK and a pointer aligned to 512 bytes, GMLAKE_ERR_NOMEM when
 *    the device (or limit_bytes) cannot hold the request even after releasing the cache,
 *    GMLAKE_ERR_INVALID for size 0, GMLAKE_ERR_DEVICE when the driver failed (the pool stays
 *    consistent).  gml_pool_free returns GMLAKE_ERR_INVALID for a pointer that is not the start of
 *    a live allocation of this pool (double free, interior pointer, foreign pointer) and leaves
 *    the pool untouched.
 *  - Stream-ordered reuse: a block freed on stream S may serve S at once, another stream only
 *    after the work submitted to S before the free has completed.  A free with GML_STREAM_NONE
 *    (cudaFree) promises the device is done with the block: it may serve any stream at once.
 *  - Streams are stream keys (device.h): a created stream's handle, or a key naming one thread's
 *    per-thread default stream or one context's legacy stream.  When the program destroys a
 *    stream, gml_pool_stream_retire (called before the real destroy) ends its key: a new stream
 *    with the same handle starts afresh, and the old stream's free blocks serve others once its
 *    work has completed.
 *  - Thread-safe: one mutex per pool, never held while waiting for the device.  No heap
 *    allocation per request on the hot path.
 *  - Statistics are exact: active = sum of live request sizes, reserved = chunks held x chunk size.
 */
#ifndef GML_POOL_H
#define GML_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "gmlake.h"

typedef enum gml_stitch_strategy {
    GML_STITCH_LARGEST = 0, /* GMLake's: largest free pieces first */
    GML_STITCH_BESTFIT = 1, /* fewest pieces, least leftover: best-fit piece for the remainder */
    GML_STITCH_STRATEGY_COUNT
} gml_stitch_strategy;

typedef struct gml_pool_settings {
    size_t chunk_size;         /* physical chunk; 0 = 2 MiB rounded up to the granularity */
    size_t small_limit;        /* requests below it are small (packed in small chunks) */
    size_t round;              /* every request is rounded up to a multiple of this (>= 512) */
    size_t limit_bytes;        /* most bytes the pool may reserve; 0 = the device's total */
    size_t arena_bytes;        /* virtual bytes reserved for home mappings; 0 = 4 x device total */
    bool vmm_defragment;       /* stitching on */
    size_t frag_limit;         /* smallest request that may be stitched */
    double reuse_limit;        /* a cached stitched block serves a request if size <= req x this */
    int defrag_level;          /* 0 stitch before growing, 1 after growth failed, 2 after release */
    unsigned auto_gc;          /* most stitched blocks mapped at once (0 = no bound) */
    size_t stitch_bytes_limit; /* most virtual bytes in stitched blocks (0 = no bound) */
    gml_stitch_strategy strategy;
} gml_pool_settings;

typedef struct gml_pool gml_pool;

void gml_pool_settings_default(gml_pool_settings *s);
const char *gml_stitch_strategy_name(gml_stitch_strategy s);
/* -1 when the name is unknown. */
int gml_stitch_strategy_from_name(const char *name);

/* Checks settings against the rules gml_pool_create enforces (one place: the pool's own rules;
 * `gmlake config --check` and the preload layer call it before any device exists).  granularity
 * is the device's (0: not known yet; chunk_size is then taken as given).  0, or -1 with *why. */
int gml_pool_settings_check(const gml_pool_settings *s, size_t granularity, const char **why);
/* Creates a pool on `dev` (which stays the caller's).  NULL with *err set on failure. */
gml_pool *gml_pool_create(gml_device *dev, const gml_pool_settings *settings, const char **err);
/* Releases everything; live allocations are lost. */
void gml_pool_destroy(gml_pool *p);
/* A pool on a new sim device of `capacity` bytes (settings NULL: the defaults), for tools and
 * tests; NULL with *err set on failure.  gml_sim_pool_destroy frees both. */
gml_pool *gml_sim_pool_create(size_t capacity, bool backed, const gml_pool_settings *settings,
                              const char **err);
void gml_sim_pool_destroy(gml_pool *p);

int gml_pool_alloc(gml_pool *p, size_t size, gml_stream stream, uintptr_t *out);
int gml_pool_free(gml_pool *p, uintptr_t ptr, gml_stream stream);
/* Size asked for by the live allocation at ptr, 0 if ptr is not one. */
size_t gml_pool_alloc_size(gml_pool *p, uintptr_t ptr);
/* The home arena's virtual range [*lo, *hi): fixed from gml_pool_create to gml_pool_destroy, so
 * it may be read without the pool lock.  Every block but a stitched one lies in it; a stitched
 * block's range lies outside every arena. */
void gml_pool_arena(const gml_pool *p, uintptr_t *lo, uintptr_t *hi);
/* Whether ptr lies in memory this pool manages (home arena or a stitched range). */
bool gml_pool_owns(gml_pool *p, uintptr_t ptr);

/* Waits for the device, then returns every free chunk to it and tears down cached stitches;
 * GMLAKE_ERR_DEVICE if the wait failed (the cache is then released only as far as it is known
 * idle). */
int gml_pool_empty_cache(gml_pool *p);
/* Waits for every stream of the pool's device (not holding the pool lock): every block freed
 * before the call may then serve any stream.  GMLAKE_ERR_DEVICE if the synchronisation failed. */
int gml_pool_sync(gml_pool *p);
/* The program is destroying `stream` (call before the real destroy, see the contract above). */
void gml_pool_stream_retire(gml_pool *p, gml_stream stream);
/* Takes (hold) or releases the pool lock: fork handlers keep the pool consistent across fork. */
void gml_pool_hold(gml_pool *p, bool hold);
void gml_pool_stats(gml_pool *p, gmlake_stats *out);
void gml_pool_reset_peaks(gml_pool *p);
/* Whole-pool consistency check; GMLAKE_OK or GMLAKE_ERR_CORRUPT with a message in *why. */
int gml_pool_check(gml_pool *p, char *why, size_t whylen);
gml_device *gml_pool_device(gml_pool *p);
const gml_pool_settings *gml_pool_settings_of(gml_pool *p);

#endif /* GML_POOL_H */
