/*
 * replay.c — `gmlake replay`: replays allocation traces through the pool on the sim device and
 * reports reserved memory, utilization and device calls per trace and policy.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../config/config.h"
#include "../config/units.h"
#include "../stitch/stitch.h"
#include "trace.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gmlake replay [--json] [--policy LIST] [--capacity SIZE] [--check N] TRACE...\n"
            "Replays gmlake-trace v1 files (plain or gzip) through gmlake's pool on a simulated\n"
            "device and prints, per trace and policy: allocations, peak active and reserved bytes,\n"
            "utilization (peak active / peak reserved), device calls by kind, their estimated driver\n"
            "time (core/cost.h: total and second half of the trace), replay time.\n"
            "  --json          one JSON object per line instead of the text report\n"
            "  --policy LIST   comma-separated: gmlake (stitching, default strategy), no-stitch,\n"
            "                  largest, bestfit (stitching with that strategy); default gmlake\n"
            "  --capacity SIZE device memory of the simulated GPU (default 140GiB)\n"
            "  --check N       run the pool consistency checker every N events (slow)\n"
            "  --set KEY=VALUE a pool setting, as in gmlake.conf (stitch, frag_limit, reuse_limit,\n"
            "                  defrag_level, auto_gc, stitch_bytes_limit, stitch_strategy,\n"
            "                  chunk_size, small_limit, memory_limit); repeatable\n");
}

static gml_config base; /* defaults plus --set */

static int apply_policy(const char *name, gml_pool_settings *s)
{
    *s = base.pool;
    if (strcmp(name, "gmlake") == 0)
        return 0;
    if (strcmp(name, "no-stitch") == 0) {
        s->vmm_defragment = false;
        return 0;
    }
    int st = gml_stitch_strategy_from_name(name);
    if (st < 0)
        return -1;
    s->strategy = (gml_stitch_strategy)st;
    return 0;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

static void report(const char *trace, const char *policy, const gml_replay_result *r, bool json)
{
    const gmlake_stats *s = &r->stats;
    const double mib = 1024.0 * 1024.0;
    if (json) {
        printf("{\"trace\":\"%s\",\"policy\":\"%s\",\"allocations\":%lu,\"frees\":%lu,"
               "\"failed_allocations\":%lu,\"peak_active_bytes\":%lu,\"peak_reserved_bytes\":%lu,"
               "\"utilization\":%.6f,\"stitches\":%lu,\"stitch_reuses\":%lu,"
               "\"stitch_evictions\":%lu,\"device_calls_total\":%lu,"
               "\"device_calls_second_half\":%lu,\"device_calls\":{",
               trace, policy, (unsigned long)r->allocations, (unsigned long)r->frees,
               (unsigned long)r->failed, (unsigned long)s->peak_active_bytes,
               (unsigned long)s->peak_reserved_bytes, s->utilization, (unsigned long)s->stitches,
               (unsigned long)s->stitch_reuses, (unsigned long)s->stitch_evictions,
               (unsigned long)r->calls_total, (unsigned long)r->calls_second_half);
        for (int i = 0; i < GMLAKE_DC_COUNT; i++)
            printf("%s\"%s\":%lu", i ? "," : "", gmlake_devcall_name(i),
                   (unsigned long)s->device_calls[i]);
        printf("},\"device_seconds\":%.6f,\"device_seconds_second_half\":%.6f,"
               "\"replay_seconds\":%.3f}\n",
               r->device_seconds, r->device_seconds_second_half, r->seconds);
        return;
    }
    printf("%s [%s]\n", trace, policy);
    printf("  allocations %lu, frees %lu, failed %lu\n", (unsigned long)r->allocations,
           (unsigned long)r->frees, (unsigned long)r->failed);
    printf("  peak active %.1f MiB, peak reserved %.1f MiB, utilization %.2f%%\n",
           (double)s->peak_active_bytes / mib, (double)s->peak_reserved_bytes / mib,
           100.0 * s->utilization);
    printf("  stitches %lu, stitch reuses %lu, stitch evictions %lu\n", (unsigned long)s->stitches,
           (unsigned long)s->stitch_reuses, (unsigned long)s->stitch_evictions);
    printf("  device calls %lu (second half of the trace: %lu):", (unsigned long)r->calls_total,
           (unsigned long)r->calls_second_half);
    for (int i = 0; i < GMLAKE_DC_COUNT; i++)
        if (s->device_calls[i])
            printf(" %s %lu", gmlake_devcall_name(i), (unsigned long)s->device_calls[i]);
    printf("\n  estimated driver time %.3f ms (second half: %.3f ms)\n", 1e3 * r->device_seconds,
           1e3 * r->device_seconds_second_half);
    printf("  replay %.3f s\n", r->seconds);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'},       {"policy", required_argument, 0, 'p'},
        {"capacity", required_argument, 0, 'c'}, {"check", required_argument, 0, 'k'},
        {"set", required_argument, 0, 's'},  {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    bool json = false;
    const char *policies = "gmlake";
    size_t capacity = (size_t)140 << 30;
    long check = 0;
    int c;
    gml_config_defaults(&base);
    while ((c = getopt_long(argc, argv, "jp:c:k:s:h", opts, NULL)) != -1) {
        switch (c) {
        case 's': {
            char kv[256];
            snprintf(kv, sizeof kv, "%s", optarg);
            char *eq = strchr(kv, '=');
            if (!eq) {
                fprintf(stderr, "gmlake replay: --set '%s' is not KEY=VALUE\n", optarg);
                return 2;
            }
            *eq = 0;
            if (gml_config_set(&base, NULL, kv, eq + 1, "--set", stderr) != 0)
                return 2;
            break;
        }
        case 'j': json = true; break;
        case 'p': policies = optarg; break;
        case 'c':
            if (gml_parse_size(optarg, &capacity) || capacity < ((size_t)2 << 20)) {
                fprintf(stderr, "gmlake replay: --capacity '%s' is not a size of at least 2MiB\n", optarg);
                return 2;
            }
            capacity &= ~(((size_t)2 << 20) - 1);
            break;
        case 'k': {
            char *end;
            check = strtol(optarg, &end, 10);
            if (*end || check <= 0) {
                fprintf(stderr, "gmlake replay: --check '%s' is not a positive number\n", optarg);
                return 2;
            }
            break;
        }
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return 2;
    }
    char list[256];
    snprintf(list, sizeof list, "%s", policies);
    for (char *save, *pol = strtok_r(list, ",", &save); pol; pol = strtok_r(NULL, ",", &save)) {
        gml_pool_settings s;
        if (apply_policy(pol, &s)) {
            fprintf(stderr, "gmlake replay: unknown policy '%s' (known: gmlake, no-stitch, largest, bestfit)\n", pol);
            return 2;
        }
    }
    int status = 0;
    for (int i = optind; i < argc; i++) {
        char err[512];
        gml_trace t;
        if (gml_trace_load(argv[i], &t, err, sizeof err)) {
            fprintf(stderr, "gmlake replay: %s\n", err);
            status = 1;
            continue;
        }
        snprintf(list, sizeof list, "%s", policies);
        for (char *save, *pol = strtok_r(list, ",", &save); pol; pol = strtok_r(NULL, ",", &save)) {
            gml_pool_settings s;
            apply_policy(pol, &s);
            const char *why = NULL;
            gml_pool *p = gml_sim_pool_create(capacity, false, &s, &why);
            if (!p) {
                fprintf(stderr, "gmlake replay: %s\n", why);
                return 1;
            }
            gml_replay_result r;
            if (gml_replay(p, &t, (size_t)check, &r, err, sizeof err)) {
                fprintf(stderr, "gmlake replay: %s\n", err);
                status = 1;
            } else {
                report(base_name(argv[i]), pol, &r, json);
            }
            gml_sim_pool_destroy(p);
        }
        gml_trace_free(&t);
    }
    return status;
}
