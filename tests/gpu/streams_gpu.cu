// streams_gpu.cu — stream semantics under gmlake on a real GPU.  Run under LD_PRELOAD=libgmlake.so
// (built with nvcc -arch=sm_90 -cudart shared); prints "N passed, M failed", exits non-zero on a
// failure.  Each case keeps a stream busy with a spinning kernel and checks that gmlake does not
// hand the stream's freed block to another stream before that work completed:
//  - per-thread default streams of two threads (cudaStreamPerThread), and the same thread reusing
//    its own block at once;
//  - a destroyed stream whose handle the next cudaStreamCreate may reuse; 10,000 short-lived
//    streams leave no events behind (gmlake's event create/destroy counts) and take < 5 s;
//  - cudaFree waits for the device (another stream's spinning kernel has finished when it returns);
//  - gmlake_empty_cache waiting for a busy device does not block another thread's allocation;
//  - with GMLAKE_STITCH_BORROW=on, a large request stitches another stream's pending frees after a
//    wait on the GPU instead of growing (else it grows);
//  - fork: 20 children forked while two threads allocate; each gets an error from cudaMalloc
//    (CUDA is unusable after fork) and none hangs (alarm).
#include <stdlib.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "gmlake.h"

static int passed, failed;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
#define CHECK(c, ...) do { pthread_mutex_lock(&mu); if (c) passed++; else { failed++; printf("FAIL %d: ", __LINE__); printf(__VA_ARGS__); printf("\n"); } pthread_mutex_unlock(&mu); } while (0)

__global__ void spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {}
}
static long long ms_cycles;  // clock64 cycles per millisecond

typedef int (*stats_fn)(int, gmlake_stats *);
static stats_fn get_stats;
static gmlake_stats st() { gmlake_stats s; memset(&s, 0, sizeof s); if (get_stats) get_stats(0, &s); return s; }
static double now() { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

// ---- per-thread default streams ----
static pthread_barrier_t bar;
static void *a_block;
static void *ptds_owner(void *) {
    void *p = NULL;
    CHECK(cudaMallocAsync(&p, 8 << 20, cudaStreamPerThread) == cudaSuccess, "A alloc");
    spin<<<1, 1, 0, cudaStreamPerThread>>>(300 * ms_cycles);
    CHECK(cudaFreeAsync(p, cudaStreamPerThread) == cudaSuccess, "A free");
    a_block = p;
    pthread_barrier_wait(&bar);
    pthread_barrier_wait(&bar);
    void *q = NULL;
    CHECK(cudaMallocAsync(&q, 8 << 20, cudaStreamPerThread) == cudaSuccess && q == p,
          "A's own default stream reuses its block at once (%p %p)", q, p);
    cudaFreeAsync(q, cudaStreamPerThread);
    cudaStreamSynchronize(cudaStreamPerThread);
    return NULL;
}

static void per_thread_default_streams() {
    pthread_t a;
    pthread_barrier_init(&bar, NULL, 2);
    pthread_create(&a, NULL, ptds_owner, NULL);
    pthread_barrier_wait(&bar);
    void *q = NULL;
    CHECK(cudaMallocAsync(&q, 8 << 20, cudaStreamPerThread) == cudaSuccess, "B alloc");
    CHECK(q != a_block, "B's default stream got A's block while A's kernel ran");
    cudaFreeAsync(q, cudaStreamPerThread);
    pthread_barrier_wait(&bar);
    pthread_join(a, NULL);
}

// ---- destroyed streams ----
__global__ void fill_value(uint32_t *p, size_t n, uint32_t v) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = v;
}
static bool all_value(void *p, size_t bytes, uint32_t v) {
    size_t n = bytes / 4;
    uint32_t *h = (uint32_t *)malloc(bytes);
    bool ok = h && cudaMemcpy(h, p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess;
    for (size_t i = 0; ok && i < n; i++) ok = h[i] == v;
    free(h);
    return ok;
}
// With stream_wait on (the default), a stream may take a block another stream freed while that
// stream's kernel runs, making its own work wait for it on the GPU: s1 spins 300 ms then writes 1
// into its block and frees it; s2 takes the block and writes 2 at once.  The block must read 2
// (s2's write ran after s1's).  With GMLAKE_STREAM_WAIT=off, s2 must get another block instead.
// destroy: s1 is destroyed after its free (its block comes from a retired stream).
static void busy_block_to_another_stream(bool destroy) {
    const char *e = getenv("GMLAKE_STREAM_WAIT");
    bool wait_on = !(e && (!strcmp(e, "off") || !strcmp(e, "0")));
    cudaStream_t s1, s2;
    void *p = NULL, *q = NULL;
    size_t n = 8 << 20;
    cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking);
    CHECK(cudaMallocAsync(&p, n, s1) == cudaSuccess, "alloc on s1");
    spin<<<1, 1, 0, s1>>>(300 * ms_cycles);
    fill_value<<<256, 256, 0, s1>>>((uint32_t *)p, n / 4, 1);
    cudaFreeAsync(p, s1);
    if (destroy)
        CHECK(cudaStreamDestroy(s1) == cudaSuccess, "destroy s1 while its kernel runs");
    cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking);
    if (destroy)
        printf("stream handle %s after destroy\n", s2 == s1 ? "reused" : "not reused");
    uint64_t waits = st().device_calls[GMLAKE_DC_STREAM_WAIT];
    CHECK(cudaMallocAsync(&q, n, s2) == cudaSuccess, "alloc on s2");
    if (wait_on) {
        CHECK(q == p && st().device_calls[GMLAKE_DC_STREAM_WAIT] == waits + 1,
              "s2 took s1's busy block through a wait on the GPU (%s)", destroy ? "s1 destroyed" : "s1 live");
        fill_value<<<256, 256, 0, s2>>>((uint32_t *)q, n / 4, 2);
        cudaDeviceSynchronize();
        CHECK(all_value(q, n, 2), "s2's write ran after s1's kernel (%s)", destroy ? "s1 destroyed" : "s1 live");
    } else {
        CHECK(q != p, "the other stream got s1's block while its kernel ran (%s)", destroy ? "destroyed" : "live");
    }
    cudaFreeAsync(q, s2);
    cudaStreamDestroy(s2);
    if (!destroy)
        cudaStreamDestroy(s1);
}

// A large request whose only free memory is another stream's pending frees (stitch.h, "borrow"):
// side takes three 8 MiB blocks out of one 24 MiB block it freed (so they lie side by side), keeps
// the middle one, spins 300 ms, writes 1 into the outer two and frees them; main asks 16 MiB at
// once.  With GMLAKE_STITCH_BORROW=on (and stream_wait on, the default), the pool stitches the two
// after one wait on the GPU instead of growing, and main's write of 2 lands after side's kernel;
// otherwise (stitch_borrow off by default, or GMLAKE_STREAM_WAIT=off) it grows.
static int by_addr(const void *a, const void *b) {
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return (x > y) - (x < y);
}
static void large_request_borrows_pending_frees() {
    const char *e = getenv("GMLAKE_STREAM_WAIT"), *bo = getenv("GMLAKE_STITCH_BORROW");
    bool wait_on = !(e && (!strcmp(e, "off") || !strcmp(e, "0"))) &&
                   bo && (!strcmp(bo, "on") || !strcmp(bo, "1"));
    int (*empty)(int) = (int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_empty_cache");
    CHECK(empty && empty(0) == 0, "empty the cache first");  // reserved: what is live
    cudaStream_t side, main_s;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    cudaStreamCreateWithFlags(&main_s, cudaStreamNonBlocking);
    size_t n = 8 << 20;
    void *z = NULL, *q = NULL;
    CHECK(cudaMallocAsync(&z, 3 * n, side) == cudaSuccess, "24 MiB on side");
    cudaFreeAsync(z, side);
    uintptr_t b[3];
    for (int i = 0; i < 3; i++) {
        void *v = NULL;
        CHECK(cudaMallocAsync(&v, n, side) == cudaSuccess, "8 MiB on side");
        b[i] = (uintptr_t)v;
    }
    qsort(b, 3, sizeof b[0], by_addr);
    CHECK(b[1] == b[0] + n && b[2] == b[1] + n, "three neighbours");
    spin<<<1, 1, 0, side>>>(300 * ms_cycles);
    fill_value<<<256, 256, 0, side>>>((uint32_t *)b[0], n / 4, 1);
    fill_value<<<256, 256, 0, side>>>((uint32_t *)b[2], n / 4, 1);
    cudaFreeAsync((void *)b[0], side);
    cudaFreeAsync((void *)b[2], side);
    gmlake_stats before = st();
    CHECK(cudaMallocAsync(&q, 2 * n, main_s) == cudaSuccess, "16 MiB on main");
    gmlake_stats after = st();
    unsigned long long waits = after.device_calls[GMLAKE_DC_STREAM_WAIT] - before.device_calls[GMLAKE_DC_STREAM_WAIT];
    if (wait_on) {
        CHECK(after.reserved_bytes == before.reserved_bytes && after.stitches == before.stitches + 1 && waits == 1,
              "stitched from side's pending frees after one wait, no growth (reserved %llu -> %llu, "
              "stitches +%llu, waits +%llu)", (unsigned long long)before.reserved_bytes,
              (unsigned long long)after.reserved_bytes,
              (unsigned long long)(after.stitches - before.stitches), waits);
        fill_value<<<256, 256, 0, main_s>>>((uint32_t *)q, 2 * n / 4, 2);
        cudaDeviceSynchronize();
        CHECK(all_value(q, 2 * n, 2), "main's write ran after side's kernel");
    } else {
        CHECK(after.reserved_bytes > before.reserved_bytes && waits == 0, "no borrow: grown instead");
    }
    cudaFreeAsync(q, main_s);
    cudaFreeAsync((void *)b[1], side);
    cudaDeviceSynchronize();
    cudaStreamDestroy(side);
    cudaStreamDestroy(main_s);
}

static void destroyed_streams() {
    busy_block_to_another_stream(false);
    busy_block_to_another_stream(true);
    cudaDeviceSynchronize();
    gmlake_stats a = st();
    double t0 = now();
    for (int i = 0; i < 10000; i++) {
        cudaStream_t s;
        void *x;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        if (cudaMallocAsync(&x, (1 << 20) + 4096 * (i % 7), s) != cudaSuccess) { CHECK(0, "alloc %d", i); break; }
        cudaFreeAsync(x, s);
        cudaStreamDestroy(s);
    }
    double dt = now() - t0;
    gmlake_stats b = st();
    long live = (long)(b.device_calls[GMLAKE_DC_EVENT_CREATE] - b.device_calls[GMLAKE_DC_EVENT_DESTROY]) -
                (long)(a.device_calls[GMLAKE_DC_EVENT_CREATE] - a.device_calls[GMLAKE_DC_EVENT_DESTROY]);
    printf("10000 short-lived streams: %.3f s, %lu events created, %ld more live\n", dt,
           (unsigned long)(b.device_calls[GMLAKE_DC_EVENT_CREATE] - a.device_calls[GMLAKE_DC_EVENT_CREATE]), live);
    /* A destroyed stream's bin keeps its event while it still holds a free block that no miss
     * has needed yet (a miss promotes one fitting block): a few, whatever the number of streams. */
    CHECK(live <= 16, "events of destroyed streams do not pile up (%ld more live)", live);
    CHECK(dt < 5.0, "10000 streams in %.3f s", dt);
    /* empty_cache waits for the device and promotes every block: every retired bin goes. */
    ((int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_empty_cache"))(0);
    gmlake_stats c = st();
    live = (long)(c.device_calls[GMLAKE_DC_EVENT_CREATE] - c.device_calls[GMLAKE_DC_EVENT_DESTROY]) -
           (long)(a.device_calls[GMLAKE_DC_EVENT_CREATE] - a.device_calls[GMLAKE_DC_EVENT_DESTROY]);
    printf("after empty_cache: %ld more live\n", live);
    CHECK(live <= 2, "events of destroyed streams are destroyed once their blocks moved (%ld more live)", live);
}

// ---- cudaFree waits ----
static void cudafree_waits() {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void *p;
    cudaMalloc(&p, 4 << 20);
    spin<<<1, 1, 0, s>>>(200 * ms_cycles);
    CHECK(cudaStreamQuery(s) == cudaErrorNotReady, "the kernel runs");
    CHECK(cudaFree(p) == cudaSuccess, "cudaFree");
    CHECK(cudaStreamQuery(s) == cudaSuccess, "cudaFree waited for the device");
    cudaStreamDestroy(s);
}

// ---- empty_cache does not block allocations while it waits ----
static void *do_empty(void *) {
    ((int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_empty_cache"))(0);
    return NULL;
}
static void empty_cache_no_lock() {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    void *p;
    cudaMallocAsync(&p, 4096, s);
    cudaFreeAsync(p, s);
    spin<<<1, 1, 0, s>>>(500 * ms_cycles);
    pthread_t t;
    pthread_create(&t, NULL, do_empty, NULL);
    usleep(50000);  // empty_cache is now waiting for the kernel
    double t0 = now();
    void *q;
    CHECK(cudaMallocAsync(&q, 4096, s) == cudaSuccess, "alloc while empty_cache waits");
    double dt = now() - t0;
    CHECK(dt < 0.1, "the allocation did not wait for empty_cache's device wait (%.3f s)", dt);
    cudaFreeAsync(q, s);
    pthread_join(t, NULL);
    cudaStreamDestroy(s);
}

// ---- fork ----
static int stop;
static void *churn(void *) {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    unsigned seed = 1;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
        void *p;
        if (cudaMallocAsync(&p, (rand_r(&seed) % (4 << 20)) + 512, s) == cudaSuccess) cudaFreeAsync(p, s);
    }
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    return NULL;
}
static void fork_children() {
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, churn, NULL);
    int ok = 0, hung = 0, served = 0;
    for (int i = 0; i < 20; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20);
            void *p = NULL;
            cudaError_t r = cudaMalloc(&p, 1 << 20);
            _exit(r == cudaSuccess ? 2 : 0);
        }
        int status = 0;
        waitpid(pid, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
        else if (WIFSIGNALED(status)) hung++;
        else served++;
        usleep(1000);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK(ok == 20, "children: %d got CUDA's error, %d hung, %d got memory", ok, hung, served);
    void *p;
    CHECK(cudaMalloc(&p, 1 << 20) == cudaSuccess && cudaFree(p) == cudaSuccess, "parent goes on");
}

int main() {
    get_stats = (stats_fn)dlsym(RTLD_DEFAULT, "gmlake_get_stats");
    CHECK(get_stats != NULL, "libgmlake is preloaded");
    int khz = 0;
    cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
    ms_cycles = khz > 0 ? khz : 1500000;
    void *warm;
    cudaMalloc(&warm, 1 << 20);
    cudaFree(warm);
    per_thread_default_streams();
    destroyed_streams();
    cudafree_waits();
    empty_cache_no_lock();
    large_request_borrows_pending_frees();
    fork_children();
    CHECK(((int (*)(int))dlsym(RTLD_DEFAULT, "gmlake_check"))(0) == 0, "pool consistent");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
