/* fake_internal.h — what the files of the fake libcuda.so.1 (fake_cuda.c, fake_streams.c) share;
 * tests include fake_cuda.h only. */
#ifndef GML_FAKE_INTERNAL_H
#define GML_FAKE_INTERNAL_H

#include "fake_cuda.h"

#define EXPORT __attribute__((visibility("default")))
#define COUNT(field) __atomic_fetch_add(&fake_cuda_counts()->field, 1, __ATOMIC_RELAXED)
/* Every driver entry point: after fork, CUDA fails every call of the child. */
#define GUARD()                                                                                   \
    do {                                                                                          \
        if (fake_forked())                                                                        \
            return CUDA_ERROR_NOT_INITIALIZED;                                                    \
    } while (0)

/* A routing call (device, capture status, default pool): counted in `reentered` when it is made
 * from inside a fake runtime entry point (fake_cuda.c). */
void fake_routing_call(void);

#endif
