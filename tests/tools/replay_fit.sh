#!/usr/bin/env bash
# replay_fit.sh SRC REPLAY — `gmlake replay --fit`: for each policy, the capacity it reports runs
# the whole trace (a replay with that --capacity serves every allocation) and one chunk less does
# not; it lies between the trace's peak active bytes and the policy's peak reserved; a policy that
# fails on the --capacity given reports no fit (table "no", JSON null); without --fit the table and
# the JSON are as before (no column, no key).
source "$(dirname "$0")/checks.sh"
R=$(readlink -f "$2")
T=$src/bench/traces/mixtral_moe.trace.gz
cd "$tmp" || exit 1
"$R" --json --fit "$T" >fit.jsonl 2>fit.err
check "--fit on the bundled trace: exit 0, nothing on stderr" "0 " "$? $(cat fit.err)"
check "a fit for each of the three policies" "3" "$(grep -c '"fits_in_bytes":[0-9]' fit.jsonl)"
while read -r pol fit active reserved; do
  check "$pol: peak active <= fit <= peak reserved" "yes" \
    "$([ "$fit" -ge "$active" ] && [ "$fit" -le "$reserved" ] && echo yes || echo "no ($active $fit $reserved)")"
  "$R" --json --policy "$pol" --capacity "$fit" "$T" >at.jsonl 2>/dev/null
  check "$pol: a device of its fit ($((fit >> 20)) MiB) serves the whole trace" "0 1" \
    "$? $(grep -c '"complete":true' at.jsonl)"
  "$R" --json --policy "$pol" --capacity "$((fit - 2097152))" "$T" >below.jsonl 2>/dev/null
  check "$pol: one chunk less fails an allocation" "1 1" "$? $(grep -c '"complete":false' below.jsonl)"
done < <(python3 -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(d["policy"], d["fits_in_bytes"], d["peak_active_bytes"], d["peak_reserved_bytes"])' fit.jsonl)

# the GPU lag reaches every probe: gmlake's fit at --gpu-lag 2000 holds at that lag (on the DDP
# job, whose fit the lag moves: 8,620 MiB at lag 0, 8,604 at 2 ms, so probes made without the lag
# would report a fit that one chunk less still serves at 2 ms)
T=$src/bench/traces/jobs/ddp.trace.gz
"$R" --json --fit --policy gmlake --gpu-lag 2000 "$T" >lag.jsonl 2>/dev/null
read -r fit replays < <(python3 -c 'import json,sys
d = json.loads(open(sys.argv[1]).readline()); print(d["fits_in_bytes"], d["fit_replays"])' lag.jsonl)
check "--gpu-lag 2000: fit_replays a count of probes (1 to 40)" "yes" \
  "$([ "$replays" -ge 1 ] && [ "$replays" -le 40 ] && echo yes || echo "no: $replays")"
"$R" --json --policy gmlake --gpu-lag 2000 --capacity "$fit" "$T" >at.jsonl 2>/dev/null
check "--gpu-lag 2000: its fit serves the trace at that lag" "0 1" "$? $(grep -c '"complete":true' at.jsonl)"
"$R" --json --policy gmlake --gpu-lag 2000 --capacity "$((fit - 2097152))" "$T" >below.jsonl 2>/dev/null
check "--gpu-lag 2000: one chunk less fails at that lag" "1 1" "$? $(grep -c '"complete":false' below.jsonl)"

T=$src/bench/traces/mixtral_moe.trace.gz
# a device too small for pytorch's peak but not for gmlake's fit: pytorch still fits below its
# peak (it gives its cache back under pressure); on 23,000 MiB it does not fit at all
"$R" --json --fit --policy pytorch,gmlake --capacity 23000MiB "$T" >small.jsonl 2>small.err
check "--capacity 23000MiB: exit 1 (pytorch fails), pytorch's fit null, gmlake's a number" \
  "1 null num" "$? $(python3 -c 'import json,sys
r = {d["policy"]: d.get("fits_in_bytes", "absent") for d in map(json.loads, open(sys.argv[1]))}
print("null" if r["pytorch"] is None else r["pytorch"], "num" if isinstance(r["gmlake"], int) else r["gmlake"])' small.jsonl)"
"$R" --fit --policy pytorch,gmlake --capacity 23000MiB "$T" >small.txt 2>/dev/null
check "the table's fits-in column: 'no' for pytorch, MiB for gmlake" "no MiB" \
  "$(awk '$1 == "pytorch" && $3 == "MiB" {p = $NF} $1 == "gmlake" && $3 == "MiB" {g = $NF} END {print p, g}' small.txt)"
head -2 small.txt | tail -1 >header.txt
check "the table names the column" "1" "$(grep -c 'fits in$' header.txt)"

# without --fit: no column, no key
"$R" --json --policy gmlake "$T" >plain.jsonl 2>/dev/null
check "no --fit: no fits_in_bytes key" "0" "$(grep -c fits_in plain.jsonl)"
"$R" --policy gmlake "$T" 2>/dev/null | head -2 | tail -1 >plain.txt
check "no --fit: no column" "0" "$(grep -c 'fits in' plain.txt)"
exit $fail
