/*
 * resolve.c — reaching the real CUDA functions, and handing out gmlake's hooks to programs that
 * look functions up at run time: dlsym (XLA on a libcuda handle), cuGetProcAddress (libcudart
 * itself, CuPy's static cudart), cudaGetDriverEntryPoint(ByVersion).
 *
 * The real dlsym comes from dlvsym (never hooked).  Runtime functions resolve with RTLD_NEXT,
 * driver functions on a libcuda.so.1 handle; a result that is gmlake's own hook is rejected.
 * The hooks are one table sorted by name (bsearch); entry-point resolvers map by the real pointer
 * they got, so the versioned and per-thread-stream variants each get their own hook.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "interpose.h"

struct gml_real gml_real;

/* The hooks (hooks.c). */
extern cudaError_t cudaMallocAsync_ptsz(void **, size_t, cudaStream_t);
extern cudaError_t cudaFreeAsync_ptsz(void *, cudaStream_t);
extern CUresult cuMemAllocAsync_ptsz(CUdeviceptr *, size_t, CUstream);
extern CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
extern CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *, size_t, CUmemoryPool, CUstream);

typedef struct hook_entry {
    const char *name;
    void *hook;
    void **real; /* the field of gml_real it stands for */
} hook_entry;

#define E(name, field) {#name, (void *)&name, (void **)&gml_real.field}
/* Sorted by strcmp (tests/interpose checks the order). */
static const hook_entry table[] = {
    E(cuGetProcAddress, cuGetProcAddress),
    E(cuGetProcAddress_v2, cuGetProcAddress_v2),
    E(cuMemAllocAsync, cuMemAllocAsync),
    E(cuMemAllocAsync_ptsz, cuMemAllocAsync_ptsz),
    E(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync),
    E(cuMemAllocFromPoolAsync_ptsz, cuMemAllocFromPoolAsync_ptsz),
    E(cuMemAlloc_v2, cuMemAlloc_v2),
    E(cuMemFreeAsync, cuMemFreeAsync),
    E(cuMemFreeAsync_ptsz, cuMemFreeAsync_ptsz),
    E(cuMemFree_v2, cuMemFree_v2),
    E(cuMemGetInfo_v2, cuMemGetInfo_v2),
    E(cuStreamDestroy, cuStreamDestroy),
    E(cuStreamDestroy_v2, cuStreamDestroy_v2),
    E(cudaFree, cudaFree),
    E(cudaFreeAsync, cudaFreeAsync),
    {"cudaFreeAsync_ptsz", (void *)&cudaFreeAsync_ptsz, NULL},
    E(cudaGetDriverEntryPoint, cudaGetDriverEntryPoint),
    E(cudaGetDriverEntryPointByVersion, cudaGetDriverEntryPointByVersion),
    E(cudaIpcGetMemHandle, cudaIpcGetMemHandle),
    E(cudaMalloc, cudaMalloc),
    E(cudaMallocAsync, cudaMallocAsync),
    {"cudaMallocAsync_ptsz", (void *)&cudaMallocAsync_ptsz, NULL},
    E(cudaMemGetInfo, cudaMemGetInfo),
    E(cudaMemPoolGetAttribute, cudaMemPoolGetAttribute),
    E(cudaMemPoolSetAttribute, cudaMemPoolSetAttribute),
    E(cudaMemPoolTrimTo, cudaMemPoolTrimTo),
    E(cudaStreamDestroy, cudaStreamDestroy),
};
#undef E
static const size_t table_len = sizeof table / sizeof table[0];

/* For tests: the table's names in order, NULL-terminated by index. */
GML_HOOK const char *gmlake_hook_name(size_t i) { return i < table_len ? table[i].name : NULL; }

static int by_name(const void *key, const void *elem)
{
    return strcmp((const char *)key, ((const hook_entry *)elem)->name);
}

static void *libcuda;

static bool is_hook(void *p)
{
    for (size_t i = 0; i < table_len; i++)
        if (table[i].hook == p)
            return true;
    return false;
}

static void *next_sym(void *handle, const char *name)
{
    void *p = handle ? gml_real.dlsym(handle, name) : NULL;
    return p && !is_hook(p) ? p : NULL;
}

static pthread_mutex_t cuda_mu = PTHREAD_MUTEX_INITIALIZER;

static void resolve_dlsym(void)
{
    void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p)
        p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    __atomic_store_n((void **)&gml_real.dlsym, p, __ATOMIC_RELEASE);
}

/* Idempotent, so no once-lock: dlvsym may itself call dlsym (sanitizer runtimes intercept it),
 * which would re-enter here; that inner call gets NULL instead of a deadlock. */
void gml_resolve(void)
{
    static __thread int resolving;
    if (__atomic_load_n(&gml_real.dlsym, __ATOMIC_ACQUIRE) || resolving)
        return;
    resolving = 1;
    resolve_dlsym();
    resolving = 0;
}

static void *libcuda_handle(void)
{
    void *h = __atomic_load_n(&libcuda, __ATOMIC_ACQUIRE);
    if (h)
        return h;
    pthread_mutex_lock(&cuda_mu);
    if (!libcuda)
        __atomic_store_n(&libcuda, dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL), __ATOMIC_RELEASE);
    pthread_mutex_unlock(&cuda_mu);
    return libcuda;
}

/* Runtime functions are looked up on every call until found: a program may load libcudart long
 * after its first dlsym (Python imports it with torch). */
void *gml_resolve_one(void **slot, const char *name)
{
    gml_resolve();
    bool driver = name[0] == 'c' && name[1] == 'u' && name[2] != 'd';
    void *p = next_sym(driver ? libcuda_handle() : RTLD_NEXT, name);
    if (p)
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    return p;
}

void *gml_driver_symbol(const char *name)
{
    gml_resolve();
    return next_sym(libcuda_handle(), name);
}

void *gml_hook_for(const char *symbol, void *real)
{
    if (!real || gml_depth || !gml_cfg()->enable)
        return real;
    for (size_t i = 0; i < table_len; i++) {
        if (!table[i].real)
            continue;
        void *r = *table[i].real ? *table[i].real : gml_resolve_one(table[i].real, table[i].name);
        if (r == real)
            return table[i].hook;
    }
    (void)symbol;
    return real;
}

/* Touches no gmlake state unless `name` is one of the hooks: other libraries' start-up code calls
 * dlsym (often with RTLD_NEXT) before anything else is ready. */
GML_HOOK void *dlsym(void *handle, const char *name)
{
    gml_resolve();
    void *r = gml_real.dlsym ? gml_real.dlsym(handle, name) : NULL;
    if (!r || handle == RTLD_NEXT)
        return r;
    const hook_entry *e = bsearch(name, table, table_len, sizeof *table, by_name);
    if (!e || gml_depth || !gml_cfg()->enable)
        return r;
    return e->hook;
}

/* ---- entry-point resolvers ---- */

GML_HOOK CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    if (!GML_REAL(cuGetProcAddress))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = gml_real.cuGetProcAddress(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = gml_hook_for(symbol, *pfn);
    return r;
}

GML_HOOK CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                      cuuint64_t flags, CUdriverProcAddressQueryResult *status)
{
    if (!GML_REAL(cuGetProcAddress_v2))
        return CUDA_ERROR_NOT_FOUND;
    CUresult r = gml_real.cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, status);
    if (r == CUDA_SUCCESS && pfn)
        *pfn = gml_hook_for(symbol, *pfn);
    return r;
}

GML_HOOK cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr,
                                             unsigned long long flags,
                                             enum cudaDriverEntryPointQueryResult *status)
{
    if (!GML_REAL(cudaGetDriverEntryPoint))
        return cudaErrorSymbolNotFound;
    cudaError_t r = gml_real.cudaGetDriverEntryPoint(symbol, funcPtr, flags, status);
    if (r == cudaSuccess && funcPtr)
        *funcPtr = gml_hook_for(symbol, *funcPtr);
    return r;
}

GML_HOOK cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr,
                                                      unsigned int cudaVersion,
                                                      unsigned long long flags,
                                                      enum cudaDriverEntryPointQueryResult *status)
{
    if (!GML_REAL(cudaGetDriverEntryPointByVersion))
        return cudaErrorSymbolNotFound;
    cudaError_t r = gml_real.cudaGetDriverEntryPointByVersion(symbol, funcPtr, cudaVersion, flags, status);
    if (r == cudaSuccess && funcPtr)
        *funcPtr = gml_hook_for(symbol, *funcPtr);
    return r;
}

/* Each hook's type is the CUDA prototype's (the runtime hooks are also checked by the
 * declarations in cuda_runtime_api.h, which the definitions above must match). */
GML_CHECK_TYPE(cuGetProcAddress, PFN_cuGetProcAddress_v11030);
GML_CHECK_TYPE(cuGetProcAddress_v2, PFN_cuGetProcAddress_v12000);
