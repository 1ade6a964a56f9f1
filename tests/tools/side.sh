#!/usr/bin/env bash
# tests/tools/side.sh SRCDIR — bench/gpu/run_side.sh without a GPU: a stand-in python3 on PATH
# answers for train.py.  Checks that the runs of a round overlap in time (each waits, up to 20 s,
# for the other to have started: run one after the other, the first would give up), that each
# allocator moves on by one GPU each round and got its own environment, the result lines, the
# report's side-by-side section, and the refusal of more allocators than GPUs.
# shellcheck source=tests/tools/checks.sh
. "$(dirname "$0")/checks.sh"
mkdir -p "$tmp/bin"
cat >"$tmp/bin/python3" <<'PY'
#!/usr/bin/env bash
# train.py's stand-in: --workload W --allocator A --order N --out F.  Marks its start, waits for
# a run of another allocator of the same round to have started, then writes a result whose step
# time says which environment it saw (expandable 0.1 s, gmlake 0.11 s, else 9).
case "$*" in *train.py*) ;; *) exec "$SIDE_TEST_PYTHON" "$@" ;; esac
while [ $# -gt 0 ]; do
  case $1 in --workload) w=$2; shift ;; --allocator) a=$2; shift ;; --order) o=$2; shift ;; --out) f=$2; shift ;; esac
  shift
done
round=$((o / 2))
[ "$a" = warmup ] && round=w
touch "$SIDE_TEST_DIR/start.$round.$a.$CUDA_VISIBLE_DEVICES"
together=no
for _ in $(seq 1 200); do
  if [ "$(ls "$SIDE_TEST_DIR" | grep -c "^start\.$round\.")" -ge 2 ]; then together=yes; break; fi
  sleep 0.1
done
case ${PYTORCH_CUDA_ALLOC_CONF:-}/${LD_PRELOAD:-} in
  expandable_segments:True/) t=0.1 ;;
  backend:cudaMallocAsync/*libgmlake.so) t=0.11 ;;
  *) t=9 ;;
esac
echo "$round $a $CUDA_VISIBLE_DEVICES $together" >>"$SIDE_TEST_DIR/log"
printf '{"workload":"%s","allocator":"%s","order":%s,"first17_s_per_step":%s,"steady_s_per_step":%s,"torch_peak_allocated":0,"nvml":false,"visible_devices":"%s"}\n' \
  "$w" "$a" "$o" "$t" "$t" "$CUDA_VISIBLE_DEVICES" >>"$f"
PY
chmod +x "$tmp/bin/python3"
mkdir -p "$tmp/root/bench/gpu" "$tmp/root/build/interpose" "$tmp/state"
cp "$src/bench/gpu/run_side.sh" "$src/bench/gpu/lib.sh" "$src/bench/gpu/report.py" "$tmp/root/bench/gpu/"
touch "$tmp/root/build/interpose/libgmlake.so" "$tmp/root/bench/gpu/train.py"
export SIDE_TEST_DIR=$tmp/state SIDE_TEST_PYTHON
SIDE_TEST_PYTHON=$(command -v python3) || { echo "FAIL: no python3 for the report"; exit 1; }
out=$(PATH="$tmp/bin:$PATH" NGPU=2 ROUNDS=2 WARMUP_RUNS=1 WORKLOADS=gpt2 ALLOCATORS="expandable gmlake" \
  bash "$tmp/root/bench/gpu/run_side.sh" "$tmp/out" 2>/dev/null)
check "every run found its partner running" "" "$(grep -v ' yes$' "$tmp/state/log")"
check "each round moves every allocator on by one GPU" "0 expandable 0,0 gmlake 1,1 expandable 1,1 gmlake 0,w warmup 0,w warmup 1" \
  "$(awk '{print $1, $2, $3}' "$tmp/state/log" | sort | paste -sd,)"
check "the timed runs' lines (not the warm-up's)" 4 "$(wc -l <"$tmp/out/side.jsonl" | tr -d ' ')"
check "no run recorded as failed" 0 "$(grep -c '"error"' "$tmp/out/side.jsonl")"
check "each run had its allocator's environment" 0 "$(grep -c '"steady_s_per_step":9' "$tmp/out/side.jsonl")"
check "the report's paired rounds" "gmlake: step after warm-up over expandable's in the same round 1.100 (1.100-1.100), 2 rounds (1.100, 1.100); the faster in 0 of 2." \
  "$(echo "$out" | grep '^gmlake: step after warm-up')"
check "the report says which GPU each run had" "gpt2: GPU by round: expandable 0, 1; gmlake 1, 0" \
  "$(echo "$out" | grep '^gpt2: GPU by round')"
PATH="$tmp/bin:$PATH" NGPU=1 ALLOCATORS="expandable gmlake" bash "$tmp/root/bench/gpu/run_side.sh" "$tmp/out2" >/dev/null 2>"$tmp/err"
check "more allocators than GPUs refused" 2 "$?"
check "the refusal says why" 1 "$(grep -c 'needs 2 or more allocators and a GPU for each: 2 allocator(s), 1 GPU(s)' "$tmp/err")"
exit $fail
