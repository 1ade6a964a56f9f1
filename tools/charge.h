/*
 * charge.h — what a policy's device calls are called and what each costs: the one place that
 * counts a call and charges its estimated driver time (core/cost.h).  Used by the models of
 * PyTorch's allocators (tools/models/: gml_policy_call), which sit under policy.c, and by
 * replay.c (gml_call_name, the names it prints); policy.c includes it but calls neither (gmlake's
 * pool policies read their calls and driver time from the pool's sim device).  A file of its own
 * under its users, so that the models never call policy.c back.
 */
#ifndef GML_CHARGE_H
#define GML_CHARGE_H

#include <stdint.h>

#include "policy.h"

/* The name of a device-call kind (enum gmlake_devcall, then enum gml_call). */
const char *gml_call_name(int kind);

/* Counts one device call of `kind` over `handles` physical handles of handle_bytes each (1 and
 * the range's size for a call on a virtual range, 0 handles for a synchronization), and charges
 * its estimated driver time: gmlake's kinds as core/cost.h prices them (per handle for the kinds
 * it charges by handle size); cudaMalloc and cudaFree of handle_bytes as the VMM calls of one
 * handle of that size (reserve + create + map + set_access; unmap + release + address free);
 * a stream synchronization as a synchronize call. */
void gml_policy_call(gml_policy *p, int kind, uint64_t handle_bytes, uint64_t handles);

#endif /* GML_CHARGE_H */
