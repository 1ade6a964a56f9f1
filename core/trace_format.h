/*
 * trace_format.h — the `gmlake-trace v1` line format, in one module that both of its users call:
 * the preload layer's recorder writes lines (interpose/trace.c) and the tools read them
 * (tools/trace.c).  It depends on libc only (no pool, no device), so it sits in core/ below both.
 *
 * Format: one event a line, plain text (a reader may also accept gzip); '#' starts a comment
 * line, the first line of a recorded trace is the header; blank lines carry nothing.
 *   A <ptr hex> <size bytes> <stream hex> <t_us>   an allocation that returned ptr
 *   F <ptr hex> 0 <stream hex> <t_us>              a free of ptr
 *   E 0 0 <stream hex> <t_us>                      the program gave the cache back (empty_cache:
 *                                                  PyTorch's cudaMemPoolTrimTo of the default pool,
 *                                                  gmlake_empty_cache)
 * The stream column is gmlake's stream key (core/device.h); 0xffffffffffffffff
 * (GML_STREAM_NONE) marks a call with no stream (cudaMalloc, cudaFree).
 */
#ifndef GML_TRACE_FORMAT_H
#define GML_TRACE_FORMAT_H

#include <stdint.h>
#include <stdio.h>

typedef struct gml_trace_rec {
    char op; /* 'A', 'F' or 'E' */
    uint64_t ptr, size, stream, t_us;
} gml_trace_rec;

/* Writes the header line naming where the trace comes from (e.g. "recorded by libgmlake"). */
void gml_trace_write_header(FILE *f, const char *origin);
/* Writes one event line. */
void gml_trace_write_line(FILE *f, const gml_trace_rec *r);
/* Parses one event line (s is cut into tokens in place); 0, or -1 with *why saying what is wrong
 * with it.  An allocation needs a non-zero pointer and size, a free has size 0, a cache release
 * pointer and size 0. */
int gml_trace_parse_line(char *s, gml_trace_rec *r, const char **why);

#endif /* GML_TRACE_FORMAT_H */
