/* stress_main.c — the stress workload as a plain program (for ThreadSanitizer): 8 threads on a
 * backed sim pool; exit 0 when no error was seen and the pool is consistent and empty after. */
#include <stdio.h>

#include "stress_run.h"

int main(void)
{
    const char *err = NULL;
    gml_pool *p = gml_sim_pool_create((size_t)512 << 20, true, NULL, &err);
    if (!p) {
        fprintf(stderr, "stress: %s\n", err);
        return 1;
    }
    int errors = gml_stress_run(p, 8, 5000);
    char why[256] = "";
    int rc = gml_pool_check(p, why, sizeof why);
    gmlake_stats st;
    gml_pool_stats(p, &st);
    gml_sim_pool_destroy(p);
    if (errors || rc || st.active_bytes) {
        fprintf(stderr, "stress: %d errors, check: %s, %lu bytes still active\n", errors, why,
                (unsigned long)st.active_bytes);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    printf("stress: %lu allocations on 8 threads\n1 passed, 0 failed\n", (unsigned long)st.allocations);
    return 0;
}
