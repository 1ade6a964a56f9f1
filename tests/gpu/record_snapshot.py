"""Records a small PyTorch memory snapshot for the snapshot importer's test fixtures.

Usage (on a GPU machine):
    python3 tests/gpu/record_snapshot.py OUT.pickle                       # native caching allocator
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True \
        python3 tests/gpu/record_snapshot.py OUT.pickle                   # expandable segments

A small transformer is built and takes two warm-up steps *before* recording starts, so that its
weights and optimizer state are live before the ring buffer's first event (the importer must
reconstruct them from the snapshot's segments). Then STEPS training steps are recorded with
`torch.cuda.memory._record_memory_history(context=None, max_entries=MAX_ENTRIES)` (no stack
traces: the file stays small) and the snapshot is dumped to OUT.pickle. What PyTorch itself
measured (memory_stats peaks over the recorded steps, the allocator settings) goes to
OUT.stats.json, so that replaying the fixture can be checked against the real figures.
"""
import json, os, sys
import torch

from tiny_transformer import build, train_step

if len(sys.argv) != 2:
    sys.exit("usage: record_snapshot.py OUT.pickle")
out = sys.argv[1]
steps = int(os.environ.get("STEPS", "6"))
max_entries = int(os.environ.get("MAX_ENTRIES", "20000"))

dev = "cuda"
model, opt, g = build(num_layers=2, dev=dev)
side = torch.cuda.Stream()


def step(i):
    seq = 64 + 96 * (i % 4)  # varying length: requests of every size class, fragmentation
    keep = {}  # the step's tensors live until it returns, across the side-stream work
    loss = train_step(model, opt, g, seq, keep, dev)
    # some work on a second stream, so that the snapshot has two per-stream pools
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        t = torch.empty(300_000 + 50_000 * i, device=dev)
        t.fill_(1.0)
        del t
    torch.cuda.current_stream().wait_stream(side)
    return loss.item()


for i in range(2):  # warm-up, not recorded
    step(i)
torch.cuda.synchronize()
torch.cuda.reset_peak_memory_stats()
before = torch.cuda.memory_stats()
torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python", max_entries=max_entries)
losses = [step(i) for i in range(2, 2 + steps)]
torch.cuda.synchronize()
torch.cuda.memory._dump_snapshot(out)
torch.cuda.memory._record_memory_history(enabled=None)
ms = torch.cuda.memory_stats()
keys = ("allocated_bytes.all.current", "allocated_bytes.all.peak", "reserved_bytes.all.current",
        "reserved_bytes.all.peak", "requested_bytes.all.peak", "num_alloc_retries", "num_device_alloc",
        "num_device_free")
stats = {"torch": torch.__version__, "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
         "steps": steps, "max_entries": max_entries, "losses": losses,
         "at_record_start": {k: before.get(k) for k in keys}, "at_dump": {k: ms.get(k) for k in keys}}
with open(out + ".stats.json", "w") as f:
    json.dump(stats, f, indent=1)
print(json.dumps(stats))
print(f"{out}: {os.path.getsize(out)} bytes")
