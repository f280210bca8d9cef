#!/bin/sh
# SPDX-License-Identifier: MIT
# Cross-builds the quant kernels and their tests for aarch64 and runs them under qemu-user:
# installs the cross compiler, qemu and the arm64 -dev packages when missing (as root, from
# the Debian archive, arm64 added as a dpkg foreign architecture), configures
# build-aarch64 with cmake/toolchain-aarch64-linux-gnu.cmake, builds the NEON test and runs
# it through CTest (qemu -cpu max: the dot-product set; the test checks the baseline NEON
# set too, then once more with PICOLM_FORCE_SCALAR=1), then the matmul test (the products
# and the NEON SwiGLU / RMSNorm), and finally the NEON test once on a Cortex-A53
# model (no dot-product extension) to check that the dispatch falls back to "neon".
# With --fidelity it also builds test_engine_fidelity (in <build-dir>-fidelity) and runs it under
# both CPU models on the models of PICOLM_TEST_DATA (about a minute per model).
# Usage: tests/cross/run-aarch64.sh [--fidelity] [build-dir]   (default: <source>/build-aarch64)
# Note: test_engine_quant forks, and a forked dynamically linked guest hangs in qemu-user
# 7.2 (Debian 12); test_engine_model hangs there too (a guest spin after it installs signal
# handlers); so only the fork-free NEON and matmul tests (and optionally the fidelity test) run
# here.
set -eu

src=$(cd "$(dirname "$0")/../.." && pwd)
fidelity=0
if [ "${1:-}" = "--fidelity" ]; then
    fidelity=1
    shift
fi
build=${1:-$src/build-aarch64}
toolchain=$src/cmake/toolchain-aarch64-linux-gnu.cmake
sysroot=/usr/aarch64-linux-gnu

need_pkgs=""
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need_pkgs="$need_pkgs gcc-aarch64-linux-gnu"
command -v qemu-aarch64 >/dev/null 2>&1 || need_pkgs="$need_pkgs qemu-user"
for p in libcmocka-dev liburing-dev libseccomp-dev libprotobuf-c-dev; do
    dpkg-query -W -f='${Status}' "$p:arm64" 2>/dev/null | grep -q "install ok installed" ||
        need_pkgs="$need_pkgs $p:arm64"
done
if [ -n "$need_pkgs" ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "run-aarch64: missing packages:$need_pkgs (run as root to install them)" >&2
        exit 1
    fi
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        dpkg --add-architecture arm64
    fi
    apt-get update -q
    # shellcheck disable=SC2086 # one word per package
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $need_pkgs
fi

cmake -S "$src" -B "$build" -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPL_WERROR=ON >/dev/null
nice -n 10 cmake --build "$build" --target test_engine_quant_neon test_engine_matmul -j2
(cd "$build" && ctest --output-on-failure -R '^test_engine_quant_neon')
# the matrix products, and the NEON SwiGLU and RMSNorm against their references
(cd "$build" && ctest --output-on-failure -R '^test_engine_matmul$')

echo "run-aarch64: baseline NEON CPU model (cortex-a53, no dot product)"
qemu-aarch64 -L "$sysroot" -cpu cortex-a53 "$build/bin/test_engine_quant_neon"

if [ "$fidelity" -eq 1 ]; then
    fbuild=$build-fidelity
    cmake -S "$src" -B "$fbuild" -DCMAKE_TOOLCHAIN_FILE="$toolchain" -DCMAKE_BUILD_TYPE=Release \
        -DPL_WERROR=ON >/dev/null
    nice -n 10 cmake --build "$fbuild" --target test_engine_fidelity -j2
    (cd "$fbuild" && ctest --output-on-failure -R '^test_engine_fidelity$')
    echo "run-aarch64: fidelity on the baseline NEON CPU model (cortex-a53)"
    data=$(sed -n 's/^PICOLM_TEST_DATA:PATH=//p' "$fbuild/CMakeCache.txt")
    PICOLM_TEST_DATA=${PICOLM_TEST_DATA:-$data} \
        qemu-aarch64 -L "$sysroot" -cpu cortex-a53 "$fbuild/bin/test_engine_fidelity"
fi
