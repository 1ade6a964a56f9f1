#!/usr/bin/env bash
# tests/tools/fit_runner.sh SRCDIR — bench/gpu/run_fit.sh without a GPU: a stand-in ballast
# (build/gpu/ballast) and a stand-in python3 for train.py.  Checks the ballast started with each
# budget and without LD_PRELOAD, and stopped after its run; the order rotating by one each budget;
# a run that ran out of memory recorded with its status and oom true; a finished one with its NVML
# peak above its baseline and its peak reserved; a ballast that is never ready, or that ends during
# its run (the job had more memory than its budget), recorded as an error, and the runs after it
# made.
# shellcheck source=tests/tools/checks.sh
. "$(dirname "$0")/checks.sh"
mkdir -p "$tmp/bin" "$tmp/root/bench/gpu" "$tmp/root/build/interpose" "$tmp/root/build/gpu" "$tmp/state"
cat >"$tmp/root/build/gpu/ballast" <<'SH'
#!/usr/bin/env bash
# the ballast's stand-in: says its budget (and any LD_PRELOAD) in the log, is ready unless the
# budget is 13, dies once ready at 30, never ends at 40 (stuck), holds until its input ends, then
# says so
echo "ballast $1 preload=${LD_PRELOAD:-none}" >>"$FIT_TEST_DIR/log"
[ "$1" = 13 ] && exit 1
echo "ready $(($1 - 1))"
[ "$1" = 30 ] && exit 1
[ "$1" = 40 ] && exec sleep 1000
cat >/dev/null
echo "ballast $1 done" >>"$FIT_TEST_DIR/log"
SH
cat >"$tmp/bin/python3" <<'PY'
#!/usr/bin/env bash
# train.py's stand-in: under expandable segments at budget 10 it runs out of memory (exit 1);
# else it writes a result line with NVML 5000 MiB above a 1000 MiB baseline.  dist_train.py's
# under torchrun: a result line with one figure per rank
case "$*" in
  "-m torch.distributed.run --standalone --nproc_per_node=1 "*dist_train.py" --mode ddp --allocator "*)
    all="$*"
    out=${all##*--out }
    echo "dist $all" >>"$FIT_TEST_DIR/log"
    if [ -n "${FIT_TEST_NO_NVML:-}" ]; then # dist_train.py where NVML could not be read: zeros
      echo '{"nvml": false, "nvml_peak_used_mib": [0.0], "nvml_baseline_used_mib": [0.0], "torch_peak_reserved_mib": [5000.2], "losses": [3.0, 2.0], "first_s_per_step": 0.5, "median_s_per_step": 0.2}' >>"$out"
      exit 0
    fi
    echo '{"nvml": true, "nvml_peak_used_mib": [7000.4], "nvml_baseline_used_mib": [1000.0], "torch_peak_reserved_mib": [5000.2], "losses": [3.0, 2.0], "first_s_per_step": 0.5, "median_s_per_step": 0.2}' >>"$out"
    exit 0 ;;
  *train.py*) ;;
  *) exec "$FIT_TEST_PYTHON" "$@" ;;
esac
all="$*"
out=${all##*--out }
out=${out%% *}
last=$(tail -1 "$FIT_TEST_DIR/log")
echo "run ${PYTORCH_CUDA_ALLOC_CONF:-} after: $last" >>"$FIT_TEST_DIR/log"
if [ "${PYTORCH_CUDA_ALLOC_CONF:-}" = expandable_segments:True ] && [ "$last" = "ballast 10 preload=none" ]; then
  echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB" >&2
  exit 1
fi
if [ -n "${FIT_TEST_NO_NVML:-}" ]; then # train.py where NVML could not be read: its figures are zeros
  echo '{"nvml": false, "nvml_peak_used": 0, "nvml_baseline_used": 0, "torch_peak_reserved": 4194304000, "loss": 2.5, "first17_s_per_step": 0.25, "steady_s_per_step": 0.125}' >>"$out"
  exit 0
fi
echo '{"nvml": true, "nvml_peak_used": 6291456000, "nvml_baseline_used": 1048576000, "torch_peak_reserved": 4194304000, "loss": 2.5, "first17_s_per_step": 0.25, "steady_s_per_step": 0.125}' >>"$out"
PY
chmod +x "$tmp/bin/python3" "$tmp/root/build/gpu/ballast"
cp "$src/bench/gpu/run_fit.sh" "$src/bench/gpu/lib.sh" "$tmp/root/bench/gpu/"
touch "$tmp/root/build/interpose/libgmlake.so" "$tmp/root/bench/gpu/train.py"
export FIT_TEST_DIR=$tmp/state FIT_TEST_PYTHON
FIT_TEST_PYTHON=$(command -v python3) || { echo "FAIL: no python3"; exit 1; }
PATH="$tmp/bin:$PATH" ALLOCATORS="gmlake expandable" BUDGETS="10 20" LD_PRELOAD= \
  bash "$tmp/root/bench/gpu/run_fit.sh" "$tmp/out" 2>/dev/null
res=$tmp/out/fit.jsonl
check "each run after a ballast of its budget, without LD_PRELOAD, stopped after the run" \
  "ballast 10 preload=none|run backend:cudaMallocAsync after: ballast 10 preload=none|ballast 10 done|ballast 10 preload=none|run expandable_segments:True after: ballast 10 preload=none|ballast 10 done|ballast 20 preload=none|run expandable_segments:True after: ballast 20 preload=none|ballast 20 done|ballast 20 preload=none|run backend:cudaMallocAsync after: ballast 20 preload=none|ballast 20 done" \
  "$(paste -sd'|' "$tmp/state/log")"
check "four result lines: allocator budget free rc oom nvml reserved step times" \
  "gmlake 10 9 0 False 5000 4000 0.25 0.125 expandable 10 9 1 True - - - - expandable 20 19 0 False 5000 4000 0.25 0.125 gmlake 20 19 0 False 5000 4000 0.25 0.125" \
  "$(python3 -c 'import json,sys
print(" ".join("%s %d %d %d %s %s %s %s %s" % (r["allocator"], r["budget_mib"], r["free_mib"], r["rc"], r["oom"],
      r.get("nvml_peak_mib", "-"), r.get("torch_peak_reserved_mib", "-"), r.get("first17_s", "-"),
      r.get("steady_s", "-")) for r in map(json.loads, open(sys.argv[1]))))' "$res")"
: >"$tmp/state/log"
PATH="$tmp/bin:$PATH" ALLOCATORS="gmlake" BUDGETS="13 30 20" bash "$tmp/root/bench/gpu/run_fit.sh" "$tmp/out2" 2>/dev/null
check "a ballast never ready, one that died during its run: recorded, the next budget run, exit 0" \
  "0|error ballast not ready for 13 MiB|error the ballast of 30 MiB ended during the run (exit 1)|result 20 0" \
  "$?|$(python3 -c 'import json,sys
print("|".join("error " + r["error"] if "error" in r else "result %d %d" % (r["budget_mib"], r["rc"])
               for r in map(json.loads, open(sys.argv[1]))))' "$tmp/out2/fit.jsonl")"
check "a run for each ready ballast (30, 20), none for 13" "2" "$(grep -c '^run' "$tmp/state/log")"
: >"$tmp/state/log"
PATH="$tmp/bin:$PATH" WORKLOAD=ddp ALLOCATORS="gmlake" BUDGETS="20" bash "$tmp/root/bench/gpu/run_fit.sh" "$tmp/out3" 2>/dev/null
check "ddp: dist_train.py under torchrun, rank 0's figures, its warm-up and median steps" \
  "0 1 ddp 6000 5000 2.0 0.5 0.2" "$? $(grep -c '^dist .*dist_train.py --mode ddp --allocator gmlake --out ' "$tmp/state/log") $(python3 -c 'import json,sys
r = json.loads(open(sys.argv[1]).readline())
print(r["workload"], r["nvml_peak_mib"], r["torch_peak_reserved_mib"], r["loss"], r["first_s"], r["steady_s"])' "$tmp/out3/fit.jsonl")"
# where NVML could not be read the job writes zeros: no NVML peak in fit.jsonl rather than 0 MiB
PATH="$tmp/bin:$PATH" FIT_TEST_NO_NVML=1 ALLOCATORS="gmlake" BUDGETS="20" bash "$tmp/root/bench/gpu/run_fit.sh" "$tmp/out5" 2>/dev/null
PATH="$tmp/bin:$PATH" FIT_TEST_NO_NVML=1 WORKLOAD=ddp ALLOCATORS="gmlake" BUDGETS="20" bash "$tmp/root/bench/gpu/run_fit.sh" "$tmp/out5" 2>/dev/null
check "no NVML: no NVML peak (train.py, dist_train.py), the rest kept" "gpt2 - 4000 ddp - 5000" \
  "$(python3 -c 'import json,sys
print(" ".join("%s %s %s" % (r["workload"], r.get("nvml_peak_mib", "-"), r["torch_peak_reserved_mib"])
               for r in map(json.loads, open(sys.argv[1]))))' "$tmp/out5/fit.jsonl")"
start=$SECONDS
PATH="$tmp/bin:$PATH" ALLOCATORS="gmlake" BUDGETS="40 20" BALLAST_WAIT=1 bash "$tmp/root/bench/gpu/run_fit.sh" "$tmp/out4" 2>/dev/null
check "a ballast that never ends: killed, an error line, the next budget run, within seconds" \
  "0 1 1 yes" "$? $(grep -c '"error":"the ballast of 40 MiB ended during the run (no status)"' "$tmp/out4/fit.jsonl") $(grep -c '"budget_mib": 20' "$tmp/out4/fit.jsonl") $([ $((SECONDS - start)) -lt 30 ] && echo yes || echo no)"
check "no stuck ballast left behind" "0" "$(pgrep -f 'sleep 1000' -c || true)"
exit $fail
