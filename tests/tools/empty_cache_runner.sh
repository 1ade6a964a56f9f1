#!/usr/bin/env bash
# tests/tools/empty_cache_runner.sh SRCDIR — bench/gpu/run_empty_cache.sh without a GPU: a stand-in
# python3 on PATH answers for empty_cache_bench.py.  Checks the order rotating by one each round,
# each run's environment (its step time says which one it saw), gmlake's statistics read into the
# result line, PyTorch's peak, the trace run, and an unknown allocator recorded as an error.
# shellcheck source=tests/tools/checks.sh
. "$(dirname "$0")/checks.sh"
mkdir -p "$tmp/bin"
cat >"$tmp/bin/python3" <<'PY'
#!/usr/bin/env bash
# empty_cache_bench.py's stand-in: a step time by environment (native 0.03, expandable 0.031,
# gmlake 0.04, gmlake with a setting 0.05), a stats file and a trace where asked.
case "$*" in *empty_cache_bench.py*) ;; *) exec "$EC_TEST_PYTHON" "$@" ;; esac
case ${PYTORCH_CUDA_ALLOC_CONF:-}/${LD_PRELOAD:-}/${GMLAKE_EXTENT_SHARE:-} in
  backend:native//) t=0.03 ;;
  expandable_segments:True//) t=0.031 ;;
  backend:cudaMallocAsync/*/build/interpose/libgmlake.so/) t=0.04 ;;
  backend:cudaMallocAsync/*/build/interpose/libgmlake.so/120) t=0.05 ;;
  backend:cudaMallocAsync/*build-old/interpose/libgmlake.so/) exit 3 ;; # a run that fails
  */*libgmlake.so/) t=0.06 ;; # gmlake's trace run: no PyTorch setting
  *) t=9 ;;
esac
echo "${STEPS:-} $t" >>"$EC_TEST_DIR/log"
if [ -n "${EC_TEST_KILLED:-}" ]; then # its result said, then killed before its statistics were written
  echo "ok median step $t first4 0.9 reserved_now 1800 MiB loss 0.992599 torch_peak_reserved 5000 MiB"
  exit 137
fi
[ -n "${GMLAKE_STATS_FILE:-}" ] && printf '{"device":0,"peak_active_bytes":4974513804,"peak_reserved_bytes":4976541696,"stitches":783,"device_calls":{"chunk_create":3510},"device_seconds":0.47}\n{"device":1}\n' >"$GMLAKE_STATS_FILE"
[ -n "${GMLAKE_TRACE_FILE:-}" ] && echo "A 1 2 0 3" >"$GMLAKE_TRACE_FILE"
echo "ok median step $t first4 0.9 reserved_now 1800 MiB loss 0.992599 torch_peak_reserved 5000 MiB"
PY
chmod +x "$tmp/bin/python3"
mkdir -p "$tmp/root/bench/gpu" "$tmp/root/build/interpose" "$tmp/root/build-old/interpose" "$tmp/state"
cp "$src/bench/gpu/run_empty_cache.sh" "$src/bench/gpu/lib.sh" "$tmp/root/bench/gpu/"
touch "$tmp/root/build/interpose/libgmlake.so" "$tmp/root/build-old/interpose/libgmlake.so" \
  "$tmp/root/bench/gpu/empty_cache_bench.py"
export EC_TEST_DIR=$tmp/state EC_TEST_PYTHON
EC_TEST_PYTHON=$(command -v python3) || { echo "FAIL: no python3"; exit 1; }
PATH="$tmp/bin:$PATH" ALLOCATORS="native expandable gmlake gmlake:extent_share=120 bogus" ROUNDS=2 \
  STEPS=7 TRACE=1 bash "$tmp/root/bench/gpu/run_empty_cache.sh" "$tmp/out" 2>/dev/null
res=$tmp/out/empty_cache.jsonl
check "the trace run first, then the rounds, each rotated by one, STEPS passed on" \
  "7 0.06,7 0.03,7 0.031,7 0.04,7 0.05,7 0.031,7 0.04,7 0.05,7 0.03" "$(paste -sd, "$tmp/state/log")"
check "the trace kept, compressed" 1 "$(ls "$tmp/out" | grep -c '^empty_cache.trace.gz$')"
check "eight timed runs" 8 "$(grep -c '"median_step_s"' "$res")"
check "the unknown allocator recorded, once a round" 2 "$(grep -c '"allocator": *"bogus".*"error": *"unknown allocator"' "$res")"
check "gmlake's line carries its statistics" '0.04 4976541696 3510 783 5000' \
  "$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if r.get("allocator") == "gmlake" and r["round"] == 0:
        print(r["median_step_s"], r["peak_reserved_bytes"], r["creates"], r["stitches"], r["torch_peak_reserved_mib"])' "$res")"
check "PyTorch's runs carry no gmlake statistics" 0 "$(grep '"native"' "$res" | grep -c peak_reserved_bytes)"
PATH="$tmp/bin:$PATH" ALLOCATORS="gmlake@build-old" ROUNDS=1 \
  bash "$tmp/root/bench/gpu/run_empty_cache.sh" "$tmp/out2" 2>/dev/null
check "a failed run recorded with its own exit status" 1 \
  "$(grep -c '"allocator":"gmlake@build-old","error":"rc 3"' "$tmp/out2/empty_cache.jsonl")"
# a run killed after its result line, before libgmlake wrote its statistics, into a folder that
# holds an earlier invocation's statistics file of the same round and place: not read as this
# run's, and the failure recorded
mkdir -p "$tmp/out3"
earlier='{"device":0,"peak_active_bytes":1,"peak_reserved_bytes":2,"stitches":3,"device_calls":{"chunk_create":4},"device_seconds":5}'
echo "$earlier" >"$tmp/out3/stats_0_0.json"
PATH="$tmp/bin:$PATH" EC_TEST_KILLED=1 ALLOCATORS="gmlake" ROUNDS=1 \
  bash "$tmp/root/bench/gpu/run_empty_cache.sh" "$tmp/out3" 2>/dev/null
check "no statistics of an earlier invocation in the killed run's line" "0.04 -" \
  "$(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    if "median_step_s" in r:
        print(r["median_step_s"], r.get("peak_reserved_bytes", "-"))' "$tmp/out3/empty_cache.jsonl")"
check "the killed run recorded with its status" 1 \
  "$(grep -c '"allocator":"gmlake","error":"rc 137"' "$tmp/out3/empty_cache.jsonl")"
# nor in a PyTorch allocator's line, whose place an earlier invocation's gmlake had
echo "$earlier" >"$tmp/out3/stats_0_0.json"
PATH="$tmp/bin:$PATH" ALLOCATORS="native" ROUNDS=1 bash "$tmp/root/bench/gpu/run_empty_cache.sh" "$tmp/out3" 2>/dev/null
check "no gmlake statistics of an earlier invocation in native's line" 0 \
  "$(grep '"native"' "$tmp/out3/empty_cache.jsonl" | grep -c peak_reserved_bytes)"
exit $fail
