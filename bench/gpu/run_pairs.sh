#!/usr/bin/env bash
# bench/gpu/run_pairs.sh [OUTDIR] — allocate + free pairs on one GPU (bench/gpu/pairs.cu), gmlake
# (LD_PRELOAD of build/interpose/libgmlake.so) and CUDA's own allocator (the same preload with
# GMLAKE_ENABLE=0) side by side: ROUNDS rounds (default 5), each pattern (one, cross, sync) in
# each round, the order of the two allocators alternating; PAIRS pairs a run (default 20000).
# Writes OUTDIR/pairs.jsonl (one line a run, with its allocator) and prints, per pattern, the
# median (min-max) of us per pair of each allocator and its ratio to CUDA's, with the median of
# the memory each reserved (gmlake's peak reserved; CUDA's pool's reserved high-water mark).
# ALLOCATORS (default "gmlake cuda"): also gmlake:KEY=VALUE,... (GMLAKE_KEY=VALUE); each round
# starts one allocator later.  MODES (default "one cross sync").
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-${OUT:-$root/build/gpu-bench}}
mkdir -p "$out"
bin=$root/build/gpu/pairs
[ -x "$bin" ] || { mkdir -p "$root/build/gpu" && nvcc -O2 -arch=sm_90 -I "$root/include" -o "$bin" "$root/bench/gpu/pairs.cu" -ldl; } || exit 1
lib=$root/build/interpose/libgmlake.so
: >"$out/pairs.jsonl"
read -r -a allocs <<<"${ALLOCATORS:-gmlake cuda}"
read -r -a modes <<<"${MODES:-one cross sync}"
n=${#allocs[@]}
for r in $(seq 1 "${ROUNDS:-5}"); do
  for mode in "${modes[@]}"; do
    for k in $(seq 0 $((n - 1))); do
      a=${allocs[$(((k + r) % n))]}  # each round starts one allocator later
      envs=(GMLAKE_ENABLE=1)
      case $a in
        cuda) envs=(GMLAKE_ENABLE=0) ;;
        gmlake) ;;
        gmlake:*) IFS=, read -r -a kvs <<<"${a#gmlake:}"
          for kv in "${kvs[@]}"; do envs+=("GMLAKE_$(tr '[:lower:]' '[:upper:]' <<<"${kv%%=*}")=${kv#*=}"); done ;;
        *) echo "run_pairs.sh: unknown allocator '$a' (gmlake, cuda, gmlake:KEY=VALUE,...)" >&2; exit 2 ;;
      esac
      env LD_PRELOAD="$lib" "${envs[@]}" timeout 120 "$bin" "$mode" "${PAIRS:-20000}" |
        sed "s/^{/{\"allocator\":\"$a\",\"round\":$r,/" >>"$out/pairs.jsonl"
    done
  done
done
python3 - "$out/pairs.jsonl" "$lib" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
allocs = list(dict.fromkeys(r["allocator"] for r in rows))
# a run of a gmlake label that gmlake did not serve (no libgmlake.so to preload: the loader goes on
# without it) measured CUDA's own allocator: said, and left out of gmlake's figures
for mode in ("one", "cross", "sync"):
    for a in allocs:
        k = sum(r["mode"] == mode and r["allocator"] == a and not r.get("gmlake", True) for r in rows)
        if a != "cuda" and k:
            print(f"{mode} {a}: {k} runs not served by gmlake (is {sys.argv[2]} there?): left out")
rows = [r for r in rows if r["allocator"] == "cuda" or r.get("gmlake", True)]
for mode in ("one", "cross", "sync"):
    v = {a: [r["us_per_pair"] for r in rows if r["mode"] == mode and r["allocator"] == a] for a in allocs}
    if not v.get("cuda"):
        continue
    c = statistics.median(v["cuda"])
    res = {a: [r["reserved_mib"] for r in rows if r["mode"] == mode and r["allocator"] == a
               and "reserved_mib" in r] for a in allocs}
    mib = lambda a: f"{statistics.median(res[a]):6.0f} MiB" if res[a] else "     - MiB"
    for a in allocs:
        if a == "cuda" or not v[a]:
            continue
        g = statistics.median(v[a])
        print(f"{mode:5s} {a:24s} {g:8.3f} us ({min(v[a]):.3f}-{max(v[a]):.3f}) {mib(a)}  "
              f"CUDA {c:8.3f} us ({min(v['cuda']):.3f}-{max(v['cuda']):.3f}) {mib('cuda')}  ratio {g / c:.2f}")
PY
