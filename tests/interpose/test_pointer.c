/* test_pointer.c — CUDA's pointer queries about gmlake memory (interpose/pointer.c) over the fake
 * CUDA, which answers them as CUDA does: for VMM memory by mapping (cuMemGetAddressRange) and by
 * reservation (the range attributes), not legacy-IPC capable, with the mapped handle for
 * cuMemRetainAllocationHandle; for cuMemAlloc memory with the allocation. */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <string.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"
#include "stitched.h"

#define MiB ((size_t)1 << 20)

/* cuMemGetAddressRange and both range attributes of p agree on [base, base + size). */
static void expect_range(void *p, void *base, size_t size)
{
    CUdeviceptr b = 0, rs = 0;
    size_t n = 0, rz = 0;
    cr_assert_eq(cuMemGetAddressRange_v2(&b, &n, (CUdeviceptr)p), CUDA_SUCCESS);
    cr_expect_eq((void *)b, base, "cuMemGetAddressRange: the allocation's first byte");
    cr_expect_eq(n, size, "cuMemGetAddressRange: the bytes asked for");
    cr_assert_eq(cuPointerGetAttribute(&rs, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p), CUDA_SUCCESS);
    cr_assert_eq(cuPointerGetAttribute(&rz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, (CUdeviceptr)p), CUDA_SUCCESS);
    cr_expect_eq((void *)rs, base, "RANGE_START_ADDR");
    cr_expect_eq(rz, size, "RANGE_SIZE");
}

Test(pointer, an_allocation_answers_with_its_own_range_anywhere_inside)
{
    void *a, *b, *c;
    cr_assert_eq(cudaMalloc(&a, 100), cudaSuccess, "three allocations of one 2 MiB extent");
    cr_assert_eq(cudaMalloc(&b, 300000), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&c, 5 * MiB + 3, (cudaStream_t)0x10), cudaSuccess);
    expect_range(a, a, 100);
    expect_range((char *)a + 99, a, 100);
    expect_range((char *)b + 123456, b, 300000);
    expect_range((char *)c + 4 * MiB, c, 5 * MiB + 3);
    CUdeviceptr base = 0;
    size_t size = 0;
    cr_assert_eq(cuMemGetAddressRange_v2(&base, NULL, (CUdeviceptr)b + 1), CUDA_SUCCESS, "either may be NULL");
    cr_assert_eq((void *)base, b);
    cr_assert_eq(cuMemGetAddressRange_v2(NULL, &size, (CUdeviceptr)b + 1), CUDA_SUCCESS);
    cr_assert_eq(size, 300000);
    int legacy = -1;
    cr_assert_eq(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, (CUdeviceptr)c), CUDA_SUCCESS);
    cr_assert_eq(legacy, 1, "gmlake exports it through cudaIpcGetMemHandle, as CUDA does cudaMalloc's");
    CUmemGenericAllocationHandle h = 0;
    cr_assert_eq(cuMemRetainAllocationHandle(&h, b), CUDA_ERROR_INVALID_VALUE,
                 "no VMM handle, as for cudaMalloc memory: an extent is gmlake's");
    cr_assert_eq(cudaFree(a), cudaSuccess);
    cr_assert_eq(cudaFree(b), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(c, (cudaStream_t)0x10), cudaSuccess);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

Test(pointer, a_stitched_block_answers_with_its_range)
{
    void *v[8], *s = stitched_8mib(v);
    expect_range((char *)s + 5 * MiB + 17, s, 8 * MiB);
    expect_range(v[3], v[3], 2 * MiB);
    int legacy = 0;
    cr_assert_eq(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, (CUdeviceptr)s), CUDA_SUCCESS);
    cr_assert_eq(legacy, 1);
    for (int i = 1; i < 8; i += 2)
        cr_assert_eq(cudaFree(v[i]), cudaSuccess);
    cr_assert_eq(cudaFree(s), cudaSuccess);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

Test(pointer, the_attributes_asked_together)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    CUpointer_attribute at[4] = {CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE};
    int ord = -5, legacy = -5;
    CUdeviceptr start = 0;
    size_t size = 0;
    void *d[4] = {&ord, &start, &size, &legacy};
    cr_assert_eq(cuPointerGetAttributes(4, at, d, (CUdeviceptr)p + MiB), CUDA_SUCCESS);
    cr_assert_eq(ord, 0, "CUDA's answer");
    cr_assert_eq((void *)start, p);
    cr_assert_eq(size, 3 * MiB);
    cr_assert_eq(legacy, 1);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cuPointerGetAttributes(4, at, d, (CUdeviceptr)p + MiB), CUDA_SUCCESS,
                 "freed: defaults, as CUDA for freed memory");
    cr_assert_eq(start, 0);
    cr_assert_eq(size, 0);
    cr_assert_eq(legacy, 0);
}

Test(pointer, freed_gmlake_memory_answers_as_freed_cuda_memory)
{
    void *p, *keep;
    cr_assert_eq(cudaMalloc(&keep, 1000), cudaSuccess, "the extent stays mapped");
    cr_assert_eq(cudaMalloc(&p, 1000), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    CUdeviceptr base = 0;
    size_t size = 0;
    cr_assert_eq(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)p), CUDA_ERROR_NOT_FOUND);
    cr_assert_eq(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p),
                 CUDA_ERROR_INVALID_VALUE);
    CUmemGenericAllocationHandle h;
    cr_assert_eq(cuMemRetainAllocationHandle(&h, p), CUDA_ERROR_INVALID_VALUE);
    int ord = -5;
    cr_assert_eq(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, (CUdeviceptr)p), CUDA_SUCCESS,
                 "other attributes are CUDA's");
    cr_assert_eq(ord, 0);
    cr_assert_eq(cudaFree(keep), cudaSuccess);
}

Test(pointer, memory_that_is_not_gmlakes_gets_cudas_answers)
{
    /* the program's own VMM memory: two 2 MiB handles in an 8 MiB reservation */
    CUmemAllocationProp pr;
    memset(&pr, 0, sizeof pr);
    pr.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    pr.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUdeviceptr va;
    CUmemGenericAllocationHandle h1, h2, got = 0;
    cr_assert_eq(cuMemAddressReserve(&va, 8 * MiB, 0, 0, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemCreate(&h1, 2 * MiB, &pr, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemCreate(&h2, 2 * MiB, &pr, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va, 2 * MiB, 0, h1, 0), CUDA_SUCCESS);
    cr_assert_eq(cuMemMap(va + 2 * MiB, 2 * MiB, 0, h2, 0), CUDA_SUCCESS);
    CUdeviceptr base = 0, rs = 0;
    size_t size = 0, rz = 0;
    cr_assert_eq(cuMemGetAddressRange_v2(&base, &size, va + 3 * MiB), CUDA_SUCCESS);
    cr_assert_eq(base, va + 2 * MiB, "CUDA: the mapping");
    cr_assert_eq(size, 2 * MiB);
    cr_assert_eq(cuPointerGetAttribute(&rs, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + 3 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuPointerGetAttribute(&rz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + 3 * MiB), CUDA_SUCCESS);
    cr_assert_eq(rs, va, "CUDA: the reservation");
    cr_assert_eq(rz, 8 * MiB);
    cr_assert_eq(cuMemRetainAllocationHandle(&got, (void *)(va + 100)), CUDA_SUCCESS);
    cr_assert_eq(got, h1);
    cr_assert_eq(cuMemRelease(got), CUDA_SUCCESS);
    int x = 0;
    cr_assert_eq(cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)&x), CUDA_ERROR_NOT_FOUND, "host memory");
    cr_assert_eq(cuMemGetAddressRange_v2(&base, &size, 0), CUDA_ERROR_NOT_FOUND, "NULL");
    cr_assert_eq(cuMemUnmap(va, 4 * MiB), CUDA_SUCCESS);
    cr_assert_eq(cuMemRelease(h1), CUDA_SUCCESS);
    cr_assert_eq(cuMemRelease(h2), CUDA_SUCCESS);
    cr_assert_eq(cuMemAddressFree(va, 8 * MiB), CUDA_SUCCESS);
}

Test(pointer, resolvers_hand_out_the_hooks)
{
    static const char *names[] = {"cuMemGetAddressRange", "cuPointerGetAttribute", "cuPointerGetAttributes",
                                  "cuMemRetainAllocationHandle"};
    static const char *hooks[] = {"cuMemGetAddressRange_v2", "cuPointerGetAttribute", "cuPointerGetAttributes",
                                  "cuMemRetainAllocationHandle"};
    for (int i = 0; i < 4; i++) {
        void *fn = NULL;
        cr_assert_eq(cuGetProcAddress_v2(names[i], &fn, 13000, 0, NULL), CUDA_SUCCESS, "%s", names[i]);
        cr_assert_eq(fn, dlsym(RTLD_DEFAULT, hooks[i]), "%s: gmlake's hook", names[i]);
    }
    void *p;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    void *fn = NULL;
    cr_assert_eq(cuGetProcAddress_v2("cuMemGetAddressRange", &fn, 13000, 0, NULL), CUDA_SUCCESS);
    CUdeviceptr base = 0;
    size_t size = 0;
    cr_assert_eq(((PFN_cuMemGetAddressRange_v3020)fn)(&base, &size, (CUdeviceptr)p + 5), CUDA_SUCCESS);
    cr_assert_eq((void *)base, p, "found at run time, answered by gmlake");
    cr_assert_eq(size, 3 * MiB);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

Test(pointer, legacy_ipc_capable_only_where_gmlake_can_export)
{
    setenv("FAKE_CUDA_NO_FD_EXPORT", "1", 1); /* read when the pool's device is made */
    void *p;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    int legacy = -1;
    cr_assert_eq(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, (CUdeviceptr)p), CUDA_SUCCESS);
    cr_assert_eq(legacy, 0, "no exportable chunks: gmlake's cudaIpcGetMemHandle would fail");
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaErrorNotSupported,
                 "and it says so at once, not when another process opens the handle");
    cr_assert_eq(cudaGetLastError(), cudaErrorNotSupported);
    expect_range((char *)p + 7, p, 3 * MiB);
    cr_assert_eq(cudaFree(p), cudaSuccess);
}
