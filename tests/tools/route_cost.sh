#!/usr/bin/env bash
# tests/tools/route_cost.sh SRCDIR — bench/gpu/run_route_cost.sh without a GPU: a stand-in python3
# on PATH answers for route_cost.py (its allocator's us/pair, from the environment the runner
# gave it); checks the rotation of the allocators over rounds, that each run got its allocator's
# environment, the summary's medians, and the lines of runs that could not run.
# shellcheck source=tests/tools/checks.sh
. "$(dirname "$0")/checks.sh"
mkdir -p "$tmp/bin"
cat >"$tmp/bin/python3" <<'PY'
#!/usr/bin/env bash
# route_cost.py's stand-in: --allocator A --pattern P; the time says which environment it saw
# (expandable_segments 3 us, the async backend alone 5, with LD_PRELOAD 4) plus 0.1 us x (the run's
# index mod 3); anything else (the summary's python3 -) goes to the real python3
case "$*" in *route_cost.py*) ;; *) exec "$ROUTE_TEST_PYTHON" "$@" ;; esac
while [ $# -gt 0 ]; do case $1 in --allocator) a=$2; shift ;; --pattern) p=$2; shift ;; esac; shift; done
case ${PYTORCH_CUDA_ALLOC_CONF:-}/${LD_PRELOAD:-} in
  expandable_segments:True/) t=3 ;;
  backend:cudaMallocAsync/) t=5 ;;
  backend:cudaMallocAsync/*libgmlake.so) t=4 ;;
  *) t=99 ;;
esac
n=$(wc -l <"$ROUTE_TEST_LOG" 2>/dev/null || echo 0)
echo "$a $p" >>"$ROUTE_TEST_LOG"
[ "$a" = fail ] && exit 3
printf '{"allocator":"%s","pattern":"%s","pairs":5,"us_per_pair":%s.%d,"chunks":[]}\n' "$a" "$p" "$t" "$((n % 3))"
PY
chmod +x "$tmp/bin/python3"
mkdir -p "$tmp/root/bench/gpu" "$tmp/root/build/interpose"
cp "$src/bench/gpu/run_route_cost.sh" "$src/bench/gpu/lib.sh" "$tmp/root/bench/gpu/"
touch "$tmp/root/build/interpose/libgmlake.so" "$tmp/root/bench/gpu/route_cost.py"
export ROUTE_TEST_LOG=$tmp/order ROUTE_TEST_PYTHON
ROUTE_TEST_PYTHON=$(command -v python3) || { echo "FAIL: no python3 for the summary"; exit 1; }
out=$(PATH="$tmp/bin:$PATH" ROUNDS=2 PATTERNS=plain ALLOCATORS="expandable cudaMallocAsync gmlake" \
  bash "$tmp/root/bench/gpu/run_route_cost.sh" "$tmp/out" 2>/dev/null)
check "rounds rotate the order" "expandable plain,cudaMallocAsync plain,gmlake plain,cudaMallocAsync plain,gmlake plain,expandable plain" \
  "$(paste -sd, "$tmp/order")"
check "one line a run" 6 "$(wc -l <"$tmp/out/route_cost.jsonl" | tr -d ' ')"
check "each run had its allocator's environment" 0 "$(grep -c '"us_per_pair":99' "$tmp/out/route_cost.jsonl")"
check "the summary's median and difference (gmlake)" "plain gmlake 4.15 us/pair (4.10-4.20, 2 runs) + 1.05 us" \
  "$(echo "$out" | awk '$2 == "gmlake" {print $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}')"
rm -f "$tmp/order"
out=$(PATH="$tmp/bin:$PATH" ROUNDS=1 PATTERNS=plain ALLOCATORS="expandable bogus" \
  bash "$tmp/root/bench/gpu/run_route_cost.sh" "$tmp/out2" 2>/dev/null)
check "an unknown allocator is recorded, not run" '{"pattern":"plain","allocator":"bogus","error":"unknown allocator"}' \
  "$(grep bogus "$tmp/out2/route_cost.jsonl")"
check "and said in the summary" "plain bogus unknown allocator" "$(echo "$out" | awk '$2 == "bogus" {print $1, $2, $3, $4}')"
if PATH="$tmp/bin:$PATH" ROUNDS=0 bash "$tmp/root/bench/gpu/run_route_cost.sh" "$tmp/out3" >/dev/null 2>&1; then
  echo "FAIL: ROUNDS=0 accepted"; fail=1
else echo "ok: ROUNDS=0 refused"; fi
exit $fail
