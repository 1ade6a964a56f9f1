#!/usr/bin/env bash
# bench/gpu/run_side.sh [OUTDIR] — bench/gpu/train.py's workloads with the allocators running AT
# THE SAME TIME, one GPU each, on a machine with at least as many GPUs as allocators.  Rounds run
# back to back in separate processes drift by 10-15% from one launch to the next on a shared host
# (docs/BENCHMARKS.md); runs that share the same minutes of the same host share that drift, so
# the ratio of two runs of one round is a much tighter measure of their difference.  Each round
# moves every allocator on by one GPU (allocator j runs on GPU (j + round) mod NGPU), so a
# difference between the cards cancels over an even number of rounds.
# One process per run (CUDA_VISIBLE_DEVICES names its GPU); the runs of a round start together
# and the next round starts once all of them ended.  Each run's result line (train.py's, with
# "visible_devices") goes to OUTDIR/side.jsonl with order = round x allocators + j, so report.py's
# paired rounds compare the runs of one round; report.py writes the section "Side by side".
# Settings: WORKLOADS (default "llama_lora"), ALLOCATORS (default "expandable gmlake"; at most
# as many as GPUs; bench/gpu/lib.sh), ROUNDS (default 4), WARMUP_RUNS (untimed rounds before a
# workload's first, default 1), WARMUP and STEADY (train.py's steps), RUN_TIMEOUT (seconds a
# run, default 150), BUDGET (seconds; rounds that would start after it are skipped and
# recorded so; default 450), NGPU (default: the GPUs nvidia-smi lists).
set -uo pipefail
name=run_side logname=run_side.log
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
read -r -a workloads <<<"${WORKLOADS-llama_lora}"
[ -n "${ALLOCATORS:-}" ] || allocators=(expandable gmlake)
ngpu=${NGPU:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
k=${#allocators[@]}
if ! [ "$ngpu" -ge "$k" ] 2>/dev/null || [ "$k" -lt 2 ]; then
  say "run_side.sh needs 2 or more allocators and a GPU for each: ${k} allocator(s), ${ngpu:-no} GPU(s)"
  exit 2
fi
build_missing
side=$out/side.jsonl
say "workloads ${workloads[*]}, allocators ${allocators[*]} at once on $ngpu GPU(s), ${ROUNDS:-4} round(s), budget ${budget}s"

record_error() { # workload allocator what
  printf '{"workload":"%s","allocator":"%s","error":"%s"}\n' "$1" "$2" "$3" >>"$side"
}

round() { # workload round-number results-prefix label-of-runs|"" : one round, every allocator at once
  local w=$1 r=$2 pre=$3 label=$4 j envs gpu pids=() labels=()
  for j in $(seq 0 $((k - 1))); do
    local a=${allocators[$j]}
    if [ -n "$label" ]; then envs=$(alloc_env "$a") || continue; else envs=$(run_env "$w" "$a") || continue; fi
    gpu=$(((j + r) % ngpu))
    say "$w under $a on GPU $gpu (round $r${label:+, $label})"
    # shellcheck disable=SC2086
    timeout -k 10 "$run_timeout" env $envs CUDA_VISIBLE_DEVICES=$gpu python3 "$root/bench/gpu/train.py" \
      --workload "$w" --allocator "${label:-$a}" --order "$((r * k + j))" --out "$pre.$j.jsonl" \
      >>"$log" 2>&1 &
    pids+=($!)
    labels+=("$a")
  done
  for j in "${!pids[@]}"; do
    wait "${pids[$j]}"
    local rc=$?
    [ -n "$label" ] || run_done "$w" "${labels[$j]}" "$rc"
  done
}

tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
for w in "${workloads[@]}"; do
  for i in $(seq 1 "${WARMUP_RUNS:-1}"); do
    over_budget && break
    round "$w" "$i" "$tmpd/warmup" warmup # the first processes of a workload run slower
  done
  for r in $(seq 0 $((${ROUNDS:-4} - 1))); do
    round "$w" "$r" "$tmpd/$w.$r" ""
    cat "$tmpd/$w.$r".*.jsonl >>"$side" 2>/dev/null
    rm -f "$tmpd/$w.$r".*.jsonl
  done
done
python3 "$root/bench/gpu/report.py" "$out" >"$out/report.md" 2>>"$log" || say "report failed"
say "done; results in $out"
cat "$out/report.md"
