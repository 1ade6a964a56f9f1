# tests/tools/checks.sh — what the shell tests of tests/tools share; sourced, not run.  Sets src
# (the first argument: the source tree), tmp (a scratch folder removed at exit) and fail (0 until a
# check fails), and check WHAT EXPECTED ACTUAL, which prints ok or FAIL with both values.
set -uo pipefail
src=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # what expected actual
  if [ "$2" = "$3" ]; then echo "ok: $1"; else echo "FAIL: $1: expected '$2', got '$3'"; fail=1; fi
}
