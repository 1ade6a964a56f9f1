/* fake_cuda.c — the memory of the fake libcuda.so.1 for the interposer tests (see fake_cuda.h).
 * Virtual memory management goes to a backed sim device of 256 MiB; cuMemAlloc and friends (what
 * gmlake passes through) are plain host allocations remembered in a small table.  Per-range access
 * rights, per-device memory pools, cuGetProcAddress, and a count of routing calls made from inside
 * the runtime.  Contexts, streams, events, synchronisation, capture and fork are in
 * fake_streams.c. */
#include <cuda.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#include "core/device.h"
#include "core/vec.h"
#include "fake_internal.h"

static fake_counts counts;
static gml_device *sim;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t own[4096];
static size_t own_size[4096];
/* Virtual reservations and mappings, remembered for the pointer queries below (CUDA answers them
 * for VMM memory by mapping and by reservation). */
typedef struct vrange {
    uintptr_t va;
    size_t n;
    CUmemGenericAllocationHandle h; /* mappings: the handle mapped */
    unsigned retained;              /* mappings: cuMemRetainAllocationHandle references */
} vrange;
static GML_VEC(vrange) reserved_ranges, mappings;


EXPORT fake_counts *fake_cuda_counts(void) { return &counts; }

static gml_device *dev(void)
{
    pthread_mutex_lock(&mu);
    if (!sim) {
        gml_sim_config c = {.capacity = (size_t)256 << 20, .backed = true};
        sim = gml_sim_create(&c);
    }
    pthread_mutex_unlock(&mu);
    return sim;
}

static CUresult res(int rc)
{
    return rc == GMLAKE_OK ? CUDA_SUCCESS : rc == GMLAKE_ERR_NOMEM ? CUDA_ERROR_OUT_OF_MEMORY
                                          : rc == GMLAKE_ERR_BUSY ? CUDA_ERROR_NOT_READY
                                                                  : CUDA_ERROR_INVALID_VALUE;
}

EXPORT int fake_cuda_owns(uintptr_t p)
{
    pthread_mutex_lock(&mu);
    int found = 0;
    for (int i = 0; i < 4096 && !found; i++)
        found = own[i] == p;
    pthread_mutex_unlock(&mu);
    return found;
}

static CUresult host_alloc(CUdeviceptr *d, size_t n)
{
    void *p = NULL;
    if (n > ((size_t)64 << 20) || posix_memalign(&p, 512, n ? n : 1))
        return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mu);
    for (int i = 0; i < 4096; i++)
        if (!own[i]) {
            own[i] = (uintptr_t)p;
            own_size[i] = n;
            break;
        }
    pthread_mutex_unlock(&mu);
    *d = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

static CUresult host_free(CUdeviceptr d)
{
    pthread_mutex_lock(&mu);
    int i = 0;
    while (i < 4096 && own[i] != (uintptr_t)d)
        i++;
    if (i < 4096)
        own[i] = 0;
    pthread_mutex_unlock(&mu);
    if (i == 4096)
        return CUDA_ERROR_INVALID_VALUE;
    free((void *)d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *d, size_t n) { GUARD(); COUNT(mem_alloc); return host_alloc(d, n); }
EXPORT CUresult cuMemFree_v2(CUdeviceptr d) { GUARD(); COUNT(mem_free); return host_free(d); }
EXPORT CUresult cuMemAllocAsync(CUdeviceptr *d, size_t n, CUstream s) { GUARD(); COUNT(mem_alloc_async); return host_alloc(d, n); }
EXPORT CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) { GUARD(); COUNT(mem_free_async); return host_free(d); }
EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *d, size_t n, CUstream s) { GUARD(); COUNT(mem_alloc_async); return host_alloc(d, n); }
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { GUARD(); COUNT(mem_free_async); return host_free(d); }
/* internal calls go to the fake's own code, as inside the real driver */
EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s) { GUARD(); COUNT(mem_alloc_async); return host_alloc(d, n); }
EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s) { GUARD(); COUNT(mem_alloc_async); return host_alloc(d, n); }
/* After a sticky fault the GPU answers no memory query (the fault's code). */
EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t)
{
    GUARD();
    if (fake_cuda_faulted())
        return (CUresult)fake_cuda_faulted();
    return res(gml_dev_mem_info(dev(), f, t));
}
static void drop_access(uintptr_t p, size_t n);

/* ---- routing calls from inside the runtime ----
 * The fake runtime marks its entry points (fake_runtime_enter/leave); the driver calls gmlake
 * makes to route a call (device, capture status, default pool) are counted in `reentered` when
 * they happen inside one: a pass-through runtime call whose driver calls gmlake routes again. */
static __thread int in_runtime;
EXPORT void fake_runtime_enter(void) { in_runtime++; }
EXPORT void fake_runtime_leave(void) { in_runtime--; }
void fake_routing_call(void)
{
    if (in_runtime)
        COUNT(reentered);
}

/* ---- memory pools: device d's default pool is FAKE_DEFAULT_POOL + d ---- */
static _Atomic(CUmemoryPool) cur_pool[FAKE_DEVICES];
EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *p, CUdevice d)
{
    GUARD();
    fake_routing_call();
    return (CUresult)fake_default_pool((void **)p, d);
}
EXPORT int fake_default_pool(void **p, int d)
{
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    *p = (void *)((uintptr_t)FAKE_DEFAULT_POOL + d);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceSetMemPool(CUdevice d, CUmemoryPool p)
{
    GUARD();
    if (d < 0 || d >= FAKE_DEVICES || !p)
        return CUDA_ERROR_INVALID_VALUE;
    cur_pool[d] = p;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *p, CUdevice d)
{
    GUARD();
    if (d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    *p = cur_pool[d] ? cur_pool[d] : (CUmemoryPool)((uintptr_t)FAKE_DEFAULT_POOL + d);
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p, CUmemAllocationGranularity_flags f)
{
    GUARD();
    *g = gml_dev_granularity(dev());
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t n, const CUmemAllocationProp *p, unsigned long long f)
{
    GUARD();
    COUNT(vmm_create);
    gml_handle x;
    CUresult r = res(gml_dev_chunk_create(dev(), n, &x));
    if (r == CUDA_SUCCESS)
        *h = (CUmemGenericAllocationHandle)x;
    return r;
}
/* IPC of VMM memory: descriptors of the sim's chunks (core/device_sim.c says how). */
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    GUARD();
    if (a != CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED || d < 0 || d >= FAKE_DEVICES)
        return CUDA_ERROR_INVALID_VALUE;
    *v = getenv("FAKE_CUDA_NO_FD_EXPORT") ? 0 : 1;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuMemExportToShareableHandle(void *out, CUmemGenericAllocationHandle h, CUmemAllocationHandleType t,
                                             unsigned long long f)
{
    GUARD();
    if (t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || f)
        return CUDA_ERROR_INVALID_VALUE;
    return res(gml_dev_handle_export(dev(), h, (int *)out));
}
EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os, CUmemAllocationHandleType t)
{
    GUARD();
    gml_handle g;
    if (t != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_INVALID_VALUE;
    CUresult r = res(gml_dev_handle_import(dev(), (int)(intptr_t)os, 0, &g));
    if (r == CUDA_SUCCESS)
        *h = g;
    return r;
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h)
{
    GUARD();
    pthread_mutex_lock(&mu);
    bool retained = false;
    for (size_t i = 0; i < mappings.n && !retained; i++)
        if (mappings.v[i].h == h && mappings.v[i].retained) {
            mappings.v[i].retained--;
            retained = true;
        }
    pthread_mutex_unlock(&mu);
    return retained ? CUDA_SUCCESS : res(gml_dev_chunk_release(dev(), h));
}

static vrange *range_at(vrange *v, size_t n, uintptr_t p)
{
    for (size_t i = 0; i < n; i++)
        if (p >= v[i].va && p < v[i].va + v[i].n)
            return &v[i];
    return NULL;
}

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t n, size_t a, CUdeviceptr addr, unsigned long long f)
{
    GUARD();
    uintptr_t v;
    CUresult r = res(gml_dev_va_reserve(dev(), n, a, &v));
    if (r == CUDA_SUCCESS) {
        *p = (CUdeviceptr)v;
        pthread_mutex_lock(&mu);
        gml_vec_push(&reserved_ranges, ((vrange){.va = v, .n = n}));
        pthread_mutex_unlock(&mu);
    }
    return r;
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t n)
{
    GUARD();
    CUresult r = res(gml_dev_va_free(dev(), p, n));
    pthread_mutex_lock(&mu);
    for (size_t i = 0; r == CUDA_SUCCESS && i < reserved_ranges.n; i++)
        if (reserved_ranges.v[i].va == p)
            reserved_ranges.v[i--] = reserved_ranges.v[--reserved_ranges.n];
    pthread_mutex_unlock(&mu);
    return r;
}
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f)
{
    GUARD();
    CUresult r = off ? CUDA_ERROR_INVALID_VALUE : res(gml_dev_map(dev(), p, n, h));
    if (r == CUDA_SUCCESS) {
        pthread_mutex_lock(&mu);
        gml_vec_push(&mappings, ((vrange){.va = p, .n = n, .h = h}));
        pthread_mutex_unlock(&mu);
    }
    return r;
}
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t n)
{
    GUARD();
    CUresult r = res(gml_dev_unmap(dev(), p, n));
    if (r == CUDA_SUCCESS) {
        drop_access(p, n);
        pthread_mutex_lock(&mu);
        for (size_t i = 0; i < mappings.n; i++)
            if (mappings.v[i].va >= p && mappings.v[i].va < p + n)
                mappings.v[i--] = mappings.v[--mappings.n];
        pthread_mutex_unlock(&mu);
    }
    return r;
}

/* ---- pointer queries, as CUDA answers them: for the fake's own allocations (cuMemAlloc and
 * friends) the allocation, legacy IPC capable, no VMM handle; for VMM memory the mapping
 * (cuMemGetAddressRange), the reservation (range attributes), not legacy IPC capable, the handle
 * mapped there; for anything else CUDA_ERROR_NOT_FOUND / CUDA_ERROR_INVALID_VALUE. */
static bool own_at(uintptr_t p, uintptr_t *base, size_t *size)
{
    for (int i = 0; i < 4096; i++)
        if (own[i] && p >= own[i] && p < own[i] + (own_size[i] ? own_size[i] : 1)) {
            *base = own[i];
            *size = own_size[i];
            return true;
        }
    return false;
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    GUARD();
    uintptr_t base = 0;
    size_t size = 0;
    pthread_mutex_lock(&mu);
    vrange *m = own_at(dptr, &base, &size) ? NULL : range_at(mappings.v, mappings.n, dptr);
    if (m)
        base = m->va, size = m->n;
    pthread_mutex_unlock(&mu);
    if (!base)
        return CUDA_ERROR_NOT_FOUND;
    if (pbase)
        *pbase = base;
    if (psize)
        *psize = size;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr ptr)
{
    GUARD();
    uintptr_t base = 0;
    size_t size = 0;
    pthread_mutex_lock(&mu);
    bool own_mem = own_at(ptr, &base, &size);
    vrange *r = own_mem || !range_at(mappings.v, mappings.n, ptr) ? NULL
                                                                  : range_at(reserved_ranges.v, reserved_ranges.n, ptr);
    if (r)
        base = r->va, size = r->n;
    pthread_mutex_unlock(&mu);
    if (!own_mem && !r)
        return CUDA_ERROR_INVALID_VALUE;
    switch (a) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data = base; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data = size; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE: *(int *)data = own_mem; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data = 0; return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data = 1; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE; /* not modelled */
    }
}

/* As CUDA: a pointer no allocation holds answers defaults (DEVICE_ORDINAL -2), not an error. */
EXPORT CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *a, void **data, CUdeviceptr ptr)
{
    GUARD();
    for (unsigned i = 0; i < n; i++) {
        CUresult r = cuPointerGetAttribute(data[i], a[i], ptr);
        if (r == CUDA_SUCCESS)
            continue;
        switch (a[i]) {
        case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: *(CUdeviceptr *)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(size_t *)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        case CU_POINTER_ATTRIBUTE_MAPPED: *(int *)data[i] = 0; break;
        case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_SUCCESS;
}

/* A reference the caller drops with cuMemRelease (counted here: the sim's chunk stays). */
EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *h, void *addr)
{
    GUARD();
    pthread_mutex_lock(&mu);
    vrange *m = range_at(mappings.v, mappings.n, (uintptr_t)addr);
    if (m) {
        m->retained++;
        *h = m->h;
    }
    pthread_mutex_unlock(&mu);
    return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
/* Access rights by granule: bit d set when device d may read and write it.  Set by cuMemSetAccess,
 * dropped by cuMemUnmap. */
typedef struct granule {
    uintptr_t va;
    uint64_t mask;
    UT_hash_handle hh;
} granule;
static granule *granules;

EXPORT uint64_t fake_cuda_access(uintptr_t p)
{
    uintptr_t va = p - p % gml_dev_granularity(dev());
    pthread_mutex_lock(&mu);
    granule *g;
    HASH_FIND(hh, granules, &va, sizeof va, g);
    uint64_t m = g ? g->mask : 0;
    pthread_mutex_unlock(&mu);
    return m;
}

EXPORT CUresult cuMemSetAccess(CUdeviceptr p, size_t n, const CUmemAccessDesc *d, size_t c)
{
    GUARD();
    uint64_t set = 0, clear = 0;
    for (size_t i = 0; i < c; i++) {
        if (d[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || d[i].location.id < 0 ||
            d[i].location.id >= FAKE_DEVICES)
            return CUDA_ERROR_INVALID_DEVICE;
        if (d[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            set |= (uint64_t)1 << d[i].location.id;
        else
            clear |= (uint64_t)1 << d[i].location.id;
    }
    CUresult r = res(gml_dev_set_access(dev(), p, n));
    if (r != CUDA_SUCCESS)
        return r;
    size_t gran = gml_dev_granularity(dev());
    pthread_mutex_lock(&mu);
    for (uintptr_t va = p; va < p + n; va += gran) {
        granule *g;
        HASH_FIND(hh, granules, &va, sizeof va, g);
        if (!g) {
            g = calloc(1, sizeof *g);
            g->va = va;
            HASH_ADD(hh, granules, va, sizeof g->va, g);
        }
        g->mask = (g->mask | set) & ~clear;
    }
    pthread_mutex_unlock(&mu);
    return CUDA_SUCCESS;
}

static void drop_access(uintptr_t p, size_t n)
{
    size_t gran = gml_dev_granularity(dev());
    pthread_mutex_lock(&mu);
    for (uintptr_t va = p; va < p + n; va += gran) {
        granule *g;
        HASH_FIND(hh, granules, &va, sizeof va, g);
        if (g) {
            HASH_DEL(granules, g);
            free(g);
        }
    }
    pthread_mutex_unlock(&mu);
}

/* cuGetProcAddress: the fake's own functions by base name, versioned as the real driver does.
 * Their addresses are the fake's own, not the interposer's (the library is linked
 * -Bsymbolic-functions, tests/meson.build), as the real driver's are. */
typedef struct { const char *name; void *fn; } proc;
static const proc procs[] = {
    {"cuGetProcAddress", NULL}, /* filled below */
    {"cuMemAlloc", (void *)cuMemAlloc_v2},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync},
    {"cuMemFree", (void *)cuMemFree_v2},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync},
    {"cuMemGetAddressRange", (void *)cuMemGetAddressRange_v2},
    {"cuMemGetInfo", (void *)cuMemGetInfo_v2},
    {"cuMemRetainAllocationHandle", (void *)cuMemRetainAllocationHandle},
    {"cuPointerGetAttribute", (void *)cuPointerGetAttribute},
    {"cuPointerGetAttributes", (void *)cuPointerGetAttributes},
    {"cuStreamDestroy", (void *)cuStreamDestroy_v2},
};
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, cuuint64_t flags, CUdriverProcAddressQueryResult *st)
{
    GUARD();
    COUNT(get_proc);
    if (strcmp(sym, "cuGetProcAddress") == 0) {
        *pfn = (void *)cuGetProcAddress_v2;
        return CUDA_SUCCESS;
    }
    bool ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    for (size_t i = 1; i < sizeof procs / sizeof procs[0]; i++)
        if (strcmp(sym, procs[i].name) == 0) {
            *pfn = procs[i].fn;
            if (ptsz && procs[i].fn == (void *)cuMemAllocAsync)
                *pfn = (void *)cuMemAllocAsync_ptsz;
            if (ptsz && procs[i].fn == (void *)cuMemFreeAsync)
                *pfn = (void *)cuMemFreeAsync_ptsz;
            if (st)
                *st = CU_GET_PROC_ADDRESS_SUCCESS;
            return CUDA_SUCCESS;
        }
    *pfn = NULL;
    if (st)
        *st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}
#undef cuGetProcAddress
EXPORT CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, cuuint64_t flags)
{
    return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}

/* CUDA's answers to IPC of memory that is not its own (the fake exports none). */
EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p) { GUARD(); return CUDA_ERROR_INVALID_VALUE; }
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int f) { GUARD(); return CUDA_ERROR_INVALID_HANDLE; }
EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p) { GUARD(); return CUDA_ERROR_INVALID_VALUE; }
