/*
 * config.h — gmlake's settings and where they come from.
 *
 * Sources, later ones winning:  built-in defaults < SYSCONFDIR/gmlake.conf (meson's sysconfdir
 *   of the build: /etc for --prefix=/usr, PREFIX/etc otherwise)
 *   < $XDG_CONFIG_HOME/gmlake/gmlake.conf (default ~/.config/gmlake/gmlake.conf)
 *   < the file named by GMLAKE_CONFIG < environment variables.
 * Files: regular files of at most 1 MiB (GML_CONFIG_FILE_MAX bytes); a FIFO, device or directory
 *   is refused without being read (opened non-blocking, checked with fstat).  A UTF-8 byte-order
 *   mark at the start is skipped.  A system or user file whose path (from GMLAKE_SYSCONFDIR,
 *   XDG_CONFIG_HOME or HOME) is GML_PATH_MAX + 64 bytes or longer is an error naming the
 *   variable, never read by a path cut short.  `key = value` lines and blank lines.  A comment starts with `#` at the start of a line
 *   (after optional blanks) or with a `#` that follows a blank; a `#` inside a value
 *   (`log_file = /tmp/run#3.log`) is part of it.
 * Environment: one rule for names: a setting's variable is GMLAKE_ and its key in upper case,
 *   exactly (GMLAKE_STITCH; GMLAKE_stitch is not it).  GMLake's original names (vmmDefragment,
 *   fragLimit, reuseLimit, defragLevel, autoGC) are aliases, spelt exactly so; when both are set,
 *   GMLAKE_<KEY> wins and a warning says so.  GMLAKE_SYSCONFDIR replaces SYSCONFDIR (tests,
 *   relocated installs), GMLAKE_CONFIG names a file; GMLAKE_WARNED_CONFIG
 *   (interpose/settings.c), GMLAKE_PYTORCH_ROUTE and GMLAKE_WARNED_ROUTE (interpose/pytorch_env.c)
 *   are the library's own (names.c, gml_env_not_a_setting); any other variable whose name starts with GMLAKE_ in any case is an
 *   error, reported with the closest name (a typo or a wrong case).  One function decides
 *   (gml_option_of_env, names.c), for the reader and for the check alike.
 * Values: blanks around a value are not part of it, for every type and every source.
 * Validity of each value alone is the table's, and a bad value is reported with the field and why
 *   (negative, too large (overflow), not a number, above the allowed range...).  The one
 *   validation of a whole configuration is gml_config_check (check.c): every value in its range
 *   and the rules between settings (chunk_size a power of two, small_limit <= chunk_size), with
 *   one answer whether a device's granularity is known or not; `gmlake config --check` fails on
 *   it, the library logs an error and stays off, replay refuses to run.
 *
 * One table (options.c) drives parsing, validation, printing, the example file and the docs.
 * Bad input (unknown key, malformed or out-of-range value, unreadable file) gives one message that
 * names the file and line or the variable, the key and the accepted values; that setting keeps its
 * previous value and loading goes on.  Loading never fails as a whole.
 */
#ifndef GML_CONFIG_H
#define GML_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

#include "settings.h"

enum gml_log_level { GML_LOG_ERROR = 0, GML_LOG_WARN, GML_LOG_INFO, GML_LOG_DEBUG };

#define GML_PATH_MAX 1024

#ifndef GML_SYSCONFDIR /* set by meson: prefix / sysconfdir */
#define GML_SYSCONFDIR "/etc"
#endif

typedef struct gml_config {
    bool enable;
    gml_pool_settings pool;
    int log_level;
    char log_file[GML_PATH_MAX];
    char stats_file[GML_PATH_MAX];
    char trace_file[GML_PATH_MAX];
    bool pytorch_backend;
} gml_config;

enum gml_opt_type { GML_OPT_BOOL, GML_OPT_SIZE, GML_OPT_DOUBLE, GML_OPT_INT, GML_OPT_UINT, GML_OPT_ENUM, GML_OPT_PATH };

typedef struct gml_option {
    const char *key;        /* file key; GMLAKE_<KEY> in the environment */
    const char *alias;      /* GMLake's environment name, or NULL */
    int type;
    const char *def;        /* default, as text */
    double min, max;        /* INT / DOUBLE / SIZE range (max 0: none) */
    const char *const *choices; /* ENUM: NULL-terminated names, index is the value */
    const char *help;
} gml_option;

extern const gml_option gml_options[];
extern const int gml_option_count;

#define GML_SOURCE_MAX 160
#define GML_CONFIG_FILE_MAX 1048576 /* the largest configuration file read: 1 MiB */

#define GML_OPTION_MAX 32 /* rows the table may have */
/* The variable in which the library notes the configuration messages it has printed (a hash), so
 * that the processes it starts stay silent about the same ones (interpose/settings.c). */
#define GML_WARNED_ENV "GMLAKE_WARNED_CONFIG"
/* Set by libgmlake where PyTorch's backend is cudaMallocAsync (set by it, or found set): the
 * variable that names it (pytorch_env.c). */
#define GML_TORCH_ROUTE_ENV "GMLAKE_PYTORCH_ROUTE"
/* Set by libgmlake where it warned that PyTorch keeps its own allocator: VAR=VALUE of the setting
 * it warned about, so that the processes it starts do not repeat it (pytorch_env.c). */
#define GML_TORCH_WARNED_ENV "GMLAKE_WARNED_ROUTE"

/* The files a load looks for: the system file, the user's, the one GMLAKE_CONFIG names. */
#define GML_CONFIG_FILES 3
enum { GML_FILE_ABSENT, GML_FILE_READ, GML_FILE_REFUSED }; /* refused: a message says why */

typedef struct gml_config_report {
    char source[GML_OPTION_MAX][GML_SOURCE_MAX]; /* per option (index in gml_options): where its value came from */
    int errors;                      /* bad inputs seen */
    int warnings;
    int files;                       /* the files looked for, in order, and what became of each */
    char file[GML_CONFIG_FILES][GML_PATH_MAX + 64];
    int file_state[GML_CONFIG_FILES];
} gml_config_report;

/* Fills c with the defaults. */
void gml_config_defaults(gml_config *c);
/* Loads every source into c; messages go to `msgs` (NULL: stderr), one line each, prefixed
 * "gmlake: ".  rep (may be NULL) receives the sources and counts. */
void gml_config_load(gml_config *c, gml_config_report *rep, FILE *msgs);
/* Applies `key = value` text (a file's content); `origin` names it in messages. */
void gml_config_apply_text(gml_config *c, gml_config_report *rep, const char *text, size_t len,
                           const char *origin, FILE *msgs);
/* Sets one key from text; 0 or -1 with a message naming `where`. */
int gml_config_set(gml_config *c, gml_config_report *rep, const char *key, const char *value,
                   const char *where, FILE *msgs);
/* Parses `text` for option i into c (internal to config/): 0, or -1 with *why (may be NULL)
 * saying what is wrong (negative, too large (overflow), not a number, above the allowed range...)
 * and *acc the accepted values. */
int gml_option_parse(gml_config *c, int i, const char *text, const char **why, char *acc,
                     size_t acclen);
/* Whether option i's value in c is one the table accepts: NULL, or why not. */
const char *gml_option_check(const gml_config *c, int i);
/* Whether option i is one of the pool's settings (gml_config.pool), which a replay uses; the others
 * are the library's (enable, logs, statistics, trace, PyTorch's backend). */
bool gml_option_is_pool(int i);
/* check.c: the one validation of a configuration, shared by `gmlake config --check`, the library
 * and replay: every value in its table range, and the rules between settings (chunk_size a power
 * of two, small_limit <= chunk_size, ...), the same whether the device's granularity is known
 * (the pool's chunk is chunk_size rounded up to it) or not (0).  0, or -1 with `why` naming the
 * setting and the reason. */
int gml_config_check(const gml_config *c, size_t granularity, char *why, size_t len);
/* gml_config_check, printing "PREFIX: invalid settings: WHY" to msgs when it fails. */
int gml_config_check_print(const gml_config *c, size_t granularity, const char *prefix, FILE *msgs);
/* `key = value  # source` for every option, then a comment naming the files looked for. */
void gml_config_print(FILE *out, const gml_config *c, const gml_config_report *rep);
/* The current value of option i as text. */
void gml_config_value_text(const gml_config *c, int i, char *buf, size_t len);
/* What option o accepts, in words (for messages and the docs). */
void gml_option_accepted(const gml_option *o, char *buf, size_t len);

/* names.c: the names of settings outside a file. */
/* The option whose key is exactly `key`, or -1. */
int gml_option_find(const char *key);
/* The environment variable of option i (GMLAKE_<KEY>) into buf. */
void gml_option_env_name(int i, char *buf, size_t len);
/* The option whose variable is exactly `name` (the one rule), or -1. */
int gml_option_of_env(const char *name);
/* Whether `name` starts with GMLAKE_ in any case (the variables the check looks at). */
bool gml_env_is_gmlake(const char *name);
/* Whether `name` is one of gmlake's variables that are not settings (GMLAKE_CONFIG, ...). */
bool gml_env_not_a_setting(const char *name);
/* The known key closest to `key` (a likely typo; case is ignored), or NULL. */
const char *gml_config_closest_key(const char *key);
/* The variable closest to a GMLAKE_* name that names no setting, or "" (into buf). */
void gml_env_closest(const char *name, char *buf, size_t len);

/* filename.c: the file names log_file, stats_file and trace_file expand to.  %p is the pid, %r
 * the rank (RANK, else LOCAL_RANK, else 0; at most GML_RANK_MAX characters) and %% a percent
 * sign; with add_rank and a pattern that names neither %p nor %r, ".rank%r" goes before the
 * extension of the file's name (several processes: interpose/state.c).  The expansion into out
 * (as much as fits in len bytes, NUL included); its whole length, as snprintf. */
#define GML_RANK_MAX 23
size_t gml_file_name_expand(const char *pattern, bool add_rank, const char *pid, const char *rank,
                            char *out, size_t len);
/* Where a name's suffix goes (".rank3", a trace's ".dev1"): at the extension of the file's name
 * (its last dot, unless the name starts with its only dot), else at its end. */
const char *gml_file_name_ext(const char *name);
/* The longest a pattern can expand to (a 10-digit pid, a GML_RANK_MAX-character rank, ".rank%r"
 * added where add_rank: stats_file and trace_file, not log_file, which every process shares): a
 * path setting is refused when this is GML_PATH_MAX or more (options.c). */
size_t gml_file_name_longest(const char *pattern, bool add_rank);

/* docs.c: texts generated from the table. */
/* A commented example file with every key at its default. */
void gml_config_print_example(FILE *out);
/* A man page, gmlake.conf(5), generated from the table. */
void gml_config_print_man(FILE *out, const char *version);

#endif /* GML_CONFIG_H */
