/*
 * addrmap.h — a map from device addresses to records, built for the allocator's hot path: the
 * pool's live set (stitch/pool.c), one lookup or insertion per allocation and free.
 *
 * Open addressing with linear probing over one array of (key, value) pairs, at most half full:
 * a lookup reads one or two cache lines of the table, where a chained hash (uthash) also reads
 * the bucket and, on a delete or an insertion, the neighbours of the record in its
 * insertion-order list: lines that a framework's work between two allocations has evicted
 * (docs/ARCHITECTURE.md "Hot path").  Removal shifts the following entries back (no
 * tombstones), so the table never degrades.
 *
 * Contract: keys are non-zero (0 marks an empty slot); a key is in the map at most once.
 * gml_addrmap_reserve makes room for `more` insertions at load <= 1/2, growing the table (a
 * power of two, from 64 slots); false when the host is out of memory, the map unchanged and
 * still valid.  gml_addrmap_put needs that room (reserved beforehand; it never allocates).  Not
 * thread-safe: the caller's lock covers it.  Zero-initialised is empty.
 */
#ifndef GML_ADDRMAP_H
#define GML_ADDRMAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct gml_addrmap_slot {
    uintptr_t key; /* 0: empty */
    void *val;
} gml_addrmap_slot;

typedef struct gml_addrmap {
    gml_addrmap_slot *slot;
    size_t cap, n; /* cap: 0 or a power of two */
} gml_addrmap;

bool gml_addrmap_reserve(gml_addrmap *m, size_t more);
/* Inserts key (absent) with val; the room was reserved. */
void gml_addrmap_put(gml_addrmap *m, uintptr_t key, void *val);
/* The value of key, or NULL. */
void *gml_addrmap_get(const gml_addrmap *m, uintptr_t key);
/* Removes key; its value, or NULL where it was absent. */
void *gml_addrmap_del(gml_addrmap *m, uintptr_t key);
/* Releases the table; the map is empty again. */
void gml_addrmap_free(gml_addrmap *m);

/* Iteration: for (size_t i = 0; i < m->cap; i++) if (m->slot[i].key) ... (no change meanwhile). */

#endif /* GML_ADDRMAP_H */
