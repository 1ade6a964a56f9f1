#!/usr/bin/env bash
# bench/gpu/run_pairs.sh [OUTDIR] — allocate + free pairs on one GPU (bench/gpu/pairs.cu), gmlake
# (LD_PRELOAD of build/interpose/libgmlake.so) and CUDA's own allocator (the same preload with
# GMLAKE_ENABLE=0) side by side: ROUNDS rounds (default 5), each pattern (one, cross, sync) in
# each round, the order of the two allocators alternating; PAIRS pairs a run (default 20000).
# Writes OUTDIR/pairs.jsonl (one line a run, with its allocator) and prints, per pattern, the
# median (min-max) of us per pair of each allocator and gmlake's ratio.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${OUT:-$root/build/gpu-bench}}
mkdir -p "$out"
bin=$root/build/gpu/pairs
[ -x "$bin" ] || { mkdir -p "$root/build/gpu" && nvcc -O2 -arch=sm_90 -I "$root/include" -o "$bin" "$root/bench/gpu/pairs.cu" -ldl; } || exit 1
lib=$root/build/interpose/libgmlake.so
: >"$out/pairs.jsonl"
for r in $(seq 1 "${ROUNDS:-5}"); do
  for mode in one cross sync; do
    order="gmlake cuda"; [ $((r % 2)) -eq 0 ] && order="cuda gmlake"
    for a in $order; do
      en=1; [ "$a" = cuda ] && en=0
      LD_PRELOAD=$lib GMLAKE_ENABLE=$en timeout 120 "$bin" "$mode" "${PAIRS:-20000}" |
        sed "s/^{/{\"allocator\":\"$a\",\"round\":$r,/" >>"$out/pairs.jsonl"
    done
  done
done
python3 - "$out/pairs.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for mode in ("one", "cross", "sync"):
    v = {a: [r["us_per_pair"] for r in rows if r["mode"] == mode and r["allocator"] == a] for a in ("gmlake", "cuda")}
    if not v["gmlake"] or not v["cuda"]:
        continue
    g, c = statistics.median(v["gmlake"]), statistics.median(v["cuda"])
    print(f"{mode:5s} gmlake {g:8.3f} us ({min(v['gmlake']):.3f}-{max(v['gmlake']):.3f})  "
          f"CUDA {c:8.3f} us ({min(v['cuda']):.3f}-{max(v['cuda']):.3f})  gmlake/CUDA {g / c:.2f}")
PY
