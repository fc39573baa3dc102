#!/bin/bash
# `ls -l`, `ls -lR` and `find -ls` of one large folder: native against pcrfs, cold and warm.
#
#   flock /var/tmp/pcrfs-bench/bench.lock tests/bench/ls_bench.sh [--files N] [--work DIR]
#       [--pcr PATH] [--pcrfs PATH] [--before PATH] [--readdirplus] [--out FILE]
#
# The folder holds N small files (default 100000; listing does not read them, so they are
# 64-byte text files, passthrough in the store), mounted with -o scans=1. Cold: after
# `echo 3 > /proc/sys/vm/drop_caches` (root) and on a fresh mount; warm: the second run on
# the same mount. Each command's output goes to /dev/null. The `xattr calls` column counts the
# getxattr/lgetxattr system calls of `ls -l` (strace -c -f), each one a FUSE round trip on a
# mount. --before PATH adds the rows of another pcrfs binary (e.g. an older build) on the same
# store; --readdirplus adds the rows of this pcrfs with -o readdirplus=yes. Prints a markdown
# table and writes it to --out (default ls_bench.md).
set -euo pipefail

files=100000
work=/var/tmp/pcrfs-bench/ls
build="$(cd "$(dirname "$0")/../.." && pwd)/build"
pcr="$build/mount-tools/pcr"
pcrfs="$build/fs/pcrfs"
before=""
readdirplus=0
out=ls_bench.md
while [ $# -gt 0 ]; do
  case "$1" in
    --files) files="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --pcr) pcr="$2"; shift 2 ;;
    --pcrfs) pcrfs="$2"; shift 2 ;;
    --before) before="$2"; shift 2 ;;
    --readdirplus) readdirplus=1; shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "ls_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

src="$work/src-$files"
store="$work/store-$files"
mnt="$work/mnt"
cleanup() { fusermount3 -u "$mnt" 2>/dev/null || true; }
trap cleanup EXIT

if [ ! -d "$src/class" ]; then
  rm -rf "$src" "$store"
  mkdir -p "$src/class"
  (cd "$src/class" && seq -f "%07g" 1 "$files" |
    xargs -n 5000 sh -c 'for f; do printf "file %s of the class folder..........................\n" "$f" > "n$f.txt"; done' sh)
fi
if [ ! -f "$store/manifest.json" ]; then
  "$pcr" build "$src" "$store" --quiet >/dev/null
fi
mkdir -p "$mnt"

drop_caches() {
  sync
  if [ -w /proc/sys/vm/drop_caches ]; then echo 3 > /proc/sys/vm/drop_caches; fi
}

# seconds of one command, output discarded
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  "$@" > /dev/null 2>&1
  t1=$(date +%s.%N)
  awk "BEGIN {printf \"%.2f\", $t1 - $t0}"
}
list_l() { ls -l "$1"; }
list_lr() { ls -lR "$1"; }
find_ls() { find "$1" -ls; }

xattr_calls() {
  strace -f -c -e trace=getxattr,lgetxattr,fgetxattr -o /tmp/ls_bench.strace ls -l "$1" >/dev/null 2>&1
  awk '$NF ~ /getxattr/ {n += $4} END {print n + 0}' /tmp/ls_bench.strace
}

rows=()
# run_one LABEL DIR [MOUNT_CMD...]: cold and warm times of the three listings
run_one() {
  local label="$1" dir="$2"; shift 2
  local cmd cold warm calls line
  line="| $label"
  for cmd in list_l list_lr find_ls; do
    [ $# -gt 0 ] && cleanup
    drop_caches
    if [ $# -gt 0 ]; then "$@"; fi
    cold=$(timed "$cmd" "$dir")
    warm=$(timed "$cmd" "$dir")
    line="$line | $cold | $warm"
  done
  calls=$(xattr_calls "$dir")
  rows+=("$line | $calls |")
}

mount_with() {
  "$1" "$store" "$mnt" -o "scans=1${2:+,$2}"
  for _ in $(seq 100); do mountpoint -q "$mnt" && return 0; sleep 0.05; done
  echo "ls_bench.sh: $1 did not mount" >&2
  exit 1
}

run_one "native (ext4/overlay source)" "$src/class"
run_one "pcrfs $(git -C "$(dirname "$0")" rev-parse --short HEAD)" "$mnt/class" mount_with "$pcrfs"
if [ "$readdirplus" = 1 ]; then
  run_one "pcrfs, -o readdirplus=yes" "$mnt/class" mount_with "$pcrfs" readdirplus=yes
fi
if [ -n "$before" ]; then
  run_one "pcrfs before ($before)" "$mnt/class" mount_with "$before"
fi
cleanup

{
  echo "$files files in one folder, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(uname -r)"
  echo
  echo "| listing | ls -l cold s | warm s | ls -lR cold s | warm s | find -ls cold s | warm s | xattr calls of ls -l |"
  echo "|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} | tee "$out"
