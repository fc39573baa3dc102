#!/usr/bin/env bash
# The README's main job: generate a sample photo dataset, build a store, and show what each
# fidelity level costs and looks like. Called by `./setup.sh demo` after the build.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="${PCRFS_DEMO_DIR:-/var/tmp/pcrfs-demo}"
mkdir -p "$work"

echo "==> generating a sample dataset from Debian wallpaper photographs in $work/sample"
rm -rf "$work/sample"
/usr/bin/python3 "$here/data/make_dataset.py" "$work/sample" --sample --seed 1

echo "==> pcr build $work/sample $work/store"
rm -rf "$work/store" "$work/store.partial"
pcr build "$work/sample" "$work/store"

echo
echo "==> the fidelity ladder, read back with 'pcr cat' and decoded with PIL"
/usr/bin/python3 "$here/demo_table.py" "$work/sample" "$work/store"
