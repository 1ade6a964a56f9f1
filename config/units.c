/* units.c — value parsing (contract in units.h). */
#include "units.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

static bool rest_blank(const char *s) { return *skip_space(s) == 0; }

/* Whether [s, end) is written with only the characters in `allowed` (strtod also reads hex,
 * "0x10", and exponents; gmlake's values are plain decimal numbers). */
static bool only(const char *s, const char *end, const char *allowed)
{
    for (; s < end; s++)
        if (!strchr(allowed, *s))
            return false;
    return true;
}

/* Sets *why (when asked for) and fails. */
static int fail(const char **why, const char *reason)
{
    if (why)
        *why = reason;
    return -1;
}

int gml_parse_size_why(const char *s, size_t *out, const char **why)
{
    if (!s)
        return fail(why, "not a number");
    s = skip_space(s);
    if (*s == '-' && (isdigit((unsigned char)s[1]) || s[1] == '.'))
        return fail(why, "negative");
    if (!isdigit((unsigned char)*s) && *s != '.')
        return fail(why, *s ? "not a number" : "empty");
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || !only(s, end, "0123456789."))
        return fail(why, "not a decimal number");
    if (errno == ERANGE || !isfinite(v))
        return fail(why, "too large (overflow)");
    const char *u = skip_space(end);
    double mult = 1;
    if (*u) {
        static const char units[] = "KMGT";
        char c = (char)toupper((unsigned char)*u);
        const char *hit = c ? strchr(units, c) : NULL;
        if (c == 'B' && rest_blank(u + 1)) {
            u++;
        } else if (hit) {
            for (const char *k = units; k <= hit; k++)
                mult *= 1024;
            u++;
            if (toupper((unsigned char)u[0]) == 'I' && toupper((unsigned char)u[1]) == 'B')
                u += 2;
            else if (toupper((unsigned char)u[0]) == 'B')
                u++;
        } else {
            return fail(why, "not a size: unknown unit (K, M, G, T with an optional B or iB)");
        }
        if (!rest_blank(u))
            return fail(why, "not a size: unknown unit (K, M, G, T with an optional B or iB)");
    }
    double bytes = v * mult;
    if (bytes >= 18446744073709551616.0)
        return fail(why, "too large (overflow: at most 2^64-1 bytes)");
    if (bytes != floor(bytes))
        return fail(why, "not a whole number of bytes");
    *out = (size_t)bytes;
    return 0;
}

int gml_parse_size(const char *s, size_t *out) { return gml_parse_size_why(s, out, NULL); }

int gml_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};
    if (!s)
        return -1;
    s = skip_space(s);
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    for (int i = 0; i < 4; i++) {
        if (strlen(yes[i]) == n && strncasecmp(s, yes[i], n) == 0) {
            *out = true;
            return 0;
        }
        if (strlen(no[i]) == n && strncasecmp(s, no[i], n) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

int gml_parse_double_why(const char *s, double *out, const char **why)
{
    if (!s || !*skip_space(s))
        return fail(why, "empty");
    char *end;
    errno = 0;
    s = skip_space(s);
    double v = strtod(s, &end);
    if (end == s || !rest_blank(end) || !only(s, end, "0123456789.eE+-"))
        return fail(why, "not a number");
    if (!isfinite(v) || (errno == ERANGE && fabs(v) > 1))
        return fail(why, "too large (overflow)");
    *out = v;
    return 0;
}

int gml_parse_double(const char *s, double *out) { return gml_parse_double_why(s, out, NULL); }

int gml_parse_int_why(const char *s, long *out, const char **why)
{
    if (!s || !*skip_space(s))
        return fail(why, "empty");
    char *end;
    errno = 0;
    s = skip_space(s);
    long v = strtol(s, &end, 10);
    if (end == s || !rest_blank(end) || !only(s, end, "0123456789+-"))
        return fail(why, "not a whole number");
    if (errno == ERANGE)
        return fail(why, v < 0 ? "negative and too large (overflow)" : "too large (overflow)");
    *out = v;
    return 0;
}

int gml_parse_int(const char *s, long *out) { return gml_parse_int_why(s, out, NULL); }
