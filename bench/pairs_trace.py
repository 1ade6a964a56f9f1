#!/usr/bin/env python3
"""bench/pairs_trace.py OUT [--one-stream] — bench/gpu/pairs.cu's workload as a gmlake-trace v1
file, for `build/tools/gmlake-replay --policy gmlake OUT`: 512 allocations live on stream 1, then
22,000 pairs, each freeing a random live one and allocating a log-uniform size 512 B .. 32 MiB
(seed 1); every other free is on stream 2 (the `cross` pattern), or on stream 1 with
--one-stream (the `one` pattern)."""
import math, random, sys


def main():
    usage = "usage: pairs_trace.py OUT [--one-stream]"
    if len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help"):
        print(usage)
        return
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--one-stream") \
            or sys.argv[1].startswith("-"):
        sys.exit(usage + (" (OUT may not start with '-': %r)" % sys.argv[1]
                          if len(sys.argv) > 1 and sys.argv[1].startswith("-") else ""))
    one = len(sys.argv) == 3
    rng = random.Random(1)

    def size():
        return int(math.exp(math.log(512) + rng.random() * (math.log(32 << 20) - math.log(512))))

    lines, live, t, ptr = ["# gmlake-trace v1"], [], 0, 0
    for _ in range(512):
        ptr += 1
        live.append(ptr)
        lines.append(f"A {ptr:#x} {size()} 1 {t}")
        t += 1
    for k in range(22000):
        i = rng.randrange(512)
        lines.append(f"F {live[i]:#x} 0 {1 if one or k % 2 == 0 else 2} {t}")
        ptr += 1
        live[i] = ptr
        lines.append(f"A {ptr:#x} {size()} 1 {t + 1}")
        t += 2
    with open(sys.argv[1], "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
