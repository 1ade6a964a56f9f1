#!/usr/bin/env bash
# lsan_wrap_check.sh SRC — tests/lsan_wrap.sh (scripts/test's wrapper of the ASan setup): a test
# that passes but whose process printed a LeakSanitizer report fails; one without keeps its own
# exit status; the test's standard error and output are passed on.
source "$(dirname "$0")/checks.sh"
W=$src/tests/lsan_wrap.sh
err=$("$W" sh -c 'echo out; echo "==7==ERROR: LeakSanitizer: detected memory leaks" >&2; exit 0' 2>&1 >/dev/null)
check "a leak report fails a passing test, naming the wrapper" "1 1" "$? $(grep -c 'lsan_wrap.sh: LeakSanitizer reported leaks in sh' <<<"$err")"
check "the report is passed on" "1" "$(grep -c '==7==ERROR: LeakSanitizer' <<<"$err")"
out=$("$W" sh -c 'echo out; echo note >&2; exit 3' 2>/dev/null)
check "no leak: the test's own status, its output passed on" "3 out" "$? $out"
"$W" true
check "no leak, passing: 0" "0" "$?"
exit $fail
