# scripts/deps.sh — sourced by scripts/gmlake and scripts/test: installs what is missing on a fresh
# Debian machine (as root, with apt) and configures/builds a build directory.
#   gml_ensure_deps        what the build needs (scripts/gmlake: replay, config, run)
#   gml_ensure_test_deps   what the tests need on top (scripts/test only: Criterion, clang and
#                          its fuzzer runtime)
# CUDA headers are not installed here: without them the build makes the simulated device and the
# tools only (meson option cuda=auto), which is all `gmlake replay` needs.

gml_source_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# gml_apt_install PKG...: installs the packages, or says how when this shell cannot.  Where
# apt-get fails (offline, say), its own lines are followed by one that says what to do, and the
# status is non-zero: the caller stops there.
gml_apt_install() {
  [ $# -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "gmlake: missing $*; install them (Debian: apt-get install $*)" >&2
    return 2
  fi
  echo "gmlake: installing $*" >&2
  export DEBIAN_FRONTEND=noninteractive
  local step
  if ! apt-get update -qq; then
    step=update
  elif ! apt-get install -y -qq "$@" >/dev/null; then
    step=install
  else
    return 0
  fi
  echo "gmlake: could not install $* (apt-get $step failed, see above); install them by hand, then run the command again" >&2
  return 1
}

gml_ensure_deps() {
  local need=()
  command -v meson >/dev/null || need+=(meson)
  command -v ninja >/dev/null || need+=(ninja-build)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  command -v cc >/dev/null || need+=(gcc)
  [ -f /usr/include/uthash.h ] || need+=(uthash-dev)
  [ -f /usr/include/bsd/sys/tree.h ] || need+=(libbsd-dev)
  [ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
  gml_apt_install "${need[@]}"
}

gml_ensure_test_deps() {
  gml_ensure_deps || return
  local need=()
  [ -f /usr/include/criterion/criterion.h ] || need+=(libcriterion-dev)
  command -v clang >/dev/null || need+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
  command -v python3 >/dev/null || need+=(python3)
  gml_apt_install "${need[@]}"
}

# gml_ensure_build DIR [meson options...]: configure DIR if needed, then build it.  What meson and
# ninja print goes to DIR/gmlake-build.log; ninja's progress lines ([n/N] ...) also go to stderr,
# and on a failure the tail of the log says why.  A build that succeeded leaves DIR/gmlake-build.ok.
# One build of DIR at a time (DIR/.gmlake-build.lock, flock): two gmlake commands started at once
# would run two ninjas in one folder, which corrupts its records (tests/deps_lock.sh).
gml_ensure_build() {
  local dir=$1 lockfd rc
  mkdir -p "$dir" || return 1
  if command -v flock >/dev/null && exec {lockfd}>>"$dir/.gmlake-build.lock"; then
    flock "$lockfd" || true # a folder that cannot be locked (some network file systems): built unlocked
    rc=0
    gml_build_locked "$@" || rc=$?
    exec {lockfd}>&-
    return $rc
  fi
  gml_build_locked "$@"
}

# gml_ensure_build's work, with the lock held (or none to take).
gml_build_locked() {
  local dir=$1 abs log rc
  shift
  abs=$(cd "$dir" && pwd)
  log=$abs/gmlake-build.log
  : >"$log"
  if [ ! -f "$dir/build.ninja" ]; then
    echo "gmlake: building $dir (first time, ~15 s on two cores): meson setup, then ninja" >&2
    # from the source root: meson setup runs `ninja -t restat` in its working directory, which
    # would mark another build folder's unchanged outputs out of date (tests/deps_rebuild.sh)
    if ! (cd "$gml_source_root" && meson setup "$abs" "$gml_source_root" "$@") >>"$log" 2>&1; then
      echo "gmlake: 'meson setup $dir' failed:" >&2
      tail -n 25 "$log" >&2
      return 1
    fi
  fi
  # the filter may print nothing (nothing to do): its grep's status is not the build's
  ninja -C "$dir" 2>&1 | tee -a "$log" |
    { grep -v -e '^ninja: Entering directory' -e '^ninja: no work to do' >&2 || true; }
  rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "gmlake: 'ninja -C $dir' failed:" >&2
    grep -v '^\[[0-9]*/[0-9]*\] ' "$log" | tail -n 25 >&2
    return 1
  fi
  : >"$dir/gmlake-build.ok"
}
