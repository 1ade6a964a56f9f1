/* test_device_cuda.c — the cuda device over a stub driver (a resolver handing out the functions
 * below): what it does when threads call it without the pool lock (gml_pool_sync synchronises
 * outside it; growth, stitches and teardowns map and unmap outside it while a peer grant may
 * run). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "thread_gate.h"

static int ctx_a, ctx_b; /* two contexts: the thread's current one (device 1), device 0's primary */
static atomic_int retains;

static CUresult ok_void(void) { return CUDA_SUCCESS; }
static CUresult granularity(size_t *g, const CUmemAllocationProp *p, CUmemAllocationGranularity_flags f)
{
    (void)p, (void)f;
    *g = 2 << 20;
    return CUDA_SUCCESS;
}
static CUresult get_current(CUcontext *c)
{
    *c = (CUcontext)&ctx_a;
    return CUDA_SUCCESS;
}
static CUresult get_device(CUdevice *d)
{
    *d = 1; /* the calling thread works on device 1, the pool is device 0's */
    return CUDA_SUCCESS;
}
static CUresult primary_retain(CUcontext *c, CUdevice d)
{
    (void)d;
    atomic_fetch_add(&retains, 1);
    usleep(100 * 1000); /* a driver call takes time: another thread may ask meanwhile */
    *c = (CUcontext)&ctx_b;
    return CUDA_SUCCESS;
}
static useconds_t create_sleep_us; /* cuMemCreate takes this long */
static CUresult mem_create(CUmemGenericAllocationHandle *h, size_t size,
                           const CUmemAllocationProp *prop, unsigned long long flags)
{
    (void)size, (void)prop, (void)flags;
    usleep(create_sleep_us);
    *h = 1;
    return CUDA_SUCCESS;
}
static CUresult push(CUcontext c) { (void)c; return CUDA_SUCCESS; }
static CUresult pop(CUcontext *c) { *c = (CUcontext)&ctx_b; return CUDA_SUCCESS; }

/* The stub driver's mappings, as the real driver keeps them: cuMemSetAccess refuses a range that
 * is not wholly mapped (CUDA_ERROR_INVALID_VALUE) and records, per mapping, the devices it gave
 * access to (bit i: device i). */
typedef struct stub_map {
    uintptr_t va;
    size_t size;
    bool mapped;
    uint64_t access;
} stub_map;
static stub_map stub_maps[8];
static int stub_nmaps;
static pthread_mutex_t drv_mu = PTHREAD_MUTEX_INITIALIZER;
static bool map_gated, unmap_gated; /* the call waits at the gate g once it has taken effect */
static CUresult unmap_fails;        /* cuMemUnmap returns it and unmaps nothing (0: unmaps) */
static uintptr_t refused_va;        /* cuMemSetAccess refuses the mapping there (0: none) */

static stub_map *stub_find(uintptr_t va) /* the mapping holding va, mapped or not; drv_mu held */
{
    for (int i = 0; i < stub_nmaps; i++)
        if (va >= stub_maps[i].va && va < stub_maps[i].va + stub_maps[i].size)
            return &stub_maps[i];
    return NULL;
}

static CUresult mem_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                        unsigned long long flags)
{
    (void)offset, (void)h, (void)flags;
    pthread_mutex_lock(&drv_mu);
    stub_map *m = stub_find(va);
    if (!m && stub_nmaps < 8)
        m = &stub_maps[stub_nmaps++];
    CUresult r = !m || m->mapped ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS)
        *m = (stub_map){.va = va, .size = size, .mapped = true};
    pthread_mutex_unlock(&drv_mu);
    if (map_gated)
        hold(&g);
    return r;
}

static CUresult mem_unmap(CUdeviceptr va, size_t size)
{
    CUresult r = unmap_fails;
    pthread_mutex_lock(&drv_mu);
    for (uintptr_t at = va; r == CUDA_SUCCESS && at < va + size;) {
        stub_map *m = stub_find(at);
        if (!m || !m->mapped || m->va != at) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        m->mapped = false;
        m->access = 0;
        at += m->size;
    }
    pthread_mutex_unlock(&drv_mu);
    if (unmap_gated)
        hold(&g);
    return r;
}

static CUresult set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    uint64_t access = 0;
    for (size_t i = 0; i < count; i++)
        if (desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
            desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            access |= (uint64_t)1 << desc[i].location.id;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&drv_mu);
    for (uintptr_t at = va; at < va + size;) { /* wholly mapped, or nothing changes */
        stub_map *m = stub_find(at);
        if (!m || !m->mapped || m->va == refused_va) {
            r = CUDA_ERROR_INVALID_VALUE;
            break;
        }
        at = m->va + m->size;
    }
    for (uintptr_t at = va; r == CUDA_SUCCESS && at < va + size;) {
        stub_map *m = stub_find(at);
        m->access = access;
        at = m->va + m->size;
    }
    pthread_mutex_unlock(&drv_mu);
    return r;
}

/* The devices the mapping at va gives access to (0: none, or not mapped). */
static uint64_t access_of(uintptr_t va)
{
    pthread_mutex_lock(&drv_mu);
    stub_map *m = stub_find(va);
    uint64_t a = m && m->mapped ? m->access : 0;
    pthread_mutex_unlock(&drv_mu);
    return a;
}

/* Streams for the capture test: is_capturing answers `capturing`; waits are counted. */
static CUstreamCaptureStatus capturing = CU_STREAM_CAPTURE_STATUS_NONE;
static atomic_int waits;
static CUresult is_capturing(CUstream s, CUstreamCaptureStatus *st)
{
    (void)s;
    *st = capturing;
    return CUDA_SUCCESS;
}
static CUresult wait_event(CUstream s, CUevent e, unsigned int flags)
{
    (void)s, (void)e, (void)flags;
    atomic_fetch_add(&waits, 1);
    return CUDA_SUCCESS;
}

/* The calling thread's capture mode, as cuThreadExchangeStreamCaptureMode keeps it, and the mode
 * cuMemGetInfo was called in. */
static _Thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static CUstreamCaptureMode info_mode = (CUstreamCaptureMode)-1;
static CUresult exchange_mode(CUstreamCaptureMode *m)
{
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *m;
    *m = old;
    return CUDA_SUCCESS;
}
static CUresult mem_get_info(size_t *f, size_t *t)
{
    info_mode = thread_mode;
    *f = 1 << 30, *t = 2u << 30;
    return CUDA_SUCCESS;
}

static const struct {
    const char *name;
    void *fn;
} stubs[] = {
    {"cuThreadExchangeStreamCaptureMode", (void *)exchange_mode}, {"cuMemGetInfo_v2", (void *)mem_get_info},
    {"cuStreamIsCapturing", (void *)is_capturing}, {"cuStreamWaitEvent", (void *)wait_event},
    {"cuMemGetAllocationGranularity", (void *)granularity}, {"cuCtxGetCurrent", (void *)get_current},
    {"cuCtxGetDevice", (void *)get_device}, {"cuDevicePrimaryCtxRetain", (void *)primary_retain},
    {"cuCtxPushCurrent_v2", (void *)push}, {"cuCtxPopCurrent_v2", (void *)pop},
    {"cuMemMap", (void *)mem_map}, {"cuMemUnmap", (void *)mem_unmap},
    {"cuMemSetAccess", (void *)set_access}, {"cuMemCreate", (void *)mem_create},
};

static void *stub(const char *name)
{
    for (size_t i = 0; i < sizeof stubs / sizeof stubs[0]; i++)
        if (!strcmp(name, stubs[i].name))
            return stubs[i].fn;
    if (!strncmp(name, "cuStream", 8) || !strcmp(name, "cuThreadExchangeStreamCaptureMode"))
        return NULL; /* optional */
    return (void *)ok_void; /* the rest are not called here */
}

static void *sync_main(void *dev) { return (void *)(intptr_t)gml_dev_synchronize(dev); }

Test(device_cuda, threads_synchronising_from_another_device_retain_the_primary_context_once)
{
    const char *err = NULL;
    gml_device *dev = gml_cuda_device_create(0, stub, &err);
    cr_assert_not_null(dev, "%s", err ? err : "");
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, sync_main, dev), 0);
    for (int i = 0; i < 2; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        cr_assert_eq((intptr_t)rc, GMLAKE_OK);
    }
    cr_assert_eq(atomic_load(&retains), 1, "device 0's primary context retained %d times",
                 atomic_load(&retains));
    cr_assert_eq(gml_dev_synchronize(dev), GMLAKE_OK);
    cr_assert_eq(atomic_load(&retains), 1, "and kept");
    gml_device_destroy(dev);
}

static gml_device *stub_device(void)
{
    const char *err = NULL;
    gml_device *dev = gml_cuda_device_create(0, stub, &err);
    cr_assert_not_null(dev, "%s", err ? err : "");
    return dev;
}

#define RANGE (2 * MiB)
#define R1 ((uintptr_t)1 << 40)
#define R2 (R1 + 2 * RANGE)
#define BIT(i) ((uint64_t)1 << (i))

/* Maps and gives access to [va, va + RANGE), as growth does. */
static void map_range(gml_device *dev, uintptr_t va)
{
    cr_assert_eq(gml_dev_map(dev, va, RANGE, 1), GMLAKE_OK);
    cr_assert_eq(gml_dev_set_access(dev, va, RANGE), GMLAKE_OK);
}

/* A device with R1 and R2 mapped, each granting its owner only. */
static gml_device *two_ranges(void)
{
    gml_device *dev = stub_device();
    map_range(dev, R1);
    map_range(dev, R2);
    cr_assert_eq(access_of(R1), BIT(0), "the owner only");
    cr_assert_eq(access_of(R2), BIT(0), "the owner only");
    return dev;
}

/* A driver call made on its own thread (the pool's, without the pool lock): map, unmap or grant. */
typedef struct call {
    gml_device *dev;
    enum { MAP, UNMAP, GRANT } what;
    uintptr_t va;
    int accessor;
    int rc;
    CUresult driver_error; /* gml_cuda_last_error on that thread */
    bool done;
} call;

static void *call_main(void *arg)
{
    call *c = arg;
    int rc = c->what == MAP     ? gml_dev_map(c->dev, c->va, RANGE, 1)
             : c->what == UNMAP ? gml_dev_unmap(c->dev, c->va, RANGE)
                                : gml_cuda_device_grant(c->dev, c->accessor);
    if (c->what == MAP && rc == GMLAKE_OK)
        rc = gml_dev_set_access(c->dev, c->va, RANGE);
    pthread_mutex_lock(&g.mu);
    c->rc = rc;
    c->driver_error = (CUresult)gml_cuda_last_error();
    c->done = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    return NULL;
}

/* Starts *held on a thread, waits until its driver call (gated) holds at the gate, runs a grant
 * of `accessor` on another thread meanwhile (returned, ended); the grant must not wait for the
 * held call (the gate opens after 3 s if it does, and the test fails).  Then lets *held end. */
static call grant_while_held(call *held, int accessor)
{
    pthread_t th, tg;
    cr_assert_eq(pthread_create(&th, NULL, call_main, held), 0);
    cr_assert(wait_for(NULL, &g.entered, 1, 10), "the held call never reached the driver");
    call grant = {.dev = held->dev, .what = GRANT, .accessor = accessor};
    cr_assert_eq(pthread_create(&tg, NULL, call_main, &grant), 0);
    bool in_time = wait_for(&grant.done, NULL, 0, 3);
    gate_open();
    pthread_join(tg, NULL);
    pthread_join(th, NULL);
    cr_assert(in_time, "the grant waited for the held driver call");
    return grant;
}

Test(device_cuda, a_grant_while_a_range_is_unmapped_reaches_every_mapping_that_stays)
{
    gml_device *dev = two_ranges();
    unmap_gated = true; /* R1 is unmapped in the driver; its unmap has not returned yet */
    call unmap = {.dev = dev, .what = UNMAP, .va = R1};
    call grant = grant_while_held(&unmap, 2);
    cr_assert_eq(grant.rc, GMLAKE_OK, "the grant: %s (driver error %d)", gmlake_strerror(grant.rc),
                 grant.driver_error);
    cr_assert_eq(access_of(R2), BIT(0) | BIT(2), "the peer reaches the mapping that stays");
    cr_assert_eq(unmap.rc, GMLAKE_OK);
    unmap_gated = false;
    cr_assert_eq(gml_cuda_device_grant(dev, 3), GMLAKE_OK, "no grant walks the unmapped range");
    cr_assert_eq(access_of(R2), BIT(0) | BIT(2) | BIT(3));
    gml_device_destroy(dev);
}

Test(device_cuda, a_failed_unmap_keeps_its_mapping_with_the_grants_made_meanwhile)
{
    gml_device *dev = two_ranges();
    unmap_gated = true;
    unmap_fails = CUDA_ERROR_ILLEGAL_STATE;
    call unmap = {.dev = dev, .what = UNMAP, .va = R1};
    cr_assert_eq(grant_while_held(&unmap, 2).rc, GMLAKE_OK);
    cr_assert_eq(unmap.rc, GMLAKE_ERR_DEVICE);
    cr_assert_eq(unmap.driver_error, CUDA_ERROR_ILLEGAL_STATE, "the unmap's error is the one told");
    cr_assert_eq(access_of(R1), BIT(0) | BIT(2), "the grant made during the failed unmap");
    cr_assert_eq(access_of(R2), BIT(0) | BIT(2));
    unmap_gated = false;
    cr_assert_eq(gml_cuda_device_grant(dev, 3), GMLAKE_OK);
    cr_assert_eq(access_of(R1), BIT(0) | BIT(2) | BIT(3), "still on the device's list");
    unmap_fails = CUDA_SUCCESS;
    cr_assert_eq(gml_dev_unmap(dev, R1, RANGE), GMLAKE_OK);
    cr_assert_eq(gml_cuda_device_grant(dev, 4), GMLAKE_OK);
    cr_assert_eq(access_of(R2), BIT(0) | BIT(2) | BIT(3) | BIT(4));
    gml_device_destroy(dev);
}

Test(device_cuda, a_grant_while_a_range_is_mapped_reaches_it_through_its_set_access)
{
    gml_device *dev = stub_device();
    map_range(dev, R1);
    map_gated = true; /* R2 is mapped in the driver; its map has not returned yet */
    call map = {.dev = dev, .what = MAP, .va = R2};
    cr_assert_eq(grant_while_held(&map, 2).rc, GMLAKE_OK);
    cr_assert_eq(map.rc, GMLAKE_OK);
    cr_assert_eq(access_of(R1), BIT(0) | BIT(2));
    cr_assert_eq(access_of(R2), BIT(0) | BIT(2), "the new mapping grants the peer too");
    map_gated = false;
    cr_assert_eq(gml_cuda_device_grant(dev, 3), GMLAKE_OK);
    cr_assert_eq(access_of(R2), BIT(0) | BIT(2) | BIT(3), "and is on the device's list");
    gml_device_destroy(dev);
}

Test(device_cuda, a_grant_one_mapping_refuses_still_reaches_the_others)
{
    gml_device *dev = two_ranges();
    refused_va = R1;
    cr_assert_eq(gml_cuda_device_grant(dev, 2), GMLAKE_ERR_DEVICE, "the refusal is reported");
    cr_assert_eq(gml_cuda_last_error(), CUDA_ERROR_INVALID_VALUE);
    cr_assert_eq(access_of(R2), BIT(0) | BIT(2), "the grant goes on past the refused mapping");
    gml_device_destroy(dev);
}

/* The device layer times every driver call (gmlake_stats.device_seconds on a GPU): two creates of
 * 20 ms each show as at least 40 ms of chunk_create, and the other kinds keep their own time. */
Test(device_cuda, driver_calls_are_timed_by_kind)
{
    gml_device *dev = stub_device();
    create_sleep_us = 20 * 1000;
    gml_handle h;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(gml_dev_chunk_create(dev, RANGE, &h), GMLAKE_OK);
    create_sleep_us = 0;
    double create = gml_dev_seconds(dev, GMLAKE_DC_CHUNK_CREATE);
    cr_assert(create >= 0.040 && create < 5.0, "chunk_create timed %.6f s", create);
    cr_assert_eq(gml_dev_seconds(dev, GMLAKE_DC_MAP), 0, "no map made");
    map_range(dev, R1);
    double map = gml_dev_seconds(dev, GMLAKE_DC_MAP);
    cr_assert(map > 0 && map < 0.040, "one quick map timed %.6f s", map);
    cr_assert_eq(gml_dev_seconds(dev, GMLAKE_DC_CHUNK_CREATE), create, "the creates' time stays");
    cr_assert_eq(gml_dev_unmap(dev, R1, RANGE), GMLAKE_OK);
    gml_device_destroy(dev);
}

/* The memory query the pool makes before a large growth and an out-of-memory decision runs in
 * relaxed capture mode, as its other driver calls do: a thread capturing a graph in global mode
 * (PyTorch's default) may grow the pool for the graph. */
Test(device_cuda, the_memory_query_runs_in_relaxed_capture_mode)
{
    gml_device *dev = stub_device();
    size_t f = 0, t = 0;
    thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    cr_assert_eq(gml_dev_mem_info(dev, &f, &t), GMLAKE_OK);
    cr_assert_eq(f, (size_t)1 << 30);
    cr_assert_eq(info_mode, CU_STREAM_CAPTURE_MODE_RELAXED, "queried in mode %d", (int)info_mode);
    cr_assert_eq(thread_mode, CU_STREAM_CAPTURE_MODE_GLOBAL, "the thread's mode restored");
    gml_device_destroy(dev);
}

/* A stream that captures a graph gets no stream_wait from the pool (it would become a node of
 * that graph), as it gets no event record; one that does not capture gets it. */
Test(device_cuda, no_stream_wait_on_a_capturing_stream)
{
    const char *err = NULL;
    gml_device *dev = gml_cuda_device_create(0, stub, &err);
    cr_assert_not_null(dev, "%s", err ? err : "");
    gml_event ev = (gml_event)&ctx_a; /* the stub driver never reads it */
    capturing = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    cr_assert_eq(gml_dev_stream_wait(dev, (gml_stream)0x1234, ev), GMLAKE_ERR_DEVICE);
    cr_assert_eq(atomic_load(&waits), 0, "no cuStreamWaitEvent on a capturing stream");
    capturing = CU_STREAM_CAPTURE_STATUS_NONE;
    cr_assert_eq(gml_dev_stream_wait(dev, (gml_stream)0x1234, ev), GMLAKE_OK);
    cr_assert_eq(atomic_load(&waits), 1);
    gml_device_destroy(dev);
}
