#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Layering checks (STYLE.md §1, §2, §3), run by CTest as `check_layering`:
#   1. includes: engine/ uses no ipc/policy/proto/daemon/client header (nor liburing,
#      libseccomp, protobuf-c); ipc/ none of engine/policy/proto; policy/ none of
#      engine/ipc/proto; common/ none of any module;
#   2. symbols: every global symbol defined in each static library given is `pl_`-prefixed
#      (nm --defined-only -g);
#   3. headers: every public header <module>/include/pl/*.h compiles on its own, twice in a
#      row (so its include guard works).
# Usage: check-layering.sh [--cc CC] [--nm NM] [-I DIR]... SOURCE_DIR [LIB.a...]
# Empty library arguments are ignored (CMake passes them for modules not built yet).
set -uo pipefail

cc=${CC:-cc}
nm=nm
extra_inc=()
while [ $# -gt 0 ]; do
    case $1 in
    --cc) cc=$2; shift 2 ;;
    --nm) nm=$2; shift 2 ;;
    -I) extra_inc+=("-I$2"); shift 2 ;;
    -I*) extra_inc+=("$1"); shift ;;
    *) break ;;
    esac
done
if [ $# -lt 1 ]; then
    echo "usage: $0 [--cc CC] [--nm NM] [-I DIR]... SOURCE_DIR [LIB.a...]" >&2
    exit 2
fi
src=$1
shift
fail=0
err() {
    echo "check-layering: $*" >&2
    fail=1
}

# ---- 1. include rules ----
# forbidden MODULE REGEX WHY: no C file under MODULE/ may include a header matching REGEX.
forbidden() {
    local mod=$1 re=$2 why=$3
    [ -d "$src/$mod" ] || return 0
    local hits
    hits=$(find "$src/$mod" \( -name '*.c' -o -name '*.h' \) -print0 |
        xargs -0 -r grep -HnE "^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($re)" || true)
    if [ -n "$hits" ]; then
        while IFS= read -r line; do
            err "${line#"$src"/}: $mod/ must not include this ($why)"
        done <<<"$hits"
    fi
}
# Header patterns of each module (public names and source-tree paths).
h_engine='pl/engine_|([^">]*/)?engine/'
h_ipc='pl/ipc_|([^">]*/)?ipc/|liburing'
h_policy='pl/policy_|([^">]*/)?policy/|seccomp'
h_proto='[^">]*\.pb-c\.h|protobuf-c/|([^">]*/)?proto/'
h_daemon='pl/daemon_|([^">]*/)?daemon/'
h_client='pl/client_|picolm\.h|([^">]*/)?client/'

forbidden engine "$h_ipc|$h_policy|$h_proto|$h_daemon|$h_client" \
    "engine depends on libc, libm, pthreads and common/ only"
forbidden ipc "$h_engine|$h_policy|$h_proto|$h_daemon|$h_client" \
    "ipc moves bytes: no engine, policy or protobuf"
forbidden policy "$h_engine|$h_ipc|$h_proto|$h_daemon|$h_client" \
    "policy decides from its own inputs: no engine, ipc or protobuf"
forbidden common "$h_engine|$h_ipc|$h_policy|$h_proto|$h_daemon|$h_client" \
    "common/ has no dependencies"

# ---- 2. symbol prefixes ----
# Symbols a sanitizer or coverage build adds on its own are not ours to name.
tool_sym='^(__odr_asan|__asan|__ubsan|__sancov|__tsan|__msan|__llvm|__profc|__profd|__x86\.get_pc_thunk)'
n_libs=0
for lib in "$@"; do
    [ -n "$lib" ] || continue
    if [ ! -f "$lib" ]; then
        err "library $lib does not exist (build it first)"
        continue
    fi
    n_libs=$((n_libs + 1))
    syms=$("$nm" --defined-only -g "$lib" 2>/dev/null) || {
        err "$nm failed on $lib"
        continue
    }
    obj=""
    while IFS= read -r line; do
        case $line in
        "") continue ;;
        *:) obj=${line%:}; continue ;;
        esac
        name=${line##* }
        if [[ $name != pl_* && ! $name =~ $tool_sym ]]; then
            err "$(basename "$lib")($obj): global symbol '$name' lacks the pl_ prefix" \
                "(make it static, or name it pl_<module>_...)"
        fi
    done <<<"$syms"
done

# ---- 3. self-contained public headers ----
inc=()
for d in "$src"/*/include; do
    [ -d "$d" ] && inc+=("-I$d")
done
n_hdr=0
for h in "$src"/*/include/pl/*.h; do
    [ -f "$h" ] || continue
    n_hdr=$((n_hdr + 1))
    out=$("$cc" -std=c11 -D_GNU_SOURCE -Wall -Werror -fsyntax-only "${inc[@]}" \
        "${extra_inc[@]}" -include "$h" -include "$h" -x c /dev/null 2>&1) ||
        err "${h#"$src"/} does not compile on its own:"$'\n'"$out"
done

if [ "$fail" -ne 0 ]; then
    echo "check-layering: FAILED" >&2
    exit 1
fi
echo "check-layering: ok (include rules, $n_libs libraries, $n_hdr public headers)"
