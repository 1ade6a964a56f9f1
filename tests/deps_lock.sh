#!/usr/bin/env bash
# deps_lock.sh ROOT — two gmlake commands at once in one source tree build it one after the other:
# scripts/deps.sh's gml_ensure_build holds a lock on the build folder around meson and ninja.
# Two ninjas in one folder at once are not safe (each rewrites .ninja_log and .ninja_deps: a
# build seen half-written, "premature end of file", and outputs rebuilt at every later run,
# their progress lines in the next command's errors).  A stand-in ninja on PATH records when it
# starts and ends; three calls at once must never overlap.
set -u
. "$1/scripts/deps.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/build"
: >"$tmp/build/build.ninja"
cat >"$tmp/bin/ninja" <<'SH'
#!/usr/bin/env bash
echo "start $$" >>"$DEPS_LOCK_LOG"
sleep 0.4
echo "end $$" >>"$DEPS_LOCK_LOG"
SH
chmod +x "$tmp/bin/ninja"
export DEPS_LOCK_LOG=$tmp/log PATH="$tmp/bin:$PATH"
for i in 1 2 3; do gml_ensure_build "$tmp/build" 2>/dev/null & done
wait
# every start is followed by its own end before the next start
if awk '$1 == "start" { if (open) bad = 1; open = $2 } $1 == "end" { if ($2 != open) bad = 1; open = "" }
        END { exit bad || NR != 6 }' "$tmp/log"; then
  echo "deps-lock: 1 passed, 0 failed"
else
  echo "FAIL: ninja ran concurrently in one build folder:"; cat "$tmp/log"
  echo "deps-lock: 0 passed, 1 failed"; exit 1
fi
