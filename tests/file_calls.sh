#!/usr/bin/env bash
# file_calls.sh LIB PREFIX — no two object files of static library LIB whose member names start
# with PREFIX call each other, directly or in a loop: the graph "a uses a symbol b defines"
# among them has no cycle (tsort).  Prints the edges, or the cycle and fails.
set -euo pipefail
lib=${1:?usage: file_calls.sh LIB PREFIX} prefix=${2:?usage: file_calls.sh LIB PREFIX}
# "symbol member" pairs: members are named by their base name (thin archives list paths)
syms() {
  nm -A "$@" "$lib" 2>/dev/null | awk -v p="$prefix" -F: '{
    m = $2; sub(/.*\//, "", m); n = split($3, f, " ")
    if (index(m, p) == 1 && (f[n-1] ~ /^[TDRBCU]$/)) print f[n], m }' | sort -u
}
defs=$(syms --defined-only)
uses=$(syms -u)
edges=$(join <(echo "$uses") <(echo "$defs") | awk '$2 != $3 {print $2, $3}' | sort -u)
[ -n "$defs" ] || { echo "file_calls: no member of $lib starts with $prefix"; exit 1; }
if ! loops=$(printf '%s\n' "$edges" | tsort 2>&1 >/dev/null); then
  echo "file_calls: files of $prefix call each other in a loop:"
  echo "$loops"
  printf '%s\n' "$edges"
  exit 1
fi
printf '%s\n' "$edges" | sed 's/ / -> /'
echo "file_calls: no loop among $prefix*; 1 passed, 0 failed"
