#!/usr/bin/env bash
# bench/gpu/run_all.sh [OUTDIR] — the GPU benchmarks of issue 10, on one GPU, in one go (~5 min):
#  1. growth.jsonl: the driver's cost of growing and releasing memory by handle size, address
#     reserve/free, events (bench/gpu/growth.c)
#  2. train.jsonl: each workload of bench/gpu/train.py (gpt2, llama_lora, bert_varlen, offload, vit, kvgen;
#     also compiled, torch.compile reduce-overhead, when WORKLOADS names it)
#     under expandable_segments:True, backend:cudaMallocAsync and gmlake (LD_PRELOAD of
#     build/interpose/libgmlake.so with backend:cudaMallocAsync), one process per run, the order
#     of the three allocators rotating from one workload to the next
#  3. offload.trace.gz: a gmlake-trace v1 of the offload workload (two streams), recorded by
#     libgmlake (GMLAKE_TRACE_FILE, its live statistics in trace_stats_offload.json) in a separate run so that recording does not slow the timed one
#  4. report.md: the tables (bench/gpu/report.py)
# OUTDIR defaults to $OUT, else build/gpu-bench.  One failing or hanging run (RUN_TIMEOUT seconds
# each, default 150) is recorded in train.jsonl as an error and the rest go on; runs that would
# start after BUDGET seconds (default 450) are skipped and recorded so.
# Settings: WORKLOADS (empty: none, e.g. to record traces only), ALLOCATORS (expandable,
# cudaMallocAsync, gmlake, gmlake-native, or a gmlake one with settings: gmlake:KEY=VALUE,KEY=VALUE;
# bench/gpu/lib.sh), TRACE_WORKLOADS (default offload), WARMUP, STEADY, WARMUP_RUNS
# (untimed runs before each workload, default 1), GROWTH (off: no growth micro-benchmark), REPEATS (rounds of the allocators per workload,
# each round starting one allocator later; default 1; report.md then gives the medians too).
# Uses build/interpose/libgmlake.so and build/bench/gpu_growth as carried; builds with meson
# (into build-gpu/) only where they are absent.
set -uo pipefail
name=run_all logname=run_all.log
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
read -r -a workloads <<<"${WORKLOADS-gpt2 llama_lora bert_varlen offload vit kvgen}"
read -r -a trace_workloads <<<"${TRACE_WORKLOADS-offload}"
build_missing bench/gpu_growth
growth=$root/build/bench/gpu_growth
[ -x "$growth" ] || growth=$root/build-gpu/bench/gpu_growth

# 1. growth micro-benchmark
say "growth micro-benchmark"
if [ "${GROWTH:-on}" = off ]; then
  say "GROWTH=off: growth micro-benchmark skipped"
elif [ -x "$growth" ]; then
  timeout -k 5 120 "$growth" >"$out/growth.jsonl" 2>>"$log" || say "growth failed (rc $?)"
else
  say "no $growth: growth micro-benchmark skipped"
fi

# 2. training runs
record_error() { # workload allocator what
  printf '{"workload":"%s","allocator":"%s","error":"%s"}\n' "$1" "$2" "$3" >>"$out/train.jsonl"
}
run_one() { # workload allocator order [extra env...]
  local w=$1 a=$2 order=$3 envs
  shift 3
  envs=$(run_env "$w" "$a") || return
  say "$w under $a"
  # shellcheck disable=SC2086
  # env after timeout: only the Python process gets libgmlake and its settings
  timeout -k 10 "$run_timeout" env $envs "$@" python3 "$root/bench/gpu/train.py" --workload "$w" \
    --allocator "$a" --order "$order" --out "$out/train.jsonl" >>"$log" 2>&1
  run_done "$w" "$a" $?
}
n=${#allocators[@]}
for i in "${!workloads[@]}"; do
  # The first process of a workload ran slower than the rest whatever its allocator (bert_varlen,
  # 2026-11-21: 1.7-2.0x the best first-17 time in first position, under expandable and gmlake
  # alike): one untimed run first, recorded in warmup.jsonl only (WARMUP_RUNS=0 skips it).
  for _ in $(seq 1 "${WARMUP_RUNS:-1}"); do
    say "${workloads[$i]}: untimed warm-up run"
    timeout -k 10 "$run_timeout" env $(alloc_env "${allocators[0]}") python3 "$root/bench/gpu/train.py" \
      --workload "${workloads[$i]}" --allocator warmup --out "$out/warmup.jsonl" >>"$log" 2>&1 ||
      say "warm-up of ${workloads[$i]} failed (rc $?)"
  done
  # REPEATS rounds; the first allocator of a round moves on by one each round (and each workload)
  for r in $(seq 0 $((${REPEATS:-1} - 1))); do
    for j in $(seq 0 $((n - 1))); do
      a=$(rotated "$i" "$r" "$j")
      extra=()
      [ "$a" = gmlake ] && extra=(GMLAKE_STATS_FILE="$out/gmlake_stats_${workloads[$i]}.json")
      run_one "${workloads[$i]}" "$a" "$((r * n + j))" "${extra[@]}"
    done
  done
done

# 3. traces (separate gmlake runs; their timings go to trace_runs.jsonl, not train.jsonl)
for w in "${trace_workloads[@]}"; do
  [ -f "$lib" ] || break
  if over_budget; then say "skip the $w trace: over the budget"; continue; fi
  say "recording the $w trace under gmlake"
  rm -f "$out/$w.trace" "$out/$w.trace.gz"
  # shellcheck disable=SC2046
  timeout -k 10 "$run_timeout" env $(alloc_env gmlake) GMLAKE_TRACE_FILE="$out/$w.trace" \
    GMLAKE_STATS_FILE="$out/trace_stats_$w.json" python3 "$root/bench/gpu/train.py" --workload "$w" --allocator gmlake-tracing \
    --out "$out/trace_runs.jsonl" >>"$log" 2>&1 || say "the $w trace run failed (rc $?)"
  if [ -s "$out/$w.trace" ]; then
    gzip -9 "$out/$w.trace"
    say "$w.trace.gz: $(stat -c %s "$out/$w.trace.gz") bytes"
  fi
done

# 4. report
python3 "$root/bench/gpu/report.py" "$out" >"$out/report.md" 2>>"$log" || say "report failed"
say "done; results in $out"
cat "$out/report.md"
