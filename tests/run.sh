#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The whole test suite, as the README's second command and CI's .ci/run run it:
#   1. installs the Debian build dependencies when any is missing (apt-get; sudo when not root),
#   2. a release build with -Werror and every CTest test,
#   3. an ASan+UBSan build and every test but the benchmarks,
#   4. a TSan build of the threaded parts (labels: threads),
#   5. the aarch64 NEON kernels and the fidelity tests cross-built and run under qemu-user
#      (tests/cross/run-aarch64.sh --fidelity; it installs the cross packages it needs),
#   6. the libFuzzer targets built with clang (ASan+UBSan) and their fuzz-smoke tests (a few
#      seconds each from generated seeds; long runs: tests/fuzz/run-fuzz.sh),
#   7. a release build with clang and -Werror (its own warnings: -Wcast-align on x86,
#      -Wformat-nonliteral, -Wmissing-field-initializers on positional initializers, ...)
#      and every test but the benchmarks: the other compiler's code from the same source.
# Test data comes from PICOLM_TEST_DATA (default: ../shared beside the checkout).
# Options: PL_SKIP_SANITIZERS=1 skips steps 3-4, PL_SKIP_CROSS=1 step 5, PL_SKIP_FUZZ=1 step 6,
# PL_SKIP_CLANG=1 step 7;
# PL_JOBS=N sets the build parallelism.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake pkg-config liburing-dev libseccomp-dev libprotobuf-c-dev
      protobuf-c-compiler libcmocka-dev clang libclang-rt-14-dev clang-format python3 systemd
      groff-base dpkg-dev)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "== installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# As root, picolmd drops to the 'picolm' service user, which the package creates
# (packaging/sysusers.d); a fresh machine has none, so make it as the package would.
if [ "$(id -u)" = 0 ] && ! getent passwd picolm >/dev/null; then
    echo "== creating the picolm system user (as packaging/sysusers.d/picolm.conf does)"
    useradd --system --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin picolm
fi

jobs=${PL_JOBS:-$(nproc)}
data=${PICOLM_TEST_DATA:-$(cd .. && pwd)/shared}
export PICOLM_TEST_DATA="$data"

build_and_test() { # dir, ctest args..., -- cmake args...
    local dir=$1; shift
    local ctest_args=()
    while [ "$1" != "--" ]; do ctest_args+=("$1"); shift; done
    shift
    echo "== configure $dir $*"
    cmake -S . -B "$dir" -DPL_WERROR=ON -DPICOLM_TEST_DATA="$data" "$@" >/dev/null
    echo "== build $dir"
    cmake --build "$dir" -j"$jobs" >"$dir.build.log" 2>&1 || { tail -50 "$dir.build.log"; exit 1; }
    echo "== test $dir"
    (cd "$dir" && ctest --output-on-failure -j"$jobs" "${ctest_args[@]}")
}

build_and_test build-ci -LE bench -- -DCMAKE_BUILD_TYPE=Release
if [ "${PL_SKIP_SANITIZERS:-0}" != 1 ]; then
    build_and_test build-asan -LE 'bench|load|fuzz-smoke' -- -DCMAKE_BUILD_TYPE=Debug \
        -DPL_SANITIZE=address,undefined
    build_and_test build-tsan -L threads -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPL_SANITIZE=thread
fi
if [ "${PL_SKIP_CROSS:-0}" != 1 ]; then
    echo "== aarch64: NEON kernels and fidelity under qemu-user"
    tests/cross/run-aarch64.sh --fidelity build-aarch64
fi
if [ "${PL_SKIP_FUZZ:-0}" != 1 ]; then
    # Only the fuzz targets: the rest of the tree is built and tested above with gcc.
    echo "== configure build-fuzz (clang, libFuzzer, ASan+UBSan)"
    CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPL_BUILD_FUZZ=ON \
        -DPL_SANITIZE=address,undefined -DPICOLM_TEST_DATA="$data" >/dev/null
    cmake --build build-fuzz -j"$jobs" --target pl_fuzz_all >build-fuzz.build.log 2>&1 ||
        { tail -50 build-fuzz.build.log; exit 1; }
    echo "== test build-fuzz"
    (cd build-fuzz && ctest --output-on-failure -j"$jobs" -L fuzz-smoke)
fi
if [ "${PL_SKIP_CLANG:-0}" != 1 ]; then
    CC=clang build_and_test build-clang -LE bench -- -DCMAKE_BUILD_TYPE=Release
fi
echo "== all test runs passed"
