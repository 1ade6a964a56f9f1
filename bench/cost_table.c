/*
 * cost_table.c — prints the cost model (core/cost.h): per handle size, ms per GiB grown
 * (create + map + set_access) and released (unmap + release); then, for each SIZE given, the
 * seconds to grow it in 2 MiB handles (gmlake's chunks) and in 20 MiB handles (PyTorch's
 * expandable segments).
 *   cost_table [SIZE...]      SIZE as in gmlake.conf: 11732MiB, 6GiB, ...
 */
#include <stdio.h>

#include "config/units.h"
#include "core/cost.h"

#define MIB ((size_t)1 << 20)

int main(int argc, char **argv)
{
    static const size_t handle_mib[] = {2, 8, 20, 32, 64, 128, 512, 1024};
    printf("| handle | grow ms/GiB | release ms/GiB |\n|---|---|---|\n");
    for (size_t i = 0; i < sizeof handle_mib / sizeof handle_mib[0]; i++)
        printf("| %zu MiB | %.3f | %.3f |\n", handle_mib[i],
               1e3 * gml_cost_grow((size_t)1 << 30, handle_mib[i] * MIB),
               1e3 * gml_cost_shrink((size_t)1 << 30, handle_mib[i] * MIB));
    int status = 0;
    for (int i = 1; i < argc; i++) {
        size_t bytes;
        if (gml_parse_size(argv[i], &bytes) || bytes == 0) {
            fprintf(stderr, "cost_table: '%s' is not a size\n", argv[i]);
            status = 2;
            continue;
        }
        printf("grow %s: %.4f s in 2 MiB handles, %.4f s in 20 MiB handles\n", argv[i],
               gml_cost_grow(bytes, 2 * MIB), gml_cost_grow(bytes, 20 * MIB));
    }
    return status;
}
