/* outfile.c — all-or-nothing output files (contract in outfile.h). */
#include "outfile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int gml_outfile_open(gml_outfile *o, const char *path, char *err, size_t errlen)
{
    memset(o, 0, sizeof *o);
    if (!*path || strlen(path) >= sizeof o->path) {
        snprintf(err, errlen, "%s: not a usable file name", path);
        return -1;
    }
    snprintf(o->path, sizeof o->path, "%s", path);
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

int gml_outfile_commit(gml_outfile *o, char *err, size_t errlen)
{
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
    unlink(o->tmp);
}
