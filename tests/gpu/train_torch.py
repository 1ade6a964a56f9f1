"""A small deterministic training loop; prints one JSON line with the losses (as float.hex) and
the memory figures PyTorch reports, plus gmlake's own when libgmlake is preloaded."""
import ctypes, json, os, sys
import torch

torch.manual_seed(0)
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
dev = "cuda"
layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True, dropout=0.0)
model = torch.nn.Sequential(torch.nn.Embedding(1000, 256), torch.nn.TransformerEncoder(layer, num_layers=4),
                            torch.nn.Linear(256, 1000)).to(dev)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
g = torch.Generator(device="cpu").manual_seed(1)
losses = []
for step in range(int(os.environ.get("STEPS", "30"))):
    seq = 64 + 32 * (step % 5)  # varying length: fragmentation
    x = torch.randint(0, 1000, (8, seq), generator=g).to(dev)
    y = torch.randint(0, 1000, (8, seq), generator=g).to(dev)
    out = model(x)
    loss = torch.nn.functional.cross_entropy(out.reshape(-1, 1000), y.reshape(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    losses.append(loss.item().hex())
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
