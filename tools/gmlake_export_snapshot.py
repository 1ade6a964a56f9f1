#!/usr/bin/env python3
"""gmlake export-snapshot: gmlake-trace v1 to a PyTorch memory snapshot for memory_viz.

Under gmlake PyTorch runs on its `backend:cudaMallocAsync`, where its own memory history
(torch.cuda.memory._record_memory_history / _dump_snapshot) is unavailable.  gmlake's trace
(trace_file: one `A ptr size stream t_us` / `F ptr 0 stream t_us` line per allocation it served,
core/trace_format.h) holds the same history, and this converts it into the pickle that
_dump_snapshot writes, so that https://pytorch.org/memory_viz and
`python -m torch.cuda._memory_viz trace_plot|segment_plot` open it:

  device_traces       per device, one entry list: each `A` is a `segment_alloc` then an `alloc`;
                      each `F` a `free_requested`, a `free_completed` and a `segment_free`; keys
                      action, addr, size, stream, time_us (the trace's own clock, microseconds),
                      frames (always empty: the trace has no stacks), and compile_context and
                      user_metadata as PyTorch 2.11 writes them when it has none.  A free carries the
                      stream the free was issued on (gmlake's stream key; 2**64-1: none, i.e.
                      cudaFree) and the size of the allocation it frees.
  segments            what is live at the end of the trace, one segment per live allocation
                      (one `active_allocated` block filling it).  gmlake's extents and stitched
                      ranges are not in the trace, so a "segment" here is an allocation, not
                      reserved memory: the Active Memory Timeline is exact, while the segment
                      views show allocations, not what gmlake reserved (gmlake.stats has that).
  allocator_settings  says so: {"allocator": "gmlake", "segments": ..., the trace's header}.

A trace does not say which GPU an allocation was on: one trace becomes one device (--device N,
default 0); several traces (one per process, e.g. trace_file=job.%p.trace under DDP) become
devices 0, 1, ... in the order given; devices are 0 to 63, the ones libgmlake serves.
--max-events N keeps only the last N events of each trace in device_traces, as PyTorch's ring
buffer does (allocations made before the window and still live at the end are in `segments`;
memory_viz shows a free whose allocation fell out of the window as memory allocated from the
start).

The pickle uses protocol 4 and only plain dicts, lists, tuples, ints and strings: the opcodes that
MemoryViz.js's own unpickler reads.  It is written to a temporary file beside the output and
renamed into place once whole.  Only the Python standard library is used; the gmlake Python
package ships this module too (gmlake.export_snapshot).
"""
import argparse
import gzip
import os
import pickle
import stat
import re
import sys
import tempfile
import zlib

MASK64 = (1 << 64) - 1
READ_BLOCK = 1 << 20  # a plain trace is read in blocks, stopping at a NUL byte (_read_bytes)
MAX_DEVICES = 64  # the devices libgmlake serves (GML_MAX_DEVICES, stitch/registry.h)
PICKLE_PROTOCOL = 4  # MemoryViz.js reads protocols 2 to 4
SEGMENTS_NOTE = ("one segment per allocation live at the end of the trace: gmlake's extents and "
                 "stitched ranges are not in its trace, so segment views show allocations, not "
                 "reserved memory (gmlake.stats() has that)")


class ExportError(Exception):
    """A trace that cannot be converted, or an output that cannot be written; the message is one
    line and names the file."""


def _read_bytes(path):
    """The trace's bytes, gzip or plain; refuses a pickle (a snapshot: the other direction).
    Plain data is read only up to its first NUL byte, which read_trace refuses: an endless input
    of binary data (/dev/zero) is refused at once, as gmlake replay refuses it."""
    try:
        with open(path, "rb") as f:
            blocks = [f.read(READ_BLOCK)]
            if blocks[0][:2] == b"\x1f\x8b":
                blocks.append(f.read())
            else:
                while blocks[-1] and b"\0" not in blocks[-1]:
                    blocks.append(f.read(READ_BLOCK))
            data = b"".join(blocks)
    except OSError as e:
        raise ExportError(f"{path}: cannot read: {e.strerror}")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except EOFError:
            raise ExportError(f"{path}: truncated gzip data (the file ends before the end of "
                              "its compressed stream)")
        except (OSError, zlib.error) as e:
            raise ExportError(f"{path}: bad gzip data: {e}")
    if data[:1] == b"\x80":
        raise ExportError(f"{path}: a Python pickle, not a gmlake trace (a PyTorch snapshot "
                          "converts the other way: gmlake import-snapshot)")
    return data


# The rules and messages of gmlake replay's reader (tools/trace.c, core/trace_format.c), so that
# the two accept the same traces: fields split at blanks, tabs, CR and LF only; numbers in ASCII
# digits, hexadecimal with an optional 0x, no sign, no '_' (which Python's int() would take).
LINE_MAX_LEN = 512  # a line and its newline take fewer bytes (tools/trace.c)
_FIELD_SEP = re.compile(rb"[ \t\r\n]+")
_DIGITS = {16: re.compile(rb"(?:0[xX])?[0-9a-fA-F]+"), 10: re.compile(rb"[0-9]+")}
_FIELDS = (("pointer", 16), ("size", 10), ("stream", 16), ("time", 10))


def _number(tok, what, base):
    if tok.startswith(b"-"):
        raise ValueError(f"the {what} is negative")
    if not _DIGITS[base].fullmatch(tok):
        raise ValueError(f"the {what} is not a {'hexadecimal' if base == 16 else 'decimal'} number")
    v = int(tok, base)
    if v > MASK64:
        raise ValueError(f"the {what} is larger than 2^64-1 "
                         f"({'0xffffffffffffffff' if base == 16 else MASK64})")
    return v


def parse_line(s):
    """One event line (bytes) as (op, ptr, size, stream, t_us); ValueError saying what is wrong,
    as core/trace_format.c's gml_trace_parse_line."""
    tok = [t for t in _FIELD_SEP.split(s) if t]
    if len(tok) != 5:
        raise ValueError("too many fields (want: OP PTR SIZE STREAM T_US)" if len(tok) > 5
                         else "expected 5 fields: OP PTR SIZE STREAM T_US")
    if tok[0] not in (b"A", b"F", b"E"):
        raise ValueError("the operation must be A, F or E")
    op = tok[0].decode()
    ptr, size, stream, t_us = (_number(t, what, base) for t, (what, base) in zip(tok[1:], _FIELDS))
    if op == "A" and (size == 0 or ptr == 0):
        raise ValueError("an allocation needs a non-zero pointer and size")
    if op == "F" and size != 0:
        raise ValueError("a free has size 0")
    if op == "E" and (size != 0 or ptr != 0):
        raise ValueError("a cache release (E) has pointer 0 and size 0")
    return op, ptr, size, stream, t_us


def _header_problem(line):
    """The first line: "# gmlake-trace v1" then ':', a blank or the end (tools/trace.c)."""
    magic = b"# gmlake-trace "
    if not line.startswith(magic):
        return "no '# gmlake-trace v1' header on the first line: not a gmlake trace"
    v = line[len(magic):]
    if v == b"v1" or (v[:2] == b"v1" and v[2:3] in (b":", b" ", b"\t", b"\r")):
        return None
    return "unsupported trace format version (this reader reads gmlake-trace v1)"


def read_trace(path):
    """(header lines, events): events as (op, ptr, size, stream, t_us, line number); the header
    is the comment lines before the first event."""
    data = _read_bytes(path)
    if not data:
        raise ExportError(f"{path}: empty: no '# gmlake-trace v1' header and no events")
    nul = data.find(b"\0")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise ExportError(f"{path}:{line}: a NUL byte: binary data, not a text trace")
    lines = data.split(b"\n")
    ended = lines[-1] == b""  # the last line ends with a newline (none is fine too)
    if ended:
        lines.pop()
    header, events = [], []
    for n, line in enumerate(lines, 1):
        if len(line) + (n < len(lines) or ended) >= LINE_MAX_LEN:
            raise ExportError(f"{path}:{n}: line too long (more than {LINE_MAX_LEN - 2} bytes)")
        if n == 1:
            why = _header_problem(line)
            if why:
                raise ExportError(f"{path}:1: {why}")
        s = line.lstrip(b" \t")
        if not s or s[:1] in (b"#", b"\r"):
            if s[:1] == b"#" and not events:  # only shown: any bytes, as replay takes them
                header.append(s.decode("utf-8", "replace").strip())
            continue
        try:
            events.append(parse_line(s) + (n,))
        except ValueError as e:
            raise ExportError(f"{path}:{n}: {e}")
    if not events:
        raise ExportError(f"{path}: no events")
    return header, events


def device_trace(path, events, device, max_events=None):
    """The device_traces list and the segments of one trace; raises ExportError where the trace's
    events contradict each other (the checks gmlake replay makes)."""
    live = {}      # ptr -> (size, stream) of allocations live now
    entries = []
    first = 0 if not max_events or max_events >= len(events) else len(events) - max_events
    frames = []    # one shared empty list: the trace has no stacks
    extra = {"frames": frames, "compile_context": "N/A", "user_metadata": ""}  # as PyTorch 2.11
    allocs = frees = 0
    for i, (op, ptr, size, stream, t, line) in enumerate(events):
        keep = i >= first
        if op == "E":
            continue  # a cache release: a snapshot of gmlake's live tensors has nothing to show
        if op == "A":
            if ptr in live:
                raise ExportError(f"{path}:{line}: allocation of {ptr:#x}, which is still live "
                                  "(no free between its two allocations)")
            live[ptr] = (size, stream)
            if keep:
                allocs += 1
                entries.append({"action": "segment_alloc", "addr": ptr, "size": size,
                                "stream": stream, "time_us": t, **extra})
                entries.append({"action": "alloc", "addr": ptr, "size": size,
                                "stream": stream, "time_us": t, **extra})
        else:
            if ptr not in live:
                raise ExportError(f"{path}:{line}: free of pointer {ptr:#x} that is not live")
            asize, astream = live.pop(ptr)
            if keep:
                frees += 1
                for action in ("free_requested", "free_completed"):
                    entries.append({"action": action, "addr": ptr, "size": asize,
                                    "stream": stream, "time_us": t, **extra})
                entries.append({"action": "segment_free", "addr": ptr, "size": asize,
                                "stream": astream, "time_us": t, **extra})
    segments = []
    for ptr in sorted(live):
        size, stream = live[ptr]
        segments.append({
            "device": device, "address": ptr, "total_size": size, "allocated_size": size,
            "active_size": size, "requested_size": size, "stream": stream,
            "segment_type": "large" if size > (1 << 20) else "small",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": frames,
            "blocks": [{"address": ptr, "size": size, "requested_size": size,
                        "state": "active_allocated", "frames": frames}],
        })
    summary = {"device": device, "events": len(events), "allocations": allocs, "frees": frees,
               "live": len(live), "live_bytes": sum(s for s, _ in live.values())}
    return entries, segments, summary


def build_snapshot(paths, device=None, max_events=None):
    """The snapshot dict of the traces at `paths` (trace k on device k, or one trace on
    `device`) and a summary per trace."""
    if device is not None and len(paths) != 1:
        raise ExportError("--device places one trace; several traces go to devices 0, 1, ...")
    if device is not None and (isinstance(device, bool) or not isinstance(device, int)):
        raise ExportError(f"device {device!r}: a device is an integer from 0")
    first_device = 0 if device is None else device
    # device_traces is a list indexed by device, so the bound also keeps it small
    if not 0 <= first_device < MAX_DEVICES:
        raise ExportError(f"device {device}: gmlake serves devices 0 to {MAX_DEVICES - 1}")
    if first_device + len(paths) > MAX_DEVICES:
        raise ExportError(f"{len(paths)} traces: gmlake serves devices 0 to {MAX_DEVICES - 1}, "
                          "one trace each")
    traces = [[] for _ in range(first_device + len(paths))]
    segments, summaries, headers = [], [], {}
    for k, path in enumerate(paths):
        d = first_device + k
        header, events = read_trace(path)
        entries, segs, summary = device_trace(path, events, d, max_events)
        traces[d] = entries
        segments += segs
        summary["trace"] = path
        summaries.append(summary)
        headers[str(d)] = {"trace": os.path.basename(path), "header": "\n".join(header)}
    settings = {"allocator": "gmlake", "source": "gmlake-trace v1 (gmlake export-snapshot)",
                "segments": SEGMENTS_NOTE, "traces": headers}
    if max_events:
        settings["trace_alloc_max_entries"] = max_events
    return {"segments": segments, "device_traces": traces, "allocator_settings": settings,
            "external_annotations": []}, summaries


def _same_file(a, b):
    try:
        return os.path.samefile(a, b)
    except OSError:  # a missing input: the error comes when it is read
        return False


def _written_through(out):
    """Whether `out` is written where it leads rather than replaced by a new file: a symbolic
    link, or a name that exists and is no regular file (/dev/stdout, /dev/null, a FIFO).  A
    rename over it would replace the link or the device itself (as root, /dev/full became a
    regular file)."""
    try:
        return os.path.islink(out) or not stat.S_ISREG(os.stat(out).st_mode)
    except OSError:
        return False


def write_snapshot(snap, out):
    """Pickles `snap` to `out` ('-': standard output) through a temporary file in out's
    directory, renamed into place only once written whole; a link, a device or a FIFO is
    written to directly (_written_through)."""
    if out == "-":
        pickle.dump(snap, sys.stdout.buffer, protocol=PICKLE_PROTOCOL)
        sys.stdout.buffer.flush()
        return
    if os.path.isdir(out):
        raise ExportError(f"{out}: is a directory: name the snapshot file to write")
    if _written_through(out):
        try:
            with open(out, "wb") as f:
                pickle.dump(snap, f, protocol=PICKLE_PROTOCOL)
        except OSError as e:
            raise ExportError(f"{out}: cannot write: {e.strerror}")
        return
    d = os.path.dirname(os.path.abspath(out))
    try:
        fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(out) + ".", suffix=".tmp", dir=d)
    except OSError as e:
        raise ExportError(f"{out}: cannot write in {d}: {e.strerror}")
    try:
        with os.fdopen(fd, "wb") as f:
            pickle.dump(snap, f, protocol=PICKLE_PROTOCOL)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except OSError as e:
        _unlink(tmp)
        raise ExportError(f"{out}: cannot write: {e.strerror}")
    except BaseException:
        _unlink(tmp)
        raise


def _umask():
    m = os.umask(0)
    os.umask(m)
    return m


def _unlink(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def export(traces, out, device=None, max_events=None):
    """Converts the gmlake trace(s) `traces` (a path or a list of paths) into the snapshot
    pickle `out`; returns one summary dict per trace (device, events, allocations, frees, live,
    live_bytes, trace).  Raises ExportError with a one-line message."""
    try:
        paths = [traces] if isinstance(traces, (str, bytes, os.PathLike)) else list(traces)
    except TypeError:
        paths = [traces]
    for p in paths:
        if not isinstance(p, (str, bytes, os.PathLike)):
            raise ExportError(f"trace {p!r}: a trace is a path (or a list of paths)")
    paths = [os.fsdecode(p) for p in paths]
    if not paths:
        raise ExportError("no trace given")
    if max_events is not None and (isinstance(max_events, bool) or not isinstance(max_events, int)):
        raise ExportError(f"max_events {max_events!r}: a number of events is an integer from 1")
    if max_events is not None and max_events <= 0:
        raise ExportError(f"--max-events {max_events}: want a positive number of events")
    if not isinstance(out, (str, bytes, os.PathLike)):
        raise ExportError(f"output {out!r}: the output is a path ('-': standard output)")
    out = os.fsdecode(out)
    if not out:
        raise ExportError("the output is an empty name: name the snapshot file to write")
    for p in paths:  # before reading anything: never overwrite an input
        if out != "-" and os.path.exists(out) and _same_file(p, out):
            raise ExportError(f"{out}: the output is the input trace {p}: name another file")
    snap, summaries = build_snapshot(paths, device, max_events)
    write_snapshot(snap, out)
    return summaries


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="gmlake export-snapshot",
        description="Convert gmlake traces (trace_file; plain or gzip) into a PyTorch memory "
                    "snapshot pickle that PyTorch's memory_viz opens (https://pytorch.org/"
                    "memory_viz, python -m torch.cuda._memory_viz trace_plot/segment_plot).")
    ap.add_argument("trace", nargs="+", help="gmlake-trace v1 file(s); several: devices 0, 1, ...")
    ap.add_argument("-o", "--output", required=True,
                    help="the snapshot pickle to write ('-': standard output)")
    ap.add_argument("--device", type=int, help="the device index of a single trace (default 0)")
    ap.add_argument("--max-events", type=int, metavar="N",
                    help="keep only the last N events of each trace, like PyTorch's ring buffer")
    ap.add_argument("-q", "--quiet", action="store_true", help="no summary on standard error")
    a = ap.parse_args(argv)
    try:
        summaries = export(a.trace, a.output, a.device, a.max_events)
    except ExportError as e:
        print(f"gmlake export-snapshot: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    if not a.quiet:
        for s in summaries:
            print(f"{s['trace']}: device {s['device']}, {s['allocations']} allocations, "
                  f"{s['frees']} frees, {s['live']} live at the end ({s['live_bytes']} bytes) "
                  f"-> {a.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
