#!/bin/bash
# Regenerates hooks/src/syscalls/x86_64.rs from the installed kernel headers (linux-libc-dev).
# Syscalls newer than the headers are appended by hand below; check them against
# arch/x86/entry/syscalls/syscall_64.tbl of the kernel you target.
set -euo pipefail
hdr=/usr/include/x86_64-linux-gnu/asm/unistd_64.h
out=${1:-hooks/src/syscalls/x86_64.rs}
last=$(grep '#define __NR_' "$hdr" | awk '{print $3}' | sort -n | tail -1)
{
  sed -n '1,/^pub const TABLE/p' "$out"
  grep '#define __NR_' "$hdr" | awk '{sub("__NR_","",$2); printf "    (\"%s\", %s),\n", $2, $3}'
  awk -v last="$last" -F'[(", )]+' '/^    \("/ && $3 > last' "$out"
  echo "];"
} > "$out.new"
mv "$out.new" "$out"
