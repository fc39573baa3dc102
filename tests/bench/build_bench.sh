#!/usr/bin/env bash
# build_bench.sh: how fast `pcr build` is, how much memory it needs, and what the store costs.
#
# usage: tests/bench/build_bench.sh [--data DIR] [--images N] [--pcr PATH] [--out FILE]
#                                   [--work DIR] [--repeat R] [--threads T]
#                                   [--sweep "64 256 1024 4096"] [--no-sweep] [--quick]
#                                   [--pcr-args "ARGS"]
#
#   --data DIR     the image folder to build from. Default /var/tmp/pcrfs-bench/imagenet5k,
#                  generated with tests/data/make_dataset.py (--images N, default 5000) when
#                  missing (about 40 s, plus a one-time wallpaper download).
#   --pcr PATH     the pcr binary. Default: $PCR, else build/mount-tools/pcr of this checkout,
#                  else `pcr` on PATH.
#   --out FILE     where the markdown results go too (default
#                  /var/tmp/pcrfs-bench/build_results.md). They are always printed on stdout.
#   --work DIR     scratch space for stores and jpegtran output (default /var/tmp/pcrfs-bench/work,
#                  emptied at the end). Needs about 3x the dataset size.
#   --repeat R     rounds: each configuration runs once per round, in an order rotated each round,
#                  and the median over rounds is reported (default 3).
#   --threads T    the "all cores" thread count compared with 1 thread (default: nproc).
#   --sweep LIST   --images-per-record values to sweep (default "64 256 1024 4096").
#   --no-sweep     skip that sweep.   --quick: --repeat 1 --no-sweep.
#   --pcr-args "ARGS"  extra options for every `pcr build`, e.g. "--quality-sample 0" to time
#                  the transcoding alone (the default build also measures PSNR/MS-SSIM of a
#                  fixed-size sample, a fixed cost of several CPU seconds).
#
# What it measures, side by side in one run, on the same warm source (read once before timing;
# the page cache is not dropped because a build reads each source once and the point is the
# CPU cost of transcoding):
#   1. `pcr build --threads T` images/s against the naive way: one `jpegtran -copy all
#      -progressive` subprocess per image, T at a time (xargs -P T), writing into a scratch
#      tree. jpegtran is the same libjpeg-turbo transcode without records, index or checksums.
#   2. Scaling: `pcr build --threads 1` against `--threads T`.
#   3. Peak RSS (`/usr/bin/time -v`, "Maximum resident set size") of `pcr build` on a quarter of
#      the dataset and on all of it: it should not grow with the image count.
#   4. Store bytes per level as % of the source, from the store's manifest.json, next to the
#      fractions measured with jpegtran in the design notes.
#   5. The --images-per-record sweep: build time, peak RSS, record count and store size, to
#      choose the default.
# Wall times are taken around the whole process (start to exit, including the index and the
# manifest), after a `sync` so an earlier run's dirty pages do not get flushed on this one's
# clock. Needs: bash, /usr/bin/time (package time), jpegtran (libjpeg-turbo-progs), python3.
#
# Expected run time for 5,000 images on 2 cores: about 1 minute with --quick, about 7 minutes
# with the defaults (3 repeats and the sweep).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

data=""
images=5000
pcr="${PCR:-}"
out=/var/tmp/pcrfs-bench/build_results.md
work=/var/tmp/pcrfs-bench/work
repeat=3
threads="$(nproc)"
sweep="64 256 1024 4096"
pcr_args=""

die() { echo "build_bench: $*" >&2; exit 2; }
log() { echo "build_bench: $*" >&2; }

while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --images) images="$2"; shift 2 ;;
    --pcr) pcr="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --work) work="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --sweep) sweep="$2"; shift 2 ;;
    --no-sweep) sweep=""; shift ;;
    --quick) repeat=1; sweep=""; shift ;;
    --pcr-args) pcr_args="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

if [ -z "$pcr" ]; then
  if [ -x "$repo/build/mount-tools/pcr" ]; then pcr="$repo/build/mount-tools/pcr"
  else pcr="$(command -v pcr || true)"; fi
fi
if [ -z "$pcr" ] || [ ! -x "$pcr" ]; then die "no pcr binary (build it, or pass --pcr PATH)"; fi
case "$pcr" in /*) ;; */*) pcr="$PWD/$pcr" ;; esac
[ -x /usr/bin/time ] || die "/usr/bin/time is missing (apt-get install time)"
command -v jpegtran >/dev/null || die "jpegtran is missing (apt-get install libjpeg-turbo-progs)"
[[ "$repeat" =~ ^[1-9][0-9]*$ ]] || die "--repeat needs a positive number"

if [ -z "$data" ]; then
  data=/var/tmp/pcrfs-bench/imagenet5k
  [ "$images" = 5000 ] || data="/var/tmp/pcrfs-bench/imagenet$images"
fi
if [ ! -d "$data" ]; then
  log "generating $images images into $data"
  mkdir -p "$(dirname "$data")"
  /usr/bin/python3 "$repo/tests/data/make_dataset.py" "$data" --images "$images" >&2
fi
data="$(cd "$data" && pwd)"

mkdir -p "$work" "$(dirname "$out")"
work="$(cd "$work" && pwd)"
case "$work" in "$data"|"$data"/*) die "--work must not be inside --data" ;; esac
cleanup() {
  rm -rf "${work:?}"/store* "${work:?}"/jpegtran "${work:?}"/quarter "${work:?}"/*.time \
         "${work:?}"/*.out "${work:?}"/*.list
}
trap cleanup EXIT

load0=$(cut -d' ' -f1-3 /proc/loadavg)
rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo '?')
pcr_version=$("$pcr" --version 2>/dev/null | head -1 || true)

# --- the dataset ------------------------------------------------------------------------------
mapfile -d '' jpegs < <(cd "$data" && find . -type f \( -iname '*.jpg' -o -iname '*.jpeg' \) \
                          -print0 | sort -z)
n_jpeg=${#jpegs[@]}
n_files=$(find "$data" -type f | wc -l)
src_bytes=$(du -sb --apparent-size "$data" | cut -f1)
[ "$n_jpeg" -gt 0 ] || die "no JPEG files under $data"
log "$data: $n_files files, $n_jpeg JPEGs, $src_bytes bytes; warming the page cache"
find "$data" -type f -print0 | xargs -0 cat >/dev/null

# --- helpers ----------------------------------------------------------------------------------
# median [-i] VALUES...: the median, with 2 decimals (-i: rounded to an integer).
median() {
  local fmt="%.2f"
  if [ "$1" = -i ]; then fmt="%.0f"; shift; fi
  printf '%s\n' "$@" | sort -g |
    awk -v f="$fmt" '{a[NR] = $1} END {printf f, (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
div() { awk -v a="$1" -v b="$2" -v f="${3:-%.2f}" 'BEGIN {printf f, (b == 0) ? 0 : a / b}'; }
div_ms() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b == 0) ? 0 : a * 1000 / b}'; }

# timed LABEL CMD...: runs CMD once under /usr/bin/time -v; sets T_WALL (s), T_CPU (user + system
# s, children included) and T_RSS (KiB, the largest single process).
timed() {
  local label="$1"; shift
  sync
  local tf="$work/$label.time" t0 t1 rc=0
  t0=$(date +%s.%N)
  /usr/bin/time -v -o "$tf" "$@" >"$work/$label.out" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then  # pcr build's 3: store written, some files not
    sed -n '1,40p' "$work/$label.out" >&2
    die "$label: '$*' exited with $rc"
  fi
  T_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.3f", b - a}')
  T_RSS=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tf")
  T_CPU=$(awk -F': ' '/User time|System time/ {s += $2} END {printf "%.2f", s}' "$tf")
}

records_of() {
  /usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["num_records"])' \
    "$1/manifest.json"
}

# Per configuration: space-separated wall, CPU and RSS values of every round, and store facts.
declare -A WALLS CPUS RSSS RECORDS STORE_BYTES

# run_config LABEL: one timed run of a configuration.
#   tN: pcr build --threads N;  quarter: the same on a quarter of the JPEGs;
#   iprN: --images-per-record N;  jpegtran: one jpegtran process per image, xargs -P threads.
run_config() {
  local label="$1" src="$data" args=()
  if [ "$label" = jpegtran ]; then
    rm -rf "$work/jpegtran"
    (cd "$data" && find . -type d -print0 | sed -z "s|^\.|$work/jpegtran|" | xargs -0 mkdir -p)
    # shellcheck disable=SC2016  # expanded by the inner bash
    timed "$label" bash -c 'cd "$1" && xargs -0 -P "$2" -I{} \
        jpegtran -copy all -progressive -outfile "$3/{}" "{}" <"$4"' \
        jpegtran "$data" "$threads" "$work/jpegtran" "$work/jpegs.list"
    STORE_BYTES[$label]=$(du -sb --apparent-size "$work/jpegtran" | cut -f1)
    rm -rf "$work/jpegtran"
  else
    case "$label" in
      t*) args=(--threads "${label#t}") ;;
      quarter) src="$work/quarter"; args=(--threads "$threads") ;;
      ipr*) args=(--threads "$threads" --images-per-record "${label#ipr}") ;;
    esac
    local store="$work/store-$label"
    rm -rf "$store" "$store.partial"
    # shellcheck disable=SC2086  # --pcr-args is split into words on purpose
    timed "$label" "$pcr" build "$src" "$store" "${args[@]}" $pcr_args
    RECORDS[$label]=$(records_of "$store")
    STORE_BYTES[$label]=$(du -sb --apparent-size "$store" | cut -f1)
    [ "$label" = "t$threads" ] || rm -rf "$store"  # keep one store for the manifest
  fi
  WALLS[$label]+="$T_WALL "; CPUS[$label]+="$T_CPU "; RSSS[$label]+="$T_RSS "
  log "  $label: $T_WALL s, CPU $T_CPU s, peak RSS $((T_RSS / 1024)) MiB"
}

# med KIND LABEL: the median wall (s), cpu (s) or rss (KiB) of a configuration.
med() {
  local -n values="${1^^}S"
  # shellcheck disable=SC2086  # word splitting wanted
  if [ "$1" = rss ]; then median -i ${values[$2]}; else median ${values[$2]}; fi
}

printf '%s\0' "${jpegs[@]}" >"$work/jpegs.list"
quarter=$(( (n_jpeg + 3) / 4 ))
rm -rf "$work/quarter"; mkdir -p "$work/quarter"
printf '%s\0' "${jpegs[@]:0:$quarter}" >"$work/quarter.list"
(cd "$data" && xargs -0 cp -l --parents -t "$work/quarter" <"$work/quarter.list" 2>/dev/null) ||
  (cd "$data" && xargs -0 cp --parents -t "$work/quarter" <"$work/quarter.list")

configs=("t$threads" jpegtran)
[ "$threads" -eq 1 ] || configs+=(t1)
configs+=(quarter)
for ipr in $sweep; do configs+=("ipr$ipr"); done

# Rounds: every configuration once per round, the order rotated each round, so a burst of load
# from elsewhere on a shared machine spreads over all configurations instead of hitting one.
for ((round = 0; round < repeat; round++)); do
  log "round $((round + 1)) of $repeat: ${#configs[@]} configurations"
  for ((c = 0; c < ${#configs[@]}; c++)); do
    run_config "${configs[(c + round) % ${#configs[@]}]}"
  done
done
rm -rf "$work/quarter"

tn="t$threads"
store_main="$work/store-$tn"
wall_tn=$(med wall "$tn"); cpu_tn=$(med cpu "$tn"); rss_full=$(med rss "$tn")
wall_jt=$(med wall jpegtran); cpu_jt=$(med cpu jpegtran); jt_bytes=${STORE_BYTES[jpegtran]}
if [ "$threads" -ne 1 ]; then wall_t1=$(med wall t1); cpu_t1=$(med cpu t1); fi
rss_quarter=$(med rss quarter); wall_quarter=$(med wall quarter)
records_quarter=${RECORDS[quarter]}
sweep_rows=()
for ipr in $sweep; do
  l="ipr$ipr"
  w=$(med wall "$l")
  sweep_rows+=("| $ipr | $w | $(div "$n_jpeg" "$w" %.0f) | $(med cpu "$l") | $(( $(med rss "$l") / 1024 )) | ${RECORDS[$l]} | $(div "$((STORE_BYTES[$l] * 100))" "$src_bytes" %.1f) | ${WALLS[$l]% } |")
done

results=()
emit() { results+=("$*"); }

# --- report ------------------------------------------------------------------------------------
cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)
turbo=$(dpkg-query -W -f='${Version}' libjpeg62-turbo 2>/dev/null || echo '?')
store_bytes=$(du -sb --apparent-size "$store_main" | cut -f1)

emit "# pcr build benchmark"
emit ""
emit "$(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($cpu), $(free -g | awk '/Mem:/ {print $2}') GB RAM, libjpeg-turbo $turbo, checkout $rev at start, pcr: \`$pcr\` ($pcr_version${pcr_args:+, build options \`$pcr_args\`}), load average before the run: $load0."
emit "Dataset \`$data\`: $n_files files, $n_jpeg JPEGs, $(div "$src_bytes" 1048576 %.1f) MiB (mean $(div "$src_bytes" "$((n_jpeg * 1024))" %.0f) KiB). Median of $repeat interleaved rounds; source warm in the page cache. CPU s (user + system) is the number to trust when the load average is high."
emit ""
emit "## Throughput"
emit ""
emit "| run | wall s (median) | images/s | CPU s | CPU ms/image | runs (wall s) |"
emit "|---|---:|---:|---:|---:|---|"
emit "| \`pcr build --threads $threads\` | $wall_tn | $(div "$n_jpeg" "$wall_tn" %.0f) | $cpu_tn | $(div_ms "$cpu_tn" "$n_jpeg") | ${WALLS[$tn]% } |"
if [ "$threads" -ne 1 ]; then
  emit "| \`pcr build --threads 1\` | $wall_t1 | $(div "$n_jpeg" "$wall_t1" %.0f) | $cpu_t1 | $(div_ms "$cpu_t1" "$n_jpeg") | ${WALLS[t1]% } |"
fi
emit "| \`jpegtran -copy all -progressive\`, 1 process/image, \`xargs -P $threads\` | $wall_jt | $(div "$n_jpeg" "$wall_jt" %.0f) | $cpu_jt | $(div_ms "$cpu_jt" "$n_jpeg") | ${WALLS[jpegtran]% } |"
emit ""
emit "- pcr build vs. jpegtran subprocesses: **$(div "$wall_jt" "$wall_tn")x** the images/s."
if [ "$threads" -ne 1 ]; then
  emit "- Scaling, $threads threads vs. 1: **$(div "$wall_t1" "$wall_tn")x** (ideal $threads)."
fi
emit "- Output size: store $(div "$((store_bytes * 100))" "$src_bytes" %.1f)% of source; jpegtran's progressive files $(div "$((jt_bytes * 100))" "$src_bytes" %.1f)%."
emit ""
emit "## Peak memory of pcr build (--threads $threads)"
emit ""
emit "| images | records | peak RSS MiB (median) | wall s |"
emit "|---:|---:|---:|---:|"
emit "| $quarter (1/4) | $records_quarter | $((rss_quarter / 1024)) | $wall_quarter |"
emit "| $n_jpeg (all) | ${RECORDS[$tn]} | $((rss_full / 1024)) | $wall_tn |"
emit ""
emit "Peak RSS ratio all / quarter: $(div "$rss_full" "$rss_quarter")x (flat is 1.0; proportional would be 4.0)."
emit ""
emit "## Bytes per level (store manifest)"
emit ""
emit "$(/usr/bin/python3 - "$store_main/manifest.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
ref = [11, 22, 25, 30, 38, 54, 56, 61, 66, 94.5]  # DESIGN.md section 1, jpegtran on a photo corpus
src, jsrc = m["source_bytes"], m["source_jpeg_bytes"]
print("| level | all files MiB | % of source | JPEGs MiB | % of source JPEGs | design notes % |")
print("|---:|---:|---:|---:|---:|---:|")
for k in range(10):
    a, j = m["level_bytes"][k], m["jpeg_level_bytes"][k]
    print(f"| {k + 1} | {a / 2**20:.1f} | {100 * a / src if src else 0:.1f} |"
          f" {j / 2**20:.1f} | {100 * j / jsrc if jsrc else 0:.1f} | {ref[k]} |")
print()
print(f"Source: {src / 2**20:.1f} MiB in {m.get('num_jpeg', '?')} JPEGs and"
      f" {m.get('num_passthrough', '?')} passthrough files ({m.get('passthrough_by_reason', {})}),"
      f" {m.get('num_records', '?')} records.")
EOF
)"
if [ ${#sweep_rows[@]} -gt 0 ]; then
  emit ""
  emit "## --images-per-record sweep (--threads $threads)"
  emit ""
  emit "| images/record | wall s (median) | images/s | CPU s | peak RSS MiB | records | store % of source | runs (wall s) |"
  emit "|---:|---:|---:|---:|---:|---:|---:|---|"
  for row in "${sweep_rows[@]}"; do emit "$row"; done
fi

printf '%s\n' "${results[@]}" | tee "$out"
log "results written to $out"
