#!/usr/bin/env bash
# tests/tools/access_scaling_args.sh SRCDIR BINARY — bench/gpu/access_scaling.c's refusals, which
# come before the driver is touched, so no GPU is needed: a background count that is not a number,
# negative, falling, too large, or one too many, an unknown option, and --reps / --k out of range
# each end with status 1 and a message naming the argument; none crashes.
# shellcheck source=tests/tools/checks.sh
. "$(dirname "$0")/checks.sh"
bin=$2
refused() { # what expected-message-part ARGS...
  local what=$1 part=$2
  shift 2
  local out rc
  out=$("$bin" "$@" 2>&1)
  rc=$?
  check "$what: status" 1 "$rc"
  case "$out" in
    *"$part"*) echo "ok: $what: says '$part'" ;;
    *) echo "FAIL: $what: message '$out' lacks '$part'"; fail=1 ;;
  esac
}
refused "not a number" "'abc'" abc
refused "negative" "'-1'" -1
refused "falling" "'3'" 5 3
refused "too large" "'1000001'" 1000001
refused "unknown option" "'--bogus'" --bogus
refused "a number with trailing text" "'12x'" 12x
refused "33 counts" "'32'" $(seq 0 32)
refused "reps 0" "--reps 1..1000" --reps 0
refused "k too large" "--k 1..4096" --k 5000
refused "reps without a value" "'--reps'" --reps
exit "$fail"
