/*
 * resolve.c — reaching the real CUDA functions (struct gml_real), and nothing else: the hooks and
 * the lookups that hand them out to programs are hooktable.c's, above this file and the hooks.
 *
 * The real dlsym comes from dlvsym (never hooked).  Real functions resolve with RTLD_NEXT (so a
 * wrapper library after gmlake sees gmlake's calls); driver functions fall back to a libcuda.so.1
 * handle, runtime functions to the caller's scope (below); a result that lies in libgmlake itself
 * (one of its hooks) is rejected.
 */
#include <dlfcn.h>
#include <stddef.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "interpose.h"

struct gml_real gml_real;

/* Every real function's type is its CUDA symbol's prototype (for the driver: the PFN_* typedef
 * agrees with the declaration in cuda.h). */
#define GML_REAL_CHECK(field, symbol, type)                                                       \
    _Static_assert(__builtin_types_compatible_p(type, __typeof__(&symbol)),                       \
                   "gml_real." #field " is not typed as " #symbol);
GML_REAL_FUNCTIONS(GML_REAL_CHECK)
#undef GML_REAL_CHECK

static void *libcuda;

/* Whether p lies in libgmlake's own object: a lookup that found one of gmlake's hooks again
 * (hooktable.c hands them out; any exported function of gmlake's is one).  By address, so that
 * this file needs nothing of the hooks. */
static bool in_gmlake(void *p)
{
    static const void *self; /* libgmlake's load address */
    const void *base = __atomic_load_n(&self, __ATOMIC_RELAXED);
    Dl_info info;
    if (!base) {
        if (!dladdr((void *)&in_gmlake, &info))
            return false;
        base = info.dli_fbase;
        __atomic_store_n(&self, base, __ATOMIC_RELAXED);
    }
    return dladdr(p, &info) && info.dli_fbase == base;
}

static void *next_sym(void *handle, const char *name)
{
    void *p = handle ? gml_real.dlsym(handle, name) : NULL;
    return p && !in_gmlake(p) ? p : NULL;
}

static pthread_mutex_t cuda_mu = PTHREAD_MUTEX_INITIALIZER;

/* The real dlsym, resolved once with dlvsym (never hooked).  The dlsym trampoline (hooktable.c)
 * calls it before a sanitizer runtime may have initialised: nothing here is instrumented. */
GML_NO_SANITIZE __attribute__((used, visibility("hidden"))) void *gml_resolve_dlsym(void)
{
    /* A guard against dlvsym reaching dlsym again.  Initial-exec (GML_TLS): no __tls_get_addr
     * call, which a sanitizer runtime intercepts and cannot serve before it has initialised. */
    static GML_TLS int resolving;
    void *p = __atomic_load_n((void **)&gml_real.dlsym, __ATOMIC_ACQUIRE);
    if (p || resolving)
        return p;
    resolving = 1;
    p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!p)
        p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    __atomic_store_n((void **)&gml_real.dlsym, p, __ATOMIC_RELEASE);
    resolving = 0;
    return p;
}

void gml_resolve(void) { gml_resolve_dlsym(); }

static void *libcuda_handle(void)
{
    void *h = __atomic_load_n(&libcuda, __ATOMIC_ACQUIRE);
    if (h)
        return h;
    pthread_mutex_lock(&cuda_mu);
    if (!libcuda)
        __atomic_store_n(&libcuda, dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL), __ATOMIC_RELEASE);
    pthread_mutex_unlock(&cuda_mu);
    return libcuda;
}

/* ---- runtimes in a local scope ----
 * A library loaded with dlopen(RTLD_LOCAL) that links libcudart has that runtime in its own scope
 * only: the dynamic linker binds its cudaMalloc to gmlake's hook (the global scope comes first),
 * but RTLD_NEXT from gmlake cannot see that runtime.  Such a call finds its runtime where the
 * caller's own lookup would: in the calling object's scope (dladdr on the caller's return address,
 * dlopen(RTLD_NOLOAD) of that object, dlsym on the handle, which searches the object and its
 * dependencies).  The functions found are cached per calling object; the handle is kept, which
 * keeps the object loaded, so a cached entry never goes stale. */
GML_TLS const void *gml_caller;

enum { LOCAL_MAX = 32 };
typedef struct local_scope {
    const void *base; /* the calling object's load address (dli_fbase) */
    void *handle;
    struct gml_real real;
} local_scope;
static local_scope locals[LOCAL_MAX];
static int nlocals;
static pthread_mutex_t local_mu = PTHREAD_MUTEX_INITIALIZER;

static void *local_symbol(size_t field, const char *name)
{
    Dl_info info;
    if (!gml_caller || !dladdr(gml_caller, &info) || !info.dli_fbase || !info.dli_fname)
        return NULL;
    void *p = NULL;
    pthread_mutex_lock(&local_mu);
    local_scope *l = NULL;
    for (int i = 0; i < nlocals && !l; i++)
        if (locals[i].base == info.dli_fbase)
            l = &locals[i];
    if (!l && nlocals < LOCAL_MAX) {
        void *h = dlopen(info.dli_fname[0] ? info.dli_fname : NULL, RTLD_LAZY | RTLD_NOLOAD);
        if (h) {
            l = &locals[nlocals++];
            l->base = info.dli_fbase;
            l->handle = h;
        }
    }
    if (l) {
        void **slot = (void **)((char *)&l->real + field);
        if (!*slot)
            *slot = next_sym(l->handle, name);
        p = *slot;
    }
    pthread_mutex_unlock(&local_mu);
    return p;
}

/* Runtime functions are looked up on every call until found: a program may load libcudart long
 * after its first dlsym (Python imports it with torch).  One found with RTLD_NEXT serves every
 * caller; otherwise the caller's own scope is searched (see above) and nothing is cached
 * globally. */
static bool is_driver(const char *name) { return name[0] == 'c' && name[1] == 'u' && name[2] != 'd'; }

/* The real `name` for every caller (RTLD_NEXT; libcuda for the driver), stored in *slot. */
void *gml_resolve_global(void **slot, const char *name)
{
    gml_resolve();
    void *p = is_driver(name) ? gml_driver_symbol(name) : next_sym(RTLD_NEXT, name);
    if (p)
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    return p;
}

/* Neither lock is taken while the other is held (each guards a dlopen and lookups in the real
 * dynamic linker only); a thread may hold the pool-creation lock around them (a device resolves
 * its driver functions), so the fork handlers take them last. */
void gml_resolve_hold(bool hold)
{
    if (hold) {
        pthread_mutex_lock(&cuda_mu);
        pthread_mutex_lock(&local_mu);
    } else {
        pthread_mutex_unlock(&local_mu);
        pthread_mutex_unlock(&cuda_mu);
    }
}

void *gml_resolve_one(void **slot, const char *name)
{
    void *p = gml_resolve_global(slot, name);
    if (p || is_driver(name) || (char *)slot < (char *)&gml_real || (char *)slot >= (char *)(&gml_real + 1))
        return p;
    return local_symbol((size_t)((char *)slot - (char *)&gml_real), name);
}

/* The next definition in the global scope (a wrapper preloaded after gmlake, or libcuda when it
 * is loaded globally), else libcuda.so.1's own. */
void *gml_driver_symbol(const char *name)
{
    gml_resolve();
    void *p = next_sym(RTLD_NEXT, name);
    return p ? p : next_sym(libcuda_handle(), name);
}

