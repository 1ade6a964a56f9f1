/* helpers.h — a pool on a sim device for the unit tests, and the checker as an assertion. */
#ifndef GML_TEST_HELPERS_H
#define GML_TEST_HELPERS_H

#include <criterion/criterion.h>

#include "stitch/pool.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1 << 10)

typedef struct fixture {
    gml_device *dev;
    gml_pool *pool;
} fixture;

static inline fixture fx_make(size_t capacity, bool backed, void (*tweak)(gml_pool_settings *))
{
    fixture f;
    gml_sim_config sc = {.capacity = capacity, .backed = backed};
    f.dev = gml_sim_create(&sc);
    cr_assert_not_null(f.dev, "sim device");
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    s.arena_bytes = capacity * 4;
    if (tweak)
        tweak(&s);
    const char *err = NULL;
    f.pool = gml_pool_create(f.dev, &s, &err);
    cr_assert_not_null(f.pool, "pool: %s", err ? err : "?");
    return f;
}

static inline void fx_free(fixture *f)
{
    gml_pool_destroy(f->pool);
    gml_device_destroy(f->dev);
}

#define CHECK_POOL(p)                                                                             \
    do {                                                                                          \
        char why_[256];                                                                           \
        int rc_ = gml_pool_check((p), why_, sizeof why_);                                         \
        cr_assert_eq(rc_, GMLAKE_OK, "pool check: %s", why_);                                     \
    } while (0)

static inline uintptr_t must_alloc(gml_pool *p, size_t size, gml_stream s)
{
    uintptr_t ptr = 0;
    int rc = gml_pool_alloc(p, size, s, &ptr);
    cr_assert_eq(rc, GMLAKE_OK, "alloc %zu: %s", size, gmlake_strerror(rc));
    cr_assert_eq(ptr % 512, 0, "alignment");
    CHECK_POOL(p);
    return ptr;
}

static inline void must_free(gml_pool *p, uintptr_t ptr, gml_stream s)
{
    int rc = gml_pool_free(p, ptr, s);
    cr_assert_eq(rc, GMLAKE_OK, "free %#lx: %s", (unsigned long)ptr, gmlake_strerror(rc));
    CHECK_POOL(p);
}

static inline gmlake_stats stats_of(gml_pool *p)
{
    gmlake_stats s;
    gml_pool_stats(p, &s);
    return s;
}

static inline uint64_t calls_of(gml_pool *p)
{
    gmlake_stats s = stats_of(p);
    uint64_t n = 0;
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        n += s.device_calls[i];
    return n;
}

#endif
