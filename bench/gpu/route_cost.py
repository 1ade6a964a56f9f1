"""bench/gpu/route_cost.py — what one tensor costs the host on the road into PyTorch's allocator.

One process, one allocator (the environment chooses it: bench/gpu/run_route_cost.sh launches
each).  It creates and drops CUDA tensors from Python with no kernel between them, so the time a
pair takes is the host's path through `torch.empty` and the tensor's release: Python and ATen
(the same under every allocator) plus the allocator's route (PyTorch's caching allocator, its
cudaMallocAsync backend, and beneath it CUDA's pool or gmlake).  Differences between allocators
are the routes' own cost per tensor.

Patterns (`--pattern`):
  plain     256 tensors live, sizes log-uniform 512 B-32 MiB, a random one dropped for each new one;
  recorded  the same, each tensor also handed to a side stream with `record_stream` before it is
            dropped (what DDP's and FSDP's communication and offloading do);
  polluted  plain, with 256 KiB of host memory written between two tensors (one CPU op on a
            tensor of its own), as a framework's work between allocations leaves the CPU's
            caches: every allocator pays the same op, so the differences stay the roads' own,
            now with their data out of the nearest caches, as in a training step.

Prints one JSON line: allocator, pattern, pairs, us_per_pair (median of 5 timed chunks), chunks.
Usage: python3 route_cost.py --allocator LABEL --pattern plain|recorded|polluted [--pairs N] [--seed S]
"""
import argparse
import json
import math
import random
import statistics
import sys
import time


def sizes(n, seed):
    rng = random.Random(seed)
    lo, hi = math.log(512), math.log(32 << 20)
    return [int(math.exp(rng.uniform(lo, hi))) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--allocator", required=True)
    ap.add_argument("--pattern", choices=("plain", "recorded", "polluted"), required=True)
    ap.add_argument("--pairs", type=int, default=20000)
    ap.add_argument("--live", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    if a.pairs < 5 or a.live < 1:
        sys.exit("route_cost.py: --pairs must be >= 5 and --live >= 1")
    import torch

    if not torch.cuda.is_available():
        sys.exit("route_cost.py: no CUDA device")
    dev = torch.device("cuda")
    side = torch.cuda.Stream()
    recorded = a.pattern == "recorded"
    junk = torch.zeros(64 * 1024, dtype=torch.float32) if a.pattern == "polluted" else None  # 256 KiB
    warm = max(a.live * 4, 2000)
    sz = sizes(a.live + warm + a.pairs, a.seed)
    pick = random.Random(a.seed + 1)
    live = [torch.empty(s, dtype=torch.uint8, device=dev) for s in sz[: a.live]]

    def pairs(first, count):
        for i in range(first, first + count):
            if junk is not None:
                junk.add_(1.0)
            k = pick.randrange(len(live))
            t = live[k]
            if recorded:
                t.record_stream(side)
            live[k] = torch.empty(sz[i], dtype=torch.uint8, device=dev)
            del t

    pairs(a.live, warm)
    torch.cuda.synchronize()
    chunk = a.pairs // 5
    times = []
    first = a.live + warm
    for c in range(5):
        t0 = time.perf_counter()
        pairs(first + c * chunk, chunk)
        times.append((time.perf_counter() - t0) / chunk * 1e6)
    torch.cuda.synchronize()
    print(json.dumps({"allocator": a.allocator, "pattern": a.pattern, "pairs": chunk * 5,
                      "us_per_pair": round(statistics.median(times), 3),
                      "chunks": [round(t, 3) for t in times]}))


if __name__ == "__main__":
    main()
