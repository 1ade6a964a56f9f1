# scripts/deps.sh — sourced by scripts/test and scripts/gmlake: installs what the build needs on a
# fresh Debian machine (as root, with apt) and configures/builds a build directory.

gml_ensure_deps() {
  local need=()
  command -v meson >/dev/null || need+=(meson)
  command -v ninja >/dev/null || need+=(ninja-build)
  command -v pkg-config >/dev/null || need+=(pkg-config)
  command -v cc >/dev/null || need+=(gcc)
  [ -f /usr/include/criterion/criterion.h ] || need+=(libcriterion-dev)
  [ -f /usr/include/uthash.h ] || need+=(uthash-dev)
  [ -f /usr/include/bsd/sys/tree.h ] || need+=(libbsd-dev)
  [ -f /usr/include/zlib.h ] || need+=(zlib1g-dev)
  command -v clang >/dev/null || need+=(clang)
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need+=(libclang-rt-14-dev)
  [ ${#need[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "gmlake: missing ${need[*]}; install them (Debian: apt-get install ${need[*]})" >&2
    return 2
  fi
  echo "gmlake: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null
}

# gml_ensure_build DIR [meson options...]: configure DIR if needed, then build it quietly.
gml_ensure_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/build.ninja" ]; then
    meson setup "$dir" "$@" >/dev/null || return 1
  fi
  ninja -C "$dir" >/dev/null
}
