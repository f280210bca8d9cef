#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Lints the roff man pages: groff must format each one with every warning enabled and print
# nothing; each page's .TH must name the page and section its file name says.
# Usage: check-man.sh MAN_DIR. Exit: 0 pass, 1 fail, 77 skip (groff missing).
set -uo pipefail
dir=$1
command -v groff >/dev/null || { echo "SKIP: groff not found (package groff-base)"; exit 77; }
fails=0
n=0
for page in "$dir"/*.[1-8]; do
    n=$((n + 1))
    name=$(basename "$page")
    sec=${name##*.} title=${name%.*}
    warn=$(groff -man -ww -z "$page" 2>&1)
    if [ -n "$warn" ]; then
        echo "FAIL: $name: $warn"
        fails=$((fails + 1))
    fi
    th=$(sed -n 's/^\.TH \([^ ]*\) \([0-9]\).*/\1 \2/p' "$page" | head -n 1)
    want="$(tr '[:lower:]' '[:upper:]' <<<"$title") $sec"
    if [ "$th" != "$want" ]; then
        echo "FAIL: $name: .TH says '$th', expected '$want'"
        fails=$((fails + 1))
    fi
    grep -q '^\.SH NAME' "$page" && grep -q '^\.SH SEE ALSO' "$page" ||
        { echo "FAIL: $name: no NAME or SEE ALSO section"; fails=$((fails + 1)); }
done
[ "$n" -eq 6 ] || { echo "FAIL: expected 6 man pages in $dir, found $n"; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] && echo "check-man: $n pages clean" || echo "check-man: $fails problem(s)"
[ "$fails" -eq 0 ]
