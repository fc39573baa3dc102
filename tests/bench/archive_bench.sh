#!/usr/bin/env bash
# archive_bench.sh: `pcr build` from a tar of tars against the same images as a folder.
#
# usage: tests/bench/archive_bench.sh [--data DIR] [--pcr PATH] [--work DIR] [--repeat R]
#
#   --data DIR   an ImageFolder tree (default /var/tmp/pcrfs-bench/imagenet10k, made by
#                tests/data/make_dataset.py). Each folder holding files becomes one inner
#                tar, as in ImageNet's ILSVRC2012_img_train.tar; they go into one outer tar.
#   --work DIR   scratch (default /var/tmp/pcrfs-bench/archive-work, removed at the end).
#   --repeat R   rounds, folder and archive alternating; the median is reported (default 3).
#
# Reports images/s and peak RSS (/usr/bin/time -v) for both, and the ratio. Run it under the
# bench lock: flock /var/tmp/pcrfs-bench/bench.lock tests/bench/archive_bench.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
data=/var/tmp/pcrfs-bench/imagenet10k
pcr=${PCR:-$here/../../build/mount-tools/pcr}
work=/var/tmp/pcrfs-bench/archive-work
repeat=3
while [ $# -gt 0 ]; do
  case $1 in
    --data) data=$2; shift 2 ;;
    --pcr) pcr=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
rm -rf "$work"; mkdir -p "$work/inner"
trap 'rm -rf "$work"' EXIT
# Inner tars, one per leaf folder, named after its path; then the outer tar of tars.
(cd "$data" && find . -type f -printf '%h\n' | sort -u) | while read -r d; do
  rel=${d#./}
  mkdir -p "$work/inner/$(dirname "$rel")"
  tar -C "$data/$rel" --sort=name -cf "$work/inner/$rel.tar" .
done
tar -C "$work/inner" --sort=name -cf "$work/data.tar" .
images=$(find "$data" -type f | wc -l)
cat "$work/data.tar" > /dev/null; find "$data" -type f -exec cat {} + > /dev/null  # warm
run() {  # run SRC -> "seconds rss_kib"
  rm -rf "$work/st"
  /usr/bin/time -v -o "$work/time.txt" "$pcr" build "$1" "$work/st" -q --quality-sample 0 \
    > /dev/null
  awk -F': ' '/Elapsed/ {n=split($2,t,":"); s=0; for(i=1;i<=n;i++) s=s*60+t[i]; printf "%s ", s}
              /Maximum resident/ {print $2}' "$work/time.txt"
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
: > "$work/folder"; : > "$work/archive"
for ((r = 0; r < repeat; r++)); do
  run "$data" >> "$work/folder"
  run "$work/data.tar" >> "$work/archive"
done
fs=$(cut -d' ' -f1 "$work/folder" | median); frss=$(cut -d' ' -f2 "$work/folder" | median)
as=$(cut -d' ' -f1 "$work/archive" | median); arss=$(cut -d' ' -f2 "$work/archive" | median)
echo "images: $images, tar of tars: $(du -h "$work/data.tar" | cut -f1), repeat $repeat, $(nproc) cores"
echo "| source | seconds | images/s | peak RSS MiB |"
echo "|---|---|---|---|"
awk -v n="$images" -v s="$fs" -v r="$frss" 'BEGIN {printf "| folder | %.1f | %.0f | %.0f |\n", s, n/s, r/1024}'
awk -v n="$images" -v s="$as" -v r="$arss" 'BEGIN {printf "| tar of tars | %.1f | %.0f | %.0f |\n", s, n/s, r/1024}'
awk -v a="$as" -v f="$fs" 'BEGIN {printf "archive / folder images/s: %.2fx\n", f/a}'
