"""bench/gpu/overhead_stages.py — NVML's used device memory above the process's start, minus what
the allocator holds, stage by stage, under each allocator (issue 22: ~68 MiB more under gmlake
than under PyTorch's allocators on every workload, whatever its size).  Run it with no argument:
it starts one child a case and prints one JSON line a case."""
import json, os, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LIB = os.path.join(ROOT, "build", "interpose", "libgmlake.so")
CASES = {
    "cudaMallocAsync": {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"},
    "expandable": {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    "gmlake": {"LD_PRELOAD": LIB},
}


def child():
    sys.path.insert(0, os.path.join(ROOT, "python"))
    sys.path.insert(0, HERE)
    from train import NvmlPeak, pool_reserved  # the benchmark's own NVML and pool readers
    import torch
    nv = NvmlPeak(period=1.0)
    start = nv.used()
    out = {}

    def stage(name):
        torch.cuda.synchronize()
        used, pool = nv.used() - start, pool_reserved()
        out[name] = {"nvml_mib": round(used / 2**20, 1), "pool_mib": round(pool / 2**20, 1),
                     "beyond_mib": round((used - pool) / 2**20, 1)}
    torch.cuda.init()
    torch.cuda.synchronize()
    stage("context")
    x = torch.empty(2**20, dtype=torch.uint8, device="cuda")
    stage("first 1 MiB tensor")
    y = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    stage("1 GiB tensor")
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    b = a @ a
    stage("bf16 matmul")
    del x, y, a, b
    stage("freed")
    nv.close()
    print(json.dumps(out))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        return child()
    for name, env in CASES.items():
        e = dict(os.environ, **env)
        r = subprocess.run([sys.executable, __file__, "--child"], env=e, capture_output=True,
                           text=True, timeout=120)
        line = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else r.stderr[-400:]
        print(json.dumps({"case": name, "rc": r.returncode, "stages": line}))


if __name__ == "__main__":
    main()
