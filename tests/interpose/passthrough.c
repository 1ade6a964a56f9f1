/* passthrough.c — with GMLAKE_ENABLE=0 (set by the test runner) every call reaches CUDA and gmlake
 * creates no pool.  Prints the plain closing line. */
#include <cuda_runtime_api.h>
#include <stdio.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

int main(void)
{
    void *p = NULL;
    int ok = cudaMalloc(&p, 1 << 20) == cudaSuccess && fake_cuda_counts()->rt_malloc == 1 &&
             fake_cuda_counts()->mem_alloc == 1 && cudaFree(p) == cudaSuccess &&
             fake_cuda_counts()->rt_free == 1;
    gmlake_stats s;
    ok = ok && gmlake_get_stats(0, &s) == GMLAKE_ERR_NO_POOL;
    printf("%d passed, %d failed\n", ok, !ok);
    return !ok;
}
