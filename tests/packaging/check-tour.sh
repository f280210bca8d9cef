#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Smoke tests of the README's commands, run as written from the top of the checkout:
#   first  the main job of the set-up command: tell a story with the bundled model
#   tour   the 5-minute tour: picolmd on the bundled model in a scratch socket directory,
#          two picolm-hello clients at once, then SIGTERM: both clients must succeed, the
#          broker must exit 0 and remove its sockets.
# Usage: check-tour.sh first SRC_DIR PICOLM
#        check-tour.sh tour SRC_DIR PICOLMD PICOLM_HELLO
# Exit: 0 pass, 1 fail, 77 skip (a program the step needs is not built yet).
set -uo pipefail
mode=$1 src=$2
cd "$src" || exit 1
model=packaging/models/stories260K.gguf

case $mode in
first)
    picolm=$3
    out=$("$picolm" generate --model "$model" -n 256 2>&1)
    rc=$?
    words=$(wc -w <<<"$out")
    echo "$out" | head -c 400
    echo
    if [ $rc -ne 0 ] || [ "$words" -lt 20 ]; then
        echo "FAIL: picolm generate exited $rc with $words words"
        exit 1
    fi
    echo "ok: picolm generate --model $model -n 256: $words words"
    ;;
tour)
    picolmd=${3:-} hello=${4:-}
    [ -x "$picolmd" ] || { echo "SKIP: picolmd not built yet"; exit 77; }
    [ -x "$hello" ] || { echo "SKIP: picolm-hello not built yet"; exit 77; }
    dir=$(mktemp -d /tmp/picolm-tour.XXXXXX)
    log=$dir/picolmd.log
    # As root the broker drops to a service user: 'picolm' exists only where the package
    # (sysusers.d) made it, so the tour names one every system has. Locked down, the broker
    # may not unlink (its seccomp table refuses it: systemd's RuntimeDirectory= cleans up,
    # and the next start replaces stale sockets), so only an unprivileged run must remove them.
    user_args=()
    if [ "$(id -u)" = 0 ]; then
        user_args=(--user nobody)
    fi
    "$picolmd" --model "$model" --socket-dir "$dir" --foreground "${user_args[@]}" >"$log" 2>&1 &
    pid=$!
    cleanup() { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"; }
    trap cleanup EXIT
    for _ in $(seq 100); do
        [ -S "$dir/picolm.sock" ] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ -S "$dir/picolm.sock" ] || { cat "$log"; echo "FAIL: picolmd did not create its socket"; exit 1; }
    export PICOLM_SOCKET=$dir/picolm.sock
    "$hello" "Once upon a time" >"$dir/a.txt" 2>&1 &
    a=$!
    "$hello" "A little dog" >"$dir/b.txt" 2>&1 &
    b=$!
    wait $a
    ra=$?
    wait $b
    rb=$?
    cat "$dir/a.txt" "$dir/b.txt"
    fails=0
    for r in $ra $rb; do [ "$r" -eq 0 ] || fails=$((fails + 1)); done
    grep -q 'generated tokens' "$dir/a.txt" && grep -q 'generated tokens' "$dir/b.txt" ||
        fails=$((fails + 1))
    kill -TERM "$pid"
    wait "$pid"
    rd=$?
    trap - EXIT
    cat "$log"
    [ "$rd" -eq 0 ] || { echo "FAIL: picolmd exited $rd after SIGTERM"; fails=$((fails + 1)); }
    if [ "$(id -u)" != 0 ] && [ -e "$dir/picolm.sock" ]; then
        echo "FAIL: picolmd left its socket behind"
        fails=$((fails + 1))
    fi
    rm -rf "$dir"
    if [ "$fails" -gt 0 ]; then
        echo "FAIL: tour ($fails problem(s); clients exited $ra and $rb)"
        exit 1
    fi
    echo "ok: two clients served at once by one broker; clean drain on SIGTERM"
    ;;
*)
    echo "usage: check-tour.sh first|tour ..." >&2
    exit 2
    ;;
esac
