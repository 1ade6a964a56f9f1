/* bench_common.h — what the CPU benchmarks share: a monotonic clock, sorting samples, and the
 * mixed request sizes (70% small 512 B .. 64 KiB, 30% large 1 MiB .. 1 MiB + large_span). */
#ifndef GML_BENCH_COMMON_H
#define GML_BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v[0..n) in place and returns its median. */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The same pseudo-random sizes on every run (xorshift64). */
static inline void bench_sizes(size_t *sizes, int n, size_t large_span)
{
    uint64_t r = 88172645463325252ull;
    for (int i = 0; i < n; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        sizes[i] = (r % 10 < 7) ? 512 + (r >> 16) % (64 << 10) : ((size_t)1 << 20) + (r >> 16) % large_span;
    }
}

#endif
