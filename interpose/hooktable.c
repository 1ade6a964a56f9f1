/*
 * hooktable.c — gmlake's hooks handed out to programs that look functions up at run time: dlsym
 * (XLA on a libcuda handle), cuGetProcAddress (libcudart itself, CuPy's static cudart),
 * cudaGetDriverEntryPoint(ByVersion) and their _ptsz twins.  The hooks are one table sorted by name (dlsym: a binary
 * search); entry-point resolvers map by the real pointer they got, so the versioned and
 * per-thread-stream variants each get their own hook.  Above the hooks it takes the addresses of (hooks.c,
 * capture.c, pointer.c, reset.c) and the real functions (resolve.c); nothing calls it.
 */
#include <stddef.h>

#include "interpose.h"

typedef struct hook_entry {
    const char *name;
    void *hook;
    void **real; /* the field of gml_real it stands for */
} hook_entry;

#define E(name, field) {#name, (void *)&name, (void **)&gml_real.field}
/* Sorted by strcmp (tests/interpose checks the order). */
static const hook_entry table[] = {
    E(cuCtxDestroy, drv_ctx_destroy_v1),
    E(cuCtxDestroy_v2, drv_ctx_destroy),
    E(cuCtxEnablePeerAccess, drv_ctx_enable_peer_access),
    E(cuDevicePrimaryCtxRelease, drv_device_primary_ctx_release_v1),
    E(cuDevicePrimaryCtxRelease_v2, drv_device_primary_ctx_release),
    E(cuDevicePrimaryCtxReset, drv_device_primary_ctx_reset_v1),
    E(cuDevicePrimaryCtxReset_v2, drv_device_primary_ctx_reset),
    E(cuDeviceSetMemPool, drv_device_set_mem_pool),
    E(cuGetProcAddress, drv_get_proc_address),
    E(cuGetProcAddress_v2, drv_get_proc_address_v2),
    E(cuIpcCloseMemHandle, drv_ipc_close_mem_handle),
    E(cuIpcGetMemHandle, drv_ipc_get_mem_handle),
    E(cuIpcOpenMemHandle, drv_ipc_open_mem_handle_v1),
    E(cuIpcOpenMemHandle_v2, drv_ipc_open_mem_handle),
    E(cuMemAllocAsync, drv_mem_alloc_async),
    E(cuMemAllocAsync_ptsz, drv_mem_alloc_async_ptsz),
    E(cuMemAllocFromPoolAsync, drv_mem_alloc_from_pool_async),
    E(cuMemAllocFromPoolAsync_ptsz, drv_mem_alloc_from_pool_async_ptsz),
    E(cuMemAlloc_v2, drv_mem_alloc),
    E(cuMemFreeAsync, drv_mem_free_async),
    E(cuMemFreeAsync_ptsz, drv_mem_free_async_ptsz),
    E(cuMemFree_v2, drv_mem_free),
    E(cuMemGetAddressRange_v2, drv_mem_get_address_range),
    E(cuMemGetInfo_v2, drv_mem_get_info),
    E(cuMemRetainAllocationHandle, drv_mem_retain_allocation_handle),
    E(cuPointerGetAttribute, drv_pointer_get_attribute),
    E(cuPointerGetAttributes, drv_pointer_get_attributes),
    E(cuStreamBeginCapture, drv_stream_begin_capture_v1),
    E(cuStreamBeginCaptureToGraph, drv_stream_begin_capture_to_graph),
    E(cuStreamBeginCaptureToGraph_ptsz, drv_stream_begin_capture_to_graph_ptsz),
    E(cuStreamBeginCapture_ptsz, drv_stream_begin_capture_v1_ptsz),
    E(cuStreamBeginCapture_v2, drv_stream_begin_capture),
    E(cuStreamBeginCapture_v2_ptsz, drv_stream_begin_capture_ptsz),
    E(cuStreamDestroy, drv_stream_destroy),
    E(cuStreamDestroy_v2, drv_stream_destroy_v2),
    E(cuStreamEndCapture, drv_stream_end_capture),
    E(cuStreamEndCapture_ptsz, drv_stream_end_capture_ptsz),
    E(cudaDeviceEnablePeerAccess, rt_device_enable_peer_access),
    E(cudaDeviceReset, rt_device_reset),
    E(cudaDeviceSetMemPool, rt_device_set_mem_pool),
    E(cudaFree, rt_free),
    E(cudaFreeAsync, rt_free_async),
    {"cudaFreeAsync_ptsz", (void *)&cudaFreeAsync_ptsz, NULL},
    E(cudaGetDriverEntryPoint, rt_get_driver_entry_point),
    E(cudaGetDriverEntryPointByVersion, rt_get_driver_entry_point_by_version),
    E(cudaGetDriverEntryPointByVersion_ptsz, rt_get_driver_entry_point_by_version_ptsz),
    E(cudaGetDriverEntryPoint_ptsz, rt_get_driver_entry_point_ptsz),
    E(cudaGetLastError, rt_get_last_error),
    E(cudaIpcCloseMemHandle, rt_ipc_close_mem_handle),
    E(cudaIpcGetMemHandle, rt_ipc_get_mem_handle),
    E(cudaIpcOpenMemHandle, rt_ipc_open_mem_handle),
    E(cudaMalloc, rt_malloc),
    E(cudaMallocAsync, rt_malloc_async),
    {"cudaMallocAsync_ptsz", (void *)&cudaMallocAsync_ptsz, NULL},
    E(cudaMemGetInfo, rt_mem_get_info),
    E(cudaMemPoolGetAttribute, rt_pool_get_attribute),
    E(cudaMemPoolSetAttribute, rt_pool_set_attribute),
    E(cudaMemPoolTrimTo, rt_pool_trim_to),
    E(cudaPeekAtLastError, rt_peek_at_last_error),
    E(cudaStreamBeginCapture, rt_stream_begin_capture),
    E(cudaStreamBeginCaptureToGraph, rt_stream_begin_capture_to_graph),
    {"cudaStreamBeginCaptureToGraph_ptsz", (void *)&cudaStreamBeginCaptureToGraph_ptsz, NULL},
    {"cudaStreamBeginCapture_ptsz", (void *)&cudaStreamBeginCapture_ptsz, NULL},
    E(cudaStreamDestroy, rt_stream_destroy),
    E(cudaStreamEndCapture, rt_stream_end_capture),
    {"cudaStreamEndCapture_ptsz", (void *)&cudaStreamEndCapture_ptsz, NULL},
};
#undef E
static const size_t table_len = sizeof table / sizeof table[0];

/* For tests: the table's names in order, NULL-terminated by index. */
GML_HOOK const char *gmlake_hook_name(size_t i) { return i < table_len ? table[i].name : NULL; }

/* The table entry named `name`, or NULL.  A binary search of its own, with no libc call: a
 * sanitizer runtime intercepts bsearch and strcmp, and may look names up before it can serve
 * them. */
GML_NO_SANITIZE static const hook_entry *find_hook(const char *name)
{
    size_t lo = 0, hi = table_len;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const unsigned char *a = (const unsigned char *)name, *b = (const unsigned char *)table[mid].name;
        while (*a && *a == *b)
            a++, b++;
        if (*a == *b)
            return &table[mid];
        if (*a < *b)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

/* ---- dlsym ----
 * glibc resolves dlsym(RTLD_NEXT, name) after the object that called dlsym, which it finds from
 * dlsym's return address.  A C hook that called the real dlsym would make every RTLD_NEXT lookup
 * of every other library relative to libgmlake (a wrapper preloaded after gmlake would get its own
 * function back and recurse; one before gmlake would skip gmlake).  So the exported dlsym is a few
 * instructions of assembly: a RTLD_NEXT request jumps (does not call) to the real dlsym, which
 * then sees the caller's own return address, exactly as without gmlake; any other request jumps
 * to gml_dlsym (C), which may hand out a hook.  The same path serves a sanitizer runtime that
 * resolves its interceptors with dlsym(RTLD_NEXT) before it has initialised: nothing on it is
 * instrumented (gml_resolve_dlsym is exempt). */

/* The trampoline: dlsym(RTLD_NEXT, ...) tail-jumps to the real dlsym (resolving it first if need
 * be, with the arguments saved); everything else tail-jumps to gml_dlsym.  gml_real.dlsym is the
 * first member of gml_real. */
_Static_assert(offsetof(struct gml_real, dlsym) == 0, "the trampoline reads gml_real.dlsym at offset 0");
#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        ".p2align 4\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  cmpq $-1, %rdi\n"
        "  jne gml_dlsym\n"
        "  movq gml_real(%rip), %rax\n"
        "  testq %rax, %rax\n"
        "  jz 1f\n"
        "  jmp *%rax\n"
        "1:\n"
        "  pushq %rdi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  pushq %rsi\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  subq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset 8\n"
        "  call gml_resolve_dlsym\n"
        "  addq $8, %rsp\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rsi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  popq %rdi\n"
        "  .cfi_adjust_cfa_offset -8\n"
        "  testq %rax, %rax\n"
        "  jz 2f\n"
        "  jmp *%rax\n"
        "2:\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#elif defined(__aarch64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, %function\n"
        ".p2align 4\n"
        "dlsym:\n"
        "  .cfi_startproc\n"
        "  cmn x0, #1\n"
        "  b.ne gml_dlsym\n"
        "  adrp x16, gml_real\n"
        "  ldr x16, [x16, :lo12:gml_real]\n"
        "  cbz x16, 1f\n"
        "  br x16\n"
        "1:\n"
        "  stp x29, x30, [sp, #-32]!\n"
        "  .cfi_def_cfa_offset 32\n"
        "  .cfi_offset 29, -32\n"
        "  .cfi_offset 30, -24\n"
        "  mov x29, sp\n"
        "  stp x0, x1, [sp, #16]\n"
        "  bl gml_resolve_dlsym\n"
        "  mov x16, x0\n"
        "  ldp x0, x1, [sp, #16]\n"
        "  ldp x29, x30, [sp], #32\n"
        "  .cfi_def_cfa_offset 0\n"
        "  cbz x16, 2f\n"
        "  br x16\n"
        "2:\n"
        "  mov x0, #0\n"
        "  ret\n"
        "  .cfi_endproc\n"
        ".size dlsym, .-dlsym\n");
#else
#error "interpose/hooktable.c: the dlsym trampoline is written for x86_64 and aarch64 only"
#endif

/* Every dlsym but RTLD_NEXT (see above).  Touches no gmlake state unless `name` is one of the
 * hooks: other libraries' start-up code calls dlsym before anything else is ready. */
GML_NO_SANITIZE __attribute__((used, visibility("hidden"))) void *gml_dlsym(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = (void *(*)(void *, const char *))gml_resolve_dlsym();
    void *r = real ? real(handle, name) : NULL;
    if (!r)
        return r;
    const hook_entry *e = find_hook(name);
    if (!e || gml_depth || !gml_enabled())
        return r;
    return e->hook;
}

void *gml_hook_for(const char *symbol, void *real)
{
    if (!real || gml_depth || !gml_enabled())
        return real;
    for (size_t i = 0; i < table_len; i++) {
        if (!table[i].real)
            continue;
        void *r = *table[i].real ? *table[i].real : gml_resolve_global(table[i].real, table[i].name);
        if (r == real)
            return table[i].hook;
    }
    (void)symbol;
    return real;
}

/* ---- entry-point resolvers ---- */

GML_HOOK CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    __typeof__(gml_real.drv_get_proc_address) real = GML_REAL(drv_get_proc_address);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = gml_hook_for(symbol, *pfn);
    return r;
}

GML_HOOK CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    __typeof__(gml_real.drv_get_proc_address_v2) real = GML_REAL(drv_get_proc_address_v2);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = real(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = gml_hook_for(symbol, *pfn);
    return r;
}

/* The runtime's resolvers and their per-thread-default-stream twins (what a program built with
 * --default-stream per-thread calls; their default is the _ptsz driver functions): the real
 * resolver's answer, on success with the hook that stands for the pointer it resolved. */
static cudaError_t handed_out(cudaError_t r, const char *symbol, void **funcPtr)
{
    if (r == cudaSuccess && funcPtr)
        *funcPtr = gml_hook_for(symbol, *funcPtr);
    return r;
}

static cudaError_t entry_point(__typeof__(gml_real.rt_get_driver_entry_point) real, const char *symbol,
                               void **funcPtr, unsigned long long flags,
                               enum cudaDriverEntryPointQueryResult *status)
{
    return real ? handed_out(real(symbol, funcPtr, flags, status), symbol, funcPtr) : cudaErrorSymbolNotFound;
}

static cudaError_t entry_point_by_version(__typeof__(gml_real.rt_get_driver_entry_point_by_version) real,
                                          const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                          unsigned long long flags,
                                          enum cudaDriverEntryPointQueryResult *status)
{
    return real ? handed_out(real(symbol, funcPtr, cudaVersion, flags, status), symbol, funcPtr)
                : cudaErrorSymbolNotFound;
}

GML_HOOK cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    GML_RT_ENTRY();
    return entry_point(GML_REAL(rt_get_driver_entry_point), symbol, funcPtr, flags, status);
}

GML_HOOK cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *status)
{
    GML_RT_ENTRY();
    return entry_point(GML_REAL(rt_get_driver_entry_point_ptsz), symbol, funcPtr, flags, status);
}

GML_HOOK cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                                      unsigned long long flags,
                                                      enum cudaDriverEntryPointQueryResult *status)
{
    GML_RT_ENTRY();
    return entry_point_by_version(GML_REAL(rt_get_driver_entry_point_by_version), symbol, funcPtr, cudaVersion,
                                  flags, status);
}

GML_HOOK cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                                           unsigned int cudaVersion, unsigned long long flags,
                                                           enum cudaDriverEntryPointQueryResult *status)
{
    GML_RT_ENTRY();
    return entry_point_by_version(GML_REAL(rt_get_driver_entry_point_by_version_ptsz), symbol, funcPtr,
                                  cudaVersion, flags, status);
}

/* Each hook's type is the CUDA prototype's (the runtime hooks are also checked by the
 * declarations in cuda_runtime_api.h, which the definitions above must match). */
GML_CHECK_TYPE(cuGetProcAddress, PFN_cuGetProcAddress_v11030);
GML_CHECK_TYPE(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000);
