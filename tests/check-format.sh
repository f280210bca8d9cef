#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Layout check (STYLE.md §13), run by CTest as `check_format`: every tracked .c and .h file
# (git ls-files; without .git, those under the source folders) must be as clang-format
# prints it with the top-level .clang-format. The reference is Debian 12's clang-format 14;
# other versions may lay out a few constructs differently.
# Usage: check-format.sh [--clang-format BIN] SOURCE_DIR
# Exit: 0 formatted, 1 files differ (listed, with the command that fixes them), 2 usage,
# 77 no clang-format (CTest counts it as skipped; tests/run.sh installs it).
set -uo pipefail

cf=clang-format
if [ "${1:-}" = --clang-format ]; then
    cf=$2
    shift 2
fi
if [ $# -ne 1 ] || [ ! -f "$1/.clang-format" ]; then
    echo "usage: $0 [--clang-format BIN] SOURCE_DIR (a folder with a .clang-format)" >&2
    exit 2
fi
src=$1
if ! command -v "$cf" >/dev/null 2>&1; then
    echo "check-format: '$cf' not found (Debian: apt-get install clang-format)" >&2
    exit 77
fi

cd "$src" || exit 2
if [ -d .git ] && git rev-parse --git-dir >/dev/null 2>&1; then
    mapfile -t files < <(git ls-files -- '*.c' '*.h')
else
    mapfile -t files < <(find client common daemon engine ipc policy proto tests tools \
                              \( -name '*.c' -o -name '*.h' \) -type f 2>/dev/null | sort)
fi
if [ ${#files[@]} -eq 0 ]; then
    echo "check-format: no .c or .h files found under $src" >&2
    exit 1
fi

# One clang-format for all (a process per file takes ~10x longer); it names each file that
# differs in its diagnostics ("FILE:LINE:COL: error: code should be clang-formatted").
out=$("$cf" --style=file --dry-run -Werror "${files[@]}" 2>&1)
rc=$?
mapfile -t bad < <(printf '%s\n' "$out" |
                   sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error: .*clang-format.*/\1/p' | sort -u)
if [ $rc -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
    printf '%s\n' "$out" >&2
    echo "check-format: $cf failed (exit $rc)" >&2
    exit 1
fi
echo "check-format: $("$cf" --version | head -n 1); ${#files[@]} files, ${#bad[@]} not formatted"
if [ ${#bad[@]} -gt 0 ]; then
    printf '  %s\n' "${bad[@]}"
    echo "fix: (cd $src && $cf -i ${bad[*]})"
    exit 1
fi
exit 0
