/*
 * replay.c — `gmlake replay`: replays allocation traces under replay policies (gmlake's pool on
 * the sim device, models of PyTorch's allocators) and reports, per trace, the policies side by
 * side: peak active and reserved memory, utilization, memory saved against `pytorch`, device
 * calls, stitches; optionally an SVG chart of memory over the trace.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "../config/config.h"
#include "../config/units.h"
#include "../stitch/stitch.h"
#include "charge.h"
#include "fit.h"
#include "utf8.h"
#include "plot.h"
#include "outfile.h"
#include "plotname.h"
#include "policy.h"
#include "trace.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gmlake replay [--json] [--policy LIST] [--capacity SIZE] [--plot FILE.svg] [--check N]\n"
            "                     [--set KEY=VALUE] [--label NAME] [--stream-ordered] [--gpu-lag US]\n"
            "                     [--fit]\n"
            "                     TRACE...\n"
            "Replays gmlake-trace v1 files (plain or gzip; '-': standard input, once) under each\n"
            "policy on a simulated device and prints, per trace, the policies side by side: peak\n"
            "active and reserved bytes, utilization (peak active / peak reserved), memory saved\n"
            "against pytorch, device calls and their estimated driver time (core/cost.h),\n"
            "stitches; then each policy's device calls by kind, with the count and driver time\n"
            "of the trace's second half.\n"
            "  --json          one JSON object per trace and policy instead of the table\n"
            "  --policy LIST   comma-separated, default pytorch,expandable,gmlake:\n"
            "                    gmlake      gmlake's pool (stitching, default strategy)\n"
            "                    no-stitch, largest, bestfit   gmlake without stitching / with that strategy\n"
            "                    pytorch     model of PyTorch's native caching allocator\n"
            "                    expandable  model of PyTorch with expandable_segments:True\n"
            "  --capacity SIZE device memory of the simulated GPU (default 140GiB, at most 16TiB;\n"
            "                  rounded down to whole 2MiB chunks, with a note on stderr)\n"
            "  --plot FILE.svg reserved and active memory over the trace per policy, peaks marked, as\n"
            "                  SVG; several traces: FILE.NAME.svg each, NAME the trace's --label or\n"
            "                  file name without its folder and a final .gz, .trace or .pickle (two\n"
            "                  traces with one NAME are refused: give one a --label); a plot path\n"
            "                  that is an input trace, a folder, in a folder that is not there,\n"
            "                  or longer than 4095 bytes, is refused before anything is\n"
            "                  replayed; the file is replaced only once written whole (a\n"
            "                  symbolic link, FIFO or device is written through, never\n"
            "                  replaced), and its path printed on stderr\n"
            "  --check N       run the policy's consistency checker every N events (slow)\n"
            "  --label NAME    report the next TRACE as NAME (gmlake replay names a converted\n"
            "                  snapshot after the file the user gave)\n"
            "  --stream-ordered  leave out the allocations made with no stream (cudaMalloc,\n"
            "                  cuMemAlloc) and their frees: in a trace recorded under PyTorch's\n"
            "                  cudaMallocAsync backend those are other libraries' own (cuBLAS\n"
            "                  workspaces), which torch.cuda.max_memory_reserved does not count\n"
            "  --gpu-lag US    gmlake's policies on a GPU that runs US microseconds behind the host\n"
            "                  (0, the default: every stream's work completes at once): the work\n"
            "                  each event's stream had at its time completes US later, so another\n"
            "                  stream's frees may still be pending when a stream misses, as on a\n"
            "                  busy GPU (tools/gpu_lag.h)\n"
            "  --fit           also the smallest device each policy runs the whole trace on (whole\n"
            "                  2 MiB chunks, at most --capacity; by bisection: one chunk less\n"
            "                  fails an allocation), as column 'fits in' (JSON fits_in_bytes,\n"
            "                  null where the policy fails on --capacity itself, and\n"
            "                  fit_replays, the replays the search made)\n"
            "  --set KEY=VALUE a pool setting, as in gmlake.conf (stitch, frag_limit, reuse_limit,\n"
            "                  defrag_level, auto_gc, stitch_bytes_limit, stitch_strategy,\n"
            "                  chunk_size, small_limit, memory_limit, extent_size,\n"
            "                  extent_share, stream_wait, churn_limit, stitch_patch,\n"
            "                  stitch_borrow), or a model setting:\n"
            "                  pytorch.max_split_size_mb, pytorch.roundup_power2_divisions (the\n"
            "                  same keys under expandable.: each model's its own); repeatable\n"
            "A policy with failed allocations (out of device memory) is not compared: its saved\n"
            "column says so, its JSON has \"complete\":false and \"saved_vs_pytorch_bytes\":null,\n"
            "and the exit status is 1.\n");
}

/* The largest --capacity: the simulated device and the expandable model keep a byte per 2 MiB
 * chunk of it. */
#define MAX_CAPACITY ((size_t)16 << 40)

/* One ASCII byte of a JSON string: quote and backslash escaped, control bytes as \u00XX. */
static void json_ascii(FILE *f, unsigned char c)
{
    if (c == '"' || c == '\\')
        fprintf(f, "\\%c", c);
    else if (c < 0x20 || c == 0x7f)
        fprintf(f, "\\u%04x", c);
    else
        fputc(c, f);
}

/* s as a JSON string, quotes included.  JSON is UTF-8: a byte of the name that is no part of a
 * valid UTF-8 character (a file name in Latin-1) is written as U+FFFD, never as it is. */
static void json_str(const char *s)
{
    putchar('"');
    gml_utf8_write(stdout, s, "\\ufffd", json_ascii);
    putchar('"');
}

static gml_config base; /* defaults plus --set */
static gml_model_options model_opt;

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

typedef struct run {
    const char *policy;
    bool failed_allocations; /* the policy could not serve the whole trace: not compared */
    gml_policy_result r;
    gml_series s;
    gmlake_stats st; /* gmlake policies: the pool's at the end */
    bool is_pool;
    bool fit_asked;  /* --fit */
    gml_fit fit;
} run;

static void json_line(const char *trace, const run *x, const run *ref)
{
    const gml_policy_result *r = &x->r;
    double util = r->peak_reserved ? (double)r->peak_active / (double)r->peak_reserved : 0;
    printf("{\"trace\":");
    json_str(trace);
    printf(",\"policy\":");
    json_str(x->policy);
    printf(",\"complete\":%s,\"allocations\":%lu,\"frees\":%lu,"
           "\"failed_allocations\":%lu,\"peak_active_bytes\":%lu,\"peak_reserved_bytes\":%lu,"
           "\"utilization\":%.6f,\"stitches\":%lu,",
           x->failed_allocations ? "false" : "true", (unsigned long)r->allocations,
           (unsigned long)r->frees, (unsigned long)r->failed, (unsigned long)r->peak_active,
           (unsigned long)r->peak_reserved, util, (unsigned long)r->stitches);
    if (x->is_pool)
        printf("\"stitch_reuses\":%lu,\"stitch_evictions\":%lu,", (unsigned long)x->st.stitch_reuses,
               (unsigned long)x->st.stitch_evictions);
    if (ref && (x->failed_allocations || ref->failed_allocations))
        printf("\"saved_vs_pytorch_bytes\":null,"); /* one of the two did not serve the trace */
    else if (ref)
        printf("\"saved_vs_pytorch_bytes\":%lld,",
               (long long)ref->r.peak_reserved - (long long)r->peak_reserved);
    printf("\"device_calls_total\":%lu,\"device_calls_second_half\":%lu,\"device_calls\":{",
           (unsigned long)r->calls_total, (unsigned long)r->calls_second_half);
    bool first = true;
    for (int i = 0; i < GML_CALL_COUNT; i++) {
        if (i >= GMLAKE_DC_COUNT && !r->calls[i])
            continue; /* gmlake's kinds always (as before), PyTorch's when made */
        printf("%s\"%s\":%lu", first ? "" : ",", gml_call_name(i), (unsigned long)r->calls[i]);
        first = false;
    }
    printf("}");
    if (x->fit_asked) {
        if (x->fit.bytes)
            printf(",\"fits_in_bytes\":%lu", (unsigned long)x->fit.bytes);
        else
            printf(",\"fits_in_bytes\":null");
        printf(",\"fit_replays\":%u", x->fit.replays);
    }
    printf(",\"device_seconds\":%.6f,\"device_seconds_second_half\":%.6f,"
           "\"replay_seconds\":%.3f}\n",
           r->device_seconds, r->device_seconds_second_half, r->seconds);
}

static void table(const char *trace, const gml_trace *t, const run *runs, size_t n, const run *ref)
{
    const double mib = 1024.0 * 1024.0;
    bool fit = n && runs[0].fit_asked;
    printf("%s: %zu events\n", trace, t->n);
    printf("  %-12s %14s %14s %8s %17s %12s %14s %9s %7s%s\n", "policy", "peak active",
           "peak reserved", "util.", "saved vs pytorch", "device calls", "est. driver s",
           "stitches", "failed", fit ? "        fits in" : "");
    for (size_t i = 0; i < n; i++) {
        const gml_policy_result *r = &runs[i].r;
        char saved[32] = "-";
        if (runs[i].failed_allocations)
            snprintf(saved, sizeof saved, "FAILED");
        else if (ref && ref->failed_allocations)
            snprintf(saved, sizeof saved, "pytorch FAILED");
        else if (ref)
            snprintf(saved, sizeof saved, "%.1f MiB",
                     ((double)ref->r.peak_reserved - (double)r->peak_reserved) / mib);
        char fits[32] = "";
        if (fit && runs[i].fit.bytes)
            snprintf(fits, sizeof fits, " %10.0f MiB", runs[i].fit.bytes / mib);
        else if (fit)
            snprintf(fits, sizeof fits, " %14s", "no");
        printf("  %-12s %10.1f MiB %10.1f MiB %7.2f%% %17s %12lu %14.4f %9lu %7lu%s\n",
               runs[i].policy, r->peak_active / mib, r->peak_reserved / mib,
               r->peak_reserved ? 100.0 * (double)r->peak_active / (double)r->peak_reserved : 0.0,
               saved, (unsigned long)r->calls_total, r->device_seconds, (unsigned long)r->stitches,
               (unsigned long)r->failed, fits);
    }
    for (size_t i = 0; i < n; i++) {
        const gml_policy_result *r = &runs[i].r;
        printf("  %s: device calls (second half of the trace: %lu, est. driver %.4f s):",
               runs[i].policy, (unsigned long)r->calls_second_half,
               r->device_seconds_second_half);
        for (int k = 0; k < GML_CALL_COUNT; k++)
            if (r->calls[k])
                printf(" %s %lu", gml_call_name(k), (unsigned long)r->calls[k]);
        printf("; replay %.3f s\n", r->seconds);
    }
    for (size_t i = 0; i < n; i++)
        if (runs[i].failed_allocations)
            printf("  %s FAILED: %lu of %lu allocations could not be served (out of device "
                   "memory): its figures are not comparable, nothing saved\n", runs[i].policy,
                   (unsigned long)runs[i].r.failed,
                   (unsigned long)(runs[i].r.failed + runs[i].r.allocations));
}

static bool ends_with_svg(const char *p)
{
    size_t n = strlen(p);
    return n > 4 && strcasecmp(p + n - 4, ".svg") == 0 && p[n - 5] != '/';
}

static const char *long_name(int c)
{
    switch (c) {
    case 'p': return "--policy";
    case 'c': return "--capacity";
    case 'k': return "--check";
    case 's': return "--set";
    case 'o': return "--plot";
    case 'l': return "--label";
    case 'S': return "--stream-ordered";
    case 'g': return "--gpu-lag";
    default: return "an option";
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},       {"policy", required_argument, 0, 'p'},
        {"capacity", required_argument, 0, 'c'}, {"check", required_argument, 0, 'k'},
        {"set", required_argument, 0, 's'},  {"plot", required_argument, 0, 'o'},
        {"label", required_argument, 0, 'l'}, {"help", no_argument, 0, 'h'},
        {"stream-ordered", no_argument, 0, 'S'}, {"gpu-lag", required_argument, 0, 'g'},
        {"fit", no_argument, 0, 'f'},
        {0, 0, 0, 0},
    };
    bool json = false, stream_ordered = false, fit = false;
    const char *policies = "pytorch,expandable,gmlake", *plot = NULL;
    size_t capacity = (size_t)140 << 30;
    long check = 0;
    unsigned long long gpu_lag = 0;
    int c;
    gml_stdout_checked("gmlake replay");
    gml_config_defaults(&base);
    gml_model_options_default(&model_opt);
    /* traces in order, each with the name it is reported under */
    /* (file scope: an early return leaves them reachable, not leaked) */
    static const char **paths, **labels;
    paths = calloc((size_t)argc, sizeof *paths);
    labels = calloc((size_t)argc, sizeof *labels);
    size_t ntrace = 0;
    const char *next_label = NULL;
    if (!paths || !labels) {
        fprintf(stderr, "gmlake replay: out of memory\n");
        return 1;
    }
    opterr = 0;
    /* '-': operands come back in order (code 1), so that --label names the trace after it */
    while ((c = getopt_long(argc, argv, "-:jp:c:k:s:o:l:g:h", opts, NULL)) != -1) {
        switch (c) {
        case 1:
            paths[ntrace] = optarg;
            labels[ntrace++] = next_label ? next_label : optarg;
            next_label = NULL;
            break;
        case 'l': next_label = optarg; break;
        case 's': {
            /* the key copied whole (no fixed buffer: a longer argument was once cut short, and
             * what followed it never checked); the value is read in place */
            const char *eq = strchr(optarg, '=');
            if (!eq) {
                fprintf(stderr, "gmlake replay: --set '%s' is not KEY=VALUE\n", optarg);
                return 2;
            }
            char err[512], *key = strndup(optarg, (size_t)(eq - optarg));
            if (!key) {
                fprintf(stderr, "gmlake replay: out of memory\n");
                return 1;
            }
            int m = gml_model_option_set(&model_opt, key, eq + 1, err, sizeof err);
            if (m > 0 && gml_config_set(&base, NULL, key, eq + 1, "--set", stderr) != 0)
                m = -2;
            else if (m > 0 && !gml_option_is_pool(gml_option_find(key)))
                fprintf(stderr, "gmlake replay: --set %s: the library's setting, which a replay does "
                        "not use (it replays the pool's settings and the models')\n", key);
            free(key);
            if (m == -1)
                fprintf(stderr, "gmlake replay: --set %s\n", err);
            if (m < 0)
                return 2;
            break;
        }
        case 'j': json = true; break;
        case 'S': stream_ordered = true; break;
        case 'f': fit = true; break;
        case 'p': policies = optarg; break;
        case 'o':
            if (!ends_with_svg(optarg)) {
                fprintf(stderr, "gmlake replay: --plot '%s': the chart is SVG: name a file ending "
                                "in .svg (scripts/render-plot FILE.svg FILE.png makes a PNG of it)\n",
                        optarg);
                return 2;
            }
            plot = optarg;
            break;
        case 'c': {
            const char *why = "not a size";
            if (gml_parse_size_why(optarg, &capacity, &why)) {
                fprintf(stderr, "gmlake replay: --capacity '%s' is not valid (%s)\n", optarg, why);
                return 2;
            }
            if (capacity < ((size_t)2 << 20)) {
                fprintf(stderr, "gmlake replay: --capacity '%s' is below one chunk (2MiB)\n", optarg);
                return 2;
            }
            if (capacity > MAX_CAPACITY) {
                fprintf(stderr, "gmlake replay: --capacity '%s' is too large: at most 16TiB (the "
                                "simulated device)\n", optarg);
                return 2;
            }
            if (capacity & (((size_t)2 << 20) - 1)) {
                /* the simulated device holds whole chunks: said, so a figure is not a surprise */
                capacity &= ~(((size_t)2 << 20) - 1);
                fprintf(stderr, "gmlake replay: --capacity '%s' is not a whole number of 2 MiB "
                                "chunks: rounded down to %zu MiB\n", optarg, capacity >> 20);
            }
            break;
        }
        case 'k': {
            char *end;
            errno = 0;
            check = strtol(optarg, &end, 10);
            if (errno == ERANGE || (!*end && *optarg && *optarg != '-' && check <= 0 && errno)) {
                fprintf(stderr, "gmlake replay: --check '%s' is out of range (1 to %ld)\n", optarg,
                        LONG_MAX);
                return 2;
            }
            if (*end || !*optarg || check <= 0) {
                fprintf(stderr, "gmlake replay: --check '%s' is not a positive whole number\n", optarg);
                return 2;
            }
            break;
        }
        case 'g': {
            char *end;
            errno = 0;
            gpu_lag = strtoull(optarg, &end, 10);
            if (*end || !*optarg || *optarg == '-' || errno == ERANGE || gpu_lag > 3600000000ULL) {
                fprintf(stderr, "gmlake replay: --gpu-lag '%s' is not a whole number of "
                                "microseconds from 0 to 3600000000 (an hour)\n", optarg);
                return 2;
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        case ':':
            fprintf(stderr, "gmlake replay: %s needs a value\n", long_name(optopt));
            return 2;
        default:
            if (optopt)
                fprintf(stderr, "gmlake replay: unknown option '-%c'\n", optopt);
            else
                fprintf(stderr, "gmlake replay: unknown option '%s'\n", argv[optind - 1]);
            usage(stderr);
            return 2;
        }
    }
    if (gml_config_check_print(&base, 0, "gmlake replay", stderr) != 0) /* config/check.c */
        return 2;
    for (; optind < argc; optind++) { /* after "--" */
        paths[ntrace] = argv[optind];
        labels[ntrace++] = next_label ? next_label : argv[optind];
        next_label = NULL;
    }
    if (next_label) {
        fprintf(stderr, "gmlake replay: --label '%s' names no trace (it goes before one)\n", next_label);
        return 2;
    }
    if (ntrace == 0) {
        usage(stderr);
        return 2;
    }
    for (size_t i = 0, seen = 0; i < ntrace; i++)
        if (strcmp(paths[i], "-") == 0 && seen++) {
            fprintf(stderr, "gmlake replay: '-' (standard input) is named twice: it can be read once\n");
            return 2;
        }
    enum { MAXPOL = 16 };
    const char *names[MAXPOL];
    size_t npol = 0;
    /* a copy of the whole list (file scope, as paths: reachable on an early return); split at
     * every comma, so that an empty name (a comma too many) is seen and refused */
    static char *list;
    list = strdup(policies);
    if (!list) {
        fprintf(stderr, "gmlake replay: out of memory\n");
        return 1;
    }
    for (char *rest = list, *pol; (pol = strsep(&rest, ",")) != NULL;) {
        if (!*pol) {
            fprintf(stderr, "gmlake replay: --policy '%s': empty policy name (a comma too many)\n",
                    policies);
            return 2;
        }
        if (!gml_policy_known(pol)) {
            fprintf(stderr, "gmlake replay: unknown policy '%s' (known: gmlake, no-stitch, largest, "
                            "bestfit, pytorch, expandable)\n", pol);
            return 2;
        }
        if (npol == MAXPOL) {
            fprintf(stderr, "gmlake replay: at most %d policies\n", MAXPOL);
            return 2;
        }
        names[npol++] = pol;
    }
    /* every plot's path decided and checked before anything is replayed or written */
    static char **plots;
    plots = calloc(ntrace, sizeof *plots);
    if (!plots) {
        fprintf(stderr, "gmlake replay: out of memory\n");
        return 1;
    }
    if (plot) {
        char err[GML_OUTFILE_PATH_MAX + 512];
        if (gml_plot_paths(plot, paths, labels, ntrace, plots, err, sizeof err) != 0) {
            fprintf(stderr, "gmlake replay: %s\n", err);
            return 2;
        }
    }
    run *runs = calloc(npol, sizeof *runs);
    if (!runs) {
        fprintf(stderr, "gmlake replay: out of memory\n");
        return 1;
    }
    int status = 0;
    for (size_t i = 0; i < ntrace; i++) {
        char err[512];
        gml_trace t;
        if (gml_trace_load(paths[i], &t, err, sizeof err)) {
            fprintf(stderr, "gmlake replay: %s\n", err);
            status = 1;
            continue;
        }
        size_t left_out = 0;
        if (stream_ordered) {
            if (gml_trace_keep_stream_ordered(&t, &left_out, err, sizeof err) != 0) {
                fprintf(stderr, "gmlake replay: %s\n", err);
                gml_trace_free(&t);
                status = 1;
                continue;
            }
            if (t.n == 0) {
                fprintf(stderr, "gmlake replay: %s: --stream-ordered leaves no event (every "
                                "allocation was made with no stream)\n", paths[i]);
                gml_trace_free(&t);
                status = 1;
                continue;
            }
            if (!json)
                fprintf(stderr, "gmlake replay: %s: %zu events with no stream left out\n",
                        base_name(labels[i]), left_out);
        }
        size_t nrun = 0;
        const run *ref = NULL;
        /* the last error said for this trace: a fault of the trace itself (a free of a pointer
         * that is not live) stops every policy alike, and is said once */
        char said[sizeof err] = "";
        for (size_t k = 0; k < npol; k++) {
            gml_policy *p = gml_policy_create(names[k], capacity, &base.pool, &model_opt, err, sizeof err);
            if (!p) {
                fprintf(stderr, "gmlake replay: %s\n", err);
                free(runs);
                free(paths);
                free(labels);
                return 1;
            }
            p->gpu_lag_us = gpu_lag;
            run *x = &runs[nrun];
            memset(x, 0, sizeof *x);
            x->policy = names[k];
            if (gml_policy_replay(p, &t, (size_t)check, &x->s, &x->r, err, sizeof err)) {
                if (strcmp(err, said) != 0)
                    fprintf(stderr, "gmlake replay: %s\n", err);
                snprintf(said, sizeof said, "%s", err);
                status = 1;
            } else {
                x->is_pool = p->pool != NULL;
                x->failed_allocations = x->r.failed > 0;
                if (x->is_pool)
                    gml_pool_stats(p->pool, &x->st);
                x->fit_asked = fit;
                if (fit && gml_fit_capacity(names[k], &t, capacity, &x->r, &base.pool, &model_opt,
                                            gpu_lag, &x->fit, err, sizeof err) != 0) {
                    fprintf(stderr, "gmlake replay: %s: --fit: %s\n", base_name(labels[i]), err);
                    status = 1;
                }
                if (strcmp(names[k], "pytorch") == 0 && !ref)
                    ref = x;
                nrun++;
            }
            gml_policy_destroy(p);
        }
        const char *tn = base_name(labels[i]);
        for (size_t k = 0; k < nrun; k++)
            if (runs[k].failed_allocations) {
                fprintf(stderr, "gmlake replay: %s: policy %s: %lu allocation%s failed (out of "
                                "device memory): not compared, nothing saved\n", tn,
                        runs[k].policy, (unsigned long)runs[k].r.failed, runs[k].r.failed == 1 ? "" : "s");
                status = 1;
            }
        if (json)
            for (size_t k = 0; k < nrun; k++)
                json_line(tn, &runs[k], ref);
        else if (nrun)
            table(tn, &t, runs, nrun, ref);
        if (plot && nrun) {
            gml_plot_line lines[MAXPOL];
            for (size_t k = 0; k < nrun; k++)
                lines[k] = (gml_plot_line){runs[k].policy, &runs[k].s, &runs[k].r};
            if (gml_plot_svg(plots[i], tn, lines, nrun, err, sizeof err)) {
                fprintf(stderr, "gmlake replay: %s\n", err);
                status = 1;
            } else {
                fprintf(stderr, "gmlake replay: %s: plot written to %s\n", tn, plots[i]);
            }
        }
        gml_trace_free(&t);
    }
    free(runs);
    free(paths);
    free(labels);
    free(list);
    gml_plot_paths_free(plots, ntrace);
    free(plots);
    return status;
}
