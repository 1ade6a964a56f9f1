/* filename.c — the file names log_file, stats_file and trace_file expand to (contract in
 * config.h): one expansion, used by the library with its pid and rank (interpose/state.c) and by
 * the table with the longest pid and rank (options.c), so that a setting that could expand past
 * GML_PATH_MAX - 1 bytes is refused when it is read, never cut short when a file is opened.  A
 * leaf: it calls no other file of config/. */
#include <stdio.h>
#include <string.h>

#include "config.h"

/* Appends s to out (as much as fits); the length it would have in all. */
static size_t put(char *out, size_t len, size_t n, const char *s, size_t k)
{
    if (n < len)
        memcpy(out + n, s, n + k < len ? k : len - n);
    return n + k;
}

const char *gml_file_name_ext(const char *name)
{
    /* before the extension of the file's name, else at its end (a name that starts with its only
     * dot, ".trace", has no extension) */
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    const char *ins = strrchr(base, '.');
    return ins && ins != base ? ins : name + strlen(name);
}

size_t gml_file_name_expand(const char *pattern, bool add_rank, const char *pid, const char *rank,
                            char *out, size_t len)
{
    /* where ".rank%r" goes */
    const char *ins = add_rank && !strstr(pattern, "%p") && !strstr(pattern, "%r")
                          ? gml_file_name_ext(pattern)
                          : NULL;
    size_t n = 0;
    for (const char *c = pattern;; c++) {
        if (c == ins) {
            n = put(out, len, n, ".rank", 5);
            n = put(out, len, n, rank, strlen(rank));
        }
        if (!*c)
            break;
        const char *s = c;
        size_t k = 1;
        if (c[0] == '%' && (c[1] == 'p' || c[1] == 'r' || c[1] == '%')) {
            s = c[1] == 'p' ? pid : c[1] == 'r' ? rank : "%";
            k = strlen(s);
            c++;
        }
        n = put(out, len, n, s, k);
    }
    if (len)
        out[n < len ? n : len - 1] = 0;
    return n;
}

size_t gml_file_name_longest(const char *pattern, bool add_rank)
{
    char rank[GML_RANK_MAX + 1];
    memset(rank, '9', GML_RANK_MAX);
    rank[GML_RANK_MAX] = 0;
    return gml_file_name_expand(pattern, add_rank, "2147483647", rank, NULL, 0);
}
