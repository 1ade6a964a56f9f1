#!/usr/bin/env bash
# deps_rebuild.sh ROOT BUILD — scripts/deps.sh's gml_ensure_build on a build with nothing to do
# succeeds under `set -euo pipefail`, as scripts/test and scripts/gmlake run it (a second
# `scripts/test` used to stop right after "== plain (build)", exit 1, no message: the filter of
# ninja's output printed nothing and its grep's status ended the script).
set -euo pipefail
. "$1/scripts/deps.sh"
gml_ensure_build "$2" "$1"
echo "deps-rebuild: 1 passed, 0 failed"
