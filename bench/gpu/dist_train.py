"""DDP or FSDP2 training of a GPT-2-style model under one allocator, launched by torchrun (NCCL);
rank 0 appends one JSON line to --out.  Issues 20 (item 4) and 21.

    torchrun --standalone --nproc_per_node=N bench/gpu/dist_train.py --mode ddp|fsdp2 \\
        --allocator LABEL --out dist.jsonl

The allocator is chosen by the environment (PYTORCH_CUDA_ALLOC_CONF, LD_PRELOAD), which torchrun's
workers inherit: bench/gpu/run_dist.sh sets it.  The model: GPT-2 (transformers' GPT2LMHeadModel
from a config, random weights, no download), LAYERS (12) x 1024, 16 heads, activation
checkpointing (non-reentrant; CKPT=0 turns it off), bf16 autocast, AdamW, BATCH (8) sequences per
rank whose length changes every step (128..1024 in steps of 64, from a fixed seed: the same
schedule on every rank and under every allocator; tokens seeded by step and rank).
  --mode ddp    torch.nn.parallel.DistributedDataParallel
  --mode fsdp2  torch.distributed.fsdp.fully_shard (PyTorch 2.6+) on each transformer block,
                then on the whole model (parameters fp32, sharded; bf16 by autocast)
Timing: WARMUP (4) steps, then STEADY (10) timed steps; every step ends with
torch.cuda.synchronize() on each rank, and a step's time is the slowest rank's.  `first` is the
mean over the warm-up steps (growth included), `median` the median of the timed steps.
Memory: NVML's used memory of each rank's own device, polled every 5 ms (bench/gpu/train.py's
NvmlPeak), gathered to rank 0; gmlake's own figures per rank (peak reserved / peak active) when
libgmlake is loaded (python/gmlake).  Losses of every step (rank 0's) are written, so that runs
under different allocators can be compared.
"""
import argparse, datetime, json, os, random, statistics, sys, time

import torch
import torch.distributed as dist

# bench/gpu/train.py: the NVML poller, building on the device, the repository's gmlake package
from train import NvmlPeak, gmlake, on_device, pool_host_seconds

WARMUP = int(os.environ.get("WARMUP", "4"))
STEADY = int(os.environ.get("STEADY", "10"))
BATCH = int(os.environ.get("BATCH", "8"))
LAYERS = int(os.environ.get("LAYERS", "12"))
CKPT = os.environ.get("CKPT", "1") != "0"
MIB = 1 << 20


def lengths(steps, seed=1234):
    """The sequence length of every step: 128..1024 in steps of 64, the same for everyone."""
    rng = random.Random(seed)
    return [rng.randrange(128, 1025, 64) for _ in range(steps)]


def build(dev):
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(n_layer=LAYERS, n_embd=1024, n_head=16, n_positions=1024, vocab_size=50257,
                     use_cache=False)
    torch.manual_seed(0)  # the same weights on every rank and under every allocator
    model = on_device(lambda: GPT2LMHeadModel(cfg), dev)
    model.train()
    if CKPT:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, cfg


def wrap(model, mode, local_rank):
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        return DistributedDataParallel(model, device_ids=[local_rank])
    try:
        from torch.distributed.fsdp import fully_shard  # public from PyTorch 2.6
    except ImportError:
        from torch.distributed._composable.fsdp import fully_shard  # 2.4 and 2.5
    blocks = getattr(getattr(model, "transformer", None), "h", None)
    if blocks is None:
        raise SystemExit("dist_train.py: the GPT-2 model has no transformer.h (transformers changed?)")
    for block in blocks:
        fully_shard(block)
    fully_shard(model)
    return model


def gmlake_figures(device):
    """gmlake's own figures for this rank's device, or None when gmlake is not loaded."""
    s = gmlake.stats(device) if gmlake.enabled() else None
    if s is None:
        return None
    return {"peak_reserved_mib": s["peak_reserved_bytes"] / MIB,
            "peak_active_mib": s["peak_active_bytes"] / MIB,
            "utilization": s["utilization"], "allocations": s["allocations"],
            "stitches": s["stitches"], "device_calls": sum(s["device_calls"].values()),
            "driver_s": s["device_seconds"], "calls_by_kind": s["device_calls"],
            "driver_s_by_kind": s.get("device_seconds_by_call"),
            "pool_host_s": pool_host_seconds(s)}


def gmlake_step_marks(device):
    """gmlake's running totals on this rank after a step (driver seconds, device calls,
    stitches, seconds in the pool's allocations and frees, GPU-side waits of one stream for
    another's frees; then the pool's peak reserved bytes so far, a level), or None when gmlake is
    not loaded."""
    s = gmlake.stats(device) if gmlake.enabled() else None
    if s is None:
        return None
    return (s["device_seconds"], sum(s["device_calls"].values()), s["stitches"], pool_host_seconds(s),
            s["device_calls"].get("stream_wait", 0), s["peak_reserved_bytes"])


def step_deltas(start, marks):
    """Each step's share of the running totals gmlake_step_marks took before the first step
    (start) and after every step, and the peak reserved MiB after the step (where growth
    happened: a level, not a share); None without gmlake."""
    if not marks or marks[0] is None:
        return None
    out, prev = [], start or (0.0, 0, 0, 0.0, 0, 0)
    for m in marks:
        # the pool's host time: None from a library without it (an older build, gmlake@DIR)
        host = None if m[3] is None or prev[3] is None else round(m[3] - prev[3], 5)
        out.append([round(m[0] - prev[0], 5), m[1] - prev[1], m[2] - prev[2], host, m[4] - prev[4],
                    round(m[5] / MIB)])
        prev = m
    return out


def run(args):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dev = torch.device("cuda", local_rank)
    try:
        uuid = str(torch.cuda.get_device_properties(local_rank).uuid)
        uuid = uuid if uuid.startswith("GPU-") else "GPU-" + uuid
    except Exception:  # older PyTorch: NvmlPeak falls back to the device's number
        uuid = None
    nvml = NvmlPeak(uuid=uuid, cuda_index=local_rank)
    dist.init_process_group("nccl", device_id=dev, timeout=datetime.timedelta(seconds=300))
    t_start = time.perf_counter()
    model, cfg = build(dev)
    model = wrap(model, args.mode, local_rank)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    steps = WARMUP + STEADY
    lens = lengths(steps)
    times, losses, enqueue, per_step = [], [], [], []
    torch.cuda.synchronize()
    dist.barrier()
    setup_s = time.perf_counter() - t_start
    setup_marks = gmlake_step_marks(local_rank)
    # PROFILE=DIR: torch.profiler over the timed steps after the first two, on every rank: the op
    # table by self CPU time and by self CUDA time, and the kernel timeline's busy time, idle gaps
    # and compute/communication overlap (bench/gpu/timeline.py), written to
    # DIR/profile_<mode>_<allocator>_rank<R>.txt; the timeline's figures also go to the result
    prof_dir = os.environ.get("PROFILE")
    prof = None
    for step in range(steps):
        if prof_dir and step == WARMUP + 2:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                      torch.profiler.ProfilerActivity.CUDA])
            prof.__enter__()
        g = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randint(0, cfg.vocab_size, (BATCH, lens[step]), generator=g).to(dev)
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        enqueue.append(time.perf_counter() - t0)  # the host's part: the step queued, not yet run
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        per_step.append(gmlake_step_marks(local_rank))
        losses.append(loss.detach())
        del x, loss
        dist.barrier()  # outside the timed part: every rank starts the next step together
    tl = None
    if prof:
        prof.__exit__(None, None, None)
        ka = prof.key_averages()
        tl, tl_line = profile_timeline(prof)
        with open(os.path.join(prof_dir, f"profile_{args.mode}_{args.allocator}_rank{rank}.txt"), "w") as f:
            f.write(f"rank {rank}, steps {WARMUP + 2}..{steps - 1}, lengths {lens[WARMUP + 2:]}\n")
            f.write(f"kernel timeline: {tl_line}\n")
            f.write(ka.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=50))
            f.write(ka.table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=50))
    nvml.close()
    mine = {"rank": rank, "times": times, "enqueue": enqueue, "gmlake_steps": step_deltas(setup_marks, per_step),
            "nvml": nvml.ok, "nvml_why": nvml.why,
            "nvml_device": str(getattr(nvml, "index", "")),
            "nvml_peak_used_mib": nvml.peak / MIB, "nvml_baseline_used_mib": nvml.baseline / MIB,
            "torch_peak_allocated_mib": torch.cuda.max_memory_allocated(dev) / MIB,
            "torch_peak_reserved_mib": torch.cuda.max_memory_reserved(dev) / MIB,
            "gmlake": gmlake_figures(local_rank), "timeline": tl}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank == 0:
        step_times = [max(r["times"][i] for r in everyone) for i in range(steps)]
        timed = step_times[WARMUP:]
        res = {
            "mode": args.mode, "world_size": world, "allocator": args.allocator, "order": args.order,
            "warmup": WARMUP, "steady": STEADY, "batch": BATCH, "layers": LAYERS, "checkpointing": CKPT,
            "seq_lengths": lens,
            "step_times": [round(t, 5) for t in step_times],
            "rank_step_times": [[round(t, 5) for t in r["times"]] for r in everyone],
            # each rank's host time to queue each step (before its synchronisation)
            "rank_enqueue_times": [[round(t, 5) for t in r["enqueue"]] for r in everyone],
            # each rank's gmlake work in each step: [driver seconds, device calls, stitches,
            # seconds in the pool, GPU-side waits for another stream's frees, peak reserved MiB
            # after the step]
            "rank_gmlake_steps": [r["gmlake_steps"] for r in everyone] if gmlake.enabled() else None,
            "median_s_per_step": statistics.median(timed) if timed else None,
            "first_s_per_step": statistics.mean(step_times[:WARMUP]) if WARMUP else None,
            "step0_s": step_times[0], "setup_s": setup_s,
            "losses": [float(l) for l in losses],
            "nvml": all(r["nvml"] for r in everyone),
            "nvml_why": sorted({r["nvml_why"] for r in everyone if r["nvml_why"]}),
            "nvml_device": [r["nvml_device"] for r in everyone],
            "nvml_peak_used_mib": [round(r["nvml_peak_used_mib"], 1) for r in everyone],
            "nvml_baseline_used_mib": [round(r["nvml_baseline_used_mib"], 1) for r in everyone],
            "torch_peak_allocated_mib": [round(r["torch_peak_allocated_mib"], 1) for r in everyone],
            "torch_peak_reserved_mib": [round(r["torch_peak_reserved_mib"], 1) for r in everyone],
            "gmlake": [r["gmlake"] for r in everyone] if any(r["gmlake"] for r in everyone) else None,
            "timeline": [r["timeline"] for r in everyone] if any(r["timeline"] for r in everyone) else None,
            "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "preload": os.environ.get("LD_PRELOAD", ""),
            "wall_s": time.perf_counter() - t_start, "torch": torch.__version__,
        }
        with open(args.out, "a") as f:
            f.write(json.dumps(res) + "\n")
        print(json.dumps({k: v for k, v in res.items() if k not in ("step_times", "losses", "seq_lengths")}),
              flush=True)
    dist.destroy_process_group()


def profile_timeline(prof):
    """The profiled window's kernel timeline on this rank (bench/gpu/timeline.py): its figures
    (a dict, in microseconds) and one line saying them; never raises (a profiler that names its
    events otherwise gives None and the reason)."""
    try:
        import timeline
        cuda = torch.autograd.DeviceType.CUDA
        evs = list(prof.events())
        # kernels, copies and memsets; not the GPU-side copies of record_function ranges
        # (DistributedDataParallel.forward, nccl:all_reduce, ...), which span many kernels
        cpu_names = {e.name for e in evs if e.device_type != cuda}
        ks = [(e.name, e.time_range.start, e.time_range.end) for e in evs
              if e.device_type == cuda and not getattr(e, "is_user_annotation", False)
              and e.name not in cpu_names]
        if not ks:
            return None, "no GPU events in the profile"
        s = timeline.summarize(ks)
        return {k: round(v, 1) for k, v in s.items()}, timeline.report(s)
    except Exception as e:  # a measurement aid: the run's figures stand without it
        return None, f"not analysed ({type(e).__name__}: {e})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", required=True, choices=["ddp", "fsdp2"])
    ap.add_argument("--allocator", required=True, help="label written to the result")
    ap.add_argument("--order", type=int, default=0, help="position of this run in its rotation")
    ap.add_argument("--out", required=True, help="JSON-lines file rank 0 appends the result to")
    args = ap.parse_args()
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        if v not in os.environ:
            sys.exit(f"dist_train.py: {v} is not set: launch it with torchrun "
                     "(torchrun --standalone --nproc_per_node=N bench/gpu/dist_train.py ...)")
    if not torch.cuda.is_available():
        sys.exit("dist_train.py: no CUDA device")
    if int(os.environ["LOCAL_RANK"]) >= torch.cuda.device_count():
        sys.exit(f"dist_train.py: LOCAL_RANK {os.environ['LOCAL_RANK']} but only "
                 f"{torch.cuda.device_count()} CUDA devices: lower --nproc_per_node")
    if WARMUP < 1 or STEADY < 1:
        sys.exit("dist_train.py: WARMUP and STEADY must be at least 1")
    run(args)


if __name__ == "__main__":
    main()
