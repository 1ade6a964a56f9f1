"""One training workload under one allocator (the allocator is chosen by the environment that
bench/gpu/run_all.sh sets: PYTORCH_CUDA_ALLOC_CONF, LD_PRELOAD); appends one JSON line to --out.

Workloads (models built from configs with random weights, no downloads; bf16 autocast, AdamW):
  gpt2        GPT-2 24 x 1024, activation checkpointing, batch 8, length 128..1024 per step
  llama_lora  LLaMA-style 16 x 2048, bf16 weights, LoRA r=16 on q/k/v/o (peft), checkpointing,
              batch 4, length 256..2048 per step
  bert_varlen BERT-large MLM, batch 8..32 x length 64..512, both varying per step
  offload     GPT-2 12 x 1024 (no checkpointing), batch 8, length 256..1024, saving activations to pinned host memory (save_on_cpu) and
              prefetching the next inputs from pinned host memory on a side stream
              (record_stream): two streams
  vit         ViT-Large/16 classification, 224 px, batch 64: fixed shapes, every step the same
  kvgen       generation, not training: GPT-2-style 24 x 1024 in bf16, batch 16, prompts of
              64..512 tokens, 64 new tokens by greedy generate() (the KV cache grows each token)
  compiled    torch.compile(mode="reduce-overhead") (CUDA graphs): a GPT-style decoder of its own
              (12 x 1024, PyTorch's scaled_dot_product_attention), batch 8 x 512, fixed shapes;
              the first steps include compiling and capturing
Every workload's shape schedule is fixed (seeded), so all allocators see the same requests.

Timing: each step is synchronized; `first17` is the mean step time over steps 0..16 (growth
included), `steady` the median over the steps after WARMUP (20) warm-up steps.
Peak device memory: NVML's used memory of the device (libnvidia-ml.so.1 through ctypes, no
pynvml), polled every 5 ms by a thread.  NVML is the one figure that means the same under every
allocator: torch.cuda.mem_get_info goes through cudaMemGetInfo, which gmlake answers with its
cached memory counted as free, and torch.cuda.max_memory_reserved reads each allocator's own
books.  Allocators keep what they reserve, so the peak is a plateau that 5 ms polling sees.
"""
import argparse, contextlib, ctypes, json, os, random, statistics, sys, threading, time

import torch

WARMUP = int(os.environ.get("WARMUP", "20"))
STEADY = int(os.environ.get("STEADY", "15"))
FIRST = min(17, WARMUP + STEADY)  # steps in the "first 17" figure (all of them in a shorter run)


class NvmlPeak:
    """Polls NVML's used device memory in a thread; peak over the run and per marked phase."""

    class _Mem(ctypes.Structure):
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    def __init__(self, period=0.005, uuid=None, cuda_index=0):
        """The device: by its UUID ("GPU-..."), where given and NVML knows it; else the
        cuda_index-th entry of CUDA_VISIBLE_DEVICES when that is a number, else NVML's device
        cuda_index (the process's own CUDA device number)."""
        self.ok, self.peak, self.phase_peak, self.baseline = False, 0, {}, 0
        self.phase, self.period, self.why = None, period, ""
        try:
            self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as e:
            self.why = f"libnvidia-ml.so.1: {e}"
            return
        if self.lib.nvmlInit_v2() != 0:
            self.why = "nvmlInit_v2 failed"
            return
        self.handle = ctypes.c_void_p()
        if uuid and self.lib.nvmlDeviceGetHandleByUUID(uuid.encode(), ctypes.byref(self.handle)) == 0:
            self.index = uuid
        else:
            vis = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
            pick = vis[cuda_index] if cuda_index < len(vis) else ""
            self.index = int(pick) if pick.isdigit() else cuda_index
            if self.lib.nvmlDeviceGetHandleByIndex_v2(self.index, ctypes.byref(self.handle)) != 0:
                self.why = f"no NVML device {self.index}"
                return
        self.ok = True
        self.baseline = self.used()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def used(self):
        m = self._Mem()
        if self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(m)) != 0:
            return 0
        return m.used

    def _run(self):
        while not self.stop.is_set():
            self.sample()
            time.sleep(self.period)

    def sample(self):
        u = self.used()
        self.peak = max(self.peak, u)
        if self.phase:
            self.phase_peak[self.phase] = max(self.phase_peak.get(self.phase, 0), u)

    def mark(self, phase):
        if self.ok:
            self.sample()
            self.phase = phase
            self.sample()

    def close(self):
        if self.ok:
            self.stop.set()
            self.thread.join()
            self.sample()


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import gmlake  # noqa: E402  (the repository's package: reads the preloaded library's stats)


def pool_host_seconds(s):
    """The time gmlake's pool spent allocating and freeing (gmlake.stats' figures, its device
    calls included), or None from a library without it (an older build, gmlake@DIR)."""
    return s["host_seconds_alloc"] + s["host_seconds_free"] if "host_seconds_alloc" in s else None


def gmlake_driver():
    """gmlake's device calls on device 0 so far, the driver time they took and the time its pool
    spent allocating and freeing (pool_host_seconds), in seconds, or None when gmlake is not
    preloaded or has no pool yet."""
    s = gmlake.stats(0)
    if s is None:
        return None
    return sum(s["device_calls"].values()), s["device_seconds"], pool_host_seconds(s)


def pool_reserved():
    """What the allocator holds on device 0 now: gmlake's reserved bytes where gmlake serves
    (other libraries' cudaMalloc included), else PyTorch's own reserved (which leaves it out)."""
    g = gmlake.stats(0)
    return g["reserved_bytes"] if g is not None else torch.cuda.memory_reserved()


def on_device(build, dev):
    """Builds a module with its parameters created on the device (fast random init)."""
    try:
        with torch.device(dev):
            return build()
    except Exception:
        return build().to(dev)


def gpt2(dev, layers=24, batch=8, lengths=(128, 1024, 512, 768, 256, 896, 384, 640)):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=layers, n_embd=1024, n_head=16, n_positions=1024, vocab_size=50257)
    model = on_device(lambda: GPT2LMHeadModel(cfg), dev)
    model.gradient_checkpointing_enable()

    def data(step):
        x = torch.randint(0, cfg.vocab_size, (batch, lengths[step % len(lengths)]), device=dev)
        return {"input_ids": x, "labels": x}
    return model, data


def llama_lora(dev):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(hidden_size=2048, intermediate_size=5504, num_hidden_layers=16,
                      num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                      max_position_embeddings=2048)
    torch.set_default_dtype(torch.bfloat16)  # built in bf16: no transient fp32 copy in the peak
    try:
        model = on_device(lambda: LlamaForCausalLM(cfg), dev).to(torch.bfloat16)
    finally:
        torch.set_default_dtype(torch.float32)
    model.gradient_checkpointing_enable()
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
    lengths = [256, 2048, 1024, 1536, 512, 1792, 768, 1280]

    def data(step):
        x = torch.randint(0, cfg.vocab_size, (4, lengths[step % len(lengths)]), device=dev)
        return {"input_ids": x, "labels": x}
    return model, data


def bert_varlen(dev):
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                     intermediate_size=4096, max_position_embeddings=512, vocab_size=30522)
    model = on_device(lambda: BertForMaskedLM(cfg), dev)
    rng = random.Random(1234)
    shapes = [(rng.choice([8, 12, 16, 24, 32]), rng.choice(range(64, 513, 64))) for _ in range(1000)]

    def data(step):
        b, n = shapes[step]
        x = torch.randint(0, cfg.vocab_size, (b, n), device=dev)
        labels = torch.where(torch.rand(b, n, device=dev) < 0.15, x, torch.full_like(x, -100))
        return {"input_ids": x, "labels": labels}
    return model, data


def vit(dev, batch=64):
    """ViT-Large/16 image classification, 224 px, fixed shapes (every step the same sizes)."""
    from transformers import ViTConfig, ViTForImageClassification
    cfg = ViTConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                    intermediate_size=4096, image_size=224, patch_size=16, num_labels=1000)
    model = on_device(lambda: ViTForImageClassification(cfg), dev)

    def data(step):
        return {"pixel_values": torch.randn(batch, 3, 224, 224, device=dev),
                "labels": torch.randint(0, 1000, (batch,), device=dev)}
    return model, data


def kvgen(dev, batch=16, new_tokens=64, prompts=(384, 128, 512, 256, 448, 192, 320, 64)):
    """Generation with a growing KV cache (no training): a GPT-2-style decoder, 24 x 1024,
    generating new_tokens greedily after prompts of varying length; a step is one generate()."""
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=24, n_embd=1024, n_head=16, n_positions=1024, vocab_size=50257)
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = on_device(lambda: GPT2LMHeadModel(cfg), dev).to(torch.bfloat16).eval()
    finally:
        torch.set_default_dtype(torch.float32)

    def data(step):
        n = prompts[step % len(prompts)]
        return {"input_ids": torch.randint(0, cfg.vocab_size, (batch, n), device=dev),
                "max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False,
                "pad_token_id": 0}
    return model, data


class _Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for y in self.qkv(self.ln1(x)).split(c, 2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp(self.ln2(x))


class _Decoder(torch.nn.Module):
    def __init__(self, layers=12, d=1024, heads=16, vocab=32000, length=512):
        super().__init__()
        self.emb, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(length, d)
        self.blocks = torch.nn.ModuleList(_Block(d, heads) for _ in range(layers))
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, labels):
        x = self.emb(input_ids) + self.pos(torch.arange(input_ids.shape[1], device=input_ids.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln(x))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def compiled(dev, batch=8, length=512):
    model = on_device(_Decoder, dev)
    step_model = torch.compile(model, mode="reduce-overhead")

    def data(step):
        x = torch.randint(0, 32000, (batch, length), device=dev)
        return {"input_ids": x, "labels": x}
    return model, data, step_model


WORKLOADS = {"gpt2": gpt2, "llama_lora": llama_lora, "bert_varlen": bert_varlen, "vit": vit,
             "kvgen": kvgen, "compiled": compiled}
COMPILED = {"compiled"}  # built with a compiled step function: its output is the loss
GENERATE = {"kvgen"}  # a step is model.generate(**batch), no backward


def train(args):
    dev = "cuda"
    torch.manual_seed(0)
    nvml = NvmlPeak()
    t_start = time.perf_counter()
    offload = args.workload == "offload"
    step_model = None
    if offload:
        model, _ = gpt2(dev, layers=12)
        model.gradient_checkpointing_disable()  # every activation goes to host memory and back
    else:
        built = WORKLOADS[args.workload](dev)
        model, data = built[:2]
        step_model = built[2] if args.workload in COMPILED else None
    gen = args.workload in GENERATE
    opt = None if gen else torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    steps = WARMUP + STEADY
    if offload:
        # inputs wait in pinned host memory; the next step's are copied on a side stream while
        # this step computes, and handed to the compute stream with record_stream
        rng = random.Random(99)
        host = [torch.randint(0, 50257, (8, rng.choice([256, 512, 768, 1024]))).pin_memory()
                for _ in range(steps + 1)]
        side = torch.cuda.Stream()

        def prefetch(i):
            with torch.cuda.stream(side):
                return host[i].to(dev, non_blocking=True)
        nxt = prefetch(0)
    times, calls_at_warmup, calls_at_first17 = [], None, None
    torch.cuda.synchronize()
    nvml.mark("first17")
    calls_at_start = gmlake_driver()
    for step in range(steps):
        if step == FIRST:
            calls_at_first17 = gmlake_driver()
        if step == WARMUP:
            calls_at_warmup = gmlake_driver()
            nvml.mark("steady")
        t0 = time.perf_counter()
        if offload:
            torch.cuda.current_stream().wait_stream(side)
            x = nxt
            x.record_stream(torch.cuda.current_stream())
            nxt = prefetch(step + 1)
            batch = {"input_ids": x, "labels": x}
            ctx = torch.autograd.graph.save_on_cpu(pin_memory=True)
        else:
            batch = data(step)
            ctx = contextlib.nullcontext()
        if gen:
            with torch.no_grad():
                out = model.generate(**batch)
            loss = out.float().mean()  # the tokens, a figure comparable between runs
            del out
        else:
            if step_model is not None:
                torch.compiler.cudagraph_mark_step_begin()
            with ctx, torch.autocast("cuda", dtype=torch.bfloat16):
                loss = step_model(**batch) if step_model is not None else model(**batch).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        del batch
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    calls_end = gmlake_driver()
    if calls_at_first17 is None:  # a run of FIRST steps: they are all of it
        calls_at_first17 = calls_end
    nvml.close()
    # after the last step, nothing in flight: NVML's used memory against what the allocator holds;
    # the rest is the context's and the driver's own
    pool_end = pool_reserved()
    res = {
        "workload": args.workload, "allocator": args.allocator, "order": args.order,
        "steps": steps, "warmup": WARMUP, "first17_s_per_step": sum(times[:FIRST]) / FIRST,
        "steady_s_per_step": statistics.median(times[WARMUP:]),
        "steady_mean_s_per_step": statistics.mean(times[WARMUP:]),
        "step_times": [round(t, 5) for t in times],
        "torch_peak_allocated": torch.cuda.max_memory_allocated(),
        "torch_peak_reserved": torch.cuda.max_memory_reserved(),
        "nvml": nvml.ok, "nvml_why": nvml.why, "nvml_baseline_used": nvml.baseline,
        "nvml_peak_used": nvml.peak, "nvml_peak_first17": nvml.phase_peak.get("first17", 0),
        "nvml_peak_steady": nvml.phase_peak.get("steady", 0),
        "nvml_end_used": nvml.used() if nvml.ok else 0, "pool_reserved_end": pool_end,
        "loss": float(loss.detach()), "wall_s": time.perf_counter() - t_start,
        "torch": torch.__version__, "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    if calls_end is not None and calls_at_warmup is not None:
        res["gmlake_device_calls"] = calls_end[0]
        res["gmlake_device_calls_after_warmup"] = calls_end[0] - calls_at_warmup[0]
        # gmlake's driver time (measured around each call): before step 0 (the model and
        # optimizer set up), over the first 17 steps, and over the timed steps after warm-up
        res["gmlake_driver_s_setup"] = calls_at_start[1] if calls_at_start else 0.0
        res["gmlake_driver_s_first17"] = calls_at_first17[1] - res["gmlake_driver_s_setup"]
        res["gmlake_driver_s_after_warmup"] = calls_end[1] - calls_at_warmup[1]
        if calls_end[2] is not None and calls_at_warmup[2] is not None:
            # gmlake's own time in the timed steps: its pool's allocations and frees, device
            # calls included (report.py gives it as a share of those steps' time)
            res["gmlake_pool_s_after_warmup"] = calls_end[2] - calls_at_warmup[2]
    with open(args.out, "a") as f:
        f.write(json.dumps(res) + "\n")
    print(json.dumps({k: v for k, v in res.items() if k != "step_times"}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS) + ["offload"])
    ap.add_argument("--allocator", required=True, help="label written to the result")
    ap.add_argument("--order", type=int, default=0, help="position of this run in its rotation")
    ap.add_argument("--out", required=True, help="JSON-lines file to append the result to")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("train.py: no CUDA device")
    train(args)


if __name__ == "__main__":
    main()
