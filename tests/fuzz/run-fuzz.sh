#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Fuzz one libFuzzer target for a while:  tests/fuzz/run-fuzz.sh TARGET SECONDS [libFuzzer args...]
#   e.g. tests/fuzz/run-fuzz.sh fuzz_gguf 180
# Configures a clang build (build-fuzz/ beside the sources, or $PL_FUZZ_BUILD_DIR) with
# -DPL_BUILD_FUZZ=ON and ASan+UBSan (the target adds -fsanitize=fuzzer), builds TARGET and its
# seed generator, writes the seeds, fuzzes for SECONDS into a persistent corpus
# (build-fuzz/tests/fuzz/runs/TARGET) and prints the executions reached. Crash inputs land in
# build-fuzz/tests/fuzz/artifacts/TARGET/. Exit status: libFuzzer's (0 = no crash found).
set -euo pipefail

if [ $# -lt 2 ]; then
    echo "usage: $0 TARGET SECONDS [libFuzzer args...]" >&2
    exit 2
fi
target=$1
seconds=$2
shift 2

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${PL_FUZZ_BUILD_DIR:-$src/build-fuzz}
jobs=${PL_JOBS:-2}
# fuzz_tokenizer reads the vocabularies of the shared test data (as CMake finds it)
export PICOLM_TEST_DATA=${PICOLM_TEST_DATA:-$(cd "$src/.." && pwd)/shared}

echo "== configure $build"
CC=${CC:-clang} cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPL_BUILD_FUZZ=ON -DPL_SANITIZE=address,undefined >/dev/null
echo "== build $target"
cmake --build "$build" --target "$target" "${target}_seeds" -j"$jobs" >/dev/null

fdir=$build/tests/fuzz
seeds=$fdir/corpus/$target
corpus=$fdir/runs/$target
artifacts=$fdir/artifacts/$target
mkdir -p "$seeds" "$corpus" "$artifacts"
"$build/bin/${target}_seeds" "$seeds"

dict=()
case $target in
fuzz_gguf) dict=(-dict="$src/tests/fuzz/gguf.dict") ;;
esac

log=$fdir/$target.log
echo "== fuzz $target for ${seconds}s (log: $log)"
set +e
"$build/bin/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" "${dict[@]}" "$@" \
    "$corpus" "$seeds" >"$log" 2>&1
rc=$?
set -e

execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
echo "== $target: ${execs:-?} executions in ${seconds}s (${speed:-?}/s), ${cov:-cov: ?}," \
     "corpus $(ls "$corpus" | wc -l) files"
if [ "$rc" -ne 0 ]; then
    echo "== $target: libFuzzer exited $rc; last lines of the log:"
    tail -40 "$log"
    ls -l "$artifacts"
fi
exit "$rc"
