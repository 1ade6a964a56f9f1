#!/usr/bin/env bash
# tiers.sh ROOT — no source file includes a header of a tier above its own (docs/ARCHITECTURE.md):
# 0 config/ include/ < 1 core/ device layer (every core/ file but the heap's) < 2 the heap
# (core/heap.h, blocks.c, arena.c, streams.c, heap_check.c) < 3 stitch/ < 4 pool/
# < 5 tools/ interpose/.  Prints every upward #include and fails if there is one.
set -euo pipefail
root=${1:?usage: tiers.sh ROOT}
cd "$root"
tier() {
  case "$1" in
    include/* | config/*) echo 0 ;;
    core/heap.h | core/blocks.c | core/arena.c | core/streams.c | core/heap_check.c) echo 2 ;;
    core/*) echo 1 ;;
    stitch/*) echo 3 ;;
    pool/*) echo 4 ;;
    *) echo 5 ;;
  esac
}
bad=0 n=0
for f in config/* core/* stitch/* pool/* tools/*.[ch] interpose/*.[ch]; do
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
  done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
done
[ "$bad" = 0 ] && echo "tiers: $n includes, none upward; 1 passed, 0 failed"
exit "$bad"
