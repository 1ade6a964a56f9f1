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

int gml_parse_size(const char *s, size_t *out)
{
    if (!s)
        return -1;
    s = skip_space(s);
    if (!isdigit((unsigned char)*s) && *s != '.')
        return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0 || !only(s, end, "0123456789."))
        return -1;
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
            return -1;
        }
        if (!rest_blank(u))
            return -1;
    }
    double bytes = v * mult;
    if (bytes >= 18446744073709551616.0 || bytes != floor(bytes))
        return -1;
    *out = (size_t)bytes;
    return 0;
}

int gml_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};
    if (!s)
        return -1;
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

int gml_parse_double(const char *s, double *out)
{
    if (!s || !*skip_space(s))
        return -1;
    char *end;
    errno = 0;
    s = skip_space(s);
    double v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || !rest_blank(end) || !only(s, end, "0123456789.eE+-"))
        return -1;
    *out = v;
    return 0;
}

int gml_parse_int(const char *s, long *out)
{
    if (!s || !*skip_space(s))
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || !rest_blank(end))
        return -1;
    *out = v;
    return 0;
}
