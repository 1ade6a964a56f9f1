/* stitched.h — for the interposer tests (include after harness.h): an 8 MiB allocation that is a
 * stitched block, made of four free 2 MiB chunks: eight 2 MiB blocks, the cache emptied, every
 * other one freed.  The four live neighbours stay in v[1], v[3], v[5], v[7]. */
#ifndef GML_TEST_STITCHED_H
#define GML_TEST_STITCHED_H
#include <cuda_runtime_api.h>

#include "gmlake.h"

static void *stitched_8mib(void *v[8])
{
    const size_t two = (size_t)2 << 20;
    void *s = NULL;
    for (int i = 0; i < 8; i++)
        cr_assert_eq(cudaMalloc(&v[i], two), cudaSuccess);
    cr_assert_eq(gmlake_empty_cache(0), GMLAKE_OK);
    for (int i = 0; i < 8; i += 2)
        cr_assert_eq(cudaFree(v[i]), cudaSuccess);
    gmlake_stats before, after;
    gmlake_get_stats(0, &before);
    cr_assert_eq(cudaMalloc(&s, 4 * two), cudaSuccess);
    gmlake_get_stats(0, &after);
    cr_assert_eq(after.stitches, before.stitches + 1, "8 MiB made of four free 2 MiB chunks");
    return s;
}
#endif
