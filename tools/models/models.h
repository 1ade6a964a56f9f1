/*
 * models.h — models of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp) as
 * replay policies (policy.h).  They hold no memory: they track which device memory the
 * allocator would hold for a sequence of requests, and which device calls it would make.
 *
 *  pytorch     the native allocator with its defaults: sizes rounded to 512 bytes (or to
 *              roundup_power2_divisions), small (<= 1 MiB) and large pools, 2 MiB segments for
 *              small requests, 20 MiB for 1-10 MiB ones, the request rounded to 2 MiB above;
 *              best fit per stream, blocks split when the remainder is >= 512 bytes (small pool)
 *              or > 1 MiB (large pool, requests below max_split_size), freed blocks merged with
 *              free neighbours; on a failed cudaMalloc the oversize cached blocks, then every
 *              unsplit cached segment, are released and the cudaMalloc retried.
 *  expandable  expandable_segments:True: one growing virtual range per stream and pool, mapped
 *              in 2 MiB (small pool) or 20 MiB (large pool) pages at the lowest address where
 *              the request fits; any remainder of >= 512 bytes is split off; free pages are
 *              unmapped only when a mapping fails (or on empty_cache).
 * Not modelled: CUDA graph pools, record_stream (a free is complete when the trace frees),
 * garbage_collection_threshold, per-process memory fraction.
 */
#ifndef GML_MODELS_H
#define GML_MODELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../policy.h"

/* The model with settings s (the model's own: gml_model_options.pytorch or .expandable).  NULL
 * with a message in err on failure. */
gml_policy *gml_model_caching_create(const char *name, uint64_t capacity,
                                     const gml_model_settings *s, bool expandable, char *err,
                                     size_t errlen);

#endif /* GML_MODELS_H */
