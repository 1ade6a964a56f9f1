#!/usr/bin/env python3
"""gmlake import-snapshot: a PyTorch memory snapshot to gmlake-trace v1.

A snapshot is what torch.cuda.memory._dump_snapshot() writes after
torch.cuda.memory._record_memory_history(): a pickle of plain dicts and lists with
  segments       the allocator's segments at dump time, each with its blocks (address, size,
                 requested_size, state: active_allocated / active_pending_free / inactive)
  device_traces  per device, the ring buffer of trace entries: action (alloc, free_requested,
                 free_completed, segment_alloc, segment_free, segment_map, segment_unmap,
                 snapshot, oom, ...), addr, size, stream, time_us
  allocator_settings  expandable_segments, max_split_size, ...
The trace written has one `A ptr size stream t_us` line per alloc and one `F ptr 0 stream t_us`
line per free_completed (the moment the block is back in the allocator's cache), on the entry's
own stream (PyTorch writes the block's; a snapshot from `gmlake export-snapshot` the stream the
free was issued on, so that a gmlake trace comes back unchanged).  Allocations
live before the ring buffer's first entry are reconstructed: a free of an address the buffer
never allocated is an allocation made before it (its size is in the free entry); a block still
allocated in `segments` whose address the buffer never mentions was live all along.  They are
allocated at the start of the trace, and counted in the header.  A 0-byte allocation (PyTorch
never hands one to the device allocator; a trace has none) is left out with its frees, and
counted in the header.  The header also carries what
PyTorch reserved over the recorded window (from the segment entries and `segments`), so that a
replay under the `pytorch` or `expandable` policy can be compared with it.

Only the Python standard library is used; the pickle (any protocol) is read with an unpickler that refuses
every class, so a file that is not a plain snapshot cannot run code.  A malformed snapshot (a
field of the wrong type, an address or size that is negative, zero where it cannot be, or not
below 2^64) is refused with one line naming the field, exit status 2; the output may not name
the input; the traces are written to temporary files renamed into place only once every
device's trace is written whole, so that a failure leaves nothing behind (exit status 1, the
message naming the output as given).
"""
import argparse
import gzip
import io
import os
import pickle
import stat
import sys
import tempfile
import zlib

MASK64 = (1 << 64) - 1


class SnapshotError(Exception):
    pass


class OutputError(Exception):
    """An output that cannot be written; the message names it as the user gave it (never the
    temporary file written beside it)."""


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise SnapshotError(f"the pickle refers to {module}.{name}; a memory snapshot holds only "
                            "dicts, lists, numbers and strings")


def load_snapshot(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise SnapshotError(f"cannot read: {e.strerror}")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise SnapshotError(f"bad gzip data (truncated or corrupt): {e}")
    try:
        snap = _PlainUnpickler(io.BytesIO(data)).load()
    except SnapshotError:
        raise
    except Exception as e:  # any malformed pickle: say so, never a traceback
        if not data.startswith(b"\x80"):
            # protocols 2 and later start with 0x80; 0 and 1 (read above all the same) do not
            raise SnapshotError("not a pickle (a PyTorch memory snapshot is written by "
                                "torch.cuda.memory._dump_snapshot)")
        raise SnapshotError(f"cannot unpickle: {type(e).__name__}: {e}")
    if not isinstance(snap, dict):
        raise SnapshotError(f"the pickle holds a {type(snap).__name__}, not a snapshot dict")
    if "device_traces" not in snap:
        raise SnapshotError("no 'device_traces': record the history first "
                            "(torch.cuda.memory._record_memory_history(max_entries=...))")
    traces = snap["device_traces"]
    if not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        raise SnapshotError("'device_traces' is not a list of lists")
    segments = snap.get("segments", [])
    if not isinstance(segments, list):
        raise SnapshotError("'segments' is not a list")
    for i, seg in enumerate(segments):
        if not isinstance(seg, dict):
            raise SnapshotError(f"segment {i} is a {type(seg).__name__}, not a dict")
        blocks = seg.get("blocks", [])
        if not isinstance(blocks, list):
            raise SnapshotError(f"segment {i}: 'blocks' is a {type(blocks).__name__}, not a list")
        for j, b in enumerate(blocks):
            if not isinstance(b, dict):
                raise SnapshotError(f"segment {i}, block {j} is a {type(b).__name__}, not a dict")
    return snap


def _short(v):
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _int(entry, key, where, default=None):
    v = entry.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int):
        if default is not None and v is None:
            return default
        raise SnapshotError(f"{where}: '{key}' is {_short(v)}, not an integer")
    return v


def _u64(entry, key, where, default=None, nonzero=False):
    """An integer field that replay reads as an unsigned 64-bit number."""
    v = _int(entry, key, where, default)
    if v < 0:
        raise SnapshotError(f"{where}: '{key}' is {v}: negative")
    if v > MASK64:
        raise SnapshotError(f"{where}: '{key}' is {v}: larger than 2^64-1")
    if nonzero and v == 0:
        raise SnapshotError(f"{where}: '{key}' is 0")
    return v


def convert_device(snap, device):
    """Returns (header lines, event lines, summary dict) for one device."""
    trace = snap["device_traces"][device]
    live = {}       # addr -> (size, stream)
    seen = set()    # addresses the buffer mentions
    initial = {}    # addr -> (size, stream): live before the first entry
    zero = set()    # addresses of 0-byte allocations not freed yet: left out
    zeros = 0       # 0-byte allocations left out
    events = []     # (op, addr, size, stream, t)
    seg_delta = []  # (t index, +bytes / -bytes)
    ooms = 0
    t0 = None
    for i, e in enumerate(trace):
        where = f"device {device}, trace entry {i}"
        if not isinstance(e, dict) or "action" not in e:
            raise SnapshotError(f"{where}: not a trace entry (a dict with an 'action')")
        action = e["action"]
        if not isinstance(action, str):
            raise SnapshotError(f"{where}: 'action' is {_short(action)}, not a string")
        t = e.get("time_us", i)
        if isinstance(t, bool) or not isinstance(t, int):
            t = i
        if t0 is None:
            t0 = t
        t = max(0, t - t0)
        if action in ("segment_alloc", "segment_map"):
            seg_delta.append((len(events), _u64(e, "size", where)))
            continue
        if action in ("segment_free", "segment_unmap"):
            seg_delta.append((len(events), -_u64(e, "size", where)))
            continue
        if action == "oom":
            ooms += 1
            continue
        if action not in ("alloc", "free_requested", "free_completed"):
            continue  # snapshot, annotations
        addr = _u64(e, "addr", where, nonzero=True)
        size = _u64(e, "size", where)
        stream = _int(e, "stream", where, 0) & MASK64
        if action == "alloc":
            if size > MASK64:
                raise SnapshotError(f"{where}: 'size' is {size}: larger than 2^64-1")
            if addr in live:
                raise SnapshotError(f"{where}: alloc of {addr:#x}, which is still allocated")
            if size == 0:
                # PyTorch never hands a 0-byte block to the device allocator and a trace has
                # no 0-byte allocation: left out (counted in the header), as are its frees
                zeros += 1
                zero.add(addr)
                continue
            seen.add(addr)
            live[addr] = (size, stream)
            events.append(("A", addr, size, stream, t))
            continue
        if addr not in live and (addr in zero or size == 0):
            # the free of a 0-byte allocation (one made before the buffer: its free's size is 0)
            if addr not in zero:
                zeros += 1
                zero.add(addr)
            if action == "free_completed":
                zero.discard(addr)
            continue
        if addr not in live and addr not in seen:
            # allocated before the buffer's first entry
            initial[addr] = (size, stream)
            live[addr] = initial[addr]
            seen.add(addr)
        if action == "free_completed":
            if addr not in live:
                raise SnapshotError(f"{where}: free of {addr:#x}, which is not allocated")
            astream = live.pop(addr)[1]
            if "stream" not in e:
                stream = astream
            events.append(("F", addr, 0, stream, t))

    # blocks allocated at dump time that the buffer never mentions were live all along
    reserved_end = 0
    allocated_end = set()
    for i, s in enumerate(snap.get("segments", [])):
        if s.get("device", device) != device:
            continue
        where = f"segment {i}"
        reserved_end += _u64(s, "total_size", where)
        addr = _u64(s, "address", where, nonzero=True)
        sstream = _int(s, "stream", where, 0) & MASK64
        for j, b in enumerate(s.get("blocks", [])):
            bwhere = f"segment {i}, block {j}"
            bsize = _u64(b, "size", bwhere)
            baddr = _u64(b, "address", bwhere, addr, nonzero=True)
            if b.get("state") in ("active_allocated", "active_pending_free", "active_awaiting_free"):
                allocated_end.add(baddr)
                if baddr not in seen:
                    req = _u64(b, "requested_size", bwhere, 0) or bsize
                    if req == 0:
                        raise SnapshotError(f"{bwhere}: an allocated block of size 0")
                    initial[baddr] = (req, sstream)
            addr = min(baddr + bsize, MASK64)
    not_in_segments = len([a for a in live if a not in allocated_end and a not in initial])

    # PyTorch's reserved bytes over the window, from the segment entries
    reserved_start = reserved_end - sum(d for _, d in seg_delta)
    peak = cur = reserved_start
    for _, d in seg_delta:
        cur += d
        peak = max(peak, cur)

    settings = snap.get("allocator_settings", {}) if isinstance(snap.get("allocator_settings"), dict) else {}
    expandable = bool(settings.get("expandable_segments", False)) or any(
        isinstance(s, dict) and s.get("is_expandable") for s in snap.get("segments", []))
    summary = {
        "device": device, "entries": len(trace),
        "allocs": sum(1 for e in events if e[0] == "A"), "zeros": zeros,
        "frees": sum(1 for e in events if e[0] == "F"), "initial": len(initial),
        "initial_bytes": sum(v[0] for v in initial.values()), "oom": ooms,
        "reserved_start": reserved_start, "reserved_peak": peak, "reserved_end": reserved_end,
        "expandable": expandable, "not_in_segments": not_in_segments,
        "max_split_size": settings.get("max_split_size"),
    }
    head = [
        "# gmlake-trace v1: op ptr size stream t_us (imported from a PyTorch memory snapshot)",
        f"# device {device}: {len(trace)} trace entries, {summary['allocs']} allocs, "
        f"{summary['frees']} frees completed, {ooms} OOMs",
        f"# live before the first entry (reconstructed): {len(initial)} allocations, "
        f"{summary['initial_bytes']} bytes",
        f"# pytorch reserved bytes: at the first entry {reserved_start}, peak {peak}, "
        f"at the snapshot {reserved_end}",
        f"# pytorch allocator: expandable_segments {'True' if expandable else 'False'} "
        f"(replay with --policy {'expandable' if expandable else 'pytorch'}), "
        f"max_split_size {_split_text(summary['max_split_size'], expandable)}",
    ]
    if zeros:
        head.append(f"# {zeros} allocations of 0 bytes left out (a trace has none)")
    if not_in_segments:
        head.append(f"# {not_in_segments} allocations live at the end of the buffer are not "
                    "allocated in the snapshot's segments")
    lines = [f"A {a:#x} {s} {st:#x} 0" for a, (s, st) in sorted(initial.items())]
    lines += [f"{op} {a:#x} {s} {st:#x} {t}" for op, a, s, st, t in events]
    return head, lines, summary


def _split_text(mss, expandable):
    # PyTorch stores its default (SIZE_MAX) as -1 in the snapshot
    if not isinstance(mss, int) or isinstance(mss, bool) or mss < 0 or mss >= 1 << 63:
        return "unlimited"
    pol = "expandable" if expandable else "pytorch"
    return f"{mss} (replay with --set {pol}.max_split_size_mb={mss >> 20})"


def devices_with_events(snap):
    return [d for d, t in enumerate(snap["device_traces"]) if t]


def output_path(out, device, several):
    if not several or out == "-":
        return out
    base = os.path.basename(out)
    stem, dot, ext = base.partition(".")
    return os.path.join(os.path.dirname(out), f"{stem}.dev{device}{dot}{ext}")


def _same_file(a, b):
    """a and b name the same file: by device and inode where both exist, else by path."""
    try:
        sa, sb = os.stat(a), os.stat(b)
        return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def _written_through(path):
    """Whether `path` is written where it leads rather than replaced by a new file: a symbolic
    link, or a name that exists and is no regular file (/dev/stdout, /dev/null, a FIFO).  A
    rename over it would replace the link or the device itself (as root, /dev/full became a
    regular file)."""
    try:
        return os.path.islink(path) or not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def check_output(out):
    """Refuses an output that names no file, as given (before NAME.devN.EXT is made of it for
    several devices: '' or a folder would become the hidden files .dev0, .dev1, ...)."""
    if out == "-":
        return
    if not out:
        raise OutputError("the output is an empty name: name the trace file to write")
    if os.path.isdir(out):
        raise OutputError(f"{out}: is a directory: name the trace file to write")
    if out.endswith("/"):
        raise OutputError(f"{out}: names a directory (it ends in '/'): name the trace file to write")


def write_all(outputs):
    """outputs: [(path, head, lines)].  Each is written to a temporary file beside it; only when
    all are written whole are they renamed into place.  On any failure nothing is left behind."""
    done = []  # (tmp, path)
    try:
        for path, head, lines in outputs:
            text = "\n".join(head + lines) + "\n"
            if path == "-":
                sys.stdout.write(text)
                continue
            check_output(path)
            if _written_through(path):
                try:
                    write_file(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666), path, text,
                               new_file=False)
                except OSError as e:
                    raise OutputError(f"{path}: cannot write: {e.strerror}")
                continue
            d = os.path.dirname(path) or "."
            try:
                fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=d)
            except OSError as e:
                raise OutputError(f"{path}: cannot write in {d}: {e.strerror}")
            done.append((tmp, path))
            try:
                write_file(fd, path, text)
            except OSError as e:
                raise OutputError(f"{path}: cannot write: {e.strerror}")
        for tmp, path in done:
            try:
                os.replace(tmp, path)
            except OSError as e:
                raise OutputError(f"{path}: cannot write: {e.strerror}")
    except BaseException:
        for tmp, path in done:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise


def write_file(fd, path, text, new_file=True):
    """text into the open file fd, gzip-compressed where path ends in .gz; a new (temporary)
    file synced and given the mode a new file gets, an existing one (_written_through) as it is."""
    with os.fdopen(fd, "wb") as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw, mode="wb", filename="") as f:
                f.write(text.encode())
        else:
            raw.write(text.encode())
        raw.flush()
        if new_file:
            os.fsync(raw.fileno())
            mask = os.umask(0)
            os.umask(mask)
            os.fchmod(raw.fileno(), 0o666 & ~mask)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="gmlake import-snapshot",
        description="Convert a PyTorch memory snapshot (torch.cuda.memory._dump_snapshot) into "
                    "gmlake-trace v1, one trace per device, for `gmlake replay`.")
    ap.add_argument("snapshot", help="the snapshot pickle (optionally gzip-compressed)")
    ap.add_argument("-o", "--output", required=True,
                    help="the trace to write ('-': standard output; ending in .gz: compressed); "
                         "with several devices, NAME.devN.EXT per device")
    ap.add_argument("--device", type=int, help="only this device's trace")
    ap.add_argument("-q", "--quiet", action="store_true", help="no summary on standard error")
    a = ap.parse_args(argv)
    try:
        snap = load_snapshot(a.snapshot)
        if a.device is not None:
            if not 0 <= a.device < len(snap["device_traces"]):
                raise SnapshotError(f"no device {a.device} (the snapshot has "
                                    f"{len(snap['device_traces'])})")
            devs = [a.device]
        else:
            devs = devices_with_events(snap)
        if not devs or not any(snap["device_traces"][d] for d in devs):
            raise SnapshotError("the trace buffer is empty: was _record_memory_history() "
                                "enabled while the program allocated?")
        if a.output == "-" and len(devs) > 1:
            raise SnapshotError(f"devices {devs} have traces: pick one with --device to write "
                                "to standard output")
        check_output(a.output)  # as given: several devices' names are made from it
        outputs, summaries = [], []
        for d in devs:
            head, lines, s = convert_device(snap, d)
            path = output_path(a.output, d, len(devs) > 1)
            if path != "-" and _same_file(path, a.snapshot):
                raise SnapshotError(f"the output {path} is the snapshot itself: name another file")
            outputs.append((path, head, lines))
            summaries.append((path, d, s))
        write_all(outputs)  # every device's trace, or none
        if not a.quiet:
            for path, d, s in summaries:
                zeros = f", {s['zeros']} of 0 bytes left out" if s["zeros"] else ""
                print(f"{path}: device {d}, {s['allocs']} allocations{zeros}, {s['frees']} frees, "
                      f"{s['initial']} live before the first entry ({s['initial_bytes']} bytes); "
                      f"PyTorch reserved peak {s['reserved_peak']} bytes in the window "
                      f"({'expandable segments' if s['expandable'] else 'native allocator'})",
                      file=sys.stderr)
    except SnapshotError as e:
        print(f"gmlake import-snapshot: {a.snapshot}: {e}", file=sys.stderr)
        return 2
    except OutputError as e:
        print(f"gmlake import-snapshot: {e} (nothing written)", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"gmlake import-snapshot: {e.filename or a.output}: {e.strerror} (nothing written)",
              file=sys.stderr)
        return 1
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, RecursionError) as e:
        # a snapshot malformed in a way not checked above: still one line, never a traceback
        print(f"gmlake import-snapshot: {a.snapshot}: malformed snapshot ({type(e).__name__}: "
              f"{_short(str(e))})", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"gmlake import-snapshot: {a.snapshot}: out of memory", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
