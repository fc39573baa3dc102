#!/usr/bin/python3
"""Image-quality checks (docs/quality.md): pcr's PSNR and MS-SSIM against an independent Python
reference built on scikit-image, MeasureStoreQuality (`pcr quality-sample`), and `pcr ladder`.

The reference MS-SSIM (ms_ssim_reference below) decodes with PIL, takes luma the documented way,
and for each of the M scales (M = 5 when the smaller side is >= 176 px):
  * scales 1..M-1: the mean contrast-structure term cs = (2 s_xy + C2) / (s_x^2 + s_y^2 + C2),
    with the local moments from skimage.filters.gaussian(sigma=1.5, truncate=3.5,
    mode='reflect') -- the exact filter and parameters structural_similarity uses internally
    (truncate 3.5 gives its 11-tap window) -- averaged after cropping 5 px at every edge, as
    structural_similarity crops;
  * scale M: skimage.metrics.structural_similarity(gaussian_weights=True, sigma=1.5,
    use_sample_covariance=False, data_range=255) itself;
  * between scales: 2x2 block means (odd last row/column dropped), in float64;
  * result: prod cs_j^w_j * ssim_M^w_M with the weights (0.0448, 0.2856, 0.3001, 0.2363,
    0.1333), renormalized over the first M when M < 5; negative terms clamped to 0.
structural_similarity has no cs output (full=True returns the SSIM map, l*cs), so cs is
recomputed with its filter; every test also checks that this recomputation reproduces
structural_similarity's own value at every scale (to 1e-9), so the two cannot drift apart.

Tolerance: |C++ - reference| <= 1e-6. Both sides decode with the same libjpeg-turbo (pcr through
codec::DecodeJpeg, PIL through Debian's libjpeg62-turbo) and compute in float64, so the only
expected difference is summation order (observed: <= 4e-15). The tolerance is set so that
definitional slips fail: on a 480x360 quality-95 vs quality-40 pair, using BT.709 luma moves the
value by 1.3e-3, sigma 1.4 by 1.2e-3, no edge crop by 4.5e-4, rounding luma to integers by
8e-5, and renormalizing the 5 published weights (they sum to 1.0001) by 4.4e-6. (One variant it
cannot see: mean(l) * mean(cs) instead of mean(l * cs) at the last scale differs by ~1e-13.)
"""

import io
import math
import os
import re
import unittest

import numpy as np
from PIL import Image
from skimage.filters import gaussian
from skimage.metrics import structural_similarity

from pcrtest import PCR, TempDirTest, pcr_cat, pcr_extract, photo, run, save_jpeg

WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
C1 = (0.01 * 255) ** 2
C2 = (0.03 * 255) ** 2
TOLERANCE = 1e-6
SKIMAGE_ARGS = dict(gaussian_weights=True, sigma=1.5, use_sample_covariance=False,
                    data_range=255)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def decode(data):
    im = Image.open(io.BytesIO(data))
    im.load()
    return im


def luma(im):
    """Grey: the sample; RGB: BT.601 Y; CMYK: Y of PIL's CMYK->RGB (docs/quality.md)."""
    if im.mode == "L":
        return np.asarray(im, dtype=np.float64)
    rgb = np.asarray(im.convert("RGB"), dtype=np.float64)
    return 0.299 * rgb[..., 0] + 0.587 * rgb[..., 1] + 0.114 * rgb[..., 2]


def psnr_reference(a, b):
    """Over every component of the decoded samples (PIL's, which for CMYK are inverted: the
    squared differences are the same)."""
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    mse = np.mean((x - y) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def _filter(im):
    return gaussian(im, sigma=1.5, truncate=3.5, mode="reflect", preserve_range=True)


def cs_and_ssim(x, y):
    """(mean cs, mean l*cs) with structural_similarity's filter and crop."""
    ux, uy = _filter(x), _filter(y)
    vx = _filter(x * x) - ux * ux
    vy = _filter(y * y) - uy * uy
    vxy = _filter(x * y) - ux * uy
    cs = (2 * vxy + C2) / (vx + vy + C2)
    lum = (2 * ux * uy + C1) / (ux * ux + uy * uy + C1)
    crop = (slice(5, -5), slice(5, -5))
    return float(cs[crop].mean()), float((lum * cs)[crop].mean())


def downsample(x):
    h, w = x.shape[0] // 2 * 2, x.shape[1] // 2 * 2
    x = x[:h, :w]
    return 0.25 * (x[0::2, 0::2] + x[1::2, 0::2] + x[0::2, 1::2] + x[1::2, 1::2])


def num_scales(h, w):
    m = 0
    while m < 5 and min(h, w) >= 11:
        m, h, w = m + 1, h // 2, w // 2
    return m


def ms_ssim_reference(a, b, test=None):
    x, y = luma(a), luma(b)
    m = num_scales(*x.shape)
    weights = WEIGHTS if m == 5 else [w / sum(WEIGHTS[:m]) for w in WEIGHTS[:m]]
    result = 1.0
    for j in range(m):
        if j:
            x, y = downsample(x), downsample(y)
        cs, ssim_mine = cs_and_ssim(x, y)
        ssim = structural_similarity(x, y, **SKIMAGE_ARGS)
        if test is not None:
            test.assertAlmostEqual(ssim_mine, ssim, delta=1e-9,
                                   msg=f"cs recomputation drifted from skimage at scale {j + 1}")
        term = cs if j < m - 1 else ssim
        result *= max(term, 0.0) ** weights[j]
    return result


def quality_pair(a_path, b_path):
    out = run([PCR, "quality-pair", a_path, b_path], text=True).stdout.split()
    return float(out[0]), float(out[1])


def ladder_geometry(img_w, img_h, width, columns, crop=False):
    """The layout docs/quality.md specifies: (sheet size, panel size, panel origin function)."""
    pw = min(width, img_w)
    if crop:  # the centre at 1:1, 3/4 as high as wide
        ph = min(img_h, max(1, pw * 3 // 4))
    else:
        ph = max(1, int(math.floor(img_h * pw / img_w + 0.5)))
    cw = max(pw, 96)
    s = 2 if pw >= 190 else 1
    line = 9 * s
    title, caption = line + 8, 4 * line + 4
    rows = -(-10 // columns)
    size = (8 + columns * (cw + 8), 8 + title + rows * (ph + caption + 8))

    def origin(i):
        return 8 + (i % columns) * (cw + 8), 8 + title + (i // columns) * (ph + caption + 8)

    return size, (pw, ph), origin


class QualityTest(TempDirTest):
    def build_store(self, images):
        """images: {relative path: (PIL image, save kwargs)} -> store path."""
        src = self.path("src")
        for rel, (im, kw) in images.items():
            save_jpeg(im, os.path.join(src, rel), **kw)
        store = self.path("store")
        run([PCR, "build", src, store, "--quiet"])
        return src, store

    def compare_levels(self, levels, rel):
        """C++ vs reference for levels 1..9 against level 10 of one stored image; levels[k] is
        the store at level k (pcr_extract)."""
        ref_bytes = levels[10][rel]
        ref_path = self.path("ref.jpg")
        with open(ref_path, "wb") as f:
            f.write(ref_bytes)
        ref = decode(ref_bytes)
        worst = 0.0
        values = []
        for k in range(1, 11):
            data = levels[k][rel]
            path = self.path(f"level{k}.jpg")
            with open(path, "wb") as f:
                f.write(data)
            psnr, msssim = quality_pair(path, ref_path)
            im = decode(data)
            want_psnr = psnr_reference(im, ref)
            want_ms = ms_ssim_reference(im, ref, self)
            with self.subTest(image=rel, level=k):
                if math.isinf(want_psnr):
                    self.assertTrue(math.isinf(psnr))
                else:
                    self.assertAlmostEqual(psnr, want_psnr, delta=1e-9)
                self.assertLessEqual(abs(msssim - want_ms), TOLERANCE,
                                     f"C++ {msssim} vs reference {want_ms}")
            worst = max(worst, abs(msssim - want_ms))
            values.append(want_ms)
        self.assertEqual(values[-1], 1.0)
        self.assertLess(values[0], 0.999, f"{rel}: level 1 should lose something")
        return worst

    def test_msssim_matches_skimage_reference_on_levels(self):
        images = {
            "photo.jpg": (photo(480, 360, 11), dict(quality=90)),
            "photo444.jpg": (photo(301, 203, 12), dict(quality=95, subsampling=0)),
            "grey.jpg": (photo(256, 200, 13, "L"), dict(quality=85)),
            "cmyk.jpg": (photo(240, 180, 14, "CMYK"), dict(quality=90)),
            # 3 scales: the renormalized-weights path.
            "small.jpg": (photo(100, 80, 15), dict(quality=90)),
        }
        _, store = self.build_store(images)
        levels = {k: pcr_extract(store, k) for k in range(1, 11)}
        for rel in images:
            worst = self.compare_levels(levels, rel)
            print(f"{rel}: worst |C++ - reference| = {worst:.2e}")

    def test_independent_encodings(self):
        """Pairs that are not levels of one file: the same photo saved at two qualities."""
        for seed, (w, h) in enumerate([(512, 384), (200, 300)]):
            im = photo(w, h, 20 + seed)
            a, b = self.path(f"a{seed}.jpg"), self.path(f"b{seed}.jpg")
            im.save(a, "JPEG", quality=95)
            im.save(b, "JPEG", quality=20)
            psnr, msssim = quality_pair(a, b)
            pa, pb = decode(read(a)), decode(read(b))
            self.assertAlmostEqual(psnr, psnr_reference(pa, pb), delta=1e-9)
            self.assertLessEqual(abs(msssim - ms_ssim_reference(pa, pb, self)), TOLERANCE)
            # Symmetric, and 1 for identical inputs.
            self.assertAlmostEqual(quality_pair(b, a)[1], msssim, delta=1e-12)
            self.assertEqual(quality_pair(a, a), (math.inf, 1.0))

    def test_quality_pair_errors(self):
        a, b = self.path("a.jpg"), self.path("b.jpg")
        photo(64, 48, 1).save(a, "JPEG")
        photo(48, 64, 1).save(b, "JPEG")
        p = run([PCR, "quality-pair", a, b], check=False, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertIn("differ in size", p.stderr)
        p = run([PCR, "quality-pair", a], check=False, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertNotIn("quality-pair", run([PCR, "--help"], text=True).stdout)

    def test_store_sample(self):
        images = {f"c{i % 2}/img{i}.jpg": (photo(200 + 17 * i, 180 + 5 * i, 40 + i),
                                           dict(quality=70 + 3 * i)) for i in range(7)}
        images["c0/grey.jpg"] = (photo(190, 200, 60, "L"), dict(quality=80))
        images["c1/tiny.jpg"] = (photo(8, 8, 61), dict(quality=80))  # below 11x11: skipped
        src, store = self.build_store(images)
        with open(os.path.join(src, "notes.txt"), "w") as f:
            f.write("not an image")

        def sample(n, seed):
            lines = run([PCR, "quality-sample", store, "--sample", str(n), "--seed", str(seed)],
                        text=True).stdout.splitlines()
            skipped = int(re.search(r"skipped=(\d+)", lines[0]).group(1))
            rows = [[float(v) for v in line.split()] for line in lines[1:]]
            self.assertEqual([int(r[0]) for r in rows], list(range(1, 11)))
            return skipped, rows

        # Deterministic for a seed, whatever the thread timing.
        self.assertEqual(sample(4, 7), sample(4, 7))
        skipped, rows = sample(4, 7)
        self.assertEqual(rows[0][1] + skipped, 4)
        # Everything: the tiny one is skipped, the 8 others measured.
        skipped, rows = sample(100, 1)
        self.assertEqual((skipped, rows[0][1]), (1, 8))
        self.assertEqual(rows[9][2:5], [math.inf] * 3)
        self.assertEqual(rows[9][5:8], [1.0] * 3)
        # Against the reference, per level: mean, p5 (nearest rank: the lowest of 8) and min.
        per_level = {k: ([], []) for k in range(1, 11)}
        levels = {k: pcr_extract(store, k) for k in range(1, 11)}
        for rel in sorted(images):
            if rel == "c1/tiny.jpg":
                continue
            ref = decode(levels[10][rel])
            for k in range(1, 10):
                im = decode(levels[k][rel])
                per_level[k][0].append(psnr_reference(im, ref))
                per_level[k][1].append(ms_ssim_reference(im, ref))
        for k in range(1, 10):
            psnrs, mss = per_level[k]
            r = rows[k - 1]
            with self.subTest(level=k):
                self.assertAlmostEqual(r[2], sum(psnrs) / len(psnrs), delta=1e-9)
                self.assertAlmostEqual(r[3], min(psnrs), delta=1e-9)
                self.assertAlmostEqual(r[4], min(psnrs), delta=1e-9)
                self.assertLessEqual(abs(r[5] - sum(mss) / len(mss)), TOLERANCE)
                self.assertLessEqual(abs(r[7] - min(mss)), TOLERANCE)

    def test_ladder(self):
        im = photo(400, 300, 5)
        src, store = self.build_store({
            "cls/img.jpg": (im, dict(quality=92)),
            "cls/grey.jpg": (photo(150, 110, 6, "L"), dict(quality=85)),
        })
        with open(os.path.join(src, "x.txt"), "w") as f:
            f.write("text")
        run([PCR, "build", src, self.path("store2"), "--quiet"])
        out = self.path("ladder.png")
        p = run([PCR, "ladder", store, "cls/img.jpg", "-o", out, "--width", "200"], text=True)
        self.assertIn("2 rows x 5 columns", p.stdout)
        (sw, sh), (pw, ph), origin = ladder_geometry(400, 300, 200, 5)
        sheet = decode(read(out))
        self.assertEqual(sheet.format, "PNG")
        self.assertEqual(sheet.mode, "RGB")
        self.assertEqual(sheet.size, (sw, sh))
        self.assertEqual((pw, ph), (200, 150))
        arr = np.asarray(sheet, dtype=np.float64)

        def panel(i):
            x, y = origin(i)
            return arr[y:y + ph, x:x + pw]

        # Level 10 is the source, downscaled 2x by area averaging (= PIL's box reduce).
        full = np.asarray(decode(pcr_cat(store, "cls/img.jpg", 10)).reduce(2), dtype=np.float64)
        self.assertLess(np.abs(panel(9) - full).mean(), 1.0)
        self.assertGreater(np.abs(panel(0) - panel(9)).mean(), 0.0)
        for i in range(10):
            self.assertGreater(panel(i).std(), 10, f"panel {i + 1} looks empty")

        # --crop: the panels are the centre of each level at 1:1.
        out_crop = self.path("ladder_crop.png")
        run([PCR, "ladder", store, "cls/img.jpg", "-o", out_crop, "--width", "200", "--crop"])
        (sw, sh), (pw, ph), origin = ladder_geometry(400, 300, 200, 5, crop=True)
        crop_sheet = np.asarray(decode(read(out_crop)), dtype=np.int16)
        self.assertEqual(crop_sheet.shape[:2], (sh, sw))
        x0, y0 = (400 - pw) // 2, (300 - ph) // 2
        for i in (0, 4, 9):
            level = np.asarray(decode(pcr_cat(store, "cls/img.jpg", i + 1)).convert("RGB"),
                               dtype=np.int16)
            x, y = origin(i)
            self.assertTrue(np.array_equal(crop_sheet[y:y + ph, x:x + pw],
                                           level[y0:y0 + ph, x0:x0 + pw]), f"panel {i + 1}")
        (sw, sh), (pw, ph), origin = ladder_geometry(400, 300, 200, 5)

        # Other layouts; a grey image smaller than the panel width is not enlarged.
        out2 = self.path("ladder2.png")
        run([PCR, "ladder", store, "cls/grey.jpg", "-o", out2, "--columns", "10"])
        (sw, sh), (pw, ph), origin = ladder_geometry(150, 110, 256, 10)
        grey = decode(read(out2))
        self.assertEqual(grey.size, (sw, sh))
        grey = np.asarray(grey, dtype=np.float64)
        x, y = origin(9)
        ref = np.asarray(decode(pcr_cat(store, "cls/grey.jpg", 10)), dtype=np.float64)
        for c in range(3):
            self.assertEqual(np.abs(grey[y:y + ph, x:x + pw, c] - ref).max(), 0)

        # Errors: one line on stderr, non-zero exit, nothing written.
        for args, needle in [
            ([store, "cls/nope.jpg"], "cls/nope.jpg: no such file in the store"),
            ([self.path("nostore"), "cls/img.jpg"], "no such directory"),
            ([src, "cls/img.jpg"], "not a pcrfs store"),
            ([store, "cls"], "cls: is a directory"),
            ([self.path("store2"), "x.txt"], "stored byte for byte"),
            ([store, "cls/img.jpg", "--columns", "0"], "--columns"),
            ([store, "cls/img.jpg", "--width", "10"], "--width"),
        ]:
            bad = self.path("bad.png")
            p = run([PCR, "ladder", *args, "-o", bad], check=False, text=True)
            with self.subTest(args=args):
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertTrue(p.stderr.startswith("pcr ladder: "), p.stderr)
                self.assertFalse(os.path.exists(bad))
        p = run([PCR, "ladder", store, "cls/img.jpg"], check=False, text=True)
        self.assertEqual(p.returncode, 2)
        p = run([PCR, "ladder", store, "cls/img.jpg", "-o", self.path("no/dir/x.png")],
                check=False, text=True)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
