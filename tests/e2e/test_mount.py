#!/usr/bin/python3
"""End-to-end checks of the pcrfs daemon through real FUSE mounts."""

import errno
import fcntl
import hashlib
import io
import os
import random
import shutil
import signal
import stat
import subprocess
import termios
import threading
import time
import unittest

from PIL import Image

from pcrtest import (EOI, MAKE_TEST_JPEGS, PCR, PCRFS, Mount, djpeg_clean, is_mounted,
                     make_messy_tree, pcr_cat, pcr_extract, photo, pil_pixels, run, save_jpeg)

import tempfile

WORK = None   # shared source + store for the read-only tests
SRC = STORE = None


def setUpModule():
    global WORK, SRC, STORE
    if not os.path.exists("/dev/fuse"):
        raise unittest.SkipTest("/dev/fuse is missing")
    WORK = tempfile.mkdtemp(prefix="pcrfs-mount-")
    SRC = os.path.join(WORK, "src")
    make_messy_tree(SRC)
    run([MAKE_TEST_JPEGS, os.path.join(SRC, "varieties")])
    for split in ("train", "val"):
        for c in range(3):
            for i in range(6):
                save_jpeg(photo(120 + 7 * i, 90 + 5 * c, 100 * c + i + (split == "val") * 50),
                          os.path.join(SRC, "imagefolder", split, f"class{c}", f"{i}.jpg"),
                          quality=80 + i)
    STORE = os.path.join(WORK, "store")
    run([PCR, "build", SRC, STORE, "--quiet", "--images-per-record", "16", "--quality-sample", "0"])


def tearDownModule():
    if WORK:
        shutil.rmtree(WORK, ignore_errors=True)


def source_files():
    out = []
    for dirpath, dirnames, filenames in os.walk(SRC):
        for n in filenames:
            out.append(os.path.relpath(os.path.join(dirpath, n), SRC))
    return sorted(out)


def is_clean_jpeg(rel):
    data = open(os.path.join(SRC, rel), "rb").read()
    try:
        return (Image.open(io.BytesIO(data)).format == "JPEG" and djpeg_clean(data) == (0, "")
                and not data.endswith(b"GARBAGE AFTER EOI"))
    except Exception:
        return False


def walk_tree(root):
    """{relative path: 'd' or 'f'} under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames:
            out[os.path.relpath(os.path.join(dirpath, n), root)] = "d"
        for n in filenames:
            out[os.path.relpath(os.path.join(dirpath, n), root)] = "f"
    return out


class MountTest(unittest.TestCase):
    def setUp(self):
        self.mnt = tempfile.mkdtemp(prefix="pcrfs-mnt-")

    def tearDown(self):
        shutil.rmtree(self.mnt, ignore_errors=True)

    def test_tree_at_every_level_equals_source(self):
        expected = walk_tree(SRC)
        with Mount(STORE, self.mnt):
            self.assertEqual(sorted(os.listdir(self.mnt)), sorted(f"scan{k}" for k in range(1, 11)))
            for k in range(1, 11):
                self.assertEqual(walk_tree(os.path.join(self.mnt, f"scan{k}")), expected, f"scan{k}")
            # Name order straight from readdir (no sorting by the caller).
            names = os.listdir(os.path.join(self.mnt, "scan2", "train"))
            self.assertEqual(names, sorted(names, key=lambda s: s.encode()))

    def test_attributes(self):
        with Mount(STORE, self.mnt, "-o", "uid=1234,gid=4321"):
            root = os.path.join(self.mnt, "scan4")
            for rel, kind in walk_tree(SRC).items():
                st = os.stat(os.path.join(root, rel))
                src = os.stat(os.path.join(SRC, rel))
                self.assertEqual((st.st_uid, st.st_gid), (1234, 4321))
                self.assertEqual(st.st_mtime_ns, src.st_mtime_ns, rel)
                if kind == "d":
                    self.assertEqual(stat.S_IMODE(st.st_mode), 0o755)
                    self.assertTrue(stat.S_ISDIR(st.st_mode))
                    subdirs = sum(1 for e in os.scandir(os.path.join(SRC, rel)) if e.is_dir())
                    self.assertEqual(st.st_nlink, 2 + subdirs, rel)
                else:
                    self.assertEqual(stat.S_IMODE(st.st_mode), 0o444)
                    self.assertEqual(st.st_nlink, 1)
                    self.assertGreaterEqual(st.st_blksize, 128 * 1024)
                    self.assertEqual(st.st_blocks, (st.st_size + 511) // 512)
            # Each level has its own inode numbers.
            a = os.stat(os.path.join(self.mnt, "scan1", "top level.jpg")).st_ino
            b = os.stat(os.path.join(self.mnt, "scan2", "top level.jpg")).st_ino
            self.assertNotEqual(a, b)
            sv = os.statvfs(self.mnt)
            self.assertTrue(sv.f_flag & os.ST_RDONLY)
            self.assertEqual(sv.f_namemax, 255)
            # xattrs
            p = os.path.join(self.mnt, "scan3", "top level.jpg")
            self.assertEqual(os.getxattr(p, "user.pcrfs.level"), b"3")
            self.assertEqual(os.getxattr(p, "user.pcrfs.passthrough"), b"0")
            full = int(os.getxattr(p, "user.pcrfs.full_size"))
            self.assertEqual(full, os.stat(os.path.join(self.mnt, "scan10", "top level.jpg")).st_size)
            self.assertEqual(int(os.getxattr(p, "user.pcrfs.source_size")),
                             os.path.getsize(os.path.join(SRC, "top level.jpg")))
            q = os.path.join(self.mnt, "scan3", "labels.csv")
            self.assertEqual(os.getxattr(q, "user.pcrfs.passthrough"), b"1")
            self.assertEqual(os.getxattr(q, "user.pcrfs.passthrough_reason"), b"not-jpeg")
            self.assertIn("user.pcrfs.level", os.listxattr(p))
            self.assertTrue(
                os.getxattr(self.mnt, "user.pcrfs.prefetch").startswith(b"speculative reads: "))
            with self.assertRaises(OSError) as cm:
                os.getxattr(p, "user.pcrfs.nonsense")
            self.assertEqual(cm.exception.errno, errno.ENODATA)

    def test_bytes_at_every_level(self):
        rng = random.Random(7)
        levels = {k: pcr_extract(STORE, k) for k in range(1, 11)}
        with Mount(STORE, self.mnt):
            for rel in source_files():
                src = open(os.path.join(SRC, rel), "rb").read()
                clean = is_clean_jpeg(rel)
                prev = 0
                for k in range(1, 11):
                    p = os.path.join(self.mnt, f"scan{k}", rel)
                    data = open(p, "rb").read()
                    self.assertEqual(os.stat(p).st_size, len(data), f"{rel} scan{k}")
                    self.assertEqual(data, levels[k][rel], f"{rel} scan{k} vs pcr extract")
                    if not clean:
                        self.assertEqual(data, src, f"passthrough {rel} differs at scan{k}")
                        continue
                    self.assertTrue(data.endswith(EOI))
                    self.assertGreaterEqual(len(data), prev)
                    prev = len(data)
                    # Random-offset reads equal slices of the whole file, past EOF too.
                    with open(p, "rb", buffering=0) as f:
                        for _ in range(5):
                            off = rng.randrange(0, len(data) + 100)
                            n = rng.randrange(1, 70000)
                            f.seek(off)
                            self.assertEqual(f.read(n), data[off:off + n])
                if clean:
                    self.assertEqual(pil_pixels(open(os.path.join(self.mnt, "scan10", rel), "rb").read()),
                                     pil_pixels(src), f"{rel}: scan10 pixels differ from source")

    def test_every_level_decodes_with_pil_opencv_torchvision(self):
        files = [f for f in source_files() if is_clean_jpeg(f)]
        with Mount(STORE, self.mnt):
            paths = [os.path.join(self.mnt, f"scan{k}", f) for k in range(1, 11) for f in files]
            script = (
                "import sys, warnings\n"
                "warnings.simplefilter('error')\n"
                "import cv2, numpy, torch, torchvision.io as tio\n"
                "from PIL import Image\n"
                "for p in sys.stdin.read().split('\\0'):\n"
                "    with Image.open(p) as im:\n"
                "        im.load()\n"
                "        mode = im.mode\n"
                "    img = cv2.imread(p, cv2.IMREAD_UNCHANGED)\n"
                "    assert img is not None and img.size > 0, p\n"
                "    data = tio.read_file(p)\n"
                "    t = tio.decode_jpeg(data) if mode in ('L', 'RGB') else None\n"
                "    assert t is None or t.numel() > 0, p\n"
                "print(len(sys.argv), 'ok')\n")
            p = subprocess.run(["/usr/bin/python3", "-c", script], input="\0".join(paths),
                               text=True, capture_output=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr[-3000:])
            self.assertEqual(p.stderr.strip(), "", "a decoder warned:\n" + p.stderr[-3000:])

    def test_fixed_level_serves_same_bytes(self):
        files = source_files()
        with Mount(STORE, self.mnt, "-o", "scans=3"):
            self.assertEqual(walk_tree(self.mnt), walk_tree(SRC))
            fixed = {f: open(os.path.join(self.mnt, f), "rb").read() for f in files}
            self.assertEqual(os.getxattr(os.path.join(self.mnt, files[0]), "user.pcrfs.level"), b"3")
        with Mount(STORE, self.mnt):
            for f in files:
                self.assertEqual(fixed[f], open(os.path.join(self.mnt, "scan3", f), "rb").read(), f)

    def test_listing_modes(self):
        # readdirplus=yes answers listings with attributes (READDIRPLUS requests), no with plain
        # READDIR; auto leaves it to the kernel. The tree and the bytes are the same in all.
        files = source_files()
        level10 = pcr_extract(STORE, 10)
        for mode, plus in (("yes", True), ("no", False), ("auto", None)):
            with self.subTest(mode=mode), Mount(STORE, self.mnt, "-d", "-o",
                                                f"readdirplus={mode}") as m:
                self.assertEqual(walk_tree(os.path.join(self.mnt, "scan7")), walk_tree(SRC))
                for f in files[:20]:
                    self.assertEqual(open(os.path.join(self.mnt, "scan10", f), "rb").read(),
                                     level10[f], f)
                log = m.log()
                self.assertIn("opcode: READDIR", log)
                if plus is not None:
                    self.assertEqual("opcode: READDIRPLUS" in log, plus, mode)

    def test_index_pages_released_constantly(self):
        # index_rss=1: the daemon unmaps its index pages every 16 index calls, whatever it is
        # doing.
        files = source_files()
        level4 = pcr_extract(STORE, 4)
        with Mount(STORE, self.mnt, "-o", "index_rss=1,scans=4"):
            for round in range(3):
                self.assertEqual(walk_tree(self.mnt), walk_tree(SRC))
                for f in files:
                    self.assertEqual(open(os.path.join(self.mnt, f), "rb").read(), level4[f], f)
                time.sleep(0.25)

    def test_speculation_serves_the_same_bytes(self):
        # prefetch=1: a folder is fetched after its first two files; readahead=1: a walk
        # fetches one file ahead. With and without speculative reads, reads must be exact.
        # The retired options are accepted with a note, so old fstab lines still mount.
        files = source_files()
        level3 = pcr_extract(STORE, 3)
        for opts in ("prefetch=1,readahead=1", "prefetch=0,readahead=0",
                     "prefetch=100,readahead=64,prefetch_chunk=1M,prefetch_probe=0"):
            with self.subTest(opts=opts), Mount(STORE, self.mnt, "-o", opts + ",scans=3") as m:
                for f in files:
                    self.assertEqual(open(os.path.join(self.mnt, f), "rb").read(), level3[f], f)
                if "probe" in opts:
                    self.assertIn("no longer used", m.log())

    def test_ioctl_is_enotty(self):
        # isatty() (which Python's open() calls) and any other ioctl get ENOTTY, on files and
        # folders; the bytes read afterwards are unaffected.
        with Mount(STORE, self.mnt, "-o", "scans=2"):
            f = os.path.join(self.mnt, "top level.jpg")
            fd = os.open(f, os.O_RDONLY)
            try:
                self.assertFalse(os.isatty(fd))
                for req in (termios.TCGETS, termios.TIOCGWINSZ):
                    with self.assertRaises(OSError) as cm:
                        fcntl.ioctl(fd, req, b"\0" * 64)
                    self.assertEqual(cm.exception.errno, errno.ENOTTY)
            finally:
                os.close(fd)
            dfd = os.open(self.mnt, os.O_RDONLY | os.O_DIRECTORY)
            try:
                self.assertFalse(os.isatty(dfd))
            finally:
                os.close(dfd)
            self.assertEqual(open(f, "rb").read(), pcr_cat(STORE, "top level.jpg", 2))

    def test_read_only(self):
        with Mount(STORE, self.mnt):
            root = os.path.join(self.mnt, "scan5")
            f = os.path.join(root, "top level.jpg")
            attempts = [
                lambda: open(f, "r+b"),
                lambda: open(f, "ab"),
                lambda: open(os.path.join(root, "new.jpg"), "wb"),
                lambda: os.mkdir(os.path.join(root, "newdir")),
                lambda: os.rename(f, os.path.join(root, "renamed.jpg")),
                lambda: os.unlink(f),
                lambda: os.rmdir(os.path.join(root, "empty", "also empty")),
                lambda: os.chmod(f, 0o777),
                lambda: os.truncate(f, 0),
                lambda: os.symlink("x", os.path.join(root, "link")),
                lambda: os.setxattr(f, "user.x", b"1"),
                lambda: os.utime(f, (0, 0)),
            ]
            for i, attempt in enumerate(attempts):
                with self.assertRaises(OSError, msg=f"attempt {i}") as cm:
                    attempt()
                self.assertEqual(cm.exception.errno, errno.EROFS, f"attempt {i}: {cm.exception}")
            for path, err in [(os.path.join(root, "missing.jpg"), errno.ENOENT),
                              (os.path.join(root, "top level.jpg", "x"), errno.ENOTDIR)]:
                with self.assertRaises(OSError) as cm:
                    os.stat(path)
                self.assertEqual(cm.exception.errno, err)
            with self.assertRaises(OSError) as cm:
                open(os.path.join(root, "train"), "rb").read()
            self.assertEqual(cm.exception.errno, errno.EISDIR)
            with self.assertRaises(OSError) as cm:
                os.listdir(f)
            self.assertEqual(cm.exception.errno, errno.ENOTDIR)
            with self.assertRaises(OSError) as cm:
                os.stat(os.path.join(self.mnt, "scan11"))
            self.assertEqual(cm.exception.errno, errno.ENOENT)
            with open("/proc/self/mountinfo") as mi:
                line = next(l for l in mi if l.split()[4] == os.path.realpath(self.mnt))
            opts = line.split()[5].split(",")
            for o in ("ro", "nosuid", "nodev"):
                self.assertIn(o, opts)

    def test_allow_other_implies_default_permissions(self):
        # /proc/self/mountinfo: "... mount point, per-mount options ... - type source super options"
        for opts in ((), ("-o", "allow_other")):
            with self.subTest(opts=opts), Mount(STORE, self.mnt, *opts):
                with open("/proc/self/mountinfo") as mi:
                    line = next(l for l in mi if l.split()[4] == os.path.realpath(self.mnt))
                per_mount = line.split()[5].split(",")
                fstype, _, super_opts = line.split(" - ")[1].split()
                self.assertEqual(fstype, "fuse.pcrfs")
                super_opts = super_opts.split(",")
                for o in ("ro", "nosuid", "nodev"):
                    self.assertIn(o, per_mount)
                self.assertIn("default_permissions", super_opts)
                self.assertEqual("allow_other" in super_opts, bool(opts), super_opts)

    def test_eight_threads_random_reads(self):
        files = source_files()
        levels = {k: pcr_extract(STORE, k) for k in (1, 2, 5, 10)}
        expected = {(f, k): levels[k][f] for f in files for k in levels}
        errors = []
        with Mount(STORE, self.mnt, "-o", "cache_size=2M"):
            def worker(seed):
                rng = random.Random(seed)
                for _ in range(150):
                    f, k = rng.choice(files), rng.choice((1, 2, 5, 10))
                    want = expected[(f, k)]
                    with open(os.path.join(self.mnt, f"scan{k}", f), "rb", buffering=0) as fh:
                        off = rng.randrange(0, len(want) + 1)
                        fh.seek(off)
                        got = fh.read(rng.randrange(1, 200000))
                    if got != want[off:off + len(got)] or (len(got) == 0 and off < len(want)):
                        errors.append((f, k, off))
            threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        self.assertEqual(errors, [])

    def test_imagefolder_dataloader(self):
        script = (
            "import sys, torch, torchvision\n"
            "from torchvision import transforms as T\n"
            "ds = torchvision.datasets.ImageFolder(sys.argv[1], transform=T.Compose([\n"
            "    T.RandomResizedCrop(64), T.ToTensor()]))\n"
            "dl = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, shuffle=True)\n"
            "n = sum(x.shape[0] for x, y in dl)\n"
            "print(n, len(ds.classes))\n")
        with Mount(STORE, self.mnt):
            p = subprocess.run(["/usr/bin/python3", "-c", script,
                                os.path.join(self.mnt, "scan3", "imagefolder", "train")],
                               capture_output=True, text=True, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr[-3000:])
        self.assertEqual(p.stdout.split(), ["18", "3"])

    def test_sigterm_unmounts_cleanly(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            m = Mount(STORE, self.mnt)
            with m:
                os.listdir(os.path.join(self.mnt, "scan1"))
                m.proc.send_signal(sig)
                m.proc.wait(timeout=20)
                self.assertEqual(m.proc.returncode, 0, m.log())
                self.assertFalse(is_mounted(self.mnt))

    def test_fusermount_unmounts_cleanly(self):
        m = Mount(STORE, self.mnt)
        with m:
            m.unmount()
            m.proc.wait(timeout=20)
            self.assertEqual(m.proc.returncode, 0)
        self.assertFalse(is_mounted(self.mnt))

    def test_pushed_files_are_exact_and_cost_no_read(self):
        """With READDIRPLUS listings, the files of a folder being read are pushed into the
        page cache once their pieces are read: they read back exactly as `pcr cat` gives them,
        and reading them sends the daemon no READ at all."""
        def counts():
            text = os.getxattr(self.mnt, "user.pcrfs.prefetch").decode()
            demand = int(text.split("demand reads: ")[1].split(" ")[0])
            hits = int(text.split(" page-cache hits")[0].rsplit(" ", 1)[1])
            pushed = int(text.split("pushed to the page cache: ")[1].split(" ")[0])
            return demand + hits, pushed, text

        def read(path):
            fd = os.open(path, os.O_RDONLY)
            try:
                out = b""
                while chunk := os.read(fd, 1 << 20):
                    out += chunk
                return out
            finally:
                os.close(fd)

        rel = os.path.join("imagefolder", "train", "class1")
        with Mount(STORE, self.mnt, "-o", "scans=5,readdirplus=yes"):
            folder = os.path.join(self.mnt, rel)
            names = sorted(os.listdir(folder))  # the kernel holds every file of it now
            self.assertEqual(len(names), 6)
            for n in names[:2]:  # a second file read plans the folder
                read(os.path.join(folder, n))
            deadline = time.monotonic() + 30
            while counts()[1] < len(names) - 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            reads_before, pushed, text = counts()
            self.assertGreaterEqual(pushed, len(names) - 2, text)
            for n in names[2:]:
                self.assertEqual(read(os.path.join(folder, n)),
                                 pcr_cat(STORE, os.path.join(rel, n), 5), n)
            reads_after, _, text = counts()
            self.assertEqual(reads_after, reads_before, "no READ for a pushed file: " + text)

        # With plain listings (the kernel has no inode before the open) or -o push=0: none.
        for options in ("scans=5,readdirplus=no", "scans=5,readdirplus=yes,push=0"):
            with Mount(STORE, self.mnt, "-o", options):
                folder = os.path.join(self.mnt, rel)
                names = sorted(os.listdir(folder))
                for n in names:
                    self.assertEqual(read(os.path.join(folder, n)),
                                     pcr_cat(STORE, os.path.join(rel, n), 5), n)
                text = os.getxattr(self.mnt, "user.pcrfs.prefetch").decode()
                self.assertIn("pushed to the page cache: off", text, options)

    def test_files_the_kernel_forgot_are_left_alone_quietly(self):
        """A planned file whose inode the kernel has dropped (here by drop_caches after the
        listing) cannot be pushed: it is counted as not known to the kernel, read with READs
        as before, and nothing is printed (libfuse logs every failed splice, one line per
        file, so the daemon pushes with plain writes)."""
        if os.geteuid() != 0:
            self.skipTest("needs root (drop_caches)")
        work = tempfile.mkdtemp(prefix="pcrfs-forgot-")
        self.addCleanup(shutil.rmtree, work, ignore_errors=True)
        for i in range(8):  # files of 20-40 KiB, above the two pages libfuse would splice
            save_jpeg(photo(480 + 8 * i, 360, 700 + i),
                      os.path.join(work, "src", "photos", f"{i}.jpg"), quality=95)
        store = os.path.join(work, "store")
        run([PCR, "build", os.path.join(work, "src"), store, "--quiet", "--quality-sample", "0"])
        rel = "photos"
        with Mount(store, self.mnt, "-o", "scans=10,readdirplus=yes") as m:
            folder = os.path.join(self.mnt, rel)
            names = sorted(os.listdir(folder))
            sizes = [os.stat(os.path.join(folder, n)).st_size for n in names]
            # Larger than two pages: the size libfuse would splice.
            self.assertTrue(any(size > 8192 for size in sizes[2:]), sizes)
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("2\n")  # dentries and inodes: the kernel forgets the files
            for n in names[:2]:  # a second file read plans the folder
                with open(os.path.join(folder, n), "rb") as f:
                    f.read()

            def unknown():
                text = os.getxattr(self.mnt, "user.pcrfs.prefetch").decode()
                return int(text.split("not known to the kernel ")[1].split(",")[0]), text
            deadline = time.monotonic() + 30
            while unknown()[0] < len(names) - 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertGreaterEqual(unknown()[0], len(names) - 2, unknown()[1])
            for n in names[2:]:
                with open(os.path.join(folder, n), "rb") as f:
                    self.assertEqual(f.read(), pcr_cat(store, os.path.join(rel, n), 10), n)
            self.assertEqual(m.log(), "")


class MountHelperTest(unittest.TestCase):
    """mount(8) with -t fuse.pcrfs and an fstab line, through the installed mount.pcrfs."""

    def test_fstab_entry_mounts_at_a_level(self):
        helper = "/sbin/mount.fuse.pcrfs"
        if not os.path.exists(helper) or shutil.which("pcrfs") is None:
            self.fail(f"{helper} or pcrfs is not installed: run ./setup.sh (or cmake --install)")
        work = tempfile.mkdtemp(prefix="pcrfs-fstab-")
        mnt = os.path.join(work, "mnt")
        os.makedirs(mnt)
        fstab = os.path.join(work, "fstab")
        with open(fstab, "w") as f:
            f.write(f"{STORE} {mnt} fuse.pcrfs ro,noauto,scans=5,cache_size=64M 0 0\n")
        try:
            for cmd in (["mount", "-T", fstab, mnt],
                        ["mount", "-t", "fuse.pcrfs", STORE, mnt, "-o", "scans=5"]):
                with self.subTest(cmd=cmd):
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
                    self.assertEqual(p.returncode, 0, p.stderr)
                    try:
                        self.assertTrue(is_mounted(mnt))
                        got = open(os.path.join(mnt, "top level.jpg"), "rb").read()
                        self.assertEqual(got, pcr_cat(STORE, "top level.jpg", 5))
                        self.assertEqual(os.getxattr(os.path.join(mnt, "top level.jpg"),
                                                     "user.pcrfs.level"), b"5")
                    finally:
                        subprocess.run(["umount", mnt], timeout=30)
                    deadline = time.time() + 10
                    while is_mounted(mnt) and time.time() < deadline:
                        time.sleep(0.05)
                    self.assertFalse(is_mounted(mnt))
        finally:
            if is_mounted(mnt):
                subprocess.run(["fusermount3", "-uz", mnt])
            shutil.rmtree(work, ignore_errors=True)


class CorruptionTest(unittest.TestCase):
    def test_flipped_byte_gives_eio_for_that_file_only(self):
        work = tempfile.mkdtemp(prefix="pcrfs-corrupt-")
        try:
            src = os.path.join(work, "src")
            for i in range(12):
                save_jpeg(photo(150, 100, 500 + i), os.path.join(src, f"{i:02d}.jpg"), quality=85)
            store = os.path.join(work, "store")
            run([PCR, "build", src, store, "--quiet"])
            # Flip a byte inside the group-3 piece of file 05.jpg: levels 1-2 still read, 3+ fail.
            l2 = len(pcr_cat(store, "05.jpg", 2)) - 2
            l3 = len(pcr_cat(store, "05.jpg", 3)) - 2
            self.assertGreater(l3, l2)
            rec = os.path.join(store, "records", "00000000.pcr")
            data = bytearray(open(rec, "rb").read())
            piece3 = pcr_cat(store, "05.jpg", 3)[l2:l3]
            pos = data.find(piece3)
            self.assertGreater(pos, 0)
            data[pos + len(piece3) // 2] ^= 0x55
            open(rec, "wb").write(bytes(data))
            mnt = os.path.join(work, "mnt")
            with Mount(store, mnt) as m:
                for k in range(1, 11):
                    for i in range(12):
                        p = os.path.join(mnt, f"scan{k}", f"{i:02d}.jpg")
                        if i == 5 and k >= 3:
                            with self.assertRaises(OSError) as cm:
                                open(p, "rb").read()
                            self.assertEqual(cm.exception.errno, errno.EIO)
                        else:
                            got = open(p, "rb").read()
                            self.assertTrue(got.endswith(EOI))
                            if k == 10:
                                self.assertEqual(pil_pixels(got), pil_pixels(
                                    open(os.path.join(src, f"{i:02d}.jpg"), "rb").read()))
                self.assertIn("05.jpg", m.log())
                self.assertEqual(m.log().count("damaged"), 1, "damage is logged once")
                self.assertIsNone(m.proc.poll(), "the daemon keeps running")
        finally:
            shutil.rmtree(work, ignore_errors=True)


class BadArgumentsTest(unittest.TestCase):
    def test_refuses_before_mounting(self):
        work = tempfile.mkdtemp(prefix="pcrfs-bad-")
        try:
            mnt = os.path.join(work, "mnt")
            os.makedirs(mnt)
            notstore = os.path.join(work, "notstore")
            os.makedirs(notstore)
            future = os.path.join(work, "future")
            shutil.copytree(STORE, future)
            man = open(os.path.join(future, "manifest.json")).read()
            open(os.path.join(future, "manifest.json"), "w").write(
                man.replace('"format_version": 2', '"format_version": 99'))
            full = os.path.join(work, "full")
            os.makedirs(full)
            open(os.path.join(full, "x"), "w").close()
            cases = [
                ([os.path.join(work, "missing"), mnt], "missing"),
                ([notstore, mnt], "not a pcrfs store"),
                ([future, mnt], "99"),
                ([STORE, os.path.join(work, "nomnt")], "does not exist"),
                ([STORE, full], "not empty"),
                ([STORE, mnt, "-o", "scans=11"], "scans"),
                ([STORE, mnt, "-o", "cache_size=lots"], "cache_size"),
                ([STORE, mnt, "-o", "readdirplus=maybe"], "readdirplus"),
                ([STORE, mnt, "-o", "index_rss=lots"], "index_rss"),
                ([STORE, mnt, "-o", "prefetch=101"], "prefetch"),
            ]
            for args, words in cases:
                with self.subTest(args=args):
                    p = subprocess.run([PCRFS, *args, "-f"], capture_output=True, text=True,
                                       timeout=30)
                    self.assertNotEqual(p.returncode, 0)
                    self.assertIn(words, p.stderr)
                    self.assertFalse(is_mounted(mnt))
        finally:
            shutil.rmtree(work, ignore_errors=True)

    def test_help_and_version(self):
        p = subprocess.run([PCRFS, "--help"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        self.assertIn("scans=K", p.stdout)
        p = subprocess.run([PCRFS, "--version"], capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        self.assertIn("pcrfs", p.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
