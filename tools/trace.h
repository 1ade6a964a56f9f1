/*
 * trace.h — reading `gmlake-trace v1` files and replaying them through a pool.
 *
 * Format: core/trace_format.h (one line is parsed there); files are plain text or gzip (one or
 * more members).  The first line is the header `# gmlake-trace v1` (then ':', a blank or the
 * end of the line).  Refused, each with a message naming the file (and the line where there is
 * one): a missing header or another version, a malformed line, a NUL byte, a line longer than
 * 510 bytes, a gzip stream cut short ("truncated"), corrupt gzip data, bytes after the last gzip
 * member, a file with no events; at replay, an allocation of a pointer that is live, or a free
 * of one that is not.  A Python pickle (a PyTorch memory snapshot, which `gmlake
 * import-snapshot` converts) is refused with that hint.
 */
#ifndef GML_TRACE_H
#define GML_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/trace_format.h"
#include "../stitch/pool.h"

typedef struct gml_trace_event {
    char op; /* 'A' or 'F' */
    uint64_t ptr, size, stream, t_us;
    uint32_t line;
} gml_trace_event;

typedef struct gml_trace {
    char *path;
    gml_trace_event *ev;
    size_t n;
} gml_trace;

/* 0 on success; -1 with a message "PATH:LINE: what" in err.  PATH "-" is standard input. */
int gml_trace_load(const char *path, gml_trace *out, char *err, size_t errlen);
/* The same from len bytes in memory, named `name` in messages (the fuzzer's entry point). */
int gml_trace_load_mem(const char *name, const void *data, size_t len, gml_trace *out, char *err,
                       size_t errlen);
void gml_trace_free(gml_trace *t);
/* The message, "PATH:LINE: ...", for allocation event e of t whose pointer is live: a fault of the
 * trace that the replay (policy.c) and the stream-ordered filter (trace_filter.c) refuse alike. */
void gml_trace_say_live_again(const gml_trace *t, const gml_trace_event *e, char *err,
                              size_t errlen);
/* Leaves out of t the allocations made with no stream (GML_STREAM_NONE: cudaMalloc, cuMemAlloc)
 * and the frees of those pointers, whatever stream the free names (trace_filter.c).  Under
 * PyTorch's cudaMallocAsync backend every tensor is stream-ordered, so what this leaves out are
 * other libraries' own allocations (cuBLAS workspaces), which torch.cuda.max_memory_reserved does
 * not count: the models are compared with PyTorch's figures on what remains.  0 with *dropped the
 * number of events left out; -1 with "PATH:LINE: what" in err for an allocation of a pointer that
 * is live (kept or left out: the replay could not tell which one a free frees), or when out of
 * memory, t then no longer a whole trace (free it). */
int gml_trace_keep_stream_ordered(gml_trace *t, size_t *dropped, char *err, size_t errlen);

typedef struct gml_replay_result {
    uint64_t allocations, frees, failed;
    uint64_t calls_total;       /* device calls (all kinds) since the pool was made, as stats' */
    uint64_t calls_second_half; /* ... in the second half of the trace */
    uint64_t calls_first_half[GMLAKE_DC_COUNT];
    double device_seconds, device_seconds_second_half; /* estimated driver time (core/cost.h) */
    gmlake_stats stats;                      /* the pool's at the end */
    double seconds;
} gml_replay_result;

/* Replays t through p (trace streams passed as they are), with gml_policy_replay (policy.c).
 * check_every > 0 runs the pool checker after every that many events.  0 on success; -1 with
 * "PATH:LINE: what" in err. */
int gml_replay(gml_pool *p, const gml_trace *t, size_t check_every, gml_replay_result *res,
               char *err, size_t errlen);

#endif /* GML_TRACE_H */
