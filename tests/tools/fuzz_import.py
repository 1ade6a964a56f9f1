"""A bounded mutation fuzz of the snapshot importer (tools/gmlake_import_snapshot.py): a few
hundred snapshots mutated from a fixed seed, from the fixtures (tests/tools/fixtures/*.pickle.gz)
and the synthetic scenario (snapshots.py), both as structures (fields replaced by values of
other types, negative, zero, huge, nested) and as bytes (the pickle or its gzip flipped, cut,
extended).  Each must exit 0 or 2, with a one-line message on an error, never a traceback or a
hang (10 s each).

Usage: fuzz_import.py SOURCE_ROOT BUILD_TOOLS_DIR [CASES]
"""
import contextlib
import copy
import glob
import gzip
import importlib.machinery
import importlib.util
import io
import os
import pickle
import random
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import snapshots  # noqa: E402

WEIRD = [None, True, -1, 0, 1, -(1 << 70), 1 << 64, (1 << 64) - 1, 1.5, "x", "0x10", b"\x00",
         [], {}, [1, 2], {"a": 1}, [[[[]]]], "alloc", "free_completed", "segment_alloc"]


def load_importer(tools):
    path = os.path.join(tools, "gmlake-import-snapshot")
    loader = importlib.machinery.SourceFileLoader("importer", path)
    spec = importlib.util.spec_from_loader("importer", loader)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def nodes(obj, path=()):
    """(container, key) of every value in obj."""
    if isinstance(obj, dict):
        for k in list(obj):
            yield obj, k
            yield from nodes(obj[k], path + (k,))
    elif isinstance(obj, list):
        for i in range(len(obj)):
            yield obj, i
            yield from nodes(obj[i], path + (i,))


def mutate_structure(rng, snap):
    s = copy.deepcopy(snap)
    places = list(nodes(s))
    for _ in range(rng.randint(1, 3)):
        if not places:
            break
        c, k = rng.choice(places)
        r = rng.random()
        if r < 0.6:
            c[k] = copy.deepcopy(rng.choice(WEIRD))
        elif r < 0.75 and isinstance(c[k], int) and not isinstance(c[k], bool):
            c[k] = rng.choice([-c[k], c[k] + (1 << 64), 0, c[k] ^ 1])
        elif r < 0.85:
            deep = []
            for _ in range(rng.choice([10, 1000, 50000])):
                deep = [deep]
            c[k] = deep
        elif isinstance(c, list):
            c.insert(k, copy.deepcopy(c[k]))  # a duplicated entry
        else:
            del c[k]
    return s


def mutate_bytes(rng, data):
    b = bytearray(data)
    r = rng.random()
    if r < 0.4:
        for _ in range(rng.randint(1, 8)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
    elif r < 0.7:
        b = b[:rng.randrange(len(b) + 1)]
    else:
        b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(b)


class Hang(Exception):
    pass


def main():
    root, tools = sys.argv[1], sys.argv[2]
    cases = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    imp = load_importer(tools)
    rng = random.Random(23)
    seeds = []
    for f in sorted(glob.glob(os.path.join(root, "tests", "tools", "fixtures", "*.pickle.gz"))):
        with gzip.open(f, "rb") as g:
            seeds.append(pickle.loads(g.read()))
    seeds += [snapshots.scenario(False), snapshots.scenario(True)]

    def on_alarm(signum, frame):
        raise Hang()
    signal.signal(signal.SIGALRM, on_alarm)
    failures = []
    outcomes = {0: 0, 2: 0}

    def traces_written(d, stem):
        """The traces a conversion wrote (one, or one per device), each a header and events."""
        got = sorted(glob.glob(os.path.join(d, stem + ".trace")) +
                     glob.glob(os.path.join(d, stem + ".dev*.trace")))
        ok = bool(got)
        for t in got:
            with open(t) as f:
                lines = f.read().splitlines()
            ok = ok and bool(lines) and lines[0].startswith("# gmlake-trace v1") and any(
                l[:2] in ("A ", "F ") for l in lines)
        return ok

    with tempfile.TemporaryDirectory(prefix="gmlake-fuzz-import-") as d:
        # the seeds themselves convert, each into traces with events: an importer that refuses
        # (or writes nothing for) every snapshot would pass the fuzz below
        for k, snap in enumerate(seeds):
            path = os.path.join(d, f"seed{k}.pickle")
            with open(path, "wb") as f:
                f.write(pickle.dumps(snap))
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                rc = imp.main([path, "-q", "-o", os.path.join(d, f"seed{k}.trace")])
            if rc != 0 or not traces_written(d, f"seed{k}"):
                failures.append(f"seed {k}: not converted (exit status {rc}, {err.getvalue()!r})")
        for i in range(cases):
            snap = rng.choice(seeds)
            kind = rng.random()
            try:
                raw = pickle.dumps(mutate_structure(rng, snap) if kind < 0.6 else snap)
            except RecursionError:
                raw = pickle.dumps(snap)
            if kind >= 0.6 or rng.random() < 0.3:
                raw = gzip.compress(raw, mtime=0) if rng.random() < 0.5 else raw
                raw = mutate_bytes(rng, raw)
            path = os.path.join(d, f"case{i}.pickle")
            with open(path, "wb") as f:
                f.write(raw)
            out = os.path.join(d, f"case{i}.trace")
            err = io.StringIO()
            signal.alarm(10)
            try:
                with contextlib.redirect_stderr(err):
                    rc = imp.main([path, "-q", "-o", out])
                exc = None
            except Hang:
                rc, exc = None, "hang (more than 10 s)"
            except BaseException as e:  # noqa: BLE001 -- a traceback is the failure we look for
                rc, exc = None, f"{type(e).__name__}: {e}"
            finally:
                signal.alarm(0)
            msg = err.getvalue()
            bad = exc or (rc not in (0, 2) and f"exit status {rc}") or (
                rc == 2 and (msg.count("\n") != 1 or "Traceback" in msg) and f"message {msg!r}")
            if bad:
                keep = os.path.join(tempfile.gettempdir(), f"gmlake-fuzz-import-{i}.pickle")
                with open(keep, "wb") as f:
                    f.write(raw)
                failures.append(f"case {i}: {bad} (input kept in {keep})")
            elif rc == 0 and not traces_written(d, f"case{i}"):
                failures.append(f"case {i}: exit status 0 but no trace with events written")
            else:
                outcomes[rc] += 1
            for f in glob.glob(os.path.join(d, f"case{i}*")):
                os.unlink(f)
    print(f"{cases} mutated snapshots: {outcomes[0]} converted, {outcomes[2]} refused with one line")
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
