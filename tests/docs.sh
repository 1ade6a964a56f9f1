#!/usr/bin/env bash
# docs.sh — README.md and docs/ are true for someone who has only the clone: they name no folder
# outside it (`../...`), every source path the README names (in backticks) exists, the man pages
# can be read from a source tree as the README says (`man -l FILE`: FILE exists, in the source or
# the build), and the install, prefix and uninstall commands are given.
# Usage: docs.sh SOURCE BUILD
set -u
src=$1 build=$2
pass=0 fail=0
check() { if eval "$2"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $1"; fi; }
cd "$src" || exit 1

out=$(grep -n '\.\./' README.md docs/*.md docs/gmlake.1)
check "README and docs name no folder outside the clone" '[ -z "$out" ] || { echo "$out"; false; }'
missing=
for p in $(grep -o '`[a-z]*/[^` ]*`' README.md | tr -d '`' | sort -u); do
  case "$p" in
    bench/*|docs/*|tests/*|tools/*|scripts/*|python/*|include/*|core/*|stitch/*|config/*|interpose/*)
      [ -e "$p" ] || missing+=" $p" ;;
  esac
done
check "every source path the README names exists" '[ -z "$missing" ] || { echo "missing:$missing"; false; }'
mans=$(grep -o 'man -l [^` ]*' README.md | sed 's/^man -l //' | sort -u)
check "the README says how to read the man pages from a source tree (man -l)" \
  '[[ "$mans" == *docs/gmlake.1* && "$mans" == *gmlake.conf.5* ]]'
for m in $mans; do
  case "$m" in build/*) f=$build/${m#build/} ;; *) f=$m ;; esac
  check "man -l $m: the file is there" '[ -s "$f" ] && grep -q "^\.TH " "$f"'
done
# the man page names every option of gmlake replay (its usage line) and of the snapshot tools
man1=$(sed 's/\\-/-/g; s/\\f[BIRP]//g' docs/gmlake.1)
missing=
for o in $("$build/tools/gmlake-replay" --help | sed -n '1,/TRACE/p' | grep -o -- '--[a-z-]*') \
         --device --max-events; do
  [[ "$man1" == *"$o"* ]] || missing+=" $o"
done
check "docs/gmlake.1 names every option of replay, import-snapshot and export-snapshot" \
  '[ -z "$missing" ] || { echo "not in docs/gmlake.1:$missing"; false; }'
# gmlake replay --help names every pool setting its --set takes: those it replays, not the ones
# it warns it does not use (the list stopped at memory_limit while six more were added)
tiny=$(mktemp); printf '# gmlake-trace v1\nA 1000 4194304 0 1\nF 1000 0 0 2\n' >"$tiny"
help=$("$build/tools/gmlake-replay" --help | tr '\n' ' ')
unlisted=
for kv in $("$build/tools/gmlake-config" | awk '$1 !~ /^#/ {print $1 "=" $3}'); do
  k=${kv%%=*}; [[ "$kv" == *= ]] && kv+=0
  said=$("$build/tools/gmlake-replay" --policy gmlake --set "$kv" "$tiny" 2>&1 >/dev/null)
  [[ "$said" == *"does not use"* ]] && continue
  [[ "$help" =~ [^a-z_]$k[^a-z_] ]] || unlisted+=" $k"
done
rm -f "$tiny"
check "gmlake replay --help names every pool setting --set takes" \
  '[ -z "$unlisted" ] || { echo "not in gmlake-replay --help:$unlisted"; false; }'
# ... and says what the README says of torch.compile's reduce-overhead under gmlake's default
# (it works: gmlake turns graph trees off; the man page said that it fails)
check "docs/gmlake.1: reduce-overhead works under the default route, as the README says" \
  'grep -qF '"'"'`torch.compile(mode="reduce-overhead")` **works**'"'"' README.md &&
   [[ "$(tr "\n" " " <<<"$man1")" == *'"'"'torch.compile(mode="reduce-overhead") works'"'"'* ]]'
check "the README gives the install, a new prefix for an existing build, and the uninstall" \
  'grep -q "meson install -C build" README.md && grep -q "meson configure build -Dprefix=P" README.md &&
   grep -q "ninja -C build uninstall" README.md'
check "the README's first two commands are as they were" \
  '[ "$(sed -n 3,6p README.md)" = "$(printf "%s\n" '"'"'```sh'"'"' "scripts/gmlake replay      # replay the bundled training trace under several policies, side by side" "scripts/test               # build and run the whole test suite (plain, ASan+UBSan, TSan)" '"'"'```'"'"')" ]'
# the README's figures for the bundled trace are what `gmlake replay` prints for it (the plain
# build's: a sanitized replay of the whole trace takes minutes, and its figures are the same)
if grep -q '"name": "b_sanitize", "value": "none"' "$build/meson-info/intro-buildoptions.json" 2>/dev/null ||
   ! grep -q '"name": "b_sanitize"' "$build/meson-info/intro-buildoptions.json" 2>/dev/null; then
rep=$("$build/tools/gmlake-replay" bench/traces/mixtral_moe.trace.gz 2>/dev/null)
fig() { awk -v p="$1" '$1 == p && $3 == "MiB" { print $4 }' <<<"$rep"; }
said_reserved=$(grep -o 'peak reserved memory is [0-9,]* MiB, [0-9,]* MiB and [0-9,]* MiB' README.md | tr -d ,)
want_reserved="peak reserved memory is $(fig pytorch | cut -d. -f1) MiB $(fig expandable | cut -d. -f1) MiB and $(fig gmlake | cut -d. -f1) MiB"
check "README: the bundled trace's peak reserved figures are replay's ($want_reserved)" \
  '[ "$(tr -d , <<<"$said_reserved")" = "$want_reserved" ]'
# ... and the figure without stitching the README gives beside them
ns=$("$build/tools/gmlake-replay" --policy no-stitch bench/traces/mixtral_moe.trace.gz 2>/dev/null |
  awk '$1 == "no-stitch" && $3 == "MiB" { print $4 }' | cut -d. -f1)
said_ns=$(tr '\n' ' ' <README.md | grep -o 'without stitching (`--policy no-stitch,gmlake`) gmlake.s pool would reserve [0-9,]* MiB' |
  grep -o '[0-9,]* MiB' | tr -d ,)
check "README: the bundled trace's peak reserved without stitching is replay's ($ns MiB)" '[ "$said_ns" = "$ns MiB" ]'
drv() { printf '%.3f' "$(awk -v p="$1" '$1 == p && $3 == "MiB" { print $(NF-2) }' <<<"$rep")"; }
said_driver=$(tr '\n' ' ' <README.md | grep -o 'estimated driver time is [0-9.]* s against [0-9.]* s and [0-9.]* s')
want_driver="estimated driver time is $(drv gmlake) s against $(drv pytorch) s and $(drv expandable) s"
check "README: the bundled trace's driver times are replay's ($want_driver)" '[ "$said_driver" = "$want_driver" ]'
# BENCHMARKS.md's driver-time table (gmlake with default extents, the expandable and pytorch
# models) says the same for the bundled trace: its mixtral_moe row is this replay's
row=$(awk -F' *[|] *' '/^[|] trace [|] gmlake [(]default extents[)]/ { t = 1 }
  t && $2 == "mixtral_moe" { print $3, $6, $7; exit }' docs/BENCHMARKS.md)
drv4() { printf '%.4f' "$(awk -v p="$1" '$1 == p && $3 == "MiB" { print $(NF-2) }' <<<"$rep")"; }
want_row="$(drv gmlake) $(drv4 expandable) $(drv4 pytorch)"
check "BENCHMARKS.md: mixtral_moe's driver times (gmlake, expandable, pytorch) are replay's ($want_row)" \
  '[ "$row" = "$want_row" ]'
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
