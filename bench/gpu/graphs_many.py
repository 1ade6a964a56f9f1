"""graphs_many.py — many CUDA graphs in one graph pool, as inference servers capture their decode
step once per batch size (vLLM's pattern): what each allocator holds for them.

An MLP block (hidden H, 4 x wider inside, bf16, no grad) is captured once per batch size, the
largest first, every capture in one pool (torch.cuda.graph_pool_handle()), each graph's input and
output kept for replays; then every graph is replayed and checked against eager.  Prints one JSON
line: the NVML peak above the baseline (bench/gpu/train.py's NvmlPeak), torch's peak reserved,
and, under gmlake, its pool's peak reserved and active.

    python3 bench/gpu/graphs_many.py --allocator NAME [--hidden 8192] [--batches 4096,3584,...]
                                     [--share handle|first]

--share first: the first graph is captured without a pool and the others into its pool
(graph.pool()), PyTorch's documented way of sharing; handle (the default): all into
torch.cuda.graph_pool_handle().

Run it under each allocator's environment (bench/gpu/lib.sh: alloc_env), e.g.
`env $(ALLOCATOR=...) python3 bench/gpu/graphs_many.py --allocator gmlake`.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import NvmlPeak  # noqa: E402
import gmlake  # noqa: E402  (train.py put the repository's python/ on the path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocator", required=True)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--batches", default=",".join(str(b) for b in range(4096, 0, -512)))
    ap.add_argument("--share", choices=("handle", "first"), default="handle")
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    nvml = NvmlPeak()
    dev = torch.device("cuda")
    h = a.hidden
    block = torch.nn.Sequential(torch.nn.Linear(h, 4 * h), torch.nn.GELU(), torch.nn.Linear(4 * h, h),
                                torch.nn.GELU(), torch.nn.Linear(h, 4 * h), torch.nn.GELU(),
                                torch.nn.Linear(4 * h, h)).to(dev, torch.bfloat16)
    pool = torch.cuda.graph_pool_handle() if a.share == "handle" else None
    graphs = []
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up outside capture (cuBLAS workspaces, kernels)
            for b in batches:
                block(torch.zeros(b, h, device=dev, dtype=torch.bfloat16))
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        for b in batches:
            x = torch.zeros(b, h, device=dev, dtype=torch.bfloat16)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                y = block(x)
            graphs.append((b, g, x, y))
            if pool is None:
                pool = g.pool()  # --share first: the others go into the first graph's pool
        torch.cuda.synchronize()
        bad = 0
        for b, g, x, y in graphs:
            x.copy_(torch.randn(b, h, device=dev, dtype=torch.bfloat16))
            g.replay()
            torch.cuda.synchronize()
            bad += int(not torch.allclose(y.float(), block(x).float(), atol=0.5, rtol=0.05))
    torch.cuda.synchronize()
    nvml.close()
    out = {"allocator": a.allocator, "share": a.share, "graphs": len(graphs), "hidden": h, "batches": batches,
           "wrong_replays": bad,
           "nvml_peak_mib": round((nvml.peak - nvml.baseline) / 2**20) if nvml.ok else None,
           "torch_peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20)}
    st = gmlake.stats(0)
    if st is not None:
        out["gmlake_peak_reserved_mib"] = round(st["peak_reserved_bytes"] / 2**20)
        out["gmlake_peak_active_mib"] = round(st["peak_active_bytes"] / 2**20)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
