/* test_errors.c — the errors gmlake answers reach the runtime's last-error state as CUDA leaves
 * it, sticky errors are not hidden, and pass-through calls do not route a second time (the fake
 * counts routing calls made from inside its runtime; cudaMemGetInfo counts the cache once). */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

#define MiB ((size_t)1 << 20)

Test(errors, out_of_memory_reaches_the_last_error)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 1024 * MiB), cudaErrorMemoryAllocation, "1 GiB on a 256 MiB device");
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorMemoryAllocation, "peek does not clear");
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaSuccess, "get clears");
    cr_assert_eq(cudaMallocAsync(&p, 1024 * MiB, (cudaStream_t)0x10), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
}

Test(errors, invalid_frees_reach_the_last_error)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree((char *)p + 512), cudaErrorInvalidValue, "interior pointer");
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cudaGetLastError(), cudaSuccess, "a success leaves no error");
    cr_assert_eq(cudaFreeAsync(p, (cudaStream_t)0x10), cudaErrorInvalidValue, "double free");
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorInvalidValue);
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, (char *)p + 512), cudaErrorInvalidValue, "freed: no handle");
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
}

Test(errors, the_latest_error_wins)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 1024 * MiB), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaSetDevice(7), cudaErrorInvalidDevice, "a later error of the runtime's own");
    cr_assert_eq(cudaPeekAtLastError(), cudaErrorInvalidDevice);
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidDevice);
    cr_assert_eq(cudaGetLastError(), cudaSuccess, "both are cleared");
    cr_assert_eq(cudaSetDevice(7), cudaErrorInvalidDevice);
    cr_assert_eq(cudaMalloc(&p, 1024 * MiB), cudaErrorMemoryAllocation, "gmlake's error comes later");
    cr_assert_eq(cudaGetLastError(), cudaErrorMemoryAllocation);
    cr_assert_eq(cudaGetLastError(), cudaSuccess);
}

Test(errors, sticky_errors_are_not_hidden)
{
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, MiB), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess); /* the block is cached: the next cudaMalloc is a hit */
    cr_assert_eq(cudaMalloc(&p, MiB), cudaSuccess);
    fake_cuda_fault(CUDA_ERROR_ILLEGAL_ADDRESS);
    cr_assert_eq(cudaDeviceSynchronize(), cudaErrorIllegalAddress, "the fault is seen");
    cr_assert_eq(cudaMalloc(&q, MiB), cudaErrorIllegalAddress, "a cached block is not handed out");
    cr_assert_eq(cudaMallocAsync(&q, MiB, (cudaStream_t)0x10), cudaErrorIllegalAddress);
    cr_assert_eq(cudaFree(p), cudaErrorIllegalAddress);
    cr_assert_eq(cudaGetLastError(), cudaErrorIllegalAddress);
    cr_assert_eq(cudaGetLastError(), cudaErrorIllegalAddress, "sticky: it cannot be cleared");
}

/* Every error CUDA documents as leaving the process unusable ("any further CUDA work will return
 * the same error") is sticky for gmlake too: a device-side assert (PyTorch's "device-side assert
 * triggered"), tensor memory not deallocated at a kernel's exit, an MPS client the server ended.
 * A cached block is not handed out after it, nor a block freed. */
static void a_sticky_fault_fails_what_gmlake_serves(CUresult fault)
{
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, MiB), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess); /* cached: the next cudaMalloc is a hit */
    cr_assert_eq(cudaMallocAsync(&p, MiB, (cudaStream_t)0x10), cudaSuccess);
    cr_assert_eq(cudaFreeAsync(p, (cudaStream_t)0x10), cudaSuccess);
    cr_assert_eq(cudaMalloc(&p, MiB), cudaSuccess);
    fake_cuda_fault(fault);
    cudaError_t e = (cudaError_t)fault;
    cr_assert_eq(cudaDeviceSynchronize(), e, "the fault is seen");
    cr_assert_eq(cudaMalloc(&q, MiB), e, "a cached block is not handed out");
    cr_assert_eq(cudaMallocAsync(&q, MiB, (cudaStream_t)0x10), e);
    cr_assert_eq(cudaFreeAsync(p, (cudaStream_t)0x10), e);
    cr_assert_eq(cudaGetLastError(), e);
    cr_assert_eq(cudaGetLastError(), e, "sticky: it cannot be cleared");
}

Test(errors, a_device_side_assert_is_sticky) { a_sticky_fault_fails_what_gmlake_serves(CUDA_ERROR_ASSERT); }

/* 721: CUDA_ERROR_TENSOR_MEMORY_LEAK, named only by CUDA 12.8's headers and later */
Test(errors, a_tensor_memory_leak_is_sticky) { a_sticky_fault_fails_what_gmlake_serves((CUresult)721); }

Test(errors, a_terminated_mps_client_is_sticky)
{
    a_sticky_fault_fails_what_gmlake_serves(CUDA_ERROR_MPS_CLIENT_TERMINATED);
}

Test(errors, mem_get_info_counts_the_cache_once)
{
    void *live, *cached;
    cr_assert_eq(cudaMalloc(&live, 20 * MiB), cudaSuccess);
    cr_assert_eq(cudaMalloc(&cached, 20 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(cached), cudaSuccess);
    gmlake_stats s;
    cr_assert_eq(gmlake_get_stats(0, &s), GMLAKE_OK);
    cr_assert_eq(s.reserved_bytes - s.active_bytes, 20 * MiB, "gmlake caches 20 MiB");
    size_t rf = 0, rt = 0, df = 0, dt = 0;
    cr_assert_eq(cudaMemGetInfo(&rf, &rt), cudaSuccess);
    cr_assert_eq(cuMemGetInfo_v2(&df, &dt), CUDA_SUCCESS);
    cr_assert_eq(rt, dt);
    cr_assert_eq(df, dt - 20 * MiB, "free: all but the live block");
    cr_assert_eq(rf, df, "runtime %zu vs driver %zu: the cache is counted once", rf, df);
}

Test(errors, pass_through_calls_do_not_route_again)
{
    void *p = NULL, *z = NULL;
    size_t f, t;
    cr_assert_eq(cudaMemGetInfo(&f, &t), cudaSuccess);
    cr_assert_eq(cudaMalloc(&z, 0), cudaSuccess, "0 bytes: passed to CUDA");
    cr_assert_eq(cudaFree(z), cudaSuccess);
    cudaStream_t c;
    cudaGraph_t g;
    cr_assert_eq(cudaStreamCreate(&c), cudaSuccess);
    cr_assert_eq(cudaStreamBeginCapture(c, cudaStreamCaptureModeRelaxed), cudaSuccess);
    cr_assert_eq(cudaMallocAsync(&p, MiB, c), cudaSuccess);
    cr_assert(!fake_cuda_owns((uintptr_t)p), "capture: served by gmlake for the graph");
    cr_assert_eq(cudaFreeAsync(p, c), cudaSuccess);
    cr_assert_eq(cudaStreamEndCapture(c, &g), cudaSuccess);
    cr_assert_eq(cudaDeviceSetMemPool(0, (cudaMemPool_t)0x7777), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->reentered, 0, "no routing call was made inside the runtime");
}
