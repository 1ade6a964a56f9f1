#!/usr/bin/env bash
# bench/gpu_bench.sh [OUTDIR] — runs bench/gpu_train.py once per allocator on the GPU and writes
# one JSON line per allocator to OUTDIR/gpu_bench.jsonl (default build/gpu).  MODEL selects the
# workload (gpt2, llama_lora); the file is named gpu_bench_$MODEL.jsonl.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/gpu}
mkdir -p "$out"
lib=$root/build/interpose/libgmlake.so
f=$out/gpu_bench_${MODEL:-gpt2}.jsonl
: >"$f"
run() { echo "== $1" >&2; env "${@:2}" python3 "$root/bench/gpu_train.py" "$1" | tail -1 | tee -a "$f"; }
run native PYTORCH_CUDA_ALLOC_CONF=
run expandable_segments PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
run cudaMallocAsync PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
run gmlake PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync LD_PRELOAD=$lib GMLAKE_LOG_LEVEL=info
