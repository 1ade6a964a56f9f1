/*
 * plot.h — an SVG chart of a replay: reserved (solid) and active (dashed) memory over the trace's
 * events for each policy, in one chart, each policy's peak reserved marked and labelled.  Plain
 * SVG 1.1 (no scripts, no external resources): any browser shows it.  Structure, for tools that
 * read it: one <g class="policy" data-policy="NAME"> per policy holding <polyline
 * class="reserved">, <polyline class="active"> and <circle class="peak-reserved">.
 */
#ifndef GML_PLOT_H
#define GML_PLOT_H

#include <stddef.h>

#include "policy.h"

typedef struct gml_plot_line {
    const char *policy;
    const gml_series *series;
    const gml_policy_result *result;
} gml_plot_line;

/* Writes the chart to path all or nothing (outfile.h); 0 on success; -1 with a message in err. */
int gml_plot_svg(const char *path, const char *title, const gml_plot_line *lines, size_t n,
                 char *err, size_t errlen);

#endif /* GML_PLOT_H */
