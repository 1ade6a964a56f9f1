"""The line a PyTorch user already types: `LD_PRELOAD=libgmlake.so python train.py`, with no
launcher and no variables, must reach gmlake and save what `gmlake run` saves; an allocation
beyond memory_limit must get gmlake's out-of-memory report; the `gmlake` Python package must read
the figures.  Skipped where no GPU is present.  LIBGMLAKE names the library (default: build/).

    LIBGMLAKE=$PWD/build/interpose/libgmlake.so python3 -m pytest -q tests/gpu/test_pytorch_route.py
"""
import json, os, subprocess, sys
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_gpu import LIB as _LIB, have_gpu  # noqa: E402  (one definition of both)

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
LIB = os.path.abspath(_LIB)
TRAIN = os.path.join(HERE, "train_torch.py")

pytestmark = pytest.mark.skipif(not have_gpu(), reason="no GPU")


def clean_env(**extra):
    """The environment of a user who set nothing: no PYTORCH_*ALLOC_CONF, no GMLAKE_*."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GMLAKE_") and k not in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF",
                                                      "LD_PRELOAD", "XLA_PYTHON_CLIENT_ALLOCATOR")}
    env.update({"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "PYTHONUNBUFFERED": "1",
                "PYTHONPATH": os.path.join(ROOT, "python")})
    env.update(extra)
    return env


def run(args, env, ok=True, timeout=600):
    p = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    if ok:
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def last_json(p):
    return json.loads(p.stdout.strip().splitlines()[-1])


def stats_lines(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def test_plain_preload_reaches_gmlake_and_saves_what_gmlake_run_saves(tmp_path):
    plain = run([sys.executable, TRAIN], clean_env(LD_PRELOAD=LIB, GMLAKE_STATS_FILE=str(tmp_path / "plain.json")))
    launched = run([os.path.join(ROOT, "scripts", "gmlake"), "run", "--set",
                    "stats_file=" + str(tmp_path / "run.json"), "--", sys.executable, TRAIN], clean_env())
    a, b = last_json(plain), last_json(launched)
    # gmlake served every tensor: hundreds of allocations, not PyTorch's few large segments
    assert "gmlake" in a, plain.stderr[-2000:]
    assert a["gmlake"]["allocations"] > 500, a["gmlake"]
    assert a["losses"] == b["losses"]
    sa, sb = stats_lines(tmp_path / "plain.json"), stats_lines(tmp_path / "run.json")
    assert len(sa) == 1 and len(sb) == 1
    assert sa[0]["allocations"] == sb[0]["allocations"]
    assert sa[0]["peak_reserved_bytes"] == sb[0]["peak_reserved_bytes"], (sa, sb)
    assert sa[0]["utilization"] > 0.5


def test_expandable_segments_is_kept_and_the_user_is_told(tmp_path):
    p = run([sys.executable, TRAIN], clean_env(LD_PRELOAD=LIB, STEPS="3",
                                               PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"))
    assert "will not reach gmlake" in p.stderr, p.stderr[-2000:]
    assert p.stderr.count("will not reach gmlake") == 1


OOM = """
import torch, gmlake
x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
try:
    y = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
    print("NO-OOM")
except torch.OutOfMemoryError:
    print("OOM")
s = gmlake.stats(0)
print("STATS", s["failed_allocations"], s["active_bytes"])
print(gmlake.memory_summary())
"""


def test_oom_report_beyond_memory_limit():
    p = run([sys.executable, "-c", OOM], clean_env(LD_PRELOAD=LIB, GMLAKE_MEMORY_LIMIT="1GiB"))
    assert "OOM" in p.stdout.splitlines(), p.stdout + p.stderr[-2000:]
    assert "out of memory: requested 2.00 GiB" in p.stderr, p.stderr[-3000:]
    assert "(memory_limit 1.00 GiB)" in p.stderr and "the device has" in p.stderr
    failed, active = next(l.split()[1:] for l in p.stdout.splitlines() if l.startswith("STATS"))
    assert int(failed) >= 1 and int(active) >= 256 << 20
    assert "gmlake memory summary, device 0" in p.stdout


def test_python_package_under_torch():
    code = ("import torch, gmlake; x = torch.ones(1 << 20, device='cuda'); "
            "s = gmlake.stats(0); print(gmlake.enabled(), s['allocations'] > 0, "
            "s['active_bytes'] >= 4 << 20, s['device_calls']['chunk_create'] > 0)")
    p = run([sys.executable, "-c", code], clean_env(LD_PRELOAD=LIB))
    assert p.stdout.split() == ["True"] * 4, p.stdout + p.stderr[-2000:]
    p = run([sys.executable, "-c", "import gmlake; print(gmlake.enabled(), gmlake.stats())"], clean_env())
    assert p.stdout.split() == ["False", "None"]
