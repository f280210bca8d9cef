#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The big load and soak run (the CTest `load` test is a short version of it):
#   tests/load/soak.sh              64 clients x 200 requests each
#   tests/load/soak.sh SECONDS      64 clients, each for SECONDS
# PL_LOAD_CLIENTS overrides the number of clients; PL_SOAK_BUILD_DIR the build dir (default
# build-soak beside the sources; Release). Needs PICOLM_TEST_DATA (default ../shared).
# Every request must complete with its full token count or end as its client caused it
# (10% cancelled, 5% dropped connections), token streams must match the greedy reference,
# and afterwards the daemon must hold no session and no more KV, fds or RSS than before.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${PL_SOAK_BUILD_DIR:-$src/build-soak}
export PICOLM_TEST_DATA=${PICOLM_TEST_DATA:-$(cd "$src/.." && pwd)/shared}
export PL_LOAD_CLIENTS=${PL_LOAD_CLIENTS:-64}
if [ $# -ge 1 ]; then
    export PL_LOAD_SECONDS=$1
    unset PL_LOAD_REQUESTS
else
    export PL_LOAD_REQUESTS=${PL_LOAD_REQUESTS:-200}
    unset PL_LOAD_SECONDS
fi
echo "== configure $build"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DPICOLM_TEST_DATA="$PICOLM_TEST_DATA" >/dev/null
echo "== build"
cmake --build "$build" --target test_load picolmd -j"${PL_JOBS:-2}" >/dev/null
echo "== soak: $PL_LOAD_CLIENTS clients, ${PL_LOAD_SECONDS:+$PL_LOAD_SECONDS s each}${PL_LOAD_REQUESTS:+$PL_LOAD_REQUESTS requests each}"
exec "$build/bin/test_load"
