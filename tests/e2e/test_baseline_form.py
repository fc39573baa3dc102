#!/usr/bin/python3
"""-o form=baseline through real mounts (docs/semantics.md, "The baseline form").

A store of every variety of tests/testdata/jpeg_factory.h (grey, RGB, CMYK, YCCK, 4:4:4, 4:2:0,
4:2:2, 4:1:1, odd sizes, arithmetic and restart-marker sources, ICC/EXIF/COM), a few photos, the
hostile files (passthrough) and a text file. At levels 1, 5 and 10, through a form=baseline mount:
  - os.stat's size, taken before any read, is the length of the bytes read;
  - a JPEG is a sequential JPEG (SOF0 or SOF1, no SOF2) that PIL decodes, with exactly the
    coefficients of the progressive level served by a default mount (jpeg_coef_hash on both),
    and the same APPn/COM segments;
  - a passthrough file is byte for byte what the default mount serves;
  - listing folders transcodes nothing (the root's user.pcrfs.baseline counts transcodes);
  - a damaged piece gives EIO for exactly the files and levels that need it, at stat and at
    read, and the daemon keeps running;
  - with -o disk_cache, a remount with the same cache_dir serves sizes (in stat and listings)
    and bytes with no transcode, byte for byte the first mount's, from a few segment files;
    a transcoded file damaged on disk is detected, transcoded again and served exact.
"""

import errno
import io
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

from PIL import Image

from pcrtest import MAKE_TEST_JPEGS, PCR, Mount, photo, run, save_jpeg

JPEG_COEF_HASH = os.environ.get("JPEG_COEF_HASH", "jpeg_coef_hash")
LEVELS = (1, 5, 10)
WORK = SRC = STORE = None
FILES = []        # dataset paths
PASSTHROUGH = {}  # path -> bool
PROGRESSIVE = {}  # (path, level) -> bytes served by a default mount


def setUpModule():
    global WORK, SRC, STORE
    if not os.path.exists("/dev/fuse"):
        raise unittest.SkipTest("/dev/fuse is missing")
    WORK = tempfile.mkdtemp(prefix="pcrfs-baseline-")
    SRC = os.path.join(WORK, "src")
    os.makedirs(SRC)
    run([MAKE_TEST_JPEGS, os.path.join(SRC, "factory"), "--hostile"])
    for i in range(6):
        save_jpeg(photo(160 + 9 * i, 120 + 5 * i, 700 + i, "L" if i == 4 else "RGB"),
                  os.path.join(SRC, "photos", f"p{i}.jpg"), quality=75 + 4 * i,
                  subsampling=i % 3, progressive=(i == 2))
    with open(os.path.join(SRC, "photos", "notes.txt"), "w") as f:
        f.write("passthrough text\n" * 30)
    STORE = os.path.join(WORK, "store")
    run([PCR, "build", SRC, STORE, "--quiet", "--images-per-record", "8", "--quality-sample", "0"])
    for dirpath, _, names in os.walk(SRC):
        for n in names:
            FILES.append(os.path.relpath(os.path.join(dirpath, n), SRC))
    FILES.sort()
    with Mount(STORE, os.path.join(WORK, "mnt-progressive")) as m:
        for rel in FILES:
            p1 = os.path.join(m.mnt, "scan1", rel)
            PASSTHROUGH[rel] = os.getxattr(p1, "user.pcrfs.passthrough") == b"1"
            for k in LEVELS:
                with open(os.path.join(m.mnt, f"scan{k}", rel), "rb") as f:
                    PROGRESSIVE[(rel, k)] = f.read()
    assert sum(PASSTHROUGH.values()) >= 6 and not all(PASSTHROUGH.values()), PASSTHROUGH


def tearDownModule():
    if WORK:
        shutil.rmtree(WORK, ignore_errors=True)


def segments(data):
    """The marker segments before the first SOS: [(marker, payload)]."""
    out, i = [], 2
    while i + 4 <= len(data) and data[i] == 0xFF and data[i + 1] != 0xDA:
        length = struct.unpack_from(">H", data, i + 2)[0]
        out.append((data[i + 1], data[i + 4:i + 2 + length]))
        i += 2 + length
    return out


def metadata(data):
    return [(m, p) for m, p in segments(data) if 0xE0 <= m <= 0xEF or m == 0xFE]


def coef_hashes(paths):
    """{path: (hash, 'SOFn')} by jpeg_coef_hash, one run for all."""
    p = run([JPEG_COEF_HASH, *paths], text=True)
    out = {}
    for line in p.stdout.splitlines():
        h, sof, path = line.split(" ", 2)
        out[path] = (h, sof)
    return out


def baseline_stats(mnt):
    return json.loads(os.getxattr(mnt, "user.pcrfs.baseline"))


class BaselineFormTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="t-", dir=WORK)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_sizes_forms_and_coefficients(self):
        served = {}
        with Mount(STORE, os.path.join(self.tmp, "mnt"), "-o", "form=baseline") as m:
            self.assertEqual(baseline_stats(m.mnt)["transcoded"], 0)
            for rel in FILES:
                for k in LEVELS:
                    p = os.path.join(m.mnt, f"scan{k}", rel)
                    size = os.stat(p).st_size  # before any read of this file
                    with open(p, "rb") as f:
                        data = f.read()
                    self.assertEqual(size, len(data), f"{rel} scan{k}")
                    self.assertEqual(os.stat(p).st_size, size)
                    served[(rel, k)] = data
            stats = baseline_stats(m.mnt)
            jpegs = sum(1 for rel in FILES if not PASSTHROUGH[rel]) * len(LEVELS)
            self.assertEqual(stats["transcoded"], jpegs, stats)
            self.assertEqual(stats["failed"], 0, stats)
            self.assertIsNone(m.proc.poll())

        pairs = []
        for (rel, k), data in sorted(served.items()):
            with self.subTest(file=rel, level=k):
                progressive = PROGRESSIVE[(rel, k)]
                if PASSTHROUGH[rel]:
                    self.assertEqual(data, progressive)
                    continue
                markers = [m for m, _ in segments(data)]
                self.assertTrue(0xC0 in markers or 0xC1 in markers, markers)
                self.assertNotIn(0xC2, markers)
                self.assertNotIn(b"\xff\xc2", data[:data.find(b"\xff\xda")])
                self.assertEqual(metadata(data), metadata(progressive))
                Image.open(io.BytesIO(data)).load()
                a = os.path.join(self.tmp, f"{len(pairs)}.progressive.jpg")
                b = os.path.join(self.tmp, f"{len(pairs)}.baseline.jpg")
                for path, blob in ((a, progressive), (b, data)):
                    with open(path, "wb") as f:
                        f.write(blob)
                pairs.append((rel, k, a, b))
        hashes = coef_hashes([p for _, _, a, b in pairs for p in (a, b)])
        distinct = set()
        for rel, k, a, b in pairs:
            with self.subTest(file=rel, level=k):
                self.assertEqual(hashes[a][0], hashes[b][0])
                self.assertEqual(hashes[a][1], "SOF2")
                self.assertIn(hashes[b][1], ("SOF0", "SOF1"))
                distinct.add(hashes[a][0])
        # The hashes tell levels apart (the comparison is not vacuous).
        self.assertGreater(len(distinct), len(pairs) * 2 // 3)

    def test_listing_transcodes_nothing(self):
        with Mount(STORE, os.path.join(self.tmp, "mnt"), "-o", "form=baseline") as m:
            names = 0
            for k in LEVELS:
                for dirpath, dirs, files in os.walk(os.path.join(m.mnt, f"scan{k}")):
                    for entry in os.scandir(dirpath):
                        entry.is_file()
                        names += 1
            self.assertGreater(names, len(FILES) * len(LEVELS))
            self.assertEqual(baseline_stats(m.mnt)["transcoded"], 0)
            p = os.path.join(m.mnt, "scan5", "factory", "rgb.jpg")
            size = os.stat(p).st_size
            self.assertEqual(baseline_stats(m.mnt)["transcoded"], 1)
            # Listed again, the known size comes with the listing; stat and read need no
            # second transcode.
            self.assertIn("rgb.jpg", os.listdir(os.path.dirname(p)))
            os.stat(p)
            with open(p, "rb") as f:
                self.assertEqual(len(f.read()), size)
            stats = baseline_stats(m.mnt)
            self.assertEqual(stats["transcoded"], 1, stats)
            self.assertGreaterEqual(stats["hits"], 1, stats)
            # A passthrough file costs no transcode either.
            with open(os.path.join(m.mnt, "scan5", "photos", "notes.txt"), "rb") as f:
                f.read()
            self.assertEqual(baseline_stats(m.mnt)["transcoded"], 1)

    def test_damaged_piece_gives_eio_for_the_files_that_need_it(self):
        from test_corruption import record_layout
        store = os.path.join(self.tmp, "store")
        shutil.copytree(STORE, store, symlinks=True)
        records = sorted(os.listdir(os.path.join(store, "records")))
        victim = None
        for name in records:
            path = os.path.join(store, "records", name)
            with open(path, "rb") as f:
                data = bytearray(f.read())
            for img in record_layout(bytes(data))["images"]:
                off, length = img["pieces"][1]  # group 2: levels >= 2 need it
                if img["kind"] == 2 and length > 16:
                    data[off + length // 2] ^= 0x40
                    with open(path, "wb") as f:
                        f.write(data)
                    victim = img["path"]
                    break
            if victim:
                break
        self.assertIsNotNone(victim)
        with Mount(store, os.path.join(self.tmp, "mnt"), "-o", "form=baseline") as m:
            for rel in FILES:
                for k in LEVELS:
                    p = os.path.join(m.mnt, f"scan{k}", rel)
                    with self.subTest(file=rel, level=k):
                        if rel == victim and k >= 2:
                            with self.assertRaises(OSError) as cm:
                                os.stat(p)
                            self.assertEqual(cm.exception.errno, errno.EIO)
                            with self.assertRaises(OSError) as cm:
                                with open(p, "rb") as f:
                                    f.read()
                            self.assertEqual(cm.exception.errno, errno.EIO)
                        else:
                            size = os.stat(p).st_size
                            with open(p, "rb") as f:
                                self.assertEqual(len(f.read()), size)
            self.assertIsNone(m.proc.poll(), "the daemon keeps running")
            stats = baseline_stats(m.mnt)
            self.assertGreaterEqual(stats["failed"], 2, stats)
            log = m.log()
        lines = [l for l in log.splitlines() if "damaged data:" in l]
        self.assertEqual(len(lines), 1, log)
        self.assertIn(f'"{victim}"', lines[0])

    def test_disk_cache_serves_a_remount_without_transcoding(self):
        cache = os.path.join(self.tmp, "cache")
        opts = ("-o", f"form=baseline,disk_cache=64M,cache_dir={cache}")
        jpegs = [(rel, k) for rel in FILES if not PASSTHROUGH[rel] for k in LEVELS]

        def read_all(mnt):
            sizes, data = {}, {}
            for rel in FILES:
                for k in LEVELS:
                    p = os.path.join(mnt, f"scan{k}", rel)
                    sizes[(rel, k)] = os.stat(p).st_size  # before any read of this file
                    with open(p, "rb") as f:
                        data[(rel, k)] = f.read()
            return sizes, data

        with Mount(STORE, os.path.join(self.tmp, "mnt1"), *opts) as m:
            sizes, first = read_all(m.mnt)
            stats = baseline_stats(m.mnt)
        self.assertEqual(stats["transcoded"], len(jpegs), stats)
        self.assertEqual(stats["disk"]["written"], len(jpegs), stats)
        for key in jpegs:
            self.assertEqual(sizes[key], len(first[key]))
            self.assertEqual(first[key], self.served_by_plain_mount(key))
        # Packed: a segment and its index for all of them, not a file per JPEG.
        (folder,) = os.listdir(os.path.join(cache, "baseline"))
        folder = os.path.join(cache, "baseline", folder)
        names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
        self.assertEqual([n[-4:] for n in names], [".idx", ".seg"], names)

        with Mount(STORE, os.path.join(self.tmp, "mnt2"), *opts) as m:
            # The sizes are the disk tier's: a listing and its stats transcode nothing.
            listed = {e.name: e.stat().st_size
                      for e in os.scandir(os.path.join(m.mnt, "scan5", "factory"))}
            for rel in FILES:
                name = rel[len("factory/"):]
                if rel.startswith("factory/") and "/" not in name and not PASSTHROUGH[rel]:
                    self.assertEqual(listed[name], sizes[(rel, 5)], rel)
            self.assertEqual(baseline_stats(m.mnt)["transcoded"], 0)
            again_sizes, again = read_all(m.mnt)
            stats = baseline_stats(m.mnt)
        self.assertEqual(again_sizes, sizes)
        self.assertEqual(again, first)
        self.assertEqual(stats["transcoded"], 0, stats)
        self.assertEqual(stats["disk"]["adopted"], len(jpegs), stats)
        self.assertEqual(stats["disk"]["hits"], len(jpegs), stats)
        self.assertEqual(stats["disk"]["damaged"], 0, stats)

        # One file's bytes damaged on disk: found by its checksum, transcoded again.
        seg = os.path.join(folder, names[1])
        with open(os.path.join(folder, names[0]), "rb") as f:
            key, offset, length = struct.unpack_from("<QQI", f.read(32))
        with open(seg, "r+b") as f:
            f.seek(offset + length // 2)
            b = f.read(1)
            f.seek(offset + length // 2)
            f.write(bytes([b[0] ^ 0x08]))
        for mnt in ("mnt3", "mnt4"):
            with Mount(STORE, os.path.join(self.tmp, mnt), *opts) as m:
                again_sizes, again = read_all(m.mnt)
                stats = baseline_stats(m.mnt)
            self.assertEqual(again_sizes, sizes)
            self.assertEqual(again, first)
            if mnt == "mnt3":
                self.assertEqual(stats["transcoded"], 1, stats)
                self.assertEqual(stats["disk"]["damaged"], 1, stats)
                self.assertEqual(stats["disk"]["written"], 1, stats)
            else:  # the copy made again was kept
                self.assertEqual(stats["transcoded"], 0, stats)
                self.assertEqual(stats["disk"]["damaged"], 0, stats)

    def served_by_plain_mount(self, key):
        """What a form=baseline mount without a disk cache serves (the memory-only path)."""
        if not hasattr(BaselineFormTest, "_plain"):
            with Mount(STORE, os.path.join(WORK, "mnt-plain"), "-o", "form=baseline") as m:
                BaselineFormTest._plain = {}
                for rel in FILES:
                    for k in LEVELS:
                        with open(os.path.join(m.mnt, f"scan{k}", rel), "rb") as f:
                            BaselineFormTest._plain[(rel, k)] = f.read()
        return BaselineFormTest._plain[key]


if __name__ == "__main__":
    unittest.main()
