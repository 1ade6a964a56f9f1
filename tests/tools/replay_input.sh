#!/usr/bin/env bash
# replay_input.sh SRC REPLAY — gmlake-replay's options on bad or unusual input: each is refused
# with one clear line (exit 2) before anything is replayed or written, or said on stderr where
# the replay goes on (a --capacity rounded down); never cut short, never an input overwritten.
source "$(dirname "$0")/checks.sh"
R=$(readlink -f "$2")
cd "$tmp" || exit 1
printf '# gmlake-trace v1\nA 0x1000 100 0 1\nF 0x1000 0 0 2\n' > good.trace

# --capacity: a size that is not whole 2 MiB chunks is rounded down, and that is said
err=$("$R" --policy pytorch --capacity 3MiB good.trace 2>&1 >/dev/null)
check "--capacity 3MiB: replayed, a note says it is rounded down to 2 MiB" "0 1" \
  "$? $(grep -c -- "--capacity '3MiB' .*rounded down to 2 MiB" <<<"$err")"
err=$("$R" --policy pytorch --capacity 4MiB good.trace 2>&1 >/dev/null)
check "--capacity 4MiB: no note" "0 " "$? $err"

echo "$([ $fail -eq 0 ] && echo all passed || echo some failed)"
exit $fail
