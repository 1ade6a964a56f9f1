/* cost.c — the estimated driver time of each device call (contract and sources in cost.h). */
#include "cost.h"

#include "gmlake.h"

#define MIB ((size_t)1 << 20)
#define NPOINTS 5

/* Handle sizes of the measured table, MiB. */
static const double point_mib[NPOINTS] = {2, 8, 32, 128, 512};

/* Issue 10's table (one H200, driver 580, CUDA 13): milliseconds per GiB of handles of each size.
 * A row per kind charged by handle size; the other kinds have no row. */
static const struct {
    int kind;
    double ms_per_gib[NPOINTS];
} measured[] = {
    {GMLAKE_DC_CHUNK_CREATE, {4.30, 1.03, 0.29, 0.09, 0.03}},
    {GMLAKE_DC_MAP, {0.27, 0.06, 0.02, 0.01, 0.00}},
    {GMLAKE_DC_SET_ACCESS, {12.60, 2.94, 0.74, 0.22, 0.09}},
    {GMLAKE_DC_UNMAP, {8.44, 1.90, 0.50, 0.13, 0.05}},
    {GMLAKE_DC_CHUNK_RELEASE, {5.39, 1.43, 0.64, 0.35, 0.30}},
};

/* Microseconds per call of the kinds that do not depend on a handle, measured by
 * bench/gpu/growth.c on one H200 (driver 580, CUDA 13; mean of 1000 calls, 2026-11-21):
 * cuMemAddressReserve 1.96 (1 GiB; 1.77 for 256 GiB), cuMemAddressFree 1.50, cuEventCreate 0.22,
 * cuEventDestroy 0.10, cuEventRecord 0.34, cuEventQuery 1.29, cuEventSynchronize 1.31 and
 * cuCtxSynchronize 1.47 on an idle device (waiting for kernels is not the allocator's cost). */
static const double fixed_us[GMLAKE_DC_COUNT] = {
    [GMLAKE_DC_VA_RESERVE] = 1.96,  [GMLAKE_DC_VA_FREE] = 1.50,     [GMLAKE_DC_EVENT_CREATE] = 0.22,
    [GMLAKE_DC_EVENT_DESTROY] = 0.10, [GMLAKE_DC_EVENT_RECORD] = 0.34, [GMLAKE_DC_EVENT_QUERY] = 1.29,
    [GMLAKE_DC_EVENT_SYNC] = 1.31,  [GMLAKE_DC_SYNCHRONIZE] = 1.47,
    [GMLAKE_DC_STREAM_WAIT] = 0.34, /* cuStreamWaitEvent: not measured; an event record's */
};

static const double *row_of(int kind)
{
    for (size_t i = 0; i < sizeof measured / sizeof measured[0]; i++)
        if (measured[i].kind == kind)
            return measured[i].ms_per_gib;
    return NULL;
}

/* Seconds per handle at table point i. */
static double at_point(const double *row, int i)
{
    return row[i] * 1e-3 * point_mib[i] / 1024.0;
}

bool gml_cost_by_handle(int kind) { return row_of(kind) != NULL; }

double gml_cost_call(int kind, size_t handle_bytes)
{
    if (kind < 0 || kind >= GMLAKE_DC_COUNT)
        return 0;
    const double *row = row_of(kind);
    if (!row)
        return fixed_us[kind] * 1e-6;
    double mib = (double)handle_bytes / (double)MIB;
    if (mib <= point_mib[0])
        return at_point(row, 0);
    int i = 1; /* the segment [i-1, i] holding mib, or the last one beyond the table */
    while (i < NPOINTS - 1 && mib > point_mib[i])
        i++;
    double y0 = at_point(row, i - 1), y1 = at_point(row, i);
    double y = y0 + (y1 - y0) * (mib - point_mib[i - 1]) / (point_mib[i] - point_mib[i - 1]);
    if (mib > point_mib[NPOINTS - 1] && y < y1)
        y = y1;
    return y < 0 ? 0 : y;
}

static double handles(size_t bytes, size_t handle_bytes)
{
    return handle_bytes ? (double)((bytes + handle_bytes - 1) / handle_bytes) : 0;
}

double gml_cost_grow(size_t bytes, size_t handle_bytes)
{
    return handles(bytes, handle_bytes) * (gml_cost_call(GMLAKE_DC_CHUNK_CREATE, handle_bytes) +
                                           gml_cost_call(GMLAKE_DC_MAP, handle_bytes) +
                                           gml_cost_call(GMLAKE_DC_SET_ACCESS, handle_bytes));
}

double gml_cost_shrink(size_t bytes, size_t handle_bytes)
{
    return handles(bytes, handle_bytes) * (gml_cost_call(GMLAKE_DC_UNMAP, handle_bytes) +
                                           gml_cost_call(GMLAKE_DC_CHUNK_RELEASE, handle_bytes));
}
