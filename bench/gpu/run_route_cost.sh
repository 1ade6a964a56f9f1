#!/usr/bin/env bash
# bench/gpu/run_route_cost.sh [OUTDIR] — the host's cost of one tensor on each road into PyTorch's
# allocator (bench/gpu/route_cost.py): ROUNDS rounds (default 3) of every allocator (ALLOCATORS,
# bench/gpu/lib.sh's names; default "native expandable cudaMallocAsync gmlake") for each pattern
# (PATTERNS, default "plain recorded"), one process a run, each round starting one allocator
# later.  Writes OUTDIR/route_cost.jsonl (a line a run; a failed run's line says why) and prints,
# per pattern, each allocator's median us per pair (min-max) and its difference from the fastest.
# PAIRS pairs a run (default 20000); BUDGET (s, default 450) and RUN_TIMEOUT (default 150) as in lib.sh.
set -uo pipefail
name=route_cost logname=route_cost.log
# shellcheck source=bench/gpu/lib.sh
. "$(dirname "$0")/lib.sh"
[ -n "${ALLOCATORS:-}" ] || allocators=(native expandable cudaMallocAsync gmlake)
read -r -a patterns <<<"${PATTERNS:-plain recorded}"
rows=$out/route_cost.jsonl
: >"$rows"
record_error() { printf '{"pattern":"%s","allocator":"%s","error":"%s"}\n' "$1" "$2" "$3" >>"$rows"; }
build_missing
rounds=${ROUNDS:-3}
case $rounds in '' | *[!0-9]* | 0) echo "run_route_cost.sh: ROUNDS must be a positive whole number, not '$rounds'" >&2; exit 2 ;; esac
for r in $(seq 0 $((rounds - 1))); do
  for p in "${patterns[@]}"; do
    for i in "${!allocators[@]}"; do
      a=$(rotated "$i" "$r" 0)
      envs=$(run_env "$p" "$a") || continue
      say "round $r: $p under $a"
      # shellcheck disable=SC2086
      env $envs timeout "$run_timeout" python3 "$root/bench/gpu/route_cost.py" --allocator "$a" \
        --pattern "$p" --pairs "${PAIRS:-20000}" >>"$rows" 2>>"$log"
      run_done "$p" "$a" $?
    done
  done
done
python3 - "$rows" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for p in dict.fromkeys(r["pattern"] for r in rows):
    v = {}
    for r in rows:
        if r["pattern"] == p and "us_per_pair" in r:
            v.setdefault(r["allocator"], []).append(r["us_per_pair"])
    if not v:
        continue
    best = min(statistics.median(x) for x in v.values())
    for a, x in v.items():
        m = statistics.median(x)
        print(f"{p:9s} {a:28s} {m:7.2f} us/pair ({min(x):.2f}-{max(x):.2f}, {len(x)} runs)  +{m - best:5.2f} us")
errs = [r for r in rows if "error" in r]
for r in errs:
    print(f"{r['pattern']:9s} {r['allocator']:28s} {r['error']}")
PY
