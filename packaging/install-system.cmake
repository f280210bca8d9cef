# SPDX-License-Identifier: MIT
# Install-time part of packaging/CMakeLists.txt (run from cmake_install.cmake, by
# `cmake --install` and by CPack): fills the templates with the paths of the prefix this
# install uses, then installs them. Inputs (set by the caller): PL_PKG_SRC, PL_PKG_GEN,
# PL_PKG_CONFFILES ("src=name;..."), PL_REL_SBINDIR, PL_REL_BINDIR, PL_REL_LIBDIR; and CMake's own
# CMAKE_INSTALL_PREFIX (DESTDIR is applied by file(INSTALL)).
#
# Layout: with prefix /usr (the .deb) the config goes to /etc/picolm and systemd files to
# /usr/lib/{systemd/system,systemd/system-generators,sysusers.d,tmpfiles.d}; with another
# prefix everything stays under it (systemd also reads /usr/local/lib/systemd/system etc.).

set(_prefix "${CMAKE_INSTALL_PREFIX}")
string(REGEX REPLACE "/+$" "" _prefix "${_prefix}")
if(_prefix STREQUAL "/usr" OR _prefix STREQUAL "")
    set(PL_SYSCONFDIR "/etc")
else()
    set(PL_SYSCONFDIR "${_prefix}/etc")
endif()
set(PL_SBINDIR "${_prefix}/${PL_REL_SBINDIR}")
set(PL_BINDIR "${_prefix}/${PL_REL_BINDIR}")
set(_lib "${_prefix}/lib")

set(_gen "${PL_PKG_GEN}${_prefix}")
file(MAKE_DIRECTORY "${_gen}")
file(READ "${PL_PKG_SRC}/systemd/picolmd.service.in" _c)
file(CONFIGURE OUTPUT "${_gen}/picolmd.service" CONTENT "${_c}" @ONLY)
file(READ "${PL_PKG_SRC}/systemd/picolmd-generator.in" _c)
file(CONFIGURE OUTPUT "${_gen}/picolmd-generator" CONTENT "${_c}" @ONLY)

file(INSTALL DESTINATION "${_lib}/systemd/system" TYPE FILE FILES
     "${_gen}/picolmd.service"
     "${PL_PKG_SRC}/systemd/picolmd.socket"
     "${PL_PKG_SRC}/systemd/picolmd-admin.socket")
file(INSTALL DESTINATION "${_lib}/systemd/system-generators" TYPE PROGRAM FILES
     "${_gen}/picolmd-generator")
file(INSTALL DESTINATION "${_lib}/sysusers.d" TYPE FILE FILES
     "${PL_PKG_SRC}/sysusers.d/picolm.conf")
file(INSTALL DESTINATION "${_lib}/tmpfiles.d" TYPE FILE FILES
     "${PL_PKG_SRC}/tmpfiles.d/picolm.conf")

# Config and policy: 0644, readable by the daemon after it drops to the picolm user (it
# re-reads them on SIGHUP). file(INSTALL) has no RENAME, so copy under the final name first.
foreach(pair IN LISTS PL_PKG_CONFFILES)
    string(REPLACE "=" ";" pair "${pair}")
    list(GET pair 0 _from)
    list(GET pair 1 _to)
    configure_file("${_from}" "${_gen}/etc/${_to}" COPYONLY)
    file(INSTALL DESTINATION "${PL_SYSCONFDIR}/picolm" TYPE FILE
         PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ FILES "${_gen}/etc/${_to}")
endforeach()

# libpicolm.pc (installed by client/) carries the prefix the tree was configured with; a
# package built from a /usr/local tree installs to /usr, so point prefix= at the prefix this
# install really uses. The libdir/includedir lines are relative to ${prefix} or absolute.
set(_pc "$ENV{DESTDIR}${_prefix}/${PL_REL_LIBDIR}/pkgconfig/libpicolm.pc")
if(EXISTS "${_pc}")
    file(READ "${_pc}" _c)
    string(REGEX REPLACE "(^|\n)prefix=[^\n]*" "\\1prefix=${_prefix}" _c "${_c}")
    file(WRITE "${_pc}" "${_c}")
endif()
