#!/usr/bin/env bash
# deps_rebuild.sh ROOT BUILD — scripts/deps.sh's gml_ensure_build on a build with nothing to do
# succeeds under `set -euo pipefail`, as scripts/test and scripts/gmlake run it (a second
# `scripts/test` used to stop right after "== plain (build)", exit 1, no message: the filter of
# ninja's output printed nothing and its grep's status ended the script).
set -euo pipefail
. "$1/scripts/deps.sh"
gml_ensure_build "$2" "$1" >/dev/null 2>&1
# A first build set up from inside another build folder (a test's working directory is the build
# folder) leaves that folder up to date: meson setup runs `ninja -t restat` in its working
# directory, which recorded the other folder's unchanged restat outputs (tools/gmlake.conf, the
# symbol files) as older than their inputs: its next gmlake command rebuilt them, their progress
# lines in that command's errors.  A stand-in ninja builds nothing (its tools are the real ones).
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/bin"
printf '#!/bin/sh\ncase "$*" in *"-t "*|--version) exec %s "$@" ;; esac\nexit 0\n' "$(command -v ninja)" >"$tmp/bin/ninja"
chmod +x "$tmp/bin/ninja"
(cd "$2" && PATH=$tmp/bin:$PATH gml_ensure_build "$tmp/other" -Dtests=disabled >/dev/null 2>&1)
if ! ninja -C "$2" -n 2>&1 | grep -q "no work to do"; then
  echo "FAIL: a build set up from inside $2 left it out of date:"
  ninja -C "$2" -n 2>&1 | head -n 4
  echo "deps-rebuild: 1 passed, 1 failed"
  exit 1
fi
echo "deps-rebuild: 2 passed, 0 failed"
