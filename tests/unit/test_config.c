/* test_config.c — sources and precedence, GMLake's aliases, every class of bad input.
 * Each Criterion test runs in its own process, so the environment changes stay local. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "stitch/pool.h"
#include "stitch/stitch.h"

extern char **environ;

static char root[64];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

/* A temporary /etc, HOME and named file; clears every GMLAKE_ variable. */
static void sandbox(void)
{
    snprintf(root, sizeof root, "/tmp/gmlake-cfg-XXXXXX");
    cr_assert_not_null(mkdtemp(root));
    char p[256];
    snprintf(p, sizeof p, "%s/etc", root), mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/home", root), mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/home/.config", root), mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/home/.config/gmlake", root), mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/etc", root), setenv("GMLAKE_SYSCONFDIR", p, 1);
    snprintf(p, sizeof p, "%s/home", root), setenv("HOME", p, 1);
    unsetenv("XDG_CONFIG_HOME");
    unsetenv("GMLAKE_CONFIG");
    for (int i = 0; i < gml_option_count; i++)
        if (gml_options[i].alias)
            unsetenv(gml_options[i].alias);
    for (char **e = environ; *e;) { /* every GMLAKE_ variable, known or not */
        if (strncmp(*e, "GMLAKE_", 7) == 0 && strncmp(*e, "GMLAKE_SYSCONFDIR=", 18) != 0) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(strchr(*e, '=') - *e), *e);
            unsetenv(name);
            e = environ;
        } else {
            e++;
        }
    }
}

static char *load(gml_config *c, gml_config_report *rep)
{
    static char buf[8192];
    memset(buf, 0, sizeof buf);
    FILE *m = fmemopen(buf, sizeof buf - 1, "w");
    gml_config_load(c, rep, m);
    fclose(m);
    return buf;
}

static char *path(const char *rel)
{
    static char p[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", root, rel);
    return p[k];
}

Test(config, defaults)
{
    sandbox();
    gml_config c;
    gml_config_report rep;
    char *msgs = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "%s", msgs);
    cr_assert(c.enable && c.pool.vmm_defragment);
    cr_assert_eq(c.pool.frag_limit, 2u << 20);
    cr_assert_float_eq(c.pool.reuse_limit, 1.25, 1e-12);
    cr_assert_eq(c.pool.auto_gc, 128);
    cr_assert_eq(c.pool.strategy, GML_STITCH_LARGEST);
    cr_assert_eq(c.log_level, GML_LOG_WARN);
    cr_assert_str_eq(rep.source[0], "default");
}

Test(config, precedence_across_all_five_sources)
{
    sandbox();
    write_file(path("etc/gmlake.conf"), "# system\nfrag_limit = 1MiB\nreuse_limit = 1.5\nauto_gc = 10\ndefrag_level = 1\n");
    write_file(path("home/.config/gmlake/gmlake.conf"), "reuse_limit = 2\nauto_gc = 20\ndefrag_level = 2\n");
    write_file(path("named.conf"), "auto_gc = 30\n  defrag_level=0   # named\n");
    setenv("GMLAKE_CONFIG", path("named.conf"), 1);
    setenv("GMLAKE_DEFRAG_LEVEL", "1", 1);
    gml_config c;
    gml_config_report rep;
    char *msgs = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "%s", msgs);
    cr_assert_eq(c.pool.frag_limit, 1u << 20, "from /etc");
    cr_assert_float_eq(c.pool.reuse_limit, 2.0, 1e-12, "the user file beats /etc");
    cr_assert_eq(c.pool.auto_gc, 30, "GMLAKE_CONFIG beats the user file");
    cr_assert_eq(c.pool.defrag_level, 1, "the environment beats every file");
    cr_assert(strstr(rep.source[2], "etc/gmlake.conf:2"), "%s", rep.source[2]);
    cr_assert(strstr(rep.source[3], "home/.config/gmlake/gmlake.conf:1"), "%s", rep.source[3]);
    cr_assert(strstr(rep.source[5], "named.conf:1"), "%s", rep.source[5]);
    cr_assert_str_eq(rep.source[4], "environment GMLAKE_DEFRAG_LEVEL");
    /* XDG_CONFIG_HOME replaces ~/.config */
    mkdir(path("xdg"), 0700);
    mkdir(path("xdg/gmlake"), 0700);
    write_file(path("xdg/gmlake/gmlake.conf"), "reuse_limit = 3\n");
    setenv("XDG_CONFIG_HOME", path("xdg"), 1);
    load(&c, &rep);
    cr_assert_float_eq(c.pool.reuse_limit, 3.0, 1e-12);
}

Test(config, gmlake_aliases_and_conflicts)
{
    sandbox();
    setenv("vmmDefragment", "0", 1);
    setenv("fragLimit", "8M", 1);
    setenv("reuseLimit", "1.5", 1);
    setenv("defragLevel", "2", 1);
    setenv("autoGC", "7", 1);
    gml_config c;
    gml_config_report rep;
    char *msgs = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "%s", msgs);
    cr_assert(!c.pool.vmm_defragment);
    cr_assert_eq(c.pool.frag_limit, 8u << 20);
    cr_assert_float_eq(c.pool.reuse_limit, 1.5, 1e-12);
    cr_assert_eq(c.pool.defrag_level, 2);
    cr_assert_eq(c.pool.auto_gc, 7);
    setenv("GMLAKE_AUTO_GC", "9", 1);
    msgs = load(&c, &rep);
    cr_assert_eq(c.pool.auto_gc, 9, "GMLAKE_ wins");
    cr_assert(strstr(msgs, "both GMLAKE_AUTO_GC and autoGC are set; GMLAKE_AUTO_GC=9 wins"), "%s", msgs);
    cr_assert_eq(rep.warnings, 1);
}

Test(config, bad_input_is_named_and_the_previous_value_kept)
{
    sandbox();
    write_file(path("etc/gmlake.conf"), "auto_gc = 40\nreuse_limit = 1.5\n");
    write_file(path("named.conf"),
               "no_such_key = 1\n"      /* 1 unknown key */
               "auto_gc = lots\n"        /* 2 malformed */
               "reuse_limit = 0.5\n"     /* 3 out of range */
               "just words\n"            /* 4 not key = value */
               "= 5\n"                   /* 5 no key */
               "stitch_strategy = worst\n" /* 6 unknown choice */
               "chunk_size = 1k\n"       /* 7 below the range */
               "stitch = maybe\n");      /* 8 bad boolean */
    setenv("GMLAKE_CONFIG", path("named.conf"), 1);
    setenv("GMLAKE_FRAG_LIMIT", "12 parsecs", 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 9, "%s", m);
    cr_assert(strstr(m, "named.conf:1: unknown key 'no_such_key' (known keys: enable, stitch"), "%s", m);
    cr_assert(strstr(m, "named.conf:2: auto_gc = 'lots' is not valid (not a whole number); accepted: an integer from 0 to"), "%s", m);
    cr_assert(strstr(m, "named.conf:3: reuse_limit = '0.5' is not valid (below the allowed range); accepted: a number from 1 to 64"), "%s", m);
    cr_assert(strstr(m, "named.conf:4: expected 'key = value', found 'just words'"), "%s", m);
    cr_assert(strstr(m, "named.conf:5: a value with no key"), "%s", m);
    cr_assert(strstr(m, "named.conf:6: stitch_strategy = 'worst' is not valid (not one of the choices); accepted: one of largest, bestfit"), "%s", m);
    cr_assert(strstr(m, "named.conf:7: chunk_size"), "%s", m);
    cr_assert(strstr(m, "named.conf:8: stitch = 'maybe' is not valid (not a boolean); accepted: on/off"), "%s", m);
    cr_assert(strstr(m, "environment GMLAKE_FRAG_LIMIT: frag_limit = '12 parsecs' is not valid"), "%s", m);
    cr_assert_eq(c.pool.auto_gc, 40, "kept the /etc value");
    cr_assert_float_eq(c.pool.reuse_limit, 1.5, 1e-12);
    cr_assert_eq(c.pool.frag_limit, 2u << 20);
    cr_assert(c.pool.vmm_defragment);
    /* an unreadable named file */
    unsetenv("GMLAKE_FRAG_LIMIT");
    setenv("GMLAKE_CONFIG", path("missing.conf"), 1);
    m = load(&c, &rep);
    cr_assert_eq(rep.errors, 1);
    cr_assert(strstr(m, "missing.conf: cannot read the configuration file: No such file"), "%s", m);
    /* a directory where a file should be */
    setenv("GMLAKE_CONFIG", root, 1);
    m = load(&c, &rep);
    cr_assert_geq(rep.errors, 1, "%s", m);
}

Test(config, example_file_round_trips)
{
    sandbox();
    char buf[16384] = {0};
    FILE *m = fmemopen(buf, sizeof buf - 1, "w");
    gml_config_print_example(m);
    fclose(m);
    /* uncomment every '#key = value' line (text comments are '# ...'): the defaults must parse */
    for (char *l = buf; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (l[0] == '#' && l[1] != ' ' && l[1] != '\n' && l[1] != 0)
            l[0] = ' ';
    gml_config c;
    gml_config_defaults(&c);
    gml_config_report rep = {0};
    char msgs[4096] = {0};
    FILE *mm = fmemopen(msgs, sizeof msgs - 1, "w");
    gml_config_apply_text(&c, &rep, buf, strlen(buf), "example", mm);
    fclose(mm);
    cr_assert_eq(rep.errors, 0, "%s", msgs);
    for (int i = 0; i < gml_option_count; i++)
        cr_assert(strstr(rep.source[i], "example:"), "every key appears in the example: %s", gml_options[i].key);
}

Test(config, unknown_environment_variables_are_errors_with_the_closest_key)
{
    sandbox();
    setenv("GMLAKE_STICH", "off", 1);
    setenv("GMLAKE_MEMORYLIMIT", "1G", 1);
    setenv("GMLAKE_WHATEVER_THIS_IS", "1", 1);
    setenv("GMLAKE_CONFIG", path("none.conf"), 1);
    write_file(path("none.conf"), "stich = off\n");
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 4, "%s", m);
    cr_assert(strstr(m, "environment GMLAKE_STICH: no such setting, ignored; did you mean GMLAKE_STITCH?"), "%s", m);
    cr_assert(strstr(m, "environment GMLAKE_MEMORYLIMIT: no such setting, ignored; did you mean GMLAKE_MEMORY_LIMIT?"), "%s", m);
    cr_assert(strstr(m, "environment GMLAKE_WHATEVER_THIS_IS: no such setting, ignored (gmlake"), "%s", m);
    cr_assert(strstr(m, "none.conf:1: unknown key 'stich'; did you mean 'stitch'?"), "%s", m);
    cr_assert(c.pool.vmm_defragment, "the typo changed nothing");
    cr_assert_str_eq(gml_config_closest_key("autogc"), "auto_gc");
    cr_assert_str_eq(gml_config_closest_key("fraglimit"), "frag_limit", "aliases count too");
    cr_assert_null(gml_config_closest_key("zz"));
}

Test(config, a_hash_inside_a_value_is_kept_a_comment_needs_a_blank_before_it)
{
    sandbox();
    write_file(path("named.conf"), "log_file = /tmp/run#3/log.txt   # where\n"
                                   "stats_file=/tmp/s.json# not a comment: no blank before it\n"
                                   "  # a whole-line comment\n"
                                   "#trace_file = /tmp/t\n"
                                   "auto_gc = 12 #twelve\n");
    setenv("GMLAKE_CONFIG", path("named.conf"), 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "%s", m);
    cr_assert_str_eq(c.log_file, "/tmp/run#3/log.txt");
    cr_assert_str_eq(c.stats_file, "/tmp/s.json# not a comment: no blank before it");
    cr_assert_str_eq(c.trace_file, "");
    cr_assert_eq(c.pool.auto_gc, 12);
}

/* A line is limited to 2047 bytes of what it says (key = value), not of its comment or trailing
 * blanks: a long comment line (a pasted URL, a ruler of '#') is a comment, and a setting followed
 * by a long comment is set (both were "line longer than 2047 bytes, ignored": an error in a valid
 * file, and the setting lost). */
Test(config, a_long_comment_or_trailing_blanks_are_not_a_long_line)
{
    sandbox();
    static char text[20000]; /* whole: three comments and the blanks (16384 cut the blanks short) */
    char longc[5000];
    memset(longc, '#', sizeof longc - 1);
    longc[sizeof longc - 1] = 0;
    char blanks[3000];
    memset(blanks, ' ', sizeof blanks - 1);
    blanks[sizeof blanks - 1] = 0;
    snprintf(text, sizeof text, "%s\n  %s\nauto_gc = 14  %s\nstitch = off%s\r\n", longc, longc, longc, blanks);
    write_file(path("named.conf"), text);
    setenv("GMLAKE_CONFIG", path("named.conf"), 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "%s", m);
    cr_assert_eq(c.pool.auto_gc, 14);
    cr_assert(!c.pool.vmm_defragment);
    /* what a line says beyond 2047 bytes is still refused, naming the line */
    char longv[3000];
    memset(longv, 'x', sizeof longv - 1);
    longv[sizeof longv - 1] = 0;
    snprintf(text, sizeof text, "log_file = /tmp/%s # c\n", longv);
    write_file(path("named.conf"), text);
    m = load(&c, &rep);
    cr_assert_eq(rep.errors, 1, "%s", m);
    cr_assert(strstr(m, "named.conf:1: line longer than 2047 bytes"), "%s", m);
    cr_assert_str_eq(c.log_file, "");
}

Test(config, hex_sizes_are_refused)
{
    sandbox();
    setenv("GMLAKE_MEMORY_LIMIT", "0x10", 1);
    setenv("GMLAKE_REUSE_LIMIT", "0x2", 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 2, "%s", m);
    cr_assert_eq(c.pool.limit_bytes, 0, "0x10 is not 16 bytes");
    cr_assert(strstr(m, "memory_limit = '0x10' is not valid"), "%s", m);
}

/* Settings each valid alone but refused together by the pool: the pool's own check names them
 * before any device exists (what `gmlake config --check` and the library apply). */
Test(config, settings_the_pool_refuses_are_found_before_a_device_exists)
{
    sandbox();
    setenv("GMLAKE_SMALL_LIMIT", "1GiB", 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "each value is in its range: %s", m);
    const char *why = NULL;
    cr_assert_eq(gml_pool_settings_check(&c.pool, 0, &why), -1);
    cr_assert_str_eq(why, "small_limit must not exceed chunk_size");
    gml_sim_config sc = {.capacity = 64u << 20};
    gml_device *dev = gml_sim_create(&sc);
    const char *err = NULL;
    cr_assert_null(gml_pool_create(dev, &c.pool, &err), "the pool refuses the same settings");
    cr_assert_str_eq(err, why);
    gml_device_destroy(dev);
    unsetenv("GMLAKE_SMALL_LIMIT");
    setenv("GMLAKE_CHUNK_SIZE", "6MiB", 1);
    load(&c, &rep);
    cr_assert_eq(gml_pool_settings_check(&c.pool, 0, &why), -1);
    cr_assert_str_eq(why, "chunk_size must be a power of two");
    gml_config_defaults(&c);
    cr_assert_eq(gml_pool_settings_check(&c.pool, 0, &why), 0, "the defaults pass");
}

Test(config, man_page_names_every_key)
{
    char buf[32768] = {0};
    FILE *m = fmemopen(buf, sizeof buf - 1, "w");
    gml_config_print_man(m, "9.9");
    fclose(m);
    cr_assert(strstr(buf, ".TH GMLAKE.CONF 5"), "%s", buf);
    cr_assert(strstr(buf, "GMLAKE_STITCH"), "the rule for environment names is documented");
    for (int i = 0; i < gml_option_count; i++) {
        char want[64];
        snprintf(want, sizeof want, ".B %s\n", gml_options[i].key);
        cr_assert(strstr(buf, want), "%s missing", gml_options[i].key);
    }
}

/* One rule for environment names: GMLAKE_<KEY> in upper case, exactly.  Any other spelling is
 * reported by the same function that reads the variables (issue 23: GMLAKE_stitch=off passed the
 * unknown-name check and was never read). */
Test(config, environment_names_are_upper_case_only_and_other_spellings_are_reported)
{
    sandbox();
    setenv("GMLAKE_stitch", "off", 1);
    setenv("GMLAKE_Auto_GC", "9", 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 2, "%s", m);
    cr_assert(strstr(m, "environment GMLAKE_stitch: no such setting, ignored; did you mean GMLAKE_STITCH?"), "%s", m);
    cr_assert(strstr(m, "environment GMLAKE_Auto_GC: no such setting, ignored; did you mean GMLAKE_AUTO_GC?"), "%s", m);
    cr_assert(c.pool.vmm_defragment, "a variable that is reported as ignored is ignored");
    cr_assert_eq(c.pool.auto_gc, 128);
    /* the exact name is read, and nothing is reported */
    unsetenv("GMLAKE_stitch");
    unsetenv("GMLAKE_Auto_GC");
    setenv("GMLAKE_STITCH", "off", 1);
    m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "%s", m);
    cr_assert(!c.pool.vmm_defragment);
    char name[64];
    cr_assert_eq(gml_option_of_env("GMLAKE_STITCH"), 1);
    cr_assert_eq(gml_option_of_env("GMLAKE_stitch"), -1);
    cr_assert_eq(gml_option_of_env("GMLAKE_STITCH_"), -1);
    gml_option_env_name(1, name, sizeof name);
    cr_assert_str_eq(name, "GMLAKE_STITCH");
}

/* One validation of every setting (config/check.c), the same whether or not the device's
 * granularity is known: chunk_size=3MiB was run by replay (rounded up to 4 MiB on its device),
 * refused by `gmlake config --check` and turned the library off.  tests/launcher.sh checks that
 * the three programs give this function's answer. */
Test(config, one_validation_whatever_the_granularity)
{
    sandbox();
    setenv("GMLAKE_CHUNK_SIZE", "3MiB", 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "in its range: %s", m);
    char why[256];
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), -1);
    cr_assert(strstr(why, "chunk_size"), "%s", why);
    cr_assert_eq(gml_config_check(&c, 2u << 20, why, sizeof why), -1, "the same with the granularity known");
    setenv("GMLAKE_CHUNK_SIZE", "4MiB", 1);
    load(&c, &rep);
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), 0, "%s", why);
    cr_assert_eq(gml_config_check(&c, 2u << 20, why, sizeof why), 0, "%s", why);
    /* a field set outside the table's parser is checked against the table's range too */
    gml_config_defaults(&c);
    c.pool.reuse_limit = 0.5;
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), -1);
    cr_assert(strstr(why, "reuse_limit"), "%s", why);
    gml_config_defaults(&c);
    c.pool.small_limit = 4u << 20;
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), -1);
    cr_assert(strstr(why, "small_limit must not exceed chunk_size"), "%s", why);
    /* a memory limit below one chunk refuses every allocation: a unit left out (16 for 16GiB) */
    gml_config_defaults(&c);
    c.pool.limit_bytes = 1024;
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), -1);
    cr_assert(strstr(why, "memory_limit = 1024 bytes is below one chunk (chunk_size 2097152 bytes): every "
                          "allocation would fail; give a size with its unit (16GiB), or 0 for no limit"), "%s", why);
    c.pool.limit_bytes = 2u << 20;
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), 0, "one chunk is a limit: %s", why);
    gml_config_defaults(&c);
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), 0, "the defaults pass: %s", why);
}

/* Every number is range-checked and the message names the field and why (issue 23: -100 and an
 * overflowing number both said only "not valid"). */
Test(config, number_messages_name_the_field_and_why)
{
    sandbox();
    write_file(path("named.conf"), "frag_limit = -100\n"
                                   "memory_limit = 99999999999999999999\n"
                                   "auto_gc = -1\n"
                                   "extent_share = 99999999999999999999\n"
                                   "reuse_limit = 1e999\n"
                                   "defrag_level = 3\n"
                                   "chunk_size = 2.5\n"
                                   "reuse_limit = fast\n"
                                   "stats_file = \n");
    setenv("GMLAKE_CONFIG", path("named.conf"), 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 8, "%s", m);
    cr_assert(strstr(m, "named.conf:1: frag_limit = '-100' is not valid (negative); accepted: a size from 0 to"), "%s", m);
    cr_assert(strstr(m, "named.conf:2: memory_limit = '99999999999999999999' is not valid (too large (overflow"), "%s", m);
    cr_assert(strstr(m, "named.conf:3: auto_gc = '-1' is not valid (negative); accepted: an integer from 0 to 1000000"), "%s", m);
    cr_assert(strstr(m, "named.conf:4: extent_share = '99999999999999999999' is not valid (too large (overflow))"), "%s", m);
    cr_assert(strstr(m, "named.conf:5: reuse_limit = '1e999' is not valid (too large (overflow))"), "%s", m);
    cr_assert(strstr(m, "named.conf:6: defrag_level = '3' is not valid (above the allowed range); accepted: an integer from 0 to 2"), "%s", m);
    cr_assert(strstr(m, "named.conf:7: chunk_size = '2.5' is not valid (not a whole number of bytes)"), "%s", m);
    cr_assert(strstr(m, "named.conf:8: reuse_limit = 'fast' is not valid (not a number)"), "%s", m);
}

/* One rule for the blanks around a value, every type alike and every source alike: they are not
 * part of it (issue 23: sizes accepted trailing blanks, enums and booleans did not). */
Test(config, blanks_around_a_value_are_ignored_for_every_type)
{
    sandbox();
    setenv("GMLAKE_LOG_LEVEL", " debug ", 1);
    setenv("GMLAKE_STITCH", "off\t", 1);
    setenv("GMLAKE_STITCH_STRATEGY", "bestfit ", 1);
    setenv("GMLAKE_FRAG_LIMIT", " 4MiB ", 1);
    setenv("GMLAKE_REUSE_LIMIT", " 2 ", 1);
    setenv("GMLAKE_AUTO_GC", "5 ", 1);
    setenv("GMLAKE_LOG_FILE", " /tmp/x.log ", 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "%s", m);
    cr_assert_eq(c.log_level, GML_LOG_DEBUG);
    cr_assert(!c.pool.vmm_defragment);
    cr_assert_eq(c.pool.strategy, GML_STITCH_BESTFIT);
    cr_assert_eq(c.pool.frag_limit, 4u << 20);
    cr_assert_float_eq(c.pool.reuse_limit, 2.0, 1e-12);
    cr_assert_eq(c.pool.auto_gc, 5);
    cr_assert_str_eq(c.log_file, "/tmp/x.log");
}

/* The configuration file: a UTF-8 byte-order mark, the size limit (exactly 1 MiB), a directory
 * and a FIFO (refused at once, not read: fopen of a FIFO without a writer blocked for ever). */
Test(config, file_bom_is_skipped)
{
    sandbox();
    write_file(path("named.conf"), "\xEF\xBB\xBF" "auto_gc = 11\n");
    setenv("GMLAKE_CONFIG", path("named.conf"), 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "%s", m);
    cr_assert_eq(c.pool.auto_gc, 11);
}

static void write_size(const char *p, size_t n)
{
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs("auto_gc = 13\n", f);
    for (size_t k = 13; k < n; k++)
        fputc(k % 64 == 63 ? '\n' : '#', f);
    fclose(f);
}

Test(config, file_size_limit_is_exactly_one_mib)
{
    sandbox();
    setenv("GMLAKE_CONFIG", path("named.conf"), 1);
    gml_config c;
    gml_config_report rep;
    write_size(path("named.conf"), 1048012);
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "1,048,012 bytes are less than 1 MiB: %s", m);
    cr_assert_eq(c.pool.auto_gc, 13);
    write_size(path("named.conf"), 1048576);
    m = load(&c, &rep);
    cr_assert_eq(rep.errors, 0, "exactly 1 MiB is accepted: %s", m);
    write_size(path("named.conf"), 1048577);
    m = load(&c, &rep);
    cr_assert_eq(rep.errors, 1, "%s", m);
    cr_assert(strstr(m, "named.conf: 1048577 bytes, more than the limit of 1048576 bytes (1 MiB); ignored"), "%s", m);
    cr_assert_eq(c.pool.auto_gc, 128);
}

Test(config, a_directory_is_named_as_such)
{
    sandbox();
    setenv("GMLAKE_CONFIG", root, 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 1, "%s", m);
    cr_assert(strstr(m, ": is a directory, not a configuration file; ignored"), "%s", m);
}

Test(config, a_fifo_is_refused_without_blocking, .timeout = 5)
{
    sandbox();
    cr_assert_eq(mkfifo(path("fifo"), 0600), 0);
    setenv("GMLAKE_CONFIG", path("fifo"), 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 1, "%s", m);
    cr_assert(strstr(m, "fifo: not a regular file (a FIFO); ignored"), "%s", m);
}

/* A file setting that %p, %r or the .rank%r of several processes could expand past 1023 bytes
 * is refused when read, naming the setting and the limit (the library once cut the expanded name
 * at 1023 bytes and wrote to another file); `gmlake config --check` counts it as an error. */
Test(config, a_file_setting_that_could_expand_too_long_is_refused)
{
    sandbox();
    char dir[991], v[1200];
    memset(dir, 'd', 990);
    dir[990] = 0;
    snprintf(v, sizeof v, "/%s/t%%p%%p%%p%%p.trace", dir); /* 1005 bytes; 1035 with 10-digit pids */
    setenv("GMLAKE_TRACE_FILE", v, 1);
    snprintf(v, sizeof v, "/%s/stats.json", dir); /* 1002 bytes; 1030 with .rank and a rank */
    setenv("GMLAKE_STATS_FILE", v, 1);
    snprintf(v, sizeof v, "/%s/%%r.log", dir); /* 997 bytes; 1018 with the longest rank: fits */
    setenv("GMLAKE_LOG_FILE", v, 1);
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 2, "%s", m);
    cr_assert(strstr(m, "GMLAKE_TRACE_FILE: trace_file = '/ddd"), "%s", m);
    cr_assert(strstr(m, "GMLAKE_STATS_FILE: stats_file = '/ddd"), "%s", m);
    cr_assert(strstr(m, "at most 1023 bytes once expanded"), "%s", m);
    cr_assert_str_eq(c.trace_file, "", "the setting keeps its previous value");
    cr_assert_str_eq(c.stats_file, "");
    cr_assert_str_eq(c.log_file, v);
    char why[2048];
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), 0, "%s", why);
    /* the table's check sees a value set another way */
    snprintf(c.trace_file, sizeof c.trace_file, "/%s/t%%p%%p%%p%%p.trace", dir);
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), -1);
    cr_assert(strstr(why, "trace_file = ") && strstr(why, "too long once expanded"), "%s", why);
}

/* The expansion: %p, %r, %%, and .rank%r before the extension where several processes run. */
Test(config, file_names_expand)
{
    struct { const char *pat; bool add; const char *want; } t[] = {
        {"/t/s-%r-%p-%%.json", true, "/t/s-3-42-%.json"}, {"/t/stats.json", true, "/t/stats.rank3.json"},
        {"/t/stats.json", false, "/t/stats.json"},       {"/t.d/.trace", true, "/t.d/.trace.rank3"},
        {"/t/x", true, "/t/x.rank3"},                   {"a%", false, "a%"}, {"a%.b", true, "a%.rank3.b"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char out[64];
        size_t n = gml_file_name_expand(t[i].pat, t[i].add, "42", "3", out, sizeof out);
        cr_assert_str_eq(out, t[i].want, "%s", t[i].pat);
        cr_assert_eq(n, strlen(t[i].want));
    }
    char small[8];
    cr_assert_eq(gml_file_name_expand("/t/stats.json", true, "42", "3", small, sizeof small), 19);
    cr_assert_str_eq(small, "/t/stat", "cut only where the caller's buffer is, and said by the length");
    cr_assert_eq(gml_file_name_longest("%p%r", true), 10 + GML_RANK_MAX);
    cr_assert_eq(gml_file_name_longest("x", true), 1 + 5 + GML_RANK_MAX);
    cr_assert_eq(gml_file_name_longest("x", false), 1);
}

/* log_file is one file for every process (interpose/log.c expands it without ".rank%r"): a name
 * with neither %p nor %r is refused only past 1023 bytes as it stands, not for the 28 bytes of a
 * .rank%r it never gets; stats_file and trace_file, which get one, are refused at that length. */
Test(config, log_file_is_not_counted_with_a_rank_it_never_gets)
{
    sandbox();
    char dir[991], v[1200];
    memset(dir, 'd', 990);
    dir[990] = 0;
    snprintf(v, sizeof v, "/%s/gmlake.log", dir); /* 1002 bytes: fits as it stands */
    setenv("GMLAKE_LOG_FILE", v, 1);
    setenv("GMLAKE_STATS_FILE", v, 1); /* 1030 with .rank and the longest rank */
    gml_config c;
    gml_config_report rep;
    char *m = load(&c, &rep);
    cr_assert_eq(rep.errors, 1, "%s", m);
    cr_assert(strstr(m, "GMLAKE_STATS_FILE: stats_file = '/ddd"), "%s", m);
    cr_assert_str_eq(c.log_file, v);
    cr_assert_str_eq(c.stats_file, "");
    char why[2048];
    cr_assert_eq(gml_config_check(&c, 0, why, sizeof why), 0, "%s", why);
    /* the accepted text of each says what it counts */
    char acc[512];
    gml_option_accepted(&gml_options[gml_option_find("log_file")], acc, sizeof acc);
    cr_assert(!strstr(acc, ".rank"), "%s", acc);
    gml_option_accepted(&gml_options[gml_option_find("stats_file")], acc, sizeof acc);
    cr_assert(strstr(acc, ".rank"), "%s", acc);
}

/* Loads with `var` set to `dir` (and unset after): one error naming the variable and the end
 * of the path it made; returns the report's text. */
static char *too_long_from(const char *var, const char *dir, const char *tail)
{
    gml_config c;
    gml_config_report rep;
    char want[96];
    setenv(var, dir, 1);
    char *m = load(&c, &rep);
    unsetenv(var);
    snprintf(want, sizeof want, "gmlake: environment %s: the configuration file ", var);
    cr_assert_eq(rep.errors, 1, "%s", m);
    cr_assert(strstr(m, want), "%s", m);
    cr_assert(strstr(m, tail), "%s", m);
    return m;
}

/* HOME (or XDG_CONFIG_HOME, GMLAKE_SYSCONFDIR) so long that the config file's path does not fit
 * the loader's buffer: reported as an error naming the variable, never cut short and the user's
 * file skipped without a word (the cut path named nothing, or another file). */
Test(config, a_config_path_too_long_for_the_buffer_is_reported_not_skipped)
{
    sandbox();
    static char home[2048];
    char part[221];
    memset(part, 'h', 220);
    part[220] = 0;
    int n = snprintf(home, sizeof home, "%s/home", root);
    for (int i = 0; i < 5; i++) {
        n += snprintf(home + n, sizeof home - (size_t)n, "/%s", part);
        cr_assert_eq(mkdir(home, 0700), 0, "%s", home);
    }
    char file[sizeof home + 64];
    snprintf(file, sizeof file, "%s/.config", home), mkdir(file, 0700);
    snprintf(file, sizeof file, "%s/.config/gmlake", home), mkdir(file, 0700);
    snprintf(file, sizeof file, "%s/.config/gmlake/gmlake.conf", home);
    write_file(file, "auto_gc = 33\n");
    cr_assert_gt(strlen(file), GML_PATH_MAX + 64, "the test's path is longer than the buffer");
    char *m = too_long_from("HOME", home, "/.config/gmlake/gmlake.conf is 1");
    cr_assert(strstr(m, "bytes long, more than the 1087 a configuration file's path may have; not read"), "%s", m);
    /* XDG_CONFIG_HOME, and the system folder, alike */
    too_long_from("XDG_CONFIG_HOME", home, "/gmlake/gmlake.conf is 1");
    too_long_from("GMLAKE_SYSCONFDIR", home, "/gmlake.conf is 1");
}
