#!/usr/bin/env bash
# tests/tools/graphs_many_runner.sh SRCDIR — bench/gpu/run_graphs_many.sh without a GPU: a stand-in
# python3 on PATH answers for graphs_many.py.  Checks the order rotating by one each round, ARGS
# passed on, each run's environment (its NVML figure says which one it saw), the round and the
# allocator in each result line, a failed run and an unknown allocator recorded as errors.
# shellcheck source=tests/tools/checks.sh
. "$(dirname "$0")/checks.sh"
mkdir -p "$tmp/bin"
cat >"$tmp/bin/python3" <<'PY'
#!/usr/bin/env bash
# graphs_many.py's stand-in: an NVML peak by environment (native 100, expandable 101, async 102,
# gmlake 103, gmlake of build-old 104); the build-old one fails.
case "$*" in *graphs_many.py*) ;; *) exec "$GM_TEST_PYTHON" "$@" ;; esac
case ${PYTORCH_CUDA_ALLOC_CONF:-}/${LD_PRELOAD:-} in
  backend:native/) n=100 ;;
  expandable_segments:True/) n=101 ;;
  backend:cudaMallocAsync/) n=102 ;;
  backend:cudaMallocAsync/*build-old/interpose/libgmlake.so) echo "$n" >>"$GM_TEST_DIR/log"; exit 3 ;;
  backend:cudaMallocAsync/*build/interpose/libgmlake.so) n=103 ;;
  *) n=9 ;;
esac
shift
echo "$n $*" >>"$GM_TEST_DIR/log"
echo "graphs captured"
echo "{\"allocator\": \"x\", \"nvml_peak_mib\": $n, \"wrong_replays\": 0, \"capture_s\": 0.5}"
[ -n "${GM_TEST_KILLED:-}" ] && exit 137 # its line said, then killed (RUN_TIMEOUT) or crashed at exit
PY
chmod +x "$tmp/bin/python3"
mkdir -p "$tmp/root/bench/gpu" "$tmp/root/build/interpose" "$tmp/root/build-old/interpose" "$tmp/state"
cp "$src/bench/gpu/run_graphs_many.sh" "$src/bench/gpu/lib.sh" "$tmp/root/bench/gpu/"
touch "$tmp/root/build/interpose/libgmlake.so" "$tmp/root/build-old/interpose/libgmlake.so" \
  "$tmp/root/bench/gpu/graphs_many.py"
export GM_TEST_DIR=$tmp/state GM_TEST_PYTHON
GM_TEST_PYTHON=$(command -v python3) || { echo "FAIL: no python3"; exit 1; }
PATH="$tmp/bin:$PATH" ALLOCATORS="native expandable cudaMallocAsync gmlake bogus" ROUNDS=2 \
  ARGS="--layers 2 --batches 8,4" bash "$tmp/root/bench/gpu/run_graphs_many.sh" "$tmp/out" 2>/dev/null
res=$tmp/out/graphs_many.jsonl
check "each round rotated by one" "100,101,102,103,101,102,103,100" \
  "$(cut -d' ' -f1 "$tmp/state/log" | paste -sd,)"
check "ARGS passed on after the allocator" "--allocator native --layers 2 --batches 8,4" \
  "$(head -1 "$tmp/state/log" | cut -d' ' -f2-)"
check "eight result lines, each with its round and allocator" "native:0 expandable:0 cudaMallocAsync:0 gmlake:0 expandable:1 cudaMallocAsync:1 gmlake:1 native:1" \
  "$(python3 -c 'import json,sys
print(" ".join("%s:%d" % (r["allocator"], r["round"]) for r in map(json.loads, open(sys.argv[1])) if "round" in r))' "$res")"
check "the unknown allocator recorded, once a round" 2 "$(grep -c '"allocator":"bogus","error":"unknown allocator"' "$res")"
: >"$tmp/state/log"
PATH="$tmp/bin:$PATH" ALLOCATORS="gmlake@build-old" ROUNDS=1 \
  bash "$tmp/root/bench/gpu/run_graphs_many.sh" "$tmp/out2" 2>/dev/null
check "a failed run recorded with its status" 1 "$(grep -c '"allocator":"gmlake@build-old","error":"rc 3"' "$tmp/out2/graphs_many.jsonl")"
PATH="$tmp/bin:$PATH" GM_TEST_KILLED=1 ALLOCATORS="gmlake" ROUNDS=1 \
  bash "$tmp/root/bench/gpu/run_graphs_many.sh" "$tmp/out3" 2>/dev/null
check "a run that failed after its line: the line, and the failure recorded" "1 1" \
  "$(grep -c '"nvml_peak_mib": 103' "$tmp/out3/graphs_many.jsonl") $(grep -c '"allocator":"gmlake","error":"rc 137"' "$tmp/out3/graphs_many.jsonl")"
exit $fail
