#!/usr/bin/env bash
# live_replay.sh — the report from a live run: a job run under libgmlake with trace_file set
# (over the fake CUDA), then its trace replayed under pytorch, expandable and gmlake.
# Usage: live_replay.sh LIVE_JOB LIBGMLAKE GMLAKE_REPLAY
# By hand (models.h): pytorch holds a 12 MiB segment for the weights (cudaMalloc: its own
# stream), a 20 MiB one for the 3 and 5 MiB activations of stream 0x20 (split) and a 2 MiB small
# one: 34 MiB; expandable maps one 20 MiB page per large range (weights, stream 0x20) and a 2 MiB
# page for the small one: 42 MiB.  Peak active: 12 + 3 + 5 MiB + 7 x 64 KiB + 700000 bytes.
set -euo pipefail
job=$1 lib=$2 replay=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# (under ASan the job is instrumented and libgmlake preloaded before its runtime, as in the other
# preload tests: the link-order check is off for the job, and leak checking with it)
ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0 LD_PRELOAD=$lib GMLAKE_TRACE_FILE=$tmp/job.trace GMLAKE_SYSCONFDIR=/nonexistent \
  XDG_CONFIG_HOME=/nonexistent GMLAKE_LOG_LEVEL=error "$job"
"$replay" --json --policy pytorch,expandable,gmlake "$tmp/job.trace" > "$tmp/out.json"
python3 - "$tmp/out.json" <<'PY'
import json, sys
r = {d["policy"]: d for d in map(json.loads, open(sys.argv[1]))}
MiB = 1 << 20
want = {"pytorch": 34 * MiB, "expandable": 42 * MiB}
active = 20 * MiB + 7 * 65536 + 700000
fail = 0
for pol, res in want.items():
    if r[pol]["peak_reserved_bytes"] != res or r[pol]["peak_active_bytes"] != active:
        print(f"FAIL: {pol}: reserved {r[pol]['peak_reserved_bytes']} (want {res}), "
              f"active {r[pol]['peak_active_bytes']} (want {active})"); fail = 1
if r["gmlake"]["peak_active_bytes"] != active or r["gmlake"]["allocations"] != 25:
    print("FAIL: gmlake:", r["gmlake"]); fail = 1
if r["pytorch"]["device_calls"].get("cuda_malloc") != 3:
    print("FAIL: pytorch cudaMalloc calls:", r["pytorch"]["device_calls"]); fail = 1
print("live run replayed:", ", ".join(f"{p} {d['peak_reserved_bytes'] // MiB} MiB" for p, d in r.items()))
sys.exit(fail)
PY
