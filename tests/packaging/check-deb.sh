#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Builds the .deb with CPack from a configured and built tree and checks it with dpkg-deb:
# the file list (programs, library, header, pkg-config, man pages, units, config), the
# conffiles, the maintainer scripts and the Depends line (every shared library a packaged
# program or library needs must come from a package named in Depends).
# Usage: check-deb.sh BUILD_DIR CPACK VERSION [TARGET=0|1 ...]
#   TARGET=1 says the build has that target (picolm, picolmd, picoctl, libpicolm), so the
#   package must contain it; TARGET=0 is reported as "not built yet".
# Exit: 0 pass, 1 fail, 77 skip (dpkg-deb missing).
set -uo pipefail

build=$1 cpack=$2 version=$3
shift 3
declare -A have=()
for kv in "$@"; do have[${kv%%=*}]=${kv#*=}; done

command -v dpkg-deb >/dev/null || { echo "SKIP: dpkg-deb not found (package dpkg)"; exit 77; }

out=$build/packaging/test-deb
rm -rf "$out"
mkdir -p "$out"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

echo "== cpack -G DEB"
if ! "$cpack" --config "$build/CPackConfig.cmake" -G DEB -B "$out" >"$out/cpack.log" 2>&1; then
    cat "$out/cpack.log"
    echo "FAIL: cpack"
    exit 1
fi
deb=$(ls "$out"/picolm_"$version"-*_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { cat "$out/cpack.log"; echo "FAIL: no picolm_${version}-*.deb in $out"; exit 1; }
echo "package: $deb"

dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$out/files"
dpkg-deb -e "$deb" "$out/control.d"
dpkg-deb -x "$deb" "$out/root"

# ---- File list ----
need() { # path [why]
    if grep -qxF "$1" "$out/files"; then ok "contains $1"; else fail "missing $1${2:+ ($2)}"; fi
}
need_target() { # target path...
    local t=$1
    shift
    if [ "${have[$t]:-0}" = 1 ]; then
        for p in "$@"; do need "$p" "target $t is built"; done
    else
        echo "note: target $t not built yet; not required: $*"
    fi
}
need_target picolm /usr/bin/picolm
need_target picolmd /usr/sbin/picolmd
need_target picoctl /usr/bin/picoctl
libdir=$(sed -n 's|^\(/usr/lib[^ ]*\)/libpicolm\.so\.1$|\1|p' "$out/files" | head -n 1)
need_target libpicolm "${libdir:-/usr/lib}/libpicolm.so.1" "${libdir:-/usr/lib}/libpicolm.so" \
    "${libdir:-/usr/lib}/libpicolm.a" /usr/include/picolm.h \
    "${libdir:-/usr/lib}/pkgconfig/libpicolm.pc"
for m in man1/picolm.1 man3/libpicolm.3 man5/picolm.conf.5 man5/picolm-policy.5 \
    man8/picolmd.8 man8/picoctl.8; do
    need "/usr/share/man/$m.gz"
done
for f in /usr/lib/systemd/system/picolmd.service /usr/lib/systemd/system/picolmd.socket \
    /usr/lib/systemd/system/picolmd-admin.socket \
    /usr/lib/systemd/system-generators/picolmd-generator \
    /usr/lib/sysusers.d/picolm.conf /usr/lib/tmpfiles.d/picolm.conf \
    /usr/libexec/picolm/hugepages-for-model.sh /usr/share/picolm/models/stories260K.gguf; do
    need "$f"
done
# Nothing may escape the standard trees (e.g. a /usr/local path or the build directory).
bad=$(grep -vE '^/(usr|etc)(/|$)' "$out/files" | grep -v '^/$' || true)
[ -z "$bad" ] && ok "every file under /usr or /etc" || fail "files outside /usr and /etc: $bad"

# ---- Config and conffiles: each shipped example becomes /etc/picolm/NAME, a conffile ----
src=$(cd "$(dirname "$0")/../.." && pwd)
conff=$out/control.d/conffiles
for pair in picolmd.conf.example:picolmd.conf policy.conf.example:policy.conf; do
    ex=${pair%%:*} name=${pair#*:}
    if [ -f "$src/packaging/$ex" ]; then
        need "/etc/picolm/$name"
        if [ -f "$conff" ] && grep -qxF "/etc/picolm/$name" "$conff"; then
            ok "conffile /etc/picolm/$name"
        else
            fail "/etc/picolm/$name is not listed in conffiles"
        fi
        cmp -s "$src/packaging/$ex" "$out/root/etc/picolm/$name" ||
            fail "/etc/picolm/$name differs from packaging/$ex"
    else
        echo "note: packaging/$ex not written yet; /etc/picolm/$name not required"
    fi
done
if [ -f "$conff" ]; then
    while read -r c; do
        [ -f "$out/root$c" ] || fail "conffile $c is not in the package"
    done <"$conff"
fi

# ---- Control fields ----
field() { dpkg-deb -f "$deb" "$1"; }
[ "$(field Package)" = picolm ] && ok "Package: picolm" || fail "Package is '$(field Package)'"
case $(field Version) in
    "$version"-*) ok "Version: $(field Version)" ;;
    *) fail "Version '$(field Version)' is not $version-N" ;;
esac
depends=$(field Depends)
echo "Depends: $depends"
grep -q 'adduser | systemd' <<<"$depends" && ok "Depends names adduser | systemd" ||
    fail "Depends lacks 'adduser | systemd' (the maintainer scripts need one)"
dep_names=$(tr ',|' '\n\n' <<<"$depends" | sed 's/(.*//; s/[[:space:]]//g' | grep -v '^$')
has_dep() { grep -qxF "$1" <<<"$dep_names"; }

# Every NEEDED soname of every packaged ELF file must come from a package in Depends (or be
# shipped in the package itself). Owners are found with dpkg -S on the build machine.
if command -v readelf >/dev/null && command -v ldconfig >/dev/null; then
    needed=$(find "$out/root" -type f \( -perm -u+x -o -name '*.so*' \) -print0 |
        xargs -0 -r sh -c 'for f; do readelf -d "$f" 2>/dev/null; done' sh |
        sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort -u)
    for so in $needed; do
        if grep -q "/$so\$" "$out/files"; then
            ok "$so is shipped in the package"
            continue
        fi
        path=$(ldconfig -p | awk -v so="$so" '$1 == so && $NF ~ /^\// {print $NF; exit}')
        owner=$( [ -n "$path" ] && dpkg -S "$(readlink -f "$path")" 2>/dev/null | head -n 1 | cut -d: -f1)
        [ -n "$owner" ] || owner=$( [ -n "$path" ] && dpkg -S "$path" 2>/dev/null | head -n 1 | cut -d: -f1)
        if [ -z "$owner" ]; then
            fail "cannot find the package of $so (path '${path:-?}')"
        elif has_dep "$owner"; then
            ok "$so from $owner, in Depends"
        else
            fail "$so comes from $owner, which Depends does not name"
        fi
    done
    # The three runtime libraries the broker is built on, whenever something links them.
    for pair in liburing.so.2:liburing2 libprotobuf-c.so.1:libprotobuf-c1 libseccomp.so.2:libseccomp2; do
        so=${pair%%:*} pkg=${pair#*:}
        if grep -qxF "$so" <<<"$needed"; then
            has_dep "$pkg" || fail "$so is linked but $pkg is not in Depends"
        else
            echo "note: no packaged binary links $so yet ($pkg not required)"
        fi
    done
    if [ "${have[picolmd]:-0}" = 1 ]; then
        for pkg in liburing2 libprotobuf-c1; do
            has_dep "$pkg" && ok "Depends names $pkg" || fail "picolmd is built but $pkg is not in Depends"
        done
    fi
else
    echo "note: readelf or ldconfig missing: library dependencies not cross-checked"
    for pkg in liburing2 libprotobuf-c1; do
        has_dep "$pkg" || fail "Depends lacks $pkg"
    done
fi

# ---- Maintainer scripts ----
for s in postinst prerm postrm; do
    f=$out/control.d/$s
    if [ -x "$f" ] && sh -n "$f"; then ok "$s present, executable, valid sh"; else fail "$s missing or invalid"; fi
done
grep -q 'systemd-sysusers' "$out/control.d/postinst" && grep -q 'adduser --system' "$out/control.d/postinst" &&
    grep -q 'picolm-admin' "$out/control.d/postinst" && grep -q 'daemon-reload' "$out/control.d/postinst" &&
    ok "postinst creates the user and group (sysusers or adduser) and reloads systemd" ||
    fail "postinst does not create picolm/picolm-admin or reload systemd"

# ---- Paths inside the packaged files point at the packaged locations ----
svc=$out/root/usr/lib/systemd/system/picolmd.service
exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$svc")
[ "$exec_path" = /usr/sbin/picolmd ] && ok "ExecStart=$exec_path" || fail "ExecStart is '$exec_path'"
grep -q -- '--config /etc/picolm/picolmd.conf' "$svc" && ok "unit reads /etc/picolm/picolmd.conf" ||
    fail "unit does not pass --config /etc/picolm/picolmd.conf"
grep -q '@PL_' "$svc" "$out/root/usr/lib/systemd/system-generators/picolmd-generator" &&
    fail "unsubstituted @PL_...@ left in the unit or generator"
pc=$(ls "$out"/root/usr/lib*/pkgconfig/libpicolm.pc "$out"/root/usr/lib/*/pkgconfig/libpicolm.pc 2>/dev/null | head -n 1)
if [ -n "$pc" ]; then
    grep -qx 'prefix=/usr' "$pc" && ok "libpicolm.pc prefix=/usr" || fail "libpicolm.pc: $(grep '^prefix=' "$pc")"
fi

if [ "$fails" -gt 0 ]; then
    echo "check-deb: $fails check(s) failed"
    exit 1
fi
echo "check-deb: all checks passed"
exit 0
