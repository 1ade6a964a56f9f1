/*
 * stitch.h — virtual memory stitching (GMLake's VMS), called by the pool only when no single
 * free block fits a large request.  Runs with the pool lock held.
 *
 * Vocabulary
 *  piece           a run of whole chunks inside one free home block (its chunk-aligned interior).
 *  stitched block  a fresh virtual range onto which the chunks of several pieces are mapped in
 *                  order.  While it lives its chunks are carved out of their home blocks as PART
 *                  records, so nothing else can hand them out; their home mappings stay.
 *  cached          on free the parts go back to their home blocks but the stitched mapping stays.
 *                  A later request whose rounded size fits (size <= need x reuse_limit) takes it
 *                  again, with no device call, if every chunk of it is free and usable by the
 *                  request's stream.  A cached block one of whose chunks is in use elsewhere is
 *                  stale.
 *  StitchFree      tearing a cached stitched mapping down (unmap, free the range): stale blocks
 *                  first, least recently used first, and only once the GPU has finished the work
 *                  given before its last free.  Auto GC keeps the stitched blocks under auto_gc
 *                  blocks and stitch_bytes_limit virtual bytes.
 *
 * Contract
 *  gml_stitch_alloc: GMLAKE_OK with *out; GMLAKE_ERR_NOMEM when the free chunks (plus, with
 *  may_grow, the chunks the device can still give) cannot cover the request; GMLAKE_ERR_DEVICE
 *  when the driver failed (everything done so far is undone).  Physical memory never grows by
 *  more than the deficit: need - (free usable chunk bytes), rounded up to chunks.
 */
#ifndef GML_STITCH_H
#define GML_STITCH_H

#include "../core/pool_impl.h"

int gml_stitch_alloc(gml_pool *p, gml_bin *bin, size_t need, size_t req, bool may_grow,
                     uintptr_t *out);
/* Takes a cached stitched block for the request (no device call); GMLAKE_ERR_NOMEM if none fits. */
int gml_stitch_cache_take(gml_pool *p, gml_bin *bin, size_t need, size_t req, uintptr_t *out);
/* Puts a new stitched block on the list of mapped ones. */
void gml_stitch_link_new(gml_pool *p, gml_sblock *sb);
/* Frees the live stitched block whose record is b; its parts go to `bin`. */
void gml_stitch_free(gml_pool *p, gml_block *b, gml_bin *bin);
/* Tears down cached stitched blocks: with all, every one (waiting for the GPU); otherwise until
 * the auto GC bounds hold.  Returns the number torn down. */
size_t gml_stitch_gc(gml_pool *p, bool all);
/* Whether ptr lies inside a stitched range. */
bool gml_stitch_owns(gml_pool *p, uintptr_t ptr);
/* Invariants I6 and I7 (see pool_impl.h). */
int gml_stitch_check(gml_pool *p, char *why, size_t whylen);

#endif /* GML_STITCH_H */
