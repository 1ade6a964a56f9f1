"""`gmlake export-snapshot`: gmlake traces to PyTorch memory snapshots.  Round trips through the
importer (the events come back unchanged), the structure as memory_viz reads it
(memviz_checks.py; where torch is importable, torch.cuda._memory_viz's own trace_plot,
segment_plot, segsum and trace too), devices, the event window, output safety and the errors.

Usage: test_snapshot_export.py SOURCE_ROOT BUILD_TOOLS_DIR
"""
import gzip
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import memviz_checks  # noqa: E402

ROOT = TOOLS = None
MiB = 1 << 20
NONE = (1 << 64) - 1
PTDS = 1 << 62
B = 0x7F0000000000

# A recorded-looking trace from t=0: pointer reuse, a cross-stream free (allocated on 0x55, freed
# on 0x66), cudaMalloc/cudaFree (stream none), a per-thread default stream key, two allocations
# live at the end.
SYNTH = [
    f"A {B:#x} {MiB} 0x55 0",
    f"A {B + 2 * MiB:#x} 4096 {NONE:#x} 20",
    f"A {B + 4 * MiB:#x} {3 * MiB} {PTDS | 1 << 6:#x} 25",
    f"F {B:#x} 0 0x66 50",
    f"A {B:#x} 2000000 0x55 70",
    f"F {B + 4 * MiB:#x} 0 {PTDS | 1 << 6:#x} 80",
    f"A {B + 4 * MiB:#x} 100 {PTDS | 2 << 6:#x} 90",
    f"F {B + 2 * MiB:#x} 0 {NONE:#x} 95",
]
HEADER = "# gmlake-trace v1: op ptr size stream t_us (recorded by libgmlake)"


def run(*args, check=True, timeout=300, **kw):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def exporter(*args, check=True):
    return run(sys.executable, os.path.join(TOOLS, "gmlake-export-snapshot"), *args, check=check)


def importer(*args):
    return run(sys.executable, os.path.join(TOOLS, "gmlake-import-snapshot"), "-q", *args)


def events(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [l.split() for l in f if l.strip() and not l.startswith("#")]


def normalized(evs):
    """The fields of each event as numbers, times from the first event (the importer starts a
    trace at 0)."""
    t0 = int(evs[0][4])
    return [(e[0], int(e[1], 16), int(e[2]), int(e[3], 16), int(e[4]) - t0) for e in evs]


def load(path):
    with open(path, "rb") as f:
        return f.read()


class Export(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gmlake-export-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, lines, header=True, gz=False, raw=None):
        p = self.path(name)
        data = raw if raw is not None else \
            ("\n".join(([HEADER] if header else []) + lines) + "\n").encode()
        with open(p, "wb") as f:
            f.write(gzip.compress(data) if gz else data)
        return p

    def round_trip(self, trace, name):
        snap = self.path(name + ".pickle")
        back = self.path(name + ".back.trace")
        exporter("-q", trace, "-o", snap)
        importer(snap, "-o", back)
        return snap, back

    def test_round_trip_is_identical(self):
        trace = self.write("synth.trace", SYNTH)
        snap, back = self.round_trip(trace, "synth")
        self.assertEqual(events(back), events(trace), "every field of every event comes back")
        v = memviz_checks.check(load(snap))[0]
        self.assertEqual(v["allocs"], 5)
        self.assertEqual(v["active"]["initially_allocated"], 0, "every allocation is in the trace")
        self.assertEqual(v["active"]["end"], 2000000 + 100)
        self.assertEqual(v["active"]["peak"], 3 * MiB + 4096 + 2000000)
        self.assertEqual(v["state"]["reserved_end"], 2000000 + 100, "segments: the live allocations")

    def test_snapshot_content(self):
        snap = pickle.loads(load(self.round_trip(self.write("s.trace", SYNTH), "s")[0]))
        t = snap["device_traces"][0]
        self.assertEqual([e["action"] for e in t[:2]], ["segment_alloc", "alloc"])
        free = [e for e in t if e["action"].startswith("free") or e["action"] == "segment_free"][:3]
        self.assertEqual([e["action"] for e in free], ["free_requested", "free_completed", "segment_free"])
        self.assertEqual([(e["addr"], e["size"], e["stream"], e["time_us"]) for e in free],
                         [(B, MiB, 0x66, 50)] * 2 + [(B, MiB, 0x55, 50)],
                         "a free: its own stream, the allocation's size")
        self.assertEqual(t[0]["frames"], [])
        segs = snap["segments"]
        self.assertEqual([(s["address"], s["total_size"], s["stream"], s["device"]) for s in segs],
                         [(B, 2000000, 0x55, 0), (B + 4 * MiB, 100, PTDS | 2 << 6, 0)])
        self.assertEqual([(s["allocated_size"], s["active_size"], s["segment_type"]) for s in segs],
                         [(2000000, 2000000, "large"), (100, 100, "small")],
                         "each segment all allocated; PyTorch's large pool above 1 MiB")
        self.assertEqual(segs[0]["blocks"], [{"address": B, "size": 2000000, "requested_size": 2000000,
                                              "state": "active_allocated", "frames": []}])
        st = snap["allocator_settings"]
        self.assertEqual(st["allocator"], "gmlake")
        self.assertIn("one segment per allocation", st["segments"])
        self.assertEqual(st["traces"]["0"]["header"], HEADER)

    def test_recorded_trace_gzip_round_trip(self):
        # the bundled trace (recorded on an H200, gzip, monotonic clock): events unchanged, times
        # from the first event
        trace = os.path.join(ROOT, "bench", "traces", "mixtral_moe.trace.gz")
        snap, back = self.round_trip(trace, "mixtral")
        want = events(trace)
        self.assertEqual(normalized(events(back)), normalized(want))
        v = memviz_checks.check(load(snap))[0]
        self.assertEqual(v["allocs"], sum(e[0] == "A" for e in want))

    def test_pytorch_snapshot_through_a_trace_and_back(self):
        # a real PyTorch snapshot (tests/tools/fixtures) imported, exported, imported again: the
        # same trace, allocations live before its window included
        for fx in ("native", "expandable"):
            t1 = self.path(fx + ".trace")
            importer(os.path.join(HERE, "fixtures", fx + ".pickle.gz"), "-o", t1)
            snap, t2 = self.round_trip(t1, fx)
            self.assertEqual(events(t2), events(t1), fx)
            v = memviz_checks.check(load(snap))[0]
            self.assertGreater(v["allocs"], 1000, fx)

    def test_devices(self):
        trace = self.write("t.trace", SYNTH)
        snap = self.path("d2.pickle")
        exporter("-q", "--device", "2", trace, "-o", snap)
        s = pickle.loads(load(snap))
        self.assertEqual([len(t) > 0 for t in s["device_traces"]], [False, False, True])
        self.assertEqual({seg["device"] for seg in s["segments"]}, {2})
        self.assertEqual(list(memviz_checks.check(load(snap))), [2])
        # several traces (one per process): devices 0, 1; the importer gives one trace each back
        other = self.write("u.trace", SYNTH[:3])
        both = self.path("both.pickle")
        p = exporter(trace, other, "-o", both)
        self.assertIn("device 1, 3 allocations, 0 frees, 3 live", p.stderr)
        self.assertEqual(sorted(memviz_checks.check(load(both))), [0, 1])
        importer(both, "-o", self.path("back.trace"))
        self.assertEqual(events(self.path("back.dev0.trace")), events(trace))
        self.assertEqual(events(self.path("back.dev1.trace")), events(other))
        p = exporter("--device", "1", trace, other, "-o", self.path("x.pickle"), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--device places one trace", p.stderr)

    def test_device_out_of_range(self):
        # the snapshot's device_traces is a list indexed by device: a huge --device used to build
        # a list that long (--device 10**12 ran out of memory); gmlake serves devices 0 to 63
        trace = self.write("t.trace", SYNTH)
        for dev, want in (("1000000000000", "device 1000000000000: gmlake serves devices 0 to 63"),
                          ("64", "device 64: gmlake serves devices 0 to 63"),
                          ("-1", "device -1: gmlake serves devices 0 to 63")):
            out = self.path("d.pickle")
            p = run(sys.executable, os.path.join(TOOLS, "gmlake-export-snapshot"), "--device", dev,
                    trace, "-o", out, check=False, timeout=20)
            self.assertEqual(p.returncode, 2, (dev, p.stderr))
            self.assertIn(want, p.stderr)
            self.assertFalse(os.path.exists(out), dev)
        exporter("-q", "--device", "63", trace, "-o", self.path("d63.pickle"))
        self.assertEqual(len(pickle.loads(load(self.path("d63.pickle")))["device_traces"]), 64)
        # 65 traces would put the last on device 64
        p = exporter(*[trace] * 65, "-o", self.path("many.pickle"), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("65 traces: gmlake serves devices 0 to 63", p.stderr)

    def test_event_window_like_the_ring_buffer(self):
        trace = self.write("t.trace", SYNTH)
        snap = self.path("w.pickle")
        exporter("-q", "--max-events", "4", trace, "-o", snap)
        s = pickle.loads(load(snap))
        self.assertEqual(s["allocator_settings"]["trace_alloc_max_entries"], 4)
        v = memviz_checks.check(load(snap))[0]
        self.assertEqual(v["allocs"], 2)
        # B + 4 MiB (3 MiB) and B + 2 MiB were allocated before the window and freed in it
        self.assertEqual(v["active"]["initially_allocated"], 2)
        self.assertEqual(v["active"]["end"], 2000000 + 100)
        back = self.path("w.trace")
        importer(snap, "-o", back)
        got = events(back)
        # the importer reconstructs them as live from the start, then the window's events
        self.assertEqual(sorted(got[:2]), sorted([["A", f"{B + 2 * MiB:#x}", "4096", f"{NONE:#x}", "0"],
                                                  ["A", f"{B + 4 * MiB:#x}", str(3 * MiB),
                                                   f"{PTDS | 1 << 6:#x}", "0"]]))
        self.assertEqual([e[:4] for e in got[2:]], [l.split()[:4] for l in SYNTH[4:]])

    def test_command_and_standard_output(self):
        trace = self.write("t.trace", SYNTH, gz=True)
        out = self.path("via-command.pickle")
        p = run(os.path.join(ROOT, "scripts", "gmlake"), "export-snapshot", trace, "-o", out)
        self.assertIn("5 allocations, 3 frees, 2 live at the end (2000100 bytes)", p.stderr)
        p = subprocess.run([sys.executable, os.path.join(TOOLS, "gmlake-export-snapshot"), "-q",
                            trace, "-o", "-"], capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0)
        self.assertEqual(pickle.loads(p.stdout), pickle.loads(load(out)))

    def test_errors_are_one_line_and_leave_no_output(self):
        good = gzip.compress(("\n".join([HEADER] + SYNTH) + "\n").encode())
        cases = [
            ("missing.trace", None, "cannot read: No such file or directory"),
            ("empty.trace", b"", "empty: no '# gmlake-trace v1' header and no events"),
            ("header.trace", (HEADER + "\n").encode(), "no events"),
            ("corrupt.trace.gz", b"\x1f\x8b" + b"\x00" * 40, "bad gzip data"),
            ("truncated.trace.gz", good[:len(good) // 2], "truncated gzip data"),
            ("cut.trace", ("\n".join([HEADER] + SYNTH) + "\nA 0x7f00").encode(),
             ":10: expected 5 fields"),
            ("fields.trace", (HEADER + "\nA 0x10 100 0x0\n").encode(), ":2: expected 5 fields"),
            ("op.trace", (HEADER + "\nX 0x10 100 0x0 1\n").encode(), ":2: the operation must be A, F or E"),
            ("hex.trace", (HEADER + "\nA zz 100 0x0 1\n").encode(), "the pointer is not a hexadecimal"),
            ("neg.trace", (HEADER + "\nA 0x10 -1 0x0 1\n").encode(), "the size is negative"),
            ("freesize.trace", (HEADER + "\nA 0x10 1 0x0 1\nF 0x10 5 0x0 2\n").encode(), ":3: a free has size 0"),
            ("notlive.trace", (HEADER + "\nF 0x10 0 0x0 1\n").encode(), ":2: free of pointer 0x10 that is not live"),
            ("twice.trace", (HEADER + "\nA 0x10 1 0x0 1\nA 0x10 1 0x0 2\n").encode(),
             ":3: allocation of 0x10, which is still live"),
            ("binary.trace", b"\xff\xfe\x00garbage\n", ":1: a NUL byte: binary data, not a text trace"),
            ("snap.pickle", pickle.dumps({"segments": []}), "a Python pickle, not a gmlake trace"),
            ("v2.trace", b"# gmlake-trace v2: something\nA 0x10 1 0x0 1\n", ":1: unsupported trace format version"),
        ]
        for name, raw, want in cases:
            trace = self.path(name) if raw is None else self.write(name, [], raw=raw)
            out = self.path(name + ".pickle")
            with open(out, "wb") as f:
                f.write(b"previous")
            p = exporter(trace, "-o", out, check=False)
            self.assertEqual(p.returncode, 2, (name, p.stderr))
            self.assertEqual(p.stderr.count("\n"), 1, (name, p.stderr))
            self.assertTrue(p.stderr.startswith(f"gmlake export-snapshot: {trace}"), (name, p.stderr))
            self.assertIn(want, p.stderr, name)
            self.assertNotIn("Traceback", p.stderr)
            self.assertEqual(load(out), b"previous", f"{name}: an earlier output is kept")
        self.assertFalse([f for f in os.listdir(self.dir) if f.endswith(".tmp")], "no temporary left")

    def test_the_same_traces_as_replay(self):
        # export-snapshot reads a trace by gmlake replay's rules (tools/trace.c,
        # core/trace_format.c): it accepted a trace with no header and Python's int() forms
        # ('1_00', Unicode digits), and refused a last line without a newline that replay reads
        ok = "A 0x1000 100 0 1\nF 0x1000 0 0 2\n"
        h = "# gmlake-trace v1\n"
        cases = [
            ("no header", ok.encode(), False),
            ("underscores", (h + "A 0x1_000 1_00 0 1\n").encode(), False),
            ("unicode digits", (h + "A 0x1000 \u0661\u0660 0 1\n").encode(), False),
            ("vertical tab between fields", (h + "A\x0b0x1000 100 0 1\n").encode(), False),
            ("header after a blank", (" " + h + ok).encode(), False),
            ("header v1x", ("# gmlake-trace v1x\n" + ok).encode(), False),
            ("a NUL in a comment", (h + "# a\x00b\n" + ok).encode(), False),
            ("a line too long", (h + "#" + "x" * 600 + "\n" + ok).encode(), False),
            ("plus sign", (h + "A 0x1000 +100 0 1\n").encode(), False),
            ("last line without a newline", (h + ok.rstrip("\n")).encode(), True),
            ("CRLF", (h + ok).replace("\n", "\r\n").encode(), True),
            ("0X prefix, tabs", (h + "A\t0X1000\t100\t0x0\t1\n").encode(), True),
            ("not UTF-8 in a comment", (h + "# caf\xe9\n").encode("latin-1") + ok.encode(), True),
            ("header with a blank and more", ("# gmlake-trace v1 recorded\n" + ok).encode(), True),
            ("a cache release (E) between the events", (h + "A 0x1000 100 0 1\nE 0x0 0 0 2\n"
                                                        "F 0x1000 0 0 3\n").encode(), True),
            ("a cache release naming a pointer", (h + ok + "E 0x1000 0 0 3\n").encode(), False),
        ]
        for name, raw, good in cases:
            trace = self.write(name.replace(" ", "_") + ".trace", [], raw=raw)
            r = run(os.path.join(TOOLS, "gmlake-replay"), "--policy", "pytorch", trace, check=False)
            self.assertEqual(r.returncode == 0, good, (name, "replay", r.stderr))
            p = exporter("-q", trace, "-o", self.path("x.pickle"), check=False)
            self.assertEqual(p.returncode == 0, good, (name, "export", p.stderr))
            if not good:
                self.assertEqual(p.stderr.count("\n"), 1, (name, p.stderr))
                why = r.stderr.strip().split(": ", 1)[1]
                self.assertIn(why, p.stderr, name)

    def test_output_safety(self):
        trace = self.write("t.trace", SYNTH)
        before = load(trace)
        link = self.path("link.trace")
        os.symlink(trace, link)
        for out in (trace, link, os.path.join(self.dir, ".", "t.trace")):
            p = exporter(trace, "-o", out, check=False)
            self.assertEqual(p.returncode, 2, out)
            self.assertIn("the output is the input trace", p.stderr)
            self.assertEqual(load(trace), before, "the trace is untouched")
        p = exporter(trace, "-o", os.path.join(self.dir, "no", "such", "dir", "s.pickle"), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("cannot write in", p.stderr)
        p = exporter(trace, "-o", self.dir, check=False)
        self.assertIn("is a directory", p.stderr)
        # an empty name is refused as such, before the trace is read (it was ": cannot write:
        # No such file or directory", once the whole trace had been converted)
        p = exporter(trace, "-o", "", check=False)
        self.assertEqual((p.returncode, p.stderr), (2, "gmlake export-snapshot: the output is an "
                         "empty name: name the snapshot file to write\n"))
        self.assertNotIn("Traceback", p.stderr)
        # a replaced output is a new file, written whole (no temporary beside it)
        out = self.path("s.pickle")
        exporter("-q", trace, "-o", out)
        exporter("-q", trace, "-o", out)
        self.assertEqual(sorted(os.listdir(self.dir)), ["link.trace", "s.pickle", "t.trace"])
        self.assertEqual(pickle.loads(load(out))["segments"][0]["address"], B)

    def test_an_output_that_is_no_regular_file_is_written_through_not_replaced(self):
        # -o /dev/stdout, /dev/null, a FIFO, a link: the snapshot goes where the name leads; it
        # used to be renamed over the name (as root, /dev/full became a regular file)
        trace = self.write("t.trace", SYNTH)
        fifo = self.path("out.pickle")
        os.mkfifo(fifo)
        got = self.path("got.pickle")
        with open(got, "wb") as sink:
            reader = subprocess.Popen(["timeout", "20", "cat", fifo], stdout=sink)
            p = exporter("-q", trace, "-o", fifo, check=False)
            if reader.wait() != 0:
                self.fail(f"nothing came through the FIFO (exporter: {p.returncode} {p.stderr})")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO is still a FIFO")
        self.assertEqual(pickle.loads(load(got))["segments"][0]["address"], B)
        target = self.path("target.pickle")
        link = self.path("link.pickle")
        os.symlink(target, link)
        exporter("-q", trace, "-o", link)
        self.assertTrue(os.path.islink(link), "the link is still a link")
        self.assertEqual(pickle.loads(load(target))["segments"][0]["address"], B)

    def test_checker_catches_what_memory_viz_trips_on(self):
        # the checks themselves must fail on a broken snapshot
        snap = pickle.loads(load(self.round_trip(self.write("t.trace", SYNTH), "t")[0]))
        bad_proto = pickle.dumps(snap, protocol=5)
        with self.assertRaisesRegex(memviz_checks.VizError, "protocol 5"):
            memviz_checks.check(bad_proto)
        with self.assertRaisesRegex(memviz_checks.VizError, "BINBYTES"):
            memviz_checks.check(pickle.dumps(dict(snap, x=b"bytes"), protocol=4))
        no_seg = dict(snap, device_traces=[[e for e in snap["device_traces"][0]
                                            if not e["action"].startswith("segment")]])
        with self.assertRaisesRegex(memviz_checks.VizError, "outside every segment"):
            memviz_checks.check(pickle.dumps(no_seg, protocol=4))
        lost = dict(snap, segments=snap["segments"][:1])
        with self.assertRaises(memviz_checks.VizError):
            memviz_checks.check(pickle.dumps(lost, protocol=4))
        # each of the other checks, on a snapshot broken for it alone
        t = snap["device_traces"][0]
        seg0 = snap["segments"][0]
        block0 = seg0["blocks"][0]

        def broken(pattern, **changes):
            with self.assertRaisesRegex(memviz_checks.VizError, pattern):
                memviz_checks.check(pickle.dumps(dict(snap, **changes), protocol=4))

        ev = dict(t[-1], action="free_requested", addr=B + 64 * MiB)
        broken("free_requested of .* with no block", device_traces=[t + [ev]])
        broken("while it is mapped", device_traces=[t + [dict(t[0], action="segment_free", addr=B)]])
        # B's first free without its free_requested/free_completed: the segment goes with its block
        first = [i for i, e in enumerate(t) if e["action"] == "free_requested"][0]
        broken("segment_free of .* with blocks still in it", device_traces=[t[:first] + t[first + 2:]])
        broken("blocks sum to", segments=[dict(seg0, total_size=seg0["total_size"] + 512)] +
               snap["segments"][1:])
        broken("block address", segments=[dict(seg0, blocks=[dict(block0, address=B + 512)])] +
               snap["segments"][1:])
        broken("not exact in JS", device_traces=[t + [dict(t[-1], addr=1 << 53)]])
        broken("the timeline ends at", segments=[dict(seg0, blocks=[dict(block0, requested_size=1000)])] +
               snap["segments"][1:])


class PyTorchMemoryViz(unittest.TestCase):
    """PyTorch's own memory_viz on an exported snapshot, where torch is importable."""

    def test_trace_plot_and_segment_plot(self):
        try:
            from torch.cuda import _memory_viz as mv
        except Exception as e:  # no torch here
            self.skipTest(f"torch is not importable ({type(e).__name__})")
        d = tempfile.mkdtemp(prefix="gmlake-mv-")
        try:
            trace = os.path.join(d, "t.trace")
            with open(trace, "w") as f:
                f.write("\n".join([HEADER] + SYNTH) + "\n")
            snap = os.path.join(d, "t.pickle")
            exporter("-q", trace, "-o", snap)
            with open(snap, "rb") as f:
                data = pickle.load(f)
            for html in (mv.trace_plot(data), mv.trace_plot(data, plot_segments=True),
                         mv.segment_plot(data)):
                self.assertIn("MemoryViz.js", html)
                self.assertIn("snapshot.pickle", html)
            self.assertIn("segments: 2", mv.segsum(data))
            self.assertIn("Device 0", mv.trace(data))
            for cmd in ("trace_plot", "segment_plot"):
                out = os.path.join(d, cmd + ".html")
                run(sys.executable, "-m", "torch.cuda._memory_viz", cmd, snap, "-o", out)
                with open(out) as f:
                    self.assertIn("MemoryViz.js", f.read())
        finally:
            shutil.rmtree(d)


if __name__ == "__main__":
    ROOT, TOOLS = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=[sys.argv[0], "-v"])
