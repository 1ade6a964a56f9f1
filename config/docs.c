/* docs.c — the texts generated from the settings table: the commented example file (installed as
 * gmlake.conf) and the man page gmlake.conf(5).  Above options.c (the table, the accepted values)
 * and names.c (the environment names); nothing in config/ calls it. */
#include <stdio.h>

#include "config.h"

void gml_config_print_example(FILE *out)
{
    fprintf(out, "# gmlake.conf — settings of libgmlake (every key, at its default).\n"
                 "# Sources, later ones winning: built-in defaults < " GML_SYSCONFDIR "/gmlake.conf\n"
                 "#   < ~/.config/gmlake/gmlake.conf ($XDG_CONFIG_HOME) < the file named by\n"
                 "#   GMLAKE_CONFIG < environment variables GMLAKE_<KEY> (the key in upper case).\n"
                 "# Format: key = value.  '#' starts a comment at the start of a line or after a\n"
                 "# blank; inside a value it is kept (log_file = /tmp/run#3.log).  Blanks around\n"
                 "# a value are not part of it.\n"
                 "# Sizes are decimal with an optional unit: 512KiB, 2MiB, 1G (no hex).\n"
                 "# File settings expand %%p (pid), %%r (rank: RANK, else LOCAL_RANK, else 0), %%%%.\n");
    for (int i = 0; i < gml_option_count; i++) {
        const gml_option *o = &gml_options[i];
        char acc[200];
        gml_option_accepted(o, acc, sizeof acc);
        fprintf(out, "\n# %s\n# accepted: %s", o->help, acc);
        if (o->alias)
            fprintf(out, "; environment alias: %s", o->alias);
        fprintf(out, "\n#%s = %s\n", o->key, o->def);
    }
}

/* Escapes roff's special characters at line starts and backslashes. */
static void man_text(FILE *out, const char *t)
{
    for (; *t; t++) {
        if (*t == '\\')
            fputs("\\e", out);
        else if (*t == '-')
            fputs("\\-", out);
        else
            fputc(*t, out);
    }
}

_Static_assert(GML_PATH_MAX == 1024 && GML_RANK_MAX == 23, "the man page's limits");

void gml_config_print_man(FILE *out, const char *version)
{
    fprintf(out, ".TH GMLAKE.CONF 5 \"\" \"gmlake %s\" \"File Formats\"\n"
                 ".SH NAME\ngmlake.conf \\- settings of libgmlake, the GPU memory allocator\n"
                 ".SH SYNOPSIS\n" GML_SYSCONFDIR "/gmlake.conf, ~/.config/gmlake/gmlake.conf,\n"
                 "the file named by \\fBGMLAKE_CONFIG\\fR, and \\fBGMLAKE_\\fIKEY\\fR variables\n"
                 ".SH DESCRIPTION\nSources are read in the order above; later ones win. Each line is\n"
                 ".I key = value\nor blank. A comment starts with \\fB#\\fR at the start of a line or\n"
                 "after a blank; a \\fB#\\fR inside a value is kept. Sizes are decimal numbers with an\n"
                 "optional unit (512KiB, 2MiB, 1G; K, M, G, T are powers of 1024); hexadecimal is\n"
                 "refused. In file settings \\fB%%p\\fR is the process id, \\fB%%r\\fR the rank\n"
                 "(\\fBRANK\\fR, else \\fBLOCAL_RANK\\fR, else 0), \\fB%%%%\\fR a percent sign. When\n"
                 "several processes run (\\fBWORLD_SIZE\\fR or \\fBLOCAL_WORLD_SIZE\\fR above 1) and\n"
                 "stats_file or trace_file names neither, each process writes its own file,\n"
                 "with \\fB.rank\\fIR\\fR inserted before the extension. A file setting must be at\n"
                 "most 1023 bytes once expanded, whatever the process id and rank\n"
                 "(\\fB%%p\\fR counted as 10 bytes, \\fB%%r\\fR as 23, and a stats_file or\n"
                 "trace_file with neither 28 more for \\fB.rank\\fIR\\fR; log_file, which the\n"
                 "processes share, gets none): a longer one is a bad value, never cut short.\n"
                 "Sizes are exact to 2^64\\-1 bytes; a fraction (1.5GiB) must make whole bytes.\n"
                 "Bad values, unknown keys and\n"
                 "unknown \\fBGMLAKE_*\\fR variables are reported (with the closest key and why)\n"
                 "and ignored, once per process tree; \\fBgmlake config \\-\\-check\\fR exits 1 on\n"
                 "them, and on settings that are valid alone but not together (chunk_size a power\n"
                 "of two, small_limit at most chunk_size), which turn libgmlake off.\n"
                 ".PP\nA file must be a regular file of at most 1 MiB (1048576 bytes); a directory,\n"
                 "FIFO or device is refused without being read. A UTF\\-8 byte\\-order mark at its\n"
                 "start is skipped. Blanks around a value are not part of it, for every type.\n"
                 ".PP\nThe environment variable of a key is \\fBGMLAKE_\\fR and the key in upper case,\n"
                 "exactly (\\fBGMLAKE_STITCH\\fR; \\fBGMLAKE_stitch\\fR is not it). Any other variable\n"
                 "whose name starts with \\fBGMLAKE_\\fR, in any case, is reported with the closest\n"
                 "name and ignored, except \\fBGMLAKE_CONFIG\\fR, \\fBGMLAKE_SYSCONFDIR\\fR,\n"
                 "\\fBGMLAKE_WARNED_CONFIG\\fR (set by libgmlake: the warnings a parent process gave)\n"
                 "\\fBGMLAKE_PYTORCH_ROUTE\\fR (set by libgmlake: the variable that names PyTorch's\n"
                 "cudaMallocAsync backend, through which gmlake serves PyTorch) and\n"
                 "\\fBGMLAKE_WARNED_ROUTE\\fR (set by libgmlake: the PyTorch setting a parent process\n"
                 "warned about).\n"
                 ".SH KEYS\n",
            version);
    for (int i = 0; i < gml_option_count; i++) {
        const gml_option *o = &gml_options[i];
        char acc[200], env[96];
        gml_option_accepted(o, acc, sizeof acc);
        gml_option_env_name(i, env, sizeof env);
        fprintf(out, ".TP\n.B %s\n", o->key);
        man_text(out, o->help);
        fputs(".\nAccepted: ", out);
        man_text(out, acc);
        fprintf(out, ". Default: %s. Environment: \\fB%s\\fR", *o->def ? o->def : "empty", env);
        if (o->alias)
            fprintf(out, " (alias \\fB%s\\fR)", o->alias);
        fputs(".\n", out);
    }
    fputs(".SH SEE ALSO\n.BR gmlake (1)\n", out);
}
