#!/usr/bin/env bash
# tests/lsan_wrap.sh CMD... — runs a test under `meson test --wrapper` in the ASan setup of
# scripts/test and fails it when LeakSanitizer reported a leak in any of its processes.  Criterion
# runs each test in a worker process whose leak report, printed as the worker exits, does not fail
# the test (the runner says "Passing" and exits 0), so a leak in a Criterion test was never seen.
# The test's standard error is passed on whole; its exit status is kept where it had no leak.
log=$(mktemp) || exit 1
trap 'rm -f "$log"' EXIT
"$@" 2>"$log"
rc=$?
cat "$log" >&2
if grep -q 'ERROR: LeakSanitizer' "$log"; then
  echo "lsan_wrap.sh: LeakSanitizer reported leaks in $1 (above)" >&2
  exit 1
fi
exit $rc
