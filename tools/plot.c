/* plot.c — the SVG chart of a replay (contract in plot.h). */
#include "plot.h"

#include "outfile.h"
#include "utf8.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define W 960.0
#define LEFT 80.0
#define RIGHT 24.0
#define TOP 56.0
#define AXIS 60.0 /* below the plot: tick labels and the axis title */

static const char *const colors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                     "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

/* One ASCII byte of SVG text: the XML special characters escaped, control bytes left out. */
static void xml_ascii(FILE *f, unsigned char c)
{
    switch (c) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default:
        if (c >= 0x20)
            fputc(c, f);
    }
}

/* Writes s as SVG text.  The chart is UTF-8 (XML's default): a byte of the name that is no part of
 * a valid UTF-8 character (a file name in Latin-1) is written as U+FFFD, never as it is, which
 * would leave the file unreadable. */
static void put_text(FILE *f, const char *s) { gml_utf8_write(f, s, GML_UTF8_REPLACEMENT, xml_ascii); }

static double nice_step(double range, int ticks)
{
    double raw = range / ticks, p = 1;
    while (p * 10 <= raw)
        p *= 10;
    while (p > raw)
        p /= 10;
    double m[] = {1, 2, 2.5, 5, 10};
    for (int i = 0; i < 5; i++)
        if (p * m[i] >= raw)
            return p * m[i];
    return p * 10;
}

int gml_plot_svg(const char *path, const char *title, const gml_plot_line *lines, size_t n,
                 char *err, size_t errlen)
{
    gml_outfile out;
    if (gml_outfile_open(&out, path, err, errlen))
        return -1;
    FILE *f = out.f;
    const double mib = 1024.0 * 1024.0;
    double ymax = 1;
    size_t events = 1;
    for (size_t i = 0; i < n; i++) {
        if (lines[i].result->peak_reserved / mib > ymax)
            ymax = lines[i].result->peak_reserved / mib;
        if (lines[i].result->peak_active / mib > ymax)
            ymax = lines[i].result->peak_active / mib;
        if (lines[i].series->events > events)
            events = lines[i].series->events;
    }
    bool gib = ymax >= 4096;
    double unit = gib ? 1024.0 : 1.0; /* axis unit in MiB */
    double step = nice_step(ymax * 1.08 / unit, 6) * unit;
    double ytop = step * (double)(int)(ymax * 1.08 / step + 0.999);
    double legend = 18.0 * (double)(n > 64 ? 64 : n) + 8; /* the legend, under the axis */
    double H = 480 + legend, BOTTOM = AXIS + legend;
    double pw = W - LEFT - RIGHT, ph = H - TOP - BOTTOM;
#define X(frac) (LEFT + (frac) * pw)
#define Y(v) (TOP + ph - (v) / ytop * ph)
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" "
               "height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" "
               "font-size=\"12\">\n",
            W, H, W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text class=\"title\" x=\"%.1f\" y=\"22\" font-size=\"16\" font-weight=\"bold\">", LEFT);
    put_text(f, title);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"40\" fill=\"#555\">reserved (solid) and active "
               "(dashed) device memory per policy; dots mark each policy's peak reserved</text>\n",
            LEFT);
    /* axes and grid */
    fprintf(f, "<g class=\"axes\" stroke=\"#ccc\" stroke-width=\"1\">\n");
    for (double v = 0; v <= ytop + 1e-9; v += step)
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", LEFT, Y(v),
                W - RIGHT, Y(v));
    fprintf(f, "</g>\n<g class=\"labels\" fill=\"#333\">\n");
    for (double v = 0; v <= ytop + 1e-9; v += step)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g %s</text>\n", LEFT - 6,
                Y(v) + 4, v / unit, gib ? "GiB" : "MiB");
    for (int i = 0; i <= 4; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%zu</text>\n", X(i / 4.0),
                H - BOTTOM + 18, (size_t)((double)events * i / 4.0));
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">trace events</text>\n",
            X(0.5), H - BOTTOM + 40);
    fprintf(f, "</g>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
               "stroke=\"#333\"/>\n",
            LEFT, TOP, pw, ph);
    /* peak labels above their dots, pushed apart so that none overlaps another */
    double label_y[64];
    size_t order[64];
    if (n > 64)
        n = 64;
    for (size_t i = 0; i < n; i++) {
        label_y[i] = Y(lines[i].result->peak_reserved / mib) - 8;
        order[i] = i;
    }
    for (size_t i = 1; i < n; i++) /* lowest on the page first */
        for (size_t j = i; j > 0 && label_y[order[j]] > label_y[order[j - 1]]; j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    for (size_t i = 1; i < n; i++)
        if (label_y[order[i]] > label_y[order[i - 1]] - 15)
            label_y[order[i]] = label_y[order[i - 1]] - 15;
    for (size_t i = 0; i < n; i++) {
        const gml_series *s = lines[i].series;
        const gml_policy_result *r = lines[i].result;
        const char *c = colors[i % (sizeof colors / sizeof *colors)];
        fprintf(f, "<g class=\"policy\" data-policy=\"");
        put_text(f, lines[i].policy);
        fprintf(f, "\">\n");
        for (int k = 0; k < 2; k++) {
            fprintf(f, "<polyline class=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s "
                       "points=\"",
                    k ? "active" : "reserved", c, k ? "1.2" : "2",
                    k ? " stroke-dasharray=\"5 3\"" : "");
            for (size_t b = 0; b < s->n; b++) {
                double v = (double)(k ? s->active[b] : s->reserved[b]) / mib;
                fprintf(f, "%s%.1f,%.1f", b ? " " : "", X((b + 0.5) / (double)s->n), Y(v));
            }
            fprintf(f, "\"/>\n");
        }
        double px = X((double)s->peak_reserved_event / (double)events);
        double py = Y(r->peak_reserved / mib);
        fprintf(f, "<circle class=\"peak-reserved\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\" "
                   "stroke=\"white\"><title>",
                px, py, c);
        put_text(f, lines[i].policy);
        fprintf(f, " peak reserved %.0f MiB</title></circle>\n", r->peak_reserved / mib);
        fprintf(f, "<text class=\"peak-label\" x=\"%.1f\" y=\"%.1f\" fill=\"%s\" "
                   "text-anchor=\"%s\" stroke=\"white\" stroke-width=\"3\" paint-order=\"stroke\">",
                px + (px > W / 2 ? -9 : 9), label_y[i], c, px > W / 2 ? "end" : "start");
        put_text(f, lines[i].policy);
        fprintf(f, " peak %.0f MiB</text>\n", r->peak_reserved / mib);
        /* legend */
        double ly = H - legend + 10 + 18.0 * (double)i;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                   "stroke-width=\"3\"/>\n<text x=\"%.1f\" y=\"%.1f\">",
                LEFT + 10, ly, LEFT + 34, ly, c, LEFT + 40, ly + 4);
        put_text(f, lines[i].policy);
        fprintf(f, ": peak reserved %.0f MiB, peak active %.0f MiB</text>\n</g>\n",
                r->peak_reserved / mib, r->peak_active / mib);
    }
    fprintf(f, "</svg>\n");
#undef X
#undef Y
    return gml_outfile_commit(&out, err, errlen); /* all or nothing */
}
