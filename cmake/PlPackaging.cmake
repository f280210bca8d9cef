# SPDX-License-Identifier: MIT
# CPack configuration: `cpack -G DEB` in the build tree makes picolm_<version>-1_<arch>.deb.
# Included by packaging/CMakeLists.txt (so PL_PKG_CONFFILES is known). Depends: computed by
# dpkg-shlibdeps from the packaged binaries (libc6, liburing2, libprotobuf-c1, and
# libseccomp2 once picolmd links it), with versions; listed by name when dpkg-shlibdeps is
# missing; plus adduser or systemd for the maintainer scripts.

set(CPACK_PACKAGE_NAME picolm)
set(CPACK_PACKAGE_VENDOR "picolm")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "one resident language model served to many local apps over shared memory")
set(CPACK_PACKAGE_CONTACT "picolm maintainers <maintainers@picolm.invalid>")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES OFF)

set(CPACK_DEBIAN_PACKAGE_NAME picolm)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "picolm keeps one GGUF LLaMA-family model resident, locked in RAM (on huge
pages when reserved), and serves it to many local applications through
libpicolm: shared-memory rings with eventfd doorbells, microsecond-scale
overhead per request and per token, access decided by a policy on the
caller's kernel-verified uid/gid. Contains the picolmd broker with its
hardened systemd units, the picoctl admin tool, the picolm CLI, libpicolm
(shared and static, header, pkg-config) and a bundled 260K-parameter model.")

find_program(PL_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(PL_DPKG_SHLIBDEPS)
    set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
    set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser | systemd")
else()
    message(STATUS "dpkg-shlibdeps not found (package dpkg-dev): the .deb names its "
                   "library dependencies without versions")
    set(CPACK_DEBIAN_PACKAGE_DEPENDS
        "libc6, liburing2, libseccomp2, libprotobuf-c1, adduser | systemd")
endif()
# libpicolm.so.1 ships in this package: let dpkg-shlibdeps resolve it there, and publish a
# shlibs file so that packages linking libpicolm get a versioned dependency on picolm.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
    "${CMAKE_BINARY_DIR}/client;${CMAKE_BINARY_DIR}/lib")
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "systemd")

# Maintainer scripts and conffiles.
set(_pl_deb_dir ${CMAKE_BINARY_DIR}/packaging/debian)
file(MAKE_DIRECTORY ${_pl_deb_dir})
set(_pl_conffiles "")
foreach(pair IN LISTS PL_PKG_CONFFILES)
    string(REGEX REPLACE "^.*=" "" name "${pair}")
    string(APPEND _pl_conffiles "/etc/picolm/${name}\n")
endforeach()
file(WRITE ${_pl_deb_dir}/conffiles.tmp "${_pl_conffiles}")
configure_file(${_pl_deb_dir}/conffiles.tmp ${_pl_deb_dir}/conffiles COPYONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "")
foreach(script postinst prerm postrm)
    configure_file(${PROJECT_SOURCE_DIR}/packaging/debian/${script} ${_pl_deb_dir}/${script}
                   COPYONLY)
    list(APPEND CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${_pl_deb_dir}/${script})
endforeach()
if(_pl_conffiles)
    list(APPEND CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${_pl_deb_dir}/conffiles)
endif()
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "/\\\\.cache/")
include(CPack)
