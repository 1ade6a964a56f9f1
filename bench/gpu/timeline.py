"""What a GPU's kernel timeline says about a step: busy time, idle gaps, and how much of the
communication ran beside computation.  Issue 21 asks where DDP's and FSDP2's time goes on several
GPUs (idle gaps between kernels, compute/communication overlap); bench/gpu/dist_train.py feeds
this the kernels torch.profiler saw on each rank (PROFILE=DIR).  Pure Python over intervals, so it
is tested without a GPU (tests/tools/test_timeline.py).

A kernel is (name, start_us, end_us).  A kernel is communication when its name is NCCL's
(`nccl` anywhere in it, any case: ncclDevKernel_AllReduce..., ncclKernel_...).  A kernel of NCCL
runs until the other ranks arrive, so its time on one rank includes waiting for them: a rank
whose communication time is far above the others' was the early one.
"""


def is_comm(name):
    return "nccl" in name.lower()


def union(intervals):
    """Merged, sorted, non-overlapping intervals covering the same time."""
    out = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def length(intervals):
    return sum(e - s for s, e in intervals)


def intersect(a, b):
    """The time both merged interval lists cover."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            total += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def summarize(kernels, window=None, gap_us=20.0):
    """Figures in microseconds over `window` (start_us, end_us; default: first kernel's start to
    the last one's end): busy (any kernel running), idle (window - busy), gaps (idle stretches
    between kernels longer than gap_us: their count and total), compute and comm (time each kind
    of kernel ran, overlaps merged), overlap (comm beside compute), comm_alone (comm with no
    compute beside it).  Raises ValueError on a kernel that ends before it starts or a window
    that is empty."""
    ks = list(kernels)
    for name, s, e in ks:
        if e < s:
            raise ValueError(f"kernel {name!r} ends ({e}) before it starts ({s})")
    if window is None:
        if not ks:
            return {"window": 0.0, "kernels": 0, "busy": 0.0, "idle": 0.0, "gaps": 0, "gap_time": 0.0,
                    "compute": 0.0, "comm": 0.0, "overlap": 0.0, "comm_alone": 0.0}
        window = (min(s for _, s, _ in ks), max(e for _, _, e in ks))
    w0, w1 = window
    if w1 <= w0:
        raise ValueError(f"empty window {window}")
    clip = [(n, max(s, w0), min(e, w1)) for n, s, e in ks if e > w0 and s < w1]
    allk = union((s, e) for _, s, e in clip)
    comp = union((s, e) for n, s, e in clip if not is_comm(n))
    comm = union((s, e) for n, s, e in clip if is_comm(n))
    gaps = [b[0] - a[1] for a, b in zip(allk, allk[1:]) if b[0] - a[1] > gap_us]
    busy, comm_t = length(allk), length(comm)
    ov = intersect(comp, comm)
    return {"window": w1 - w0, "kernels": len(clip), "busy": busy, "idle": (w1 - w0) - busy,
            "gaps": len(gaps), "gap_time": sum(gaps), "compute": length(comp), "comm": comm_t,
            "overlap": ov, "comm_alone": comm_t - ov}


def report(summary, label=""):
    """One line of the figures, in ms."""
    s = summary
    ms = lambda us: f"{us / 1000:.1f}"
    return (f"{label}window {ms(s['window'])} ms, {s['kernels']} kernels: busy {ms(s['busy'])}, "
            f"idle {ms(s['idle'])} ({s['gaps']} gaps > 20 us: {ms(s['gap_time'])}), compute "
            f"{ms(s['compute'])}, communication {ms(s['comm'])} (beside compute {ms(s['overlap'])}, "
            f"alone {ms(s['comm_alone'])})")
