#!/usr/bin/env bash
# tests/tools/pairs_runner.sh SRCDIR — bench/gpu/run_pairs.sh without a GPU: a stand-in for
# build/gpu/pairs says its us/pair and whether gmlake served it (as pairs.cu does: the preloaded
# library there and GMLAKE_ENABLE not 0).  Checks the summary's ratio to CUDA's allocator, and that
# runs labelled gmlake that gmlake did not serve (no libgmlake.so to preload) give no ratio.
# shellcheck source=tests/tools/checks.sh
. "$(dirname "$0")/checks.sh"
mkdir -p "$tmp/root/bench/gpu" "$tmp/root/build/gpu" "$tmp/root/build/interpose"
cat >"$tmp/root/build/gpu/pairs" <<'STAND'
#!/usr/bin/env bash
# pairs' stand-in: MODE PAIRS; gmlake serves 1 us a pair, CUDA's own allocator 2
if [ -f "${LD_PRELOAD:-}" ] && [ "${GMLAKE_ENABLE:-1}" != 0 ]; then g=true t=1.000; else g=false t=2.000; fi
echo "{\"mode\":\"$1\",\"pairs\":$2,\"us_per_pair\":$t,\"gmlake\":$g,\"live_peak_mib\":10,\"reserved_mib\":20}"
STAND
chmod +x "$tmp/root/build/gpu/pairs"
cp "$src/bench/gpu/run_pairs.sh" "$tmp/root/bench/gpu/"
touch "$tmp/root/build/interpose/libgmlake.so"
out=$(ROUNDS=2 MODES=one bash "$tmp/root/bench/gpu/run_pairs.sh" "$tmp/out" 2>/dev/null)
check "four runs" 4 "$(wc -l <"$tmp/out/pairs.jsonl" | tr -d ' ')"
check "gmlake's ratio to CUDA's" "one gmlake 1.000 ratio 0.50" "$(echo "$out" | awk '{print $1, $2, $3, $(NF-1), $NF}')"
rm "$tmp/root/build/interpose/libgmlake.so"
out=$(ROUNDS=2 MODES=one bash "$tmp/root/bench/gpu/run_pairs.sh" "$tmp/out2" 2>&1)
check "without libgmlake.so: no ratio for runs gmlake did not serve" 0 "$(echo "$out" | grep -c 'ratio')"
check "and it says so" 1 "$(echo "$out" | grep -c "one gmlake: 2 runs not served by gmlake")"
exit $fail
