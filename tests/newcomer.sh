#!/usr/bin/env bash
# newcomer.sh — the README's first command (`scripts/gmlake replay`) as a newcomer meets it, each
# time in a fresh copy of SOURCE's tracked files: with Criterion hidden from meson (its
# pkg-config file left out, cmake turned off), without CUDA headers (CUDA_HOME an empty folder),
# each build's progress free of compiler warnings,
# after a build that fails (at `meson setup`, then at `ninja`), where every command must say
# that the build failed and where to see why, and offline with a dependency missing (apt-get
# fails), where every command must stop at one gmlake line that says what to install, and
# `scripts/test --help` or a mistyped setup is answered before anything is installed.
# Usage: newcomer.sh SOURCE
set -u
src=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }
unset GMLAKE_SYSCONFDIR GMLAKE_CONFIG
export XDG_CONFIG_HOME=$tmp/none

# copy NAME: SOURCE's tracked files (the whole tree where it is no git checkout) in TMP/NAME.
copy() {
  mkdir "$tmp/$1"
  (cd "$src" && git ls-files -z 2>/dev/null | xargs -0 cp --parents -t "$tmp/$1") 2>/dev/null ||
    cp -r "$src"/. "$tmp/$1"
  rm -rf "$tmp/$1"/build*
}

# Criterion hidden: every pkg-config file but criterion.pc, and no cmake.
pc=$tmp/pkgconfig
mkdir "$pc"
IFS=: read -ra pcdirs <<<"$(pkg-config --variable pc_path pkg-config 2>/dev/null):${PKG_CONFIG_PATH:-}"
for d in ${pcdirs[@]+"${pcdirs[@]}"}; do
  for f in "$d"/*.pc; do
    [ -f "$f" ] && [ "${f##*/}" != criterion.pc ] && ln -s "$f" "$pc/" 2>/dev/null
  done
done
hide_criterion=(env PKG_CONFIG_LIBDIR="$pc" PKG_CONFIG_PATH= CMAKE=false)

# --- 1. Criterion hidden: the first command builds and prints the table.
copy a
out=$("${hide_criterion[@]}" "$tmp/a/scripts/gmlake" replay 2>"$tmp/a.err")
rc=$?
check "Criterion hidden: replay exits 0" '[ $rc -eq 0 ] || { tail -n 20 "$tmp/a.err"; false; }'
check "... and meson really did not find Criterion" \
  'grep -Eq "Run-time dependency criterion found: NO" "$tmp/a/build/meson-logs/meson-log.txt"'
check "... and prints the table: pytorch, expandable, gmlake" \
  '[[ "$out" == "mixtral_moe.trace.gz: "*$'"'"'\n  pytorch '"'"'*$'"'"'\n  expandable '"'"'*$'"'"'\n  gmlake '"'"'* ]]'
check "... and says that it builds, with progress" \
  'grep -q "^gmlake: building .*first time" "$tmp/a.err" && grep -Eq "^\[[0-9]+/[0-9]+\] " "$tmp/a.err"'
# the first command shows the build's progress: a compiler warning there reads as a broken tree
check "... and the build prints no compiler warning" '! grep -A3 "warning:" "$tmp/a.err"'
"${hide_criterion[@]}" "$tmp/a/scripts/gmlake" replay >/dev/null 2>"$tmp/a.err2"
check "... and is quiet the second time" '[ ! -s "$tmp/a.err2" ] || { cat "$tmp/a.err2"; false; }'

# --- 2. No CUDA headers (CUDA_HOME names an empty folder; /usr/local/cuda is not looked at).
copy b
mkdir "$tmp/nocuda"
out=$(CUDA_HOME=$tmp/nocuda "$tmp/b/scripts/gmlake" replay 2>"$tmp/b.err")
check "no CUDA headers: replay prints the table" '[[ "$out" == *$'"'"'\n  gmlake '"'"'* ]] || { tail -n 20 "$tmp/b.err"; false; }'
check "... and the build (Criterion's tests too) prints no compiler warning" '! grep -A3 "warning:" "$tmp/b.err"'
check "... libgmlake is not built" '[ -x "$tmp/b/build/tools/gmlake-replay" ] && [ ! -e "$tmp/b/build/interpose/libgmlake.so" ]'
err=$(CUDA_HOME=$tmp/nocuda "$tmp/b/scripts/gmlake" run -- true 2>&1)
check "... run says no CUDA headers were found, and where it looked" \
  '[ $? -ne 0 ] && [[ "$err" == *"found no CUDA headers"*"$tmp/nocuda/include"* ]] || { echo "$err"; false; }'
check "... config works" 'CUDA_HOME=$tmp/nocuda "$tmp/b/scripts/gmlake" config --check >/dev/null 2>&1'

# --- 3. A build that fails, at meson setup and at ninja: every command says so.
failed() {  # NAME: every command fails and says that the build failed, and how to see why
  local name=$1 c err
  for c in "--version" "config" "import-snapshot -h" "run -- true" "run --set log_level=error -- true" "replay"; do
    # shellcheck disable=SC2086
    err=$("$tmp/$name/scripts/gmlake" $c 2>&1 </dev/null)
    check "$name: 'gmlake $c' fails, saying the build failed and where to see why" \
      '[ $? -ne 0 ] && [[ "$err" == *"gmlake: the build failed"*"$tmp/$name/build/gmlake-build.log"* ]] &&
       [[ "$err" != *"No such file"* && "$err" != *"can'"'"'t open file"* && "$err" != *"CUDA headers are"* ]] ||
       { echo "$err" | tail -n 8; false; }'
  done
}
copy c
echo "error('a broken meson.build')" >>"$tmp/c/meson.build"
failed c
check "c: the log holds meson's error" 'grep -q "a broken meson.build" "$tmp/c/build/gmlake-build.log"'
copy d
echo "this is not C;" >>"$tmp/d/tools/config_main.c"
failed d
check "d: the log holds the compiler's error" 'grep -q "config_main.c.*error" "$tmp/d/build/gmlake-build.log"'

# --- 4. Offline, with what the build needs missing (meson hidden from PATH; as root, with an
# apt-get that cannot fetch): every command (and scripts/test) stops at one gmlake line that names
# the packages and says to install them by hand; nothing after it, no hang.
# offline NAME FAILS HIDDEN...: TMP/NAME.bin, a PATH of the programs on PATH but HIDDEN, with an
# `id -u` that says root and an apt-get whose step FAILS (update: no network; install: update
# works, the package is not found).
offline() {
  local bin=$tmp/$1.bin fails=$2 id d f
  shift 2
  id=$(command -v id)
  mkdir "$bin"
  IFS=: read -ra pathdirs <<<"$PATH"
  for d in ${pathdirs[@]+"${pathdirs[@]}"}; do
    for f in "$d"/*; do
      [ -x "$f" ] && [ ! -e "$bin/${f##*/}" ] && [[ " $* apt-get id " != *" ${f##*/} "* ]] && ln -s "$f" "$bin/"
    done
  done
  printf '#!/bin/sh\n[ "$1" = -u ] && { echo 0; exit 0; }\nexec %q "$@"\n' "$id" >"$bin/id"
  cat >"$bin/apt-get" <<APT
#!/bin/sh
if [ "\$1" = update ]; then
  [ $fails = update ] || exit 0
  echo "W: Failed to fetch http://deb.debian.org/debian/dists/bookworm/InRelease  Temporary failure resolving 'deb.debian.org'" >&2
  echo "E: Some index files failed to download. They have been ignored, or old ones used instead." >&2
  exit 100
fi
for p; do case "\$p" in -*|install) ;; *) echo "E: Unable to locate package \$p" >&2 ;; esac; done
exit 100
APT
  chmod +x "$bin/id" "$bin/apt-get"
}
copy e
offline e update meson
offline e2 install meson ninja
offline e3 update clang
# offline_stops NAME BIN LAST COMMAND...: COMMAND, run with PATH=BIN, fails within 60 s and its
# last line is LAST (none other names /gmlake-config or says "not started").
offline_stops() {
  local name=$1 bin=$2 last=$3 err rc
  shift 3
  err=$(PATH=$bin timeout 60 "$@" 2>&1 </dev/null)
  rc=$?
  check "$name" '[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(tail -n 1 <<<"$err")" = "$last" ] &&
    [[ "$err" != *"No such file"* && "$err" != *"not started"* ]] || { echo "rc $rc:"; echo "$err" | tail -n 8; false; }'
}
for c in "--version" "config" "import-snapshot -h" "run -- true" "run --set log_level=error -- true" "replay"; do
  # shellcheck disable=SC2086
  offline_stops "offline, apt-get update fails: 'gmlake $c' stops, saying what to install" "$tmp/e.bin" \
    "gmlake: could not install meson (apt-get update failed, see above); install them by hand, then run the command again" \
    "$tmp/e/scripts/gmlake" $c
done
offline_stops "offline, apt-get install fails: 'gmlake run --set' stops, saying what to install" "$tmp/e2.bin" \
  "gmlake: could not install meson ninja-build (apt-get install failed, see above); install them by hand, then run the command again" \
  "$tmp/e/scripts/gmlake" run --set log_level=error -- true
offline_stops "offline, apt-get update fails: scripts/test stops, saying what to install" "$tmp/e.bin" \
  "gmlake: could not install meson (apt-get update failed, see above); install them by hand, then run the command again" \
  "$tmp/e/scripts/test" plain
# gml_ensure_test_deps installs under scripts/test's set -e: the message still comes
err=$(PATH=$tmp/e3.bin timeout 60 "$tmp/e/scripts/test" plain 2>&1 </dev/null)
check "offline, clang missing: scripts/test stops, saying what to install" \
  '[ $? -ne 0 ] && [[ "$(tail -n 1 <<<"$err")" == "gmlake: could not install "*clang*" (apt-get update failed, see above); install them by hand, then run the command again" ]] ||
   { echo "$err" | tail -n 8; false; }'
# a usage question or a typo is answered before anything is installed (apt-get would fail here)
out=$(PATH=$tmp/e3.bin timeout 60 "$tmp/e/scripts/test" --help 2>&1 </dev/null)
check "offline, clang missing: 'scripts/test --help' prints its usage, installs nothing" \
  '[ $? -eq 0 ] && [[ "$out" == "usage: scripts/test [plain|asan|tsan]..."* && "$out" != *"install"*"by hand"* ]] ||
   { echo "$out" | tail -n 8; false; }'
err=$(PATH=$tmp/e3.bin timeout 60 "$tmp/e/scripts/test" plian 2>&1 </dev/null)
check "offline, clang missing: 'scripts/test plian' is refused, naming the setups, installs nothing" \
  '[ $? -eq 2 ] && [ "$err" = "scripts/test: unknown setup '"'"'plian'"'"' (plain, asan, tsan; --help)" ] ||
   { echo "$err" | tail -n 8; false; }'
check "e: nothing was built" '[ ! -e "$tmp/e/build/build.ninja" ]'

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
