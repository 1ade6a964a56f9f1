"""A small deterministic training loop; prints one JSON line with the losses (as float.hex) and
the memory figures PyTorch reports, plus gmlake's own when libgmlake is preloaded."""
import ctypes, json, os, sys
import torch

from tiny_transformer import build, train_step

torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
model, opt, g = build(num_layers=4)
losses = []
keep = {}  # the last step's tensors, alive after the loop as before
for step in range(int(os.environ.get("STEPS", "30"))):
    seq = 64 + 32 * (step % 5)  # varying length: fragmentation
    losses.append(train_step(model, opt, g, seq, keep).item().hex())
torch.cuda.synchronize()
ms = torch.cuda.memory_stats()
res = {"losses": losses,
       "torch": {k: ms.get(k) for k in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                                        "reserved_bytes.all.current", "reserved_bytes.all.peak")}}
try:
    lib = ctypes.CDLL(None)
    fn = lib.gmlake_get_stats
    buf = (ctypes.c_uint64 * 64)()
    if fn(0, ctypes.byref(buf)) == 0:
        res["gmlake"] = {"active": buf[0], "peak_active": buf[1], "reserved": buf[2], "peak_reserved": buf[3],
                         "allocations": buf[4], "stitches": buf[8]}
except AttributeError:
    pass
# empty_cache must reach gmlake too
torch.cuda.empty_cache()
res["reserved_after_empty_cache"] = torch.cuda.memory_reserved()
print(json.dumps(res))
