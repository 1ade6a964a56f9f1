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

#define SIZE_UNITS "not a size: unknown unit (K, M, G, T with an optional B or iB)"
#define SIZE_OVERFLOW "too large (overflow: at most 2^64-1 bytes)"

/* The unit after a size's number: *shift set to 0 (none, B) or 10/20/30/40 (K/M/G/T with an
 * optional B or iB); NULL when the rest is not one. */
static const char *size_unit(const char *u, unsigned *shift)
{
    static const char units[] = "KMGT";
    u = skip_space(u);
    *shift = 0;
    if (!*u)
        return u;
    char c = (char)toupper((unsigned char)*u);
    const char *hit = strchr(units, c);
    if (c == 'B') {
        u++;
    } else if (c && hit) {
        *shift = 10 * (unsigned)(hit - units + 1);
        u++;
        if (toupper((unsigned char)u[0]) == 'I' && toupper((unsigned char)u[1]) == 'B')
            u += 2;
        else if (toupper((unsigned char)u[0]) == 'B')
            u++;
    } else {
        return NULL;
    }
    return rest_blank(u) ? u : NULL;
}

/* Integer arithmetic throughout, so that every size up to 2^64-1 is exact (a double rounds
 * above 2^53).  The fraction's bytes are fraction x 2^shift: whole only if, once its trailing
 * zeros are dropped, it has at most `shift` digits (its last digit must then be a 5, odd, so
 * each of its d digits needs one factor of two); its digits are doubled `shift` times, what
 * carries out of them being the bytes and what stays the remainder, which must be zero. */
int gml_parse_size_why(const char *s, size_t *out, const char **why)
{
    if (!s)
        return fail(why, "not a number");
    s = skip_space(s);
    if (*s == '-' && (isdigit((unsigned char)s[1]) || s[1] == '.'))
        return fail(why, "negative");
    if (!isdigit((unsigned char)*s) && *s != '.')
        return fail(why, *s ? "not a number" : "empty");
    const char *p = s;
    uint64_t whole = 0;
    bool overflow = false;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (whole > (UINT64_MAX - d) / 10)
            overflow = true;
        else
            whole = whole * 10 + d;
    }
    const char *frac = p, *frac_end = p;
    if (*p == '.') {
        frac = ++p;
        while (isdigit((unsigned char)*p))
            p++;
        frac_end = p;
    }
    if (!isdigit((unsigned char)*s) && frac_end == frac)
        return fail(why, "not a decimal number"); /* "." alone */
    /* hex (0x10) or an exponent (1e6, 1e+3); an E or X that starts no such form starts a unit
     * (16EiB: an unknown one, said so) */
    bool hex = (*p == 'x' || *p == 'X') && p == s + 1 && *s == '0';
    bool exponent = (*p == 'e' || *p == 'E') && (isdigit((unsigned char)p[1]) || p[1] == '+' || p[1] == '-');
    if (hex || exponent)
        return fail(why, "not a decimal number");
    unsigned shift;
    if (!size_unit(p, &shift))
        return fail(why, SIZE_UNITS);
    if (overflow)
        return fail(why, SIZE_OVERFLOW);
    while (frac_end > frac && frac_end[-1] == '0')
        frac_end--;
    size_t nd = (size_t)(frac_end - frac);
    if (nd > shift)
        return fail(why, "not a whole number of bytes");
    unsigned char dig[40]; /* nd <= shift <= 40 */
    for (size_t i = 0; i < nd; i++)
        dig[i] = (unsigned char)(frac[i] - '0');
    uint64_t part = 0; /* the fraction's bytes: below 2^shift */
    for (unsigned k = 0; k < shift; k++) {
        unsigned carry = 0;
        for (size_t i = nd; i-- > 0;) {
            unsigned v = dig[i] * 2u + carry;
            dig[i] = (unsigned char)(v % 10);
            carry = v / 10;
        }
        part = part * 2 + carry;
    }
    for (size_t i = 0; i < nd; i++)
        if (dig[i])
            return fail(why, "not a whole number of bytes");
    if (shift && whole > (UINT64_MAX >> shift))
        return fail(why, SIZE_OVERFLOW);
    uint64_t bytes = whole << shift;
    if (bytes > UINT64_MAX - part)
        return fail(why, SIZE_OVERFLOW);
    *out = (size_t)(bytes + part);
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
