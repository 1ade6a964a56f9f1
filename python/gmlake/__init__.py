"""gmlake from Python: the figures of the gmlake GPU memory allocator, standard library only.

gmlake serves a program's CUDA allocations when its library is preloaded
(``LD_PRELOAD=libgmlake.so python train.py`` or ``gmlake run -- python train.py``).  This module
reads its figures through the library's public C API (include/gmlake.h) with ctypes.  Importing
it is always safe: where gmlake is not preloaded, ``enabled()`` is False, ``stats()`` returns
None and ``empty_cache()`` does nothing.

    import gmlake
    if gmlake.enabled():
        print(gmlake.memory_summary())
        s = gmlake.stats(device=0)   # dict: active/reserved bytes and peaks, utilization,
                                     # stitches, device calls by kind, free/largest/stitchable
        gmlake.empty_cache()         # give cached chunks back to the GPU

    # a job recorded with trace_file (GMLAKE_TRACE_FILE=job.trace) as a PyTorch memory snapshot
    # for https://pytorch.org/memory_viz (needs no GPU and no libgmlake)
    gmlake.export_snapshot("job.trace", "job.pickle")
"""

import ctypes
import importlib.util
import operator
import os

__all__ = ["enabled", "stats", "memory_summary", "empty_cache", "reset_peak_stats", "check",
           "export_snapshot", "GmlakeError"]

GMLAKE_OK = 0
GMLAKE_ERR_NO_POOL = 5
_DEVCALL_COUNT = 14  # GMLAKE_DC_COUNT
_INT_MAX = 2 ** 31 - 1  # the C API's `int device`

# The fields of struct gmlake_stats, in order (include/gmlake.h).
_U64_BEFORE = ["active_bytes", "peak_active_bytes", "reserved_bytes", "peak_reserved_bytes",
               "allocations", "frees", "live_allocations", "failed_allocations", "stitches",
               "stitch_reuses", "stitch_evictions", "stitched_blocks", "stitched_bytes",
               "cache_releases", "chunk_size"]
_U64_AFTER = ["free_bytes", "largest_free_bytes", "stitchable_bytes"]


class _Stats(ctypes.Structure):
    _fields_ = ([(n, ctypes.c_uint64) for n in _U64_BEFORE]
                + [("utilization", ctypes.c_double),
                   ("device_calls", ctypes.c_uint64 * _DEVCALL_COUNT)]
                + [(n, ctypes.c_uint64) for n in _U64_AFTER]
                + [("device_seconds", ctypes.c_double),
                   ("device_seconds_by_call", ctypes.c_double * _DEVCALL_COUNT)])


class GmlakeError(RuntimeError):
    """A gmlake call failed; the message starts "gmlake: CALL(device D): " and gives
    gmlake_strerror's words (and, in a forked child, why), or why the library cannot be read."""


_api = None


def _lib():
    """The process's own libgmlake functions (the preloaded library), or None."""
    global _api
    if _api is None:
        try:
            proc = ctypes.CDLL(None)
            get = proc.gmlake_get_stats
        except (OSError, AttributeError):
            _api = False
            return None
        get.argtypes = [ctypes.c_int, ctypes.POINTER(_Stats)]
        get.restype = ctypes.c_int
        for name in ("gmlake_empty_cache", "gmlake_reset_peak_stats", "gmlake_check"):
            f = getattr(proc, name)
            f.argtypes = [ctypes.c_int]
            f.restype = ctypes.c_int
        proc.gmlake_strerror.argtypes = [ctypes.c_int]
        proc.gmlake_strerror.restype = ctypes.c_char_p
        proc.gmlake_devcall_name.argtypes = [ctypes.c_int]
        proc.gmlake_devcall_name.restype = ctypes.c_char_p
        host = getattr(proc, "gmlake_get_host_seconds", None)  # absent from libraries before it
        if host is not None:
            host.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
            host.restype = ctypes.c_int
        size = getattr(proc, "gmlake_stats_size", None)  # absent from libraries before it
        if size is not None:
            size.argtypes, size.restype = [], ctypes.c_size_t
        _api = proc
    return _api or None


def _check_layout(lib):
    """Refuses a libgmlake whose struct gmlake_stats is not the one _Stats reads: its kinds of
    device call (gmlake_devcall_name answers "unknown" past the last) size device_calls and
    device_seconds_by_call.  A library before stream_wait has 13 (its fields would be read from
    the wrong offsets); a later one with more would write past _Stats.  A library that says its
    struct's size (gmlake_stats_size) is held to this package's exactly: a field appended with
    the same kinds would otherwise be written past _Stats unseen."""
    size = getattr(lib, "gmlake_stats_size", None)  # absent from libraries before it
    if size is not None:
        theirs, ours = size(), ctypes.sizeof(_Stats)
        if theirs != ours:
            raise GmlakeError("the preloaded libgmlake is %s than this gmlake package (its "
                              "statistics are %d bytes, not %d): use the package of the same "
                              "build as the library" % ("older" if theirs < ours else "newer",
                                                        theirs, ours))
    kinds = 0
    while kinds <= _DEVCALL_COUNT and lib.gmlake_devcall_name(kinds) != b"unknown":
        kinds += 1
    if kinds != _DEVCALL_COUNT:
        raise GmlakeError("the preloaded libgmlake is %s than this gmlake package (%s kinds of "
                          "device call in its statistics, not %d): use the package of the same "
                          "build as the library" % (
                              "older" if kinds < _DEVCALL_COUNT else "newer",
                              kinds if kinds < _DEVCALL_COUNT else "more", _DEVCALL_COUNT))


_FORKED = ("this process is a child forked after gmlake started, where CUDA cannot be used "
           "(gmlake serves nothing here; the pool it inherited is the parent's, left alone)")


def _raise(status, name, device):
    """GmlakeError for gmlake_<name>(device)'s status: the call and gmlake_strerror's words, and
    why where it is a forked child's refusal (a pool, yet gmlake off: only a fork does that)."""
    lib = _lib()
    why = lib.gmlake_strerror(status).decode() if lib else "gmlake is not loaded"
    if lib and not enabled():
        why += ": " + _FORKED
    raise GmlakeError("gmlake: %s(device %d): %s" % (name, device, why))


def _device(device):
    """`device` as the C API's int.  ctypes would cut a larger int to its low 32 bits (2**32 acted
    on device 0) and read 0.9 as 0, so anything that is not a CUDA device ordinal is refused:
    TypeError for a non-integer (a bool too: True is not device 1), ValueError for a negative
    number or one past the C int range.  Checked whether or not gmlake is loaded, so that a bad
    call fails the same with and without it."""
    if isinstance(device, bool):
        raise TypeError(f"device {device!r}: a device is an integer (a CUDA device ordinal), "
                        "not a bool")
    try:
        d = operator.index(device)
    except TypeError:
        raise TypeError(f"device {device!r}: a device is an integer (a CUDA device ordinal), not "
                        f"{type(device).__name__}") from None
    if not 0 <= d <= _INT_MAX:
        raise ValueError(f"device {d}: a CUDA device ordinal is from 0 to {_INT_MAX}")
    return d


def enabled():
    """Whether gmlake serves this process's CUDA allocations: libgmlake is loaded (preloaded or
    linked) and on.  False where it is not loaded, or loaded but off (GMLAKE_ENABLE=0, settings
    it refused, a child forked after it started).  A library older than gmlake_enabled counts as
    on where loaded."""
    lib = _lib()
    if lib is None:
        return False
    fn = getattr(lib, "gmlake_enabled", None)
    if fn is None:
        return True
    fn.argtypes, fn.restype = [], ctypes.c_int
    return fn() != 0


def stats(device=0):
    """gmlake's figures for `device` as a dict, or None when gmlake is not loaded or has served
    nothing on that device (no allocation there yet; a device past the 64 gmlake serves never
    has one).  GmlakeError where the preloaded libgmlake is of another build whose statistics
    this package cannot read.  `device` is an int from 0: TypeError for a non-integer, ValueError for a negative
    one or one that does not fit the C API's int.  Sizes are in bytes; device_calls maps each kind of driver call
    (chunk_create, map, set_access, ...) to its count, device_seconds_by_call to the time spent
    in those calls (device_seconds: all of them), in seconds; host_seconds_alloc and
    host_seconds_free the wall time the calling threads spent in the pool's allocations and frees
    (lock waits and their device calls included), in seconds."""
    device = _device(device)
    lib = _lib()
    if lib is None:
        return None
    _check_layout(lib)
    s = _Stats()
    rc = lib.gmlake_get_stats(device, ctypes.byref(s))
    if rc == GMLAKE_ERR_NO_POOL:
        return None
    if rc != GMLAKE_OK:
        _raise(rc, "stats", device)
    out = {n: int(getattr(s, n)) for n in _U64_BEFORE + _U64_AFTER}
    out["utilization"] = float(s.utilization)
    names = [lib.gmlake_devcall_name(i).decode() for i in range(_DEVCALL_COUNT)]
    out["device_calls"] = {n: int(s.device_calls[i]) for i, n in enumerate(names)}
    out["device_seconds"] = float(s.device_seconds)
    out["device_seconds_by_call"] = {n: float(s.device_seconds_by_call[i])
                                     for i, n in enumerate(names)}
    host = getattr(lib, "gmlake_get_host_seconds", None)
    a, f = ctypes.c_double(), ctypes.c_double()
    if host is not None and host(device, ctypes.byref(a), ctypes.byref(f)) == GMLAKE_OK:
        out["host_seconds_alloc"], out["host_seconds_free"] = a.value, f.value
    out["device"] = device
    return out


def _size(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%.2f %s" % (n / div, unit)
    return "%d B" % n


def memory_summary(device=0):
    """A readable table of gmlake's figures for `device` (in the spirit of
    torch.cuda.memory_summary).  `device` as for stats()."""
    device = _device(device)
    s = stats(device)
    if s is None:
        why = ("gmlake is not loaded in this process" if _lib() is None else
               "gmlake is loaded but off in this process (GMLAKE_ENABLE=0, settings it refused, or a "
               "child forked after it started): CUDA serves every allocation" if not enabled() else
               "gmlake has served no allocation on device %d" % device)
        return "gmlake memory summary, device %d: %s\n" % (device, why)
    rows = [
        ("active (live requests)", _size(s["active_bytes"]), _size(s["peak_active_bytes"])),
        ("reserved (chunks held)", _size(s["reserved_bytes"]), _size(s["peak_reserved_bytes"])),
        ("free in the pool", _size(s["free_bytes"]), ""),
        ("largest free block", _size(s["largest_free_bytes"]), ""),
        ("stitchable (by one stitch)", _size(s["stitchable_bytes"]), ""),
        ("stitched blocks mapped", "%d (%s)" % (s["stitched_blocks"], _size(s["stitched_bytes"])), ""),
    ]
    width = 66
    lines = ["=" * width,
             " gmlake memory summary, device %d (chunk %s)" % (device, _size(s["chunk_size"])),
             "-" * width,
             " %-28s %17s %17s" % ("", "now", "peak")]
    lines += [" %-28s %17s %17s" % r for r in rows]
    lines += ["-" * width,
              " utilization (peak active / peak reserved)  %.2f%%" % (100.0 * s["utilization"]),
              " allocations %d, frees %d, live %d, failed %d" % (
                  s["allocations"], s["frees"], s["live_allocations"], s["failed_allocations"]),
              " stitches %d, reused %d, evicted %d; cache releases %d" % (
                  s["stitches"], s["stitch_reuses"], s["stitch_evictions"], s["cache_releases"]),
              " device calls: " + ", ".join("%s %d" % kv for kv in s["device_calls"].items() if kv[1]),
              " driver time in them: %.1f ms" % (1e3 * s["device_seconds"])]
    if "host_seconds_alloc" in s:
        lines.append(" time in the pool: allocating %.1f ms, freeing %.1f ms (driver time included)" % (
            1e3 * s["host_seconds_alloc"], 1e3 * s["host_seconds_free"]))
    if not enabled():  # a pool, yet gmlake off: a forked child
        lines.append(" these figures are the parent's at the fork: " + _FORKED)
    lines.append("=" * width)
    return "\n".join(lines) + "\n"


def _call(name, device):
    """Calls gmlake_<name>(device); no pool on that device, or gmlake not loaded: nothing to do.
    A device that is no CUDA ordinal raises as in stats()."""
    device = _device(device)
    lib = _lib()
    if lib is None:
        return
    rc = getattr(lib, "gmlake_" + name)(device)
    if rc not in (GMLAKE_OK, GMLAKE_ERR_NO_POOL):
        _raise(rc, name, device)


def empty_cache(device=0):
    """Return every cached free chunk of `device` to the GPU (waits for the device first; while a
    CUDA graph capture may be under way, only the chunks known idle, without the wait).
    Does nothing where gmlake is not loaded or has no pool on that device; TypeError or
    ValueError for a device that is no CUDA ordinal, as in stats(); GmlakeError in a child forked
    after gmlake started (CUDA cannot be used there; the pool it inherited is left alone)."""
    _call("empty_cache", device)


def reset_peak_stats(device=0):
    """Set the peaks of `device` to the current values (nothing to do and errors as for
    empty_cache())."""
    _call("reset_peak_stats", device)


def check(device=0):
    """Run gmlake's whole-pool consistency checker; raises GmlakeError when an invariant broke
    (nothing to do and errors as for empty_cache())."""
    _call("check", device)


def _exporter():
    """The trace-to-snapshot converter, one file for the package and `gmlake export-snapshot`:
    installed beside this file (_export_snapshot.py), in a source tree tools/."""
    try:
        from . import _export_snapshot
        return _export_snapshot
    except ImportError:
        pass
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tools",
                        "gmlake_export_snapshot.py")
    if not os.path.isfile(path):
        raise GmlakeError("gmlake's snapshot converter is missing (neither gmlake/_export_snapshot.py "
                          "installed nor tools/gmlake_export_snapshot.py beside a source tree)")
    spec = importlib.util.spec_from_file_location("gmlake._export_snapshot", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def export_snapshot(trace_path, out_path, device=None, max_events=None):
    """Convert the gmlake trace at `trace_path` (recorded with trace_file; plain or gzip) into a
    PyTorch memory snapshot pickle at `out_path` that PyTorch's memory_viz opens, as
    `gmlake export-snapshot` does: the trace's allocations and frees as device_traces, what is
    live at its end as segments (one per allocation).  A list of traces puts trace k on device k;
    `device` places a single trace (default 0; an int from 0 to 63, the devices libgmlake
    serves); `max_events` keeps only the last N events, like
    PyTorch's ring buffer.  The output is written to a temporary file and renamed into place.
    Returns the trace's summary (a dict: device, events, allocations, frees, live, live_bytes;
    a list of them for a list of traces).  Raises GmlakeError with a one-line message for a
    missing, corrupt or truncated trace (binary data is refused at its first NUL byte), an
    output that cannot be written or is the input, a device out of that range, or a trace or
    output that is no path, a device or max_events that is no integer.
    Works where gmlake is not loaded (no GPU needed)."""
    conv = _exporter()
    try:
        summaries = conv.export(trace_path, out_path, device, max_events)
    except conv.ExportError as e:
        raise GmlakeError(str(e)) from None
    return summaries if isinstance(trace_path, (list, tuple)) else summaries[0]
