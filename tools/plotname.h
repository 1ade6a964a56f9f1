/*
 * plotname.h — where `gmlake replay --plot FILE.svg` writes each trace's chart, decided for every
 * trace before anything is replayed or written.
 *
 * Contract
 *  - One trace: FILE.svg.  Several: FILE.NAME.svg, NAME being the trace's name as reported (its
 *    --label, else its file name) without its folder, then without a final ".gz" and then a final
 *    ".trace" or ".pickle" (x.trace.gz -> x; job.rank3.trace -> job.rank3).
 *  - Refused, with one line in err that names the option, the trace(s) and why (nothing is
 *    written then): an empty NAME; two traces with the same NAME (one chart would replace the
 *    other: the message names both and says to give one a --label); a path longer than an output
 *    file may be (GML_OUTFILE_PATH_MAX - 1 bytes: never cut short); a path that is one of the
 *    input traces (gml_same_file: an input is never overwritten); a folder, or a new file in a
 *    folder that is not there (gml_outfile_check).
 */
#ifndef GML_PLOTNAME_H
#define GML_PLOTNAME_H

#include <stddef.h>

/* paths[i]: the files read, labels[i]: the names they are reported under.  0 with out[i] a
 * malloc'ed path for each trace (gml_plot_paths_free), or -1 with err set and out[] all NULL. */
int gml_plot_paths(const char *plot, const char *const *paths, const char *const *labels, size_t n,
                   char **out, char *err, size_t errlen);
void gml_plot_paths_free(char **out, size_t n);

#endif /* GML_PLOTNAME_H */
