/* test_addrmap.c — core/addrmap.c, the pool's live map: lookups against a plain reference under
 * random insertions and removals (the table grown many times, probe runs wrapping around its
 * end, removals in the middle of runs), keys that collide on their home slot, absent keys, and
 * the room contract. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/addrmap.h"

/* Every key of ref[0..n) (val i + 1, 0 = absent) is found with its value, and the count agrees. */
static void agrees(const gml_addrmap *m, const uintptr_t *keys, const size_t *ref, size_t n)
{
    size_t in = 0;
    for (size_t i = 0; i < n; i++) {
        void *v = gml_addrmap_get(m, keys[i]);
        if (ref[i]) {
            cr_assert_eq((uintptr_t)v, (uintptr_t)ref[i], "key %#lx: value", (unsigned long)keys[i]);
            in++;
        } else {
            cr_assert_null(v, "key %#lx was removed", (unsigned long)keys[i]);
        }
    }
    cr_assert_eq(m->n, in);
    cr_assert_leq(2 * m->n, m->cap, "at most half full");
}

Test(addrmap, random_puts_and_dels_match_a_reference)
{
    enum { N = 20000 };
    static uintptr_t keys[N];
    static size_t ref[N];
    uint64_t r = 88172645463325252ull;
    for (size_t i = 0; i < N; i++) /* 512-aligned device-like addresses, distinct */
        keys[i] = 0x7f0000000000ull + (uintptr_t)i * 512 * 7;
    gml_addrmap m = {0};
    for (int step = 0; step < 200000; step++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        size_t i = r % N;
        if (ref[i]) {
            cr_assert_eq((uintptr_t)gml_addrmap_del(&m, keys[i]), (uintptr_t)ref[i]);
            ref[i] = 0;
        } else {
            cr_assert(gml_addrmap_reserve(&m, 1));
            ref[i] = (size_t)step + 1;
            gml_addrmap_put(&m, keys[i], (void *)(uintptr_t)ref[i]);
        }
        if (step % 20000 == 0)
            agrees(&m, keys, ref, N);
    }
    agrees(&m, keys, ref, N);
    gml_addrmap_free(&m);
    cr_assert_eq(m.n, 0);
    cr_assert_null(gml_addrmap_get(&m, keys[0]), "a freed map is empty");
}

/* Keys that all want one home slot form one probe run; removing any of them keeps the others
 * reachable (the backward shift), including a run that wraps past the table's end. */
Test(addrmap, removals_inside_a_run_keep_the_rest_reachable)
{
    gml_addrmap m = {0};
    cr_assert(gml_addrmap_reserve(&m, 1));
    size_t cap = m.cap;
    /* find 12 keys with the same home slot, the last slot of the table, by search */
    uintptr_t same[12];
    size_t found = 0;
    for (uintptr_t k = 512; found < 12; k += 512) {
        uint64_t h = ((uint64_t)k * 0x9E3779B97F4A7C15ull) >> (64 - __builtin_ctzll(cap));
        if (h == cap - 1)
            same[found++] = k;
    }
    for (int order = 0; order < 12; order++) {
        for (size_t i = 0; i < 12; i++) {
            cr_assert(gml_addrmap_reserve(&m, 1));
            gml_addrmap_put(&m, same[i], (void *)(same[i] + 1));
        }
        cr_assert_eq(m.cap, cap, "12 keys fit the first table");
        cr_assert_eq((uintptr_t)gml_addrmap_del(&m, same[order]), same[order] + 1);
        for (size_t i = 0; i < 12; i++)
            if (i != (size_t)order)
                cr_assert_eq((uintptr_t)gml_addrmap_get(&m, same[i]), same[i] + 1,
                             "removing key %d of the run lost key %zu", order, i);
        cr_assert_null(gml_addrmap_get(&m, same[order]));
        cr_assert_null(gml_addrmap_del(&m, same[order]), "a second removal finds nothing");
        for (size_t i = 0; i < 12; i++)
            if (i != (size_t)order)
                gml_addrmap_del(&m, same[i]);
        cr_assert_eq(m.n, 0);
    }
    gml_addrmap_free(&m);
}

Test(addrmap, reserve_keeps_room_for_several_and_refuses_the_impossible)
{
    gml_addrmap m = {0};
    cr_assert_null(gml_addrmap_get(&m, 0x1000), "empty, no table");
    cr_assert_null(gml_addrmap_del(&m, 0x1000));
    cr_assert(gml_addrmap_reserve(&m, 100));
    cr_assert_geq(m.cap, 200, "room for 100 at half load");
    size_t cap = m.cap;
    for (uintptr_t k = 1; k <= 100; k++)
        gml_addrmap_put(&m, k * 4096, (void *)k);
    cr_assert_eq(m.cap, cap, "put never grows the table");
    cr_assert_not(gml_addrmap_reserve(&m, SIZE_MAX / 2), "more than any table can hold");
    cr_assert_eq(m.n, 100, "a refused reserve leaves the map as it was");
    cr_assert_eq((uintptr_t)gml_addrmap_get(&m, 50 * 4096), 50);
    gml_addrmap_free(&m);
}
