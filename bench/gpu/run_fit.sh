#!/usr/bin/env bash
# bench/gpu/run_fit.sh — on how much memory does a job run under each allocator?  For each budget
# (MiB of device memory left free for the job, the rest taken by bench/gpu/ballast, a process of
# its own without gmlake) and each allocator, one run of bench/gpu/train.py (WORKLOAD ddp or
# fsdp2: bench/gpu/dist_train.py under torchrun, a world of one GPU): did it finish, or die of
# running out of memory?  The GPU's side of `gmlake replay --fit` (docs/MODELS.md "What
# fits where").
# Usage: [WORKLOAD=gpt2] [BUDGETS="10900 11400 12900"] [ALLOCATORS="gmlake expandable native"]
#        [BUDGET=450] [RUN_TIMEOUT=150] [BALLAST_WAIT=60] bench/gpu/run_fit.sh [OUTDIR]
# (BALLAST_WAIT: seconds a ballast has to end once its run is over, twice that to get ready)
# Allocator names as bench/gpu/lib.sh says; the order rotates by one at each budget.  Each run
# appends one line to OUTDIR/fit.jsonl: workload, allocator, budget_mib, free_mib (what the
# ballast left), rc, oom (the run's errors say it ran out of memory), and, where it finished,
# the NVML peak above the job's baseline (nvml_peak_mib, where NVML could be read),
# torch.cuda.max_memory_reserved() (torch_peak_reserved_mib: under gmlake, its pool's, which
# gmlake answers), the last loss and the step times (train.py: first17_s, the mean of the first
# 17 steps; steady_s, the median after warm-up; dist_train.py: first_s, the mean of its warm-up
# steps; steady_s, the median after); a ballast that is never ready, or that ends during the run
# (the job then had more memory than its budget), gives an error line instead.
set -uo pipefail
name=run_fit logname=run_fit.log
source "$(dirname "$0")/lib.sh"
[ -n "${ALLOCATORS:-}" ] || allocators=(gmlake expandable native)
workload=${WORKLOAD:-gpt2}
read -r -a budgets <<<"${BUDGETS:-10900 11400 12900}"
ballast_wait=${BALLAST_WAIT:-60}
res=$out/fit.jsonl
record_error() { printf '{"workload":"%s","allocator":"%s","error":"%s"}\n' "$1" "$2" "$3" >>"$res"; }
build_missing
ballast=$root/build/gpu/ballast
if [ ! -x "$ballast" ]; then
  nvcc -O2 -o "$ballast" "$root/bench/gpu/ballast.cu" >>"$log" 2>&1 || { say "cannot build $ballast"; exit 1; }
fi
for ((k = 0; k < ${#budgets[@]}; k++)); do
  b=${budgets[$k]}
  for ((i = 0; i < ${#allocators[@]}; i++)); do
    a=$(rotated "$i" "$k" 0)
    envs=$(run_env "$workload" "$a") || continue
    # Bash closes a coprocess's descriptors and unsets BAL and BAL_PID once it has reaped it, at
    # any later command: under set -u a ballast that had died (never ready, or during the run)
    # ended this script at the next "${BAL[1]}" or "$BAL_PID".  So the coprocess outlives the
    # ballast until its input is closed, and says how the ballast ended ("exit N") after its
    # output; its output and pid are kept in descriptors and variables of this script's own.
    coproc BAL { env -u LD_PRELOAD "$ballast" "$b" 2>>"$log"; echo "exit $?"; cat >/dev/null; }
    bal_pid=$!
    exec {bal_out}<&"${BAL[0]}" {bal_in}>&"${BAL[1]}" {BAL[1]}>&-
    ready=""
    read -t $((2 * ballast_wait)) -r ready <&"$bal_out" || true
    if [ "${ready%% *}" != ready ]; then
      say "$a at $b MiB: the ballast did not get ready"
      record_error "$workload" "$a" "ballast not ready for $b MiB"
      exec {bal_in}>&- {bal_out}<&-
      wait "$bal_pid" 2>/dev/null
      continue
    fi
    say "$a: $workload with ${ready#ready } MiB free"
    rm -f "$out/run.jsonl"
    case $workload in
      ddp | fsdp2) job=(python3 -m torch.distributed.run --standalone --nproc_per_node=1
        "$root/bench/gpu/dist_train.py" --mode "$workload") ;;
      *) job=(python3 "$root/bench/gpu/train.py" --workload "$workload") ;;
    esac
    # shellcheck disable=SC2086 # envs is a list of words
    timeout -k 10 "$run_timeout" env $envs "${job[@]}" --allocator "$a" --out "$out/run.jsonl" \
      >"$out/last_run.txt" 2>"$out/last_err.txt"
    rc=$?
    exec {bal_in}>&-
    ended=""
    read -t "$ballast_wait" -r ended <&"$bal_out" || true
    exec {bal_out}<&-
    # a ballast stuck in CUDA never ends: killed with its coprocess rather than waited for
    [ -n "$ended" ] || { pkill -KILL -P "$bal_pid" 2>/dev/null; kill -KILL "$bal_pid" 2>/dev/null; }
    wait "$bal_pid" 2>/dev/null
    cat "$out/last_run.txt" "$out/last_err.txt" >>"$log"
    if [ "$ended" != "exit 0" ]; then # it died during the run: the job had more than its budget
      say "$a at $b MiB: the ballast ended during the run (${ended:-no status}): not recorded"
      record_error "$workload" "$a" "the ballast of $b MiB ended during the run (${ended:-no status})"
      continue
    fi
    oom=false
    grep -q -E 'OutOfMemoryError|out of memory' "$out/last_err.txt" && oom=true
    python3 - "$res" "$workload" "$a" "$b" "${ready#ready }" "$rc" "$oom" "$out/run.jsonl" <<'PY'
import json, os, sys
res, w, a, b, free, rc, oom, run = sys.argv[1:]
line = {"workload": w, "allocator": a, "budget_mib": int(b), "free_mib": int(free), "rc": int(rc),
        "oom": oom == "true"}
if os.path.exists(run):
    with open(run) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    if rows:
        r = rows[-1]
        # where NVML could not be read ("nvml" false) the jobs write 0 for its figures: none kept
        if "nvml_peak_used_mib" in r:  # dist_train.py: one figure per rank (a world of one)
            if r.get("nvml"):
                line["nvml_peak_mib"] = round(r["nvml_peak_used_mib"][0] - r["nvml_baseline_used_mib"][0])
            line["torch_peak_reserved_mib"] = round(r["torch_peak_reserved_mib"][0])
            line["loss"] = r["losses"][-1] if r.get("losses") else None
            line["first_s"] = r.get("first_s_per_step")
            line["steady_s"] = r.get("median_s_per_step")
        else:
            if r.get("nvml"):
                line["nvml_peak_mib"] = round((r["nvml_peak_used"] - r["nvml_baseline_used"]) / 2**20)
            line["torch_peak_reserved_mib"] = round(r.get("torch_peak_reserved", 0) / 2**20)
            line["loss"] = r.get("loss")
            line["first17_s"] = r.get("first17_s_per_step")
            line["steady_s"] = r.get("steady_s_per_step")
with open(res, "a") as f:
    f.write(json.dumps(line) + "\n")
PY
    say "$a at $b MiB: rc $rc, oom $oom"
  done
done
say "done: $res"
