/*
 * settings.c — the preload layer's settings and process lifecycle: the settings (loaded on the
 * first hook call, never in a constructor), whether a hook serves (gml_serving), the rank and
 * the file names derived from the settings, and what happens at exit and fork.
 *
 * File names (log_file, stats_file, trace_file): several processes (torchrun: one per GPU) share
 * one environment, hence one set of names:
 *  - %p is the pid, %r the rank (RANK, else LOCAL_RANK, else 0) and %% a percent sign;
 *  - when several processes run (WORLD_SIZE or LOCAL_WORLD_SIZE above 1) and stats_file or
 *    trace_file contains neither %p nor %r, each process writes its own: ".rank%r" is inserted
 *    before the file's extension (stats.json -> stats.rank3.json).  log_file is shared (log.c).
 *
 * Fork: CUDA cannot be used in a forked child (its calls fail there).  Handlers registered with
 * the settings take every gmlake lock around fork (pool creation, trace, each pool, the cuda
 * devices', log, the resolver's: the order in which threads take them), so that no lock is left held by a thread that does not
 * exist in the child; the child then serves nothing (gml_serving is false): its calls reach CUDA,
 * which fails them as it does for any child, and no pointer of the parent's pools is handed out
 * or freed there.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "stitch/registry.h"
#include "interpose.h"

__thread int gml_depth;

static gml_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;
static char rank[24]; /* RANK or LOCAL_RANK, "" when neither is set */
static _Atomic int forked; /* this process is a child forked after gmlake started */

const char *gml_rank(void) { return rank; }

bool gml_forked_child(void) { return atomic_load(&forked); }

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

/* The locks in the order every thread takes them: pool creation, trace (a free holds it across
 * the pool's lock: gml_trace_free_begin), each pool, the cuda devices' (a pool's driver calls
 * take them under its lock; a pool creation, under the creation lock), log, the resolver's (a
 * device resolves its driver functions under the creation lock; nothing is locked under them). */
static void fork_prepare(void)
{
    gml_pools_hold_creation(true);
    gml_trace_hold(true);
    for (int d = 0; d < GML_MAX_DEVICES; d++)
        if (gml_registry_get(d))
            gml_pool_hold(gml_registry_get(d), true);
    gml_cuda_fork_hold(true);
    gml_log_hold(true);
    gml_resolve_hold(true);
}

static void fork_release(void)
{
    gml_resolve_hold(false);
    gml_log_hold(false);
    gml_cuda_fork_hold(false);
    for (int d = GML_MAX_DEVICES - 1; d >= 0; d--)
        if (gml_registry_get(d))
            gml_pool_hold(gml_registry_get(d), false);
    gml_trace_hold(false);
    gml_pools_hold_creation(false);
}

static void fork_child(void)
{
    atomic_store(&forked, 1);
    fork_release();
}

/* Warnings about the settings are given once per process tree, not once per process (a pyenv
 * shim, torchrun, a compile worker pool all start processes that load the same settings): a
 * process that prints them sets GMLAKE_WARNED_CONFIG to a hash of what it printed; its children
 * inherit the variable and stay quiet about the same messages (other messages are printed, and
 * the variable then names those).  The variable is created, empty, by a constructor while the
 * process still has one thread, so that the first hook call only replaces its value: setenv
 * that adds a variable may move the environment under another thread's getenv. */
static char warned_inherited[24]; /* the variable's value as the process started */

__attribute__((constructor)) static void warned_marker(void)
{
    const char *v = getenv(GML_WARNED_ENV);
    snprintf(warned_inherited, sizeof warned_inherited, "%s", v && strlen(v) < sizeof warned_inherited ? v : "");
    if (v)
        return;
    gml_depth++;
    gml_config c;
    char *msgs = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&msgs, &len);
    if (m) {
        gml_config_load(&c, NULL, m);
        fclose(m);
        if (len || gml_config_check(&c, 0, (char[8]){0}, 8) != 0)
            setenv(GML_WARNED_ENV, "", 1);
        free(msgs);
    }
    gml_depth--;
}

/* FNV-1a of the text, as 16 hex digits. */
static void text_hash(const char *t, char out[17])
{
    unsigned long long h = 1469598103934665603ull;
    for (; t && *t; t++)
        h = (h ^ (unsigned char)*t) * 1099511628211ull;
    snprintf(out, 17, "%016llx", h);
}

static void load_cfg(void)
{
    gml_depth++;
    const char *r = getenv("RANK");
    if (!r || !*r)
        r = getenv("LOCAL_RANK");
    snprintf(rank, sizeof rank, "%s", r && strlen(r) < sizeof rank ? r : "");
    char *msgs = NULL;
    size_t msglen = 0;
    FILE *mf = open_memstream(&msgs, &msglen);
    gml_config_load(&cfg, NULL, mf);
    if (mf)
        fclose(mf);
    gml_log_open(cfg.log_level, cfg.log_file);
    char why[GML_PATH_MAX + 300] = "";
    bool off = cfg.enable && gml_config_check(&cfg, 0, why, sizeof why) != 0;
    /* the configuration's own messages (bad values, unknown keys), now that the log is open, unless
     * a parent process printed the same ones */
    char hash[17] = "";
    if ((msgs && *msgs) || off) {
        char *all = NULL;
        if (asprintf(&all, "%s%s", msgs ? msgs : "", why) >= 0) {
            text_hash(all, hash);
            free(all);
        }
    }
    bool quiet = hash[0] && strcmp(hash, warned_inherited) == 0;
    for (char *line = msgs, *next; !quiet && line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        gml_log_line(GML_LOG_WARN, "%s", strncmp(line, "gmlake: ", 8) == 0 ? line + 8 : line);
        if (!next)
            break;
    }
    free(msgs);
    if (off) {
        if (!quiet)
            gml_log_line(GML_LOG_ERROR, "invalid settings (%s): gmlake is OFF, every allocation passes "
                         "to CUDA (gmlake config --check shows the settings)", why);
        cfg.enable = false;
    }
    /* only replaces the value of the variable the constructor created (see warned_marker) */
    if (hash[0] && !quiet && getenv(GML_WARNED_ENV))
        setenv(GML_WARNED_ENV, hash, 1);
    if (cfg.enable) {
        gml_trace_setup(cfg.trace_file);
        gml_summary_setup(cfg.stats_file);
        pthread_atfork(fork_prepare, fork_release, fork_child);
    }
    gml_depth--;
}

const gml_config *gml_cfg(void)
{
    pthread_once(&cfg_once, load_cfg);
    return &cfg;
}

bool gml_serving(void)
{
    return gml_depth == 0 && gml_cfg()->enable && !atomic_load_explicit(&forked, memory_order_relaxed);
}
