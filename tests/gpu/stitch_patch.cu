// stitch_patch.cu — a patch on a real GPU: a cached stitched range whose home chunks are partly
// in use again keeps its free window mapped where it is, its other extents are unmapped and what
// the window lacks is mapped after it (no new virtual range); the window's bytes are still those
// written through the first range, data written through the patched range lands in its home
// chunks, and the chunk in use keeps its own.  With GMLAKE_STITCH_PATCH=off the same request gets
// a fresh range instead.  Run under LD_PRELOAD=libgmlake.so with GMLAKE_EXTENT_SHARE=0
// GMLAKE_EXTENT_SIZE=2MiB (one chunk per extent: tests/gpu/run.sh sets them); prints
// "N passed, M failed", exits non-zero on a failure.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "gpu_stats.cuh"

#define MiB ((size_t)1 << 20)

// The word at byte `off` of a range filled with `seed` from its start.
static uint32_t want(uint32_t seed, size_t off) { return seed ^ (uint32_t)((off / 4) * 2654435761u); }

int main() {
    const char *mode = getenv("GMLAKE_STITCH_PATCH");
    bool patch = !(mode && strcmp(mode, "off") == 0);
    device_fn empty, check;
    if (!preloaded(&empty, &check)) { printf("%d passed, %d failed\n", passed, failed); return 1; }
    CHECK(cudaMalloc(&bad, sizeof *bad) == cudaSuccess, "cudaMalloc small");
    CHECK(empty(0) == 0, "empty cache");
    // eight one-chunk extents; every other one freed: four 2 MiB holes between live blocks
    void *v[8];
    for (int i = 0; i < 8; i++)
        CHECK(cudaMalloc(&v[i], 2 * MiB) == cudaSuccess, "block %d", i);
    for (int i = 0; i < 8; i += 2)
        put(v[i], 2 * MiB, 100 + i);
    for (int i = 1; i < 8; i += 2)
        cudaFree(v[i]);
    gmlake_stats s0 = st();
    void *s;
    CHECK(cudaMalloc(&s, 8 * MiB) == cudaSuccess, "the four holes stitched");
    CHECK(st().stitches == s0.stitches + 1 && st().reserved_bytes == s0.reserved_bytes, "one stitch, no growth");
    put(s, 8 * MiB, 1);
    CHECK(cudaFree(s) == cudaSuccess, "cached");
    void *h;
    CHECK(cudaMalloc(&h, 2 * MiB) == cudaSuccess, "one of its chunks in use again: it is stale");
    put(h, 2 * MiB, 5);
    CHECK(cudaFree(v[0]) == cudaSuccess, "2 MiB free elsewhere");
    gmlake_stats s1 = st();
    void *p;
    CHECK(cudaMalloc(&p, 8 * MiB) == cudaSuccess, "8 MiB again");
    gmlake_stats s2 = st();
    CHECK(s2.stitches == s1.stitches + 1, "a stitch (%lu -> %lu)", (unsigned long)s1.stitches, (unsigned long)s2.stitches);
    CHECK(s2.reserved_bytes == s1.reserved_bytes, "no growth");
    uint64_t res = s2.device_calls[GMLAKE_DC_VA_RESERVE] - s1.device_calls[GMLAKE_DC_VA_RESERVE];
    uint64_t maps = s2.device_calls[GMLAKE_DC_MAP] - s1.device_calls[GMLAKE_DC_MAP];
    uint64_t unmaps = s2.device_calls[GMLAKE_DC_UNMAP] - s1.device_calls[GMLAKE_DC_UNMAP];
    CHECK(check(0) == 0, "the pool's checker agrees");
    if (patch) {
        CHECK(res == 0, "patched: no new range (%lu)", (unsigned long)res);
        CHECK(maps >= 1 && maps <= 2 && unmaps == maps, "only what the window lacks mapped (%lu maps, %lu unmaps)",
              (unsigned long)maps, (unsigned long)unmaps);
        size_t off = (size_t)((char *)p - (char *)s);
        CHECK((char *)p >= (char *)s && off < 8 * MiB && off % (2 * MiB) == 0, "the window stays where it was (+%zu)", off);
        // the window (2 or 3 chunks) still holds what was written through the first range
        uint32_t w0 = 0, w1 = 0;
        cudaMemcpy(&w0, p, 4, cudaMemcpyDeviceToHost);
        cudaMemcpy(&w1, (char *)p + 4 * MiB - 4, 4, cudaMemcpyDeviceToHost);
        CHECK(w0 == want(1, off) && w1 == want(1, off + 4 * MiB - 4), "the window's bytes kept (%#x %#x)", w0, w1);
    } else {
        CHECK(res == 1 && maps == 4 && unmaps == 0, "a fresh range (%lu reserves, %lu maps)", (unsigned long)res, (unsigned long)maps);
    }
    put(p, 8 * MiB, 9);
    CHECK(ok_data(p, 8 * MiB, 9), "data through the new range");
    CHECK(ok_data(h, 2 * MiB, 5), "the chunk in use keeps its data");
    for (int i = 2; i < 8; i += 2)
        CHECK(ok_data(v[i], 2 * MiB, 100 + i), "live block %d keeps its data", i);
    cudaFree(p);
    cudaFree(h);
    for (int i = 2; i < 8; i += 2)
        cudaFree(v[i]);
    cudaFree(bad);
    CHECK(empty(0) == 0 && check(0) == 0, "empty cache tears it down, the checker agrees");
    gmlake_stats s3 = st();
    CHECK(s3.stitched_blocks == 0 && s3.reserved_bytes == 0, "nothing left (%lu blocks, %lu bytes)",
          (unsigned long)s3.stitched_blocks, (unsigned long)s3.reserved_bytes);
    CHECK(cudaGetLastError() == cudaSuccess, "no CUDA error");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
