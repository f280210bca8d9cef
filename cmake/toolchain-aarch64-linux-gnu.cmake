# SPDX-License-Identifier: MIT
# Cross-compiling for aarch64 Linux from an x86-64 Debian host (gcc-aarch64-linux-gnu, the
# arm64 multiarch -dev packages, qemu-user). CTest runs the test binaries through
# qemu-aarch64 with "-cpu max", which has the dot-product extension; the tests select the
# baseline NEON kernels themselves. Used by tests/cross/run-aarch64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

# Libraries and headers only from the target's multiarch directories; programs from the host.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

# pkg-config must see the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# LeakSanitizer cannot run under qemu-user (it needs ptrace-like thread inspection), so
# sanitizer builds get detect_leaks=0 (ASan and UBSan themselves work). Set through env(1)
# on the host: the guest's sanitizer runtime reads /proc/self/environ, which qemu's -E does
# not change.
set(CMAKE_CROSSCOMPILING_EMULATOR
    env;ASAN_OPTIONS=detect_leaks=0;qemu-aarch64;-L;/usr/aarch64-linux-gnu;-cpu;max)
