#!/usr/bin/env bash
# stdout_errors.sh SRC TOOLS_DIR — a report the tools print that cannot be written (standard
# output on a full device, or closed) is an error naming standard output, exit status 1: never a
# lost table, configuration or man page with exit status 0.  Nothing written, nothing to say: a
# closed standard output is no error where the tool printed nothing to it.
source "$(dirname "$0")/checks.sh"
T=$(readlink -f "$2")
cd "$tmp" || exit 1
printf '# gmlake-trace v1\nA 0x1000 100 0 1\nF 0x1000 0 0 2\n' > good.trace
export GMLAKE_SYSCONFDIR=/nonexistent XDG_CONFIG_HOME=/nonexistent
for cmd in "gmlake-replay --policy pytorch good.trace" "gmlake-replay --json good.trace" \
           "gmlake-replay --help" "gmlake-config" "gmlake-config --example" "gmlake-config --man" \
           "gmlake-config --version" "gmlake-config --help"; do
  set -- $cmd
  tool=$1; shift
  err=$("$T/$tool" "$@" 2>&1 >/dev/full)
  check "$cmd > /dev/full: exit 1, said" "1 1" "$? $(grep -c "standard output: No space left on device" <<<"$err")"
  err=$("$T/$tool" "$@" 2>&1 >&-)
  check "$cmd >&-: exit 1, said" "1 1" "$? $(grep -c "standard output: Bad file descriptor" <<<"$err")"
  "$T/$tool" "$@" >/dev/null 2>&1
  check "$cmd > /dev/null: exit 0" "0" "$?"
done
# nothing for standard output: a closed one is no error
"$T/gmlake-replay" --policy pytorch >&- 2>/dev/null
check "gmlake-replay with no trace, standard output closed: the usage error (2), nothing else" "2" "$?"
exit $fail
