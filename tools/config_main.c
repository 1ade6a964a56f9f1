/*
 * config_main.c — `gmlake config`: prints every setting, its value and where it came from.
 *   gmlake-config [--check]    --check: exit status 1 if any source had an error
 *                              (`gmlake config --set key=value` is the script's: it sets
 *                              GMLAKE_<KEY> after --check-set; --help describes it)
 *   gmlake-config --check-sources   --check without the rules between settings: only what each
 *                              source says alone (bad value, unknown key, unreadable file), for
 *                              `gmlake run --config FILE` checking FILE alone (the rules apply
 *                              to the settings of every source together)
 *   gmlake-config --example    a commented gmlake.conf with every key at its default
 *   gmlake-config --man        gmlake.conf(5), generated from the option table
 *   gmlake-config --version    gmlake's version
 *   gmlake-config --check-set KEY=VALUE...   checks `gmlake run --set` arguments before the
 *                              program starts: each key and value, then the configuration they
 *                              give (files and environment included) with the one validation;
 *                              exit 2 naming the argument on the first error, 0 and silent else
 * --check also applies the one validation of the settings (gml_config_check, config/check.c, which
 * the library and replay call too): settings the library would refuse are an error here, not a
 * disabled gmlake later.
 */
#include <stdio.h>
#include <string.h>

#include "../config/config.h"
#include "outfile.h"

/* --check-set KEY=VALUE...: the messages name the --set argument; the sources' own messages are
 * the library's to give (once, as the program starts), not repeated here. */
static int check_sets(int n, char **kv)
{
    gml_config c;
    FILE *quiet = fopen("/dev/null", "w");
    gml_config_load(&c, NULL, quiet);
    if (quiet)
        fclose(quiet);
    gml_config_report rep = {0};
    for (int i = 0; i < n; i++) {
        char key[128], where[300];
        const char *eq = strchr(kv[i], '=');
        snprintf(where, sizeof where, "--set %s", kv[i]);
        if (!eq || eq == kv[i] || (size_t)(eq - kv[i]) >= sizeof key) {
            fprintf(stderr, "gmlake: %s: not key=value\n", where);
            return 2;
        }
        snprintf(key, sizeof key, "%.*s", (int)(eq - kv[i]), kv[i]);
        if (gml_config_set(&c, &rep, key, eq + 1, where, stderr) != 0)
            return 2;
    }
    return gml_config_check_print(&c, 0, "gmlake: --set", stderr) ? 2 : 0;
}

int main(int argc, char **argv)
{
    bool check = false, rules = true;
    gml_stdout_checked("gmlake config");
    if (argc >= 2 && strcmp(argv[1], "--check-set") == 0)
        return check_sets(argc - 2, argv + 2);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0) {
            check = true;
        } else if (strcmp(argv[i], "--check-sources") == 0) {
            check = true;
            rules = false;
        } else if (strcmp(argv[i], "--example") == 0) {
            gml_config_print_example(stdout);
            return 0;
        } else if (strcmp(argv[i], "--man") == 0) {
            gml_config_print_man(stdout, GML_VERSION);
            return 0;
        } else if (strcmp(argv[i], "--version") == 0) {
            printf("gmlake %s\n", GML_VERSION);
            return 0;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: gmlake config [--check] [--example] [--set key=value]...\n"
                   "Prints every gmlake setting, its value and where it came from (default,\n"
                   "FILE:LINE or an environment variable), then the files it looked for, in\n"
                   "order, and which it read.  --check exits 1 if any source has an\n"
                   "error (a bad value, an unknown key or GMLAKE_* variable, settings the pool\n"
                   "would refuse); --example prints a commented configuration file.\n"
                   "--set key=value (repeatable; also --set=key=value) sets GMLAKE_<KEY> for this\n"
                   "listing, so that it shows the settings as `gmlake run --set key=value` gives\n"
                   "them to the program; an unknown key, a bad value or settings the library\n"
                   "would refuse with it are refused (exit 2), naming the argument.\n");
            return 0;
        } else {
            fprintf(stderr, "gmlake config: unknown option '%s' (try --help)\n", argv[i]);
            return 2;
        }
    }
    gml_config c;
    gml_config_report rep;
    gml_config_load(&c, &rep, stderr);
    gml_config_print(stdout, &c, &rep);
    char why[GML_PATH_MAX + 300];
    if (rules && gml_config_check(&c, 0, why, sizeof why) != 0) {
        fprintf(stderr, "gmlake: these settings would be refused (%s): gmlake would turn itself "
                        "off and pass every allocation to CUDA\n", why);
        rep.errors++;
    }
    if (check && rep.errors) {
        fprintf(stderr, "gmlake config: %d error%s in the configuration\n", rep.errors,
                rep.errors == 1 ? "" : "s");
        return 1;
    }
    return 0;
}
