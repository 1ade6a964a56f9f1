/* test_device_cuda.c — the cuda device over a stub driver (a resolver handing out the functions
 * below): what it does when threads call it without the pool lock (gml_pool_sync synchronises
 * outside it). */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "helpers.h"

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
static CUresult push(CUcontext c) { (void)c; return CUDA_SUCCESS; }
static CUresult pop(CUcontext *c) { *c = (CUcontext)&ctx_b; return CUDA_SUCCESS; }

static const struct {
    const char *name;
    void *fn;
} stubs[] = {
    {"cuMemGetAllocationGranularity", (void *)granularity}, {"cuCtxGetCurrent", (void *)get_current},
    {"cuCtxGetDevice", (void *)get_device}, {"cuDevicePrimaryCtxRetain", (void *)primary_retain},
    {"cuCtxPushCurrent_v2", (void *)push}, {"cuCtxPopCurrent_v2", (void *)pop},
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
