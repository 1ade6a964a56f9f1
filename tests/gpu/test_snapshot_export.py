"""gmlake's equivalent of PyTorch's memory snapshots (issue 20): a tiny model trained a few steps
under libgmlake with trace_file set, its trace exported with gmlake.export_snapshot, and the
snapshot opened with torch.cuda._memory_viz; its allocations match what gmlake.stats() counted in
the job.  Skipped where no GPU is present.  LIBGMLAKE names the library (default: build/).

    LIBGMLAKE=$PWD/build/interpose/libgmlake.so python3 -m pytest -q tests/gpu/test_snapshot_export.py
"""
import json, os, pickle, subprocess, sys
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_gpu import LIB as _LIB, have_gpu  # noqa: E402  (one definition of both)
from test_pytorch_route import clean_env  # noqa: E402  (the environment of a user who set nothing)

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
LIB = os.path.abspath(_LIB)
sys.path.insert(0, os.path.join(ROOT, "python"))
import gmlake  # noqa: E402  (export_snapshot needs no GPU and no libgmlake in this process)

pytestmark = pytest.mark.skipif(not have_gpu(), reason="no GPU")

# The job: a few training steps of varying length, then gmlake's figures, read once the device is
# idle; os._exit keeps interpreter teardown from freeing tensors after they were read (the trace
# is written a whole line per event as it happens, so nothing is lost).
JOB = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import torch, gmlake
from tiny_transformer import build, train_step
assert gmlake.enabled(), "libgmlake is not loaded"
model, opt, g = build(num_layers=2)
keep = {}
for step in range(4):
    train_step(model, opt, g, 64 + 32 * (step % 2), keep)
torch.cuda.synchronize()
s = gmlake.stats(0)
print(json.dumps({k: s[k] for k in ("allocations", "frees", "live_allocations", "active_bytes")}),
      flush=True)
os._exit(0)
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("snapshot")
    trace = d / "job.trace"
    env = clean_env(LD_PRELOAD=LIB, GMLAKE_TRACE_FILE=str(trace))
    p = subprocess.run([sys.executable, "-c", JOB, HERE], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    stats = json.loads(p.stdout.strip().splitlines()[-1])
    snap_path = d / "job.pickle"
    summary = gmlake.export_snapshot(str(trace), str(snap_path))
    with open(snap_path, "rb") as f:
        snap = pickle.load(f)
    return stats, summary, snap, snap_path


def test_snapshot_counts_match_gmlake_stats(exported):
    stats, summary, snap, _ = exported
    assert stats["allocations"] > 100, stats  # PyTorch's tensors reached gmlake
    trace = snap["device_traces"][0]
    assert sum(e["action"] == "alloc" for e in trace) == stats["allocations"] == summary["allocations"]
    assert sum(e["action"] == "free_completed" for e in trace) == stats["frees"]
    assert len(snap["segments"]) == stats["live_allocations"]
    assert sum(s["total_size"] for s in snap["segments"]) == stats["active_bytes"]
    assert snap["allocator_settings"]["allocator"] == "gmlake"


def test_pytorch_memory_viz_opens_it(exported, tmp_path):
    from torch.cuda import _memory_viz as mv
    _, _, snap, snap_path = exported
    for html in (mv.trace_plot(snap), mv.trace_plot(snap, plot_segments=True), mv.segment_plot(snap)):
        assert "MemoryViz.js" in html and "snapshot.pickle" in html
    assert "segments: %d" % len(snap["segments"]) in mv.segsum(snap)
    assert "Device 0" in mv.trace(snap)
    for cmd in ("trace_plot", "segment_plot"):
        out = tmp_path / (cmd + ".html")
        p = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", cmd, str(snap_path),
                            "-o", str(out)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
        assert "MemoryViz.js" in out.read_text()
