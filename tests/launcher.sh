#!/usr/bin/env bash
# launcher.sh — `gmlake` as a user meets it: what `gmlake run` gives the program, PyTorch's route
# (chosen by libgmlake itself, with or without the launcher), per-process files, typos, replay.
# Usage: launcher.sh GMLAKE_SCRIPT LIBGMLAKE ALLOC_PROGRAM
#   ALLOC_PROGRAM: tests/interpose/preload_reports (mode `alloc`: one allocation through the fake
#   CUDA, found beside it)
set -u
g=$1 lib=$2 prog=$3
export LD_LIBRARY_PATH=$(dirname "$prog")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GMLAKE_SYSCONFDIR=/nonexistent XDG_CONFIG_HOME=/nonexistent
unset PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF XLA_PYTHON_CLIENT_ALLOCATOR RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE
for v in $(env | grep -o '^GMLAKE_[A-Z_]*' | grep -v -e '^GMLAKE_SYSCONFDIR$'); do unset "$v"; done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }

printf 'stitch = on\n' >"$tmp/some.conf"
out=$(LD_PRELOAD=libm.so.6 "$g" run --config "$tmp/some.conf" --set log_level=debug --set=auto_gc=5 -- env 2>/dev/null)
check "LD_PRELOAD starts with libgmlake" '[[ "$out" == *"LD_PRELOAD=$lib:libm.so.6"* ]]'
check "PyTorch backend (set by the library)" '[[ "$out" == *"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"* ]]'
check "JAX allocator" '[[ "$out" == *"XLA_PYTHON_CLIENT_ALLOCATOR=platform"* ]]'
check "--config" '[[ "$out" == *"GMLAKE_CONFIG=$tmp/some.conf"* ]]'
check "--set" '[[ "$out" == *"GMLAKE_LOG_LEVEL=debug"* && "$out" == *"GMLAKE_AUTO_GC=5"* ]]'

# --- PyTorch's route: the same rule with a plain LD_PRELOAD (no launcher, no variables)
pt() { env "$@" LD_PRELOAD="$lib" sh -c 'echo "cuda=${PYTORCH_CUDA_ALLOC_CONF-unset} alloc=${PYTORCH_ALLOC_CONF-unset}"' 2>"$tmp/err"; }
check "plain LD_PRELOAD sets the backend" '[ "$(pt)" = "cuda=backend:cudaMallocAsync alloc=unset" ]'
check "PYTORCH_ALLOC_CONF alone is honoured, options kept" \
  '[ "$(pt PYTORCH_ALLOC_CONF=max_split_size_mb:128)" = "cuda=unset alloc=max_split_size_mb:128,backend:cudaMallocAsync" ]'
check "options without a backend get it appended" \
  '[ "$(pt PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6)" = "cuda=garbage_collection_threshold:0.6,backend:cudaMallocAsync alloc=unset" ]'
check "backend:cudaMallocAsync is left alone, silently" \
  '[ "$(pt PYTORCH_ALLOC_CONF=backend:cudaMallocAsync)" = "cuda=unset alloc=backend:cudaMallocAsync" ] && [ ! -s "$tmp/err" ]'
check "expandable_segments is kept, with one warning" \
  '[ "$(pt PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)" = "cuda=expandable_segments:True alloc=unset" ] && [ "$(grep -c "will not reach gmlake" "$tmp/err")" = 1 ]'
check "backend:native is kept, with a warning naming the variable" \
  '[ "$(pt PYTORCH_ALLOC_CONF=backend:native)" = "cuda=unset alloc=backend:native" ] && grep -q "PYTORCH_ALLOC_CONF=backend:native keeps PyTorch" "$tmp/err" &&
  grep -q "gmlake serves its segments" "$tmp/err" && ! grep -q "will not reach gmlake" "$tmp/err"'
# PyTorch's parser accepts a trailing comma but refuses an empty entry ("Unrecognized key ','"),
# and reads a value of blanks as nothing: appending ",backend:..." to either made PyTorch refuse
# the whole setting at its first CUDA call
check "a trailing comma is not doubled" \
  '[ "$(pt PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:128, ")" = "cuda=max_split_size_mb:128,backend:cudaMallocAsync alloc=unset" ]'
check "a value of blanks gets the backend alone" \
  '[ "$(pt PYTORCH_CUDA_ALLOC_CONF=" ")" = "cuda=backend:cudaMallocAsync alloc=unset" ]'
# PyTorch's tokenizer drops every blank (tabs and newlines too, as a YAML block leaves them), and
# every backend entry counts: a backend:native after a newline, or after a backend:cudaMallocAsync,
# was not seen and the user's native allocator lost to an appended (or kept) cudaMallocAsync
multi=$'max_split_size_mb:256,\n\tbackend:native'
check "a backend after a newline and a tab is the user's, kept" \
  '[ "$(pt PYTORCH_CUDA_ALLOC_CONF="$multi")" = "cuda=$multi alloc=unset" ] && grep -q "gmlake serves its segments" "$tmp/err"'
check "a backend named twice: native kept whichever comes first" \
  '[ "$(pt PYTORCH_ALLOC_CONF=backend:cudaMallocAsync,backend:native)" = "cuda=unset alloc=backend:cudaMallocAsync,backend:native" ] &&
  grep -q "gmlake serves its segments" "$tmp/err"'
check "blanks inside a value are PyTorch's nothing" \
  '[ "$(pt PYTORCH_ALLOC_CONF="backend : cuda MallocAsync")" = "cuda=unset alloc=backend : cuda MallocAsync" ] && [ ! -s "$tmp/err" ]'
# both variables, or an empty one: PyTorch takes a variable that is set, even empty (c10's get_env),
# and its versions differ on which of the two comes first (PYTORCH_ALLOC_CONF in some,
# PYTORCH_CUDA_ALLOC_CONF in others): the route must not hang on that order
check "an empty PYTORCH_ALLOC_CONF is the one that gets the backend" \
  '[ "$(pt PYTORCH_ALLOC_CONF=)" = "cuda=unset alloc=backend:cudaMallocAsync" ]'
check "both variables without a backend: both get it" \
  '[ "$(pt PYTORCH_ALLOC_CONF=max_split_size_mb:64 PYTORCH_CUDA_ALLOC_CONF=garbage_collection_threshold:0.6)" = "cuda=garbage_collection_threshold:0.6,backend:cudaMallocAsync alloc=max_split_size_mb:64,backend:cudaMallocAsync" ]'
check "backend:native in either variable keeps both as they are, the warning naming it" \
  '[ "$(pt PYTORCH_ALLOC_CONF=max_split_size_mb:64 PYTORCH_CUDA_ALLOC_CONF=backend:native)" = "cuda=backend:native alloc=max_split_size_mb:64" ] &&
  grep -q "PYTORCH_CUDA_ALLOC_CONF=backend:native keeps PyTorch" "$tmp/err" &&
  [ "$(pt PYTORCH_ALLOC_CONF= PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)" = "cuda=expandable_segments:True alloc=" ]'
check "one variable names cudaMallocAsync: the other gets it too, silently" \
  '[ "$(pt PYTORCH_ALLOC_CONF=backend:cudaMallocAsync PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64)" = "cuda=max_split_size_mb:64,backend:cudaMallocAsync alloc=backend:cudaMallocAsync" ] && [ ! -s "$tmp/err" ]'
check "expandable_segments:False beside backend:native: the native allocator's warning" \
  '[ "$(pt PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False,backend:native)" = "cuda=expandable_segments:False,backend:native alloc=unset" ] &&
  grep -q "gmlake serves its segments" "$tmp/err" && ! grep -q "will not reach gmlake" "$tmp/err"'
# a setting too long to extend is left as it is, and the warning says so (it said the setting
# keeps PyTorch's own allocator, as for backend:native)
long="$(printf ' %.0s' {1..5000})max_split_size_mb:128"
check "a setting too long to extend: kept, the warning says why" \
  '[ "$(pt PYTORCH_CUDA_ALLOC_CONF="$long")" = "cuda=$long alloc=unset" ] && grep -q "too long for gmlake to append backend:cudaMallocAsync" "$tmp/err"'
# said once per process tree, as the settings' warnings are: a shell script's every command
# (each a process that loads gmlake) repeated it
env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True LD_PRELOAD="$lib" sh -c 'sh -c true; sh -c true' 2>"$tmp/err"
check "the kept backend's warning once for a process and its children" '[ "$(grep -c "will not reach gmlake" "$tmp/err")" = 1 ]'
env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True LD_PRELOAD="$lib" sh -c 'PYTORCH_CUDA_ALLOC_CONF=backend:native sh -c true' 2>"$tmp/err"
check "... and again where a child keeps another one" '[ "$(grep -c "will not reach gmlake" "$tmp/err")" = 1 ] && [ "$(grep -c "gmlake serves its segments" "$tmp/err")" = 1 ]'
check "pytorch_backend=off leaves the environment alone" '[ "$(pt GMLAKE_PYTORCH_BACKEND=off)" = "cuda=unset alloc=unset" ]'
check "GMLAKE_ENABLE=0 leaves the environment alone" '[ "$(pt GMLAKE_ENABLE=0)" = "cuda=unset alloc=unset" ]'
# settings the pool would refuse turn gmlake off at its first call: PyTorch then keeps its own
# allocator, as without gmlake (it used to be switched to cudaMallocAsync, which gmlake off serves not)
check "invalid settings (gmlake OFF) leave the environment alone" \
  '[ "$(pt GMLAKE_SMALL_LIMIT=1GiB)" = "cuda=unset alloc=unset" ] && [ "$(pt GMLAKE_CHUNK_SIZE=3MiB)" = "cuda=unset alloc=unset" ]'
out=$(env -u PYTHONPATH GMLAKE_SMALL_LIMIT=1GiB "$g" run -- sh -c 'echo "cuda=${PYTORCH_CUDA_ALLOC_CONF-unset} py=${PYTHONPATH-unset}"' 2>/dev/null)
check "... under gmlake run too (no backend, no torch route on PYTHONPATH)" '[ "$out" = "cuda=unset py=unset" ]'
err=$(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$g" run -- sh -c 'echo "$PYTORCH_CUDA_ALLOC_CONF"' 2>&1)
check "the launcher follows the library's rule" '[[ "$err" == *"will not reach gmlake"* && "$err" == *$'"'"'\n'"'"'expandable_segments:True ]]'

# --- several processes: %p, %r, per-process defaults, log prefix
WORLD_SIZE=2 RANK=1 "$g" run --set stats_file="$tmp/stats.json" --set trace_file="$tmp/trace" -- "$prog" alloc >/dev/null
check "per-process stats file under WORLD_SIZE>1" '[ -s "$tmp/stats.rank1.json" ] && [ ! -e "$tmp/stats.json" ]'
check "per-process trace file (no extension)" '[ -s "$tmp/trace.rank1" ]'
check "the stats are the process's" 'grep -q "\"allocations\":1," "$tmp/stats.rank1.json"'
check "the stats give the driver time by kind of call" 'grep -Eq "\"device_seconds\":[0-9.]+,\"device_seconds_by_call\":\{\"chunk_create\":[0-9.]+," "$tmp/stats.rank1.json"'
check "the stats give every field of gmlake_stats" 'for f in active_bytes peak_active_bytes reserved_bytes peak_reserved_bytes allocations frees live_allocations failed_allocations stitches stitch_reuses stitch_evictions stitched_blocks stitched_bytes cache_releases chunk_size utilization device_calls free_bytes largest_free_bytes stitchable_bytes device_seconds device_seconds_by_call; do grep -q "\"$f\":" "$tmp/stats.rank1.json" || { echo "no $f"; missing=1; }; done; [ -z "${missing-}" ]'
check "the stats give the pool's host time" 'grep -Eq "\"host_seconds_alloc\":0\.[0-9]*[1-9][0-9]*,\"host_seconds_free\":[0-9.]+\}$" "$tmp/stats.rank1.json"'
LOCAL_RANK=3 "$g" run --set stats_file="$tmp/s-%r-%p-%%.json" -- "$prog" alloc >/dev/null
check "%r %p %% expand" 'ls "$tmp" | grep -Eq "^s-3-[0-9]+-%\.json$"'
"$g" run --set stats_file="$tmp/one.json" -- "$prog" alloc >/dev/null
check "one process: the name as given" '[ -s "$tmp/one.json" ]'
"$g" run --set stats_file="$tmp/none.json" --set trace_file="$tmp/none.trace" -- true
check "a process that served nothing writes no stats or trace file" '[ ! -e "$tmp/none.json" ] && [ ! -e "$tmp/none.trace" ]'
# a stats or trace file that cannot be written whole (a full disk) is said, never lost in silence
err=$("$g" run --set stats_file=/dev/full -- "$prog" alloc 2>&1 >/dev/null)
check "stats_file on a full device: an error naming the file and why" \
  '[[ "$err" == *"cannot write stats_file /dev/full: No space left on device"* ]]'
err=$("$g" run --set trace_file=/dev/full -- "$prog" alloc 2>&1 >/dev/null)
check "trace_file on a full device: one error naming the file and why, the trace said incomplete" \
  '[ "$(grep -c "trace_file /dev/full: write failed (No space left on device): the trace is incomplete" <<<"$err")" = 1 ]'
err=$(RANK=5 GMLAKE_MEMORY_LIMIT=0x10 "$g" run -- "$prog" alloc 2>&1)
check "log lines name pid and rank" '[[ "$err" =~ gmlake\[[0-9]+\ rank\ 5\]:\ environment\ GMLAKE_MEMORY_LIMIT ]]'

# --- typos: gmlake run checks its --set before it starts the program; variables and files are
# reported when gmlake's settings load (the program's first CUDA call)
err=$("$g" run --set stich=off -- sh -c 'echo RAN' 2>&1)
check "run: an unknown --set key is refused up front, naming the argument and the closest key" \
  '[ $? -eq 2 ] && [[ "$err" == *"--set stich=off: unknown key '"'"'stich'"'"'; did you mean '"'"'stitch'"'"'?"* && "$err" != *RAN* && "$err" != *GMLAKE_STICH* ]]'
err=$("$g" run --set auto_gc=-1 -- sh -c 'echo RAN' 2>&1)
check "run: a bad --set value is refused up front, with why" '[ $? -eq 2 ] && [[ "$err" == *"--set auto_gc=-1: auto_gc = '"'"'-1'"'"' is not valid (negative)"* && "$err" != *RAN* ]]'
err=$("$g" run --set chunk_size=3MiB -- sh -c 'echo RAN' 2>&1)
check "run: --set refused by the shared validation, up front" '[ $? -eq 2 ] && [[ "$err" == *"chunk_size must be a power of two"* && "$err" != *RAN* ]]'
err=$(GMLAKE_STICH=off "$g" run -- "$prog" alloc 2>&1)
check "an unknown GMLAKE_ variable is a warning at start-up, with the closest key" '[[ "$err" == *"GMLAKE_STICH: no such setting, ignored; did you mean GMLAKE_STITCH?"* ]]'
# config --help names every option gmlake config accepts, --set with what it does
out=$("$g" config --help)
check "config --help: usage with --set key=value, said to be checked and to set GMLAKE_<KEY>" \
  '[ $? -eq 0 ] && [[ "$out" == "usage: gmlake config [--check] [--example] [--set key=value]..."* &&
    "$out" == *"--set key=value"*"GMLAKE_<KEY>"*"refused (exit 2)"* ]]'
out=$("$g" --help 2>"$tmp/err")
check "gmlake --help: config's line names --set" '[[ "$out" == *"config    print every setting"*"--set key=value"*"replay  "* ]]'
# the usage is printed as written: its `run --set` is text, never a command the shell runs (it
# was: "line 15: run: command not found" on stderr, the words missing from the help)
check "gmlake --help: the usage as written, nothing on stderr" \
  '[ ! -s "$tmp/err" ] && [[ "$out" == *'"'"'as `run --set` gives'"'"'* ]] || { cat "$tmp/err"; false; }'
err=$("$g" frobnicate 2>&1)
check "gmlake frobnicate: one error line, then the usage, no shell error" \
  '[ $? -eq 2 ] && [[ "$err" == "gmlake: unknown command '"'"'frobnicate'"'"'"$'"'"'\n'"'"'"usage: gmlake <command>"* && "$err" != *"not found"* ]]'
"$g" config --check --set stich=off >/dev/null 2>"$tmp/err"
check "... and refused by config --set, naming the argument" '[ $? -eq 2 ] && grep -q -- "--set stich=off: unknown key .stich.; did you mean .stitch.?" "$tmp/err"'
out=$("$g" config --check --set stitch=maybe 2>"$tmp/err")
check "config --set with a bad value: refused naming --set, not an environment variable the user never set" \
  '[ $? -eq 2 ] && [ -z "$out" ] && grep -q -- "--set stitch=maybe: stitch = .maybe. is not valid" "$tmp/err" && ! grep -q "GMLAKE_STITCH" "$tmp/err"'
GMLAKE_STICH=off "$g" config --check >/dev/null 2>&1
check "an unknown GMLAKE_ variable is an error in config --check" '[ $? -eq 1 ]'
"$g" config --check --set small_limit=1GiB >/dev/null 2>"$tmp/err"
check "config --check applies the pool's rules" '[ $? -eq 2 ] && grep -q "small_limit must not exceed chunk_size" "$tmp/err"'
printf 'small_limit = 1GiB\n' >"$tmp/small.conf"
GMLAKE_CONFIG="$tmp/small.conf" "$g" config --check >/dev/null 2>"$tmp/err"
check "config --check: a file the pool would refuse is an error (1)" '[ $? -eq 1 ] && grep -q "small_limit must not exceed chunk_size" "$tmp/err"'
"$g" config --check --set auto_gc=7 >/dev/null
check "config --check passes on good settings" '[ $? -eq 0 ]'
# where settings may come from: a file in the wrong place (/etc where the system file is
# PREFIX/etc) was never named, every key just "# default"
mkdir -p "$tmp/xdg/gmlake"
printf 'auto_gc = 9\n' >"$tmp/xdg/gmlake/gmlake.conf"
out=$(GMLAKE_SYSCONFDIR=$tmp/etc XDG_CONFIG_HOME=$tmp/xdg GMLAKE_CONFIG=$tmp/missing.conf "$g" config 2>/dev/null)
check "config names the files it looks for, in order, and which it read" \
  '[[ "$(tail -n 1 <<<"$out")" == "# files, later ones winning (then GMLAKE_<KEY> variables): $tmp/etc/gmlake.conf (not there), $tmp/xdg/gmlake/gmlake.conf (read), $tmp/missing.conf (not read: see above)" ]] ||
   { tail -n 2 <<<"$out"; false; }'

# --- run --config: a file that is missing, a folder or has errors is refused before the program
# starts (exit 2), naming the file, as --set is (the program used to start, silently)
mkdir "$tmp/confdir"
printf 'stitch = maybe\nfoo = 1\n' >"$tmp/bad.conf"
for f in "$tmp/missing.conf" "$tmp/confdir" "$tmp/bad.conf"; do
  err=$("$g" run --config "$f" -- sh -c 'echo RAN' 2>&1)
  check "run --config $f: refused before the program starts" \
    '[ $? -eq 2 ] && [[ "$err" != *RAN* && "$err" == *"gmlake run: --config $f"*"not started"* ]]'
done
check "... saying what is wrong" '[[ "$("$g" run --config "$tmp/missing.conf" -- true 2>&1)" == *"No such file or directory"* &&
  "$("$g" run --config "$tmp/confdir" -- true 2>&1)" == *"is a directory"* &&
  "$("$g" run --config="$tmp/bad.conf" -- true 2>&1)" == *"bad.conf:1: stitch = '"'"'maybe'"'"' is not valid"*"bad.conf:2: unknown key"* ]]'
err=$(GMLAKE_STICH=off "$g" run --config "$tmp/some.conf" -- sh -c 'echo RAN' 2>&1)
check "run --config checks the file only (a variable is reported as the program starts)" '[[ "$err" == *RAN* ]]'
# one file only (GMLAKE_CONFIG names one): a second --config is refused, naming both, never the
# last one read alone and the first one unchecked
for form in "--config $tmp/bad.conf --config $tmp/some.conf" "--config=$tmp/bad.conf --config=$tmp/some.conf" \
            "--config $tmp/some.conf --config=$tmp/some.conf"; do
  read -r -a a <<<"$form"
  err=$("$g" run "${a[@]}" -- sh -c 'echo RAN' 2>&1)
  check "run $form: refused, naming both files, not started" \
    '[ $? -eq 2 ] && [[ "$err" != *RAN* && "$err" == *"gmlake run: --config given twice ("*"$tmp/"*".conf and $tmp/some.conf): one file only"*"not started"* ]]'
done
# the rules between settings are for the settings together: a file valid with the --set or the
# variables given is not refused for what it lacks alone (small_limit 4MiB above the default
# chunk_size: refused, the program not started, though chunk_size=8MiB came with it)
printf 'small_limit = 4MiB\n' >"$tmp/small4.conf"
err=$("$g" run --config "$tmp/small4.conf" --set chunk_size=8MiB -- sh -c 'echo RAN' 2>&1)
check "run --config FILE --set: the file with the --set is valid: started" '[[ "$err" == *RAN* && "$err" != *refused* ]]'
err=$(GMLAKE_CHUNK_SIZE=8MiB "$g" run --config "$tmp/small4.conf" -- sh -c 'echo RAN' 2>&1)
check "run --config FILE with GMLAKE_CHUNK_SIZE: valid together: started" '[[ "$err" == *RAN* && "$err" != *refused* ]]'
err=$("$g" run --config "$tmp/small4.conf" --set chunk_size=2MiB -- sh -c 'echo RAN' 2>&1)
check "run --config FILE --set: invalid together: refused, not started" \
  '[ $? -eq 2 ] && [[ "$err" != *RAN* && "$err" == *"small_limit must not exceed chunk_size"* ]]'

# --- one validation: config --check, replay and the library give one answer to one setting
verdicts() { # prints "check replay library" for --set $1: 0 accepted, 1 refused
  local a b c
  "$g" config --check --set "$1" >/dev/null 2>&1 && a=0 || a=1
  "$g" replay --policy gmlake --set "$1" >/dev/null 2>&1 && b=0 || b=1
  local k=${1%%=*}
  env "GMLAKE_${k^^}=${1#*=}" LD_PRELOAD="$lib" "$prog" alloc >/dev/null 2>"$tmp/lib.err"
  grep -q "gmlake is OFF" "$tmp/lib.err" && c=1 || c=0
  echo "$a $b $c"
}
check "chunk_size=3MiB: refused by all three" '[ "$(verdicts chunk_size=3MiB)" = "1 1 1" ]'
check "chunk_size=4MiB: accepted by all three" '[ "$(verdicts chunk_size=4MiB)" = "0 0 0" ]'
check "small_limit=4MiB: refused by all three" '[ "$(verdicts small_limit=4MiB)" = "1 1 1" ]'

# --- a warning about a setting appears once per process tree (a chain of 6 processes, each
# loading the settings; the first warns, the others inherit GMLAKE_WARNED_CONFIG and stay quiet)
err=$(GMLAKE_STICH=off GMLAKE_AUTO_GC=lots LD_PRELOAD="$lib" "$prog" chain 5 2>&1 >/dev/null)
check "one warning per process tree, not per process" \
  '[ "$(grep -c "GMLAKE_STICH: no such setting" <<<"$err")" = 1 ] && [ "$(grep -c "auto_gc = .lots. is not valid" <<<"$err")" = 1 ]'
err=$(GMLAKE_STICH=off GMLAKE_WARNED_CONFIG=0123456789abcdef LD_PRELOAD="$lib" "$prog" chain 1 2>&1 >/dev/null)
check "other warnings than the ones inherited are printed (once)" '[ "$(grep -c "GMLAKE_STICH: no such setting" <<<"$err")" = 1 ]'
err=$(env -u PYTORCH_CUDA_ALLOC_CONF LD_PRELOAD="$lib" "$prog" chain 2 2>&1 >/dev/null)
check "the variables the library sets itself (GMLAKE_PYTORCH_ROUTE) are not reported as settings" \
  '[ -z "$err" ]'
err=$(GMLAKE_SMALL_LIMIT=1GiB LD_PRELOAD="$lib" "$prog" chain 3 2>&1 >/dev/null)
check "gmlake is OFF: said once per process tree" '[ "$(grep -c "gmlake is OFF" <<<"$err")" = 1 ]'

# --- run --config with a relative path: the file checked is the file every process reads, also
# one that changes its directory before gmlake loads its settings (it read "rel.conf" in its new
# directory: "cannot read", the file's settings lost, or another file of that name taken)
mkdir "$tmp/cwd" "$tmp/elsewhere"
printf 'stats_file = %s\n' "$tmp/rel.json" >"$tmp/cwd/rel.conf"
printf 'stats_file = %s\n' "$tmp/other.json" >"$tmp/elsewhere/rel.conf"
err=$(cd "$tmp/cwd" && "$g" run --config rel.conf -- sh -c "cd '$tmp/elsewhere' && exec '$prog' alloc" 2>&1 >/dev/null)
check "run --config RELATIVE: the file checked is read after the program changes its directory" \
  '[ -s "$tmp/rel.json" ] && [ ! -e "$tmp/other.json" ] && [ -z "$err" ] || { echo "$err"; false; }'

# --- a libgmlake.so whose path has a space or a colon: LD_PRELOAD cannot hold it (ld.so splits
# its list there), so run refuses, naming the path, instead of running the program without gmlake
# (ld.so's "cannot be preloaded ... ignored", exit status 0)
for d in "$tmp/my prefix" "$tmp/my:prefix"; do
  mkdir -p "$d/bin" "$d/lib" "$d/libexec/gmlake"
  cp "$g" "$d/bin/gmlake" && cp "$lib" "$d/lib/libgmlake.so"
  printf '#!/bin/sh\nexit 0\n' >"$d/libexec/gmlake/gmlake-replay" && chmod +x "$d/libexec/gmlake/gmlake-replay"
  err=$("$d/bin/gmlake" run -- sh -c 'echo RAN' 2>&1)
  check "run from '${d#$tmp/}': refused (LD_PRELOAD cannot hold the library's path), not started" \
    '[ $? -eq 1 ] && [[ "$err" != *RAN* && "$err" == *"gmlake run: $d/lib/libgmlake.so: "*"LD_PRELOAD"*"not started"* ]] || { echo "$err"; false; }'
done

# --- the rest of the command line
"$g" run -- sh -c 'exit 7'
check "exit status is the program's" '[ $? -eq 7 ]'
"$g" run --set nokeyvalue -- true 2>/dev/null
check "--set without = is refused" '[ $? -eq 2 ]'
"$g" run 2>/dev/null
check "no command is refused" '[ $? -eq 2 ]'
err=$("$g" run -- --set x 2>&1)
check "run -- CMD: CMD is the program to run, even with a leading dash; not found: said clearly" \
  '[ $? -eq 127 ] && [ "$err" = "gmlake run: --set: command not found" ]'
err=$("$g" run -- "$tmp/confdir" 2>&1)
check "run -- CMD: a folder is not run" '[ $? -eq 126 ] && [[ "$err" == *"gmlake run: $tmp/confdir: "*"not an executable file"* ]]'
# a file that is executable but that execve cannot run (a program for another machine, a broken
# download): 126 as the man page says, with a gmlake line (it was 1, set -e's, and bash's
# "...: Success": a status the program itself could have given)
printf '\177ELF not a program' >"$tmp/other-arch" && chmod +x "$tmp/other-arch"
err=$("$g" run -- "$tmp/other-arch" 2>&1)
check "run -- CMD: an executable file that cannot be run: 126, said by gmlake run" \
  '[ $? -eq 126 ] && [[ "$err" == *"Exec format error"* && "$err" == *"gmlake run: $tmp/other-arch: cannot be executed"* ]] || { echo "$err"; false; }'
"$g" frobnicate 2>/dev/null
check "unknown command" '[ $? -eq 2 ]'
check "help" '"$g" --help | grep -q "^  run " && "$g" run --help | grep -q -- "--set key=value"'
check "--version" '[[ "$("$g" --version)" =~ ^gmlake\ [0-9]+\.[0-9]+ ]]'
out=$("$g" replay --set stitch_strategy=bestfit 2>&1)
check "replay --set KEY=VALUE, bundled trace under pytorch, expandable and gmlake side by side" \
  '[[ "$out" == "mixtral_moe.trace.gz: "*$'"'"'\n  policy '"'"'*$'"'"'\n  pytorch '"'"'*$'"'"'\n  expandable '"'"'*$'"'"'\n  gmlake '"'"'* ]]'
printf '# gmlake-trace v1\nA 0x1000 100 0 1\nF 0x1000 0 0 2\n' >"$tmp/piped.trace"
out=$("$g" replay --policy pytorch - <"$tmp/piped.trace" 2>&1)
check "replay -: the trace on standard input, alone (not the bundled one as well)" \
  '[ $? -eq 0 ] && [[ "$out" == "-: 2 events"* && "$out" != *mixtral* && "$out" != *"cannot open"* ]]'
"$g" replay --set stitch_strategy=worst >/dev/null 2>&1
check "replay --set with a bad value fails" '[ $? -ne 0 ]'
# --- a program that closed its standard output: gmlake's files (log_file, trace_file) never take
# descriptors 0 to 2, where the program's own output would land in them (its "1 passed" did, in
# the log)
GMLAKE_LOG_LEVEL=info GMLAKE_LOG_FILE="$tmp/closed.log" LD_PRELOAD="$lib" "$prog" alloc >&-
check "stdout closed: the program's output is not in gmlake's log" \
  'grep -q "pool ready" "$tmp/closed.log" && ! grep -q "passed" "$tmp/closed.log"'
GMLAKE_TRACE_FILE="$tmp/closed.trace" LD_PRELOAD="$lib" "$prog" alloc >&- 2>&-
check "stdout and stderr closed: the program's output is not in gmlake's trace" \
  'grep -q "^A " "$tmp/closed.trace" && ! grep -q "passed" "$tmp/closed.trace"'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
