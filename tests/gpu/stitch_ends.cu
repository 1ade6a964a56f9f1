// stitch_ends.cu — a stitched range that begins in the free tail of one partly used extent and
// ends in the free head of another, on a real GPU: the driver maps each handle whole into the
// stitched range (the live blocks' bytes too, never handed out), the range is entered at an
// offset, data written through it lands in the free parts only, and the live blocks keep theirs.
// Run under LD_PRELOAD=libgmlake.so with GMLAKE_EXTENT_SHARE=0 GMLAKE_EXTENT_SIZE=8MiB (uniform
// 8 MiB extents: tests/gpu/run.sh sets them); prints "N passed, M failed", exits non-zero on a
// failure.
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include "gpu_stats.cuh"

#define MiB ((size_t)1 << 20)

int main() {
    device_fn empty, check;
    if (!preloaded(&empty, &check)) { printf("%d passed, %d failed\n", passed, failed); return 1; }
    CHECK(cudaMalloc(&bad, sizeof *bad) == cudaSuccess, "cudaMalloc small");
    CHECK(empty(0) == 0, "empty cache");
    // E1 (8 MiB): live [0, 3), free [3, 8); a live 2 MiB extent; E2 (8 MiB): free [0, 5), live [5, 8)
    void *t, *a, *b, *sep, *c;
    CHECK(cudaMalloc(&t, 8 * MiB) == cudaSuccess, "E1");
    cudaFree(t);
    CHECK(cudaMalloc(&a, 5 * MiB) == cudaSuccess && cudaMalloc(&b, 3 * MiB) == cudaSuccess, "E1 cut in two");
    CHECK((char *)a == (char *)b + 3 * MiB, "b at E1's start, a after it (%p %p)", b, a);
    CHECK(cudaMalloc(&sep, 2 * MiB) == cudaSuccess, "a live extent between E1 and E2");
    CHECK(cudaMalloc(&t, 8 * MiB) == cudaSuccess, "E2");
    cudaFree(t);
    CHECK(cudaMalloc(&c, 3 * MiB) == cudaSuccess && (char *)c == (char *)t + 5 * MiB, "c at E2's top");
    cudaFree(a);
    put(b, 3 * MiB, 11);
    put(c, 3 * MiB, 22);
    put(sep, 2 * MiB, 33);
    gmlake_stats s0 = st();
    CHECK(s0.stitchable_bytes == 10 * MiB, "no whole free extent, the two free ends (%lu)", (unsigned long)s0.stitchable_bytes);
    void *s;
    CHECK(cudaMalloc(&s, 10 * MiB) == cudaSuccess, "10 MiB from E1's tail and E2's head");
    gmlake_stats s1 = st();
    CHECK(s1.stitches == s0.stitches + 1, "one stitch (%lu -> %lu)", (unsigned long)s0.stitches, (unsigned long)s1.stitches);
    CHECK(s1.reserved_bytes == s0.reserved_bytes, "no new memory (%lu -> %lu)", (unsigned long)s0.reserved_bytes, (unsigned long)s1.reserved_bytes);
    CHECK(check(0) == 0, "the pool's checker agrees");
    put(s, 10 * MiB, 4242);
    CHECK(ok_data(s, 10 * MiB, 4242), "data through the stitched range");
    CHECK(ok_data(b, 3 * MiB, 11) && ok_data(c, 3 * MiB, 22) && ok_data(sep, 2 * MiB, 33), "the live blocks keep their data");
    // the stitched range is E1's tail then E2's head: the same bytes through the home addresses
    uint32_t first = 0, last = 0, want_first = 4242u ^ 0u, want_last = 4242u ^ (uint32_t)(((10 * MiB) / 4 - 1) * 2654435761u);
    cudaMemcpy(&first, (char *)b + 3 * MiB, 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(&last, (char *)t + 5 * MiB - 4, 4, cudaMemcpyDeviceToHost);
    CHECK(first == want_first && last == want_last, "home bytes (%#x %#x, want %#x %#x)", first, last, want_first, want_last);
    CHECK(cudaFree(s) == cudaSuccess, "free stitched");
    uint64_t n0 = calls();
    void *s2;
    CHECK(cudaMalloc(&s2, 10 * MiB) == cudaSuccess && s2 == s, "the cached stitched range serves again");
    CHECK(calls() == n0, "without a device call");
    put(s2, 10 * MiB, 77);
    CHECK(ok_data(s2, 10 * MiB, 77) && ok_data(b, 3 * MiB, 11) && ok_data(c, 3 * MiB, 22), "data again");
    cudaFree(s2);
    cudaFree(b);
    cudaFree(c);
    cudaFree(sep);
    CHECK(empty(0) == 0 && check(0) == 0, "empty cache tears it down, the checker agrees");
    CHECK(cudaGetLastError() == cudaSuccess, "no CUDA error");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
