/*
 * pytorch_env.c — PyTorch's route into gmlake, chosen by the library itself, so that the line a
 * user already types (`LD_PRELOAD=libgmlake.so python train.py`) works.
 *
 * Under its default caching allocator PyTorch asks CUDA only for large segments and carves them
 * itself; with backend:cudaMallocAsync every tensor is one cudaMallocAsync / cudaFreeAsync pair,
 * which gmlake serves.  PyTorch reads PYTORCH_ALLOC_CONF or the older PYTORCH_CUDA_ALLOC_CONF, the
 * first of them that is set (even empty), and its versions differ on which comes first: so the
 * plan reads both (gml_torch_plan, rules in interpose.h).  The constructor applies the plan before the program's main runs (PyTorch reads
 * the variable when its allocator starts); `pytorch_backend = off` (GMLAKE_PYTORCH_BACKEND=0),
 * GMLAKE_ENABLE=0 or settings that turn gmlake off (config/check.c) leave the environment alone.  `gmlake run` relies on this too: one rule.
 *
 * Where it sets the backend, or finds it set, it also names the variable in GMLAKE_PYTORCH_ROUTE
 * and appends the folder of python/torch_route (installed: DATADIR/gmlake/python) to PYTHONPATH:
 * PyTorch loads its "torch.backends" entry point at `import torch`, which makes
 * torch.multiprocessing share CUDA tensors through gmlake's IPC, what that backend refuses
 * (_gmlake_torch.py says how).
 */
#include <ctype.h>
#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "interpose.h"

/* The next entry of the comma-separated `key:value` list at *c, read as PyTorch's tokenizer reads
 * it (c10 ConfigTokenizer): every blank dropped, wherever it is (tabs and newlines too), key and
 * value split at the first colon.  Each is cut to its buffer, which a name PyTorch knows fits
 * whole.  False at the end of the list. */
static bool conf_next(const char **c, char *key, size_t klen, char *val, size_t vlen)
{
    while (**c == ',' || isspace((unsigned char)**c))
        (*c)++;
    if (!**c)
        return false;
    char *out = key;
    size_t n = 0, len = klen;
    for (; **c && **c != ','; (*c)++) {
        if (isspace((unsigned char)**c))
            continue;
        if (**c == ':' && out == key) {
            out[n] = '\0';
            out = val, n = 0, len = vlen;
        } else if (n + 1 < len)
            out[n++] = **c;
    }
    out[n] = '\0';
    if (out == key)
        *val = '\0';
    return true;
}

/* What a user's PyTorch allocator setting asks for: a backend other than cudaMallocAsync in any
 * of its entries (PyTorch versions differ on which of two wins) or, naming no backend,
 * expandable_segments (GML_TORCH_BYPASS); only cudaMallocAsync (GML_TORCH_KEEP); neither
 * (GML_TORCH_SET).  *expandable: whether it turns expandable_segments on (PyTorch's allocator
 * then maps its own memory). */
static int conf_asks(const char *conf, bool *expandable)
{
    char key[32], v[64];
    bool async = false, other = false;
    *expandable = false;
    for (const char *c = conf; conf_next(&c, key, sizeof key, v, sizeof v);) {
        bool backend = strcmp(key, "backend") == 0;
        other |= backend && strcmp(v, "cudaMallocAsync") != 0;
        async |= backend;
        *expandable |= strcmp(key, "expandable_segments") == 0 &&
                       (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0);
    }
    return other ? GML_TORCH_BYPASS : async ? GML_TORCH_KEEP
                                            : *expandable ? GML_TORCH_BYPASS : GML_TORCH_SET;
}

const char *const gml_torch_vars[2] = {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"};

int gml_torch_plan(const char *const conf[2], const char **var, char value[2][GML_TORCH_VALUE])
{
    int asks[2];
    *var = gml_torch_vars[conf[0] ? 0 : 1];
    for (int i = 0; i < 2; i++) {
        value[i][0] = '\0';
        bool expandable;
        asks[i] = conf[i] ? conf_asks(conf[i], &expandable) : GML_TORCH_SET;
        if (asks[i] == GML_TORCH_BYPASS) { /* kept, whichever variable PyTorch reads first */
            *var = gml_torch_vars[i];
            return GML_TORCH_BYPASS;
        }
    }
    int action = GML_TORCH_KEEP;
    for (int i = 0; i < 2; i++) {
        /* unset (the older variable gets it where neither is set), or naming the backend already */
        if ((!conf[i] && (i == 0 || conf[0])) || asks[i] == GML_TORCH_KEEP)
            continue;
        /* what PyTorch ignores at the end (blanks, a trailing comma) goes: an entry appended after
         * a comma already there, or after nothing but blanks, is an empty entry, which it refuses */
        const char *c = conf[i] ? conf[i] : "";
        size_t keep = strlen(c);
        while (keep && (isspace((unsigned char)c[keep - 1]) || c[keep - 1] == ','))
            keep--;
        if ((size_t)snprintf(value[i], GML_TORCH_VALUE, "%.*s%sbackend:cudaMallocAsync", (int)keep,
                             c, keep ? "," : "") >= GML_TORCH_VALUE) {
            *var = gml_torch_vars[i]; /* too long to extend: leave the user's settings as they are */
            return GML_TORCH_BYPASS;
        }
        action = GML_TORCH_SET;
    }
    return action;
}

/* Reads the settings into a private copy, quietly: the shared settings (and their messages, log
 * file and exit handler) still load on the first hook call, after the program's own setup. */
static void quiet_settings(gml_config *c)
{
    char *msgs = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&msgs, &len);
    if (!m) {
        gml_config_defaults(c);
        return;
    }
    gml_depth++;
    gml_config_load(c, NULL, m);
    gml_depth--;
    fclose(m);
    free(msgs);
}

/* Whether the colon-separated list `list` has the entry `dir`. */
static bool path_has(const char *list, const char *dir)
{
    size_t n = strlen(dir);
    for (const char *c = list; c && *c;) {
        const char *end = strchr(c, ':');
        size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == n && strncmp(c, dir, n) == 0)
            return true;
        c = end ? end + 1 : c + len;
    }
    return false;
}

/* The folder holding _gmlake_torch.py: beside this library as installed (LIBDIR/../share or,
 * for a multiarch libdir, LIBDIR/../../share), the install prefix's, or the source tree's. */
static bool torch_route_dir(char *out, size_t len)
{
    char self[PATH_MAX] = "";
    Dl_info info;
    if (dladdr((void *)&torch_route_dir, &info) && info.dli_fname &&
        realpath(info.dli_fname, self))
        dirname(self);
    char beside[2][PATH_MAX + 32];
    const char *cand[4];
    int n = 0;
    if (*self) {
        snprintf(beside[0], sizeof beside[0], "%s/../share/gmlake/python", self);
        snprintf(beside[1], sizeof beside[1], "%s/../../share/gmlake/python", self);
        cand[n++] = beside[0];
        cand[n++] = beside[1];
    }
    cand[n++] = GML_TORCH_ROUTE_INSTALLED;
    cand[n++] = GML_TORCH_ROUTE_SOURCE;
    for (int i = 0; i < n; i++) {
        char file[PATH_MAX + 64], real[PATH_MAX];
        snprintf(file, sizeof file, "%s/_gmlake_torch.py", cand[i]);
        if (access(file, R_OK) == 0 && realpath(cand[i], real) && strlen(real) < len) {
            snprintf(out, len, "%s", real);
            return true;
        }
    }
    return false;
}

/* Tells PyTorch's import where gmlake's part is (see the top of this file); var: the variable
 * that now names backend:cudaMallocAsync. */
static void torch_route_python(const char *var)
{
    setenv(GML_TORCH_ROUTE_ENV, var, 1);
    char dir[PATH_MAX];
    if (!torch_route_dir(dir, sizeof dir))
        return;
    const char *old = getenv("PYTHONPATH");
    if (old && path_has(old, dir))
        return;
    char *v = NULL;
    if (asprintf(&v, "%s%s%s", old && *old ? old : "", old && *old ? ":" : "", dir) < 0)
        return;
    setenv("PYTHONPATH", v, 1);
    free(v);
}

/* A line logged here first starts gmlake as the first hook call would (gml_enabled: the
 * settings, and with gmlake on the trace file, the exit summary and the fork handlers). */
__attribute__((constructor)) static void pytorch_route(void)
{
    gml_config c;
    quiet_settings(&c);
    /* settings the pool would refuse turn gmlake off at its first call (settings.c): PyTorch then
     * keeps its own allocator, as without gmlake, rather than a backend nothing of gmlake's serves */
    if (!c.enable || !c.pytorch_backend || gml_config_check(&c, 0, (char[8]){0}, 8) != 0)
        return;
    const char *var;
    char value[2][GML_TORCH_VALUE];
    const char *conf[2] = {getenv(gml_torch_vars[0]), getenv(gml_torch_vars[1])};
    switch (gml_torch_plan(conf, &var, value)) {
    case GML_TORCH_SET:
        for (int i = 0; i < 2; i++)
            if (*value[i])
                setenv(gml_torch_vars[i], value[i], 1);
        torch_route_python(var);
        if (c.log_level >= GML_LOG_DEBUG) {
            gml_enabled();
            for (int i = 0; i < 2; i++)
                if (*value[i])
                    gml_log(GML_LOG_DEBUG, "%s=%s (PyTorch hands every tensor to gmlake)",
                            gml_torch_vars[i], value[i]);
        }
        break;
    case GML_TORCH_BYPASS: {
        /* said once per process tree (a shell script's every command loads gmlake): a process
         * whose parent warned about the same setting stays quiet.  Still one thread here: setenv
         * is safe. */
        char said[GML_TORCH_VALUE + 64];
        snprintf(said, sizeof said, "%s=%s", var, getenv(var));
        const char *before = getenv(GML_TORCH_WARNED_ENV);
        if (before && strcmp(before, said) == 0)
            break;
        setenv(GML_TORCH_WARNED_ENV, said, 1);
        gml_enabled();
        bool expandable;
        if (conf_asks(getenv(var), &expandable) == GML_TORCH_SET) /* kept for its length */
            gml_log(GML_LOG_WARN, "%s (%zu bytes) is too long for gmlake to append "
                    "backend:cudaMallocAsync: PyTorch keeps its own caching allocator, with no "
                    "saving from gmlake.  Add backend:cudaMallocAsync to it yourself",
                    var, strlen(getenv(var)));
        else if (expandable)
            gml_log(GML_LOG_WARN, "%s=%s keeps PyTorch's own caching allocator: PyTorch's "
                    "allocations will not reach gmlake (it maps its own memory).  Use "
                    "backend:cudaMallocAsync, or unset %s and let gmlake set it",
                    var, getenv(var), var);
        else /* the native allocator asks CUDA for large segments, which gmlake serves */
            gml_log(GML_LOG_WARN, "%s=%s keeps PyTorch's own caching allocator: gmlake serves its "
                    "segments (CUDA IPC, torch.multiprocessing, CUDA graphs and snapshots work) but "
                    "cannot save memory inside them.  For gmlake's savings use backend:cudaMallocAsync, "
                    "or unset %s and let gmlake set it", var, getenv(var), var);
        break;
    }
    case GML_TORCH_KEEP: /* the backend gmlake serves through, named by the user (or a parent) */
        torch_route_python(var);
        break;
    default: break;
    }
}
