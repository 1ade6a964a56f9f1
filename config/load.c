/* load.c — reading the configuration sources in order (contract in config.h).  This is the only
 * place in gmlake that reads GMLAKE_* environment variables. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"

extern char **environ;

__attribute__((format(printf, 4, 5))) static void note(gml_config_report *rep, FILE *msgs,
                                                        bool error, const char *fmt, ...)
{
    if (rep) {
        if (error)
            rep->errors++;
        else
            rep->warnings++;
    }
    FILE *out = msgs ? msgs : stderr;
    va_list ap;
    va_start(ap, fmt);
    fputs("gmlake: ", out);
    vfprintf(out, fmt, ap);
    fputc('\n', out);
    va_end(ap);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1]))
        *--e = 0;
    return s;
}

int gml_config_set(gml_config *c, gml_config_report *rep, const char *key, const char *value,
                   const char *where, FILE *msgs)
{
    int i = gml_option_find(key);
    if (i < 0) {
        const char *near = gml_config_closest_key(key);
        if (near) {
            note(rep, msgs, true, "%s: unknown key '%s'; did you mean '%s'?", where, key, near);
            return -1;
        }
        char known[512];
        size_t n = 0;
        for (int k = 0; k < gml_option_count && n < sizeof known; k++)
            n += (size_t)snprintf(known + n, sizeof known - n, "%s%s", k ? ", " : "", gml_options[k].key);
        note(rep, msgs, true, "%s: unknown key '%s' (known keys: %s)", where, key, known);
        return -1;
    }
    char acc[200], text[GML_PATH_MAX + 64];
    const char *why = NULL;
    /* one rule for blanks, every type alike: those around a value are not part of it */
    snprintf(text, sizeof text, "%s", value);
    char *v = trim(text);
    if (strlen(value) >= sizeof text) {
        why = "too long";
        gml_option_accepted(&gml_options[i], acc, sizeof acc);
    }
    if (why || gml_option_parse(c, i, v, &why, acc, sizeof acc) != 0) {
        note(rep, msgs, true, "%s: %s = '%s' is not valid (%s); accepted: %s (the setting keeps its "
             "previous value)", where, key, value, why ? why : "", acc);
        return -1;
    }
    if (rep)
        snprintf(rep->source[i], GML_SOURCE_MAX, "%s", where);
    return 0;
}


void gml_config_apply_text(gml_config *c, gml_config_report *rep, const char *text, size_t len,
                           const char *origin, FILE *msgs)
{
    size_t pos = 0;
    unsigned line = 0;
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        pos = 3; /* a UTF-8 byte-order mark (editors on Windows write one) is not part of the text */
    while (pos < len) {
        line++;
        size_t end = pos;
        while (end < len && text[end] != '\n')
            end++;
        char buf[2048], where[GML_SOURCE_MAX + 32];
        snprintf(where, sizeof where, "%s:%u", origin, line);
        size_t n = end - pos;
        if (memchr(text + pos, 0, n)) {
            note(rep, msgs, true, "%s: a NUL byte in the line, ignored", where);
            pos = end + 1;
            continue;
        }
        /* a comment: '#' at the start of the line or after a blank; inside a value it is kept.
         * The limit is on what the line says: its comment and the blanks before it are not part
         * of that (a long comment line, a setting with a long comment after it) */
        const char *l = text + pos;
        for (size_t k = 0; k < n; k++)
            if (l[k] == '#' && (k == 0 || isspace((unsigned char)l[k - 1]))) {
                n = k;
                break;
            }
        while (n > 0 && isspace((unsigned char)l[n - 1]))
            n--;
        if (n >= sizeof buf) {
            note(rep, msgs, true, "%s: line longer than %s bytes, ignored", where, "2047");
            pos = end + 1;
            continue;
        }
        memcpy(buf, l, n);
        buf[n] = 0;
        pos = end + 1;
        char *s = trim(buf);
        if (!*s)
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            note(rep, msgs, true, "%s: expected 'key = value', found '%s'", where, s);
            continue;
        }
        *eq = 0;
        char *key = trim(s), *value = trim(eq + 1);
        if (!*key) {
            note(rep, msgs, true, "%s: a value with no key", where);
            continue;
        }
        gml_config_set(c, rep, key, value, where, msgs);
    }
}

/* Reads a configuration file: opened without blocking (a FIFO or a device would block a plain
 * open or read for ever), then fstat on the descriptor itself (no race between a check and the
 * open): only a regular file of at most GML_CONFIG_FILE_MAX bytes is read. */
static int read_file(gml_config *c, gml_config_report *rep, const char *path, bool must_exist,
                     FILE *msgs)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        if (!must_exist && errno == ENOENT)
            return GML_FILE_ABSENT;
        note(rep, msgs, true, "%s: cannot read the configuration file: %s", path, strerror(errno));
        return GML_FILE_REFUSED;
    }
    int state = GML_FILE_REFUSED;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        note(rep, msgs, true, "%s: cannot read the configuration file: %s", path, strerror(errno));
    } else if (S_ISDIR(st.st_mode)) {
        note(rep, msgs, true, "%s: is a directory, not a configuration file; ignored", path);
    } else if (!S_ISREG(st.st_mode)) {
        const char *kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                           : S_ISSOCK(st.st_mode) ? "a socket"
                           : S_ISCHR(st.st_mode)  ? "a character device"
                           : S_ISBLK(st.st_mode)  ? "a block device"
                                                  : "not a file";
        note(rep, msgs, true, "%s: not a regular file (%s); ignored", path, kind);
    } else {
        /* one byte more than the limit tells a file that grew past it since fstat */
        size_t cap = st.st_size > GML_CONFIG_FILE_MAX ? 0 : (size_t)GML_CONFIG_FILE_MAX + 1;
        char *text = cap ? malloc(cap) : NULL;
        size_t len = 0;
        ssize_t got = 0;
        while (text && len < cap && ((got = read(fd, text + len, cap - len)) > 0 || (got < 0 && errno == EINTR)))
            len += got > 0 ? (size_t)got : 0;
        if (!cap || len > GML_CONFIG_FILE_MAX)
            note(rep, msgs, true, "%s: %lld bytes, more than the limit of %d bytes (1 MiB); ignored", path,
                 cap ? (long long)len : (long long)st.st_size, GML_CONFIG_FILE_MAX);
        else if (!text)
            note(rep, msgs, true, "%s: out of memory reading the configuration file", path);
        else if (got < 0)
            note(rep, msgs, true, "%s: read error: %s", path, strerror(errno));
        else {
            gml_config_apply_text(c, rep, text, len, path, msgs);
            state = GML_FILE_READ;
        }
        free(text);
    }
    close(fd);
    return state;
}

/* read_file, the file and what became of it noted in rep. */
static void apply_file(gml_config *c, gml_config_report *rep, const char *path, bool must_exist,
                       FILE *msgs)
{
    int state = read_file(c, rep, path, must_exist, msgs);
    if (rep && rep->files < GML_CONFIG_FILES) {
        snprintf(rep->file[rep->files], sizeof rep->file[0], "%s", path);
        rep->file_state[rep->files++] = state;
    }
}

/* The environment: every variable whose name starts with GMLAKE_ (in any case) either names a
 * setting by the one rule of names.c (gml_option_of_env), or is one of gmlake's other variables,
 * or is reported as ignored, with the closest name: a typo or a wrong case would otherwise be
 * ignored without a word.  GMLake's original names (aliases) follow; GMLAKE_<KEY> wins. */
static void apply_environment(gml_config *c, gml_config_report *rep, FILE *msgs)
{
    const char *value[GML_OPTION_MAX] = {0};
    for (char **e = environ; e && *e; e++) {
        if (!gml_env_is_gmlake(*e))
            continue;
        const char *eq = strchr(*e, '=');
        size_t n = eq ? (size_t)(eq - *e) : strlen(*e);
        char name[96];
        if (n >= sizeof name)
            n = sizeof name - 1;
        memcpy(name, *e, n);
        name[n] = 0;
        if (gml_env_not_a_setting(name))
            continue;
        int i = gml_option_of_env(name);
        if (i >= 0) {
            value[i] = eq ? eq + 1 : "";
            continue;
        }
        char near[96], hint[128] = "";
        gml_env_closest(name, near, sizeof near);
        if (near[0])
            snprintf(hint, sizeof hint, "; did you mean %s?", near);
        note(rep, msgs, true, "environment %s: no such setting, ignored%s (gmlake config --example "
             "lists the keys; variables are GMLAKE_ and the key in upper case)", name, hint);
    }
    for (int i = 0; i < gml_option_count; i++) {
        const gml_option *o = &gml_options[i];
        char var[96], where[128];
        gml_option_env_name(i, var, sizeof var);
        const char *v = value[i];
        const char *a = o->alias ? getenv(o->alias) : NULL;
        if (v && a)
            note(rep, msgs, false, "both %s and %s are set; %s=%s wins", var, o->alias, var, v);
        if (v) {
            snprintf(where, sizeof where, "environment %s", var);
            gml_config_set(c, rep, o->key, v, where, msgs);
        } else if (a) {
            snprintf(where, sizeof where, "environment %s", o->alias);
            gml_config_set(c, rep, o->key, a, where, msgs);
        }
    }
}

/* path = dir + rest, the configuration file found through the variable var (GMLAKE_SYSCONFDIR,
 * XDG_CONFIG_HOME, HOME); true where it fits in len bytes.  One that does not is an error naming
 * the variable, never cut short: the cut path would name no file, or another one, and the user's
 * file would be skipped without a word. */
static bool config_path(char *path, size_t len, const char *var, const char *dir, const char *rest,
                        gml_config_report *rep, FILE *msgs)
{
    size_t d = strlen(dir), n = d + strlen(rest);
    if (n < len) {
        memcpy(path, dir, d);
        memcpy(path + d, rest, n - d + 1);
        return true;
    }
    note(rep, msgs, true, "environment %s: the configuration file %s%s is %zu bytes long, more than "
         "the %zu a configuration file's path may have; not read", var, dir, rest, n, len - 1);
    return false;
}

void gml_config_load(gml_config *c, gml_config_report *rep, FILE *msgs)
{
    gml_config_defaults(c);
    if (rep) {
        memset(rep, 0, sizeof *rep);
        for (int i = 0; i < gml_option_count; i++)
            snprintf(rep->source[i], GML_SOURCE_MAX, "default");
    }
    char path[GML_PATH_MAX + 64];
    const char *etc = getenv("GMLAKE_SYSCONFDIR");
    if (config_path(path, sizeof path, "GMLAKE_SYSCONFDIR", etc && *etc ? etc : GML_SYSCONFDIR,
                    "/gmlake.conf", rep, msgs))
        apply_file(c, rep, path, false, msgs);
    const char *xdg = getenv("XDG_CONFIG_HOME"), *home = getenv("HOME");
    if (xdg && *xdg) {
        if (config_path(path, sizeof path, "XDG_CONFIG_HOME", xdg, "/gmlake/gmlake.conf", rep, msgs))
            apply_file(c, rep, path, false, msgs);
    } else if (home && *home) {
        if (config_path(path, sizeof path, "HOME", home, "/.config/gmlake/gmlake.conf", rep, msgs))
            apply_file(c, rep, path, false, msgs);
    }
    const char *named = getenv("GMLAKE_CONFIG");
    if (named && *named)
        apply_file(c, rep, named, true, msgs);
    apply_environment(c, rep, msgs);
}

void gml_config_print(FILE *out, const gml_config *c, const gml_config_report *rep)
{
    for (int i = 0; i < gml_option_count; i++) {
        char v[GML_PATH_MAX + 8];
        gml_config_value_text(c, i, v, sizeof v);
        fprintf(out, "%-18s = %-12s # %s\n", gml_options[i].key, v, rep ? rep->source[i] : "");
    }
    if (!rep)
        return;
    static const char *const state[] = {"not there", "read", "not read: see above"};
    fprintf(out, "# files, later ones winning (then GMLAKE_<KEY> variables):");
    for (int i = 0; i < rep->files; i++)
        fprintf(out, "%s %s (%s)", i ? "," : "", rep->file[i], state[rep->file_state[i]]);
    fprintf(out, "%s\n", rep->files ? "" : " none");
}
