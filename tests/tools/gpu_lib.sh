#!/usr/bin/env bash
# tests/tools/gpu_lib.sh SRCDIR — bench/gpu/lib.sh's allocators (what run_all.sh and run_dist.sh
# launch): each allocator's environment, settings, another build (gmlake@DIR), and the refusals.
# shellcheck source=tests/tools/checks.sh
. "$(dirname "$0")/checks.sh"
refused() { # allocator: alloc_env must fail
  if alloc_env "$1" >/dev/null; then echo "FAIL: '$1' accepted"; fail=1; else echo "ok: '$1' refused"; fi
}
name=gpu_lib logname=gpu_lib.log
set -- "$tmp/out"
# shellcheck source=bench/gpu/lib.sh
. "$src/bench/gpu/lib.sh"
check "the repository root" "$(cd "$src" && pwd)" "$root"
check "expandable" "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" "$(alloc_env expandable)"
check "gmlake" "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync LD_PRELOAD=$root/build/interpose/libgmlake.so GMLAKE_LOG_LEVEL=info" \
  "$(alloc_env gmlake)"
check "gmlake with settings" \
  "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync LD_PRELOAD=$root/build/interpose/libgmlake.so GMLAKE_LOG_LEVEL=info GMLAKE_EXTENT_SHARE=0 GMLAKE_EXTENT_SIZE=64MiB" \
  "$(alloc_env gmlake:extent_share=0,extent_size=64MiB)"
check "another build" "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync LD_PRELOAD=$root/build-old/interpose/libgmlake.so GMLAKE_LOG_LEVEL=info" \
  "$(alloc_env gmlake@build-old)"
check "another build with settings" \
  "PYTORCH_CUDA_ALLOC_CONF=backend:native LD_PRELOAD=$root/build-old/interpose/libgmlake.so GMLAKE_LOG_LEVEL=info GMLAKE_STITCH=off" \
  "$(alloc_env gmlake-native@build-old:stitch=off)"
for a in bogus gmlake@ 'gmlake@../x' gmlake@a/b gmlake@.. expandable@build-old native:stitch=off gmlake:STITCH; do
  refused "$a"
done
# an allocator listed twice is refused before anything runs: report.py pairs runs by round (a
# run's order // the allocators it lists), which a repeated label would shift (session 30: a
# round of "expandable gmlake gmlake" paired expandable with the wrong runs)
rep=$( (ALLOCATORS="expandable gmlake gmlake"; name=dup logname=dup.log; set -- "$tmp/dup"
  # shellcheck source=bench/gpu/lib.sh
  . "$src/bench/gpu/lib.sh"; echo "sourced") 2>&1)
check "a repeated allocator: status 2" 2 "$( (ALLOCATORS="gmlake expandable gmlake"; name=dup logname=dup.log
  set -- "$tmp/dup"; . "$src/bench/gpu/lib.sh") >/dev/null 2>&1; echo $?)"
case "$rep" in
  *"ALLOCATORS lists 'gmlake' twice"*) echo "ok: a repeated allocator named" ;;
  *) echo "FAIL: a repeated allocator: '$rep'"; fail=1 ;;
esac
# run_env: a run whose library is missing is recorded as such, and does not start
record_error() { echo "$1|$2|$3" >>"$tmp/errors"; }
if run_env gpt2 gmlake@no-such-build >/dev/null; then echo "FAIL: a missing build started"; fail=1; fi
check "the missing build recorded" "gpt2|gmlake@no-such-build|no $root/no-such-build/interpose/libgmlake.so" \
  "$(cat "$tmp/errors" 2>/dev/null)"
root=$tmp/repo # lib_of reads the root at each call: a build that exists, outside the source tree
mkdir -p "$root/build-new/interpose" && : >"$root/build-new/interpose/libgmlake.so"
check "a build that exists starts" \
  "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync LD_PRELOAD=$root/build-new/interpose/libgmlake.so GMLAKE_LOG_LEVEL=info" \
  "$(run_env gpt2 gmlake@build-new)"
exit $fail
