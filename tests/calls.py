#!/usr/bin/env python3
"""calls.py ROOT BUILD — no circle of files calling each other (issue 23).

Reads every object the build made of the project's own sources (config/, core/, stitch/, tools/,
interpose/; not tests/ nor bench/) with `nm`: the global symbols each defines and the ones it uses.
File A calls file B when A uses a symbol B defines.  Prints every circle of files (a strongly
connected set of two or more: two files calling each other, directly or through others) and fails
when there is one, in any of those directories (issue 23: mechanism below, decision above, a shared
helper in a file of its own under both users; docs/ARCHITECTURE.md says who owns what).
"""
import os
import subprocess
import sys

DIRS = ("config", "core", "stitch", "tools", "interpose")


def sources(root):
    out = []
    for d in DIRS:
        for dirpath, _, files in os.walk(os.path.join(root, d)):
            out += [os.path.relpath(os.path.join(dirpath, f), root) for f in files if f.endswith(".c")]
    return out


def source_of(obj, build, srcs):
    """The source an object was compiled from: meson names build/SUBDIR/TARGET.p/PATH_WITH_UNDERSCORES.o
    (PATH relative to SUBDIR)."""
    rel = os.path.relpath(obj, build)
    subdir = os.path.dirname(os.path.dirname(rel))
    name = os.path.basename(rel)[: -len(".o")]
    for s in srcs:
        if subdir and not s.startswith(subdir + "/"):
            continue
        inner = os.path.relpath(s, subdir) if subdir else s
        if inner.replace("/", "_") == name:
            return s
    return None


def nm(obj, *flags):
    r = subprocess.run(["nm", "-P", *flags, obj], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in r.stdout.splitlines() if line.strip()}


def cycles(graph):
    """Tarjan's strongly connected components of two or more nodes."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) != 3:
        print("usage: calls.py ROOT BUILD", file=sys.stderr)
        return 2
    root, build = sys.argv[1], sys.argv[2]
    srcs = sources(root)
    defined, used = {}, {}
    for dirpath, _, files in os.walk(build):
        rel = os.path.relpath(dirpath, build)
        if rel.split(os.sep)[0] in ("tests", "bench", "meson-private", "meson-logs"):
            continue
        for f in files:
            if not f.endswith(".c.o"):
                continue
            obj = os.path.join(dirpath, f)
            src = source_of(obj, build, srcs)
            if src is None:
                continue
            defined.setdefault(src, set()).update(nm(obj, "-g", "--defined-only"))
            used.setdefault(src, set()).update(nm(obj, "-u"))
    if not defined:
        print("calls.py: no objects of the project's sources under " + build, file=sys.stderr)
        return 2
    owner = {}
    for src, syms in defined.items():
        for s in syms:
            owner.setdefault(s, set()).add(src)
    graph, why = {}, {}
    for src, syms in used.items():
        for s in syms:
            for dst in owner.get(s, ()):
                if dst != src:
                    graph.setdefault(src, set()).add(dst)
                    why.setdefault((src, dst), []).append(s)
    status = 0
    for comp in cycles(graph):
        print("FAIL: files calling each other: " + " ".join(comp))
        for a in comp:
            for b in comp:
                if (a, b) in why:
                    print("    %s -> %s: %s" % (a, b, " ".join(sorted(why[(a, b)])[:6])))
        status = 1
    if status == 0:
        print("no circle of calls in %s; %d files, %d calls between files" %
              (", ".join(d + "/" for d in DIRS), len(defined), sum(len(v) for v in graph.values())))
    return status


if __name__ == "__main__":
    sys.exit(main())
