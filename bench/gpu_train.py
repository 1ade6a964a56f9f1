"""GPU workload benchmark: GPT-2 style training (transformers, random weights, bf16 autocast,
AdamW, activation checkpointing, sequence length varying per step) under one allocator setting.
Prints one JSON line: allocator, peak allocated / reserved bytes, utilization, seconds per
iteration (median of the timed iterations).  Run it through bench/gpu_bench.sh, which starts one
process per allocator."""
import json, os, statistics, sys, time
import torch
from transformers import GPT2Config, GPT2LMHeadModel

name = sys.argv[1]
layers, width, batch = int(os.environ.get("LAYERS", "24")), int(os.environ.get("WIDTH", "1024")), 8
torch.manual_seed(0)
cfg = GPT2Config(n_layer=layers, n_embd=width, n_head=16, n_positions=1024, vocab_size=50257)
model = GPT2LMHeadModel(cfg).cuda()
model.gradient_checkpointing_enable()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
lengths = [128, 1024, 512, 768, 256, 896, 384, 640]
times = []
steps = int(os.environ.get("STEPS", "17"))
for step in range(steps):
    seq = lengths[step % len(lengths)]
    x = torch.randint(0, 50257, (batch, seq), device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    if step >= 2:
        times.append(time.perf_counter() - t0)
alloc, res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
print(json.dumps({"allocator": name, "peak_allocated": alloc, "peak_reserved": res,
                  "utilization": alloc / res if res else 0, "s_per_iter": statistics.median(times),
                  "loss": float(loss)}))
