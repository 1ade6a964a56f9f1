/*
 * cost.h — a cost model the CPU can see: the estimated driver time of each device call.
 *
 * Contract
 *  - gml_cost_call(kind, handle_bytes) is the estimated wall time, in seconds, that one call of
 *    `kind` (enum gmlake_devcall) spends in the CUDA driver.  Kinds whose cost depends on the
 *    physical handle (gml_cost_by_handle: chunk_create, chunk_release, map, unmap, set_access)
 *    are charged per handle: cuMemSetAccess and cuMemUnmap over a range cost the sum over the
 *    handles mapped in it, however many calls the range is split into.  Other kinds cost a fixed
 *    amount per call and ignore handle_bytes.  An unknown kind costs 0.  Never negative.
 *  - gml_cost_grow / gml_cost_shrink: seconds to grow (create + map + set_access) or release
 *    (unmap + release) `bytes` of physical memory in handles of `handle_bytes` (bytes rounded up
 *    to whole handles), the figures the growth micro-benchmark measures (bench/gpu/growth.c).
 *
 * Where the figures come from (core/cost.c has the table)
 *  - The handle-size kinds: issue 10's table, measured on one H200 (driver 580, CUDA 13): ms per
 *    GiB for handles of 2, 8, 32, 128 and 512 MiB.  A per-handle cost is that figure divided by
 *    the handles in a GiB.  Between the measured sizes the per-handle cost is interpolated
 *    linearly in the handle size, so the model reproduces the table exactly at its points; below
 *    2 MiB a handle costs what a 2 MiB one does; above 512 MiB the last segment is extended
 *    (never below the 512 MiB value).  A single line a + b * size per kind was the alternative:
 *    it misses cuMemSetAccess on 2 MiB handles by 0.89 ms per GiB (7%) and cuMemUnmap by 0.70 ms
 *    (8%), the case that matters most, so the table itself is used.
 *  - cuMemMap of 512 MiB handles reads 0.00 ms per GiB in the table (two decimals): the model
 *    charges 0 there, and 0.01 ms per GiB at 128 MiB carries the same rounding.
 *  - Address reserve/free, events and synchronize: a fixed cost per call, measured by
 *    bench/gpu/growth.c on the same H200 (see cost.c).  event_sync and synchronize are charged
 *    their call cost only: the time spent waiting for kernels is not the allocator's.
 */
#ifndef GML_COST_H
#define GML_COST_H

#include <stdbool.h>
#include <stddef.h>

/* Seconds one call of `kind` costs on a handle of handle_bytes (see the contract). */
double gml_cost_call(int kind, size_t handle_bytes);
/* Whether `kind` is charged per handle by its size. */
bool gml_cost_by_handle(int kind);
/* Seconds to grow / release `bytes` in handles of `handle_bytes` (one set_access per handle). */
double gml_cost_grow(size_t bytes, size_t handle_bytes);
double gml_cost_shrink(size_t bytes, size_t handle_bytes);

#endif /* GML_COST_H */
