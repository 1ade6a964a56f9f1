"""cuDNN's benchmark mode under the allocator the environment chose (docs/BENCHMARKS.md, "cuDNN's
benchmark mode"): a small convolutional net (3 convolutions, channels_last, bf16 autocast, SGD)
trained one step at each of the batch sizes 64, 32, 64, 48, with torch.backends.cudnn.benchmark
on.  Before each new convolution PyTorch benchmarks cuDNN's algorithms; under its cudaMallocAsync
backend it first probes the largest workspace it can get (about the device's free memory, halved
until an allocation succeeds).  Prints the seconds since the first step after each step, then
`ok LOSS`.  tests/gpu/torch_features.py (cudnn) and bench/gpu/probe_features.py run train().

    [LD_PRELOAD=build/interpose/libgmlake.so] [PYTORCH_CUDA_ALLOC_CONF=...] python3 bench/gpu/cudnn_bench.py
"""
import time

import torch
import torch.nn as nn


def train(batches=(64, 32, 64, 48), report=None):
    """Trains the net one step per batch size; returns (losses, seconds from the first step)."""
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3), nn.BatchNorm2d(64), nn.ReLU(), nn.Conv2d(64, 128, 3, 2, 1),
                      nn.BatchNorm2d(128), nn.ReLU(), nn.Conv2d(128, 256, 3, 2, 1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)).cuda()
    m = m.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    t0 = time.monotonic()
    losses = []
    for bs in batches:  # a new shape: cuDNN benchmarks each convolution again
        x = torch.randn(bs, 3, 224, 224, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 10, (bs,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(m(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        losses.append(float(loss.detach()))
        if report:
            report(bs, time.monotonic() - t0)
    return losses, time.monotonic() - t0


if __name__ == "__main__":
    losses, _ = train(report=lambda bs, t: print("bs", bs, "t", round(t, 2), flush=True))
    print("ok", losses[-1], "cudnn", torch.backends.cudnn.version(), flush=True)
