/*
 * outfile.h — a file the tools write, all or nothing: the text goes to a temporary file in the
 * same directory, which replaces PATH (rename) only once everything is written and flushed.  A
 * run that fails (a full disk, an error on the way) removes the temporary file and leaves PATH
 * as it was: never half written.  A PATH that is a symbolic link or exists and is no regular file
 * (a FIFO, a device) is written through instead, never replaced: the text is composed in memory
 * and, at commit, written where PATH leads (opened O_WRONLY|O_TRUNC|O_CREAT), as the snapshot
 * tools do (_written_through in gmlake_import_snapshot.py).  Used by plot.c (replay --plot); a
 * file of its own so that any tool that writes a file can use it.  Standard output, which cannot be written that way, is
 * checked at exit instead (gml_stdout_checked: gmlake-replay, gmlake-config).
 */
#ifndef GML_OUTFILE_H
#define GML_OUTFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The longest destination path plus its NUL (Linux's PATH_MAX): a longer one is refused, never
 * cut short. */
#define GML_OUTFILE_PATH_MAX 4096

typedef struct gml_outfile {
    FILE *f;           /* write here */
    char path[GML_OUTFILE_PATH_MAX];   /* the destination */
    char tmp[GML_OUTFILE_PATH_MAX + 32];
    bool through;      /* a link or a special file: written through at commit, no tmp */
    char *buf;         /* ... the text composed till then (open_memstream) */
    size_t len;
} gml_outfile;

/* Whether paths a and b name the same file, so that a tool never writes over one of its inputs:
 * the same device and inode where both exist (links and other spellings included), neither
 * where only one does, else the same path once its folder is resolved (realpath). */
bool gml_same_file(const char *a, const char *b);
/* Whether path can be an output at all, checked before any work: 0, or -1 with "PATH: why" in
 * err (an empty name, one of GML_OUTFILE_PATH_MAX bytes or more, a directory, a new file in a
 * folder that is not there). */
int gml_outfile_check(const char *path, char *err, size_t errlen);
/* Opens a temporary file beside path (the text kept in memory where path is written through);
 * 0, or -1 with "PATH: why" in err. */
int gml_outfile_open(gml_outfile *o, const char *path, char *err, size_t errlen);
/* Flushes, syncs and closes the temporary file and renames it over the destination (with the
 * permissions a new file would get), or writes the text through a link or special file; 0, or
 * -1 with "PATH: why" in err and nothing left behind (a file written through may be cut short:
 * it cannot be replaced whole). */
int gml_outfile_commit(gml_outfile *o, char *err, size_t errlen);
/* Closes and removes the temporary file (or drops the text in memory). */
void gml_outfile_abort(gml_outfile *o);

/* Checks standard output at the tool's exit (atexit): where what the tool printed there could not
 * all be written (a full device, a closed descriptor), says "PROG: standard output: why: the
 * output is incomplete" on stderr and exits 1, so that a lost report never ends with status 0.
 * A closed standard output the tool printed nothing to is no error.  Where standard output is no
 * terminal it is buffered up to 64 KiB, so that a failure is seen at exit with its own reason.
 * Call once, first in main, before anything is printed. */
void gml_stdout_checked(const char *prog);

#endif /* GML_OUTFILE_H */
