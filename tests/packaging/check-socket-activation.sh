#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Socket activation as picolmd.socket does it: systemd-socket-activate listens on the two
# SOCK_SEQPACKET sockets and starts picolmd on the first connection with $LISTEN_FDS; the
# broker must serve on the inherited fds (not bind its own) and leave the files alone.
# Usage: check-socket-activation.sh SRC_DIR PICOLMD PICOLM
set -u
src=$1 picolmd=$2 picolm=$3
command -v systemd-socket-activate >/dev/null ||
    { echo "SKIP: systemd-socket-activate is missing (package systemd)"; exit 77; }
[ -x "$picolmd" ] && [ -x "$picolm" ] || { echo "SKIP: binaries not built"; exit 77; }
dir=$(mktemp -d /tmp/picolm-sa.XXXXXX)
user_args=()
[ "$(id -u)" = 0 ] && user_args=(--user nobody)
systemd-socket-activate --seqpacket -l "$dir/picolm.sock" -l "$dir/admin.sock" \
    "$picolmd" --model "$src/packaging/models/stories260K.gguf" --socket-dir "$dir" \
    --foreground "${user_args[@]}" >"$dir/log" 2>&1 &
act=$!
trap 'kill $act 2>/dev/null; pkill -P $act 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 50); do [ -S "$dir/picolm.sock" ] && break; sleep 0.1; done
fails=0
for i in 1 2; do
    out=$(PICOLM_SOCKET=$dir/picolm.sock timeout 30 "$picolm" generate -p "Once" -n 8 --temp 0)
    rc=$?
    if [ $rc -ne 0 ] || [ -z "$out" ]; then
        echo "FAIL: generation $i through the activated broker: exit $rc"
        fails=$((fails + 1))
    fi
done
grep -q "Execing" "$dir/log" || { echo "FAIL: the broker was not started by activation"; fails=$((fails + 1)); }
grep -qi "cannot listen\|already listening" "$dir/log" && { echo "FAIL: the broker tried to bind"; fails=$((fails + 1)); }
[ -S "$dir/picolm.sock" ] || { echo "FAIL: the inherited socket file is gone"; fails=$((fails + 1)); }
if [ $fails -ne 0 ]; then
    cat "$dir/log"
    exit 1
fi
echo "ok: picolmd served two requests on sockets inherited through \$LISTEN_FDS"
