#!/usr/bin/env bash
# bench/gpu/run_dist.sh [OUTDIR] — DDP and FSDP2 under each allocator (issues 20 and 21):
# bench/gpu/dist_train.py launched with torchrun (python3 -m torch.distributed.run --standalone
# --nproc_per_node=NPROC), one launch per run, the allocator's environment set on torchrun itself
# so that every rank inherits it (LD_PRELOAD included).  Rank 0 appends one line per run to
# OUTDIR/dist.jsonl; then report.py writes OUTDIR/report.md (step time and NVML peak per rank:
# medians and min-max per allocator and mode, gmlake's ratio to the best PyTorch allocator).
# Rounds are outermost (round 1 of every mode, then round 2, ...), so a BUDGET cut shortens
# every mode alike.
# Settings: MODES (default "ddp fsdp2"), NPROC (default: the number of GPUs nvidia-smi lists, or 1),
# ALLOCATORS (default "expandable cudaMallocAsync gmlake"; also gmlake-native and
# gmlake:KEY=VALUE,...: bench/gpu/lib.sh), REPEATS (rounds of the allocators per mode, default 3;
# each round, and each mode, starts one allocator later), WARMUP_RUNS (untimed launches before each
# mode's first round, under the first allocator, written to dist_warmup.jsonl; default 1), WARMUP
# and STEADY (steps per run: default 4 and 10), BATCH, LAYERS, CKPT (dist_train.py), RUN_TIMEOUT
# (seconds per launch, default 180; a run past it is killed and recorded as an error), BUDGET
# (seconds; runs that would start after it are skipped and recorded so; default 450),
# TRACE_MODES (default none: e.g. "fsdp2 ddp"): after the timed runs, one more launch of each
# under gmlake recording its trace (OUTDIR/MODE.trace.gz, GMLAKE_TRACE_FILE) and gmlake's own
# statistics of that run (OUTDIR/trace_stats_MODE.json); with several processes each rank's
# (MODE.rankR.trace.gz, trace_stats_MODE.rankR.json): bench/traces/jobs keeps such pairs.
# PROFILE=DIR (read by dist_train.py on every rank): torch.profiler over the timed steps after the
# first two, each rank's op tables and kernel timeline (idle gaps, compute/communication overlap:
# bench/gpu/timeline.py) in DIR/profile_MODE_ALLOCATOR_rankR.txt, the timeline also in dist.jsonl.
# OUTDIR defaults to $OUT, else build/gpu-bench.  Uses build/interpose/libgmlake.so as carried;
# builds with meson into build-gpu/ only where it is absent.
set -uo pipefail
name=run_dist logname=run_dist.log
RUN_TIMEOUT=${RUN_TIMEOUT:-180}
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
read -r -a modes <<<"${MODES:-ddp fsdp2}"
nproc=${NPROC:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
[ "$nproc" -ge 1 ] 2>/dev/null || nproc=1
export WARMUP=${WARMUP:-4} STEADY=${STEADY:-10}
build_missing
dist=$out/dist.jsonl
say "modes ${modes[*]}, allocators ${allocators[*]}, $nproc process(es), ${REPEATS:-3} round(s), budget ${budget}s"

record_error() { # mode allocator what
  printf '{"mode":"%s","allocator":"%s","world_size":%d,"error":"%s"}\n' "$1" "$2" "$nproc" "$3" >>"$dist"
}
launch() { # mode allocator-label order result-file envs...
  local m=$1 a=$2 order=$3 res=$4
  shift 4
  # env after timeout: torchrun and its ranks get the allocator; timeout signals the whole group
  timeout -k 10 "$run_timeout" env "$@" python3 -m torch.distributed.run --standalone \
    --nproc_per_node="$nproc" "$root/bench/gpu/dist_train.py" --mode "$m" --allocator "$a" \
    --order "$order" --out "$res" >>"$log" 2>&1
}
run_one() { # mode allocator order
  local m=$1 a=$2 order=$3 envs
  envs=$(run_env "$m" "$a") || return
  say "$m under $a ($nproc process(es)): $envs"
  # shellcheck disable=SC2086
  launch "$m" "$a" "$order" "$dist" $envs
  run_done "$m" "$a" $?
}

n=${#allocators[@]}
for m in "${modes[@]}"; do
  for _ in $(seq 1 "${WARMUP_RUNS:-1}"); do
    over_budget && break
    say "$m: untimed warm-up launch"
    # shellcheck disable=SC2046
    launch "$m" warmup 0 "$out/dist_warmup.jsonl" $(alloc_env "${allocators[0]}") ||
      say "warm-up of $m failed (rc $?)"
  done
done
# rounds outermost, so that a budget cut shortens every mode alike
for r in $(seq 0 $((${REPEATS:-3} - 1))); do
  for i in "${!modes[@]}"; do
    for j in $(seq 0 $((n - 1))); do
      run_one "${modes[$i]}" "$(rotated "$i" "$r" "$j")" "$((r * n + j))"
    done
  done
done

# traces (separate gmlake runs; their results go to dist_traces.jsonl, not dist.jsonl)
read -r -a trace_modes <<<"${TRACE_MODES-}"
for m in "${trace_modes[@]}"; do
  [ -f "$lib" ] || break
  if over_budget; then say "skip the $m trace: over the budget"; continue; fi
  say "recording the $m trace under gmlake"
  rm -f "$out/$m.trace" "$out/$m.trace.gz" "$out/$m".rank*.trace "$out/$m".rank*.trace.gz \
    "$out/trace_stats_$m.json" "$out/trace_stats_$m".rank*.json
  # shellcheck disable=SC2046
  launch "$m" gmlake-tracing 0 "$out/dist_traces.jsonl" $(alloc_env gmlake) \
    GMLAKE_TRACE_FILE="$out/$m.trace" GMLAKE_STATS_FILE="$out/trace_stats_$m.json" ||
    say "the $m trace run failed (rc $?)"
  # one process: MODE.trace; several: each rank's own, MODE.rankR.trace (and
  # trace_stats_MODE.rankR.json), as libgmlake names them
  for f in "$out/$m.trace" "$out/$m".rank*.trace; do
    [ -s "$f" ] || continue
    gzip -9 "$f"
    say "$(basename "$f").gz: $(stat -c %s "$f.gz") bytes"
  done
done

python3 "$root/bench/gpu/report.py" "$out" >"$out/report.md" 2>>"$log" || say "report failed"
say "done; results in $out"
cat "$out/report.md"
