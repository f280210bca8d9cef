#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs the tree into a scratch DESTDIR (prefix /usr) and checks the systemd side there:
# `systemd-analyze verify` on the units (no warning allowed), the exposure score of
# `systemd-analyze security --offline` (must stay at or below MAX_SCORE), the sysusers.d and
# tmpfiles.d files applied to a scratch root, and the CPU-affinity generator. Nothing
# outside the scratch directories is touched.
# Usage: check-units.sh BUILD_DIR CMAKE PICOLMD_OR_EMPTY [MAX_SCORE]
# Exit: 0 pass, 1 fail, 77 skip (systemd-analyze missing).
set -uo pipefail

build=$1 cmake=$2 picolmd=${3:-} max_score=${4:-2.0}
if ! command -v systemd-analyze >/dev/null; then
    echo "SKIP: systemd-analyze not found (install the 'systemd' package to check the units)"
    exit 77
fi

work=$build/packaging/test-units
rm -rf "$work"
mkdir -p "$work"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

if ! DESTDIR=$work/dest "$cmake" --install "$build" --prefix /usr >"$work/install.log" 2>&1; then
    cat "$work/install.log"
    echo "FAIL: cmake --install"
    exit 1
fi
units=$work/dest/usr/lib/systemd/system

# ---- verify: the binary must exist for verify, so point ExecStart at the built one ----
mkdir -p "$work/verify"
bin=${picolmd:-/bin/true}
[ -x "$bin" ] || bin=/bin/true
[ "$bin" = /bin/true ] && echo "note: picolmd not built; verifying with ExecStart=/bin/true"
sed "s|^ExecStart=/usr/sbin/picolmd|ExecStart=$bin|" "$units/picolmd.service" >"$work/verify/picolmd.service"
cp "$units/picolmd.socket" "$units/picolmd-admin.socket" "$work/verify/"
(cd "$work/verify" && systemd-analyze verify --man=no ./picolmd.service ./picolmd.socket \
    ./picolmd-admin.socket) >"$work/verify.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ ! -s "$work/verify.log" ]; then
    ok "systemd-analyze verify: picolmd.service picolmd.socket picolmd-admin.socket"
else
    cat "$work/verify.log"
    fail "systemd-analyze verify (exit $rc)"
fi

# ---- security score ----
if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
    (cd "$work/verify" && systemd-analyze security --offline=true --man=no ./picolmd.service) \
        >"$work/security.log" 2>&1
    score=$(sed -n 's/.*Overall exposure level for picolmd.service: \([0-9.]*\).*/\1/p' "$work/security.log")
    if [ -z "$score" ]; then
        cat "$work/security.log"
        fail "no exposure score from systemd-analyze security"
    elif awk -v s="$score" -v m="$max_score" 'BEGIN { exit !(s <= m) }'; then
        ok "systemd-analyze security: exposure $score (limit $max_score)"
    else
        grep '✗' "$work/security.log"
        fail "exposure $score is above $max_score"
    fi
else
    echo "note: this systemd-analyze has no --offline security check; score not measured"
fi

# ---- sysusers.d and tmpfiles.d, applied to a scratch root ----
root=$work/root
mkdir -p "$root/etc"
: >"$root/etc/passwd"
: >"$root/etc/group"
if [ "$(id -u)" != 0 ]; then
    echo "note: not root; sysusers.d and tmpfiles.d are not applied to the scratch root"
elif command -v systemd-sysusers >/dev/null; then
    if systemd-sysusers --root="$root" "$work/dest/usr/lib/sysusers.d/picolm.conf" >"$work/sysusers.log" 2>&1 &&
        grep -q '^picolm:' "$root/etc/passwd" && grep -q '^picolm-admin:' "$root/etc/group"; then
        ok "sysusers.d creates user picolm and group picolm-admin"
        uid=$(awk -F: '$1 == "picolm" {print $3}' "$root/etc/passwd")
        [ "$uid" -gt 0 ] && [ "$uid" -lt 1000 ] && ok "picolm is a system user (uid $uid)" ||
            fail "picolm uid $uid is not a system uid"
    else
        cat "$work/sysusers.log"
        fail "systemd-sysusers on picolm.conf"
    fi
else
    echo "note: systemd-sysusers missing; sysusers.d not applied"
fi
if [ "$(id -u)" = 0 ] && command -v systemd-tmpfiles >/dev/null; then
    if systemd-tmpfiles --root="$root" --create "$work/dest/usr/lib/tmpfiles.d/picolm.conf" \
        >"$work/tmpfiles.log" 2>&1 && [ -d "$root/run/picolm" ] && [ -d "$root/var/lib/picolm/models" ]; then
        ok "tmpfiles.d creates /run/picolm and /var/lib/picolm/models"
    else
        cat "$work/tmpfiles.log"
        fail "systemd-tmpfiles on picolm.conf"
    fi
fi

# ---- the CPU-affinity generator ----
gen=$work/dest/usr/lib/systemd/system-generators/picolmd-generator
run_gen() { # conf-text -> output dir
    local d=$work/gen.$1
    rm -rf "$d"
    mkdir -p "$d/out"
    printf '%b' "$2" >"$d/picolmd.conf"
    PICOLMD_CONF=$d/picolmd.conf "$gen" "$d/out" "$d/out" "$d/out" 2>"$d/stderr"
    echo "$d"
}
d=$(run_gen good 'model = /m.gguf\n# cpus = 9\ncpus = 0-1\n  cpus =  2-5,7  \n')
dropin=$d/out/picolmd.service.d/50-cpu-affinity.conf
if [ -f "$dropin" ] && grep -qx 'CPUAffinity=2-5 7' "$dropin"; then
    ok "generator: cpus = 2-5,7 gives CPUAffinity=2-5 7 (last line wins, comments skipped)"
    # The drop-in must be valid for systemd too: append it to the verified unit and verify.
    cat "$work/verify/picolmd.service" <(sed -n '/^\[Service\]/,$p' "$dropin") \
        >"$work/verify/affinity.service"
    (cd "$work/verify" && systemd-analyze verify --man=no ./affinity.service) >"$work/verify2.log" 2>&1 &&
        [ ! -s "$work/verify2.log" ] && ok "unit with the drop-in verifies" ||
        { cat "$work/verify2.log"; fail "unit with the generated CPUAffinity does not verify"; }
else
    fail "generator did not write CPUAffinity=2-5 7 ($(cat "$dropin" 2>/dev/null))"
fi
for bad in 'cpus = 1-' 'cpus = a' 'cpus = 1,,2' 'cpus = 1-2-3' 'cpus = -1'; do
    d=$(run_gen bad "$bad\n")
    if [ -e "$d/out/picolmd.service.d" ] || ! grep -q 'not a CPU list' "$d/stderr"; then
        fail "generator accepted '$bad'"
    fi
done
ok "generator refuses malformed cpus lists (with a message, no drop-in)"
d=$(run_gen none 'model = /m.gguf\n')
[ -e "$d/out/picolmd.service.d" ] && fail "generator wrote a drop-in without cpus" ||
    ok "generator writes nothing without cpus"
PICOLMD_CONF=$work/does-not-exist "$gen" "$work/gen.none/out" && ok "generator: missing config is fine" ||
    fail "generator failed on a missing config"

# ---- hugepages-for-model.sh ----
hp=$work/dest/usr/libexec/picolm/hugepages-for-model.sh
model=$work/dest/usr/share/picolm/models/stories260K.gguf
bytes=$(wc -c <"$model")
[ "$("$hp" --page-size 2M "$model")" = $(((bytes + 2097151) / 2097152)) ] &&
    [ "$("$hp" --page-size 4096 "$model")" = $(((bytes + 4095) / 4096)) ] &&
    ok "hugepages-for-model.sh sizes the bundled model" || fail "hugepages-for-model.sh count"
"$hp" "$work/install.log" >/dev/null 2>&1
[ $? -eq 2 ] && ok "hugepages-for-model.sh refuses a non-GGUF file" || fail "non-GGUF accepted"

if [ "$fails" -gt 0 ]; then
    echo "check-units: $fails check(s) failed"
    exit 1
fi
echo "check-units: all checks passed"
exit 0
