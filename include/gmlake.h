/*
 * gmlake.h — the public C API of libgmlake.
 *
 * libgmlake serves a program's CUDA allocations from a per-device pool built on CUDA virtual
 * memory management, and stitches free physical chunks into fresh virtual ranges when no single
 * free block fits (GMLake's virtual memory stitching).  Most programs never call this API: they
 * run under LD_PRELOAD=libgmlake.so (or `gmlake run -- CMD`).  A program that wants gmlake's own
 * figures, or to return cached memory to the GPU, may call these functions; it can look them up
 * with dlsym(RTLD_DEFAULT, "gmlake_get_stats") to stay runnable without gmlake.
 *
 * Every function returning int but gmlake_enabled returns a gmlake_status: GMLAKE_OK (0) on
 * success, another value on failure.
 * Functions never abort the process.  `device` is a CUDA device ordinal; a device whose pool was
 * never created (no allocation served there yet) answers GMLAKE_ERR_NO_POOL.
 */
#ifndef GMLAKE_H
#define GMLAKE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GMLAKE_API __attribute__((visibility("default")))

typedef enum gmlake_status {
    GMLAKE_OK = 0,
    GMLAKE_ERR_NOMEM = 1,     /* the device (or the configured limit) has no memory left */
    GMLAKE_ERR_INVALID = 2,   /* bad argument: unknown pointer, NULL output, bad size */
    GMLAKE_ERR_DEVICE = 3,    /* the CUDA driver reported an error */
    GMLAKE_ERR_BUSY = 4,      /* an event has not completed yet (internal) */
    GMLAKE_ERR_NO_POOL = 5,   /* no pool exists for that device */
    GMLAKE_ERR_CORRUPT = 6,   /* the consistency checker found a broken invariant */
} gmlake_status;

/* Device calls counted by kind (index into gmlake_stats.device_calls). */
enum gmlake_devcall {
    GMLAKE_DC_CHUNK_CREATE = 0, /* cuMemCreate */
    GMLAKE_DC_CHUNK_RELEASE,    /* cuMemRelease */
    GMLAKE_DC_VA_RESERVE,       /* cuMemAddressReserve */
    GMLAKE_DC_VA_FREE,          /* cuMemAddressFree */
    GMLAKE_DC_MAP,              /* cuMemMap */
    GMLAKE_DC_UNMAP,            /* cuMemUnmap */
    GMLAKE_DC_SET_ACCESS,       /* cuMemSetAccess */
    GMLAKE_DC_EVENT_CREATE,     /* cuEventCreate */
    GMLAKE_DC_EVENT_DESTROY,    /* cuEventDestroy */
    GMLAKE_DC_EVENT_RECORD,     /* cuEventRecord */
    GMLAKE_DC_EVENT_QUERY,      /* cuEventQuery */
    GMLAKE_DC_EVENT_SYNC,       /* cuEventSynchronize */
    GMLAKE_DC_SYNCHRONIZE,      /* cuCtxSynchronize */
    GMLAKE_DC_STREAM_WAIT,      /* cuStreamWaitEvent */
    GMLAKE_DC_COUNT
};

/* Names of the device-call kinds, in enum order ("chunk_create", ...). */
GMLAKE_API const char *gmlake_devcall_name(int kind);

typedef struct gmlake_stats {
    uint64_t active_bytes;          /* sum of the sizes asked for by live allocations */
    uint64_t peak_active_bytes;
    uint64_t reserved_bytes;        /* physical chunks held x chunk size */
    uint64_t peak_reserved_bytes;
    uint64_t allocations;           /* successful allocations since the pool was created */
    uint64_t frees;
    uint64_t live_allocations;
    uint64_t failed_allocations;    /* requests the pool could not serve: out of memory, or the
                                       driver failed (the preload layer passes those to CUDA) */
    uint64_t stitches;              /* stitched blocks created (device calls made) */
    uint64_t stitch_reuses;         /* requests served by a cached stitched block */
    uint64_t stitch_evictions;      /* stitched mappings torn down (StitchFree, GC, release, a
                                       failed patch, a device reset) */
    uint64_t stitched_blocks;       /* stitched blocks mapped now (live + cached) */
    uint64_t stitched_bytes;        /* virtual bytes mapped by those blocks */
    uint64_t cache_releases;        /* times cached chunks were returned to the device */
    uint64_t chunk_size;
    double utilization;             /* peak_active / peak_reserved, 0 when nothing was reserved */
    uint64_t device_calls[GMLAKE_DC_COUNT];
    uint64_t free_bytes;            /* reserved bytes held free by the pool (in no live block) */
    uint64_t largest_free_bytes;    /* the largest single free block (home, or a cached stitched
                                       block whose chunks are all free): the most one request can
                                       get without device calls */
    uint64_t stitchable_bytes;      /* free bytes in whole free extents, which stitching can
                                       combine into one block without device memory growth, and
                                       the free ends of partly used extents one stitched block
                                       can begin and end with (the largest two); counted block by
                                       block, so an extent wholly free over two blocks (one
                                       stream's and one any stream may use), which that stream's
                                       stitches map whole, counts at most as an end */
    double device_seconds;          /* driver time of the device calls: on a GPU the wall time
                                       the calling threads spent inside them, measured around
                                       each; on the simulated device its cost model's estimate */
    double device_seconds_by_call[GMLAKE_DC_COUNT]; /* the same by kind of call */
} gmlake_stats;

/* Fill *out with the pool of `device`. */
GMLAKE_API int gmlake_get_stats(int device, gmlake_stats *out);
/* sizeof(gmlake_stats) in this library.  A program that finds gmlake_get_stats with dlsym (and so
 * may meet a libgmlake of another build) checks it against its own sizeof(gmlake_stats) first:
 * gmlake_get_stats writes the library's layout, which another build's header may not match. */
GMLAKE_API size_t gmlake_stats_size(void);
/* The wall time the calling threads have spent in the pool of `device` allocating (*alloc_seconds)
 * and freeing (*free_seconds): waiting for its lock, its own work and the device calls they make
 * (growth, stitching: device_seconds tells those apart), without the preload layer's work around
 * them (finding the device and stream) or a synchronous free's wait for the device.  Either
 * output may be NULL.  Kept out of gmlake_stats so that its layout stays what programs built
 * against earlier headers pass in. */
GMLAKE_API int gmlake_get_host_seconds(int device, double *alloc_seconds, double *free_seconds);
/* Return every cached free extent of `device` to the GPU (a free chunk whose extent a live
 * allocation shares stays; waits for the device first; while a CUDA
 * graph capture may be under way in the process, where that wait is an unsafe call, it does not
 * wait and returns only the chunks known idle).  In a child forked after gmlake started, where
 * CUDA cannot be used: GMLAKE_ERR_DEVICE, nothing done. */
GMLAKE_API int gmlake_empty_cache(int device);
/* Set the peaks to the current values. */
GMLAKE_API int gmlake_reset_peak_stats(int device);
/* 1 where gmlake serves this process's CUDA allocations; 0 where it is loaded but off
 * (GMLAKE_ENABLE=0, settings it refused: every allocation goes to CUDA) or in a child forked after
 * it started.  Loads the settings on its first call, as the first CUDA call would. */
GMLAKE_API int gmlake_enabled(void);
/* Run the whole-pool consistency checker; GMLAKE_ERR_CORRUPT names nothing, a line on standard
 * error does. */
GMLAKE_API int gmlake_check(int device);
/* The live allocation of gmlake's (any device) that holds ptr: its first byte into *base and the
 * bytes asked for into *size.  GMLAKE_ERR_INVALID when ptr lies in none (memory gmlake did not
 * serve, a freed block, one past the end) or an output is NULL.  What a CUDA IPC handle of ptr
 * names: cudaIpcOpenMemHandle in another process returns that allocation's first byte. */
GMLAKE_API int gmlake_allocation_range(const void *ptr, void **base, size_t *size);
/* The captures the program begins on `stream` (a cudaStream_t / CUstream) go into graph pool
 * `pool` (any nonzero number naming it, e.g. PyTorch's pool id) until it names 0 there: a capture
 * may then reuse the memory that earlier captures into the same pool freed inside themselves on
 * the same stream (never their outputs), as PyTorch's private pools do; the program promises, as
 * PyTorch asks of a shared pool, that graphs of one pool never run at the same time.  gmlake's
 * part of PyTorch's import calls it around torch.cuda.graph(pool=...).  cudaStreamPerThread (or
 * NULL, which cannot capture as the legacy stream) names the calling thread's default stream only.
 * GMLAKE_ERR_NOMEM: 64 streams name pools already (that capture keeps its memory to itself). */
GMLAKE_API int gmlake_graph_pool(void *stream, uint64_t pool);
/* Graph pool `from` is now called `to` (both nonzero, else GMLAKE_ERR_INVALID): for a capture
 * whose pool gets its name only once it ended (PyTorch's graph.pool() of a graph captured without
 * one, which a later capture may name to share it). */
GMLAKE_API int gmlake_graph_pool_rename(uint64_t from, uint64_t to);
/* A one-line description of a status code. */
GMLAKE_API const char *gmlake_strerror(int status);

#ifdef __cplusplus
}
#endif
#endif /* GMLAKE_H */
