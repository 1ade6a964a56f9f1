/*
 * log.c — gmlake's log: one whole line per call, to log_file (appended; shared by the processes
 * of a job, each line naming its process) or standard error.  Lines start "gmlake[PID]: ", or
 * "gmlake[PID rank R]: " when RANK or LOCAL_RANK is set.  After LOG_BUDGET errors and warnings,
 * further ones are only counted (the count is logged at exit by summary.c).  The mechanism only:
 * settings.c opens it at the settings' level and file, and its gml_log waits for them first.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>

#include "interpose.h"

enum { LOG_BUDGET = 100 }; /* errors and warnings after this many are counted, not printed */
static FILE *log_out;
static int log_level = GML_LOG_WARN;
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static unsigned long suppressed;

static void vlog(int level, const char *fmt, va_list ap)
{
    static unsigned long printed;
    if (level > log_level)
        return;
    pthread_mutex_lock(&log_mu);
    FILE *out = log_out ? log_out : stderr;
    char who[64];
    const char *rank = gml_rank();
    if (rank[0])
        snprintf(who, sizeof who, "gmlake[%ld rank %s]: ", (long)getpid(), rank);
    else
        snprintf(who, sizeof who, "gmlake[%ld]: ", (long)getpid());
    if (level <= GML_LOG_WARN && ++printed > LOG_BUDGET) {
        if (suppressed++ == 0)
            fprintf(out, "%smore than %d errors and warnings; further ones are only counted\n",
                    who, LOG_BUDGET);
        pthread_mutex_unlock(&log_mu);
        return;
    }
    fputs(who, out);
    vfprintf(out, fmt, ap);
    fputc('\n', out);
    fflush(out);
    pthread_mutex_unlock(&log_mu);
}

void gml_log_line(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(level, fmt, ap);
    va_end(ap);
}

void gml_log_vline(int level, const char *fmt, va_list ap) { vlog(level, fmt, ap); }

void gml_log_open(int level, const char *pattern)
{
    log_level = level;
    if (!pattern[0])
        return;
    char path[GML_PATH_MAX];
    if (!gml_file_name(pattern, false, path, sizeof path))
        gml_log_line(GML_LOG_ERROR, "log_file %s is too long once expanded; logging to standard "
                     "error", pattern);
    else if (!(log_out = gml_fopen(path, "a")))
        gml_log_line(GML_LOG_ERROR, "cannot open log_file %s; logging to standard error", path);
}

unsigned long gml_log_suppressed(void) { return suppressed; }

void gml_log_hold(bool hold)
{
    if (hold)
        pthread_mutex_lock(&log_mu);
    else
        pthread_mutex_unlock(&log_mu);
}
