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
check "... each policy's one failure said in the singular" "3 0" \
  "$(grep -c ': 1 allocation failed (out of device memory)' "$tmp/err") $(grep -c '1 allocations' "$tmp/err")"

# --plot never writes over an input trace (the same file, however named), checked before anything
cp good.trace in.svg
out=$("$R" --policy pytorch --plot in.svg in.svg 2>"$tmp/err")
check "--plot in.svg in.svg: refused, the trace kept, nothing replayed" "2 1 1 " \
  "$? $(grep -c "plot of in.svg would go to in.svg, which is the trace in.svg" "$tmp/err") $(cmp -s good.trace in.svg && echo 1) $out"
ln -s in.svg link.svg
"$R" --policy pytorch --plot link.svg ./in.svg >/dev/null 2>&1
check "--plot over a link to the trace: refused, the trace kept" "2 1" "$? $(cmp -s good.trace in.svg && echo 1)"
cp good.trace c.trace; cp good.trace pp.c.svg
out=$("$R" --policy pytorch --plot pp.svg c.trace pp.c.svg 2>"$tmp/err")
check "--plot pp.svg c.trace pp.c.svg: refused before c.trace's plot, pp.c.svg kept" "2 1 1 " \
  "$? $(grep -c "plot of c.trace would go to pp.c.svg, which is the trace pp.c.svg" "$tmp/err") $(cmp -s good.trace pp.c.svg && echo 1) $out"

# --plot with several traces: one file each, never one replacing another
mkdir a b; cp good.trace a/x.trace; cp good.trace b/x.trace
out=$("$R" --policy pytorch --plot p.svg a/x.trace b/x.trace 2>"$tmp/err")
check "a/x.trace and b/x.trace: refused, naming both and --label, nothing written" "2 1" \
  "$? $(grep -c "plots of a/x.trace and b/x.trace would both be p.x.svg .*--label" "$tmp/err")$(ls p.*svg 2>/dev/null)"
gzip -c good.trace > x.trace.gz
"$R" --policy pytorch --plot p.svg a/x.trace x.trace.gz >/dev/null 2>"$tmp/err"
check "x.trace and x.trace.gz: refused (both x)" "2 1" "$? $(grep -c "both be p.x.svg" "$tmp/err")"
"$R" --policy pytorch --plot p.svg a/x.trace --label y x.trace.gz >/dev/null 2>"$tmp/err"
check "... --label tells them apart: p.x.svg and p.y.svg" "0 p.x.svg p.y.svg" "$? $(echo p.*svg)"
rm -f p.*svg; cp good.trace job.rank0.trace; cp good.trace job.rank1.trace
"$R" --policy pytorch --plot p.svg job.rank0.trace job.rank1.trace >/dev/null 2>&1
check "job.rank0.trace and job.rank1.trace: p.job.rank0.svg and p.job.rank1.svg" \
  "0 p.job.rank0.svg p.job.rank1.svg" "$? $(echo p.*svg)"

# --plot paths are never cut short: a long one is written where named, a too long one refused
d=$(printf 'd%.0s' {1..200}); d="$d/$d/$d/$d/$d/$d"; mkdir -p "$d"
"$R" --policy pytorch --plot "$d/long.svg" good.trace >/dev/null 2>&1
check "a 1200-byte --plot path: written there, nowhere else" "0 1" "$? $(find . -name '*.svg' -newer good.trace | grep -c "^./$d/long.svg$")"
out=$("$R" --policy pytorch --plot "$d/$d/$d/$d/long.svg" good.trace 2>"$tmp/err")
check "a 4800-byte --plot path: refused, saying the limit" "2 1" "$? $(grep -c "longer than the 4095" "$tmp/err")$out"

# --plot over a symbolic link or a name that is no regular file (a FIFO): written through, where
# it leads, never replaced by a new file (a rename over x.svg -> /dev/full replaced the device)
printf 'old\n' > target.svg; ln -s target.svg sl.svg
"$R" --policy pytorch --plot sl.svg good.trace >/dev/null 2>"$tmp/err"
check "--plot sl.svg -> target.svg: written through, the link kept" "0 link 1" \
  "$? $([ -L sl.svg ] && echo link) $(grep -c '^</svg>$' target.svg)"
ln -s new.svg dangling.svg
"$R" --policy pytorch --plot dangling.svg good.trace >/dev/null 2>"$tmp/err"
check "--plot dangling.svg -> new.svg (absent): new.svg written, the link kept" "0 link 1" \
  "$? $([ -L dangling.svg ] && echo link) $(grep -c '^</svg>$' new.svg 2>/dev/null)"
mkfifo ff.svg
timeout 20 cat ff.svg > fifo.out & reader=$!
timeout 20 "$R" --policy pytorch --plot ff.svg good.trace >/dev/null 2>"$tmp/err"; rc=$?
wait $reader
check "--plot ff.svg, a FIFO: written into it, the FIFO kept" "0 fifo 1" \
  "$rc $([ -p ff.svg ] && echo fifo) $(grep -c '^</svg>$' fifo.out)"
check "... no temporary file left" "" "$(ls -A | grep -- '\.tmp-')"
mkdir dir.svg
out=$("$R" --policy pytorch --plot dir.svg good.trace 2>"$tmp/err")
check "--plot dir.svg, a folder: refused, saying so, before anything is replayed" "2 1 " \
  "$? $(grep -c "dir.svg: is a directory" "$tmp/err") $out"
# a plot in a folder that does not exist (or under a file): refused before anything is replayed,
# not after the whole replay, its table printed
for p in no/such/dir/x.svg good.trace/x.svg; do
  out=$("$R" --policy pytorch --plot "$p" good.trace 2>"$tmp/err")
  check "--plot $p: refused up front, one line, nothing replayed" "2 1 1 " \
    "$? $(wc -l <"$tmp/err") $(grep -c "^gmlake replay: $p: cannot write: " "$tmp/err") $out"
done

# '-': the trace on standard input (a pipe from zcat, say), reported as '-'
out=$(gzip -dc x.trace.gz | "$R" --policy pytorch - 2>"$tmp/err")
check "- reads the trace from standard input" "0 1 0" "$? $(grep -c '^-: 2 events$' <<<"$out") $(wc -c <"$tmp/err")"
"$R" --policy pytorch - - <good.trace >/dev/null 2>"$tmp/err"
check "- named twice: refused up front" "2 1" "$? $(grep -c "'-' (standard input) is named twice" "$tmp/err")"
"$R" --policy pytorch - <&- >/dev/null 2>"$tmp/err"
check "- with standard input closed: refused, saying so" "1 1" "$? $(grep -c "^gmlake replay: -: cannot read standard input: Bad file descriptor" "$tmp/err")"

# a snapshot (a pickle) on standard input: the advice names what works (a file, or the converter),
# not `gmlake replay` itself, which had just refused it
printf '\x80\x04snapshot' | "$R" --policy pytorch - >/dev/null 2>"$tmp/err"
check "- with a pickle: refused, the snapshot to be given as a file" "1 1 0" \
  "$? $(grep -c "^gmlake replay: -: a Python pickle, not a gmlake trace: standard input takes a trace only; give a PyTorch memory snapshot as a file (gmlake replay FILE.pickle) or convert it with \`gmlake import-snapshot\`" "$tmp/err") $(grep -c 'replay it with' "$tmp/err")"

# a trace that frees a pointer it never allocated (or allocates one twice) is the trace's fault,
# not a policy's: said once, whatever the number of policies (it was said once per policy)
printf '# gmlake-trace v1\nF 0x1000 0 0 1\n' > unknown_free.trace
printf '# gmlake-trace v1\nA 0x1000 100 0 1\nA 0x1000 100 0 2\n' > twice.trace
for t in unknown_free twice; do
  out=$("$R" "$t.trace" 2>"$tmp/err")
  check "$t.trace under the three default policies: exit 1, one line" "1 1 " "$? $(wc -l <"$tmp/err") $out"
done

# --stream-ordered hides no fault of the trace: a pointer allocated again while its allocation
# with no stream (left out) is live, or allocated with no stream while a kept one is live, is
# refused as it is without the option (the free was matched to the wrong one, the other left
# live for the rest of the trace: exit 0 with a wrong peak)
printf '# gmlake-trace v1\nA 0x1000 100 ffffffffffffffff 1\nA 0x1000 300 0 2\nF 0x1000 0 0 3\n' > so_a.trace
printf '# gmlake-trace v1\nA 0x1000 100 ffffffffffffffff 1\nA 0x1000 300 ffffffffffffffff 2\nF 0x1000 0 0 3\nA 0x2000 50 0 4\n' > so_b.trace
printf '# gmlake-trace v1\nA 0x1000 300 0 1\nA 0x1000 100 ffffffffffffffff 2\nF 0x1000 0 0 3\nA 0x2000 50 0 4\n' > so_c.trace
for t in so_a:3 so_b:3 so_c:3; do
  f=${t%:*}.trace
  for so in "" --stream-ordered; do
    out=$("$R" --policy pytorch $so "$f" 2>"$tmp/err")
    check "$f ${so:-(all events)}: refused, naming line ${t#*:}" "1 1 " \
      "$? $(grep -c "^gmlake replay: $f:${t#*:}: pointer 0x1000 is allocated while still live" "$tmp/err") $out"
  done
done

# --json is JSON (UTF-8) whatever the trace's name: a file name that is not UTF-8 (Latin-1 'é', a
# sequence cut short, an overlong '/') was written byte for byte, a line no JSON reader takes;
# each byte that is no part of a valid UTF-8 character is written as U+FFFD, valid ones as they are
for n in $'caf\xe9' $'cut\xc3' $'over\xc0\xaflong' $'ok\xc3\xa9\xe2\x82\xac'; do
  cp good.trace "$n.trace"
  got=$("$R" --json --policy pytorch "$n.trace" | python3 -c '
import json, sys
print(" ".join(json.loads(l)["trace"] for l in sys.stdin.buffer.read().decode("utf-8").splitlines()))' 2>&1)
  want=$(printf '%s' "$n.trace" | python3 -c 'import sys; print(sys.stdin.buffer.read().decode("utf-8", "replace"))')
  check "--json with a trace named $(printf '%q' "$n.trace"): valid UTF-8 JSON, the name kept where valid" "$want" "$got"
  # the chart names its trace too: an SVG is XML, UTF-8 here, which a byte of Latin-1 breaks
  "$R" --policy pytorch --plot "$tmp/chart.svg" "$n.trace" >/dev/null 2>&1
  got=$(python3 -c '
import sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
print([t.firstChild.data for t in d.getElementsByTagName("text") if t.getAttribute("class") == "title"][0])' \
    "$tmp/chart.svg" 2>&1 | tail -1)
  check "--plot with a trace named $(printf '%q' "$n.trace"): well-formed UTF-8, the name kept where valid" "$want" "$got"
done

# a setting of the library's (enable, logs, statistics, the trace, PyTorch's backend) is taken but
# changes nothing in a replay: said so on stderr, where it was silently ignored; a pool's setting
# and a model's are not remarked on
for kv in enable=off log_level=debug stats_file=/tmp/x trace_file=/tmp/y pytorch_backend=off; do
  "$R" --policy gmlake --set "$kv" good.trace >/dev/null 2>"$tmp/err"
  check "--set $kv: replayed, with a note that a replay does not use it" "0 1" \
    "$? $(grep -c "^gmlake replay: --set ${kv%%=*}: the library's setting, which a replay does not use" "$tmp/err")"
done
for kv in auto_gc=64 stitch_strategy=bestfit pytorch.max_split_size_mb=64; do
  "$R" --set "$kv" good.trace >/dev/null 2>"$tmp/err"
  check "--set $kv: no remark" "0 0" "$? $(wc -c <"$tmp/err")"
done

echo "$([ $fail -eq 0 ] && echo all passed || echo some failed)"
exit $fail
