/*
 * pool.h — tier 3, the per-device pool: the layer every allocation goes through.  It orchestrates
 * the heap (core/heap.h: chunks, blocks, bins, growth, release) and stitching (stitch/stitch.h)
 * and owns what belongs to neither: the entry points and their lock, the map of live
 * allocations, the order of the slow path, statistics, the aggregated checker and destruction.
 *
 * Where it lives: stitch/ holds two tiers.  Tier 2, VMS (stitch.h, stitch.c, cache.c, map.c), works on
 * the heap's API only; tier 3, the pool, sits above it: pool.c (entry points, slow-path order,
 * statistics, check aggregation, destroy) and registry.c (device -> pool, the public gmlake_*
 * API; registry.h).  The pool is in stitch/ rather than core/ so that the directory graph stays
 * acyclic (interpose, tools -> stitch -> core -> config): in core/ it would call into stitch/,
 * which calls into core/.  The tier rule holds per file: no file includes a header of a tier
 * above its own, so stitch.h, stitch.c, cache.c and map.c never include pool.h or registry.h
 * (tests/tiers.sh checks every #include, file by file and directory by directory).
 *
 * Contract
 *  - gml_pool_alloc returns GMLAKE_OK and a pointer aligned to 512 bytes, GMLAKE_ERR_NOMEM when
 *    the device (or limit_bytes) cannot hold the request even after releasing the cache,
 *    GMLAKE_ERR_INVALID for size 0 or above 2^62, GMLAKE_ERR_DEVICE when the driver failed (the pool stays
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
 *    work has completed.  When a context ends, gml_pool_context_ends (before the real call) does
 *    the same for its streams, and destroys the pool's events of it.
 *  - Thread-safe: one mutex per pool, never held while waiting for the device.  No heap
 *    allocation per request on the hot path.
 *  - Statistics are exact: active = sum of live request sizes, reserved = chunks held x chunk size.
 *  Decisions owned here: the order of the fallbacks when nothing fits (alloc_slow, pool.c).
 */
#ifndef GML_POOL_H
#define GML_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../config/settings.h"
#include "../core/device.h"
#include "gmlake.h"

typedef struct gml_pool gml_pool;

/* The rules gml_pool_create applies to settings, in one call: the heap's, stitching's and the
 * pool's own (`gmlake config --check` and the preload layer use it before any device exists).
 * granularity is the device's (0: not known yet; chunk_size is then taken as given).  0, or -1
 * with *why naming the setting. */
int gml_pool_settings_check(const gml_pool_settings *s, size_t granularity, const char **why);
/* Creates a pool on `dev` (which stays the caller's); settings from gml_pool_settings_default
 * (config/settings.h) and changed as needed.  NULL with *err set on failure. */
gml_pool *gml_pool_create(gml_device *dev, const gml_pool_settings *settings, const char **err);
/* Releases everything; live allocations are lost. */
void gml_pool_destroy(gml_pool *p);
/* A pool on a new sim device of `capacity` bytes (settings NULL: the defaults), for tools and
 * tests; NULL with *err set on failure.  gml_sim_pool_destroy frees both. */
gml_pool *gml_sim_pool_create(size_t capacity, bool backed, const gml_pool_settings *settings,
                              const char **err);
void gml_sim_pool_destroy(gml_pool *p);

int gml_pool_alloc(gml_pool *p, size_t size, gml_stream stream, uintptr_t *out);
/* The pool's recorder (the preload layer's trace): called with the pool lock held, so in the
 * order the pool served them whatever the threads, on each successful allocation ('A', its
 * pointer, the bytes asked for, its stream), each free ('F', the pointer, 0, its stream) and each
 * allocation a reset destroys ('F', the pointer, 0, GML_STREAM_NONE).  It must not call into the
 * pool.  Set before the pool serves anyone (NULL: none, the default). */
typedef void (*gml_pool_recorder)(void *arg, char op, uintptr_t ptr, size_t size, gml_stream stream);
void gml_pool_set_recorder(gml_pool *p, gml_pool_recorder fn, void *arg);
int gml_pool_free(gml_pool *p, uintptr_t ptr, gml_stream stream);
/* Size asked for by the live allocation at ptr, 0 if ptr is not one. */
size_t gml_pool_alloc_size(gml_pool *p, uintptr_t ptr);
/* The live allocation holding ptr (its start, and the size asked for): GMLAKE_OK, or
 * GMLAKE_ERR_INVALID when ptr lies in no live allocation of this pool. */
int gml_pool_find(gml_pool *p, uintptr_t ptr, uintptr_t *base, size_t *size);

/* IPC export of a live allocation: the physical extents behind it, in virtual order, each as a
 * file descriptor another process may import (core/device.h handle_export).  Mapped whole and
 * in order into a fresh range, they hold the allocation from byte `head` on. */
typedef struct gml_share {
    uintptr_t base;  /* the live allocation holding the pointer asked about */
    size_t size;     /* its size (bytes asked for) */
    size_t head;     /* bytes of the first extent before base */
    size_t n;        /* extents */
    size_t *bytes;   /* n: each extent's size */
    int *fd;         /* n: each extent's descriptor */
} gml_share;
/* Fills *out for the live allocation holding ptr (the export's driver calls are made under the
 * pool lock, so that no extent can be released meanwhile).  GMLAKE_ERR_INVALID: ptr lies in no
 * live allocation; GMLAKE_ERR_DEVICE: the device cannot export (its chunks were not created
 * exportable, or the driver refused); GMLAKE_ERR_NOMEM: host memory.  On success the caller owns
 * the descriptors and arrays: gml_share_clear closes and frees them. */
int gml_pool_share(gml_pool *p, uintptr_t ptr, gml_share *out);
void gml_share_clear(gml_share *s);

/* The home arena's virtual range [*lo, *hi): fixed from gml_pool_create to gml_pool_destroy, so
 * it may be read without the pool lock.  Every block but a stitched one lies in it; a stitched
 * block's range lies outside every arena. */
void gml_pool_arena(const gml_pool *p, uintptr_t *lo, uintptr_t *hi);
/* Whether ptr lies in memory this pool manages (home arena or a stitched range). */
bool gml_pool_owns(gml_pool *p, uintptr_t ptr);

/* Waits for the device, then returns every wholly free extent to it and tears down cached stitches;
 * GMLAKE_ERR_DEVICE if the wait failed (the cache is then released only as far as it is known
 * idle). */
int gml_pool_empty_cache(gml_pool *p);
/* The same without the wait: what is known idle (an event that completed, a wait made before)
 * goes back, the rest stays cached.  For a caller that may not wait for the device now (another
 * thread captures a graph, where a device wait is an unsafe call). */
void gml_pool_trim(gml_pool *p);
/* The device's primary context is about to be reset (cudaDeviceReset), which destroys every
 * allocation and event of it: waits for the device, then returns every chunk (those of live
 * allocations too) and destroys every stitched range and event, and forgets every allocation and
 * stream; the pool is as gml_pool_create made it, over the same arena (its peaks and counters
 * kept: what it destroyed counted as freed, its stitched ranges as torn down; each allocation it
 * destroyed is given to the recorder as a free with no stream).  No other thread may use the
 * pool meanwhile (CUDA asks the same of the program).
 * GMLAKE_OK, or GMLAKE_ERR_NOMEM where host memory ran out re-making the books: the pool then
 * serves nothing (every allocation answers GMLAKE_ERR_DEVICE, which the preload layer passes to
 * CUDA). */
int gml_pool_reset(gml_pool *p);
/* Waits for every stream of the pool's device (not holding the pool lock): every block freed
 * before the call may then serve any stream.  GMLAKE_ERR_DEVICE if the synchronisation failed. */
int gml_pool_sync(gml_pool *p);
/* The program is destroying `stream` (call before the real destroy, see the contract above). */
void gml_pool_stream_retire(gml_pool *p, gml_stream stream);
/* Context ctx (a CUcontext value; device.h current_context) may end now: the program destroys it,
 * or releases a primary context perhaps for the last time.  Call while it still exists, before
 * the real call, for every pool (a stream-ordered free may name another device's stream): the
 * pool destroys its events made in ctx, and the streams known to be of ctx end (their keys start
 * afresh).  `synced`: the caller synchronised ctx after the program's last free on its streams,
 * so their blocks may serve any stream; else they wait for a synchronisation of the device
 * (gml_pool_sync).  Nothing else changes: a context that lives on costs only new events. */
void gml_pool_context_ends(gml_pool *p, uintptr_t ctx, bool synced);
/* Takes (hold) or releases the pool lock: fork handlers keep the pool consistent across fork. */
void gml_pool_hold(gml_pool *p, bool hold);
void gml_pool_stats(gml_pool *p, gmlake_stats *out);
/* The same without the free-memory figures (free_bytes, largest_free_bytes, stitchable_bytes are
 * 0): constant time, for callers that read the counters after every operation (replay). */
void gml_pool_counters(gml_pool *p, gmlake_stats *out);
/* The wall time threads have spent in gml_pool_alloc and gml_pool_free, lock waits and their
 * device calls included (gmlake_get_host_seconds). */
void gml_pool_host_seconds(gml_pool *p, double *alloc_s, double *free_s);
void gml_pool_reset_peaks(gml_pool *p);
/* How often the slow path took each of its steps that decide cross-stream reuse, for tests that
 * must show the paths they claim to cover were taken (test_stream_order). */
typedef struct gml_pool_paths {
    uint64_t promotions;        /* misses after which gml_promote moved blocks */
    uint64_t borrows;           /* blocks taken from another stream's bin by a GPU-side wait */
    uint64_t borrow_alls;       /* stitches that took other bins' free memory by waits
                                   (stitch_borrow) */
    uint64_t patches;           /* stitches that patched a stale cached stitched block */
    uint64_t joins;             /* a free block of the asking bin joined its ready neighbours */
    uint64_t small_refills;     /* small misses served after a refill of the small space */
    uint64_t small_reclaims;    /* large misses after which free small chunks went large */
    uint64_t regrowths;         /* large misses sent to growth first because the pool regrows */
    uint64_t last_resorts;      /* misses that reached the last resort */
    uint64_t last_resort_syncs; /* of those, the ones that synchronised the device first */
} gml_pool_paths;
void gml_pool_paths_get(gml_pool *p, gml_pool_paths *out);
/* Whole-pool consistency check; GMLAKE_OK or GMLAKE_ERR_CORRUPT with a message in *why. */
int gml_pool_check(gml_pool *p, char *why, size_t whylen);
gml_device *gml_pool_device(gml_pool *p);
const gml_pool_settings *gml_pool_settings_of(gml_pool *p);

#endif /* GML_POOL_H */
