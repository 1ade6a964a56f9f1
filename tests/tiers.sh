#!/usr/bin/env bash
# tiers.sh ROOT — the include graph follows the tiers (docs/ARCHITECTURE.md), checked two ways:
#  1. per file: no source file includes a header of a tier above its own.  Tiers:
#     0 config/ include/ < 1 core/ device layer (every core/ file but the heap's) < 2 the heap
#     (core/heap.h, blocks.c, arena.c, streams.c, bins.c, heap_check.c) < 3 stitch/ VMS (stitch.h,
#     stitch.c, cache.c, map.c) < 4 stitch/ pool (pool.h, pool.c, registry.h, registry.c)
#     < 5 tools/ interpose/.  stitch/ holds two tiers, so this is checked file by file.
#  2. per directory: the graph of includes between config/, include/, core/, stitch/, tools/ and
#     interpose/ has no cycle (tsort), and every edge goes down the order
#     interpose, tools > stitch > core > config, include.
# Prints every offending #include or cycle and fails if there is one.
set -euo pipefail
root=${1:?usage: tiers.sh ROOT}
cd "$root"
tier() {
  case "$1" in
    include/* | config/*) echo 0 ;;
    core/heap.h | core/bins.c | core/blocks.c | core/arena.c | core/streams.c | core/heap_check.c) echo 2 ;;
    core/*) echo 1 ;;
    stitch/pool.[ch] | stitch/registry.[ch]) echo 4 ;;
    stitch/*) echo 3 ;;
    *) echo 5 ;;
  esac
}
dirrank() {
  case "$1" in
    include | config) echo 0 ;;
    core) echo 1 ;;
    stitch) echo 2 ;;
    *) echo 3 ;;
  esac
}
bad=0 n=0 edges=""
for f in include/*.h config/*.[ch] core/*.[ch] stitch/*.[ch] tools/*.[ch] interpose/*.[ch]; do
  [ -f "$f" ] || continue
  while read -r inc; do
    t=""
    for c in "$(dirname "$f")/$inc" "$inc" "include/$inc"; do
      if [ -f "$c" ]; then t=$(realpath --relative-to=. "$c"); break; fi
    done
    [ -n "$t" ] || { echo "tiers: $f includes $inc, which is not in the tree"; bad=1; continue; }
    n=$((n + 1))
    if [ "$(tier "$t")" -gt "$(tier "$f")" ]; then
      echo "tiers: $f (tier $(tier "$f")) includes $t (tier $(tier "$t"))"
      bad=1
    fi
    from=${f%%/*} to=${t%%/*}
    if [ "$from" != "$to" ]; then
      edges+="$from $to"$'\n'
      if [ "$(dirrank "$to")" -ge "$(dirrank "$from")" ]; then
        echo "tiers: $f includes $t: directory $from/ must not include from $to/"
        bad=1
      fi
    fi
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done
if ! loops=$(printf '%s' "$edges" | sort -u | tsort 2>&1 >/dev/null); then
  echo "tiers: the directory include graph has a cycle:"
  echo "$loops"
  bad=1
fi
dirs=$(printf '%s' "$edges" | sort -u | tr ' ' '>' | tr '\n' ' ')
[ "$bad" = 0 ] && echo "tiers: $n includes, none upward; directory edges: $dirs(no cycle); 1 passed, 0 failed"
exit "$bad"
