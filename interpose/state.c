/*
 * state.c — what every file of the preload layer reads, and nothing else: this thread's depth
 * inside gmlake (gml_depth), the process's rank and whether it is a child forked after gmlake
 * started, the file names derived from them, and the epoch of the program's streams
 * (gml_streams_epoch).  A leaf: it calls no other file of interpose/
 * (settings.c reads the rank when the settings load; lifecycle.c marks a forked child).
 *
 * File names (log_file, stats_file, trace_file): several processes (torchrun: one per GPU) share
 * one environment, hence one set of names:
 *  - %p is the pid, %r the rank (RANK, else LOCAL_RANK, else 0) and %% a percent sign;
 *  - when several processes run (WORLD_SIZE or LOCAL_WORLD_SIZE above 1) and stats_file or
 *    trace_file contains neither %p nor %r, each process writes its own: ".rank%r" is inserted
 *    before the file's extension (stats.json -> stats.rank3.json).  log_file is shared (log.c).
 * The expansion itself is config/filename.c's, the same one by which the settings refuse a
 * pattern that could expand past GML_PATH_MAX - 1 bytes.  They are opened by gml_fopen, and stats_file and trace_file claimed by gml_file_claim (one process a file).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "interpose.h"

GML_TLS int gml_depth;

static char rank[GML_RANK_MAX + 1]; /* RANK or LOCAL_RANK, "" when neither is set (or longer) */

void gml_rank_read(void)
{
    const char *r = getenv("RANK");
    if (!r || !*r)
        r = getenv("LOCAL_RANK");
    snprintf(rank, sizeof rank, "%s", r && strlen(r) < sizeof rank ? r : "");
}

const char *gml_rank(void) { return rank; }

_Atomic int gml_forked;

_Atomic uint64_t gml_streams_epoch;

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

bool gml_file_name(const char *pattern, bool per_process, char *out, size_t len)
{
    char pid[24];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    size_t n = gml_file_name_expand(pattern, per_process && several_processes(), pid,
                                    rank[0] ? rank : "0", out, len);
    return n < len; /* the settings refuse a pattern that could expand past GML_PATH_MAX - 1 */
}

FILE *gml_fopen(const char *path, const char *mode)
{
    char m[8];
    snprintf(m, sizeof m, "%se", mode);
    FILE *f = fopen(path, m);
    if (!f || fileno(f) > 2)
        return f;
    /* a standard stream the program closed: gmlake's file moves above it */
    int fd = fcntl(fileno(f), F_DUPFD_CLOEXEC, 3);
    FILE *g = fd >= 0 ? fdopen(fd, mode) : NULL;
    if (!g) {
        if (fd >= 0)
            close(fd);
        return f; /* no descriptor left above 2: as it is, rather than no file */
    }
    fclose(f);
    return g;
}

FILE *gml_file_claim(const char *path, bool *taken)
{
    *taken = false;
    FILE *f = gml_fopen(path, "a");
    if (f && flock(fileno(f), LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
        fclose(f);
        *taken = true;
        return NULL;
    }
    return f;
}

bool gml_file_restart(FILE *f)
{
    struct stat st;
    return fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || ftruncate(fileno(f), 0) == 0;
}
