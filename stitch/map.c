/*
 * map.c — the device calls of a stitched range: reserving and mapping it, extent by extent, and
 * unmapping it.  A range reserves twice what it maps first: the room a patch maps into after the
 * window it keeps (stitch.h).  Mechanism only: what to map is stitch.c's decision (a new stitched block), when to
 * unmap cache.c's (StitchFree); both call down into this file, which calls neither, so that the
 * two never call each other (tests/calls.py checks it).  Tier 2, on the heap's API (stitch.h).
 */
#include <stdio.h>

#include "stitch.h"

bool gml_stitch_unmap(gml_heap *h, uintptr_t va, const uint32_t *slots, size_t mapped)
{
    bool ok = true;
    for (size_t i = 0; i < mapped;) {
        size_t len = gml_extent_len(h, slots[i]);
        if (gml_dev_unmap(h->dev, va + (i << h->chunk_shift), len << h->chunk_shift))
            ok = false;
        i += len;
    }
    return ok;
}

int gml_stitch_map_at(gml_heap *h, uintptr_t va, const uint32_t *slots, size_t n)
{
    size_t i = 0; /* one map per extent: slots holds whole extents, heads first */
    while (i < n) {
        size_t len = gml_extent_len(h, slots[i]);
        if (gml_dev_map(h->dev, va + (i << h->chunk_shift), len << h->chunk_shift,
                        h->slots[slots[i]].handle))
            break;
        i += len;
    }
    if (i == n && gml_dev_set_access(h->dev, va, n << h->chunk_shift) == GMLAKE_OK)
        return GMLAKE_OK;
    gml_stitch_unmap(h, va, slots, i);
    return GMLAKE_ERR_DEVICE;
}

size_t gml_stitch_reserve_bytes(const gml_heap *h, size_t n) { return 2 * (n << h->chunk_shift); }

int gml_stitch_map(gml_heap *h, const uint32_t *slots, size_t n, uintptr_t *va_out)
{
    uintptr_t va;
    size_t res = gml_stitch_reserve_bytes(h, n);
    if (gml_dev_va_reserve(h->dev, res, h->chunk, &va) != GMLAKE_OK)
        return GMLAKE_ERR_DEVICE;
    if (gml_stitch_map_at(h, va, slots, n) == GMLAKE_OK) {
        *va_out = va;
        return GMLAKE_OK;
    }
    gml_dev_va_free(h->dev, va, res);
    return GMLAKE_ERR_DEVICE;
}

void gml_stitch_warn_kept(const gml_sblock *sb, const char *what)
{
    fprintf(stderr, "gmlake: warning: %s a stitched range at %#lx failed; its %zu virtual bytes "
                    "stay reserved\n", what, (unsigned long)sb->res_va, sb->res_bytes);
}
