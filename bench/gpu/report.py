"""Turns the results of bench/gpu/run_all.sh and bench/gpu/run_dist.sh into markdown tables.
   python3 bench/gpu/report.py OUTDIR [OUTDIR...]   (reads train.jsonl, dist.jsonl, growth.jsonl,
   gmlake_stats_*.json; several folders, of invocations with the same allocators, are read as one
   set of runs: each run keeps its folder's number as its `batch`, so that rounds pair within a
   folder (within an invocation, where several were appended to one folder), and gmlake's
   statistics are the last folder's that has them)"""
import glob, json, os, sys

MIB = 1 << 20


def lines(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                print(f"report.py: {path}:{n}: not JSON ({e}); line skipped", file=sys.stderr)
    return out


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def mean(xs):
    return sum(xs) / len(xs)


def mib(b):
    return f"{b / MIB:,.0f}" if b else "-"


def pytorch(allocator):
    """Whether a run's allocator is one of PyTorch's (the baseline), not gmlake or a variant."""
    return not allocator.startswith("gmlake")


def training(rows, stats):
    ok = [r for r in rows if "error" not in r]
    errors = [r for r in rows if "error" in r]
    out = []
    for w in dict.fromkeys(r["workload"] for r in rows):
        runs = [r for r in ok if r["workload"] == w]
        out.append(f"### {w}\n")
        if runs:
            best = {k: min((r[k] for r in runs if pytorch(r["allocator"])), default=None)
                    for k in ("first17_s_per_step", "steady_s_per_step")}
            out.append("| allocator | run order | first 17 steps, s/step | vs best PyTorch | "
                       "after warm-up, s/step | vs best PyTorch | NVML peak used MiB (above "
                       "baseline) | torch peak allocated MiB | gmlake calls after warm-up | "
                       "gmlake driver ms, first 17 steps (share of their time) |")
            out.append("|---|---|---|---|---|---|---|---|---|---|")
            for r in runs:
                rel = lambda k: f"{r[k] / best[k]:.3f}" if best[k] else "-"
                base = r.get("nvml_baseline_used", 0)
                peak = r.get("nvml_peak_used", 0)
                nv = f"{mib(peak)} ({mib(peak - base)})" if r.get("nvml") else "n/a"
                calls = r.get("gmlake_device_calls_after_warmup", "-")
                drv = r.get("gmlake_driver_s_first17")
                drv = (f"{1e3 * drv:.1f} ({100 * drv / (17 * r['first17_s_per_step']):.2f}%)"
                       if drv is not None else "-")
                out.append(f"| {r['allocator']} | {r.get('order', '-')} | {r['first17_s_per_step']:.4f} | "
                           f"{rel('first17_s_per_step')} | {r['steady_s_per_step']:.4f} | "
                           f"{rel('steady_s_per_step')} | {nv} | {mib(r['torch_peak_allocated'])} | {calls} | "
                           f"{drv} |")
            allocs = list(dict.fromkeys(r["allocator"] for r in runs))
            if any(sum(r["allocator"] == a for r in runs) > 1 for a in allocs):
                med = {a: {k: median([r[k] for r in runs if r["allocator"] == a])
                           for k in ("first17_s_per_step", "steady_s_per_step")} for a in allocs}
                mbest = {k: min((med[a][k] for a in allocs if pytorch(a)), default=None)
                         for k in ("first17_s_per_step", "steady_s_per_step")}
                out.append("\nMedians over the runs of each allocator:\n")
                out.append("| allocator | runs | first 17 steps, s/step (median) | vs best PyTorch | "
                           "after warm-up, s/step (median) | vs best PyTorch |")
                out.append("|---|---|---|---|---|---|")
                for a in allocs:
                    m = med[a]
                    rel = lambda k: f"{m[k] / mbest[k]:.3f}" if mbest[k] else "-"
                    out.append(f"| {a} | {sum(r['allocator'] == a for r in runs)} | "
                               f"{m['first17_s_per_step']:.4f} | {rel('first17_s_per_step')} | "
                               f"{m['steady_s_per_step']:.4f} | {rel('steady_s_per_step')} |")
                for k, what in (("first17_s_per_step", "first 17 steps"),
                                ("steady_s_per_step", "step after warm-up")):
                    ref = min((a for a in allocs if pytorch(a)), key=lambda a: med[a][k], default=None)
                    if ref:
                        out += paired_rounds(runs, allocs, ref, lambda r, k=k: r[k], what,
                                             [r for r in rows if r["workload"] == w])
            out += own_time(runs)
            s = stats.get(w)
            if s:
                calls = s.get("device_calls", {})
                out.append(f"\ngmlake: peak reserved {mib(s['peak_reserved_bytes'])} MiB, utilization "
                           f"{100 * s['utilization']:.2f}%, {s['allocations']:,} allocations, "
                           f"{s['stitches']} stitches ({s['stitch_reuses']} reused), "
                           f"{calls.get('chunk_create', 0):,} chunk creations, "
                           f"{sum(calls.values()):,} device calls in the whole run"
                           + (f" taking {1e3 * s['device_seconds']:.1f} ms of driver time."
                              if "device_seconds" in s else "."))
        for r in errors:
            if r["workload"] == w:
                out.append(f"\n- {r['allocator']}: {r['error']}")
        out.append("")
    return out


def own_time(runs):
    """gmlake's own time in the timed steps (train.py's gmlake_pool_s_after_warmup: its pool's
    allocations and frees, their device calls included, and gmlake_driver_s_after_warmup) as a
    share of those steps' wall time, median (range) over the runs that give it, per allocator
    label; nothing for rows without it (other allocators, older rows or libraries)."""
    out = []
    for a in dict.fromkeys(r["allocator"] for r in runs):
        pool, drv = [], []
        for r in runs:
            if (r["allocator"] != a or r.get("gmlake_pool_s_after_warmup") is None
                    or "warmup" not in r or not r.get("step_times")):
                continue
            timed = sum(r["step_times"][r["warmup"]:])
            if timed > 0:
                pool.append(100 * r["gmlake_pool_s_after_warmup"] / timed)
                drv.append(100 * r.get("gmlake_driver_s_after_warmup", 0.0) / timed)
        if pool:
            out.append(f"\n{a}: its own time in the timed steps (the pool's allocations and frees, "
                       f"their device calls included) {spread(pool, '{:.2f}')}% of those steps' "
                       f"wall time, of which driver calls {spread(drv, '{:.2f}')}% "
                       f"(median (range) of {len(pool)} runs).")
    return out


def spread(xs, fmt):
    """median (min-max) of xs, each written with fmt."""
    if not xs:
        return "-"
    return f"{fmt.format(median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def distributed(rows):
    """DDP / FSDP2 (dist.jsonl): per mode, each allocator's median step and NVML peak per rank
    (the largest rank's), with their spread over the runs, against the best PyTorch allocator's."""
    ok = [r for r in rows if "error" not in r]
    out = ["## DDP and FSDP2 (bench/gpu/run_dist.sh)\n"]
    if ok:
        r0 = ok[0]
        out.append(f"PyTorch {r0.get('torch', '')}; {r0.get('warmup')} warm-up steps, then "
                   f"{r0.get('steady')} timed; a step's time is the slowest rank's; s/step is a run's mean over its "
                   "timed steps (the same sequence lengths under every allocator); median (min-max) "
                   "over the runs of each allocator; NVML peak used MiB of the largest rank.\n")
    for m in dict.fromkeys((r.get("mode", "?"), r.get("world_size", "?")) for r in rows):
        runs = [r for r in ok if (r["mode"], r["world_size"]) == m]
        out.append(f"### {m[0]}, world of {m[1]}\n")
        allocs = list(dict.fromkeys(r["allocator"] for r in runs))
        # the mean over the timed steps: every allocator sees the same sequence lengths, and a step's
        # time varies 4x with its length, so a run's median would fall between two clusters
        step = {a: [mean(r["step_times"][r["warmup"]:]) for r in runs if r["allocator"] == a] for a in allocs}
        first = {a: [r["first_s_per_step"] for r in runs if r["allocator"] == a] for a in allocs}
        peak = {a: [max(r["nvml_peak_used_mib"]) for r in runs if r["allocator"] == a and r.get("nvml")]
                for a in allocs}
        best_step = min((median(step[a]) for a in allocs if pytorch(a)), default=None)
        best_peak = min((median(peak[a]) for a in allocs if pytorch(a) and peak[a]), default=None)
        ref = runs[0]["losses"] if runs else []
        if runs:
            out.append("| allocator | runs | s/step after warm-up | vs best PyTorch | s/step, warm-up "
                       "steps | NVML peak MiB | vs best PyTorch | gmlake peak reserved / active MiB | "
                       "largest loss difference to the first run |")
            out.append("|---|---|---|---|---|---|---|---|---|")
        for a in allocs:
            rel_step = f"{median(step[a]) / best_step:.3f}" if best_step else "-"
            rel_peak = f"{median(peak[a]) / best_peak:.3f}" if best_peak and peak[a] else "-"
            gm = [g for r in runs if r["allocator"] == a for g in (r.get("gmlake") or []) if g]
            gm = (f"{median([g['peak_reserved_mib'] for g in gm]):,.0f} / "
                  f"{median([g['peak_active_mib'] for g in gm]):,.0f}") if gm else "-"
            dl = [abs(x - y) for r in runs if r["allocator"] == a for x, y in zip(r["losses"], ref)]
            dl = f"{max(dl):.2e}" if dl else "-"
            out.append(f"| {a} | {len(step[a])} | {spread(step[a], '{:.4f}')} | {rel_step} | "
                       f"{spread(first[a], '{:.4f}')} | {spread(peak[a], '{:,.0f}')} | {rel_peak} | {gm} | "
                       f"{dl} |")
        out += steps_by_length(runs, allocs)
        base = [a for a in allocs if pytorch(a)]
        fast = min(base, key=lambda a: median(step[a]), default=None)
        small = min((a for a in base if peak[a]), key=lambda a: median(peak[a]), default=None)
        for a in allocs:
            if not pytorch(a) and fast:
                mem = (f", NVML peak {median(peak[a]) / median(peak[small]):.3f} x {small}'s (the smallest)"
                       if small and peak[a] else "")
                out.append(f"\n{a}: median step {median(step[a]) / median(step[fast]):.3f} x "
                           f"{fast}'s (the fastest PyTorch allocator){mem}.")
        if fast:
            out += paired_rounds(runs, allocs, fast,
                                 rows=[r for r in rows if (r.get("mode", "?"), r.get("world_size", "?")) == m])
        for a in allocs:
            line = driver_by_phase([r for r in runs if r["allocator"] == a])
            if line:
                out.append(f"\n{a}: {line}")
        for r in rows:
            if "error" in r and (r.get("mode", "?"), r.get("world_size", "?")) == m:
                out.append(f"\n- {r['allocator']}: {r['error']}")
        out.append("")
    return out


def timed_mean(r):
    """A dist.jsonl run's mean timed step."""
    return mean(r["step_times"][r["warmup"]:])


def paired_rounds(runs, allocs, ref, metric=timed_mean, what="mean timed step", rows=None):
    """Each other allocator's `what` (metric of a run) over ref's in the same round (run_dist.sh and
    run_all.sh run every allocator once a round, back to back, so a round's ratio leaves out the
    machine's drift between rounds, 10-15%): median (min-max) over the rounds that have both, and
    in how many the allocator was the faster.  A round is a run's order // the number of
    allocators, within its batch (the number of the folder it came from, which main gives it);
    the allocators are those of `rows` in that batch (the runs and the error lines of the same
    workload or mode; default: runs); [] with under two rounds."""
    # an allocator whose every run failed still took a place in each round: counted from the error
    # lines too, or the runs after its place would be paired with the wrong round
    labels = {}
    for r in list(runs) + list(rows or []):
        labels.setdefault(r.get("batch", 0), set()).add(r["allocator"])

    def by_round(a):
        return {(r.get("batch", 0), r["order"] // len(labels[r.get("batch", 0)])): metric(r)
                for r in runs if r["allocator"] == a and "order" in r}
    base, out = by_round(ref), []
    for a in allocs:
        if a == ref:
            continue
        mine = by_round(a)
        ratios = [mine[k] / base[k] for k in sorted(mine) if k in base and base[k] > 0]
        if len(ratios) < 2:
            continue
        faster = sum(x < 1 for x in ratios)
        out.append(f"\n{a}: {what} over {ref}'s in the same round {spread(ratios, '{:.3f}')}, "
                   f"{len(ratios)} rounds ({', '.join(f'{x:.3f}' for x in ratios)}); the faster in "
                   f"{faster} of {len(ratios)}.")
    return out


def steps_by_length(runs, allocs):
    """The timed steps split by their sequence length: a length's first step (the host builds
    that shape's kernels and plans then; the first appearance counted from step 0, warm-up
    included) and the steps of lengths seen before, summed per run; with each run's median step.
    Median (min-max) over the runs; [] where the rows lack seq_lengths."""
    def split(r):
        seen, new, old = set(r["seq_lengths"][:r["warmup"]]), 0.0, 0.0
        for n, t in zip(r["seq_lengths"][r["warmup"]:], r["step_times"][r["warmup"]:]):
            if n in seen:
                old += t
            else:
                new += t
                seen.add(n)
        return new, old
    if not runs or not all(r.get("seq_lengths") and len(r["seq_lengths"]) == len(r["step_times"])
                           for r in runs):
        return []
    out = ["", "| allocator | a run's median timed step, s | timed steps of a new length, s a run "
               "| timed steps of a length seen before, s a run |", "|---|---|---|---|"]
    for a in allocs:
        mine = [r for r in runs if r["allocator"] == a]
        parts = [split(r) for r in mine]
        out.append(f"| {a} | {spread([median(r['step_times'][r['warmup']:]) for r in mine], '{:.4f}')} | "
                   f"{spread([p[0] for p in parts], '{:.3f}')} | {spread([p[1] for p in parts], '{:.3f}')} |")
    return out


def driver_by_phase(runs):
    """Where gmlake's driver time fell in these runs (dist.jsonl's rank_gmlake_steps: each rank's
    [driver seconds, device calls, stitches, seconds in the pool's allocations and frees, stream waits, peak reserved MiB] per step): the warm-up steps' and the timed steps'
    seconds (the larger rank's, median over the runs) and the steps that made device calls on any
    rank in any run; None without those figures."""
    per = [r for r in runs if r.get("rank_gmlake_steps")]
    if not per:
        return None
    warm, timed, busy, host_warm, host_timed = [], [], set(), [], []
    for r in per:
        w = r["warmup"]
        ranks = [g for g in r["rank_gmlake_steps"] if g]
        if not ranks:  # gmlake loaded, but no rank's pool served anything
            continue
        warm.append(max(sum(s[0] for s in g[:w]) for g in ranks))
        timed.append(max(sum(s[0] for s in g[w:]) for g in ranks))
        busy.update(i for g in ranks for i, s in enumerate(g) if s[1])
        # rows recorded before the pool's host time have 3 figures a step; a library without it, None
        if all(len(s) > 3 and s[3] is not None for g in ranks for s in g):
            host_warm.append(max(sum(s[3] for s in g[:w]) for g in ranks))
            host_timed.append(max(sum(s[3] for s in g[w:]) for g in ranks))
    if not warm:
        return None
    n = len(per[0]["step_times"])
    host = (f"; time in the pool's allocations and frees (the device calls made in them included) "
            f"{median(host_warm):.3f} s in the warm-up steps, {median(host_timed):.3f} s in the "
            f"timed steps (median of the {len(host_timed)} runs that give it)" if host_timed else "")
    return (f"driver time in the warm-up steps {median(warm):.3f} s, in the timed steps "
            f"{median(timed):.3f} s a run (the larger rank; median of {len(timed)}){host}; steps with "
            f"device calls: {', '.join(map(str, sorted(busy))) or 'none'} of 0..{n - 1}.")


def growth(rows):
    g = [r for r in rows if r.get("bench") == "growth"]
    calls = [r for r in rows if r.get("bench") == "call"]
    out = []
    if g:
        out.append("### Growth and release, ms per GiB (median of %d)\n" % g[0]["reps"])
        out.append("| handle | create | map | set_access (1 call) | set_access (per handle) | grow total | "
                   "unmap (1 call) | unmap (per handle) | release | release total |")
        out.append("|---|---|---|---|---|---|---|---|---|---|")
        for r in g:
            cols = ["create", "map", "set_access", "set_access_each", "grow_total", "unmap",
                    "unmap_each", "release", "release_total"]
            out.append(f"| {r['handle_mib']} MiB x {r['handles']} | "
                       + " | ".join(f"{r[c + '_ms_per_gib']:.3f}" for c in cols) + " |")
        out.append("")
    if calls:
        out.append("### Other calls, us per call\n")
        out.append("| call | us |")
        out.append("|---|---|")
        for r in calls:
            name = r["kind"] + (f" ({r['size']})" if "size" in r else "")
            out.append(f"| {name} | {r['us']:.2f} |")
        out.append("")
    return out


def side_by_side(rows):
    """run_side.sh's runs: the allocators of a round ran at once, one GPU each, so the paired
    rounds of training() compare runs that shared the host's minutes; which GPU each run had."""
    out = ["## Side by side (bench/gpu/run_side.sh)\n",
           "The allocators of a round ran at the same time, one GPU each, moving on by one GPU each "
           "round; the paired rounds compare the runs of one round.\n"]
    for w in dict.fromkeys(r["workload"] for r in rows):
        runs = sorted((r for r in rows if r["workload"] == w and "error" not in r),
                      key=lambda r: (r.get("batch", 0), r["order"]))
        gpus = {}
        for r in runs:
            gpus.setdefault(r["allocator"], []).append(str(r.get("visible_devices")))
        out.append(f"{w}: GPU by round: " + "; ".join(f"{a} {', '.join(g)}" for a, g in gpus.items()) + "\n")
    return out + training(rows, {})


def read_all(dirs, name, appended=None):
    """The rows of file `name` in each folder, each tagged with its batch: the folder's, or, where
    the runners appended several invocations to one file, the invocation's (counted in
    appended[folder] where given)."""
    out, batch = [], -1
    for d in dirs:
        batch, seen, parts = batch + 1, set(), 1
        for r in lines(os.path.join(d, name)):
            # each invocation numbers its runs from 0 and a run's order is unique in it: a repeat
            # starts the next, whose rounds must not pair with the same numbers of the one before
            if "order" in r:
                key = (r.get("workload"), r.get("mode"), r.get("world_size"), r["order"])
                if key in seen:
                    batch, seen, parts = batch + 1, set(), parts + 1
                seen.add(key)
            out.append(dict(r, batch=batch))
        if appended is not None and parts > 1:
            appended[d] = max(appended.get(d, 1), parts)
    return out


def main():
    dirs = sys.argv[1:]
    if not dirs:
        sys.exit("usage: report.py OUTDIR [OUTDIR...] (folders bench/gpu/run_all.sh or run_dist.sh wrote)")
    for d in dirs:
        if not os.path.isdir(d):
            sys.exit(f"report.py: {d}: not a folder (give the folders run_all.sh or run_dist.sh wrote)")
    stats = {}
    for d in dirs:
        for p in glob.glob(os.path.join(d, "gmlake_stats_*.json")):
            w = os.path.basename(p)[len("gmlake_stats_"):-len(".json")]
            got = lines(p)
            if got:
                stats[w] = got[0]
    out = ["## GPU benchmarks (bench/gpu/run_all.sh, run_dist.sh)\n"]
    if len(dirs) > 1:
        out.append(f"Runs of {len(dirs)} folders ({', '.join(dirs)}), rounds paired within each.\n")
    appended = {}
    train, side, dist = (read_all(dirs, n, appended) for n in ("train.jsonl", "side.jsonl", "dist.jsonl"))
    for d, k in appended.items():
        out.append(f"{d} holds the runs of {k} invocations (a run's order repeats), rounds paired "
                   "within each.\n")
    if train:
        host = train[0].get("torch", "")
        out.append(f"PyTorch {host}; seconds per step; `first 17` is the mean over steps 0..16, "
                   "`after warm-up` the median after 20 warm-up steps; NVML peak used memory of "
                   "the device (baseline: before the model was built).\n")
        out += training(train, stats)
    if side:
        out += side_by_side(side)
    if dist:
        out += distributed(dist)
    out += growth(read_all(dirs, "growth.jsonl"))
    for d in dirs:
        for p in sorted(glob.glob(os.path.join(d, "*.trace.gz"))):
            out.append(f"Trace recorded: {os.path.basename(p)} ({os.path.getsize(p):,} bytes)")
    print("\n".join(out))


if __name__ == "__main__":
    main()
