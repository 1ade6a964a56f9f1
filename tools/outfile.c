/* outfile.c — all-or-nothing output files (contract in outfile.h). */
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* path with its folder resolved (malloc'ed), or NULL where the folder cannot be. */
static char *resolved(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path) + 1) : strdup(".");
    char *real = dir ? realpath(dir, NULL) : NULL, *out = NULL;
    if (real && asprintf(&out, "%s/%s", real, slash ? slash + 1 : path) < 0)
        out = NULL;
    free(dir);
    free(real);
    return out;
}

bool gml_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb)
        return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char *ra = resolved(a), *rb = resolved(b);
    bool same = ra && rb ? strcmp(ra, rb) == 0 : strcmp(a, b) == 0;
    free(ra);
    free(rb);
    return same;
}

/* Whether path is written where it leads rather than replaced by a new file: a symbolic link, or
 * a name that exists and is no regular file (a FIFO, a device).  A rename over it would replace
 * the link or the special file itself (as root, x.svg -> /dev/full became a regular file).  The
 * rule of _written_through in gmlake_import_snapshot.py. */
static bool written_through(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return false;
    return S_ISLNK(st.st_mode) || (stat(path, &st) == 0 && !S_ISREG(st.st_mode));
}

int gml_outfile_check(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (!*path || strlen(path) >= GML_OUTFILE_PATH_MAX) {
        snprintf(err, errlen, "%s: not a usable file name", path);
        return -1;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "%s: is a directory: name the file to write", path);
        return -1;
    }
    /* a new file: its folder must be there (said now, not once the work is done) */
    const char *slash = strrchr(path, '/');
    if (lstat(path, &st) != 0 && slash) {
        char dir[GML_OUTFILE_PATH_MAX];
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
        int e = stat(dir, &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
        if (e) {
            snprintf(err, errlen, "%s: cannot write: %s", path, strerror(e));
            return -1;
        }
    }
    return 0;
}

int gml_outfile_open(gml_outfile *o, const char *path, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    if (gml_outfile_check(path, err, errlen))
        return -1;
    snprintf(o->path, sizeof o->path, "%s", path);
    if (written_through(path)) {
        /* composed in memory; the destination is opened and written only at commit */
        o->through = true;
        o->f = open_memstream(&o->buf, &o->len);
        if (!o->f) {
            snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
            return -1;
        }
        return 0;
    }
    const char *slash = strrchr(path, '/');
    int dirlen = slash ? (int)(slash - path + 1) : 0;
    snprintf(o->tmp, sizeof o->tmp, "%.*s.%s.tmp-XXXXXX", dirlen, path, slash ? slash + 1 : path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        return -1;
    }
    o->f = fdopen(fd, "w");
    if (!o->f) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        close(fd);
        unlink(o->tmp);
        return -1;
    }
    return 0;
}

/* The text composed in memory written where the link or special file leads (opened O_WRONLY |
 * O_TRUNC, as it is: its mode and owner kept); 0 or an errno. */
static int commit_through(gml_outfile *o)
{
    int e = 0;
    if (fflush(o->f) != 0 || ferror(o->f))
        e = errno ? errno : ENOMEM;
    if (fclose(o->f) != 0 && !e)
        e = errno ? errno : ENOMEM;
    o->f = NULL;
    int fd = e ? -1 : open(o->path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (!e && fd < 0)
        e = errno;
    for (size_t done = 0; !e && done < o->len;) {
        ssize_t w = write(fd, o->buf + done, o->len - done);
        if (w < 0 && errno != EINTR)
            e = errno;
        else if (w > 0)
            done += (size_t)w;
    }
    if (fd >= 0 && close(fd) != 0 && !e && errno != EINTR)
        e = errno;
    free(o->buf);
    o->buf = NULL;
    return e;
}

int gml_outfile_commit(gml_outfile *o, char *err, size_t errlen)
{
    if (o->through) {
        int e = commit_through(o);
        if (e) {
            snprintf(err, errlen, "%s: cannot write: %s", o->path, strerror(e));
            return -1;
        }
        return 0;
    }
    mode_t mask = umask(0);
    umask(mask);
    int e = 0;
    if (fflush(o->f) != 0 || ferror(o->f))
        e = errno ? errno : EIO;
    else if (fchmod(fileno(o->f), 0666 & ~mask) != 0 || fsync(fileno(o->f)) != 0)
        e = errno;
    if (fclose(o->f) != 0 && !e)
        e = errno ? errno : EIO;
    o->f = NULL;
    if (!e && rename(o->tmp, o->path) != 0)
        e = errno;
    if (e) {
        snprintf(err, errlen, "%s: write failed: %s (nothing written)", o->path, strerror(e));
        unlink(o->tmp);
        return -1;
    }
    return 0;
}

void gml_outfile_abort(gml_outfile *o)
{
    if (o->f) {
        fclose(o->f);
        o->f = NULL;
    }
    if (o->through) {
        free(o->buf);
        o->buf = NULL;
    } else {
        unlink(o->tmp);
    }
}

static const char *stdout_prog;

static void stdout_at_exit(void)
{
    bool pending = __fpending(stdout) != 0, earlier = ferror(stdout) != 0;
    int e = 0;
    if (fflush(stdout) != 0)
        e = errno;
    errno = 0;
    if (fclose(stdout) != 0 && !e && (pending || errno != EBADF))
        e = errno ? errno : EIO;
    if (e || earlier) {
        fprintf(stderr, "%s: standard output: %s: the output is incomplete\n", stdout_prog,
                strerror(e ? e : EIO));
        _exit(1);
    }
}

void gml_stdout_checked(const char *prog)
{
    stdout_prog = prog;
    /* where no one watches it live, standard output is kept until exit (up to 64 KiB: a man page,
     * a replay's table), so that a failed write is seen there with its own reason (a full
     * device); one that fails earlier, past that size, is said as an I/O error */
    static char buf[64 << 10]; /* glibc takes a size only with a buffer; it lives to the exit */
    if (!isatty(STDOUT_FILENO))
        setvbuf(stdout, buf, _IOFBF, sizeof buf);
    atexit(stdout_at_exit);
}
