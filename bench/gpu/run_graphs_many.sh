#!/usr/bin/env bash
# bench/gpu/run_graphs_many.sh — many CUDA graphs in one graph pool (bench/gpu/graphs_many.py)
# under each allocator, ROUNDS rounds (default 2) with the order rotating by one each round.
# Usage: [ALLOCATORS="native expandable cudaMallocAsync gmlake gmlake@build-old"] [ROUNDS=2]
#        [ARGS="--layers 48 --hidden 1024 --batches 512,504,..."] [BUDGET=450] [RUN_TIMEOUT=150]
#        bench/gpu/run_graphs_many.sh [OUTDIR]
# Allocator names as bench/gpu/lib.sh says.  Each run appends graphs_many.py's JSON line, with its
# round, to OUTDIR/graphs_many.jsonl: NVML peak above the baseline, PyTorch's peak reserved, gmlake's
# peak reserved and active, wrong replays, and the captures' wall time (all, slowest, last).
set -uo pipefail
name=run_graphs_many logname=run_graphs_many.log
source "$(dirname "$0")/lib.sh"
[ -n "${ALLOCATORS:-}" ] || allocators=(native expandable cudaMallocAsync gmlake)
rounds=${ROUNDS:-2}
res=$out/graphs_many.jsonl
record_error() { printf '{"workload":"%s","allocator":"%s","error":"%s"}\n' "$1" "$2" "$3" >>"$res"; }
build_missing
read -r -a args <<<"${ARGS:-}"
for ((r = 0; r < rounds; r++)); do
  for ((i = 0; i < ${#allocators[@]}; i++)); do
    a=$(rotated "$i" "$r" 0)
    envs=$(run_env graphs_many "$a") || continue
    say "round $r: $a"
    line=$(run_line '^\{' "$envs" python3 "$root/bench/gpu/graphs_many.py" --allocator "$a" "${args[@]}")
    rc=$?
    if [ -z "$line" ]; then run_done graphs_many "$a" "${rc:-1}" || true; [ "$rc" = 0 ] && record_error graphs_many "$a" "no result line"; continue; fi
    python3 -c 'import json,sys; d=json.loads(sys.argv[1]); d["round"]=int(sys.argv[2]); d["allocator"]=sys.argv[3]; print(json.dumps(d))' \
      "$line" "$r" "$a" >>"$res"
    run_done graphs_many "$a" "$rc" # its line said, then failed (killed, crashed at exit): said too
  done
done
say "done: $res"
