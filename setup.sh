#!/usr/bin/env bash
# pcrfs setup: installs every Debian dependency, builds, and installs the binaries into
# /usr/local/bin. Runs on a fresh Debian 12 machine as root (or with sudo).
#
#   ./setup.sh          install dependencies, build, install
#   ./setup.sh demo     ... then build a store from a generated sample and show its levels
#   ./setup.sh test     ... then run every test (GoogleTest and the Python checks, via ctest)
#
# Environment: BUILD_DIR (default: build), PCRFS_SKIP_APT=1 skips apt-get,
# PCRFS_CMAKE_ARGS adds CMake arguments (e.g. -DPCRFS_SANITIZE=address).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build_dir="${BUILD_DIR:-$here/build}"
mode="${1:-install}"

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

deps=(
  # build
  build-essential cmake ninja-build pkg-config git
  libjpeg62-turbo-dev liblmdb-dev libfuse3-dev libboost-dev libboost-program-options-dev
  libexpected-dev nlohmann-json3-dev libgtest-dev libgmock-dev libpng-dev
  libcurl4-openssl-dev libssl-dev libarchive-dev libzstd-dev
  # the Python package's extension (pcrfs.Store: python/CMakeLists.txt)
  pybind11-dev python3-dev
  # run
  fuse3 lmdb-utils attr
  # tests, sample data and benchmarks
  python3 python3-pil python3-numpy python3-opencv python3-torch python3-torchvision
  python3-skimage python3-matplotlib
  # benchmark peers: squashfuse (tests/bench/read_bench.py), rclone and s3fs
  # (tests/bench/remote_bench.py)
  squashfs-tools squashfuse rclone s3fs
  # remote-store test servers (tests/remote/install.sh installs the same and the npm packages)
  nginx-light libnginx-mod-http-js awscli python3-boto3 curl iproute2
  libjpeg-turbo-progs time util-linux
  # metrics: promtool and a Prometheus server for tests/e2e/test_metrics.py
  prometheus
  # fuzzing (tests/fuzz/run): clang with libFuzzer
  clang-14 libclang-rt-14-dev clang-format
)

install_deps() {
  if [ "${PCRFS_SKIP_APT:-0}" = 1 ]; then return; fi
  echo "==> installing Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${deps[@]}" >/dev/null
}

build() {
  echo "==> building in $build_dir"
  # shellcheck disable=SC2086
  cmake -S "$here" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPCRFS_WERROR=ON ${PCRFS_CMAKE_ARGS:-} >/dev/null
  cmake --build "$build_dir" --parallel "$(nproc)"
  echo "==> installing into /usr/local/bin"
  # Stripped: the debug info stays in the build tree, and a cold mount reads less.
  "${sudo_cmd[@]}" cmake --install "$build_dir" --strip >/dev/null
}

case "$mode" in
  install)
    install_deps
    build
    ;;
  demo)
    install_deps
    build
    exec "$here/tests/demo.sh"
    ;;
  test)
    install_deps
    build
    "$here/tests/remote/install.sh"
    # Slurm for e2e_slurm (docs/sharding.md's script under a real scheduler); not a dependency
    # of pcrfs itself.
    "$here/tests/slurm/install.sh"
    echo "==> running tests"
    cd "$build_dir"
    ctest --output-on-failure --timeout 900 -j "$(nproc)"
    ;;
  *)
    echo "usage: $0 [install|demo|test]" >&2
    exit 2
    ;;
esac
