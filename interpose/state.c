/*
 * state.c — what every file of the preload layer reads, and nothing else: this thread's depth
 * inside gmlake (gml_depth), the process's rank and whether it is a child forked after gmlake
 * started, and the file names derived from them.  A leaf: it calls no other file of interpose/
 * (settings.c reads the rank when the settings load; lifecycle.c marks a forked child).
 *
 * File names (log_file, stats_file, trace_file): several processes (torchrun: one per GPU) share
 * one environment, hence one set of names:
 *  - %p is the pid, %r the rank (RANK, else LOCAL_RANK, else 0) and %% a percent sign;
 *  - when several processes run (WORLD_SIZE or LOCAL_WORLD_SIZE above 1) and stats_file or
 *    trace_file contains neither %p nor %r, each process writes its own: ".rank%r" is inserted
 *    before the file's extension (stats.json -> stats.rank3.json).  log_file is shared (log.c).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "interpose.h"

GML_TLS int gml_depth;

static char rank[24]; /* RANK or LOCAL_RANK, "" when neither is set */

void gml_rank_read(void)
{
    const char *r = getenv("RANK");
    if (!r || !*r)
        r = getenv("LOCAL_RANK");
    snprintf(rank, sizeof rank, "%s", r && strlen(r) < sizeof rank ? r : "");
}

const char *gml_rank(void) { return rank; }

_Atomic int gml_forked;

static bool several_processes(void)
{
    const char *vars[] = {"WORLD_SIZE", "LOCAL_WORLD_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1)
            return true;
    }
    return false;
}

void gml_file_name(const char *pattern, bool per_process, char *out, size_t len)
{
    char pat[GML_PATH_MAX + 16];
    snprintf(pat, sizeof pat, "%s", pattern);
    if (per_process && several_processes() && !strstr(pat, "%p") && !strstr(pat, "%r")) {
        const char *base = strrchr(pat, '/');
        char *dot = strrchr(base ? base : pat, '.');
        if (!dot || dot == (base ? base + 1 : pat))
            dot = pat + strlen(pat);
        char ext[GML_PATH_MAX];
        snprintf(ext, sizeof ext, "%s", dot);
        snprintf(dot, sizeof pat - (size_t)(dot - pat), ".rank%%r%s", ext);
    }
    size_t n = 0;
    for (const char *c = pat; *c && n + 1 < len; c++) {
        char num[32] = "";
        if (c[0] == '%' && c[1] == 'p')
            snprintf(num, sizeof num, "%ld", (long)getpid());
        else if (c[0] == '%' && c[1] == 'r')
            snprintf(num, sizeof num, "%s", rank[0] ? rank : "0");
        else if (c[0] == '%' && c[1] == '%')
            snprintf(num, sizeof num, "%%");
        if (!num[0]) {
            out[n++] = *c;
            continue;
        }
        n += (size_t)snprintf(out + n, len - n, "%s", num);
        if (n >= len)
            n = len - 1;
        c++;
    }
    out[n] = 0;
}
