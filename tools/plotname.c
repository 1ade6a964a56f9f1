/* plotname.c — the plot file of each trace (contract in plotname.h). */
#include "plotname.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outfile.h"

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static bool drop_suffix(char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    if (n <= k || strcmp(s + n - k, suffix) != 0)
        return false;
    s[n - k] = 0;
    return true;
}

/* NAME of a trace reported as label (malloc'ed; NULL: out of memory).  Only the endings a trace
 * or snapshot file has are dropped, so that job.rank0.trace and job.rank1.trace stay apart. */
static char *trace_name(const char *label)
{
    char *s = strdup(base_name(label));
    if (s) {
        drop_suffix(s, ".gz");
        if (!drop_suffix(s, ".trace"))
            drop_suffix(s, ".pickle");
    }
    return s;
}

/* FILE.svg with NAME before its ".svg" (replay.c has checked that it ends so), malloc'ed. */
static char *with_name(const char *plot, const char *name)
{
    size_t stem = strlen(plot) - 4;
    char *s = malloc(stem + strlen(name) + 6);
    if (s)
        sprintf(s, "%.*s.%s%s", (int)stem, plot, name, plot + stem);
    return s;
}

void gml_plot_paths_free(char **out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(out[i]);
        out[i] = NULL;
    }
}

int gml_plot_paths(const char *plot, const char *const *paths, const char *const *labels, size_t n,
                   char **out, char *err, size_t errlen)
{
    char **names = calloc(n ? n : 1, sizeof *names);
    int rc = names ? 0 : -1;
    if (!names)
        snprintf(err, errlen, "out of memory");
    for (size_t i = 0; i < n; i++)
        out[i] = NULL;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (n > 1 && (names[i] = trace_name(labels[i])) && !*names[i]) {
            snprintf(err, errlen, "--plot '%s': the trace '%s' has no name to tell its plot "
                                  "apart (give it a --label)", plot, labels[i]);
            rc = -1;
            break;
        }
        out[i] = n > 1 ? (names[i] ? with_name(plot, names[i]) : NULL) : strdup(plot);
        if (!out[i]) {
            snprintf(err, errlen, "out of memory");
            rc = -1;
            break;
        }
        for (size_t k = 0; k < i && n > 1; k++)
            if (strcmp(names[k], names[i]) == 0) {
                snprintf(err, errlen, "--plot '%s': the plots of %s and %s would both be %s (one "
                                      "would replace the other): give one of them a --label",
                         plot, labels[k], labels[i], out[i]);
                rc = -1;
            }
        size_t len = strlen(out[i]);
        if (rc == 0 && len >= GML_OUTFILE_PATH_MAX) {
            snprintf(err, errlen, "--plot '%.64s...': the plot of %s would be a path of %zu bytes, "
                                  "longer than the %d an output file may have", plot, labels[i],
                     len, GML_OUTFILE_PATH_MAX - 1);
            rc = -1;
        }
        if (rc == 0 && gml_outfile_check(out[i], err, errlen) != 0)
            rc = -1; /* a folder: said before anything is replayed */
        for (size_t k = 0; k < n && rc == 0; k++)
            if (gml_same_file(out[i], paths[k])) {
                snprintf(err, errlen, "--plot '%s': the plot of %s would go to %s, which is the "
                                      "trace %s (an input is never written over): name another "
                                      "file", plot, labels[i], out[i], paths[k]);
                rc = -1;
            }
    }
    if (rc != 0)
        gml_plot_paths_free(out, n);
    if (names)
        gml_plot_paths_free(names, n);
    free(names);
    return rc;
}
