"""A training loop that gives the cache back every step (torch.cuda.empty_cache() after each
optimizer step, as scripts and Trainer's torch_empty_cache_steps=1 do), under the allocator the
environment chose (docs/BENCHMARKS.md, "empty_cache every step"): an 8-layer transformer encoder
(1024 wide, 16 heads, 4096 feed-forward), batch 16, sequence 128..512 varying, bf16 autocast,
AdamW, STEPS (20) steps.  Prints `ok median step S (steps 4..) first4 S reserved_now N MiB loss L
torch_peak_reserved N MiB` (torch.cuda.max_memory_reserved(): PyTorch's own allocators' peak).

    [LD_PRELOAD=build/interpose/libgmlake.so] [PYTORCH_CUDA_ALLOC_CONF=...] python3 bench/gpu/empty_cache_bench.py
"""
import os, time

import torch
import torch.nn as nn

torch.manual_seed(0)
m = nn.Sequential(*[nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True) for _ in range(8)]).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
ts = []
for step in range(int(os.environ.get("STEPS", "20"))):
    t0 = time.monotonic()
    x = torch.randn(16, 128 * (1 + step % 4), 1024, device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = m(x).float().pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    ts.append(time.monotonic() - t0)
rest = sorted(ts[4:])
print("ok median step %.4f first4 %.3f reserved_now %d MiB loss %.6f torch_peak_reserved %d MiB"
      % (rest[len(rest) // 2], sum(ts[:4]), torch.cuda.memory_reserved() >> 20, float(loss.detach()),
         torch.cuda.max_memory_reserved() >> 20), flush=True)
