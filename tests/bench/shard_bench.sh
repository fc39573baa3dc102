#!/usr/bin/env bash
# shard_bench.sh: two shards on two processes with one core each, then `pcr merge`, against one
# `pcr build` with two threads on the same data. The merged store must be byte-identical to the
# single build; the target is a total time (shards + merge) within 1.1x of the single build.
#
# usage: flock /var/tmp/pcrfs-bench/bench.lock tests/bench/shard_bench.sh [--data DIR]
#            [--images N] [--pcr PATH] [--work DIR] [--repeat R] [--out FILE] [--pcr-args "ARGS"]
#
#   --data DIR    the image folder. Default /var/tmp/pcrfs-bench/shard<N>, generated when missing
#                 with tests/data/make_dataset.py DIR --images N --seed 1 (default N = 3000).
#   --pcr PATH    the pcr binary. Default: $PCR, else build/mount-tools/pcr of this checkout.
#   --work DIR    scratch space for stores and parts (default /var/tmp/pcrfs-bench/shard-work,
#                 emptied at the end).
#   --repeat R    rounds; in each, the single build and the sharded build run once, in an order
#                 that alternates, and medians are reported (default 3).
#   --out FILE    markdown results also go there (default /var/tmp/pcrfs-bench/shard_results.md).
#   --pcr-args    extra options for every build (same for the single build and the shards).
#
# Each shard runs under `taskset -c K` (shard 0 on CPU 0, shard 1 on CPU 1) with --threads 1;
# the single build runs under `taskset -c 0,1` with --threads 2. The sharded time is from the
# start of both shards to the end of the merge (the wall time a user waits); the shards' own
# wall times and the merge's are reported too. The source is read once before timing (warm page
# cache: the point is CPU and the cost of walking twice, not disk). Needs taskset (util-linux).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
data=""
images=3000
pcr="${PCR:-}"
work=/var/tmp/pcrfs-bench/shard-work
repeat=3
out=/var/tmp/pcrfs-bench/shard_results.md
pcr_args=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --images) images="$2"; shift 2 ;;
    --pcr) pcr="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --pcr-args) pcr_args="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "shard_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$pcr" ]]; then
  pcr="$repo/build/mount-tools/pcr"
  [[ -x "$pcr" ]] || pcr=pcr
fi
if [[ "$(nproc)" -lt 2 ]]; then
  echo "shard_bench.sh: needs 2 CPUs (nproc says $(nproc))" >&2
  exit 2
fi
if [[ -z "$data" ]]; then
  data=/var/tmp/pcrfs-bench/shard$images
  if [[ ! -d "$data" ]]; then
    /usr/bin/python3 "$repo/tests/data/make_dataset.py" "$data" --images "$images" --seed 1 >&2
  fi
fi
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
# shellcheck disable=SC2086
read -r -a extra <<< "$pcr_args"

find "$data" -type f -exec cat {} + > /dev/null  # warm
now() { date +%s.%N; }

single_run() {  # prints the wall seconds
  rm -rf "$work/single"
  sync
  local t0 t1
  t0=$(now)
  taskset -c 0,1 "$pcr" build "$data" "$work/single" --threads 2 --quiet "${extra[@]}" > /dev/null
  t1=$(now)
  echo "$t1 - $t0" | bc
}

sharded_run() {  # prints: total shard0 shard1 merge
  rm -rf "$work/part0" "$work/part1" "$work/merged"
  sync
  local t0 t1 t2 s0 s1 p0 p1
  t0=$(now)
  ( taskset -c 0 "$pcr" build "$data" "$work/part0" --shard 0/2 --threads 1 --quiet "${extra[@]}" \
      > /dev/null; now > "$work/end0" ) &
  p0=$!
  ( taskset -c 1 "$pcr" build "$data" "$work/part1" --shard 1/2 --threads 1 --quiet "${extra[@]}" \
      > /dev/null; now > "$work/end1" ) &
  p1=$!
  wait "$p0"
  wait "$p1"
  [[ -f "$work/part0/part.json" && -f "$work/part1/part.json" ]] || { echo "a shard failed" >&2; exit 1; }
  t1=$(now)
  taskset -c 0,1 "$pcr" merge "$work/part0" "$work/part1" "$work/merged" --threads 2 > /dev/null
  t2=$(now)
  s0=$(echo "$(cat "$work/end0") - $t0" | bc)
  s1=$(echo "$(cat "$work/end1") - $t0" | bc)
  echo "$(echo "$t2 - $t0" | bc) $s0 $s1 $(echo "$t2 - $t1" | bc)"
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

singles=() totals=() shard0=() shard1=() merges=()
for ((r = 0; r < repeat; r++)); do
  if ((r % 2 == 0)); then
    singles+=("$(single_run)")
    read -r t a b m <<< "$(sharded_run)"
  else
    read -r t a b m <<< "$(sharded_run)"
    singles+=("$(single_run)")
  fi
  totals+=("$t") shard0+=("$a") shard1+=("$b") merges+=("$m")
  # provenance.json (when, where, how: docs/format.md) is not the store's content.
  if ! diff -r -q -x provenance.json "$work/single" "$work/merged" > /dev/null; then
    echo "shard_bench.sh: the merged store differs from the single build (round $r)" >&2
    diff -r -q -x provenance.json "$work/single" "$work/merged" >&2 || true
    exit 1
  fi
  echo "round $r: single ${singles[-1]} s, sharded $t s (shards $a s, $b s; merge $m s)" >&2
done
files=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(m['num_jpeg']+m['num_passthrough'])" "$work/single/manifest.json")
single=$(printf '%s\n' "${singles[@]}" | median)
total=$(printf '%s\n' "${totals[@]}" | median)
ratio=$(echo "scale=3; $total / $single" | bc)
{
  echo "| run (median of $repeat) | wall s | files/s |"
  echo "|---|---|---|"
  echo "| 1 build, --threads 2, taskset 0,1 | $single | $(echo "scale=0; $files / $single" | bc) |"
  echo "| 2 shards, --threads 1 each, taskset 0 / 1, then merge | $total | $(echo "scale=0; $files / $total" | bc) |"
  echo "| &nbsp;&nbsp;shard 0/2 | $(printf '%s\n' "${shard0[@]}" | median) | |"
  echo "| &nbsp;&nbsp;shard 1/2 | $(printf '%s\n' "${shard1[@]}" | median) | |"
  echo "| &nbsp;&nbsp;merge | $(printf '%s\n' "${merges[@]}" | median) | |"
  echo
  echo "Files: $files from $data (pcr-args: ${pcr_args:-none}). Merged store byte-identical to the"
  echo "single build in every round (diff -r, provenance.json aside). Sharded / single: **${ratio}x** (target <= 1.1x)."
} | tee "$out"
