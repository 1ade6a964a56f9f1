/*
 * settings.c — the preload layer's settings: loaded once (gml_cfg: on the first hook call, never
 * in a constructor), with the log opened at their level and file and their own messages (bad
 * values, unknown keys, settings the pool would refuse: gmlake is then off) logged once per
 * process tree; and gml_log, a log line once the settings are loaded.  Below it: log.c (lines)
 * and state.c (depth, rank, file names); what else starts with the settings (trace, exit summary,
 * fork handlers) is lifecycle.c's, above every file it starts.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interpose.h"

static gml_config cfg;
static pthread_once_t cfg_once = PTHREAD_ONCE_INIT;

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
    gml_rank_read();
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
    gml_depth--;
}

const gml_config *gml_cfg(void)
{
    pthread_once(&cfg_once, load_cfg);
    return &cfg;
}

void gml_log(int level, const char *fmt, ...)
{
    gml_cfg();
    va_list ap;
    va_start(ap, fmt);
    gml_log_vline(level, fmt, ap);
    va_end(ap);
}
