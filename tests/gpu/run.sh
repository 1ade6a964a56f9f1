#!/usr/bin/env bash
# tests/gpu/run.sh — the GPU tests: builds the C/CUDA tests with nvcc (if build/gpu lacks them),
# runs gpu_hooks under libgmlake (shared and static cudart), multi_gpu, streams_gpu (streams,
# cudaFree, empty_cache, fork), stitch_ends (stitched ranges entering partly used extents),
# stitch_patch (a stale cached range patched, and with patches off), device_reset (a program
# that resets its device and goes on, after a fault too), context_end (a context destroyed or a
# primary context released while gmlake holds its events), then
# the pytest suite (test_gpu.py, test_pytorch_route.py, test_torch_features.py).  Skips where no GPU is present.
# Usage: [GPU_C=0] [GPU_PYTEST='test_gpu.py ...'] tests/gpu/run.sh [OUTDIR]  (GPU_C=0: the pytest part only)   (logs go to OUTDIR, default build/gpu)
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build/gpu}
mkdir -p "$out" "$root/build/gpu"
if ! nvidia-smi -L >/dev/null 2>&1; then echo "tests/gpu: no GPU, skipped"; exit 0; fi
lib=$root/build/interpose/libgmlake.so
status=0
if [ "${GPU_C:-1}" != 0 ]; then
for v in shared static; do
  bin=$root/build/gpu/gpu_hooks_$v
  if [ ! -x "$bin" ]; then
    nvcc -O2 -arch=sm_90 -I "$root/include" -cudart $v -o "$bin" "$root/tests/gpu/gpu_hooks.cu" -lcuda -ldl || exit 1
  fi
  echo "== gpu_hooks ($v cudart)"
  LD_PRELOAD=$lib GMLAKE_LOG_LEVEL=info "$bin" 2>&1 | tee "$out/gpu_hooks_$v.log" || status=1
done
if [ ! -x "$root/build/gpu/multi_gpu" ]; then
  nvcc -O2 -arch=sm_90 -I "$root/include" -cudart shared -o "$root/build/gpu/multi_gpu" "$root/tests/gpu/multi_gpu.cu" -ldl || exit 1
fi
echo "== multi_gpu"
LD_PRELOAD=$lib "$root/build/gpu/multi_gpu" 2>&1 | tee "$out/multi_gpu.log" || status=1
g=$root/build/gpu
if [ ! -x "$g/semantics" ]; then
  nvcc -O2 -arch=sm_90 -I "$root/include" -cudart shared -o "$g/semantics" "$root/tests/gpu/semantics.cu" -ldl || exit 1
fi
if [ ! -x "$g/streams_gpu" ]; then
  nvcc -O2 -arch=sm_90 -I "$root/include" -cudart shared -o "$g/streams_gpu" "$root/tests/gpu/streams_gpu.cu" -ldl || exit 1
fi
if [ ! -x "$g/stitch_ends" ]; then
  nvcc -O2 -arch=sm_90 -I "$root/include" -cudart shared -o "$g/stitch_ends" "$root/tests/gpu/stitch_ends.cu" -ldl || exit 1
fi
if [ ! -x "$g/stitch_patch" ]; then
  nvcc -O2 -arch=sm_90 -I "$root/include" -cudart shared -o "$g/stitch_patch" "$root/tests/gpu/stitch_patch.cu" -ldl || exit 1
fi
if [ ! -x "$g/ipc_gpu" ]; then
  nvcc -O2 -arch=sm_90 -I "$root/include" -cudart shared -o "$g/ipc_gpu" "$root/tests/gpu/ipc_gpu.cu" -lcuda -ldl || exit 1
fi
if [ ! -x "$g/device_reset" ]; then
  nvcc -O2 -arch=sm_90 -I "$root/include" -cudart shared -o "$g/device_reset" "$root/tests/gpu/device_reset.cu" -ldl || exit 1
fi
if [ ! -x "$g/context_end" ]; then
  nvcc -O2 -arch=sm_90 -I "$root/include" -cudart shared -o "$g/context_end" "$root/tests/gpu/context_end.cu" -lcuda -ldl || exit 1
fi
if [ ! -x "$g/rtld_local_main" ]; then
  nvcc -O2 -arch=sm_90 -cudart shared -shared -Xcompiler -fPIC -o "$g/rtld_local_plugin.so" "$root/tests/gpu/rtld_local_plugin.cu" || exit 1
  cc -O2 -I "$root/include" -o "$g/rtld_local_main" "$root/tests/gpu/rtld_local_main.c" -ldl || exit 1
fi
run() { local name=$1; shift; echo "== $name"; env "$@" 2>&1 | tee "$out/$name.log"; [ "${PIPESTATUS[0]}" -eq 0 ] || status=1; }
run semantics_errors LD_PRELOAD=$lib GMLAKE_MEMORY_LIMIT=256MiB "$g/semantics" errors
run semantics_errors_cuda LD_PRELOAD=$lib GMLAKE_ENABLE=0 "$g/semantics" errors
run semantics_sticky LD_PRELOAD=$lib "$g/semantics" sticky
run semantics_peers LD_PRELOAD=$lib "$g/semantics" peers
run semantics_stream_device LD_PRELOAD=$lib "$g/semantics" stream_device
run semantics_stream_device_cuda LD_PRELOAD=$lib GMLAKE_ENABLE=0 "$g/semantics" stream_device
run rtld_local LD_PRELOAD=$lib "$g/rtld_local_main" "$g/rtld_local_plugin.so"
run rtld_local_off LD_PRELOAD=$lib GMLAKE_ENABLE=0 "$g/rtld_local_main" "$g/rtld_local_plugin.so"
for m in runtime driver sticky; do
  run device_reset_$m LD_PRELOAD=$lib "$g/device_reset" $m
  run device_reset_${m}_cuda LD_PRELOAD=$lib GMLAKE_ENABLE=0 "$g/device_reset" $m
done
for m in ctx release; do
  run context_end_$m LD_PRELOAD=$lib "$g/context_end" $m
  run context_end_${m}_cuda LD_PRELOAD=$lib GMLAKE_ENABLE=0 "$g/context_end" $m
done
run streams_gpu LD_PRELOAD=$lib "$g/streams_gpu"
run streams_gpu_events_only LD_PRELOAD=$lib GMLAKE_STREAM_WAIT=off "$g/streams_gpu"
run streams_gpu_borrow LD_PRELOAD=$lib GMLAKE_STITCH_BORROW=on "$g/streams_gpu"
run ipc_gpu LD_PRELOAD=$lib GMLAKE_EXTENT_SIZE=2MiB "$g/ipc_gpu"
run stitch_ends LD_PRELOAD=$lib GMLAKE_EXTENT_SHARE=0 GMLAKE_EXTENT_SIZE=8MiB "$g/stitch_ends"
run stitch_patch LD_PRELOAD=$lib GMLAKE_EXTENT_SHARE=0 GMLAKE_EXTENT_SIZE=2MiB "$g/stitch_patch"
run stitch_patch_off LD_PRELOAD=$lib GMLAKE_EXTENT_SHARE=0 GMLAKE_EXTENT_SIZE=2MiB GMLAKE_STITCH_PATCH=off "$g/stitch_patch"
fi
echo "== pytest"
# GPU_PYTEST: the pytest files to run (default: all four; a subset splits a run in two)
read -r -a pyfiles <<<"${GPU_PYTEST:-test_gpu.py test_pytorch_route.py test_torch_features.py test_snapshot_export.py}"
LIBGMLAKE=$lib python3 -m pytest -q "${pyfiles[@]/#/$root/tests/gpu/}" 2>&1 | tee "$out/pytest.log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
exit $status
