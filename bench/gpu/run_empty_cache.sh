#!/usr/bin/env bash
# bench/gpu/run_empty_cache.sh — the empty_cache-every-step loop (bench/gpu/empty_cache_bench.py)
# under each allocator, ROUNDS rounds (default 2) with the order rotating by one each round.
# Usage: [ALLOCATORS="native expandable gmlake gmlake:extent_share=120 gmlake@build-old"]
#        [ROUNDS=2] [STEPS=20] [BUDGET=450] [RUN_TIMEOUT=120] [TRACE=1]
#        bench/gpu/run_empty_cache.sh [OUTDIR]
# Allocator names as bench/gpu/lib.sh says.  Each run appends one JSON line to OUTDIR/empty_cache.jsonl:
# allocator, round, median step of steps 4.. (s), first four steps (s), loss, PyTorch's
# torch.cuda.max_memory_reserved() (MiB), and for gmlake's
# allocators the figures of its statistics (GMLAKE_STATS_FILE, kept as stats_<round>_<n>.json).
# TRACE=1 first records the loop's allocation trace under plain gmlake (OUTDIR/empty_cache.trace.gz,
# untimed) for gmlake-replay.
set -uo pipefail
name=run_empty_cache logname=run_empty_cache.log
source "$(dirname "$0")/lib.sh"
[ -n "${ALLOCATORS:-}" ] || allocators=(native expandable gmlake)
rounds=${ROUNDS:-2}
res=$out/empty_cache.jsonl
record_error() { printf '{"workload":"%s","allocator":"%s","error":"%s"}\n' "$1" "$2" "$3" >>"$res"; }
build_missing
if [ "${TRACE:-0}" = 1 ]; then
  say "recording the trace under gmlake"
  env GMLAKE_TRACE_FILE="$out/empty_cache.trace" LD_PRELOAD="$lib" STEPS="${STEPS:-20}" \
    timeout -k 5 "$run_timeout" python3 "$root/bench/gpu/empty_cache_bench.py" >>"$log" 2>&1 ||
    say "trace run failed (rc $?)"
  [ -f "$out/empty_cache.trace" ] && gzip -f "$out/empty_cache.trace"
fi
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#allocators[@]}; i++)); do
    a=$(rotated "$i" "$r" 0)
    envs=$(run_env empty_cache "$a") || continue
    st=$out/stats_${r}_$i.json
    # an earlier invocation's file of this round and place is not this run's (one that ends before
    # libgmlake writes its own, or a PyTorch allocator's)
    rm -f "$st"
    uses_gmlake "$a" && envs+=" GMLAKE_STATS_FILE=$st"
    say "round $r: $a"
    line=$(run_line '^ok ' "$envs STEPS=${STEPS:-20}" python3 "$root/bench/gpu/empty_cache_bench.py")
    rc=$?
    if [ -z "$line" ]; then run_done empty_cache "$a" "${rc:-1}" || true; [ "$rc" = 0 ] && record_error empty_cache "$a" "no result line"; continue; fi
    python3 - "$a" "$r" "$line" "$st" >>"$res" <<'EOF'
import json, os, sys
a, r, line, st = sys.argv[1:5]
w = line.split()
row = {"workload": "empty_cache", "allocator": a, "round": int(r),
       "median_step_s": float(w[w.index("step") + 1]), "first4_s": float(w[w.index("first4") + 1]),
       "loss": float(w[w.index("loss") + 1])}
if "torch_peak_reserved" in w:
    row["torch_peak_reserved_mib"] = int(w[w.index("torch_peak_reserved") + 1])
if os.path.exists(st):
    s = json.loads(open(st).readline())  # device 0's line
    for k in ("peak_reserved_bytes", "peak_active_bytes", "stitches", "device_seconds"):
        row[k] = s[k]
    row["creates"] = s["device_calls"]["chunk_create"]
print(json.dumps(row))
EOF
    run_done empty_cache "$a" "$rc" # its line said, then failed (killed, crashed at exit): said too
  done
done
say "done: $res"
