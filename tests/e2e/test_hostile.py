#!/usr/bin/python3
"""Hostile images at build time (docs/design.md, "Hostile input").

A store is built from a folder of normal JPEGs and hostile files: scan bombs, a huge declared
size, a truncated JPEG, random bytes, a zero-byte file, trailing garbage, a PNG named .JPEG.
The build must exit 0, store each hostile file byte for byte with its reason (build report and
manifest), and serve every file back exactly. The scan bombs and the huge declared size, each
built alone, must stay within 2 s and 256 MiB.
"""

import io
import json
import os
import re
import shutil
import struct
import subprocess
import unittest

from PIL import Image

from pcrtest import PCR, TempDirTest, pcr_extract, photo, pil_pixels, run

MAX_SECONDS = 2.0
MAX_RSS_KIB = 256 * 1024
TIME = "/usr/bin/time"


def jpeg_bytes(im, **kw):
    b = io.BytesIO()
    im.save(b, "JPEG", **kw)
    return b.getvalue()


def segments(data):
    """[(marker, start, end)] of a JPEG's marker segments; an SOS's end includes its scan data."""
    out, i = [], 2
    while i < len(data):
        assert data[i] == 0xFF, f"no marker at {i}"
        m = data[i + 1]
        if m == 0xD9:
            out.append((m, i, i + 2))
            break
        end = i + 2 + struct.unpack(">H", data[i + 2:i + 4])[0]
        if m == 0xDA:  # entropy data ends at the first marker that is not FF00 or RSTn
            while not (data[end] == 0xFF and data[end + 1] != 0 and
                       not 0xD0 <= data[end + 1] <= 0xD7):
                end += 1
        out.append((m, i, end))
        i = end
    return out


def bits_to_bytes(bits):
    bits += "1" * (-len(bits) % 8)
    out = bytearray()
    for k in range(0, len(bits), 8):
        out.append(int(bits[k:k + 8], 2))
        if out[-1] == 0xFF:
            out.append(0)  # byte stuffing
    return bytes(out)


def scan_bomb(scans, size):
    """A progressive size x size JPEG followed by `scans` more luma AC scans (Ss 1, Se 63, Ah 0,
    Al 0) before EOI. Each is a DHT and an SOS whose data is a few EOB runs (up to 32767 blocks per
    Huffman symbol), so the file is small but every scan makes libjpeg visit every luma block.
    libjpeg accepts the repeats without a warning (Ah 0 is what it expects once the coefficients
    are complete): only a cap on scans, or on the work they cause, stops it."""
    src = jpeg_bytes(photo(size, size, 1), quality=85, progressive=True)
    eoi = segments(src)[-1][1]
    blocks = ((size + 7) // 8) ** 2  # luma of 4:2:0 is full size; a lone component's blocks
    runs = []
    while blocks:
        run_len = min(blocks, 32767)
        r = min(run_len.bit_length() - 1, 14)
        runs.append((r, run_len - (1 << r)))
        blocks -= run_len
    symbols = sorted({r for r, _ in runs})
    code_len = max(1, len(symbols).bit_length())  # no code may be all ones
    counts = [0] * 16
    counts[code_len - 1] = len(symbols)
    dht = (b"\xff\xc4" + struct.pack(">H", 2 + 17 + len(symbols)) + b"\x11" + bytes(counts) +
           bytes(r << 4 for r in symbols))
    bits = "".join(format(symbols.index(r), f"0{code_len}b") + (format(x, f"0{r}b") if r else "")
                   for r, x in runs)
    sos = bytes([0xFF, 0xDA, 0, 8, 1, 1, 0x01, 1, 63, 0x00])
    return src[:eoi] + (dht + sos + bits_to_bytes(bits)) * scans + src[eoi:]


def refinement_bomb(scans):
    """A progressive JPEG whose last scan (an AC refinement, with the DHT before it) is repeated
    `scans` times before EOI, as the known libjpeg scan-bomb files are built."""
    src = jpeg_bytes(photo(48, 32, 2), quality=85, progressive=True)
    segs = segments(src)
    k = max(i for i, s in enumerate(segs) if s[0] == 0xDA)
    first = k
    while segs[first - 1][0] == 0xC4:
        first -= 1
    eoi = segs[-1][1]
    return src[:eoi] + src[segs[first][1]:segs[k][2]] * scans + src[eoi:]


def huge_declared(width, height):
    """A small baseline JPEG whose SOF says width x height: a few KB claiming gigapixels."""
    data = bytearray(jpeg_bytes(photo(64, 64, 3), quality=85))
    for m, s, _ in segments(bytes(data)):
        if m == 0xC0:
            data[s + 5:s + 9] = struct.pack(">HH", height, width)
            return bytes(data)
    raise AssertionError("no SOF0")


def png_bytes():
    b = io.BytesIO()
    photo(40, 30, 4).save(b, "PNG")
    return b.getvalue()


class HostileBuildTest(TempDirTest):
    def setUp(self):
        super().setUp()
        self.src = self.path("src")
        os.makedirs(os.path.join(self.src, "normal"))
        os.makedirs(os.path.join(self.src, "hostile"))
        good = jpeg_bytes(photo(320, 240, 5), quality=90)
        self.normal = {
            "normal/baseline.jpg": good,
            "normal/progressive.jpg": jpeg_bytes(photo(200, 150, 6), quality=80, progressive=True),
            "normal/grey.jpg": jpeg_bytes(photo(97, 61, 7, "L"), quality=75),
        }
        # name -> (bytes, reasons it may be stored with; None: transcoded)
        self.hostile = {
            "hostile/scan_bomb.jpg": (scan_bomb(10000, 512), {"too-many-scans"}),
            "hostile/scan_bomb_large.jpg": (scan_bomb(10000, 4096), {"too-many-scans"}),
            # libjpeg stops at the second copy: "Inconsistent progression sequence".
            "hostile/scan_bomb_refinement.jpg": (refinement_bomb(10000),
                                                 {"corrupt", "too-many-scans"}),
            "hostile/huge_declared.jpg": (huge_declared(65000, 65000), {"too-large"}),
            "hostile/truncated.jpg": (good[:len(good) // 2], {"truncated"}),
            "hostile/random.jpg": (os.urandom(5000), {"not-jpeg"}),
            "hostile/random_soi.jpg": (b"\xff\xd8\xff" + os.urandom(5000),
                                       {"corrupt", "truncated", "unsupported"}),
            "hostile/zero.jpg": (b"", {"empty"}),
            "hostile/trailing.jpg": (good + b"trailing garbage" * 10, {"trailing-data"}),
            "hostile/png.JPEG": (png_bytes(), {"not-jpeg"}),
        }
        self.assertGreater(len(self.hostile["hostile/scan_bomb.jpg"][0]), 10000 * 10)
        for rel, data in list(self.normal.items()) + [(r, d) for r, (d, _) in
                                                      self.hostile.items()]:
            with open(os.path.join(self.src, rel), "wb") as f:
                f.write(data)

    def build(self, src, store, *extra):
        p = run([PCR, "build", src, store, "--quiet", *extra], check=False, text=True)
        self.assertEqual(p.returncode, 0, f"pcr build exited {p.returncode}:\n{p.stdout}\n"
                                          f"{p.stderr}")
        return p.stdout

    def test_hostile_files_are_stored_byte_for_byte_with_their_reason(self):
        store = self.path("store")
        report = self.build(self.src, store, "-j", "2")
        with open(os.path.join(store, "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual(manifest["num_jpeg"], len(self.normal), report)
        self.assertEqual(manifest["num_passthrough"], len(self.hostile), report)
        # The report names every JPEG-like passthrough file with its reason.
        listed = dict(re.findall(r"^    (hostile/\S+): ([a-z-]+): ", report, re.M))
        levels = {k: pcr_extract(store, k) for k in (1, 5, 10)}
        by_reason = {}
        for rel, (data, reasons) in self.hostile.items():
            with self.subTest(file=rel):
                if data[:3] == b"\xff\xd8\xff":
                    self.assertIn(rel, listed, report)
                    self.assertIn(listed[rel], reasons, report)
                    reason = listed[rel]
                else:
                    reason, = reasons
                by_reason[reason] = by_reason.get(reason, 0) + 1
                for k in (1, 5, 10):
                    self.assertEqual(levels[k][rel], data, f"{rel} level {k}")
        self.assertEqual(manifest["passthrough_by_reason"], by_reason)
        for rel, data in self.normal.items():
            with self.subTest(file=rel):
                self.assertEqual(pil_pixels(levels[10][rel]), pil_pixels(data))
                level1 = levels[1][rel]
                self.assertEqual(Image.open(io.BytesIO(level1)).size,
                                 Image.open(io.BytesIO(data)).size)
        run([PCR, "verify", store, "--source", self.src])

    @unittest.skipUnless(os.access(TIME, os.X_OK), "needs GNU time (Debian package time)")
    def test_bombs_alone_stay_within_time_and_memory(self):
        for rel in ("hostile/scan_bomb.jpg", "hostile/scan_bomb_large.jpg",
                    "hostile/scan_bomb_refinement.jpg", "hostile/huge_declared.jpg"):
            with self.subTest(file=rel):
                one = self.path("one", os.path.basename(rel))
                os.makedirs(one)
                shutil.copy(os.path.join(self.src, rel), one)
                store = one + ".store"
                p = run([TIME, "-f", "TIME %e %U %S %M", PCR, "build", one, store, "--quiet",
                         "--threads", "1", "--quality-sample", "0"], text=True)
                wall, user, sys_, rss_kib = re.search(r"^TIME (\S+) (\S+) (\S+) (\d+)$",
                                                      p.stderr, re.M).groups()
                # The bound is on the work done (CPU seconds): wall time on a shared 2-core
                # machine running other tests in parallel says more about the neighbours.
                cpu = float(user) + float(sys_)
                print(f"{rel}: {cpu:.2f} CPU s ({wall} s wall), {int(rss_kib) // 1024} MiB peak RSS")
                self.assertLessEqual(cpu, MAX_SECONDS, rel)
                self.assertLessEqual(int(rss_kib), MAX_RSS_KIB, rel)
                self.assertIn(os.path.basename(rel) + ": ", p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
