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

# --set and --policy are read whole, whatever their length: nothing past a buffer is dropped
err=$("$R" --policy gmlake --set "stitch=on$(printf '%*s' 260 '')garbage" good.trace 2>&1 >/dev/null)
check "--set with garbage after 260 blanks: refused" "2 1" "$? $(grep -c "stitch = 'on .*garbage' is not valid" <<<"$err")"
long=$(printf 'a%.0s' {1..300})
err=$("$R" --policy gmlake --set "$long=1" good.trace 2>&1 >/dev/null)
check "--set with a 300-byte key: refused, one line" "2 1" "$? $(grep -c "unknown key" <<<"$err")"
err=$("$R" --policy "gmlake$(printf ',%.0s' {1..300})bogus" good.trace 2>&1 >/dev/null)
check "--policy with 300 commas then bogus: refused (an empty name)" "2 1" "$? $(grep -c "empty policy name" <<<"$err")"
err=$("$R" --policy "gmlake,$long,pytorch" good.trace 2>&1 >/dev/null)
check "--policy with a 300-byte name: refused, naming it" "2 1" "$? $(grep -c "unknown policy '$long'" <<<"$err")"
for p in gmlake,,pytorch ,gmlake gmlake, ,; do
  err=$("$R" --policy "$p" good.trace 2>&1 >/dev/null)
  check "--policy '$p': an empty name is refused" "2 1" "$? $(grep -c "empty policy name" <<<"$err")"
done
check "--policy pytorch,gmlake: both replayed" "2" "$("$R" --policy pytorch,gmlake good.trace | grep -cE '^  (pytorch|gmlake) ')"

# a size no device holds (2^63) fails as out of memory under every policy alike: counted,
# the policy marked FAILED, still in the table
printf '# gmlake-trace v1\nA 0x1000 100 0 1\nA 0x2000 9223372036854775808 0 2\nF 0x1000 0 0 3\n' > huge.trace
out=$("$R" huge.trace 2>"$tmp/err")
check "a 2^63-byte allocation: exit 1, every policy in the table, marked FAILED" "1 3" \
  "$? $(grep -cE '^  (pytorch|expandable|gmlake) .* FAILED ' <<<"$out")"
check "... and no 'invalid argument'" "0" "$(grep -c 'invalid argument' "$tmp/err")"

echo "$([ $fail -eq 0 ] && echo all passed || echo some failed)"
exit $fail
