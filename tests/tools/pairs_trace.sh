#!/usr/bin/env bash
# pairs_trace.sh SRC REPLAY — bench/pairs_trace.py: --help prints the usage and writes nothing (it
# once wrote a trace to a file named "--help"), an OUT that looks like an option is refused, the
# trace it writes replays, and --pairs N sets the number of pairs (a bad N is refused).
set -u
src=$(readlink -f "$1") replay=$(readlink -f "$2")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }
cd "$tmp" || exit 1
out=$(python3 "$src/bench/pairs_trace.py" --help 2>&1)
check "--help prints the usage, exit 0, no file" '[ $? -eq 0 ] && [[ "$out" == usage:* ]] && [ -z "$(ls -A)" ]'
python3 "$src/bench/pairs_trace.py" -o x.trace 2>/dev/null
check "an OUT starting with '-' is refused" '[ $? -ne 0 ] && [ -z "$(ls -A)" ]'
python3 "$src/bench/pairs_trace.py" p.trace --one-stream >/dev/null
check "the one-stream trace replays" '"$replay" --policy gmlake p.trace | grep -q "^  gmlake "'
python3 "$src/bench/pairs_trace.py" --pairs 10 q.trace
check "--pairs 10: 512 allocations, then 10 frees and 10 allocations" \
  '[ "$(grep -c "^A " q.trace)" -eq 522 ] && [ "$(grep -c "^F " q.trace)" -eq 10 ]'
python3 "$src/bench/pairs_trace.py" r.trace --pairs 0 2>/dev/null
check "--pairs 0 is refused, no file" '[ $? -ne 0 ] && [ ! -e r.trace ]'
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
