/* stress_main.c — the stress workload as a plain program (for ThreadSanitizer): 8 threads on a
 * backed sim pool; exit 0 when no error was seen and the pool is consistent and empty after. */
#include <stdio.h>

#include "stress_run.h"

int main(void)
{
    gml_sim_config sc = {.capacity = (size_t)512 << 20, .backed = true};
    gml_device *dev = gml_sim_create(&sc);
    gml_pool_settings s;
    gml_pool_settings_default(&s);
    const char *err = "no device";
    gml_pool *p = dev ? gml_pool_create(dev, &s, &err) : NULL;
    if (!p) {
        fprintf(stderr, "stress: %s\n", err);
        return 1;
    }
    int errors = gml_stress_run(p, 8, 5000);
    char why[256] = "";
    int rc = gml_pool_check(p, why, sizeof why);
    gmlake_stats st;
    gml_pool_stats(p, &st);
    gml_pool_destroy(p);
    gml_device_destroy(dev);
    if (errors || rc || st.active_bytes) {
        fprintf(stderr, "stress: %d errors, check: %s, %lu bytes still active\n", errors, why,
                (unsigned long)st.active_bytes);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    printf("stress: %lu allocations on 8 threads\n1 passed, 0 failed\n", (unsigned long)st.allocations);
    return 0;
}
