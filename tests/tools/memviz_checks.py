"""What PyTorch's memory_viz needs of a snapshot, re-implemented in Python for tests where torch is
not installed: the pickle opcodes MemoryViz.js's own unpickler reads, the keys and types its views
and torch/cuda/_memory_viz.py read, and the three views' replays of the trace (raising where the
viewer would throw or draw nonsense).

    check(snapshot_bytes) -> summary dict; raises VizError saying what memory_viz would trip on

Read from torch/utils/viz/MemoryViz.js (annotate_snapshot, process_alloc_data, MemoryView's
simulate_memory) and torch/cuda/_memory_viz.py (segsum, trace, trace_plot, segment_plot).
"""
import bisect
import io
import pickle
import pickletools

# The opcodes MemoryViz.js's unpickler handles (any other throws "UNKNOWN OPCODE").
JS_OPCODES = {
    "PROTO", "FRAME", "MEMOIZE", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE",
    "SETITEMS", "SETITEM", "APPENDS", "APPEND", "LIST", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "DICT", "SHORT_BINUNICODE", "BINUNICODE", "BININT", "BININT1", "BININT2", "LONG1", "BINGET",
    "LONG_BINGET", "BINPUT", "LONG_BINPUT", "NONE", "NEWTRUE", "NEWFALSE", "BINFLOAT",
}
JS_EXACT = 1 << 53  # a LONG1 of up to 8 bytes becomes a JS Number: exact below this
BLOCK_STATES = {"active_allocated", "active_pending_free", "inactive"}


class VizError(AssertionError):
    pass


def _need(cond, what):
    if not cond:
        raise VizError(what)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_opcodes(data):
    for op, arg, pos in pickletools.genops(data):
        _need(op.name in JS_OPCODES, f"opcode {op.name} at byte {pos}: MemoryViz.js cannot read it")
        if op.name == "PROTO":
            _need(2 <= arg <= 4, f"pickle protocol {arg}: MemoryViz.js reads 2 to 4")


def check_structure(snap):
    _need(isinstance(snap, dict), "not a dict")
    _need(isinstance(snap.get("segments"), list), "'segments' is not a list")
    traces = snap.get("device_traces")
    _need(isinstance(traces, list) and all(isinstance(t, list) for t in traces),
          "'device_traces' is not a list of lists")
    for d, trace in enumerate(traces):
        for i, e in enumerate(trace):
            where = f"device {d} entry {i}"
            _need(isinstance(e, dict) and isinstance(e.get("action"), str), f"{where}: no action")
            for k in ("addr", "size", "stream", "time_us"):
                _need(_is_int(e.get(k)), f"{where}: '{k}' is {e.get(k)!r}, not an integer")
            _need(0 < e["addr"] < JS_EXACT, f"{where}: address {e['addr']:#x} is not exact in JS")
            _need(e["size"] > 0, f"{where}: size {e['size']}")
            _need(isinstance(e.get("frames", []), list), f"{where}: 'frames' is not a list")
            if e["action"] == "oom":
                _need(_is_int(e.get("device_free")), f"{where}: an oom needs device_free")
    for s in snap["segments"]:
        where = f"segment {s.get('address')!r}"
        for k in ("device", "address", "total_size", "allocated_size", "stream"):
            _need(_is_int(s.get(k)), f"{where}: '{k}' is {s.get(k)!r}, not an integer")
        _need(s["device"] < len(traces), f"{where}: device {s['device']} has no trace list")
        pool = s.get("segment_pool_id")
        _need(pool is None or (len(pool) == 2 and all(_is_int(p) for p in pool)),
              f"{where}: segment_pool_id {pool!r}")
        blocks = s.get("blocks")
        _need(isinstance(blocks, list) and blocks, f"{where}: no blocks")
        addr = s["address"]
        for b in blocks:
            _need(b.get("state") in BLOCK_STATES, f"{where}: block state {b.get('state')!r}")
            _need(_is_int(b.get("size")) and b["size"] > 0, f"{where}: block size")
            if b["state"] != "inactive":  # segsum: _block_extra reads frames and requested_size
                _need(isinstance(b.get("frames"), list) and _is_int(b.get("requested_size")) and
                      b["requested_size"] <= b["size"], f"{where}: active block without "
                      "frames/requested_size")
            _need(b.get("address", addr) == addr, f"{where}: block address {b.get('address')} "
                  f"is not where the blocks before it end ({addr})")
            addr += b["size"]
        # segsum asserts free + allocated == total_size
        _need(addr - s["address"] == s["total_size"], f"{where}: blocks sum to "
              f"{addr - s['address']}, total_size {s['total_size']}")


def annotated(trace):
    """annotate_snapshot: a free_requested directly followed by the same address's
    free_completed becomes one 'free' entry."""
    out = []
    for e in trace:
        if (e["action"] == "free_completed" and out and out[-1]["action"] == "free_requested"
                and out[-1]["addr"] == e["addr"]):
            out[-1] = dict(out[-1], action="free")
            continue
        out.append(e)
    return out


def timeline(snap, trace, device, plot_segments):
    """process_alloc_data: the elements drawn and the memory stacked over time."""
    alloc = "segment_alloc" if plot_segments else "alloc"
    frees = ("segment_free",) if plot_segments else ("free", "free_completed")
    elements, initially, actions, addr_to_alloc = [], [], [], {}
    for e in trace:
        if e["action"] == alloc:
            elements.append(e["size"])
            addr_to_alloc[e["addr"]] = len(elements) - 1
            actions.append(len(elements) - 1)
        elif e["action"] in frees:
            if e["addr"] in addr_to_alloc:
                actions.append(addr_to_alloc.pop(e["addr"]))
            else:
                elements.append(e["size"])
                initially.append(len(elements) - 1)
                actions.append(len(elements) - 1)
    for s in snap["segments"]:
        if s["device"] != device:
            continue
        if plot_segments:
            if s["address"] not in addr_to_alloc:
                elements.append(s["total_size"])
                initially.append(len(elements) - 1)
            continue
        addr = s["address"]
        for b in s["blocks"]:
            if b["state"] == "active_allocated" and addr not in addr_to_alloc:
                elements.append(b["requested_size"])
                initially.append(len(elements) - 1)
            addr += b["size"]
    live = set(initially)
    total = sum(elements[i] for i in live)
    peak = total
    for el in actions:  # first action of an element adds it, the second removes it
        if el in live:
            live.remove(el)
            total -= elements[el]
        else:
            live.add(el)
            total += elements[el]
        _need(total >= 0, "the timeline goes below zero")
        peak = max(peak, total)
    return {"elements": len(elements), "initially_allocated": len(initially), "end": total,
            "peak": peak}


class _Intervals:
    def __init__(self):
        self.starts, self.size = [], {}

    def add(self, addr, size):
        _need(addr not in self.size, f"segment {addr:#x} added twice")
        bisect.insort(self.starts, addr)
        self.size[addr] = size

    def remove(self, addr):
        _need(addr in self.size, f"segment {addr:#x} removed but not there")
        self.starts.pop(bisect.bisect_left(self.starts, addr))
        del self.size[addr]

    def contains(self, addr, size):
        i = bisect.bisect_right(self.starts, addr) - 1
        return i >= 0 and addr + size <= self.starts[i] + self.size[self.starts[i]]


def allocator_state(snap, trace, device):
    """MemoryView: at every selected entry the viewer rebuilds segments and blocks by undoing the
    entries after it; a block outside every segment throws (b.segment is null), an entry that
    undoes what is not there corrupts the picture.  Checked for every entry at once: undo all of
    them from the final state, then redo them one by one."""
    segs = [(s["address"], s["total_size"]) for s in snap["segments"] if s["device"] == device]
    blocks = {}
    for s in snap["segments"]:
        if s["device"] != device:
            continue
        addr = s["address"]
        for b in s["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[addr] = b["size"]
            addr += b["size"]
    seg_at = dict(segs)
    _need(len(seg_at) == len(segs), "two segments at one address")
    for e in reversed(trace):
        a, addr = e["action"], e["addr"]
        if a in ("free", "free_completed"):
            blocks[addr] = e["size"]
        elif a == "free_requested":
            _need(addr in blocks, f"free_requested of {addr:#x} with no block (the viewer throws)")
        elif a == "alloc":
            blocks.pop(addr, None)
        elif a == "segment_free":
            _need(addr not in seg_at, f"segment_free of {addr:#x} while it is mapped")
            seg_at[addr] = e["size"]
        elif a == "segment_alloc":
            _need(addr in seg_at, f"segment_alloc of {addr:#x} undone but not there")
            del seg_at[addr]
    live = _Intervals()
    for addr, size in seg_at.items():
        live.add(addr, size)
    for addr, size in blocks.items():
        _need(live.contains(addr, size), f"block {addr:#x} outside every segment at the start")
    reserved = sum(seg_at.values())
    peak_reserved = reserved
    for i, e in enumerate(trace):
        a, addr = e["action"], e["addr"]
        if a == "alloc":
            _need(live.contains(addr, e["size"]), f"entry {i}: alloc of {addr:#x} outside every "
                  "segment (the viewer throws)")
            blocks[addr] = e["size"]
        elif a in ("free", "free_completed"):
            blocks.pop(addr, None)
        elif a == "segment_alloc":
            live.add(addr, e["size"])
            reserved += e["size"]
        elif a == "segment_free":
            _need(not any(addr <= b < addr + e["size"] for b in blocks),
                  f"entry {i}: segment_free of {addr:#x} with blocks still in it")
            live.remove(addr)
            reserved -= e["size"]
        peak_reserved = max(peak_reserved, reserved)
    return {"reserved_end": reserved, "peak_reserved": peak_reserved, "blocks_end": len(blocks)}


def check(data):
    """All of the above on a snapshot pickle's bytes; returns a summary per device with events."""
    check_opcodes(data)
    snap = pickle.load(io.BytesIO(data))
    check_structure(snap)
    out = {}
    for d, raw in enumerate(snap["device_traces"]):
        if not raw and not any(s["device"] == d for s in snap["segments"]):
            continue
        trace = annotated(raw)
        active = timeline(snap, trace, d, False)
        cached = timeline(snap, trace, d, True)
        state = allocator_state(snap, trace, d)
        end_active = sum(b["requested_size"] for s in snap["segments"] if s["device"] == d
                         for b in s["blocks"] if b["state"] == "active_allocated")
        _need(active["end"] == end_active, f"device {d}: the timeline ends at {active['end']} "
              f"bytes, the segments hold {end_active}")
        out[d] = {"allocs": sum(e["action"] == "alloc" for e in raw), "active": active,
                  "cached": cached, "state": state}
    return out
