#!/usr/bin/env bash
# tests/tools/tls_model.sh LIBGMLAKE — libgmlake's thread-local variables use the initial-exec
# model (GML_TLS, core/device.h): the library must not call __tls_get_addr, which the default
# model of a shared library calls at every access of one (several a hooked call; 7.5% of an
# allocate+free pair's instructions through the hooks before it).  A variable declared with a
# plain __thread brings the reference back.
set -uo pipefail
lib=$1
[ -f "$lib" ] || { echo "FAIL: no $lib"; exit 1; }
command -v nm >/dev/null || { echo "FAIL: nm (binutils) not found"; exit 1; }
syms=$(nm -D --undefined-only "$lib") || { echo "FAIL: nm could not read $lib"; exit 1; }
if grep -q '__tls_get_addr' <<<"$syms"; then
  echo "FAIL: $lib calls __tls_get_addr: a thread-local variable without GML_TLS"
  exit 1
fi
echo "ok: $lib makes no __tls_get_addr call"
