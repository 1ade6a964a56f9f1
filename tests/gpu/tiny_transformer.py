"""The small transformer the GPU scripts train (train_torch.py, record_snapshot.py): one model
and one training step, so that both run the same code.  Imported from the scripts' directory
(python3 tests/gpu/SCRIPT.py puts it first on sys.path)."""
import torch

VOCAB, BATCH = 1000, 8


def build(num_layers, dev="cuda"):
    """Seeds torch, builds the model on dev with its AdamW optimizer and the CPU generator of the
    batches; returns (model, opt, g)."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024, batch_first=True,
                                             dropout=0.0)
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 256), torch.nn.TransformerEncoder(layer, num_layers=num_layers),
                                torch.nn.Linear(256, VOCAB)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    g = torch.Generator(device="cpu").manual_seed(1)
    return model, opt, g


def train_step(model, opt, g, seq, keep, dev="cuda"):
    """One step on a random batch of BATCH sequences of length seq; returns the loss tensor.  The
    step's tensors go into the dict `keep` (x, y, out, loss), each replacing the previous step's
    once the new one exists, so that they live exactly as long as the variables of the scripts'
    loops did before this module (the figures a script prints and the snapshot it records stay
    the same): a caller at top level keeps one dict for the run, a function one per call."""
    keep["x"] = torch.randint(0, VOCAB, (BATCH, seq), generator=g).to(dev)
    keep["y"] = torch.randint(0, VOCAB, (BATCH, seq), generator=g).to(dev)
    keep["out"] = model(keep["x"])
    keep["loss"] = torch.nn.functional.cross_entropy(keep["out"].reshape(-1, VOCAB), keep["y"].reshape(-1))
    opt.zero_grad(set_to_none=True)
    keep["loss"].backward()
    opt.step()
    return keep["loss"]
