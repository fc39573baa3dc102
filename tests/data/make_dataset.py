#!/usr/bin/python3
"""Makes an ImageNet-like JPEG tree from real photographs, for pcrfs tests and benchmarks.

Usage:
  make_dataset.py OUT --images N [--classes C] [--seed S] [--short-side 333:500]
                  [--quality 75:95] [--splits train,val] [--split-fractions 0.9,0.1]
                  [--wallpapers DIR] [--jobs J] [--gray-fraction 0.03] [...]
  make_dataset.py OUT --sample        # 2 classes x 12 images + labels.csv + classes.json

Output: OUT/<split>/<class>/<class>_<index>.JPEG, like the ImageNet training tree. Every image
is a random crop (random area and aspect ratio) of a random photograph, scaled down so its short
side is uniform in --short-side, flipped left-right half of the time, and saved by Pillow as a
baseline JPEG with 4:2:0 subsampling and a quality uniform in --quality. A few are grayscale
(--gray-fraction, 1-component JPEGs), and optionally some are CMYK or progressive, or carry an
EXIF block, so a builder meets the kinds of file a real dataset holds.

The photos are smoother than typical ImageNet pictures (bokeh, sky, water): the files average
about 36 KiB at 0.16 byte/pixel, against ~110 KiB for ImageNet. --grain SIGMA adds seeded
Gaussian grain for busier, larger files when a benchmark needs them.

Speed (2 cores): about 140 images/s, so 5,000 images in about 36 s; one core does ~75/s.

Deterministic: image i depends only on (--seed, i, the options, the photo set), through its own
random.Random, so the same command gives byte-identical files however many --jobs run.

Photos: with --wallpapers DIR, every JPEG/PNG of at least 1000 px on the short side under DIR
(deduplicated by content, sorted by path). Without it, the real photographs among the Debian
wallpaper packages (mate-backgrounds: the "nature" set; plasma-workspace-wallpapers: the
photographic ones, listed in PLASMA_PHOTOS below); rendered and vector art is left out. They are
fetched once with `apt-get download` + `dpkg -x` and cached in $PCRFS_CACHE, default
/var/cache/pcrfs-wallpapers (photos/ holds the ~23 photos, about 13 MB; the .debs are deleted).
gnome-backgrounds is not used: in Debian 12 it holds only rendered WebP art.

The tree is written into OUT.partial-<pid> and renamed to OUT when complete, so an existing OUT
is always a finished dataset. OUT must not exist (use --force to replace it).

Memory: the photos are decoded once in the parent (about 300 MB) and shared with the workers by
fork.

Needs Debian's python3-pil (and nothing else), hence /usr/bin/python3.
"""

import argparse
import csv
import fcntl
import glob
import hashlib
import io
import json
import multiprocessing
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

from PIL import Image

WALLPAPER_PACKAGES = ("mate-backgrounds", "plasma-workspace-wallpapers")
MATE_PHOTO_GLOB = "usr/share/backgrounds/mate/nature/*.jpg"
# The photographs among the Plasma 5.27 wallpapers (the rest are renders and drawings).
PLASMA_PHOTOS = ("BytheWater", "ColdRipple", "ColorfulCups", "DarkestHour", "EveningGlow",
                 "FallenLeaf", "Grey", "Kite", "OneStandsOut", "Path", "summer_1am")
MIN_PHOTO_SHORT_SIDE = 1000
PHOTO_EXTENSIONS = (".jpg", ".jpeg", ".png")

# Output aspect ratios (width / height) and their weights: mostly landscape 4:3, like ImageNet.
ASPECTS = ((4 / 3, 50), (3 / 2, 12), (1.0, 10), (16 / 9, 5), (3 / 4, 15), (2 / 3, 8))


def fail(message):
    print(f"make_dataset: {message}", file=sys.stderr)
    sys.exit(2)


def int_range(text):
    try:
        lo, _, hi = text.partition(":")
        lo, hi = int(lo), int(hi or lo)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected LO:HI, got {text!r}")
    if lo > hi or lo <= 0:
        raise argparse.ArgumentTypeError(f"bad range {text!r}")
    return lo, hi


def fraction(text):
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not in [0, 1]")
    return value


# ---------------------------------------------------------------------------------------------
# The photo set


def default_cache_dir():
    return os.environ.get("PCRFS_CACHE", "/var/cache/pcrfs-wallpapers")


def fetch_wallpapers(cache):
    """Fills cache/photos from the Debian packages, once. Returns cache/photos."""
    photos = os.path.join(cache, "photos")
    done = os.path.join(photos, "SOURCES.txt")
    if os.path.exists(done):
        return photos
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two runs at once: the second waits, then reuses
        if os.path.exists(done):
            return photos
        print(f"make_dataset: fetching {' '.join(WALLPAPER_PACKAGES)} into {cache} (once)",
              file=sys.stderr)
        work = tempfile.mkdtemp(prefix="fetch-", dir=cache)
        try:
            os.chmod(work, 0o755)
            cmd = ["apt-get", "download", *WALLPAPER_PACKAGES]
            run = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
            if run.returncode != 0:  # no package lists yet: update once and retry
                subprocess.run(["apt-get", "update"], capture_output=True)
                run = subprocess.run(cmd, cwd=work, capture_output=True, text=True)
            if run.returncode != 0:
                fail(f"`{' '.join(cmd)}` failed:\n{run.stderr}")
            root = os.path.join(work, "root")
            sources = []
            for deb in sorted(glob.glob(os.path.join(work, "*.deb"))):
                subprocess.run(["dpkg", "-x", deb, root], check=True)
                sources.append(os.path.basename(deb))
            staged = os.path.join(work, "photos")
            os.makedirs(staged)
            picked = [("mate-" + os.path.basename(p), p)
                      for p in sorted(glob.glob(os.path.join(root, MATE_PHOTO_GLOB)))]
            for name in PLASMA_PHOTOS:
                images = glob.glob(os.path.join(root, "usr/share/wallpapers", name,
                                                "contents/images/*.jpg"))
                # Plasma ships one file under many size names (symlinks): take the real one.
                real = sorted({os.path.realpath(p) for p in images})
                if real:
                    picked.append((f"plasma-{name}.jpg", real[0]))
            if len(picked) < 10:
                fail(f"found only {len(picked)} photos in {sources}; has the package changed?")
            for name, path in picked:
                shutil.copyfile(path, os.path.join(staged, name))
            with open(os.path.join(staged, "SOURCES.txt"), "w") as f:
                f.write("Photos copied from these Debian packages (see their copyright files):\n")
                f.writelines(f"  {s}\n" for s in sources)
                f.writelines(f"{name}\t{os.path.relpath(p, root)}\n" for name, p in picked)
            if os.path.exists(photos):
                shutil.rmtree(photos)
            os.rename(staged, photos)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return photos


def list_photos(folder):
    found, seen = [], set()
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files):
            if not name.lower().endswith(PHOTO_EXTENSIONS):
                continue
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                digest = hashlib.sha1(f.read()).digest()
            if digest in seen:
                continue
            seen.add(digest)
            with Image.open(path) as im:
                if min(im.size) < MIN_PHOTO_SHORT_SIDE:
                    continue
            found.append(path)
    return sorted(found, key=lambda p: os.path.relpath(p, folder))


# Decoded photos, filled in the parent before the pool forks, so the workers share the pixels.
PHOTOS = []


def load_photos(paths):
    for path in paths:
        with Image.open(path) as im:
            im = im.convert("RGB")  # L, RGBA (onto black) and P all become RGB
            im.load()
        PHOTOS.append(im)


# ---------------------------------------------------------------------------------------------
# One image


def plan_image(index, args):
    """Every random choice of image `index`, drawn in a fixed order from its own generator."""
    rng = random.Random(f"pcrfs-dataset/{args.seed}/{index}")
    plan = {
        "photo": rng.randrange(len(PHOTOS)),
        "short": rng.randint(*args.short_side),
        "quality": rng.randint(*args.quality),
        "aspect": rng.choices([a for a, _ in ASPECTS], [w for _, w in ASPECTS])[0]
                  * rng.uniform(0.95, 1.05),
        "zoom": rng.random(),
        "x": rng.random(),
        "y": rng.random(),
        "flip": rng.random() < 0.5,
        "gray": rng.random() < args.gray_fraction,
        "cmyk": rng.random() < args.cmyk_fraction,
        "progressive": rng.random() < args.progressive_fraction,
        "exif": rng.random() < args.exif_fraction,
        "exif_time": rng.randrange(10 ** 8),
        "grain_seed": rng.getrandbits(63),
    }
    return plan


def render_image(index, args):
    p = plan_image(index, args)
    photo = PHOTOS[p["photo"]]
    pw, ph = photo.size
    aspect = p["aspect"]
    if aspect >= 1:
        out_w, out_h = round(p["short"] * aspect), p["short"]
    else:
        out_w, out_h = p["short"], round(p["short"] / aspect)
    # The largest crop of this aspect that fits, and the smallest that needs no upscaling.
    max_h = min(ph, pw / aspect)
    min_h = min(out_h, max_h)
    # Log-uniform crop size: as many close-ups as wide views, like RandomResizedCrop's scale.
    crop_h = min_h * (max_h / min_h) ** p["zoom"]
    crop_w = crop_h * aspect
    x0 = (pw - crop_w) * p["x"]
    y0 = (ph - crop_h) * p["y"]
    im = photo.resize((out_w, out_h), Image.LANCZOS, box=(x0, y0, x0 + crop_w, y0 + crop_h),
                      reducing_gap=3.0)
    if p["flip"]:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    if args.grain > 0:
        import numpy  # only here: the default path needs no numpy
        gen = numpy.random.default_rng(p["grain_seed"])
        noise = gen.normal(0.0, args.grain, (out_h, out_w, 1))
        pixels = numpy.asarray(im, dtype=numpy.float32) + noise.astype(numpy.float32)
        im = Image.fromarray(numpy.clip(pixels + 0.5, 0, 255).astype(numpy.uint8), "RGB")
    if p["gray"]:
        im = im.convert("L")
    elif p["cmyk"]:
        im = im.convert("CMYK")
    save = {"format": "JPEG", "quality": p["quality"], "subsampling": 2}
    if p["progressive"]:
        save.update(progressive=True, optimize=True)
    if p["exif"]:
        exif = Image.Exif()
        exif[0x010F] = "pcrfs"                     # Make
        exif[0x0110] = "make_dataset"              # Model
        t = p["exif_time"]
        exif[0x0132] = "20%02d:%02d:%02d %02d:%02d:%02d" % (
            t % 25, t // 25 % 12 + 1, t // 300 % 28 + 1, t // 8400 % 24, t // 201600 % 60,
            t // 12096000 % 60)                    # DateTime
        save["exif"] = exif.tobytes()
    buf = io.BytesIO()
    im.save(buf, **save)
    return buf.getvalue(), im.mode


def write_images(job):
    """Worker: renders and writes a chunk of (index, path) pairs; returns per-image facts."""
    args, items = job
    facts = []
    for index, path in items:
        data, mode = render_image(index, args)
        with open(path, "wb") as f:
            f.write(data)
        facts.append((len(data), mode))
    return facts


# ---------------------------------------------------------------------------------------------
# The tree


def layout(args):
    """Returns [(index, split, class, relative path)] for every image, in index order."""
    rng = random.Random(f"pcrfs-classes/{args.seed}")
    classes = sorted(f"n{v:08d}" for v in rng.sample(range(1000000, 15000000), args.classes))
    splits = args.splits
    fractions = args.split_fractions or (
        [1.0] if len(splits) == 1 else [1.0 - 0.1 * (len(splits) - 1)] + [0.1] * (len(splits) - 1))
    if len(fractions) != len(splits) or abs(sum(fractions) - 1.0) > 1e-6:
        fail("--split-fractions needs one fraction per split, adding up to 1")
    counts = [int(args.images * f) for f in fractions[:-1]]
    counts.append(args.images - sum(counts))
    entries, index = [], 0
    for split, count in zip(splits, counts):
        for j in range(count):
            cls = classes[j % len(classes)]
            entries.append((index, split, cls, f"{split}/{cls}/{cls}_{index}.JPEG"))
            index += 1
    return classes, entries


def write_extras(out, classes, entries):
    """The non-image files a real dataset carries next to its images."""
    with open(os.path.join(out, "labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["path", "split", "label", "class"])
        for _, split, cls, rel in entries:
            w.writerow([rel, split, classes.index(cls), cls])
    with open(os.path.join(out, "classes.json"), "w") as f:
        json.dump({c: i for i, c in enumerate(classes)}, f, indent=2)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("out")
    ap.add_argument("--images", type=int, help="number of images (required unless --sample)")
    ap.add_argument("--classes", type=int, default=None, help="default: 10, or 2 with --sample")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--short-side", type=int_range, default=(333, 500), metavar="LO:HI")
    ap.add_argument("--quality", type=int_range, default=(75, 95), metavar="LO:HI")
    ap.add_argument("--splits", default="train,val", help="comma-separated split names")
    ap.add_argument("--split-fractions", default=None,
                    help="e.g. 0.9,0.1 (default: 10%% per extra split, the rest to the first)")
    ap.add_argument("--gray-fraction", type=fraction, default=0.03)
    ap.add_argument("--cmyk-fraction", type=fraction, default=0.0)
    ap.add_argument("--progressive-fraction", type=fraction, default=0.0)
    ap.add_argument("--exif-fraction", type=fraction, default=0.05)
    ap.add_argument("--grain", type=float, default=0.0, metavar="SIGMA",
                    help="add Gaussian luma grain of SIGMA levels (0: none); the wallpapers are"
                    " smoother than typical photos, and grain makes files larger and busier")
    ap.add_argument("--extras", action="store_true",
                    help="also write OUT/labels.csv and OUT/classes.json (non-JPEG files)")
    ap.add_argument("--sample", action="store_true",
                    help="small demo set: 2 classes x 12 train images, --extras, no val split")
    ap.add_argument("--wallpapers", metavar="DIR", help="use the photos under DIR")
    ap.add_argument("--jobs", type=int, default=os.cpu_count(), help="worker processes")
    ap.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = ap.parse_args()

    if args.sample:
        args.images = args.images or 24
        args.classes = args.classes or 2
        args.splits = "train"
        args.extras = True
        args.gray_fraction = max(args.gray_fraction, 0.05)  # about one grey image
    if not args.images or args.images < 1:
        ap.error("--images N is required")
    args.classes = args.classes or 10
    args.splits = [s for s in args.splits.split(",") if s]
    if args.split_fractions:
        args.split_fractions = [float(f) for f in args.split_fractions.split(",")]
    if args.classes < 1 or args.jobs < 1 or not args.splits:
        ap.error("--classes, --jobs and --splits must be positive/non-empty")

    out = os.path.abspath(args.out)
    if os.path.lexists(out) and not args.force:
        fail(f"{out} exists (use --force to replace it)")

    start = time.monotonic()
    folder = args.wallpapers or fetch_wallpapers(default_cache_dir())
    paths = list_photos(folder)
    if not paths:
        fail(f"no JPEG/PNG photo of at least {MIN_PHOTO_SHORT_SIDE} px under {folder}")
    load_photos(paths)
    loaded = time.monotonic()

    classes, entries = layout(args)
    tmp = f"{out}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    for split in args.splits:
        for cls in classes:
            os.makedirs(os.path.join(tmp, split, cls))
    if args.extras:
        write_extras(tmp, classes, entries)

    items = [(i, os.path.join(tmp, rel)) for i, _, _, rel in entries]
    chunk = 16
    jobs = [(args, items[k:k + chunk]) for k in range(0, len(items), chunk)]
    facts = []
    if args.jobs == 1 or len(jobs) == 1:
        for job in jobs:
            facts += write_images(job)
    else:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            for f in pool.imap(write_images, jobs):
                facts += f
    if os.path.lexists(out):
        shutil.rmtree(out) if os.path.isdir(out) and not os.path.islink(out) else os.remove(out)
    os.rename(tmp, out)
    end = time.monotonic()

    total = sum(n for n, _ in facts)
    modes = {}
    for _, m in facts:
        modes[m] = modes.get(m, 0) + 1
    gen = end - loaded
    print(f"make_dataset: {len(facts)} images ({', '.join(f'{m} {n}' for m, n in sorted(modes.items()))}),"
          f" {len(classes)} classes, splits {','.join(args.splits)},"
          f" {total / 1e6:.1f} MB (mean {total / len(facts) / 1024:.0f} KiB),"
          f" from {len(paths)} photos, in {end - start:.1f} s"
          f" ({len(facts) / gen:.0f} images/s with {args.jobs} jobs, {loaded - start:.1f} s setup)"
          f" -> {out}")


if __name__ == "__main__":
    main()
