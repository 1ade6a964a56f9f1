/*
 * config_main.c — `gmlake config`: prints every setting, its value and where it came from.
 *   gmlake-config [--check]    --check: exit status 1 if any source had an error
 *   gmlake-config --example    a commented gmlake.conf with every key at its default
 *   gmlake-config --man        gmlake.conf(5), generated from the option table
 *   gmlake-config --version    gmlake's version
 * --check also applies the one validation of the settings (gml_config_check, config/check.c, which
 * the library and replay call too): settings the library would refuse are an error here, not a
 * disabled gmlake later.
 */
#include <stdio.h>
#include <string.h>

#include "../config/config.h"

int main(int argc, char **argv)
{
    bool check = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--check") == 0) {
            check = true;
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
            printf("usage: gmlake config [--check] [--example]\n"
                   "Prints every gmlake setting, its value and where it came from (default,\n"
                   "FILE:LINE or an environment variable).  --check exits 1 if any source has an\n"
                   "error (a bad value, an unknown key or GMLAKE_* variable, settings the pool\n"
                   "would refuse); --example prints a commented configuration file.\n");
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
    if (gml_config_check(&c, 0, why, sizeof why) != 0) {
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
