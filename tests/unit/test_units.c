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

/* Integers are exact to 2^64-1, with or without a unit (they once went through a double:
 * 9007199254740993 became ...992 and 2^64-1 itself was "too large"); a fraction with a unit is
 * exact too, or refused when it is not a whole number of bytes. */
Test(units, sizes_are_exact_to_2_to_the_64)
{
    struct { const char *s; size_t v; } ok[] = {
        {"9007199254740993", 9007199254740993ull},
        {"18446744073709551615", 18446744073709551615ull},
        {"18446744073709551615B", 18446744073709551615ull},
        {"16777215TiB", 16777215ull << 40},
        {"17179869183G", 17179869183ull << 30},
        {"8796093022207.5KiB", (8796093022207ull << 10) + 512},
        {"0.5K", 512}, {".5K", 512}, {"1.", 1}, {"1.0", 1}, {"1.50000000000000000000000000GiB", 3ull << 29},
        {"0.0009765625M", 1024}, {"000000000000000000000000000042", 42},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        size_t v = 7;
        const char *why = NULL;
        cr_assert_eq(gml_parse_size_why(ok[i].s, &v, &why), 0, "'%s': %s", ok[i].s, why);
        cr_assert_eq(v, ok[i].v, "'%s' -> %zu", ok[i].s, v);
    }
    struct { const char *s, *why; } bad[] = {
        {"18446744073709551616", "too large (overflow: at most 2^64-1 bytes)"},
        {"16777216TiB", "too large (overflow: at most 2^64-1 bytes)"},
        {"99999999999999999999999999", "too large (overflow: at most 2^64-1 bytes)"},
        {"16777215.9999999999TiB", "not a whole number of bytes"},
        {"0.1K", "not a whole number of bytes"}, {"1.5", "not a whole number of bytes"},
        {"1.0000000000000000000000001K", "not a whole number of bytes"},
        {".", "not a decimal number"}, {".K", "not a decimal number"},
        {"1.5.3", "not a size: unknown unit (K, M, G, T with an optional B or iB)"},
        {"0x10", "not a decimal number"}, {"0X1p4", "not a decimal number"},
        {"1e6", "not a decimal number"}, {"1E+3", "not a decimal number"},
        {"2.5e-1G", "not a decimal number"},
        /* a unit that starts with an E or X is a unit gmlake does not know, not hex or an
         * exponent (16EiB was "not a decimal number") */
        {"16EiB", "not a size: unknown unit (K, M, G, T with an optional B or iB)"},
        {"1EB", "not a size: unknown unit (K, M, G, T with an optional B or iB)"},
        {"4XB", "not a size: unknown unit (K, M, G, T with an optional B or iB)"},
        {"2 E", "not a size: unknown unit (K, M, G, T with an optional B or iB)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        size_t v = 7;
        const char *why = NULL;
        cr_assert_eq(gml_parse_size_why(bad[i].s, &v, &why), -1, "'%s' accepted: %zu", bad[i].s, v);
        cr_assert_str_eq(why, bad[i].why, "'%s'", bad[i].s);
        cr_assert_eq(v, 7, "unchanged on error");
    }
}
