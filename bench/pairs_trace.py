#!/usr/bin/env python3
"""bench/pairs_trace.py OUT [--one-stream] [--pairs N] — bench/gpu/pairs.cu's workload as a
gmlake-trace v1 file, for `build/tools/gmlake-replay --policy gmlake OUT`: 512 allocations live on
stream 1, then N pairs (default 22,000: the GPU benchmark's 2,000 warm-up and 20,000 timed), each
freeing a random live one and allocating a log-uniform size 512 B .. 32 MiB (seed 1); every other
free is on stream 2 (the `cross` pattern), or on stream 1 with --one-stream (the `one` pattern)."""
import math, random, sys


def main():
    usage = "usage: pairs_trace.py OUT [--one-stream] [--pairs N]"
    args = sys.argv[1:]
    if args in (["-h"], ["--help"]):
        print(usage)
        return
    one, pairs, rest = False, 22000, []
    while args:
        a = args.pop(0)
        if a == "--one-stream":
            one = True
        elif a == "--pairs":
            if not args or not args[0].isdigit() or int(args[0]) < 1:
                sys.exit(usage + " (--pairs needs a whole number of pairs, at least 1)")
            pairs = int(args.pop(0))
        elif a.startswith("-"):
            sys.exit(usage + f" (unknown option {a!r}; OUT may not start with '-')")
        else:
            rest.append(a)
    if len(rest) != 1:
        sys.exit(usage)
    out = rest[0]
    rng = random.Random(1)

    def size():
        return int(math.exp(math.log(512) + rng.random() * (math.log(32 << 20) - math.log(512))))

    lines, live, t, ptr = ["# gmlake-trace v1"], [], 0, 0
    for _ in range(512):
        ptr += 1
        live.append(ptr)
        lines.append(f"A {ptr:#x} {size()} 1 {t}")
        t += 1
    for k in range(pairs):
        i = rng.randrange(512)
        lines.append(f"F {live[i]:#x} 0 {1 if one or k % 2 == 0 else 2} {t}")
        ptr += 1
        live[i] = ptr
        lines.append(f"A {ptr:#x} {size()} 1 {t + 1}")
        t += 2
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
