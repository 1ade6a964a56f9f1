/*
 * ipc.c — CUDA IPC of gmlake memory: the mechanism behind the cudaIpc* / cuIpc* hooks (hooks.c).
 *
 * gmlake memory is CUDA virtual memory (cuMemCreate / cuMemMap), which CUDA's legacy IPC cannot
 * export.  A handle gmlake gives (cudaIpcGetMemHandle, cuIpcGetMemHandle on a pointer it served,
 * anywhere inside a live allocation, stitched or not) names the allocation in the exporting
 * process; the process that opens it asks the exporter, over a Unix socket, for the physical
 * extents behind the allocation as POSIX file descriptors (SCM_RIGHTS), imports them, and maps
 * them whole and in order into a fresh virtual range: the pointer it returns is the allocation's
 * first byte, as CUDA's is (CUDA's handle names the whole allocation, whatever pointer inside it
 * was given).  Opening a handle again in the same process on the same device returns the same
 * pointer and counts a reference; cudaIpcCloseMemHandle drops one and unmaps at the last.  On
 * another device it is a mapping of its own, that device's, as CUDA maps a handle once per
 * device.
 *
 * The handle (64 bytes, cudaIpcMemHandle_t's size): magic, version, the exporter's pid and a
 * random key that names its socket ("\0gmlake-ipc-<pid>-<key>", an abstract socket) and must
 * match, and the export's id.  The exporter answers only peers of its own user (SO_PEERCRED) and
 * only for exports still live: freeing an exported allocation forgets its export
 * (gml_ipc_forget), and a later open gets CUDA_ERROR_INVALID_HANDLE.  The memory an opener
 * mapped stays valid (its imported handles hold it) but, as with CUDA and with PyTorch's caching
 * allocator, the exporter may reuse it once freed: keeping it alive is the program's business.
 *
 * The exporter's socket is served by one thread, started at the first export.  Both processes
 * must run under gmlake: a handle of gmlake's reaching CUDA's own cudaIpcOpenMemHandle is refused
 * by CUDA.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <uthash.h>

#include "stitch/registry.h"
#include "interpose.h"

#define IPC_MAGIC 0x4b4c4d47u /* "GMLK" */
#define IPC_VERSION 1u
#define IPC_FDS_PER_MSG 250   /* SCM_RIGHTS carries at most 253 */
#define IPC_TIMEOUT_MS 10000

/* The 64 bytes of a handle. */
typedef struct ipc_wire {
    uint32_t magic, version;
    int32_t pid, device;
    uint64_t key, id;
    uint64_t size;
    uint8_t unused[24];
} ipc_wire;
_Static_assert(sizeof(ipc_wire) == sizeof(cudaIpcMemHandle_t), "handle size");
_Static_assert(sizeof(ipc_wire) == sizeof(CUipcMemHandle), "handle size");

typedef struct ipc_request {
    uint32_t magic;
    uint32_t unused;
    uint64_t key, id;
} ipc_request;

typedef struct ipc_reply {
    int32_t status; /* CUresult */
    uint32_t n;     /* extents; their sizes follow this header, then the descriptors */
    uint64_t size, head;
} ipc_reply;

/* ---- the exporter's side ---- */

typedef struct export_rec {
    uint64_t id;
    uintptr_t base;
    int device;
    UT_hash_handle by_id, by_base;
} export_rec;

static pthread_mutex_t ex_mu = PTHREAD_MUTEX_INITIALIZER;
static export_rec *by_id, *by_base;
static _Atomic size_t nexports; /* read without the lock on every free */
static uint64_t next_id, key;
static int server_fd = -1;
static pid_t server_pid;

static void socket_name(struct sockaddr_un *a, socklen_t *len, pid_t pid, uint64_t k)
{
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "gmlake-ipc-%d-%016llx", (int)pid,
                     (unsigned long long)k);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Sends the reply header and the extent sizes, then the descriptors in batches. */
static void send_reply(int c, int32_t status, const gml_share *sh)
{
    uint32_t n = sh ? (uint32_t)sh->n : 0;
    size_t len = sizeof(ipc_reply) + n * sizeof(uint64_t);
    uint8_t *msg = calloc(1, len);
    if (!msg)
        return;
    ipc_reply r = {.status = status, .n = n, .size = sh ? sh->size : 0, .head = sh ? sh->head : 0};
    memcpy(msg, &r, sizeof r);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t b = sh->bytes[i];
        memcpy(msg + sizeof r + i * sizeof b, &b, sizeof b);
    }
    ssize_t sent = send(c, msg, len, MSG_NOSIGNAL);
    free(msg);
    for (uint32_t i = 0; sent == (ssize_t)len && i < n; i += IPC_FDS_PER_MSG) {
        uint32_t k = n - i < IPC_FDS_PER_MSG ? n - i : IPC_FDS_PER_MSG;
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int) * IPC_FDS_PER_MSG)];
        } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct iovec iov = {.iov_base = &k, .iov_len = sizeof k};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                           .msg_controllen = CMSG_SPACE(sizeof(int) * k)};
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * k);
        memcpy(CMSG_DATA(cm), sh->fd + i, sizeof(int) * k);
        if (sendmsg(c, &m, MSG_NOSIGNAL) != (ssize_t)sizeof k)
            break;
    }
}

/* One request on connection c. */
static void serve_one(int c)
{
    struct ucred cred;
    socklen_t cl = sizeof cred;
    if (getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != getuid()) {
        send_reply(c, CUDA_ERROR_INVALID_HANDLE, NULL);
        return;
    }
    struct pollfd pf = {.fd = c, .events = POLLIN};
    ipc_request q;
    if (poll(&pf, 1, IPC_TIMEOUT_MS) != 1 || recv(c, &q, sizeof q, 0) != (ssize_t)sizeof q)
        return;
    pthread_mutex_lock(&ex_mu);
    export_rec *e = NULL;
    if (q.magic == IPC_MAGIC && q.key == key)
        HASH_FIND(by_id, by_id, &q.id, sizeof q.id, e);
    uintptr_t base = e ? e->base : 0;
    int device = e ? e->device : -1;
    pthread_mutex_unlock(&ex_mu);
    gml_pool *p = e ? gml_registry_get(device) : NULL;
    gml_share sh;
    int rc = p ? gml_pool_share(p, base, &sh) : GMLAKE_ERR_INVALID;
    if (rc == GMLAKE_OK && sh.base != base) { /* freed meanwhile, and the address reused inside */
        gml_share_clear(&sh);
        rc = GMLAKE_ERR_INVALID;
    }
    if (rc != GMLAKE_OK) {
        if (rc == GMLAKE_ERR_DEVICE)
            gml_log(GML_LOG_ERROR, "IPC: device %d cannot export the memory of allocation %#lx "
                    "(CUDA error %d)", device, (unsigned long)base, gml_cuda_last_error());
        send_reply(c, rc == GMLAKE_ERR_DEVICE ? CUDA_ERROR_NOT_SUPPORTED : CUDA_ERROR_INVALID_HANDLE, NULL);
        return;
    }
    send_reply(c, CUDA_SUCCESS, &sh);
    gml_share_clear(&sh);
}

static void *server_main(void *arg)
{
    (void)arg;
    gml_depth = 1; /* the pool's driver calls made here are gmlake's own */
    for (;;) {
        int c = accept4(server_fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            gml_log(GML_LOG_ERROR, "IPC: the export socket failed (%s); no more handles are served",
                    strerror(errno));
            return NULL;
        }
        serve_one(c);
        close(c);
    }
}

/* With ex_mu held: the socket and its thread, once per process (a forked child starts its own). */
static int server_start(void)
{
    if (server_fd >= 0 && server_pid == getpid())
        return 0;
    if (getrandom(&key, sizeof key, 0) != (ssize_t)sizeof key)
        return -1;
    int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un a;
    socklen_t len;
    socket_name(&a, &len, getpid(), key);
    pthread_t t;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (s < 0 || bind(s, (struct sockaddr *)&a, len) != 0 || listen(s, 64) != 0) {
        gml_log(GML_LOG_ERROR, "IPC: cannot open the export socket (%s)", strerror(errno));
        if (s >= 0)
            close(s);
        pthread_attr_destroy(&at);
        return -1;
    }
    server_fd = s;
    server_pid = getpid();
    int rc = pthread_create(&t, &at, server_main, NULL);
    pthread_attr_destroy(&at);
    if (rc != 0) {
        close(s);
        server_fd = -1;
        return -1;
    }
    return 0;
}

int gml_ipc_export(gml_pool *p, int device, uintptr_t ptr, void *handle)
{
    uintptr_t base;
    size_t size;
    if (gml_pool_find(p, ptr, &base, &size) != GMLAKE_OK)
        return CUDA_ERROR_INVALID_VALUE;
    if (!gml_dev_can_export(gml_pool_device(p)))
        return CUDA_ERROR_NOT_SUPPORTED; /* refused here, not when another process opens it */
    pthread_mutex_lock(&ex_mu);
    int rc = server_start() == 0 ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
    export_rec *e = NULL;
    if (rc == CUDA_SUCCESS)
        HASH_FIND(by_base, by_base, &base, sizeof base, e);
    if (rc == CUDA_SUCCESS && !e) {
        if ((e = calloc(1, sizeof *e))) {
            e->id = ++next_id;
            e->base = base;
            e->device = device;
            HASH_ADD(by_id, by_id, id, sizeof e->id, e);
            HASH_ADD(by_base, by_base, base, sizeof e->base, e);
            atomic_fetch_add(&nexports, 1);
        } else {
            rc = CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
    if (rc == CUDA_SUCCESS) {
        ipc_wire w = {.magic = IPC_MAGIC, .version = IPC_VERSION, .pid = (int32_t)getpid(),
                      .device = device, .key = key, .id = e->id, .size = size};
        memcpy(handle, &w, sizeof w);
    }
    pthread_mutex_unlock(&ex_mu);
    return rc;
}

/* With ex_mu held: e's export ends. */
static void export_drop(export_rec *e)
{
    HASH_DELETE(by_id, by_id, e);
    HASH_DELETE(by_base, by_base, e);
    atomic_fetch_sub(&nexports, 1);
    free(e);
}

void gml_ipc_forget(uintptr_t base)
{
    if (atomic_load_explicit(&nexports, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&ex_mu);
    export_rec *e = NULL;
    HASH_FIND(by_base, by_base, &base, sizeof base, e);
    if (e)
        export_drop(e);
    pthread_mutex_unlock(&ex_mu);
}

void gml_ipc_forget_device(int device)
{
    if (atomic_load_explicit(&nexports, memory_order_relaxed) == 0)
        return;
    pthread_mutex_lock(&ex_mu);
    export_rec *e, *tmp;
    HASH_ITER(by_id, by_id, e, tmp)
        if (e->device == device)
            export_drop(e);
    pthread_mutex_unlock(&ex_mu);
}

/* ---- the opener's side ---- */

typedef struct opened {
    struct { int32_t pid, device; uint64_t key, id; } who; /* key: the export, and the device
                                                              * it is mapped for (CUDA maps a
                                                              * handle once per device) */
    uintptr_t va, ptr;
    size_t size;        /* the allocation's bytes from ptr (the exporter's size) */
    size_t span, n;
    gml_handle *h;      /* n imported extents */
    uint64_t *bytes;    /* n: their sizes */
    gml_device *dev;
    unsigned refs;
    UT_hash_handle by_who, by_ptr;
} opened;

static pthread_mutex_t op_mu = PTHREAD_MUTEX_INITIALIZER;
static opened *op_by_who, *op_by_ptr;

bool gml_ipc_is_ours(const void *handle)
{
    ipc_wire w;
    memcpy(&w, handle, sizeof w);
    return w.magic == IPC_MAGIC && w.version == IPC_VERSION;
}

/* Receives the reply: header and sizes into *r and *bytes (malloc'd), then n descriptors. */
static int recv_reply(int c, ipc_reply *r, uint64_t **bytes, int **fds)
{
    *bytes = NULL;
    *fds = NULL;
    struct pollfd pf = {.fd = c, .events = POLLIN};
    size_t cap = sizeof *r + 65536 * sizeof(uint64_t);
    uint8_t *msg = malloc(cap);
    if (!msg)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ssize_t got = poll(&pf, 1, IPC_TIMEOUT_MS) == 1 ? recv(c, msg, cap, 0) : -1;
    if (got < (ssize_t)sizeof *r) {
        free(msg);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    memcpy(r, msg, sizeof *r);
    if (r->status != CUDA_SUCCESS || r->n == 0 || got != (ssize_t)(sizeof *r + r->n * sizeof(uint64_t))) {
        free(msg);
        return r->status != CUDA_SUCCESS ? r->status : CUDA_ERROR_INVALID_HANDLE;
    }
    *bytes = malloc(r->n * sizeof **bytes);
    *fds = malloc(r->n * sizeof **fds);
    if (!*bytes || !*fds) {
        free(msg);
        free(*bytes);
        free(*fds);
        *bytes = NULL;
        *fds = NULL;
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    memcpy(*bytes, msg + sizeof *r, r->n * sizeof **bytes);
    free(msg);
    for (uint32_t i = 0; i < r->n; i++)
        (*fds)[i] = -1;
    for (uint32_t i = 0; i < r->n;) {
        uint32_t k = 0;
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int) * IPC_FDS_PER_MSG)];
        } ctl;
        struct iovec iov = {.iov_base = &k, .iov_len = sizeof k};
        struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                           .msg_controllen = sizeof ctl.buf};
        if (poll(&pf, 1, IPC_TIMEOUT_MS) != 1 || recvmsg(c, &m, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof k)
            return CUDA_ERROR_INVALID_HANDLE;
        struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
        uint32_t have = cm && cm->cmsg_type == SCM_RIGHTS ? (uint32_t)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int)) : 0;
        if (have && i + have <= r->n)
            memcpy(*fds + i, CMSG_DATA(cm), sizeof(int) * have);
        if (have != k || k == 0 || i + have > r->n || (m.msg_flags & MSG_CTRUNC))
            return CUDA_ERROR_INVALID_HANDLE; /* descriptors received are closed by the caller */
        i += k;
    }
    return CUDA_SUCCESS;
}

/* Asks the exporter named by w for its extents: their sizes and descriptors. */
static int ask_exporter(const ipc_wire *w, ipc_reply *r, uint64_t **bytes, int **fds)
{
    *bytes = NULL;
    *fds = NULL;
    int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c < 0)
        return CUDA_ERROR_OPERATING_SYSTEM;
    struct sockaddr_un a;
    socklen_t len;
    socket_name(&a, &len, w->pid, w->key);
    ipc_request q = {.magic = IPC_MAGIC, .key = w->key, .id = w->id};
    int rc = CUDA_ERROR_INVALID_HANDLE; /* no such exporter (exited, or another host) */
    if (connect(c, (struct sockaddr *)&a, len) == 0 && send(c, &q, sizeof q, MSG_NOSIGNAL) == (ssize_t)sizeof q)
        rc = recv_reply(c, r, bytes, fds);
    close(c);
    return rc;
}

/* Maps the n imported extents whole and in order into a fresh range of dev. */
static int map_extents(gml_device *dev, opened *o, const uint64_t *bytes, const int *fds)
{
    size_t g = gml_dev_granularity(dev);
    o->span = 0;
    for (size_t i = 0; i < o->n; i++) {
        if (bytes[i] == 0 || bytes[i] % g)
            return CUDA_ERROR_INVALID_HANDLE;
        o->span += bytes[i];
    }
    if (gml_dev_va_reserve(dev, o->span, g, &o->va) != GMLAKE_OK)
        return CUDA_ERROR_OUT_OF_MEMORY;
    size_t imported = 0, mapped = 0, off = 0;
    int rc = CUDA_SUCCESS;
    for (; imported < o->n; imported++)
        if (gml_dev_handle_import(dev, fds[imported], bytes[imported], &o->h[imported]) != GMLAKE_OK) {
            rc = CUDA_ERROR_INVALID_HANDLE;
            break;
        }
    for (; rc == CUDA_SUCCESS && mapped < o->n; off += bytes[mapped++])
        if (gml_dev_map(dev, o->va + off, bytes[mapped], o->h[mapped]) != GMLAKE_OK)
            rc = CUDA_ERROR_MAP_FAILED;
    if (rc == CUDA_SUCCESS && gml_dev_set_access(dev, o->va, o->span) != GMLAKE_OK)
        rc = CUDA_ERROR_MAP_FAILED;
    if (rc == CUDA_SUCCESS)
        return rc;
    for (size_t i = 0, at = 0; i < mapped; at += bytes[i++])
        gml_dev_unmap(dev, o->va + at, bytes[i]);
    for (size_t i = 0; i < imported; i++)
        gml_dev_chunk_release(dev, o->h[i]);
    gml_dev_va_free(dev, o->va, o->span);
    return rc;
}

static void unmap_opened(opened *o)
{
    for (size_t i = 0, at = 0; i < o->n; at += o->bytes[i++])
        gml_dev_unmap(o->dev, o->va + at, o->bytes[i]); /* one call per extent, as mapped */
    for (size_t i = 0; i < o->n; i++)
        gml_dev_chunk_release(o->dev, o->h[i]);
    gml_dev_va_free(o->dev, o->va, o->span);
}

int gml_ipc_open(int device, const void *handle, uintptr_t *out)
{
    ipc_wire w;
    memcpy(&w, handle, sizeof w);
    if (w.pid == (int32_t)getpid())
        return CUDA_ERROR_INVALID_CONTEXT; /* as CUDA: a process cannot open its own handle */
    gml_pool *p = device >= 0 ? gml_pool_of(device) : NULL;
    if (!p)
        return CUDA_ERROR_INVALID_CONTEXT;
    pthread_mutex_lock(&op_mu); /* held throughout: one open of a handle maps it once */
    opened *o = NULL;
    struct { int32_t pid, device; uint64_t key, id; } who;
    memset(&who, 0, sizeof who);
    who.pid = w.pid, who.device = device, who.key = w.key, who.id = w.id;
    HASH_FIND(by_who, op_by_who, &who, sizeof who, o);
    if (o) {
        o->refs++;
        *out = o->ptr;
        pthread_mutex_unlock(&op_mu);
        return CUDA_SUCCESS;
    }
    ipc_reply r;
    uint64_t *bytes;
    int *fds;
    int rc = ask_exporter(&w, &r, &bytes, &fds);
    if (rc == CUDA_SUCCESS && (!(o = calloc(1, sizeof *o)) || !(o->h = calloc(r.n, sizeof *o->h))))
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (rc == CUDA_SUCCESS) {
        o->n = r.n;
        o->bytes = bytes;
        bytes = NULL;
        o->dev = gml_pool_device(p);
        rc = map_extents(o->dev, o, o->bytes, fds);
    }
    if (rc == CUDA_SUCCESS && r.head + r.size > o->span) {
        unmap_opened(o);
        rc = CUDA_ERROR_INVALID_HANDLE;
    }
    if (rc == CUDA_SUCCESS) {
        memcpy(&o->who, &who, sizeof who);
        o->ptr = o->va + r.head;
        o->size = r.size;
        o->refs = 1;
        HASH_ADD(by_who, op_by_who, who, sizeof o->who, o);
        HASH_ADD(by_ptr, op_by_ptr, ptr, sizeof o->ptr, o);
        *out = o->ptr;
    } else if (o) {
        free(o->bytes);
        free(o->h);
        free(o);
    }
    pthread_mutex_unlock(&op_mu);
    for (uint32_t i = 0; fds && i < r.n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    free(bytes);
    if (rc != CUDA_SUCCESS)
        gml_log(GML_LOG_WARN, "IPC: opening a gmlake handle of process %d failed (CUDA error %d)",
                (int)w.pid, rc);
    return rc;
}

bool gml_ipc_opened_range(uintptr_t ptr, uintptr_t *base, size_t *size)
{
    pthread_mutex_lock(&op_mu);
    opened *o, *tmp, *hit = NULL;
    HASH_ITER(by_ptr, op_by_ptr, o, tmp)
        if (ptr >= o->ptr && ptr < o->ptr + o->size) {
            hit = o;
            *base = o->ptr;
            *size = o->size;
            break;
        }
    pthread_mutex_unlock(&op_mu);
    return hit != NULL;
}

int gml_ipc_close(uintptr_t ptr)
{
    pthread_mutex_lock(&op_mu);
    opened *o = NULL;
    HASH_FIND(by_ptr, op_by_ptr, &ptr, sizeof ptr, o);
    bool found = o != NULL;
    if (o && --o->refs == 0) {
        HASH_DELETE(by_who, op_by_who, o);
        HASH_DELETE(by_ptr, op_by_ptr, o);
        unmap_opened(o);
        free(o->bytes);
        free(o->h);
        free(o);
    }
    pthread_mutex_unlock(&op_mu);
    return found ? CUDA_SUCCESS : -1;
}
