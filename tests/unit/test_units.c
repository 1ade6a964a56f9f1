/* test_units.c — value parsing shared by the configuration and the tools. */
#include <criterion/criterion.h>

#include "config/units.h"

Test(units, sizes)
{
    struct { const char *s; size_t v; } ok[] = {
        {"0", 0}, {"2097152", 2097152}, {"512KiB", 512 << 10}, {"512k", 512 << 10},
        {"64MB", 64 << 20}, {"2M", 2 << 20}, {"1G", 1 << 30}, {"1.5GiB", 3u << 29},
        {" 3 MiB ", 3 << 20}, {"1T", (size_t)1 << 40}, {"100B", 100},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t v = 7;
        cr_assert_eq(gml_parse_size(ok[i].s, &v), 0, "'%s'", ok[i].s);
        cr_assert_eq(v, ok[i].v, "'%s' -> %zu", ok[i].s, v);
    }
    const char *bad[] = {"", "abc", "-1", "1X", "1.5", "2 MiB extra", "1e30", "M", "1MiBB",
                         "0x10", "0X10", "0x1p4", "1e3", "0x2MiB", NULL};
    for (size_t i = 0; bad[i]; i++) {
        size_t v = 7;
        cr_assert_eq(gml_parse_size(bad[i], &v), -1, "'%s' accepted", bad[i]);
        cr_assert_eq(v, 7, "unchanged on error");
    }
    cr_assert_eq(gml_parse_size(NULL, &(size_t){0}), -1);
}

Test(units, booleans_numbers)
{
    bool b;
    const char *yes[] = {"on", "TRUE", "yes", "1"}, *no[] = {"off", "False", "no", "0"};
    for (int i = 0; i < 4; i++) {
        cr_assert(gml_parse_bool(yes[i], &b) == 0 && b);
        cr_assert(gml_parse_bool(no[i], &b) == 0 && !b);
    }
    cr_assert_eq(gml_parse_bool("maybe", &b), -1);
    cr_assert_eq(gml_parse_bool("", &b), -1);
    double d;
    cr_assert(gml_parse_double("1.25", &d) == 0 && d == 1.25);
    cr_assert_eq(gml_parse_double("1.2.3", &d), -1);
    cr_assert_eq(gml_parse_double("nan", &d), -1);
    long l;
    cr_assert(gml_parse_int("-3", &l) == 0 && l == -3);
    cr_assert_eq(gml_parse_int("3x", &l), -1);
    cr_assert_eq(gml_parse_int("99999999999999999999", &l), -1);
}
