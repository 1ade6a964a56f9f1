"""Synthetic PyTorch memory snapshots, in the layout torch.cuda.memory._snapshot() returns
(segments with blocks, device_traces, allocator_settings), for the importer's tests.

SCENARIO, device 0, as the ring buffer saw it (MiB = 1 << 20):
  before the buffer: W 8 MiB (live all along), P 4 MiB, Q 2 MiB (its free already requested)
  free_requested P, free_completed P, free_completed Q
  alloc X 3 MiB, alloc Y 100 bytes, free X (requested, completed)
  alloc Z 5 MiB on stream 0x55, an OOM entry, alloc R 15 MiB, a snapshot entry
By hand, the native caching allocator replaying it: W in a 20 MiB segment (split), P and Q from
its remainder; freeing P and Q leaves 12 MiB free there; X is split from it; Y takes a 2 MiB
small segment (22 MiB); Z on its own stream takes a new 20 MiB segment (42); R (15 MiB) fits in
no free block of stream 0 and gets a 16 MiB segment: peak reserved 58 MiB.  Expandable segments:
the same until R, which maps one more 20 MiB page behind the 12 MiB free at the end of stream
0's range: 62 MiB.  Peak active: W + Y + Z + R = 28 MiB + 100 bytes.
"""
MiB = 1 << 20
W, P, Q = 0x7F0000000000, 0x7F0000800000, 0x7F0000C00000
X, Y, Z, R = 0x7F0002000000, 0x7F0003000000, 0x7F0004000000, 0x7F0005000000

EXPECTED_TRACE = [
    f"A {W:#x} {8 * MiB} 0x0 0",
    f"A {P:#x} {4 * MiB} 0x0 0",
    f"A {Q:#x} {2 * MiB} 0x0 0",
    f"F {P:#x} 0 0x0 1",
    f"F {Q:#x} 0 0x0 2",
    f"A {X:#x} {3 * MiB} 0x0 4",
    f"A {Y:#x} 100 0x0 6",
    f"F {X:#x} 0 0x0 8",
    f"A {Z:#x} {5 * MiB} 0x55 10",
    f"A {R:#x} {15 * MiB} 0x0 13",
]
PEAK_RESERVED = {"pytorch": 58 * MiB, "expandable": 62 * MiB}
PEAK_ACTIVE = 28 * MiB + 100


def entry(action, addr, size, stream=0, t=0):
    e = {"action": action, "addr": addr, "size": size, "stream": stream, "frames": [], "time_us": t}
    if action == "oom":
        del e["addr"]
        e["device_free"] = 1 << 30
    return e


def block(addr, size, state, requested=None):
    return {"address": addr, "size": size, "requested_size": size if requested is None else requested,
            "state": state, "frames": []}


def segment(addr, total, stream, blocks, expandable=False, small=False):
    active = sum(b["size"] for b in blocks if b["state"] != "inactive")
    return {"device": 0, "address": addr, "total_size": total, "stream": stream,
            "segment_type": "small" if small else "large", "segment_pool_id": (0, 0),
            "allocated_size": active, "active_size": active, "requested_size": active,
            "is_expandable": expandable, "frames": [], "blocks": blocks}


def scenario(expandable=False):
    seg = "segment_map" if expandable else "segment_alloc"
    t0 = 1_700_000_000_000_000
    tr = [
        entry("free_requested", P, 4 * MiB, 0, t0),
        entry("free_completed", P, 4 * MiB, 0, t0 + 1),
        entry("free_completed", Q, 2 * MiB, 0, t0 + 2),
        entry(seg, X, 20 * MiB, 0, t0 + 3),
        entry("alloc", X, 3 * MiB, 0, t0 + 4),
        entry(seg, Y, 2 * MiB, 0, t0 + 5),
        entry("alloc", Y, 100, 0, t0 + 6),
        entry("free_requested", X, 3 * MiB, 0, t0 + 7),
        entry("free_completed", X, 3 * MiB, 0, t0 + 8),
        entry(seg, Z, 20 * MiB, 0x55, t0 + 9),
        entry("alloc", Z, 5 * MiB, 0x55, t0 + 10),
        entry("oom", 0, 64 * MiB, 0, t0 + 11),
        entry(seg, R, 16 * MiB, 0, t0 + 12),
        entry("alloc", R, 15 * MiB, 0, t0 + 13),
        entry("snapshot", 0, 0, 0, t0 + 14),
    ]
    segments = [
        segment(W, 20 * MiB, 0, [block(W, 8 * MiB, "active_allocated"),
                                 block(W + 8 * MiB, 12 * MiB, "inactive", 0)], expandable),
        segment(X, 20 * MiB, 0, [block(X, 20 * MiB, "inactive", 0)], expandable),
        segment(Y, 2 * MiB, 0, [block(Y, 512, "active_allocated", 100),
                                block(Y + 512, 2 * MiB - 512, "inactive", 0)], expandable, True),
        segment(Z, 20 * MiB, 0x55, [block(Z, 5 * MiB, "active_allocated"),
                                    block(Z + 5 * MiB, 15 * MiB, "inactive", 0)], expandable),
        segment(R, 16 * MiB, 0, [block(R, 15 * MiB, "active_allocated"),
                                 block(R + 15 * MiB, MiB, "inactive", 0)], expandable),
    ]
    settings = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True" if expandable else "",
                "max_split_size": -1, "garbage_collection_threshold": 0.0,
                "expandable_segments": expandable, "release_lock_on_cudamalloc": False,
                "pinned_use_cuda_host_register": False, "roundup_power2_divisions": {}}
    return {"segments": segments, "device_traces": [tr], "allocator_settings": settings}


# what PyTorch reserved over the window: 78 MiB at the snapshot, 58 MiB of segments added
RESERVED_START, RESERVED_PEAK = 20 * MiB, 78 * MiB
