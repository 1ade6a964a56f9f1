#!/usr/bin/env bash
# launcher.sh — `gmlake run`: the environment it gives the program and its exit status.
# Usage: launcher.sh GMLAKE_SCRIPT LIBGMLAKE
set -u
g=$1 lib=$2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }
out=$(env -u PYTORCH_CUDA_ALLOC_CONF -u XLA_PYTHON_CLIENT_ALLOCATOR LD_PRELOAD=libm.so.6 \
      "$g" run --config /tmp/some.conf --set log_level=debug --set=auto_gc=5 -- env)
check "LD_PRELOAD starts with libgmlake" '[[ "$out" == *"LD_PRELOAD=$lib:libm.so.6"* ]]'
check "PyTorch backend" '[[ "$out" == *"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"* ]]'
check "JAX allocator" '[[ "$out" == *"XLA_PYTHON_CLIENT_ALLOCATOR=platform"* ]]'
check "--config" '[[ "$out" == *"GMLAKE_CONFIG=/tmp/some.conf"* ]]'
check "--set" '[[ "$out" == *"GMLAKE_LOG_LEVEL=debug"* && "$out" == *"GMLAKE_AUTO_GC=5"* ]]'
err=$(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$g" run -- sh -c 'echo "$PYTORCH_CUDA_ALLOC_CONF"' 2>&1)
check "another PyTorch setting is kept and explained" '[[ "$err" == *"expandable_segments:True is kept"* && "$err" == *$'"'"'\n'"'"'expandable_segments:True* ]]'
"$g" run -- sh -c 'exit 7'
check "exit status is the program's" '[ $? -eq 7 ]'
"$g" run --set nokeyvalue -- true 2>/dev/null
check "--set without = is refused" '[ $? -eq 2 ]'
"$g" run 2>/dev/null
check "no command is refused" '[ $? -eq 2 ]'
"$g" frobnicate 2>/dev/null
check "unknown command" '[ $? -eq 2 ]'
check "help" '"$g" --help | grep -q "^  run " && "$g" run --help | grep -q -- "--set key=value"'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
