/*
 * config.h — gmlake's settings and where they come from.
 *
 * Sources, later ones winning:  built-in defaults < SYSCONFDIR/gmlake.conf (meson's sysconfdir
 *   of the build: /etc for --prefix=/usr, PREFIX/etc otherwise)
 *   < $XDG_CONFIG_HOME/gmlake/gmlake.conf (default ~/.config/gmlake/gmlake.conf)
 *   < the file named by GMLAKE_CONFIG < environment variables.
 * Files: `key = value` lines and blank lines.  A comment starts with `#` at the start of a line
 *   (after optional blanks) or with a `#` that follows a blank; a `#` inside a value
 *   (`log_file = /tmp/run#3.log`) is part of it.
 * Environment: GMLAKE_<KEY> (upper case) for every key, and GMLake's original names
 *   (vmmDefragment, fragLimit, reuseLimit, defragLevel, autoGC) as aliases; when both are set,
 *   GMLAKE_<KEY> wins and a warning says so.  GMLAKE_SYSCONFDIR replaces SYSCONFDIR (tests,
 *   relocated installs), GMLAKE_CONFIG names a file; any other GMLAKE_* variable is an error
 *   (a typo: the message suggests the closest key).
 * Validity of each value alone is the table's; rules between settings (small_limit <= chunk_size,
 *   chunk_size a power of two) are the pool's own (gml_pool_settings_check), which callers apply
 *   to the loaded settings: `gmlake config --check` fails, the library logs an error and stays off.
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

typedef struct gml_config_report {
    char source[32][GML_SOURCE_MAX]; /* per option (index in gml_options): where its value came from */
    int errors;                      /* bad inputs seen */
    int warnings;
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
/* Parses `text` for option i into c (internal to config/): 0, or -1 with the accepted values. */
int gml_option_parse(gml_config *c, int i, const char *text, char *acc, size_t acclen);
/* `key = value  # source` for every option. */
void gml_config_print(FILE *out, const gml_config *c, const gml_config_report *rep);
/* A commented example file with every key at its default. */
void gml_config_print_example(FILE *out);
/* The known key closest to `key` (a likely typo), or NULL. */
const char *gml_config_closest_key(const char *key);
/* The environment variable of option i (GMLAKE_<KEY>) into buf. */
void gml_option_env_name(int i, char *buf, size_t len);
/* A man page, gmlake.conf(5), generated from the table. */
void gml_config_print_man(FILE *out, const char *version);
/* The current value of option i as text. */
void gml_config_value_text(const gml_config *c, int i, char *buf, size_t len);

#endif /* GML_CONFIG_H */
