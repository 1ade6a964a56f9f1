/*
 * settings.h — the pool's settings as plain data, one struct for every tier below the pool, and
 * their defaults.  The defaults are the `def` texts of config/options.c's table (the one place they
 * are written); a field with no row there is 0, which means "the layer's own choice".
 * Who reads what: the heap (core/heap.h) the first group, stitching (stitch/stitch.h) the second
 * and the fourth, the pool (stitch/pool.h) the third.  Each layer checks its own fields when it is created.
 */
#ifndef GML_SETTINGS_H
#define GML_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

/* How many allocations stitching is said to churn after a new stitched block tore a cached one
 * down, and a failed growth keeps requests from growing first (the pool's churn_limit rule; the
 * option table's text names it): about one step of a training loop. */
#define GML_CHURN_WINDOW 4096
#define GML_STR_(x) #x
#define GML_STR(x) GML_STR_(x)

typedef struct gml_pool_settings {
    /* heap */
    size_t chunk_size;         /* physical chunk; rounded up to the granularity (0: 2 MiB) */
    size_t small_limit;        /* requests below it are small (packed in small chunks) */
    size_t round;              /* every request is rounded up to a multiple of this (0: 512) */
    size_t limit_bytes;        /* most bytes the pool may reserve; 0 = the device's total */
    size_t arena_bytes;        /* virtual bytes reserved for home mappings; 0 = 4 x device total */
    size_t extent_size;        /* largest extent (one handle) growth creates (0: one chunk) */
    bool stream_wait;          /* a stream may take another's freed block by waiting for that
                                * stream's work on the GPU (cuStreamWaitEvent) */
    unsigned extent_share;     /* an extent is at most 1/extent_share of the most memory
                                * reserved at once so far (or of the growth, where larger), 4 x
                                * that while the pool regrows below it (core/arena.c), and at
                                * least one chunk (0: no such bound) */
    /* stitching */
    bool vmm_defragment;       /* stitching on */
    size_t frag_limit;         /* smallest request stitched while the pool may still grow */
    double reuse_limit;        /* a cached stitched block serves a request if size <= req x this */
    bool stitch_patch;         /* a stitch may keep a stale cached block's free window mapped */
    bool stitch_borrow;        /* a large stitch takes other streams' pending frees by a GPU wait
                                * before it grows (gml_borrow_all) */
    /* pool */
    size_t churn_limit;        /* frag_limit while stitching churns (new stitched blocks tear
                                * cached ones down, within the last GML_CHURN_WINDOW
                                * allocations); 0: no such rule */
    int defrag_level;          /* 0 stitch before growing, 1 after growth failed, 2 after release */
    /* stitching */
    unsigned auto_gc;          /* most stitched blocks mapped at once (0 = no bound) */
    size_t stitch_bytes_limit; /* most virtual bytes in stitched blocks (0 = no bound) */
    int strategy;              /* a gml_stitch_strategy (stitch/stitch.h) */
} gml_pool_settings;

/* Fills s with the defaults of the settings table. */
void gml_pool_settings_default(gml_pool_settings *s);
/* The value of enum setting `key` named `name` (its index in the table's choices), -1 if none. */
int gml_setting_choice(const char *key, const char *name);

#endif /* GML_SETTINGS_H */
