#!/bin/sh
# SPDX-License-Identifier: MIT
# Print how many huge pages picolmd needs to hold a model's weights (hugepages = auto), for
# vm.nr_hugepages. picolmd copies the GGUF tensor data section onto huge pages; the section
# is the file minus its header, so the file size is used as a safe upper bound (the header
# is small: the count is at most one or two pages above the exact need).
# Usage: hugepages-for-model.sh [--sysctl] [--page-size SIZE] MODEL.gguf
#   --sysctl          print a sysctl.d line "vm.nr_hugepages = N" instead of the bare number
#   --page-size SIZE  huge page size: 2M, 1G, or bytes (default: Hugepagesize of /proc/meminfo)
# Exit status: 0, or 2 for bad arguments or an unreadable file.
set -eu

usage() {
    echo "usage: hugepages-for-model.sh [--sysctl] [--page-size SIZE] MODEL.gguf" >&2
    exit 2
}
die() {
    echo "hugepages-for-model.sh: $*" >&2
    exit 2
}

sysctl_line=0
page=""
model=""
while [ $# -gt 0 ]; do
    case $1 in
        --sysctl) sysctl_line=1 ;;
        --page-size) [ $# -ge 2 ] || usage; page=$2; shift ;;
        --page-size=*) page=${1#--page-size=} ;;
        -h | --help)
            sed -n '3,10p' "$0" | sed 's/^# \{0,1\}//'
            exit 0 ;;
        -*) usage ;;
        *) [ -z "$model" ] || usage; model=$1 ;;
    esac
    shift
done
[ -n "$model" ] || usage
[ -f "$model" ] && [ -r "$model" ] || die "$model: not a readable file"

# Page size in bytes.
case $page in
    "")
        kb=$(sed -n 's/^Hugepagesize:[[:space:]]*\([0-9][0-9]*\) kB$/\1/p' /proc/meminfo 2>/dev/null || true)
        [ -n "$kb" ] || die "no Hugepagesize in /proc/meminfo (kernel without hugetlb?); pass --page-size"
        page_bytes=$((kb * 1024)) ;;
    *[!0-9KkMmGg]* | [!0-9]*) die "--page-size: '$page' is not like 2M, 1G or a byte count" ;;
    *[Kk]) page_bytes=$((${page%?} * 1024)) ;;
    *[Mm]) page_bytes=$((${page%?} * 1024 * 1024)) ;;
    *[Gg]) page_bytes=$((${page%?} * 1024 * 1024 * 1024)) ;;
    *) page_bytes=$page ;;
esac
[ "$page_bytes" -ge 4096 ] || die "--page-size: $page_bytes bytes is below a page"

# GGUF files start with the magic "GGUF"; anything else is refused rather than sized.
magic=$(head -c 4 "$model" 2>/dev/null || true)
[ "$magic" = "GGUF" ] || die "$model: not a GGUF file"

# vm.nr_hugepages counts pages of the default size only.
if [ "$sysctl_line" = 1 ] && [ -n "$page" ]; then
    kb=$(sed -n 's/^Hugepagesize:[[:space:]]*\([0-9][0-9]*\) kB$/\1/p' /proc/meminfo 2>/dev/null || true)
    if [ -z "$kb" ] || [ $((kb * 1024)) -ne "$page_bytes" ]; then
        die "--sysctl: vm.nr_hugepages counts default-size pages (${kb:-?} KiB); reserve $((page_bytes / 1024)) KiB pages on the kernel command line instead (hugepagesz=SIZE hugepages=N)"
    fi
fi

bytes=$(wc -c <"$model" | tr -d ' ')
pages=$(((bytes + page_bytes - 1) / page_bytes))
if [ "$sysctl_line" = 1 ]; then
    echo "# picolmd: $model ($bytes bytes) on $((page_bytes / 1024)) KiB pages"
    echo "vm.nr_hugepages = $pages"
else
    echo "$pages"
fi
