/* names.c — the names a setting has outside a file (contract in config.h): its environment
 * variable, and the known key closest to a misspelt one.  The one rule for environment names
 * lives here: a setting's variable is GMLAKE_ followed by its key in upper case, exactly
 * (GMLAKE_STITCH); gml_option_of_env is the only test of it, used both to read the variables and
 * to report the ones that name no setting.  Below load.c and docs.c, above the table (options.c). */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "config.h"

int gml_option_find(const char *key)
{
    for (int i = 0; i < gml_option_count; i++)
        if (strcmp(gml_options[i].key, key) == 0)
            return i;
    return -1;
}

void gml_option_env_name(int i, char *buf, size_t len)
{
    const char *k = gml_options[i].key;
    size_t n = (size_t)snprintf(buf, len, "GMLAKE_");
    for (; *k && n + 1 < len; k++)
        buf[n++] = (char)toupper((unsigned char)*k);
    buf[n < len ? n : len - 1] = 0;
}

int gml_option_of_env(const char *name)
{
    char var[96];
    for (int i = 0; i < gml_option_count; i++) {
        gml_option_env_name(i, var, sizeof var);
        if (strcmp(var, name) == 0)
            return i;
    }
    return -1;
}

bool gml_env_is_gmlake(const char *name) { return strncasecmp(name, "GMLAKE_", 7) == 0; }

bool gml_env_not_a_setting(const char *name)
{
    static const char *const others[] = {"GMLAKE_CONFIG", "GMLAKE_SYSCONFDIR", GML_WARNED_ENV,
                                         GML_TORCH_ROUTE_ENV, GML_TORCH_WARNED_ENV};
    for (size_t k = 0; k < sizeof others / sizeof others[0]; k++)
        if (strcmp(name, others[k]) == 0)
            return true;
    return false;
}

/* Edit distance between a and b (case-insensitive), capped at 9. */
static int distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 40 || lb > 40)
        return 9;
    int row[41];
    for (size_t j = 0; j <= lb; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
            int best = diag + !same;
            if (up + 1 < best)
                best = up + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb] > 9 ? 9 : row[lb];
}

const char *gml_config_closest_key(const char *key)
{
    const char *best = NULL;
    int bd = 3; /* at most two edits, and fewer than a third of the key */
    for (int i = 0; i < gml_option_count; i++) {
        const char *names[2] = {gml_options[i].key, gml_options[i].alias};
        for (int k = 0; k < 2; k++) {
            if (!names[k])
                continue;
            int d = distance(key, names[k]);
            if (d < bd && (size_t)d * 3 < strlen(names[k])) {
                bd = d;
                best = gml_options[i].key;
            }
        }
    }
    return best;
}

void gml_env_closest(const char *name, char *buf, size_t len)
{
    buf[0] = 0;
    if (!gml_env_is_gmlake(name))
        return;
    const char *near = gml_config_closest_key(name + 7);
    for (int i = 0; near && i < gml_option_count; i++)
        if (gml_options[i].key == near)
            gml_option_env_name(i, buf, len);
}
