"""test_gmlake.py — the `gmlake` Python package without a GPU.

    [OLD_LIBGMLAKE=LIB] [NEW_LIBGMLAKE=LIB] python3 test_gmlake.py PYTHON_DIR LIBGMLAKE FAKE_CUDART

Runs itself again: once plain (gmlake not loaded: the module must be safe to import and
answer "not enabled"), once with LD_PRELOAD=LIBGMLAKE over the fake CUDA runtime of tests/fake
(allocations through the fake runtime with ctypes, then gmlake.stats must show them), once
traced, with OLD_LIBGMLAKE once over that stand-in of an older library (old_gmlake.c), and with
NEW_LIBGMLAKE once over a stand-in of a newer one (new_gmlake.c).
Prints "N passed, M failed"; exit status 1 on any failure.
"""
import ctypes
import re
import os
import shutil
import subprocess
import sys
import tempfile

MiB = 1 << 20
results = []


def check(cond, what):
    results.append(bool(cond))
    if not cond:
        print("FAIL:", what)


def not_loaded():
    import gmlake
    check(not gmlake.enabled(), "enabled() is False without the library")
    check(gmlake.stats(0) is None, "stats() is None")
    check("not loaded" in gmlake.memory_summary(), gmlake.memory_summary())
    gmlake.empty_cache()
    gmlake.reset_peak_stats()
    gmlake.check()
    bad_devices()
    export_device_range()


def export_device_range():
    """export_snapshot refuses a device outside 0..63 at once (device 10**12 used to build a list
    that long) and a device that is not an integer, with GmlakeError."""
    import time
    import gmlake
    d = tempfile.mkdtemp(prefix="gmlake-py-export-")
    try:
        trace = os.path.join(d, "t.trace")
        with open(trace, "w") as f:
            f.write("# gmlake-trace v1\nA 0x1000 100 0 1\nF 0x1000 0 0 2\n")
        out = os.path.join(d, "t.pickle")
        for dev, want in ((10 ** 12, "gmlake serves devices 0 to 63"), (64, "devices 0 to 63"),
                          (-1, "devices 0 to 63"), ("1", "an integer"), (1.0, "an integer"),
                          (True, "an integer")):
            t = time.monotonic()
            try:
                gmlake.export_snapshot(trace, out, device=dev)
                check(False, "export_snapshot(device=%r) is refused" % (dev,))
            except gmlake.GmlakeError as e:
                check(want in str(e), "device=%r: %s" % (dev, e))
            check(time.monotonic() - t < 5 and not os.path.exists(out), "device=%r: at once" % (dev,))
        check(gmlake.export_snapshot(trace, out, device=63)["device"] == 63, "device 63")
        export_bad_arguments(trace, out)
    finally:
        shutil.rmtree(d)


def export_bad_arguments(trace, out):
    """export_snapshot refuses, with GmlakeError naming the argument, a max_events that is no
    integer (1.5 kept one event of two and wrote a float, which MemoryViz.js does not read, into
    the snapshot; "3" raised "'<=' not supported between instances of 'str' and 'int'") and a
    trace or an output that is no path (None: "'NoneType' object is not iterable")."""
    import gmlake
    for kw, want in ((dict(max_events=1.5), "max_events 1.5: "), (dict(max_events="3"), "max_events '3': "),
                     (dict(max_events=True), "max_events True: "), (dict(trace_path=None), "trace None: "),
                     (dict(trace_path=5), "trace 5: "), (dict(trace_path=[trace, None]), "trace None: "),
                     (dict(out_path=None), "output None: ")):
        args = dict(trace_path=trace, out_path=out)
        args.update(kw)
        if os.path.exists(out):
            os.unlink(out)
        try:
            gmlake.export_snapshot(**args)
            check(False, "export_snapshot(%r) is refused" % (kw,))
        except gmlake.GmlakeError as e:
            check(str(e).startswith(want), "%r: %s" % (kw, e))
        except Exception as e:
            check(False, "%r: GmlakeError, not %r" % (kw, e))
        check(not os.path.exists(out), "%r: nothing written" % (kw,))
    check(gmlake.export_snapshot(trace, out, max_events=1)["frees"] == 1, "max_events=1")
    # an endless input of binary data (/dev/zero) is refused at its first NUL byte, as gmlake
    # replay refuses it, where the whole of it used to be read first (memory without end); run
    # with its memory bounded, so that a failure is a failure and not the machine's memory
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); "
            "sys.path.insert(0, sys.argv[1]); import gmlake\n"
            "try: gmlake.export_snapshot('/dev/zero', sys.argv[2])\n"
            "except gmlake.GmlakeError as e: print(e)")
    pydir = os.path.dirname(os.path.dirname(os.path.abspath(gmlake.__file__)))
    try:
        r = subprocess.run([sys.executable, "-c", code, pydir, out], capture_output=True, text=True,
                           timeout=30)
        check(r.stdout.strip() == "/dev/zero:1: a NUL byte: binary data, not a text trace",
              "/dev/zero: %r %r" % (r.stdout, r.stderr[-300:]))
    except subprocess.TimeoutExpired:
        check(False, "/dev/zero: refused at once")


def runtime(cudart_path):
    rt = ctypes.CDLL(cudart_path, mode=ctypes.RTLD_GLOBAL)
    rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    rt.cudaFree.argtypes = [ctypes.c_void_p]
    rt.cudaMallocAsync.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t, ctypes.c_void_p]
    rt.cudaFreeAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return rt


def preloaded(cudart_path):
    import gmlake
    check(gmlake.enabled(), "enabled() under LD_PRELOAD")
    check(gmlake.stats(0) is None, "no pool before the first allocation")
    rt = runtime(cudart_path)
    ptrs = []
    for size in (3 * MiB, 5 * MiB, 700 * 1024, 3 * MiB):
        p = ctypes.c_void_p()
        check(rt.cudaMalloc(ctypes.byref(p), size) == 0, "cudaMalloc(%d)" % size)
        ptrs.append(p)
    s = gmlake.stats(0)
    check(s is not None, "a pool after allocations")
    check(s["allocations"] == 4 and s["live_allocations"] == 4, s)
    check(s["active_bytes"] == 11 * MiB + 700 * 1024, "active %d" % s["active_bytes"])
    check(s["reserved_bytes"] >= s["active_bytes"] and s["reserved_bytes"] % s["chunk_size"] == 0, s)
    check(s["device_calls"]["chunk_create"] >= 6, s["device_calls"])
    by_call = s["device_seconds_by_call"]
    check(set(by_call) == set(s["device_calls"]) and by_call["chunk_create"] > 0 and
          abs(sum(by_call.values()) - s["device_seconds"]) < 1e-9, s)
    check(0 < s["utilization"] <= 1.0, "utilization %r" % s["utilization"])
    # the growths' calls (chunk creations, maps, access) were made inside the allocations, whose
    # time includes them (the arena's address reservation came before, when the pool was made)
    inside = sum(by_call[k] for k in ("chunk_create", "map", "set_access"))
    check(s["host_seconds_alloc"] >= inside > 0 and s["host_seconds_free"] == 0, s)
    check(s["free_bytes"] <= s["reserved_bytes"], s)
    # free the two 3 MiB blocks (not neighbours) and ask for 6 MiB: stitching serves it
    check(rt.cudaFree(ptrs[0]) == 0 and rt.cudaFree(ptrs[3]) == 0, "cudaFree")
    before = gmlake.stats(0)
    check(before["host_seconds_free"] > 0, "the frees' host time: %r" % before)
    check(before["free_bytes"] == before["reserved_bytes"] - 5 * MiB - 700 * 1024,
          "free_bytes = reserved - live: %r" % before)
    check(before["largest_free_bytes"] <= before["free_bytes"], before)
    big = ctypes.c_void_p()
    check(rt.cudaMallocAsync(ctypes.byref(big), 6 * MiB, ctypes.c_void_p(0x10)) == 0, "6 MiB")
    after = gmlake.stats(0)
    check(after["active_bytes"] == before["active_bytes"] + 6 * MiB, after)
    check(after["stitches"] + after["stitch_reuses"] >= 1 or
          after["reserved_bytes"] > before["reserved_bytes"], "served by a stitch or by growth")
    check(after["peak_active_bytes"] >= after["active_bytes"], after)
    summary = gmlake.memory_summary(0)
    check("gmlake memory summary, device 0" in summary and "utilization" in summary and
          "stitches" in summary, summary)
    check(re.search(r"time in the pool: allocating [0-9.]+ ms, freeing [0-9.]+ ms", summary), summary)
    check(rt.cudaFreeAsync(big, ctypes.c_void_p(0x10)) == 0 and rt.cudaFree(ptrs[1]) == 0 and
          rt.cudaFree(ptrs[2]) == 0, "frees")
    gmlake.check(0)
    gmlake.empty_cache(0)
    s = gmlake.stats(0)
    check(s["active_bytes"] == 0 and s["reserved_bytes"] == 0, "empty_cache released all: %r" % s)
    check(s["cache_releases"] >= 1, s)
    gmlake.reset_peak_stats(0)
    check(gmlake.stats(0)["peak_active_bytes"] == 0, "peaks reset")
    check(gmlake.stats(3) is None, "a device with no pool")
    bad_devices(rt)
    forked_child()


def forked_child():
    """A child forked after gmlake started gets no gmlake service: its empty_cache is refused
    with an error that names gmlake, the call and why (it said only "CUDA driver error", though no
    driver call was made), and its memory summary says that its figures are the parent's at the
    fork (it showed them as this process's)."""
    import gmlake
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        out = []
        try:
            gmlake.empty_cache(0)
            out.append("no error")
        except gmlake.GmlakeError as e:
            out.append(str(e))
        out.append(gmlake.memory_summary(0))
        os.write(w, "\0".join(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    err, summary = (data.decode().split("\0") + ["", ""])[:2]
    check(err.startswith("gmlake: empty_cache(device 0): ") and "forked" in err, "forked child: " + err)
    check("gmlake memory summary, device 0" in summary and "the parent's at the fork" in summary,
          "forked child's summary: " + summary)


def refused(f, dev, exc):
    try:
        f(dev)
    except exc as e:
        return "device" in str(e)
    except Exception as e:
        print("  %s(%r) raised %r" % (f.__name__, dev, e))
    return False


def bad_devices(rt=None):
    """A device that is not a CUDA device ordinal is refused, never cut to 32 bits (2**32 used to
    act on device 0) nor quietly read as another (0.9: device 0; -1: nothing, no word)."""
    import gmlake
    p = ctypes.c_void_p()
    if rt is not None:
        check(rt.cudaMalloc(ctypes.byref(p), 64 * MiB) == 0 and rt.cudaFree(p) == 0, "64 MiB")
        before = gmlake.stats(0)
        check(before["reserved_bytes"] >= 64 * MiB, before)
    for f in (gmlake.stats, gmlake.memory_summary, gmlake.empty_cache, gmlake.reset_peak_stats,
              gmlake.check):
        for dev in (2 ** 31, 2 ** 32, 2 ** 64, -1, -5, -2 ** 32):
            check(refused(f, dev, ValueError), "%s(%r): ValueError" % (f.__name__, dev))
        for dev in (0.9, 1.0, "0", None, True, False):
            check(refused(f, dev, TypeError), "%s(%r): TypeError" % (f.__name__, dev))
    if rt is not None:
        after = gmlake.stats(0)
        check(after["reserved_bytes"] == before["reserved_bytes"] and
              after["peak_active_bytes"] == before["peak_active_bytes"],
              "device 0 untouched: %r %r" % (before, after))
        # devices gmlake does not serve (no pool there, or beyond the 64 it supports): nothing
        check(gmlake.stats(64) is None and gmlake.stats(2 ** 31 - 1) is None, "no pool")
        gmlake.empty_cache(64)
        gmlake.check(2 ** 31 - 1)


def traced(cudart_path):
    """With trace_file set, gmlake.export_snapshot of the process's own trace agrees with
    gmlake.stats: every allocation served is an alloc entry, what is live is the segments."""
    import pickle
    import gmlake
    trace = os.environ["GMLAKE_TRACE_FILE"]
    rt = runtime(cudart_path)
    ptrs = []
    for i, size in enumerate((3 * MiB, 700 * 1024, 5 * MiB, 12345, MiB)):
        p = ctypes.c_void_p()
        check(rt.cudaMallocAsync(ctypes.byref(p), size, ctypes.c_void_p(0x10 * (i % 2))) == 0, size)
        ptrs.append(p)
    check(rt.cudaFreeAsync(ptrs[0], ctypes.c_void_p(0x10)) == 0 and rt.cudaFree(ptrs[3]) == 0, "frees")
    s = gmlake.stats(0)
    out = trace + ".pickle"
    summary = gmlake.export_snapshot(trace, out)
    check(summary["allocations"] == s["allocations"] == 5 and summary["frees"] == 2, summary)
    with open(out, "rb") as f:
        snap = pickle.load(f)
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    check(len(allocs) == s["allocations"], "alloc entries %d, stats %r" % (len(allocs), s))
    segs = snap["segments"]
    check(len(segs) == s["live_allocations"] == 3, "segments %d" % len(segs))
    check(sum(g["total_size"] for g in segs) == s["active_bytes"], "live bytes %r" % s)
    check(sorted(g["address"] for g in segs) == sorted(p.value for p in ptrs[1:3] + ptrs[4:]),
          "the live pointers are the segments")
    try:
        gmlake.export_snapshot(trace, trace)
        check(False, "exporting onto the trace itself is refused")
    except gmlake.GmlakeError as e:
        check("the output is the input trace" in str(e), str(e))
    try:
        gmlake.export_snapshot(trace + ".missing", out)
        check(False, "a missing trace raises GmlakeError")
    except gmlake.GmlakeError as e:
        check("cannot read" in str(e), str(e))


def old_library():
    """Under a libgmlake built before stream_wait (tests/python/old_gmlake.c: 13 kinds of device
    call, every later field of gmlake_stats 8 bytes earlier) stats() and memory_summary() raise
    GmlakeError saying so, where stats() read its fields from the wrong offsets (free_bytes 0,
    device_calls with an "unknown" kind holding the library's free_bytes); the calls that take only
    a device work as with any library."""
    import gmlake
    check(gmlake.enabled(), "enabled() under the old library")
    for f in (gmlake.stats, gmlake.memory_summary):
        try:
            r = f(0)
            check(False, "%s under an older library: GmlakeError, not %r" % (f.__name__, r))
        except gmlake.GmlakeError as e:
            check("older than this gmlake package (13 kinds of device call" in str(e), str(e))
    gmlake.empty_cache(0)
    gmlake.reset_peak_stats(0)
    gmlake.check(0)


def newer_library():
    """Under a libgmlake whose gmlake_stats has a field more than this package's (new_gmlake.c:
    the same kinds of device call, gmlake_stats_size 8 bytes larger) stats() and memory_summary()
    raise GmlakeError naming both sizes, where stats() let the library write past the package's
    struct and answered as if nothing were wrong."""
    import ctypes
    import gmlake
    ours = ctypes.sizeof(gmlake._Stats)
    for f in (gmlake.stats, gmlake.memory_summary):
        try:
            r = f(0)
            check(False, "%s under a newer library: GmlakeError, not %r" % (f.__name__, r))
        except gmlake.GmlakeError as e:
            check("newer than this gmlake package (its statistics are %d bytes, not %d)"
                  % (ours + 8, ours) in str(e), str(e))
    gmlake.empty_cache(0)
    gmlake.check(0)


def loaded_but_off(cudart):
    """libgmlake preloaded with GMLAKE_ENABLE=0: enabled() is False (it said True: loaded), and
    the summary says gmlake is off rather than that it has served nothing."""
    import ctypes
    import gmlake
    rt = ctypes.CDLL(cudart, mode=ctypes.RTLD_GLOBAL)
    p = ctypes.c_void_p()
    check(rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(1 << 20)) == 0, "cudaMalloc passes to CUDA")
    check(not gmlake.enabled(), "enabled() is False where libgmlake is loaded but off")
    check(gmlake.stats(0) is None, "stats() is None: nothing served")
    s = gmlake.memory_summary(0)
    check("gmlake is loaded but off in this process" in s, s)
    rt.cudaFree(p)


def main():
    pydir, lib, cudart = sys.argv[1:4]
    mode = sys.argv[4] if len(sys.argv) > 4 else None
    sys.path.insert(0, pydir)
    if mode == "plain":
        not_loaded()
    elif mode == "preloaded":
        preloaded(cudart)
    elif mode == "traced":
        traced(cudart)
    elif mode == "old":
        old_library()
    elif mode == "new":
        newer_library()
    elif mode == "off":
        loaded_but_off(cudart)
    else:
        tmp = tempfile.mkdtemp(prefix="gmlake-py-")
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and not k.startswith("GMLAKE_")}
        me = [sys.executable, __file__, pydir, lib, cudart]
        pre = {"LD_PRELOAD": lib, "LD_LIBRARY_PATH": os.path.dirname(cudart),
               "GMLAKE_SYSCONFDIR": "/nonexistent", "XDG_CONFIG_HOME": "/nonexistent",
               "GMLAKE_LOG_LEVEL": "error"}
        runs = [("plain", {}), ("preloaded", pre), ("off", dict(pre, GMLAKE_ENABLE="0")),
                ("traced", dict(pre, GMLAKE_TRACE_FILE=os.path.join(tmp, "job.trace")))]
        if os.environ.get("OLD_LIBGMLAKE"):
            runs.append(("old", {"LD_PRELOAD": os.environ["OLD_LIBGMLAKE"]}))
        if os.environ.get("NEW_LIBGMLAKE"):
            runs.append(("new", {"LD_PRELOAD": os.environ["NEW_LIBGMLAKE"]}))
        for m, extra in runs:
            r = subprocess.run(me + [m], env=dict(env, **extra), capture_output=True, text=True)
            sys.stdout.write(r.stdout)
            sys.stderr.write(r.stderr)
            check(r.returncode == 0 and " 0 failed" in r.stdout, "%s run (status %d)" % (m, r.returncode))
        shutil.rmtree(tmp)
    print("%d passed, %d failed" % (sum(results), len(results) - sum(results)))
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
