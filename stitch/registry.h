/*
 * registry.h — tier 3 (with pool.h): the process's pools, one per CUDA device ordinal, behind the
 * public gmlake_* API.
 * A pool is installed once (by the interposer on first use of a device, or by a test) and stays
 * until gml_registry_take removes it.  Lookups are lock-free reads of an atomic pointer.
 */
#ifndef GML_REGISTRY_H
#define GML_REGISTRY_H

#include "pool.h"

#define GML_MAX_DEVICES 64

gml_pool *gml_registry_get(int device);
/* GMLAKE_OK, GMLAKE_ERR_INVALID for a bad ordinal, GMLAKE_ERR_BUSY if one is installed. */
int gml_registry_install(int device, gml_pool *p);
/* Removes (and returns) the pool of `device`; the caller destroys it. */
gml_pool *gml_registry_take(int device);

#endif /* GML_REGISTRY_H */
