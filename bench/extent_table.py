"""bench/extent_table.py TRACE... — the extent-settings table of docs/ARCHITECTURE.md ("Extents"):
replays every TRACE under each setting with build/tools/gmlake-replay (run from the repository root)
and prints one markdown row per setting: per trace utilization, MiB per handle (peak reserved /
chunk_create), estimated driver ms (second half) and second-half device calls; then the total ms."""
import json, subprocess, sys

T = sys.argv[1:]
if not T:
    sys.exit(__doc__)
rows = [("one chunk: `extent_size=2MiB`", ["extent_size=2MiB"]),
        ("uniform 4 MiB: `extent_share=0 extent_size=4MiB`", ["extent_share=0", "extent_size=4MiB"]),
        ("uniform 8 MiB: `extent_share=0 extent_size=8MiB`", ["extent_share=0", "extent_size=8MiB"]),
        ("uniform 16 MiB: `extent_share=0 extent_size=16MiB`", ["extent_share=0", "extent_size=16MiB"]),
        ("uniform 64 MiB: `extent_share=0 extent_size=64MiB`", ["extent_share=0", "extent_size=64MiB"]),
        ("share 320: `extent_share=320`", ["extent_share=320"]),
        ("share 400: `extent_share=400`", ["extent_share=400"]),
        ("**share 480 (default)**", []),
        ("share 512: `extent_share=512`", ["extent_share=512"]),
        ("share 640: `extent_share=640`", ["extent_share=640"]),
        ("share 768: `extent_share=768`", ["extent_share=768"])]
for name, sets in rows:
    args = ["build/tools/gmlake-replay", "--json", "--policy", "gmlake"]
    for s in sets: args += ["--set", s]
    out = subprocess.run(args + T, capture_output=True, text=True, check=True).stdout
    cells = []; tot = 0; tot2 = 0
    for l in out.splitlines():
        d = json.loads(l)
        mib = d["peak_reserved_bytes"] / max(1, d["device_calls"]["chunk_create"]) / 2**20
        ms = d["device_seconds"] * 1e3; ms2 = d["device_seconds_second_half"] * 1e3
        tot += ms; tot2 += ms2
        u = d["utilization"] * 100
        us = f"**{u:.2f}%**" if u < 99 else f"{u:.2f}%"
        cells.append(f"{us}, {mib:.1f}, {ms:.0f} ({ms2:.1f}), {d['device_calls_second_half']}")
    print(f"| {name} | " + " | ".join(cells) + f" | {tot:.0f} ({tot2:.1f}) |")
