/*
 * device_sim.c — a GPU made of host memory, for tests and offline replay.
 *
 * Backed mode: physical memory is one memfd of `capacity` bytes; a chunk is a run of
 * granularity-sized units of it (contiguous, so that a map is one mmap and an export one file
 * offset: a nearly full backed device can refuse a create that CUDA, which backs a handle with any
 * free pages, would serve); map() is mmap(MAP_SHARED|MAP_FIXED) of the chunk's pages into a
 * reserved PROT_NONE range, so one chunk mapped at two addresses truly aliases.  Pages become
 * readable and writable only at set_access(), like CUDA.  A chunk's pages are punched out of the
 * memfd when it is released and unmapped everywhere.
 * IPC (backed mode): an exported chunk is a new open file description of the memfd (through
 * /proc/self/fd) whose file offset is the chunk's first byte, so one descriptor says both which
 * file and where; an imported chunk keeps its own descriptor and offset, is mapped from them, and
 * counts against no capacity (the exporter's device holds the memory).
 * Unbacked mode (replay of multi-GB traces): the same bookkeeping and checks, no host memory, and
 * reservations are fake addresses that must never be dereferenced.  A chunk takes any free units,
 * scattered or not, as CUDA takes any free pages: a replay on a small --capacity fails an
 * allocation only where the device's free memory cannot hold it.
 *
 * Streams: each stream key has simulated work (gml_sim_launch / gml_sim_finish); an event
 * completes once the work its stream had at the record has completed (and, in manual mode, once
 * the test completed it), so a block handed to a stream too early shows up in the tests.  That
 * work, its events and GPU-side waits are sim_work.c's; this file takes the lock, injects the
 * tests' failures and charges each call around it.
 *
 * The sim checks what the CUDA driver checks (mapping into a reservation, no overlap, unmapping
 * whole mappings, freeing only unmapped reservations) and fails such calls with
 * GMLAKE_ERR_DEVICE, so pool bugs show up as errors in the tests.
 *
 * Every successful call is charged its estimated driver time (core/cost.h): chunk_create, map and
 * chunk_release by the handle's size, unmap and set_access per handle mapped in the range, the
 * other kinds a fixed cost per call.  gml_sim_device_seconds reads the sum.
 */

#include "device.h"

#include "cost.h"
#include "sim_work.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uthash.h>

typedef struct sim_chunk {
    uint64_t id; /* the handle */
    size_t unit0, nunits;
    size_t *units; /* unbacked: its nunits units, in order (NULL: unit0 .. unit0 + nunits - 1) */
    int maps;
    bool released;
    int fd;    /* imported: the descriptor the chunk is mapped from (-1: one of this sim's) */
    off_t off; /* imported: the chunk's first byte in fd */
    off_t end; /* imported: fd's size */
    UT_hash_handle hh;
} sim_chunk;

typedef struct sim_resv {
    uintptr_t va;
    size_t size;
    size_t mapped_units;
    struct sim_resv *next;
} sim_resv;

/* One record per mapped granularity unit of virtual address space. */
typedef struct sim_unit_map {
    uintptr_t va; /* key */
    uintptr_t map_va;
    size_t map_size;
    sim_chunk *chunk;
    sim_resv *resv;
    bool access;
    UT_hash_handle hh;
} sim_unit_map;

typedef struct sim {
    pthread_mutex_t mu;
    gml_sim_config cfg;
    int memfd;
    uint8_t *unit_used;
    size_t nunits, hint, used_units;
    uint64_t next_id;
    sim_chunk *chunks;
    sim_unit_map *units;
    size_t nmappings;
    sim_resv *resv;
    size_t nresv;
    sim_work w; /* streams, events, GPU-side waits (sim_work.c) */
    uintptr_t fake_next;
    int fail_kind, fail_nth;
    int hook_kind;                 /* tests: hook(hook_arg) runs before each call of hook_kind */
    void (*hook)(void *);
    void *hook_arg;
    double charged_by[GMLAKE_DC_COUNT]; /* estimated driver seconds of the successful calls, by kind */
} sim;

static sim *sim_of(gml_device *dev) { return (sim *)dev->ctx; }

/* Runs the test hook of `kind`, if one is set, without the lock (it may block the call). */
static void call_hook(sim *s, int kind)
{
    pthread_mutex_lock(&s->mu);
    void (*fn)(void *) = s->hook_kind == kind ? s->hook : NULL;
    void *arg = s->hook_arg;
    pthread_mutex_unlock(&s->mu);
    if (fn)
        fn(arg);
}

/* Called with the lock held: true when this call is the injected failure. */
static bool injected(sim *s, int kind)
{
    if (s->fail_nth <= 0 || s->fail_kind != kind)
        return false;
    return --s->fail_nth == 0;
}

/* Called with the lock held: one call of `kind` on a handle of handle_bytes succeeded. */
static void charge(sim *s, int kind, size_t handle_bytes)
{
    s->charged_by[kind] += gml_cost_call(kind, handle_bytes);
}

static sim_resv *resv_containing(sim *s, uintptr_t va, size_t size)
{
    for (sim_resv *r = s->resv; r; r = r->next)
        if (va >= r->va && va + size <= r->va + r->size && va + size > va)
            return r;
    return NULL;
}

static void release_units(sim *s, sim_chunk *c)
{
    size_t g = s->cfg.granularity;
    if (c->fd >= 0) { /* imported: the exporter's memory, not this device's */
        close(c->fd);
        HASH_DEL(s->chunks, c);
        free(c);
        return;
    }
    if (c->units) {
        for (size_t i = 0; i < c->nunits; i++)
            s->unit_used[c->units[i]] = 0;
        if (c->units[0] < s->hint)
            s->hint = c->units[0];
        free(c->units);
    } else {
        memset(s->unit_used + c->unit0, 0, c->nunits);
        if (c->unit0 < s->hint)
            s->hint = c->unit0;
    }
    s->used_units -= c->nunits;
    if (s->cfg.backed)
        fallocate(s->memfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)(c->unit0 * g),
                  (off_t)(c->nunits * g));
    HASH_DEL(s->chunks, c);
    free(c);
}

/* Called with the lock held, used_units + n <= nunits: a chunk of the n lowest free units
 * (unbacked mode). */
static int take_scattered(sim *s, size_t n, gml_handle *out)
{
    sim_chunk *c = calloc(1, sizeof *c);
    size_t *units = malloc(n * sizeof *units);
    if (!c || !units) {
        free(c);
        free(units);
        return GMLAKE_ERR_DEVICE;
    }
    size_t k = 0;
    for (size_t i = s->hint; k < n && i < s->nunits; i++)
        if (!s->unit_used[i]) {
            s->unit_used[i] = 1;
            units[k++] = i;
        }
    /* every unit below hint is used (release lowers it), so the count guarantees k == n */
    c->id = ++s->next_id;
    c->fd = -1;
    c->unit0 = units[0];
    c->nunits = n;
    c->units = units;
    s->used_units += n;
    if (units[0] == s->hint)
        for (s->hint = units[n - 1] + 1; s->hint < s->nunits && s->unit_used[s->hint]; s->hint++) {
        }
    HASH_ADD(hh, s->chunks, id, sizeof c->id, c);
    *out = c->id;
    return GMLAKE_OK;
}

static int sim_chunk_create(void *ctx, size_t size, gml_handle *out)
{
    sim *s = ctx;
    call_hook(s, GMLAKE_DC_CHUNK_CREATE);
    size_t g = s->cfg.granularity;
    if (size == 0 || size % g)
        return GMLAKE_ERR_DEVICE;
    size_t n = size / g;
    pthread_mutex_lock(&s->mu);
    int rc = GMLAKE_ERR_NOMEM;
    if (injected(s, GMLAKE_DC_CHUNK_CREATE)) {
        rc = GMLAKE_ERR_DEVICE;
        goto out;
    }
    if (s->used_units + n > s->nunits)
        goto out;
    if (!s->cfg.backed) {
        rc = take_scattered(s, n, out);
        if (rc == GMLAKE_OK)
            charge(s, GMLAKE_DC_CHUNK_CREATE, size);
        goto out;
    }
    /* first fit of n free units, starting at the lowest unit that may be free */
    for (size_t i = s->hint; i + n <= s->nunits; i++) {
        size_t run = 0;
        while (run < n && !s->unit_used[i + run])
            run++;
        if (run < n) {
            i += run;
            continue;
        }
        sim_chunk *c = calloc(1, sizeof *c);
        if (!c) {
            rc = GMLAKE_ERR_DEVICE;
            goto out;
        }
        c->id = ++s->next_id;
        c->fd = -1;
        c->unit0 = i;
        c->nunits = n;
        memset(s->unit_used + i, 1, n);
        s->used_units += n;
        if (i == s->hint)
            s->hint = i + n;
        HASH_ADD(hh, s->chunks, id, sizeof c->id, c);
        *out = c->id;
        charge(s, GMLAKE_DC_CHUNK_CREATE, size);
        rc = GMLAKE_OK;
        break;
    }
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_chunk_release(void *ctx, gml_handle h)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    sim_chunk *c = NULL;
    HASH_FIND(hh, s->chunks, &h, sizeof h, c);
    int rc = GMLAKE_OK;
    if (!c || c->released || injected(s, GMLAKE_DC_CHUNK_RELEASE)) {
        rc = GMLAKE_ERR_DEVICE;
    } else {
        charge(s, GMLAKE_DC_CHUNK_RELEASE, c->nunits * s->cfg.granularity);
        c->released = true;
        if (c->maps == 0)
            release_units(s, c);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_va_reserve(void *ctx, size_t size, size_t align, uintptr_t *out)
{
    sim *s = ctx;
    size_t g = s->cfg.granularity;
    if (size == 0 || size % g)
        return GMLAKE_ERR_DEVICE;
    if (align < g)
        align = g;
    sim_resv *r = calloc(1, sizeof *r);
    if (!r)
        return GMLAKE_ERR_DEVICE;
    pthread_mutex_lock(&s->mu);
    int rc = GMLAKE_OK;
    if (injected(s, GMLAKE_DC_VA_RESERVE)) {
        rc = GMLAKE_ERR_DEVICE;
        goto out;
    }
    if (s->cfg.backed) {
        size_t span = size + align;
        void *p = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            rc = GMLAKE_ERR_DEVICE;
            goto out;
        }
        uintptr_t base = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
        if (base > (uintptr_t)p)
            munmap(p, base - (uintptr_t)p);
        uintptr_t end = (uintptr_t)p + span;
        if (end > base + size)
            munmap((void *)(base + size), end - (base + size));
        r->va = base;
    } else {
        uintptr_t base = (s->fake_next + align - 1) & ~(uintptr_t)(align - 1);
        s->fake_next = base + size + g; /* a guard gap: neighbouring ranges never touch */
        r->va = base;
    }
    r->size = size;
    r->next = s->resv;
    s->resv = r;
    s->nresv++;
    charge(s, GMLAKE_DC_VA_RESERVE, size);
    *out = r->va;
    r = NULL;
out:
    pthread_mutex_unlock(&s->mu);
    free(r);
    return rc;
}

static int sim_va_free(void *ctx, uintptr_t va, size_t size)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc = GMLAKE_ERR_DEVICE;
    for (sim_resv **pp = &s->resv; *pp; pp = &(*pp)->next) {
        sim_resv *r = *pp;
        if (r->va != va || r->size != size)
            continue;
        if (r->mapped_units || injected(s, GMLAKE_DC_VA_FREE))
            break;
        *pp = r->next;
        s->nresv--;
        if (s->cfg.backed)
            munmap((void *)va, size);
        free(r);
        charge(s, GMLAKE_DC_VA_FREE, size);
        rc = GMLAKE_OK;
        break;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_map(void *ctx, uintptr_t va, size_t size, gml_handle h)
{
    sim *s = ctx;
    call_hook(s, GMLAKE_DC_MAP);
    size_t g = s->cfg.granularity;
    pthread_mutex_lock(&s->mu);
    int rc = GMLAKE_ERR_DEVICE;
    sim_chunk *c = NULL;
    HASH_FIND(hh, s->chunks, &h, sizeof h, c);
    sim_resv *r = resv_containing(s, va, size);
    if (c && c->fd >= 0 && c->nunits == 0 && size % g == 0 && (uint64_t)c->off + size <= (uint64_t)c->end)
        c->nunits = size / g;
    if (!c || c->released || size != c->nunits * g || va % g || !r || injected(s, GMLAKE_DC_MAP))
        goto out;
    for (uintptr_t u = va; u < va + size; u += g) {
        sim_unit_map *m = NULL;
        HASH_FIND(hh, s->units, &u, sizeof u, m);
        if (m)
            goto out; /* overlaps a mapping */
    }
    if (s->cfg.backed) {
        void *p = c->fd >= 0 ? mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, c->fd, c->off)
                             : mmap((void *)va, size, PROT_NONE, MAP_SHARED | MAP_FIXED, s->memfd,
                                    (off_t)(c->unit0 * g));
        if (p == MAP_FAILED)
            goto out;
    }
    for (uintptr_t u = va; u < va + size; u += g) {
        sim_unit_map *m = calloc(1, sizeof *m);
        if (!m)
            goto out; /* host out of memory: the test run is lost anyway */
        m->va = u;
        m->map_va = va;
        m->map_size = size;
        m->chunk = c;
        m->resv = r;
        HASH_ADD(hh, s->units, va, sizeof m->va, m);
    }
    r->mapped_units += size / g;
    c->maps++;
    s->nmappings++;
    charge(s, GMLAKE_DC_MAP, size);
    rc = GMLAKE_OK;
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_unmap(void *ctx, uintptr_t va, size_t size)
{
    sim *s = ctx;
    call_hook(s, GMLAKE_DC_UNMAP);
    size_t g = s->cfg.granularity;
    pthread_mutex_lock(&s->mu);
    int rc = GMLAKE_ERR_DEVICE;
    if (size == 0 || va % g || size % g || injected(s, GMLAKE_DC_UNMAP))
        goto out;
    /* validate: the range is exactly a sequence of whole mappings */
    for (uintptr_t u = va; u < va + size;) {
        sim_unit_map *m = NULL;
        HASH_FIND(hh, s->units, &u, sizeof u, m);
        if (!m || m->map_va != u || u + m->map_size > va + size)
            goto out;
        u += m->map_size;
    }
    for (uintptr_t u = va; u < va + size;) {
        sim_unit_map *m = NULL;
        HASH_FIND(hh, s->units, &u, sizeof u, m);
        sim_chunk *c = m->chunk;
        size_t msize = m->map_size;
        charge(s, GMLAKE_DC_UNMAP, msize);
        for (uintptr_t k = u; k < u + msize; k += g) {
            sim_unit_map *mk = NULL;
            HASH_FIND(hh, s->units, &k, sizeof k, mk);
            mk->resv->mapped_units--;
            HASH_DEL(s->units, mk);
            free(mk);
        }
        s->nmappings--;
        if (--c->maps == 0 && c->released)
            release_units(s, c);
        u += msize;
    }
    if (s->cfg.backed)
        mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
             -1, 0);
    rc = GMLAKE_OK;
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_set_access(void *ctx, uintptr_t va, size_t size)
{
    sim *s = ctx;
    call_hook(s, GMLAKE_DC_SET_ACCESS);
    size_t g = s->cfg.granularity;
    pthread_mutex_lock(&s->mu);
    int rc = GMLAKE_ERR_DEVICE;
    if (size == 0 || va % g || size % g || injected(s, GMLAKE_DC_SET_ACCESS))
        goto out;
    for (uintptr_t u = va; u < va + size; u += g) {
        sim_unit_map *m = NULL;
        HASH_FIND(hh, s->units, &u, sizeof u, m);
        if (!m)
            goto out;
    }
    if (s->cfg.backed && mprotect((void *)va, size, PROT_READ | PROT_WRITE) != 0)
        goto out;
    for (uintptr_t u = va; u < va + size; u += g) {
        sim_unit_map *m = NULL;
        HASH_FIND(hh, s->units, &u, sizeof u, m);
        m->access = true;
        if (u == va || u == m->map_va) /* each handle in the range once */
            charge(s, GMLAKE_DC_SET_ACCESS, m->map_size);
    }
    rc = GMLAKE_OK;
out:
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_event_create(void *ctx, gml_event *out)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    sim_event *e = sim_work_event_new(&s->w);
    if (e)
        charge(s, GMLAKE_DC_EVENT_CREATE, 0);
    pthread_mutex_unlock(&s->mu);
    *out = e;
    return e ? GMLAKE_OK : GMLAKE_ERR_DEVICE;
}

static int sim_event_destroy(void *ctx, gml_event ev)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    charge(s, GMLAKE_DC_EVENT_DESTROY, 0);
    sim_work_event_free(&s->w, ev);
    pthread_mutex_unlock(&s->mu);
    return GMLAKE_OK;
}

static int sim_event_record(void *ctx, gml_event ev, gml_stream key)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc = injected(s, GMLAKE_DC_EVENT_RECORD) ? GMLAKE_ERR_DEVICE : GMLAKE_OK;
    if (rc == GMLAKE_OK) {
        sim_work_record(&s->w, ev, key);
        charge(s, GMLAKE_DC_EVENT_RECORD, 0);
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_stream_wait(void *ctx, gml_stream key, gml_event ev)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc = injected(s, GMLAKE_DC_STREAM_WAIT) ? GMLAKE_ERR_DEVICE : GMLAKE_OK;
    if (rc == GMLAKE_OK && !sim_work_wait(&s->w, key, ev))
        rc = GMLAKE_ERR_DEVICE;
    if (rc == GMLAKE_OK)
        charge(s, GMLAKE_DC_STREAM_WAIT, 0);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_event_query(void *ctx, gml_event ev)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc = sim_work_done(&s->w, ev) ? GMLAKE_OK : GMLAKE_ERR_BUSY;
    charge(s, GMLAKE_DC_EVENT_QUERY, 0); /* "not yet" is an answer too */
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static int sim_event_sync(void *ctx, gml_event ev)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    sim_work_sync(&s->w, ev);
    charge(s, GMLAKE_DC_EVENT_SYNC, 0);
    pthread_mutex_unlock(&s->mu);
    return GMLAKE_OK;
}

static int sim_synchronize(void *ctx)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    int rc = GMLAKE_ERR_DEVICE;
    if (!injected(s, GMLAKE_DC_SYNCHRONIZE)) {
        sim_work_complete_all(&s->w);
        charge(s, GMLAKE_DC_SYNCHRONIZE, 0);
        rc = GMLAKE_OK;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

static double sim_modeled_seconds(void *ctx, int kind)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    double t = s->charged_by[kind];
    pthread_mutex_unlock(&s->mu);
    return t;
}

static size_t sim_granularity(void *ctx) { return ((sim *)ctx)->cfg.granularity; }

static int sim_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    *total_bytes = s->cfg.capacity;
    *free_bytes = (s->nunits - s->used_units) * s->cfg.granularity;
    pthread_mutex_unlock(&s->mu);
    return GMLAKE_OK;
}

static void sim_destroy(void *ctx)
{
    sim *s = ctx;
    sim_unit_map *m, *mt;
    HASH_ITER(hh, s->units, m, mt) {
        HASH_DEL(s->units, m);
        free(m);
    }
    sim_chunk *c, *ct;
    HASH_ITER(hh, s->chunks, c, ct) {
        HASH_DEL(s->chunks, c);
        if (c->fd >= 0)
            close(c->fd);
        free(c->units); /* unbacked: its units' list (release_units frees it otherwise) */
        free(c);
    }
    while (s->resv) {
        sim_resv *r = s->resv;
        s->resv = r->next;
        if (s->cfg.backed)
            munmap((void *)r->va, r->size);
        free(r);
    }
    sim_work_free(&s->w);
    if (s->memfd >= 0)
        close(s->memfd);
    free(s->unit_used);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static bool sim_can_export(void *ctx) { return ((sim *)ctx)->cfg.backed; }

static int sim_handle_export(void *ctx, gml_handle h, int *fd)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->mu);
    sim_chunk *c = NULL;
    HASH_FIND(hh, s->chunks, &h, sizeof h, c);
    int rc = GMLAKE_ERR_DEVICE;
    if (c && !c->released && s->cfg.backed) {
        char path[64];
        int src = c->fd >= 0 ? c->fd : s->memfd;
        off_t off = c->fd >= 0 ? c->off : (off_t)(c->unit0 * s->cfg.granularity);
        snprintf(path, sizeof path, "/proc/self/fd/%d", src);
        int nfd = open(path, O_RDWR | O_CLOEXEC); /* a description of its own: its own offset */
        if (nfd >= 0 && lseek(nfd, off, SEEK_SET) == off) {
            *fd = nfd;
            rc = GMLAKE_OK;
        } else if (nfd >= 0) {
            close(nfd);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* size 0: not known yet (the first map gives it, within the descriptor's file). */
static int sim_handle_import(void *ctx, int fd, size_t size, gml_handle *out)
{
    sim *s = ctx;
    size_t g = s->cfg.granularity;
    struct stat st;
    off_t off = lseek(fd, 0, SEEK_CUR);
    if (!s->cfg.backed || size % g || off < 0 || fstat(fd, &st) != 0 ||
        (uint64_t)off + size > (uint64_t)st.st_size)
        return GMLAKE_ERR_DEVICE;
    sim_chunk *c = calloc(1, sizeof *c);
    if (!c)
        return GMLAKE_ERR_DEVICE;
    c->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (c->fd < 0) {
        free(c);
        return GMLAKE_ERR_DEVICE;
    }
    c->off = off;
    c->end = st.st_size;
    c->nunits = size / g; /* 0: as CUDA's descriptors carry it, the first map says it */
    pthread_mutex_lock(&s->mu);
    c->id = ++s->next_id;
    HASH_ADD(hh, s->chunks, id, sizeof c->id, c);
    pthread_mutex_unlock(&s->mu);
    *out = c->id;
    return GMLAKE_OK;
}

static const gml_device_ops sim_ops = {
    .name = "sim",
    .chunk_create = sim_chunk_create,
    .chunk_release = sim_chunk_release,
    .va_reserve = sim_va_reserve,
    .va_free = sim_va_free,
    .map = sim_map,
    .unmap = sim_unmap,
    .set_access = sim_set_access,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_sync = sim_event_sync,
    .synchronize = sim_synchronize,
    .stream_wait = sim_stream_wait,
    .modeled_seconds = sim_modeled_seconds,
    .granularity = sim_granularity,
    .mem_info = sim_mem_info,
    .handle_export = sim_handle_export,
    .can_export = sim_can_export,
    .handle_import = sim_handle_import,
    .destroy = sim_destroy,
};

gml_device *gml_sim_create(const gml_sim_config *cfg)
{
    size_t g = cfg->granularity ? cfg->granularity : (size_t)2 << 20;
    if (cfg->capacity == 0 || cfg->capacity % g || (g & (g - 1)))
        return NULL;
    sim *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    s->cfg = *cfg;
    s->cfg.granularity = g;
    s->memfd = -1;
    s->nunits = cfg->capacity / g;
    s->fake_next = (uintptr_t)1 << 44;
    s->unit_used = calloc(s->nunits, 1);
    if (!s->unit_used)
        goto fail;
    if (cfg->backed) {
        s->memfd = memfd_create("gmlake-sim", MFD_CLOEXEC);
        if (s->memfd < 0 || ftruncate(s->memfd, (off_t)cfg->capacity) != 0)
            goto fail;
    }
    gml_device *dev = gml_device_new(&sim_ops, s, 0);
    if (!dev)
        goto fail;
    return dev;
fail:
    sim_destroy(s);
    return NULL;
}

void gml_sim_set_manual_events(gml_device *dev, bool manual)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    s->w.manual = manual;
    pthread_mutex_unlock(&s->mu);
}

int gml_sim_launch(gml_device *dev, gml_stream stream)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    bool ok = sim_work_launch(&s->w, stream);
    pthread_mutex_unlock(&s->mu);
    return ok ? GMLAKE_OK : GMLAKE_ERR_DEVICE;
}

void gml_sim_finish(gml_device *dev, gml_stream stream)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    sim_work_finish(&s->w, stream);
    pthread_mutex_unlock(&s->mu);
}

void gml_sim_finish_to(gml_device *dev, gml_stream stream, uint64_t unit)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    sim_work_finish_to(&s->w, stream, unit);
    pthread_mutex_unlock(&s->mu);
}

void gml_sim_complete_events(gml_device *dev)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    sim_work_complete_all(&s->w);
    pthread_mutex_unlock(&s->mu);
}

size_t gml_sim_bytes_in_use(gml_device *dev)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    size_t n = s->used_units * s->cfg.granularity;
    pthread_mutex_unlock(&s->mu);
    return n;
}

bool gml_sim_backing(gml_device *dev, uintptr_t va, uintptr_t *phys)
{
    sim *s = sim_of(dev);
    size_t g = s->cfg.granularity;
    uintptr_t u = va & ~(uintptr_t)(g - 1);
    sim_unit_map *m = NULL;
    pthread_mutex_lock(&s->mu);
    HASH_FIND(hh, s->units, &u, sizeof u, m);
    if (m) {
        const sim_chunk *c = m->chunk;
        size_t i = (u - m->map_va) / g; /* the unit's place in its chunk */
        *phys = (c->units ? c->units[i] : c->unit0 + i) * g + (va - u);
    }
    pthread_mutex_unlock(&s->mu);
    return m != NULL;
}

uint64_t gml_sim_submitted(gml_device *dev, gml_stream stream)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    uint64_t n = sim_work_submitted(&s->w, stream);
    pthread_mutex_unlock(&s->mu);
    return n;
}

bool gml_sim_ordered(gml_device *dev, gml_stream s_key, uint64_t unit, gml_stream next, bool now)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    bool ok = sim_work_ordered(&s->w, s_key, unit, next, now);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

size_t gml_sim_mapping_count(gml_device *dev)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    size_t n = s->nmappings;
    pthread_mutex_unlock(&s->mu);
    return n;
}

size_t gml_sim_reservation_count(gml_device *dev)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    size_t n = s->nresv;
    pthread_mutex_unlock(&s->mu);
    return n;
}

double gml_sim_device_seconds(gml_device *dev)
{
    if (dev->ops != &sim_ops)
        return 0;
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    double t = 0;
    for (int k = 0; k < GMLAKE_DC_COUNT; k++)
        t += s->charged_by[k];
    pthread_mutex_unlock(&s->mu);
    return t;
}

void gml_sim_fail_call(gml_device *dev, int kind, int nth)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    s->fail_kind = kind;
    s->fail_nth = nth;
    pthread_mutex_unlock(&s->mu);
}

void gml_sim_hook_call(gml_device *dev, int kind, void (*fn)(void *), void *arg)
{
    sim *s = sim_of(dev);
    pthread_mutex_lock(&s->mu);
    s->hook_kind = kind;
    s->hook = fn;
    s->hook_arg = arg;
    pthread_mutex_unlock(&s->mu);
}
