/* ipc_peer.c — the second process of the IPC tests (test_ipc.c starts it): opens a handle of
 * gmlake memory that the test process exported and checks what it was asked to.
 *   ipc_peer MODE HANDLE_HEX OFFSET LEN BYTE
 * MODE  rt     cudaIpcOpenMemHandle; bytes [OFFSET, OFFSET+LEN) of the allocation hold BYTE;
 *              writes BYTE+1 over them; cudaIpcCloseMemHandle
 *       drv    the same through cuIpcOpenMemHandle / cuIpcCloseMemHandle
 *       twice  opened twice: the same pointer; closed twice; a third close is CUDA's error
 *       freed  the open fails with cudaErrorInvalidResourceHandle, and the process goes on
 *       devices  opened on device 0, then on device 1: two mappings, each its device's (as CUDA
 *              maps a handle once per device); device 1's holds BYTE at [OFFSET, OFFSET+LEN) and
 *              gets BYTE+1 there; opened again on device 1, its pointer again; every open closed
 *       range  LEN is the allocation's size: the opened pointer plus OFFSET answers the range
 *              queries with [opened pointer, +LEN); the byte at OFFSET holds BYTE; writes BYTE+1
 *              there
 * Exit 0 when every check held; otherwise one line on stderr says which failed. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gmlake.h"
#include "tests/fake/fake_cuda.h"

static int fail(const char *what, int code)
{
    fprintf(stderr, "ipc_peer: %s (code %d)\n", what, code);
    return 1;
}

static int check_bytes(const unsigned char *p, size_t len, unsigned char want)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != want)
            return fail("the bytes the owner wrote differ", (int)i);
    memset((void *)p, want + 1, len);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6)
        return fail("usage: ipc_peer MODE HANDLE_HEX OFFSET LEN BYTE", argc);
    cudaIpcMemHandle_t h;
    const char *hex = argv[2];
    if (strlen(hex) != 2 * sizeof h)
        return fail("bad handle", 0);
    for (size_t i = 0; i < sizeof h; i++) {
        unsigned v;
        sscanf(hex + 2 * i, "%2x", &v);
        h.reserved[i] = (char)v;
    }
    size_t off = strtoull(argv[3], NULL, 0), len = strtoull(argv[4], NULL, 0);
    unsigned char byte = (unsigned char)strtoul(argv[5], NULL, 0);
    const char *mode = argv[1];
    void *p = NULL, *q = NULL;
    cudaError_t e;
    if (strcmp(mode, "rt") == 0) {
        if ((e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess)
            return fail("cudaIpcOpenMemHandle", e);
        if (check_bytes((unsigned char *)p + off, len, byte))
            return 1;
        if ((e = cudaIpcCloseMemHandle(p)) != cudaSuccess)
            return fail("cudaIpcCloseMemHandle", e);
    } else if (strcmp(mode, "drv") == 0) {
        CUipcMemHandle dh;
        memcpy(&dh, &h, sizeof dh);
        CUdeviceptr d;
        CUresult r;
        if ((r = cuIpcOpenMemHandle_v2(&d, dh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != CUDA_SUCCESS)
            return fail("cuIpcOpenMemHandle", r);
        if (check_bytes((unsigned char *)d + off, len, byte))
            return 1;
        if ((r = cuIpcCloseMemHandle(d)) != CUDA_SUCCESS)
            return fail("cuIpcCloseMemHandle", r);
    } else if (strcmp(mode, "range") == 0) {
        if ((e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess)
            return fail("cudaIpcOpenMemHandle", e);
        CUdeviceptr base = 0, start = 0;
        size_t size = 0;
        CUresult r = cuMemGetAddressRange_v2(&base, &size, (CUdeviceptr)p + off);
        if (r != CUDA_SUCCESS || (void *)base != p || size != len)
            return fail("cuMemGetAddressRange of the opened allocation", r);
        r = cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, (CUdeviceptr)p + off);
        if (r != CUDA_SUCCESS || (void *)start != p)
            return fail("RANGE_START_ADDR of the opened allocation", r);
        if (check_bytes((unsigned char *)p + off, 1, byte))
            return 1;
        if ((e = cudaIpcCloseMemHandle(p)) != cudaSuccess)
            return fail("cudaIpcCloseMemHandle", e);
    } else if (strcmp(mode, "twice") == 0) {
        if ((e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess)
            return fail("first open", e);
        if ((e = cudaIpcOpenMemHandle(&q, h, cudaIpcMemLazyEnablePeerAccess)) != cudaSuccess)
            return fail("second open", e);
        if (p != q)
            return fail("a handle opened twice gave two pointers", 0);
        if ((e = cudaIpcCloseMemHandle(p)) != cudaSuccess)
            return fail("first close", e);
        if (check_bytes((unsigned char *)p + off, len, byte)) /* one reference is left */
            return 1;
        if ((e = cudaIpcCloseMemHandle(q)) != cudaSuccess)
            return fail("second close", e);
        if ((e = cudaIpcCloseMemHandle(p)) != cudaErrorInvalidValue)
            return fail("a third close is not CUDA's cudaErrorInvalidValue", e);
        cudaGetLastError();
    } else if (strcmp(mode, "devices") == 0) {
        void *again = NULL;
        unsigned lazy = cudaIpcMemLazyEnablePeerAccess;
        if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaIpcOpenMemHandle(&p, h, lazy)) != cudaSuccess)
            return fail("open on device 0", e);
        if ((e = cudaSetDevice(1)) != cudaSuccess || (e = cudaIpcOpenMemHandle(&q, h, lazy)) != cudaSuccess)
            return fail("open on device 1", e);
        if (p == q)
            return fail("device 1 got device 0's mapping", 0);
        if (!(fake_cuda_access((uintptr_t)q) & 2) || !(fake_cuda_access((uintptr_t)p) & 1))
            return fail("a mapping its device cannot access", (int)fake_cuda_access((uintptr_t)q));
        if (check_bytes((unsigned char *)q + off, len, byte))
            return 1;
        if ((e = cudaIpcOpenMemHandle(&again, h, lazy)) != cudaSuccess || again != q)
            return fail("opened again on device 1: not its pointer", e);
        if (cudaIpcCloseMemHandle(again) != cudaSuccess || cudaIpcCloseMemHandle(q) != cudaSuccess ||
            cudaSetDevice(0) != cudaSuccess || cudaIpcCloseMemHandle(p) != cudaSuccess)
            return fail("close", 0);
    } else if (strcmp(mode, "freed") == 0) {
        if ((e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess)) != cudaErrorInvalidResourceHandle)
            return fail("the handle of a freed allocation did not give cudaErrorInvalidResourceHandle", e);
        if (cudaGetLastError() != cudaErrorInvalidResourceHandle)
            return fail("the failed open is not the last error", 0);
    } else {
        return fail("unknown mode", 0);
    }
    void *r;
    if ((e = cudaMalloc(&r, 1 << 20)) != cudaSuccess || cudaFree(r) != cudaSuccess)
        return fail("gmlake unusable after the IPC calls", e);
    return gmlake_check(0) == GMLAKE_OK ? 0 : fail("pool check", 0);
}
