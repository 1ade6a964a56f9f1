/* test_ipc.c — CUDA IPC of gmlake memory between two processes (interpose/ipc.c), over the fake
 * CUDA (whose VMM memory is a memfd: an imported extent truly aliases the exporter's).  Each test
 * exports from this process and runs ipc_peer (IPC_PEER: its path) to open the handle. */
#include "harness.h"
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"
#include "stitched.h"

#define MiB ((size_t)1 << 20)
extern char **environ;

/* Runs ipc_peer MODE HANDLE OFF LEN BYTE; its exit status. */
static int peer(const char *mode, const cudaIpcMemHandle_t *h, size_t off, size_t len, unsigned byte)
{
    char hex[2 * sizeof *h + 1], a_off[32], a_len[32], a_byte[8];
    for (size_t i = 0; i < sizeof *h; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)h->reserved[i]);
    snprintf(a_off, sizeof a_off, "%zu", off);
    snprintf(a_len, sizeof a_len, "%zu", len);
    snprintf(a_byte, sizeof a_byte, "%u", byte);
    const char *path = getenv("IPC_PEER");
    cr_assert(path, "IPC_PEER names the peer program");
    char *argv[] = {(char *)path, (char *)mode, hex, a_off, a_len, a_byte, NULL};
    pid_t pid;
    cr_assert_eq(posix_spawn(&pid, path, NULL, NULL, argv, environ), 0);
    int st = 0;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int all(const unsigned char *p, size_t len, unsigned char b)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != b)
            return 0;
    return 1;
}

Test(ipc, another_process_reads_and_writes_an_allocation)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 5 * MiB), cudaSuccess);
    memset(p, 0x31, 5 * MiB);
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaSuccess);
    cr_assert_eq(fake_cuda_counts()->rt_ipc, 0, "served by gmlake, not passed to CUDA");
    cr_assert_eq(peer("rt", &h, 0, 5 * MiB, 0x31), 0, "the peer sees the bytes");
    cr_assert(all(p, 5 * MiB, 0x32), "the peer's writes are seen here");
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

Test(ipc, the_driver_api_and_a_pointer_inside_an_allocation)
{
    CUdeviceptr d;
    cr_assert_eq(cuMemAlloc_v2(&d, 3 * MiB + 4096), CUDA_SUCCESS);
    memset((void *)d, 0x41, 3 * MiB + 4096);
    CUipcMemHandle dh;
    size_t off = 2 * MiB + 512;
    cr_assert_eq(cuIpcGetMemHandle(&dh, d + off), CUDA_SUCCESS, "a pointer into the middle");
    cudaIpcMemHandle_t h;
    memcpy(&h, &dh, sizeof h);
    /* as CUDA's, the handle names the whole allocation: the peer's pointer is its first byte */
    cr_assert_eq(peer("drv", &h, off, MiB, 0x41), 0);
    cr_assert(all((unsigned char *)d + off, MiB, 0x42));
    cr_assert(all((unsigned char *)d, off, 0x41), "bytes before the range untouched");
    cr_assert_eq(cuMemFree_v2(d), CUDA_SUCCESS);
}

Test(ipc, a_stitched_block)
{
    void *v[8], *s = stitched_8mib(v);
    for (int i = 0; i < 8; i++)
        memset((char *)s + i * MiB, 0x50, MiB);
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, (char *)s + 3 * MiB), cudaSuccess);
    cr_assert_eq(peer("rt", &h, 0, 8 * MiB, 0x50), 0, "the peer maps the stitched extents in order");
    cr_assert(all(s, 8 * MiB, 0x51));
    for (int i = 1; i < 8; i += 2)
        cr_assert_eq(cudaFree(v[i]), cudaSuccess);
    cr_assert_eq(cudaFree(s), cudaSuccess);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}

Test(ipc, the_base_found_by_the_range_attribute_then_exported)
{
    /* vLLM's custom all-reduce and Numba share a tensor this way: the allocation's base from
     * CU_POINTER_ATTRIBUTE_RANGE_START_ADDR (or cuMemGetAddressRange), its handle, the offset */
    void *a, *b;
    cr_assert_eq(cudaMalloc(&a, MiB), cudaSuccess, "a neighbour in the same extent");
    cr_assert_eq(cudaMalloc(&b, 3 * MiB), cudaSuccess);
    memset(a, 0x11, MiB);
    memset(b, 0x71, 3 * MiB);
    char *x = (char *)b + MiB + 100;
    CUdeviceptr base = 0;
    cr_assert_eq(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)x), CUDA_SUCCESS);
    cr_assert_eq((void *)base, b, "the allocation's first byte, not its extent's or the arena's");
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, (void *)base), cudaSuccess);
    /* the peer opens it, finds the same range for its own pointer, and reads at the offset */
    cr_assert_eq(peer("range", &h, (size_t)(x - (char *)base), 3 * MiB, 0x71), 0);
    cr_assert_eq((unsigned char)x[0], 0x72, "the peer's write at the offset is seen here");
    cr_assert_eq((unsigned char)x[1], 0x71);
    cr_assert_eq(cudaFree(a), cudaSuccess);
    cr_assert_eq(cudaFree(b), cudaSuccess);
}

Test(ipc, a_handle_opened_twice_and_closed_twice)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 1000), cudaSuccess, "a small block");
    memset(p, 0x61, 1000);
    cudaIpcMemHandle_t h, h2;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaSuccess);
    cr_assert_eq(cudaIpcGetMemHandle(&h2, p), cudaSuccess);
    cr_assert_eq(memcmp(&h, &h2, sizeof h), 0, "one allocation, one handle");
    cr_assert_eq(peer("twice", &h, 0, 1000, 0x61), 0);
    cr_assert(all(p, 1000, 0x62));
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

/* CUDA maps a handle once per device of the opening process: a handle opened on a second device
 * is a second mapping, that device's, not the first device's pointer again. */
Test(ipc, a_handle_opened_on_two_devices_is_mapped_for_each)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 3 * MiB), cudaSuccess);
    memset(p, 0x24, 3 * MiB);
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaSuccess);
    cr_assert_eq(peer("devices", &h, 0, 3 * MiB, 0x24), 0);
    cr_assert(all(p, 3 * MiB, 0x25), "device 1's mapping shows the same memory");
    cr_assert_eq(cudaFree(p), cudaSuccess);
}

Test(ipc, the_handle_of_a_freed_allocation)
{
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, 4 * MiB), cudaSuccess);
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(cudaMalloc(&q, 4 * MiB), cudaSuccess, "the address may be served again");
    cr_assert_eq(peer("freed", &h, 0, 0, 0), 0, "refused, not mapped");
    cr_assert_eq(cudaFree(q), cudaSuccess);
}

/* A device reset destroys the allocation as a free does: its handle then names nothing, even
 * where the fresh pool hands the same address out again. */
Test(ipc, the_handle_of_an_allocation_a_reset_destroyed)
{
    void *p, *q;
    cr_assert_eq(cudaMalloc(&p, 4 * MiB), cudaSuccess);
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaSuccess);
    cr_assert_eq(cudaDeviceReset(), cudaSuccess);
    cr_assert_eq(cudaMalloc(&q, 4 * MiB), cudaSuccess);
    cr_assert_eq(q, p, "the fresh pool serves the same address");
    cr_assert_eq(peer("freed", &h, 0, 0, 0), 0, "refused, not the new allocation mapped");
    cr_assert_eq(cudaFree(q), cudaSuccess);
}

Test(ipc, bad_pointers_and_handles)
{
    void *p;
    cr_assert_eq(cudaMalloc(&p, 4 * MiB), cudaSuccess);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cudaIpcMemHandle_t h;
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaErrorInvalidValue, "gmlake memory, not live");
    cr_assert_eq(cudaGetLastError(), cudaErrorInvalidValue);
    cr_assert_eq(cuIpcGetMemHandle((CUipcMemHandle *)&h, (CUdeviceptr)p), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(cudaMalloc(&p, 4 * MiB), cudaSuccess);
    cr_assert_eq(cudaIpcGetMemHandle(&h, p), cudaSuccess);
    void *q;
    cr_assert_eq(cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized,
                 "a process cannot open its own handle (CUDA: invalid context)");
    cudaGetLastError();
    int before = fake_cuda_counts()->rt_ipc;
    cr_assert_eq(cudaIpcCloseMemHandle(p), cudaErrorInvalidValue, "not opened: CUDA's answer");
    cr_assert_eq(fake_cuda_counts()->rt_ipc, before + 1, "passed to CUDA");
    cudaIpcMemHandle_t zero;
    memset(&zero, 0, sizeof zero);
    cr_assert_eq(cudaIpcOpenMemHandle(&q, zero, cudaIpcMemLazyEnablePeerAccess), cudaErrorInvalidResourceHandle,
                 "a handle that is not gmlake's goes to CUDA");
    cr_assert_eq(fake_cuda_counts()->rt_ipc, before + 2);
    cudaGetLastError();
    /* a handle of gmlake's naming a process that does not exist */
    cudaIpcMemHandle_t gone = h;
    int32_t bogus = 0x7ffffff0;
    memcpy(gone.reserved + 8, &bogus, sizeof bogus);
    cr_assert_eq(cudaIpcOpenMemHandle(&q, gone, cudaIpcMemLazyEnablePeerAccess), cudaErrorInvalidResourceHandle);
    cr_assert_eq(cudaFree(p), cudaSuccess);
    cr_assert_eq(gmlake_check(0), GMLAKE_OK);
}
