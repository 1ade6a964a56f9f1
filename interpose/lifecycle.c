/*
 * lifecycle.c — what starts with the settings and what happens at fork: on the first hook call
 * (gml_enabled, once) the settings load (settings.c) and, with gmlake on, the trace file is set
 * (trace.c), the exit summary registered (summary.c) and the fork handlers installed; and whether
 * a hook serves a call (gml_serving).  Above every file it starts or locks; only the hooks
 * (hooks.c, hooktable.c, pointer.c, reset.c) and pytorch_env.c's constructor call it.
 *
 * Fork: CUDA cannot be used in a forked child (its calls fail there).  The handlers take every
 * gmlake lock around fork (pool creation, each pool, trace, the cuda devices', log, the
 * resolver's: the order in which threads take them), so that no lock is left held by a thread
 * that does not exist in the child; the child then serves nothing (gml_serving is false): its
 * calls reach CUDA, which fails them as it does for any child, and no pointer of the parent's
 * pools is handed out or freed there.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "stitch/registry.h"
#include "interpose.h"

static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static bool enabled; /* the settings' enable, once started */

/* The locks in the order every thread takes them: pool creation, each pool, trace (a pool
 * records its allocations and frees under its lock: gml_trace_record), the cuda devices' (a
 * pool's driver calls take them under its lock; a pool creation, under the creation lock), log,
 * the resolver's (a device resolves its driver functions under the creation lock; nothing is
 * locked under them). */
static void fork_prepare(void)
{
    gml_pools_hold_creation(true);
    for (int d = 0; d < GML_MAX_DEVICES; d++)
        if (gml_registry_get(d))
            gml_pool_hold(gml_registry_get(d), true);
    gml_trace_hold(true);
    gml_cuda_fork_hold(true);
    gml_log_hold(true);
    gml_resolve_hold(true);
}

static void fork_release(void)
{
    gml_resolve_hold(false);
    gml_log_hold(false);
    gml_cuda_fork_hold(false);
    gml_trace_hold(false);
    for (int d = GML_MAX_DEVICES - 1; d >= 0; d--)
        if (gml_registry_get(d))
            gml_pool_hold(gml_registry_get(d), false);
    gml_pools_hold_creation(false);
}

static void fork_child(void)
{
    atomic_store(&gml_forked, 1);
    fork_release();
}

static void start(void)
{
    const gml_config *cfg = gml_cfg();
    gml_depth++;
    if (cfg->enable) {
        gml_trace_setup(cfg->trace_file);
        gml_summary_setup(cfg->stats_file);
        pthread_atfork(fork_prepare, fork_release, fork_child);
    }
    enabled = cfg->enable;
    gml_depth--;
}

bool gml_enabled(void)
{
    pthread_once(&start_once, start);
    return enabled;
}

int gmlake_enabled(void)
{
    return gml_enabled() && !atomic_load_explicit(&gml_forked, memory_order_relaxed);
}

bool gml_serving(void)
{
    return gml_depth == 0 && gml_enabled() && !atomic_load_explicit(&gml_forked, memory_order_relaxed);
}
