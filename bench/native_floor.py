#!/usr/bin/env python3
"""bench/native_floor.py TRACE... — the least memory PyTorch's native caching allocator could run
each trace in, by its model (`gmlake replay --policy pytorch`): the smallest device capacity
(bisection, 2 MiB steps) at which the model completes, releasing its cached segments and retrying
whenever a cudaMalloc would not fit, as PyTorch does.  That is what any route keeping the native
allocator could reach if gmlake, beneath it, made PyTorch empty its cache whenever the pool would
grow: a floor set by the native allocator's own segments (blocks split inside 2 MiB and 20 MiB
segments, which gmlake cannot see into).  Printed beside the native model at full capacity,
expandable segments' model and gmlake's pool (MiB).  Needs build/tools/gmlake-replay."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPLAY = os.path.join(ROOT, "build", "tools", "gmlake-replay")


def run(trace, cap_mib, policy):
    r = subprocess.run([REPLAY, "--json", "--policy", policy, "--capacity", f"{cap_mib}MiB", trace],
                       capture_output=True, text=True)
    for line in r.stdout.splitlines():
        j = json.loads(line)
        if j["policy"] == policy:
            return j
    sys.exit(f"native_floor.py: {trace}: gmlake replay gave nothing for {policy}: {r.stderr.strip()}")


def main():
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(sys.argv) > 1 else 2
    if not os.access(REPLAY, os.X_OK):
        sys.exit(f"native_floor.py: {REPLAY} is missing: build first (meson setup build && ninja -C build)")
    print(f"{'trace':26s} {'active':>8s} {'native':>8s} {'floor':>8s} {'expand.':>8s} {'gmlake':>8s}")
    for t in sys.argv[1:]:
        base = {p: run(t, 140 << 10, p) for p in ("pytorch", "expandable", "gmlake")}
        mib = {p: base[p]["peak_reserved_bytes"] / 2**20 for p in base}
        active = base["pytorch"]["peak_active_bytes"] / 2**20
        lo, hi = int(active) // 2 * 2, int(mib["pytorch"]) // 2 * 2 + 2  # fails at lo, completes at hi
        while hi - lo > 2:
            mid = (lo + hi) // 4 * 2
            if run(t, mid, "pytorch")["complete"]:
                hi = mid
            else:
                lo = mid
        print(f"{os.path.basename(t)[:26]:26s} {active:8.0f} {mib['pytorch']:8.0f} {hi:8d} "
              f"{mib['expandable']:8.0f} {mib['gmlake']:8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
