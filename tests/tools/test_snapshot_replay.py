"""The snapshot importer, `gmlake replay` under the PyTorch models (table, JSON, plot), on
synthetic snapshots (snapshots.py), the real fixtures recorded on a GPU (tests/tools/fixtures),
and, where ../shared exists, the three shared traces against what PyTorch measured.

Usage: test_snapshot_replay.py SOURCE_ROOT BUILD_TOOLS_DIR
"""
import gzip
import json
import os
import pickle
import re
import resource
import signal
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
import xml.etree.ElementTree as ET

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import snapshots  # noqa: E402

ROOT = TOOLS = None
SVG = "{http://www.w3.org/2000/svg}"


def run(*args, check=True):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def importer(*args, check=True):
    return run(sys.executable, os.path.join(TOOLS, "gmlake-import-snapshot"), *args, check=check)


def replay(*args, check=True):
    return run(os.path.join(TOOLS, "gmlake-replay"), *args, check=check)


def replay_json(*args):
    out = replay("--json", *args).stdout
    return {(d["trace"], d["policy"]): d for d in map(json.loads, out.splitlines())}


def events(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return [l.strip() for l in f if l.strip() and not l.startswith("#")]


def header(path):
    with open(path) as f:
        return [l.strip() for l in f if l.startswith("#")]


class Import(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gmlake-snap-")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def write(self, obj, name="snap.pickle", raw=None):
        path = os.path.join(self.dir, name)
        with open(path, "wb") as f:
            f.write(raw if raw is not None else pickle.dumps(obj))
        return path

    def test_events_and_live_before_the_buffer(self):
        for expandable in (False, True):
            snap = self.write(snapshots.scenario(expandable))
            out = os.path.join(self.dir, "t.trace")
            p = importer(snap, "-o", out)
            self.assertEqual(events(out), snapshots.EXPECTED_TRACE)
            h = "\n".join(header(out))
            self.assertIn("live before the first entry (reconstructed): 3 allocations, "
                          f"{14 * snapshots.MiB} bytes", h)
            self.assertIn(f"at the first entry {snapshots.RESERVED_START}, peak "
                          f"{snapshots.RESERVED_PEAK}", h)
            self.assertIn(f"expandable_segments {expandable}", h)
            self.assertIn("1 OOMs", h)
            self.assertIn("3 live before the first entry", p.stderr)

    def test_replay_matches_hand_derived_pytorch_behaviour(self):
        snap = self.write(snapshots.scenario())
        out = os.path.join(self.dir, "t.trace.gz")
        importer(snap, "-q", "-o", out)
        r = replay_json("--policy", "pytorch,expandable,gmlake", out)
        for pol, want in snapshots.PEAK_RESERVED.items():
            d = r[("t.trace.gz", pol)]
            self.assertEqual(d["policy"], pol)
            self.assertEqual(d["peak_reserved_bytes"], want, pol)
            self.assertEqual(d["peak_active_bytes"], snapshots.PEAK_ACTIVE, pol)
            self.assertEqual(d["failed_allocations"], 0)
        g = r[("t.trace.gz", "gmlake")]
        self.assertIn("stitch_reuses", g, "gmlake's fields are kept")
        self.assertEqual(g["saved_vs_pytorch_bytes"], 58 * snapshots.MiB - g["peak_reserved_bytes"])
        self.assertEqual(r[("t.trace.gz", "expandable")]["saved_vs_pytorch_bytes"], -4 * snapshots.MiB)
        self.assertEqual(r[("t.trace.gz", "pytorch")]["device_calls"]["cuda_malloc"], 4)

    def test_several_devices_one_trace_each(self):
        s = snapshots.scenario()
        s["device_traces"] = [s["device_traces"][0], [], s["device_traces"][0]]
        snap = self.write(s)
        importer(snap, "-q", "-o", os.path.join(self.dir, "t.trace"))
        self.assertEqual(sorted(os.listdir(self.dir)), ["snap.pickle", "t.dev0.trace", "t.dev2.trace"])
        out = os.path.join(self.dir, "one.trace")
        importer(snap, "-q", "--device", "2", "-o", out)
        # W is allocated only in device 0's segments: device 2 starts with P and Q live
        self.assertEqual(events(out), snapshots.EXPECTED_TRACE[1:])
        p = importer(snap, "-o", "-", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("pick one with --device", p.stderr)

    def test_bad_snapshots_are_named_errors(self):
        live_twice = snapshots.scenario()
        live_twice["device_traces"][0].insert(5, dict(live_twice["device_traces"][0][4]))
        cases = [
            (None, b"A 0x10 100 0x0 1\n", "not a pickle"),
            (None, b"", "not a pickle"),
            (None, b"(lp0\nI1\na.", "holds a list, not a snapshot dict"),
            ([1, 2], None, "holds a list, not a snapshot dict"),
            ({"segments": []}, None, "no 'device_traces'"),
            ({"device_traces": [[]], "segments": []}, None, "the trace buffer is empty"),
            ({"device_traces": [[{"addr": 1}]]}, None, "not a trace entry"),
            ({"device_traces": [[{"action": "alloc", "addr": "x", "size": 1}]]}, None,
             "'addr' is 'x', not an integer"),
            (live_twice, None, "which is still allocated"),
            (None, pickle.dumps(__import__("collections").OrderedDict(a=1)), "refers to collections.OrderedDict"),
            (None, b"\x80\x04\x95", "cannot unpickle"),
        ]
        for i, (obj, raw, want) in enumerate(cases):
            snap = self.write(obj, f"bad{i}.pickle", raw)
            p = importer(snap, "-o", os.path.join(self.dir, f"bad{i}.trace"), check=False)
            self.assertEqual(p.returncode, 2, (i, p.stderr))
            self.assertIn(snap, p.stderr)
            self.assertIn(want, p.stderr, i)
            self.assertNotIn("Traceback", p.stderr)
        p = importer(os.path.join(self.dir, "missing.pickle"), "-o", "x", check=False)
        self.assertIn("cannot read", p.stderr)

    def test_malformed_snapshots_one_line_exit_2(self):
        def with_entry(**kw):
            s = snapshots.scenario()
            s["device_traces"][0][0] = dict(s["device_traces"][0][0], **kw)
            return s

        def with_segments(segs):
            s = snapshots.scenario()
            s["segments"] = segs
            return s

        seg = snapshots.scenario()["segments"][0]
        nested = []
        for _ in range(100000):
            nested = [nested]
        cases = [
            (with_segments({"a": 1}), "'segments' is not a list"),
            (with_segments([5]), "segment 0 is a int, not a dict"),
            (with_segments([dict(seg, blocks={"x": 1})]), "segment 0: 'blocks' is a dict, not a list"),
            (with_segments([dict(seg, blocks=[[1]])]), "segment 0, block 0 is a list, not a dict"),
            (with_segments([dict(seg, blocks=[dict(seg["blocks"][0], address="0x10")])]),
             "segment 0, block 0: 'address' is '0x10', not an integer"),
            (with_segments([dict(seg, address=-4096)]), "segment 0: 'address' is -4096: negative"),
            (with_entry(action=["alloc"]), "'action' is ['alloc'], not a string"),
            (with_entry(size=-100), "'size' is -100: negative"),
            (with_entry(addr=-4096), "'addr' is -4096: negative"),
            (with_entry(addr=0), "'addr' is 0"),
            (with_entry(size=1 << 64), "'size' is 18446744073709551616: larger than 2^64-1"),
            (with_entry(addr=1 << 70), "larger than 2^64-1"),
            ({"device_traces": [[{"action": "alloc", "addr": nested, "size": 1}]]}, "not an integer"),
        ]
        for i, (obj, want) in enumerate(cases):
            try:
                raw = pickle.dumps(obj)
            except RecursionError:
                raw = None
            if raw is None:
                continue
            snap = self.write(None, f"m{i}.pickle", raw)
            out = os.path.join(self.dir, f"m{i}.trace")
            p = importer(snap, "-o", out, check=False)
            self.assertEqual(p.returncode, 2, (i, p.stderr))
            self.assertIn(want, p.stderr, i)
            self.assertEqual(p.stderr.count("\n"), 1, (i, p.stderr))
            self.assertNotIn("Traceback", p.stderr)
            self.assertFalse(os.path.exists(out), i)

    def test_output_naming_the_input_is_refused(self):
        gz = self.write(None, "s.pickle.gz", gzip.compress(pickle.dumps(snapshots.scenario())))
        with open(gz, "rb") as f:
            before = f.read()
        link = os.path.join(self.dir, "link.pickle.gz")
        os.link(gz, link)
        for out in (gz, link, os.path.join(self.dir, ".", "s.pickle.gz")):
            p = importer(gz, "-o", out, check=False)
            self.assertEqual(p.returncode, 2, (out, p.stderr))
            self.assertIn("is the snapshot itself", p.stderr)
            with open(gz, "rb") as f:
                self.assertEqual(f.read(), before, "the snapshot is left as it was")
        # several devices: NAME.devN.EXT that names the input
        s = snapshots.scenario()
        s["device_traces"] = [s["device_traces"][0], s["device_traces"][0]]
        two = self.write(s, "t.dev1.pickle")
        p = importer(two, "-o", os.path.join(self.dir, "t.pickle"), check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertNotIn("t.dev0.pickle", os.listdir(self.dir), "nothing written")

    def test_an_output_that_cannot_be_written_is_named_as_given(self):
        # the message used to name the temporary file beside the output (.x.trace.tmp-...)
        snap = self.write(snapshots.scenario())
        sub = os.path.join(self.dir, "sub")
        os.mkdir(sub)
        for out, want in ((sub, f"{sub}: is a directory: name the trace file to write"),
                          ("", "the output is an empty name"),
                          ("/nonexistent/x.trace", "/nonexistent/x.trace: cannot write in "
                           "/nonexistent: No such file or directory")):
            p = importer(snap, "-o", out, check=False)
            self.assertIn(p.returncode, (1, 2), (out, p.stderr))
            self.assertIn(want, p.stderr, out)
            self.assertNotIn(".tmp", p.stderr, out)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertEqual(sorted(os.listdir(self.dir)), ["snap.pickle", "sub"])
        self.assertEqual(os.listdir(sub), [])

    def test_an_output_that_is_no_regular_file_is_written_through_not_replaced(self):
        # -o /dev/stdout, /dev/null, a FIFO, a link: the trace goes where the name leads; it used
        # to be renamed over the name (as root, /dev/full became a regular file)
        snap = self.write(snapshots.scenario())
        fifo = os.path.join(self.dir, "out.trace")
        os.mkfifo(fifo)
        got = os.path.join(self.dir, "got.trace")
        with open(got, "wb") as sink:
            reader = subprocess.Popen(["timeout", "20", "cat", fifo], stdout=sink)
            p = importer("-q", snap, "-o", fifo, check=False)
            if reader.wait() != 0:
                self.fail(f"nothing came through the FIFO (importer: {p.returncode} {p.stderr})")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO is still a FIFO")
        self.assertEqual(events(got), snapshots.EXPECTED_TRACE)
        target = os.path.join(self.dir, "target.trace")
        link = os.path.join(self.dir, "link.trace")
        os.symlink(target, link)
        importer("-q", snap, "-o", link)
        self.assertTrue(os.path.islink(link), "the link is still a link")
        self.assertEqual(events(target), snapshots.EXPECTED_TRACE)

    def test_several_devices_need_an_output_file_name(self):
        # with several devices each trace is NAME.devN.EXT beside the output: an empty output or
        # a folder has no NAME, and the traces were written as hidden files .dev0, .dev1 (exit 0)
        # where one device's output is refused
        s = snapshots.scenario()
        s["device_traces"] = [s["device_traces"][0], s["device_traces"][0]]
        snap = self.write(s)
        sub = os.path.join(self.dir, "sub")
        os.mkdir(sub)
        for out, want in (("", "the output is an empty name"),
                          ("sub", "sub: is a directory: name the trace file to write"),
                          ("sub/", "sub/: is a directory: name the trace file to write"),
                          ("new/", "new/: names a directory (it ends in '/'): name the trace "
                                   "file to write")):
            p = subprocess.run([sys.executable, os.path.join(TOOLS, "gmlake-import-snapshot"),
                                snap, "-o", out], capture_output=True, text=True, timeout=300,
                               cwd=self.dir)
            self.assertEqual(p.returncode, 1, (out, p.stderr))
            self.assertIn(want, p.stderr, out)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
            self.assertEqual(sorted(os.listdir(self.dir)), ["snap.pickle", "sub"], out)
            self.assertEqual(os.listdir(sub), [], out)

    def test_old_pickle_protocols(self):
        # a snapshot pickled with protocol 0 or 1 (no 0x80 opcode first) is a pickle all the same
        want = None
        for proto in (0, 1, 4):
            snap = self.write(None, f"p{proto}.pickle", pickle.dumps(snapshots.scenario(), protocol=proto))
            out = os.path.join(self.dir, f"p{proto}.trace")
            p = importer("-q", snap, "-o", out, check=False)
            self.assertEqual(p.returncode, 0, (proto, p.stderr))
            want = want or events(out)
            self.assertEqual(events(out), snapshots.EXPECTED_TRACE, proto)

    def test_zero_byte_allocations_are_left_out(self):
        # PyTorch never asks the device allocator for 0 bytes and a trace has no 0-byte
        # allocation: one in a snapshot is left out with a note, not made into a 1-byte one
        # (its free used to "reconstruct" an allocation of 1 byte live before the buffer)
        tr = [snapshots.entry("alloc", 0x1000, 0, t=10), snapshots.entry("free_requested", 0x1000, 0, t=11),
              snapshots.entry("free_completed", 0x1000, 0, t=12),
              snapshots.entry("alloc", 0x2000, 512, t=13),
              # a 0-byte allocation made before the buffer, freed in it
              snapshots.entry("free_completed", 0x3000, 0, t=14),
              snapshots.entry("alloc", 0x1000, 0, t=15)]
        snap = self.write({"device_traces": [tr], "segments": []})
        out = os.path.join(self.dir, "z.trace")
        p = importer(snap, "-o", out)
        self.assertEqual(events(out), ["A 0x2000 512 0x0 3"])
        h = header(out)
        self.assertIn("# live before the first entry (reconstructed): 0 allocations, 0 bytes", h)
        self.assertIn("# 3 allocations of 0 bytes left out (a trace has none)", h)
        self.assertIn("1 allocations", p.stderr)
        self.assertIn("3 of 0 bytes left out", p.stderr)
        # their frees are left out of the counts too, as the allocations are
        self.assertIn("# device 0: 6 trace entries, 1 allocs, 0 frees completed, 0 OOMs", h)
        self.assertIn("left out, 0 frees,", p.stderr)

    def test_a_failing_device_leaves_nothing(self):
        s = snapshots.scenario()
        bad = [dict(e) for e in s["device_traces"][0]]
        bad[3]["size"] = -1
        s["device_traces"] = [s["device_traces"][0], bad]
        snap = self.write(s)
        p = importer(snap, "-o", os.path.join(self.dir, "t.trace"), check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertEqual(os.listdir(self.dir), ["snap.pickle"], "no trace of device 0 left behind")

    def test_a_full_disk_leaves_the_old_output_whole(self):
        s = snapshots.scenario()
        snap = self.write(s)
        out = os.path.join(self.dir, "t.trace")
        with open(out, "w") as f:
            f.write("precious")
        p = limited_run(64, sys.executable, os.path.join(TOOLS, "gmlake-import-snapshot"), snap,
                        "-o", out)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("nothing written", p.stderr)
        self.assertNotIn("Traceback", p.stderr)
        with open(out) as f:
            self.assertEqual(f.read(), "precious")
        self.assertEqual(sorted(os.listdir(self.dir)), ["snap.pickle", "t.trace"])
        # two devices, the disk full at the second: neither is left
        # (the limit is per file: device 0's trace fits under it, device 1's longer one does not)
        s["device_traces"] = [s["device_traces"][0][:3], s["device_traces"][0]]
        snap = self.write(s)
        os.unlink(out)
        size = len(importer(snap, "--device", "0", "-o", "-").stdout)
        self.assertLess(size + 10, len(importer(snap, "--device", "1", "-o", "-").stdout))
        p = limited_run(size + 10, sys.executable, os.path.join(TOOLS, "gmlake-import-snapshot"),
                        snap, "-o", out)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(os.listdir(self.dir), ["snap.pickle"])

    def test_replay_refuses_a_pickle_with_a_hint(self):
        snap = self.write(snapshots.scenario())
        p = replay(snap, check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("PyTorch memory snapshot", p.stderr)

    def test_gmlake_replay_takes_a_snapshot_directly(self):
        snap = self.write(snapshots.scenario(), "job.pickle")
        g = os.path.join(ROOT, "scripts", "gmlake")
        p = run(g, "replay", "--json", "--policy", "pytorch,expandable", snap)
        r = {d["policy"]: d for d in map(json.loads, p.stdout.splitlines())}
        self.assertEqual(r["pytorch"]["trace"], "job.pickle", "the file the user named")
        self.assertEqual(r["pytorch"]["peak_reserved_bytes"], snapshots.PEAK_RESERVED["pytorch"])
        self.assertEqual(r["expandable"]["peak_reserved_bytes"], snapshots.PEAK_RESERVED["expandable"])
        out = os.path.join(self.dir, "via-command.trace")
        run(g, "import-snapshot", "-q", snap, "-o", out)
        self.assertEqual(events(out), snapshots.EXPECTED_TRACE)
        gz = self.write(None, "job2.pickle.gz", gzip.compress(pickle.dumps(snapshots.scenario())))
        p = run(g, "replay", "--json", "--policy", "pytorch", gz)
        d = json.loads(p.stdout)
        self.assertEqual((d["trace"], d["peak_reserved_bytes"]),
                         ("job2.pickle.gz", snapshots.PEAK_RESERVED["pytorch"]), "a gzipped snapshot")


    def test_gmlake_replay_says_a_bad_snapshot_as_its_own_error_and_goes_on(self):
        # a snapshot gmlake replay cannot convert is said as gmlake replay's error (it was
        # import-snapshot's, as if the user had run that), and the other traces are replayed, as
        # gmlake-replay does for a bad trace among good ones: exit 1
        good = self.write(snapshots.scenario(), "good.pickle")
        bad = self.write(None, "bad.pickle", b"\x80\x04\x95")
        g = os.path.join(ROOT, "scripts", "gmlake")
        trace = os.path.join(ROOT, "bench", "traces", "mixtral_moe.trace.gz")
        p = run(g, "replay", "--json", "--policy", "pytorch", bad, good, trace, check=False)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual([json.loads(l)["trace"] for l in p.stdout.splitlines()],
                         ["good.pickle", "mixtral_moe.trace.gz"])
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertTrue(p.stderr.startswith("gmlake replay: " + bad + ": cannot unpickle"), p.stderr)
        p = run(g, "replay", "--policy", "pytorch", bad, check=False)
        self.assertEqual((p.returncode, p.stdout), (1, ""), "nothing else to replay: no table, exit 1")
        self.assertTrue(p.stderr.startswith("gmlake replay: " + bad + ": cannot unpickle"), p.stderr)

    def test_gmlake_replay_a_snapshots_label_is_the_one_given(self):
        # a --label before a snapshot names it, as before a trace: gmlake replay put its own
        # --label (the snapshot's path) after the user's, so two snapshots of one file name
        # could not be plotted together although the refusal said to give one a --label
        s = snapshots.scenario()
        for d in ("a", "b"):
            os.mkdir(os.path.join(self.dir, d))
            self.write(s, os.path.join(d, "snap.pickle"))
        two = dict(s, device_traces=[s["device_traces"][0], s["device_traces"][0]])
        self.write(two, "two.pickle")
        a, b, c = (os.path.join(self.dir, n) for n in ("a/snap.pickle", "b/snap.pickle", "two.pickle"))
        g = os.path.join(ROOT, "scripts", "gmlake")
        plot = os.path.join(self.dir, "p.svg")
        p = run(g, "replay", "--json", "--policy", "pytorch", "--plot", plot, "--label", "A", a,
                "--label=B", b, "-l", "C", c, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual([json.loads(l)["trace"] for l in p.stdout.splitlines()],
                         ["A", "B", "C (device 0)", "C (device 1)"])
        self.assertEqual(sorted(f for f in os.listdir(self.dir) if f.endswith(".svg")),
                         ["p.A.svg", "p.B.svg", "p.C (device 0).svg", "p.C (device 1).svg"])
        # a label is for the trace after it only
        p = run(g, "replay", "--json", "--policy", "pytorch", "--lab", "A", a, b)
        self.assertEqual([json.loads(l)["trace"] for l in p.stdout.splitlines()], ["A", "snap.pickle"])

    def test_gmlake_replay_set_takes_a_value_not_a_trace(self):
        # `--set KEY=VALUE` without a trace replays the bundled trace (the old front end took
        # KEY=VALUE for a trace and printed the usage)
        p = run(os.path.join(ROOT, "scripts", "gmlake"), "replay", "--json", "--set", "stitch=off")
        d = json.loads(p.stdout.splitlines()[0])
        self.assertEqual((d["trace"], d["stitches"]), ("mixtral_moe.trace.gz", 0))


class TableAndPlot(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gmlake-plot-")
        snap = os.path.join(self.dir, "s.pickle")
        with open(snap, "wb") as f:
            pickle.dump(snapshots.scenario(), f)
        self.trace = os.path.join(self.dir, "s.trace")
        importer(snap, "-q", "-o", self.trace)

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_table_side_by_side(self):
        out = replay("--policy", "pytorch,expandable,gmlake", self.trace).stdout
        rows = {l.split()[0]: l for l in out.splitlines() if re.match(r"  (pytorch|expandable|gmlake) ", l)}
        self.assertEqual(set(rows), {"pytorch", "expandable", "gmlake"})
        self.assertIn("58.0 MiB", rows["pytorch"])
        self.assertIn("62.0 MiB", rows["expandable"])
        self.assertIn("-4.0 MiB", rows["expandable"], "saved against pytorch")
        self.assertIn("saved vs pytorch", out)

    def test_table_and_json_count_the_same_device_calls(self):
        # The JSON's device_calls_total left out the pool's first reservation of address space,
        # which its own device_calls (and the table's column and breakdown) count: 5522 against
        # 5523 on the bundled trace.
        pols = "pytorch,expandable,gmlake,no-stitch"
        for args in ([self.trace], [os.path.join(ROOT, "bench", "traces", "mixtral_moe.trace.gz")]):
            j = {d["policy"]: d for d in map(json.loads, replay("--json", "--policy", pols, *args)
                                                           .stdout.splitlines())}
            out = replay("--policy", pols, *args).stdout
            cols = next(l for l in out.splitlines() if l.startswith("  policy "))
            at = cols.index("device calls") + len("device calls")
            for name, d in j.items():
                row = next(l for l in out.splitlines() if l.startswith(f"  {name} "))
                table = int(row[:at].split()[-1])
                self.assertEqual(d["device_calls_total"], sum(d["device_calls"].values()), name)
                self.assertEqual(d["device_calls_total"], table, (name, row))
                self.assertLessEqual(d["device_calls_second_half"], d["device_calls_total"], name)

    def test_plot_structure(self):
        svg = os.path.join(self.dir, "p.svg")
        replay("--policy", "pytorch,expandable,gmlake", "--plot", svg, self.trace)
        root = ET.parse(svg).getroot()  # well-formed XML
        self.assertEqual(root.tag, SVG + "svg")
        groups = [g for g in root.iter(SVG + "g") if g.get("class") == "policy"]
        self.assertEqual([g.get("data-policy") for g in groups], ["pytorch", "expandable", "gmlake"])
        h = float(root.get("height"))
        for g in groups:
            lines = {p.get("class"): p for p in g.iter(SVG + "polyline")}
            self.assertEqual(set(lines), {"reserved", "active"})
            for p in lines.values():
                pts = [tuple(map(float, xy.split(","))) for xy in p.get("points").split()]
                self.assertEqual(len(pts), len(events(self.trace)))
                self.assertTrue(all(0 <= y <= h for _, y in pts))
            peaks = [c for c in g.iter(SVG + "circle") if c.get("class") == "peak-reserved"]
            self.assertEqual(len(peaks), 1)
            title = peaks[0].find(SVG + "title").text
            self.assertIn("peak reserved", title)
            # the marker sits on the top of its reserved line
            top = min(y for _, y in (tuple(map(float, xy.split(","))) for xy in
                                     lines["reserved"].get("points").split()))
            self.assertAlmostEqual(float(peaks[0].get("cy")), top, delta=0.11)
        names = {g.get("data-policy"): g for g in groups}
        t = names["pytorch"].find(SVG + "circle").find(SVG + "title").text
        self.assertEqual(t, "pytorch peak reserved 58 MiB")
        # several traces: one file each (the same trace twice needs a --label: one NAME each)
        replay("--policy", "pytorch", "--plot", os.path.join(self.dir, "m.svg"), self.trace,
               "--label", "t", self.trace)
        self.assertTrue(os.path.exists(os.path.join(self.dir, "m.s.svg")))
        self.assertTrue(os.path.exists(os.path.join(self.dir, "m.t.svg")))

    @unittest.skipUnless(shutil.which("chromium") or shutil.which("chromium-browser"), "no chromium")
    def test_plot_renders_in_a_browser(self):
        svg = os.path.join(self.dir, "p.svg")
        png = os.path.join(self.dir, "p.png")
        replay("--policy", "pytorch,expandable", "--plot", svg, self.trace)
        run(os.path.join(ROOT, "scripts", "render-plot"), svg, png)
        with open(png, "rb") as f:
            data = f.read()
        self.assertTrue(data.startswith(b"\x89PNG"))
        self.assertGreater(len(data), 10000, "a chart, not a blank page")


class Fixtures(unittest.TestCase):
    """Snapshots recorded on an H200 by tests/gpu/record_snapshot.py, with and without
    expandable_segments (tests/tools/fixtures: NAME.pickle.gz and what PyTorch measured,
    NAME.stats.json)."""

    def test_real_snapshots_import_and_replay(self):
        fdir = os.path.join(HERE, "fixtures")
        snaps = sorted(f for f in os.listdir(fdir) if f.endswith(".pickle.gz")) if os.path.isdir(fdir) else []
        if not snaps:
            self.skipTest("no recorded snapshots in tests/tools/fixtures")
        tmp = tempfile.mkdtemp(prefix="gmlake-fix-")
        try:
            for s in snaps:
                out = os.path.join(tmp, s + ".trace")
                importer(os.path.join(fdir, s), "-q", "-o", out)
                h = "\n".join(header(out))
                self.assertIn("expandable_segments " + ("True" if "expandable" in s else "False"), h)
                # what the importer reconstructs of PyTorch's reserved bytes over the window is
                # what torch.cuda.memory_stats() said (peaks reset when recording started)
                stats = os.path.join(fdir, s.replace(".pickle.gz", ".stats.json"))
                with open(stats) as f:
                    st = json.load(f)["at_dump"]
                self.assertIn(f"peak {st['reserved_bytes.all.peak']}, at the snapshot "
                              f"{st['reserved_bytes.all.current']}", h)
                r = replay_json("--check", "100", "--policy", "pytorch,expandable,gmlake", out)
                for (_, pol), d in r.items():
                    self.assertEqual(d["failed_allocations"], 0, pol)
                    self.assertGreater(d["allocations"], 1000, pol)
                # the model of the allocator that recorded the snapshot reserves what it did
                # (docs/MODELS.md: exact on both recordings)
                pol = "expandable" if "expandable" in s else "pytorch"
                self.assertEqual(r[(s + ".trace", pol)]["peak_reserved_bytes"],
                                 st["reserved_bytes.all.peak"], s)
        finally:
            shutil.rmtree(tmp)


def limited_run(limit_bytes, *args):
    """Runs args with files limited to limit_bytes (RLIMIT_FSIZE, SIGXFSZ ignored): a write past
    it fails with EFBIG, as on a full disk."""
    def pre():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300,
                          preexec_fn=pre)


class ReplayCommandLine(unittest.TestCase):
    """Issue 23: every answer right or refused clearly, nothing half written."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="gmlake-cli-")
        self.trace = os.path.join(ROOT, "bench", "traces", "mixtral_moe.trace.gz")

    def tearDown(self):
        shutil.rmtree(self.dir)

    def test_default_policies_with_or_without_a_trace(self):
        for args in ([os.path.join(TOOLS, "gmlake-replay"), self.trace],
                     [os.path.join(ROOT, "scripts", "gmlake"), "replay", self.trace],
                     [os.path.join(ROOT, "scripts", "gmlake"), "replay"]):
            p = run(*args, "--json")
            self.assertEqual([json.loads(l)["policy"] for l in p.stdout.splitlines()],
                             ["pytorch", "expandable", "gmlake"], args)

    def test_every_option_value_is_a_value_not_a_trace(self):
        # gmlake replay adds the bundled trace where none is given, so it must know which
        # arguments are option values: `--gpu-lag 0` used to take 0 for a trace (usage, exit 2).
        # Every option of gmlake-replay's usage line that takes a value, its short form, the
        # --opt=value form and an abbreviation getopt_long accepts.
        usage = run(os.path.join(TOOLS, "gmlake-replay"), "--help").stdout.split("TRACE")[0]
        opts = re.findall(r"\[(--[a-z-]+) [^]]+\]", usage)
        values = {"--policy": "pytorch", "--capacity": "140GiB", "--check": "100000000",
                  "--set": "stitch=on", "--plot": os.path.join(self.dir, "p.svg"),
                  "--label": "NAME", "--gpu-lag": "0"}
        short = {"--policy": "-p", "--capacity": "-c", "--check": "-k", "--set": "-s",
                 "--plot": "-o", "--label": "-l", "--gpu-lag": "-g"}
        self.assertEqual(sorted(opts), sorted(values), "a value for every option of the usage")
        g = os.path.join(ROOT, "scripts", "gmlake")
        forms = [[o, values[o]] for o in opts] + [[short[o], values[o]] for o in opts]
        forms += [[o + "=" + values[o]] for o in opts] + [["--gpu", "0"], ["--lab", "NAME"]]
        for form in forms:
            p = run(g, "replay", "--json", "--policy", "pytorch", *form, check=False)
            self.assertEqual(p.returncode, 0, (form, p.stderr))
            self.assertEqual([json.loads(l)["policy"] for l in p.stdout.splitlines()],
                             ["pytorch"], form)
        # after --, every argument is a trace, even one that looks like an option
        t = os.path.join(self.dir, "-x.trace")
        shutil.copy(self.trace, t)
        p = run(g, "replay", "--json", "--policy", "pytorch", "--", t, check=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["trace"], "-x.trace")

    def test_json_escapes_the_file_name(self):
        name = os.path.join(self.dir, 'a"b\\c\td.trace.gz')
        shutil.copy(self.trace, name)
        p = replay("--json", "--policy", "pytorch", name)
        self.assertEqual(json.loads(p.stdout)["trace"], os.path.basename(name))

    def test_a_policy_whose_allocations_failed_saves_nothing(self):
        p = replay("--json", "--set", "memory_limit=2MiB", self.trace, check=False)
        self.assertEqual(p.returncode, 1)
        r = {d["policy"]: d for d in map(json.loads, p.stdout.splitlines())}
        self.assertGreater(r["gmlake"]["failed_allocations"], 0)
        self.assertIs(r["gmlake"]["complete"], False)
        self.assertIsNone(r["gmlake"]["saved_vs_pytorch_bytes"])
        self.assertIs(r["pytorch"]["complete"], True)
        self.assertIn("gmlake", p.stderr)
        self.assertIn("failed", p.stderr)
        p = replay("--set", "memory_limit=2MiB", self.trace, check=False)
        row = [l for l in p.stdout.splitlines() if l.startswith("  gmlake ")][0]
        self.assertEqual(row.split("%")[1].split()[0], "FAILED", row)
        self.assertEqual(p.returncode, 1)

    def test_numbers_and_missing_values_are_refused_clearly(self):
        cases = [
            (["--check", "99999999999999999999", self.trace], "--check '99999999999999999999' is out of range"),
            (["--check", "-3", self.trace], "--check '-3' is not a positive"),
            (["--gpu-lag", "-5", self.trace], "--gpu-lag '-5' is not a whole number of microseconds"),
            (["--gpu-lag", "1e3", self.trace], "--gpu-lag '1e3' is not a whole number of microseconds"),
            (["--gpu-lag", "3600000001", self.trace], "from 0 to 3600000000"),
            (["--gpu-lag"], "--gpu-lag needs a value"),
            (["--capacity"], "--capacity needs a value"),
            (["--capacity", "16000000TiB", self.trace], "too large: at most 16TiB"),
            # the parser's own reason, not a generic line
            (["--capacity", "16EiB", self.trace], "--capacity '16EiB' is not valid (not a size: unknown unit"),
            (["--capacity", "-4GiB", self.trace], "--capacity '-4GiB' is not valid (negative)"),
            (["--capacity", "1MiB", self.trace], "--capacity '1MiB' is below one chunk (2MiB)"),
            (["--plot", os.path.join(self.dir, "p.png"), self.trace], "name a file ending in .svg"),
        ]
        for args, want in cases:
            p = replay(*args, check=False)
            self.assertEqual(p.returncode, 2, (args, p.stderr))
            self.assertIn(want, p.stderr, args)
            self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "p.png")))
        p = run(os.path.join(ROOT, "scripts", "gmlake"), "replay", "--capacity", check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--capacity needs a value", p.stderr)
        self.assertNotIn("mixtral", p.stderr)

    def test_plot_says_where_and_is_never_half_written(self):
        svg = os.path.join(self.dir, "p.svg")
        p = replay("--policy", "pytorch", "--plot", svg, self.trace)
        self.assertIn(f"plot written to {svg}", p.stderr)
        with open(svg, "w") as f:
            f.write("precious")
        p = limited_run(4096, os.path.join(TOOLS, "gmlake-replay"), "--policy", "pytorch",
                        "--plot", svg, self.trace)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("write failed", p.stderr)
        with open(svg) as f:
            self.assertEqual(f.read(), "precious", "the old plot is left whole")
        self.assertEqual(os.listdir(self.dir), ["p.svg"], "no temporary file left behind")

    def test_a_snapshot_is_reported_under_the_name_given(self):
        native = os.path.join(ROOT, "tests", "tools", "fixtures", "native.pickle.gz")
        p = run(os.path.join(ROOT, "scripts", "gmlake"), "replay", "--json", "--policy", "pytorch", native)
        self.assertEqual(json.loads(p.stdout)["trace"], "native.pickle.gz")
        p = run(os.path.join(ROOT, "scripts", "gmlake"), "replay", "--policy", "pytorch", native)
        self.assertTrue(p.stdout.startswith("native.pickle.gz: "), p.stdout)


MEASURED = {  # ../shared/traces/README.md: what PyTorch reserved on the GPU (MiB)
    "gpt2_ckpt_varlen": {"pytorch": 14454, "expandable": 11732},
    "llama_lora_ckpt": {"pytorch": 8926, "expandable": 6206},
    "mixtral_moe": {"pytorch": 26644, "expandable": 23098},
}


class SharedTraces(unittest.TestCase):
    def test_models_within_3_percent_of_the_gpu(self):
        # the repository keeps mixtral_moe's trace (bench/traces, the shared file's copy): it always
        # runs; the other two where ../shared is beside the worktree (this test used to skip itself
        # whole without ../shared, so it never ran on a clone or in CI)
        d = os.path.join(ROOT, "..", "shared", "traces")
        names = ["mixtral_moe"] + [n for n in MEASURED if n != "mixtral_moe"
                                   and os.path.isfile(os.path.join(d, n + ".trace.gz"))]
        paths = [os.path.join(ROOT, "bench", "traces", "mixtral_moe.trace.gz")] + \
                [os.path.join(d, n + ".trace.gz") for n in names[1:]]
        r = replay_json("--policy", "pytorch,expandable", *paths)
        for name in names:
            want = MEASURED[name]
            for pol, mib in want.items():
                got = r[(name + ".trace.gz", pol)]["peak_reserved_bytes"] / (1 << 20)
                self.assertLessEqual(abs(got - mib) / mib, 0.03, f"{name} {pol}: {got:.0f} vs {mib} MiB")


if __name__ == "__main__":
    ROOT, TOOLS = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=[sys.argv[0], "-v"])
