#!/usr/bin/env bash
# The README's main job: generate a sample photo dataset, build a store, mount it, and show
# what each fidelity level costs and how close it is to the original, measured through the
# mount. Called by `./setup.sh demo` after the build. PCRFS_DEMO_DIR moves the work folder.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="${PCRFS_DEMO_DIR:-/var/tmp/pcrfs-demo}"
mnt="$work/mnt"
mkdir -p "$work"
if mountpoint -q "$mnt" 2>/dev/null; then fusermount3 -u "$mnt"; fi

echo "==> generating a sample dataset from Debian wallpaper photographs in $work/sample"
rm -rf "$work/sample"
/usr/bin/python3 "$here/data/make_dataset.py" "$work/sample" --sample --seed 1

echo "==> pcr build $work/sample $work/store"
rm -rf "$work/store" "$work/store.partial"
pcr build --quiet "$work/sample" "$work/store"

echo
echo "==> pcrfs $work/store $mnt"
mkdir -p "$mnt"
pcrfs "$work/store" "$mnt"
ls "$mnt"

echo
echo "==> the fidelity ladder, read through the mount and decoded with PIL"
/usr/bin/python3 "$here/demo_table.py" "$work/sample" "$work/store" --mount "$mnt"

first=$(cd "$work/sample" && find . -name '*.JPEG' | sort | head -n 1)
first=${first#./}
echo
echo "The mount stays up. Look around, for example:"
echo "  ls $mnt/scan3/${first%/*}"
echo "  python3 -c \"from PIL import Image; Image.open('$mnt/scan2/$first').show()\""
echo "Unmount it with:"
echo "  fusermount3 -u $mnt"
