# bench/gpu/lib.sh — what bench/gpu/run_all.sh and bench/gpu/run_dist.sh share; sourced, not run.
# Before sourcing: name=<script name for the log lines>, logname=<log file name>, and "$@" holding
# the script's arguments ([OUTDIR]).  Sets root, out (OUTDIR, else $OUT, else build/gpu-bench),
# log, t0, budget (BUDGET, default 450 s), run_timeout (RUN_TIMEOUT, default 150 s), allocators
# (ALLOCATORS, default "expandable cudaMallocAsync gmlake") and lib (libgmlake.so).
# Allocators: native (PyTorch's caching allocator, no gmlake), expandable (expandable_segments:True), cudaMallocAsync (backend:cudaMallocAsync),
# gmlake (LD_PRELOAD of libgmlake.so with backend:cudaMallocAsync), gmlake-native (LD_PRELOAD with
# backend:native: PyTorch's own caching allocator over gmlake, which then sees only its segments),
# and either gmlake one with settings: gmlake:KEY=VALUE,KEY=VALUE -> GMLAKE_KEY=VALUE ...
# A gmlake one may name another build: gmlake@DIR (also gmlake@DIR:KEY=VALUE, gmlake-native@DIR)
# preloads DIR/interpose/libgmlake.so, DIR a folder of the repository's root (letters, digits, '.',
# '_', '-'), e.g. the build of the commit before a pool change, for an A/B in one lease:
# ALLOCATORS="gmlake gmlake@build-old".  Each label once (two runs of one allocator a round take
# two labels, e.g. gmlake and gmlake:log_level=info): refused with status 2 otherwise.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-${OUT:-$root/build/gpu-bench}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
log=$out/$logname
t0=$SECONDS
budget=${BUDGET:-450}
run_timeout=${RUN_TIMEOUT:-150}
read -r -a allocators <<<"${ALLOCATORS:-expandable cudaMallocAsync gmlake}"
say() { echo "[$name +$((SECONDS - t0))s] $*" | tee -a "$log" >&2; }
# each label once: report.py pairs the runs of a round by a run's order // the allocators listed,
# which a label listed twice would shift; two runs of one allocator take two labels
declare -A listed_=()
for a_ in "${allocators[@]}"; do
  if [ -n "${listed_[$a_]:-}" ]; then
    say "ALLOCATORS lists '$a_' twice: give each run a label of its own (e.g. gmlake and gmlake:log_level=info)"
    exit 2
  fi
  listed_[$a_]=1
done
unset listed_ a_
lib=$root/build/interpose/libgmlake.so

build_missing() { # [artifact under build/ ...]: builds with meson into build-gpu/ where build/ lacks one
  local need=0 a
  for a in interpose/libgmlake.so "$@"; do [ -e "$root/build/$a" ] || need=1; done
  [ $need = 1 ] || return 0
  # a carried build/ is used as it is; what it lacks is built in build-gpu/
  say "building with meson into build-gpu/ (build/ lacks libgmlake.so or $*)"
  [ -f "$root/build-gpu/build.ninja" ] || meson setup "$root/build-gpu" "$root" -Dtests=disabled >>"$log" 2>&1
  ninja -C "$root/build-gpu" >>"$log" 2>&1 || say "meson build failed (see $logname)"
  [ -f "$lib" ] || lib=$root/build-gpu/interpose/libgmlake.so
}

uses_gmlake() { local b=${1%%:*}; case ${b%%@*} in gmlake | gmlake-native) return 0 ;; esac; return 1; }

lib_of() { # the libgmlake.so allocator $1 preloads (gmlake@DIR: DIR's build); fails on a bad DIR
  local b=${1%%:*}
  case $b in
    *@*) case ${b#*@} in '' | *[!A-Za-z0-9._-]* | . | ..) return 1 ;; esac
      echo "$root/${b#*@}/interpose/libgmlake.so" ;;
    *) echo "$lib" ;;
  esac
}

alloc_env() { # the environment of allocator $1 (words for env); fails on an unknown allocator
  local base=${1%%:*} kv env_list="" IFS=, l
  l=$(lib_of "$1") || return 1
  if [ "$base" != "$1" ]; then # settings: gmlake:extent_share=0,extent_size=64MiB -> GMLAKE_EXTENT_SHARE=0 ...
    uses_gmlake "$base" || return 1
    for kv in ${1#*:}; do
      case $kv in
        [a-z]*=?*) env_list+=" GMLAKE_$(echo "${kv%%=*}" | tr a-z A-Z)=${kv#*=}" ;;
        *) return 1 ;;
      esac
    done
  fi
  # another build (@DIR) for gmlake's allocators only
  [ "$base" = "${base%%@*}" ] || uses_gmlake "$base" || return 1
  case ${base%%@*} in
    native) echo "PYTORCH_CUDA_ALLOC_CONF=backend:native" ;;
    expandable) echo "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" ;;
    cudaMallocAsync) echo "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync" ;;
    gmlake) echo "PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync LD_PRELOAD=$l GMLAKE_LOG_LEVEL=info$env_list" ;;
    # an explicit backend:native is kept by libgmlake (interpose/pytorch_env.c, gml_torch_plan)
    gmlake-native) echo "PYTORCH_CUDA_ALLOC_CONF=backend:native LD_PRELOAD=$l GMLAKE_LOG_LEVEL=info$env_list" ;;
    *) return 1 ;;
  esac
}

over_budget() { [ $((SECONDS - t0)) -ge "$budget" ]; }

rotated() { # index round position: the allocator at this position; each index and round start one later
  echo "${allocators[$((($1 + $3 + $2) % ${#allocators[@]}))]}"
}

# The caller defines record_error WHAT ALLOCATOR WHY (one JSON line in its results).
run_env() { # what allocator: prints the allocator's environment, or records why the run cannot
  # start (unknown allocator, no libgmlake.so, over the budget) and fails
  local envs
  if ! envs=$(alloc_env "$2"); then record_error "$1" "$2" "unknown allocator"; return 1; fi
  if uses_gmlake "$2" && [ ! -f "$(lib_of "$2")" ]; then record_error "$1" "$2" "no $(lib_of "$2")"; return 1; fi
  if over_budget; then
    say "skip $1/$2: over the budget of ${budget}s"
    record_error "$1" "$2" "skipped: time budget"
    return 1
  fi
  echo "$envs"
}
run_line() { # pattern envs cmd...: runs cmd under the words of envs (for env) and RUN_TIMEOUT, its
  # output and errors to the log; prints the last line of its output that matches pattern (grep -E)
  # and returns cmd's own exit status (124: past RUN_TIMEOUT)
  local pat=$1 envs=$2 rc
  shift 2
  # shellcheck disable=SC2086 # envs is a list of words
  env $envs timeout -k 5 "$run_timeout" "$@" >"$out/last_run.txt" 2>>"$log"
  rc=$?
  cat "$out/last_run.txt" >>"$log"
  grep -E "$pat" "$out/last_run.txt" | tail -1
  return $rc
}
run_done() { # what allocator rc: a failed run is said and recorded (124: past RUN_TIMEOUT)
  [ "$3" -eq 0 ] && return 0
  say "$1 under $2 failed (rc $3$([ "$3" -eq 124 ] && echo ": over RUN_TIMEOUT=${run_timeout}s"), see $logname)"
  record_error "$1" "$2" "rc $3"
}
