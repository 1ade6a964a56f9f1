"""graphs_many.py — many CUDA graphs in one graph pool, as inference servers capture their decode
step once per batch size (vLLM's pattern): what each allocator holds for them.

An MLP block (hidden H, 4 x wider inside, bf16, no grad) is captured once per batch size, the
largest first, every capture in one pool (torch.cuda.graph_pool_handle()), each graph's input and
output kept for replays; then every graph is replayed and checked against eager.  Prints one JSON
line: the NVML peak above the baseline (bench/gpu/train.py's NvmlPeak), torch's peak reserved,
and, under gmlake, its pool's peak reserved and active.

    python3 bench/gpu/graphs_many.py --allocator NAME [--hidden 8192] [--batches 4096,3584,...]
                                     [--share handle|first] [--layers L [--seq S]]

--layers L: instead of the MLP block, a decoder of L pre-norm layers (attention over S tokens
with scaled_dot_product_attention, 4 x MLP), about a dozen allocations a layer, so that a capture
makes hundreds: what a server's decode graph looks like to the allocator.  The JSON line also
gives the wall time of the captures (all of them, and the slowest), which grows with the graphs
already captured where an allocator's search does.

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
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import NvmlPeak  # noqa: E402
import gmlake  # noqa: E402  (train.py put the repository's python/ on the path)


class Layer(torch.nn.Module):
    """A pre-norm decoder layer: attention (heads of 64) and a 4 x MLP, residual around each."""

    def __init__(self, h):
        super().__init__()
        self.n1, self.n2 = torch.nn.LayerNorm(h), torch.nn.LayerNorm(h)
        self.qkv, self.out = torch.nn.Linear(h, 3 * h), torch.nn.Linear(h, h)
        self.up, self.down = torch.nn.Linear(h, 4 * h), torch.nn.Linear(4 * h, h)
        self.heads = max(1, h // 64)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, s, 3, self.heads, h // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, h))
        return x + self.down(torch.nn.functional.gelu(self.up(self.n2(x))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocator", required=True)
    ap.add_argument("--hidden", type=int, default=8192)
    ap.add_argument("--batches", default=",".join(str(b) for b in range(4096, 0, -512)))
    ap.add_argument("--share", choices=("handle", "first"), default="handle")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--seq", type=int, default=16)
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    nvml = NvmlPeak()
    dev = torch.device("cuda")
    h = a.hidden
    if a.layers:
        block = torch.nn.Sequential(*[Layer(h) for _ in range(a.layers)]).to(dev, torch.bfloat16)
        shape = lambda b: (b, a.seq, h)  # noqa: E731
    else:
        block = torch.nn.Sequential(torch.nn.Linear(h, 4 * h), torch.nn.GELU(), torch.nn.Linear(4 * h, h),
                                    torch.nn.GELU(), torch.nn.Linear(h, 4 * h), torch.nn.GELU(),
                                    torch.nn.Linear(4 * h, h)).to(dev, torch.bfloat16)
        shape = lambda b: (b, h)  # noqa: E731
    pool = torch.cuda.graph_pool_handle() if a.share == "handle" else None
    graphs = []
    with torch.no_grad():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):  # warm-up outside capture (cuBLAS workspaces, kernels)
            for b in batches:
                block(torch.zeros(shape(b), device=dev, dtype=torch.bfloat16))
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        capture_s = []
        for b in batches:
            x = torch.zeros(shape(b), device=dev, dtype=torch.bfloat16)
            g = torch.cuda.CUDAGraph()
            t0 = time.perf_counter()
            with torch.cuda.graph(g, pool=pool):
                y = block(x)
            capture_s.append(time.perf_counter() - t0)
            graphs.append((b, g, x, y))
            if pool is None:
                pool = g.pool()  # --share first: the others go into the first graph's pool
        torch.cuda.synchronize()
        bad = 0
        for b, g, x, y in graphs:
            x.copy_(torch.randn(shape(b), device=dev, dtype=torch.bfloat16))
            g.replay()
            torch.cuda.synchronize()
            bad += int(not torch.allclose(y.float(), block(x).float(), atol=0.5, rtol=0.05))
    torch.cuda.synchronize()
    nvml.close()
    out = {"allocator": a.allocator, "share": a.share, "graphs": len(graphs), "hidden": h, "batches": batches,
           "layers": a.layers, "wrong_replays": bad, "capture_s": round(sum(capture_s), 4),
           "slowest_capture_s": round(max(capture_s), 4), "last_capture_s": round(capture_s[-1], 4),
           "nvml_peak_mib": round((nvml.peak - nvml.baseline) / 2**20) if nvml.ok else None,
           "torch_peak_reserved_mib": round(torch.cuda.max_memory_reserved() / 2**20)}
    st = gmlake.stats(0)
    if st is not None:
        out["gmlake_peak_reserved_mib"] = round(st["peak_reserved_bytes"] / 2**20)
        out["gmlake_peak_active_mib"] = round(st["peak_active_bytes"] / 2**20)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
