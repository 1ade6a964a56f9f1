/*
 * config_main.c — `gmlake config`: prints every setting, its value and where it came from.
 *   gmlake-config [--check]    --check: exit status 1 if any source had an error
 *   gmlake-config --example    a commented gmlake.conf with every key at its default
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
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            printf("usage: gmlake config [--check] [--example]\n"
                   "Prints every gmlake setting, its value and where it came from (default,\n"
                   "FILE:LINE or an environment variable).  --check exits 1 if any source has an\n"
                   "error; --example prints a commented configuration file.\n");
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
    if (check && rep.errors) {
        fprintf(stderr, "gmlake config: %d error%s in the configuration\n", rep.errors,
                rep.errors == 1 ? "" : "s");
        return 1;
    }
    return 0;
}
