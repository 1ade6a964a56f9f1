#!/usr/bin/env bash
# install.sh — a `meson install` tree works as installed: configures SOURCE with
# --prefix=TMP/prefix into a build directory of its own, installs, and checks that the installed
# gmlake reads PREFIX/etc/gmlake.conf, prints its version, finds its library, tools (the snapshot
# importer and exporter too) and bundled trace, and installed its man pages, pkg-config file and Python package.
# Usage: install.sh SOURCE
set -u
src=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# not in a build folder (meson test's working directory): meson setup runs `ninja -t restat` there
cd "$tmp" || exit 1
prefix=$tmp/prefix
log=$tmp/build.log
# As the README says after the first command configured a build with the default prefix: the
# prefix is changed with `meson configure` (a second `meson setup --prefix` would be ignored).
if ! { meson setup "$tmp/build" "$src" -Dtests=disabled && meson configure "$tmp/build" -Dprefix="$prefix" &&
       ninja -C "$tmp/build" && meson install -C "$tmp/build"; } >"$log" 2>&1; then
  tail -n 30 "$log"
  echo "0 passed, 1 failed (the build or the install failed)"
  exit 1
fi
unset GMLAKE_SYSCONFDIR GMLAKE_CONFIG PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF
export XDG_CONFIG_HOME=$tmp/none
for v in $(env | grep -o '^GMLAKE_[A-Z_]*'); do unset "$v"; done
g=$prefix/bin/gmlake
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }

check "gmlake.conf installed in the sysconf dir" '[ -f "$prefix/etc/gmlake.conf" ]'
echo "auto_gc = 77" >>"$prefix/etc/gmlake.conf"
out=$("$g" config --check 2>&1)
check "the installed gmlake reads PREFIX/etc/gmlake.conf" '[[ "$out" =~ auto_gc\ +=\ 77\ +#\ $prefix/etc/gmlake.conf:[0-9]+ ]]'
check "--version" '[[ "$("$g" --version)" =~ ^gmlake\ [0-9] ]]'
lib=$(ls "$prefix"/lib*/libgmlake.so "$prefix"/lib/*/libgmlake.so 2>/dev/null | head -n1)
check "libgmlake.so installed" '[ -n "$lib" ]'
out=$("$g" run -- env 2>/dev/null)
check "run preloads the installed library" '[[ "$out" == *"LD_PRELOAD=$(readlink -f "$lib")"* ]]'
echo "log_level = debug" >>"$prefix/etc/gmlake.conf"
check "... which reads PREFIX/etc/gmlake.conf too (log_level = debug there)" \
  '[[ "$(LD_PRELOAD=$lib sh -c true 2>&1)" == *"PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (PyTorch hands"* ]]'
out=$("$g" replay 2>&1)
check "replay of the bundled trace from the installed tree, three policies" \
  '[[ "$out" == "mixtral_moe.trace.gz: "* && "$out" == *$'"'"'\n  pytorch '"'"'*$'"'"'\n  expandable '"'"'*$'"'"'\n  gmlake '"'"'* ]]'
snap=$src/tests/tools/fixtures/native.pickle.gz
"$g" import-snapshot -q "$snap" -o "$tmp/native.trace" 2>&1
check "import-snapshot from the installed tree" '[ $? -eq 0 ] && grep -q "^A " "$tmp/native.trace"'
"$g" export-snapshot -q "$tmp/native.trace" -o "$tmp/native.back.pickle" 2>&1
check "export-snapshot from the installed tree" '[ $? -eq 0 ] && [ -s "$tmp/native.back.pickle" ]'
mkdir "$tmp/tmpdir"
out=$(TMPDIR=$tmp/tmpdir "$g" replay --json --policy pytorch "$snap" 2>&1)
check "replay of a snapshot from the installed tree, its conversion removed after" \
  '[[ "$out" == *"\"trace\":\"native.pickle.gz\",\"policy\":\"pytorch\""* ]] && [ -z "$(ls -A "$tmp/tmpdir")" ]'
check "PyTorch's import finds the installed torch_route (PYTHONPATH set by the installed library)" \
  '[ -f "$prefix/share/gmlake/python/_gmlake_torch.py" ] && [ -f "$prefix/share/gmlake/python/gmlake_torch_route-1.0.dist-info/entry_points.txt" ] &&
   [ "$(env -u PYTORCH_CUDA_ALLOC_CONF -u PYTHONPATH LD_PRELOAD=$lib sh -c "echo \$PYTHONPATH" 2>/dev/null)" = "$(readlink -f "$prefix/share/gmlake/python")" ]'
check "man pages gmlake(1), gmlake.conf(5)" '[ -f "$prefix/share/man/man1/gmlake.1" ] && grep -q "^\.B auto_gc" "$prefix/share/man/man5/gmlake.conf.5"'
pc=$(find "$prefix" -name gmlake.pc | head -n1)
check "pkg-config file" '[ -n "$pc" ] && [[ "$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs gmlake)" == *"-I$prefix/include"*"-lgmlake"* ]]'
check "public header" '[ -f "$prefix/include/gmlake.h" ]'
pkg=$(find "$prefix" -path '*/gmlake/__init__.py' | head -n1)
check "Python package installed" '[ -n "$pkg" ]'
pypath=$(sed -n 's/^  export PYTHONPATH=//p' "$log" | tail -n 1)  # the last configure's
check "configuring says where the Python package goes and the PYTHONPATH python3 needs" \
  'grep -q "gmlake: the Python package is installed in $prefix/.* does not read" "$log" && [ "$pypath" = "$(dirname "$(dirname "$pkg")")" ]'
check "... under which it is importable, and safe where gmlake is not loaded" \
  '[ "$(PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$pypath python3 -c "import gmlake; print(gmlake.enabled())")" = False ]'
check "... with its snapshot exporter (gmlake.export_snapshot)" \
  '[ -f "$(dirname "$pkg")/_export_snapshot.py" ] && [ "$(PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=$pypath python3 -c "import gmlake; print(gmlake.export_snapshot(\"$tmp/native.trace\", \"$tmp/py.pickle\")[\"allocations\"] > 0)")" = True ]'

# Uninstall (README): every file the install put is removed, and nothing is left in the prefix.
ninja -C "$tmp/build" uninstall >"$log" 2>&1
check "ninja -C build uninstall succeeds" '[ $? -eq 0 ] || { tail -n 5 "$log"; false; }'
left=$(find "$prefix" 2>/dev/null)
check "... and leaves nothing in the prefix, no file and no folder" '[ -z "$left" ] || { echo "$left" | head; false; }'
out=$(meson configure "$tmp/build" -Dpython_dir="$tmp/pysite" 2>&1 && ninja -C "$tmp/build" 2>&1 &&
      meson install -C "$tmp/build" 2>&1)
check "-Dpython_dir=DIR puts the Python package in DIR" '[ -f "$tmp/pysite/gmlake/__init__.py" ] &&
  [[ "$out" == *"gmlake: the Python package is installed in $tmp/pysite,"* ]] || { echo "$out" | tail -n 5; false; }'
ninja -C "$tmp/build" uninstall >/dev/null 2>&1
check "... and uninstall removes it there" '[ ! -e "$tmp/pysite/gmlake/__init__.py" ]'

# First contact without CUDA headers: the simulated device and the tools only, replay works.
if { meson setup "$tmp/nocuda" "$src" -Dcuda=disabled -Dtests=disabled && ninja -C "$tmp/nocuda"; } >"$log" 2>&1; then
  check "no CUDA headers: no libgmlake, the tools are built" \
    '[ ! -e "$tmp/nocuda/interpose/libgmlake.so" ] && [ -x "$tmp/nocuda/tools/gmlake-replay" ] && grep -q "building only the simulated device" "$log"'
  check "... and replay works" '"$tmp/nocuda/tools/gmlake-replay" "$src/bench/traces/mixtral_moe.trace.gz" | grep -q "peak reserved"'
else
  tail -n 20 "$log"
  check "a build without CUDA headers" false
fi
# A build step that fails shows why: a source tree (copy) with a broken file, built by the launcher.
mkdir "$tmp/src"
(cd "$src" && git ls-files -z 2>/dev/null | xargs -0 cp --parents -t "$tmp/src" --) 2>/dev/null ||
  cp -r "$src"/. "$tmp/src"
rm -rf "$tmp/src/build"
echo "this is not C;" >>"$tmp/src/tools/replay.c"
err=$("$tmp/src/scripts/gmlake" replay 2>&1)
check "a failed build shows ninja's output" '[ $? -ne 0 ] && [[ "$err" == *"ninja -C $tmp/src/build'"'"' failed:"* && "$err" == *"replay.c"*"error"* ]]'
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
