/*
 * addrmap.c — the open-addressing address map of addrmap.h.
 */
#include <stdlib.h>

#include "addrmap.h"

enum { MIN_CAP = 64 };

/* The home slot of key in a table of cap slots: Fibonacci hashing keeps the product's top
 * bits, which depend on every bit of the key (addresses share their low, aligned bits). */
static inline size_t home(uintptr_t key, size_t cap)
{
    return (size_t)(((uint64_t)key * 0x9E3779B97F4A7C15ull) >> (64 - __builtin_ctzll(cap)));
}

static inline size_t find(const gml_addrmap *m, uintptr_t key)
{
    size_t mask = m->cap - 1, i = home(key, m->cap);
    while (m->slot[i].key && m->slot[i].key != key)
        i = (i + 1) & mask;
    return i;
}

bool gml_addrmap_reserve(gml_addrmap *m, size_t more)
{
    if (more > SIZE_MAX / 2 - m->n)
        return false;
    size_t want = m->n + more;
    if (want <= m->cap / 2)
        return true;
    size_t cap = m->cap ? m->cap : MIN_CAP;
    while (want > cap / 2) {
        if (cap > SIZE_MAX / 4 / sizeof(gml_addrmap_slot))
            return false;
        cap *= 2;
    }
    gml_addrmap_slot *s = calloc(cap, sizeof *s);
    if (!s)
        return false;
    gml_addrmap old = *m;
    m->slot = s;
    m->cap = cap;
    for (size_t i = 0; i < old.cap; i++)
        if (old.slot[i].key)
            m->slot[find(m, old.slot[i].key)] = old.slot[i];
    free(old.slot);
    return true;
}

void gml_addrmap_put(gml_addrmap *m, uintptr_t key, void *val)
{
    size_t i = find(m, key);
    m->slot[i].key = key;
    m->slot[i].val = val;
    m->n++;
}

void *gml_addrmap_get(const gml_addrmap *m, uintptr_t key)
{
    if (!m->n)
        return NULL;
    size_t i = find(m, key);
    return m->slot[i].key ? m->slot[i].val : NULL;
}

void *gml_addrmap_del(gml_addrmap *m, uintptr_t key)
{
    if (!m->n)
        return NULL;
    size_t mask = m->cap - 1, i = find(m, key);
    if (!m->slot[i].key)
        return NULL;
    void *val = m->slot[i].val;
    /* Backward shift: each following entry of the probe run moves into the hole unless its home
     * lies cyclically in (hole, its slot], so every key stays reachable from its home. */
    for (size_t j = (i + 1) & mask; m->slot[j].key; j = (j + 1) & mask) {
        size_t h = home(m->slot[j].key, m->cap);
        if (((j - h) & mask) >= ((j - i) & mask)) {
            m->slot[i] = m->slot[j];
            i = j;
        }
    }
    m->slot[i].key = 0;
    m->slot[i].val = NULL;
    m->n--;
    return val;
}

void gml_addrmap_free(gml_addrmap *m)
{
    free(m->slot);
    *m = (gml_addrmap){0};
}
