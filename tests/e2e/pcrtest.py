"""Shared helpers for the end-to-end checks (run with /usr/bin/python3: they need Debian's PIL)."""

import ctypes
import hashlib
import io
import json
import mmap
import os
import random
import shutil
import subprocess
import tempfile
import time
import unittest
import warnings

import numpy as np

from PIL import Image

PCR = os.environ.get("PCR", "pcr")
MAKE_TEST_JPEGS = os.environ.get("MAKE_TEST_JPEGS", "make_test_jpegs")
EOI = b"\xff\xd9"


def run(args, check=True, **kw):
    """Runs a command, returns CompletedProcess with text stdout/stderr."""
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} exited {p.returncode}\nstdout: {p.stdout[-3000:]!r}\n"
                             f"stderr: {p.stderr[-3000:]!r}")
    return p


def read_tree(root, seed=None):
    """{relative path: bytes} of every file under a (mounted) tree, read in sorted order, or
    in an order shuffled with `seed`."""
    paths = []
    for dirpath, _, filenames in os.walk(root):
        paths += [os.path.join(dirpath, n) for n in filenames]
    paths.sort()
    if seed is not None:
        random.Random(seed).shuffle(paths)
    out = {}
    for p in paths:
        with open(p, "rb") as f:
            out[os.path.relpath(p, root)] = f.read()
    return out


def sha(b):
    return hashlib.sha256(b).hexdigest()


def remote_env(tmp):
    """A clean environment for pcrfs/pcr against the loopback test servers: no proxy, no AWS
    settings of the machine's, a HOME of its own under tmp."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.path.join(tmp, "home"),
           "no_proxy": "127.0.0.1,localhost"}
    for name in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "TSAN_OPTIONS", "LSAN_OPTIONS"):
        if name in os.environ:  # a sanitizer build's settings reach the daemon
            env[name] = os.environ[name]
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def pcr_cat(store, rel, k):
    return run([PCR, "cat", store, rel, "--scans", str(k)]).stdout


def pcr_extract(store, k, env=None):
    """Every file of the store at level k as `pcr extract` writes it: {relative path: bytes}.
    One process for the whole store (a sanitizer build's startup costs ~0.2 s per process)."""
    tmp = tempfile.mkdtemp(prefix="pcr-extract-")
    try:
        out = os.path.join(tmp, "tree")
        run([PCR, "extract", store, out, "--scans", str(k)], env=env)
        return read_tree(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def pil_pixels(data):
    """Decodes JPEG bytes with PIL; any warning is an error. Returns (mode, size, pixel bytes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        im = Image.open(io.BytesIO(data))
        im.load()
        return im.mode, im.size, im.tobytes()


def djpeg_clean(data):
    """libjpeg's own decoder: returns its stderr (warnings), empty when the file is clean."""
    p = subprocess.run(["djpeg", "-outfile", os.devnull], input=data, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    return p.returncode, p.stderr.decode(errors="replace")


def tree_digest(root):
    """{relative path: (kind, sha256 or None, mode)} for every entry under root, symlinks as links."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p), st.st_mtime_ns)
            elif os.path.isdir(p):
                out[rel] = ("dir", None, st.st_mode)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", hashlib.sha256(f.read()).hexdigest(), st.st_mtime_ns)
    return out


def store_bytes(store):
    """{relative path: bytes} of every file of a store's content: all but provenance.json, which
    says when, where and from what kind of source the store was built (docs/format.md)."""
    out = {}
    for dirpath, _, filenames in os.walk(store):
        for name in filenames:
            p = os.path.join(dirpath, name)
            if os.path.relpath(p, store) == "provenance.json":
                continue
            with open(p, "rb") as f:
                out[os.path.relpath(p, store)] = f.read()
    return out


# The page cache's view of a store: what reading it brought in from storage.
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]


def resident_bytes(path):
    """Bytes of `path` in the page cache (mincore(2) on a read-only shared mapping: mapping
    reads nothing, and mincore reports the file's cached pages)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0
    page = mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = (size + page - 1) // page
            vec = ctypes.create_string_buffer(pages)
            if _libc.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            resident = sum(b & 1 for b in vec.raw)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return min(resident * page, size)


def store_resident(store):
    """{path relative to the store: resident bytes} for every file of the store."""
    out = {}
    for d, _, names in os.walk(store):
        for n in sorted(names):
            p = os.path.join(d, n)
            if os.path.isfile(p):
                out[os.path.relpath(p, store)] = resident_bytes(p)
    return out


def store_resident_bytes(store):
    return sum(store_resident(store).values())



class TempDirTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="pcrfs-test-")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.tmp, *parts)


PCRFS = os.environ.get("PCRFS", "pcrfs")


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            if fields[4] == path:
                return True
    return False


class Mount:
    """Runs `pcrfs STORE MNT -f [-o opts]` for the duration of a with-block; always unmounts."""

    def __init__(self, store, mnt, *options, timeout=20, env=None):
        self.store, self.mnt, self.options, self.timeout = store, mnt, list(options), timeout
        self.env = env
        self.proc = None
        self.stderr_path = mnt.rstrip("/") + ".stderr"

    def __enter__(self):
        os.makedirs(self.mnt, exist_ok=True)
        self.stderr = open(self.stderr_path, "w+b")
        self.proc = subprocess.Popen([PCRFS, self.store, self.mnt, "-f", *self.options],
                                     stdout=subprocess.DEVNULL, stderr=self.stderr, env=self.env)
        deadline = time.time() + self.timeout
        while not is_mounted(self.mnt):
            if self.proc.poll() is not None:
                self.stderr.seek(0)
                raise AssertionError(f"pcrfs exited {self.proc.returncode}: "
                                     f"{self.stderr.read().decode(errors='replace')}")
            if time.time() > deadline:
                self.__exit__(None, None, None)
                raise AssertionError("pcrfs did not mount in time")
            time.sleep(0.02)
        return self

    def log(self):
        self.stderr.flush()
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def unmount(self):
        subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL)

    def __exit__(self, *exc):
        if self.proc is None:
            return False
        if is_mounted(self.mnt):
            self.unmount()
        try:
            self.proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], stderr=subprocess.DEVNULL)
        self.stderr.close()
        return False


def serve_for_class(cls, server):
    """Starts `server` (a context manager of tests/remote/remote_servers.py: Nginx, S3Server,
    FaultProxy) for the test class `cls` and returns what it gives; it is stopped after the
    class's tests, also when setUpClass fails after this (a class cleanup)."""
    started = server.__enter__()
    cls.addClassCleanup(server.__exit__, None, None, None)
    return started


def read_levels(store, mnt, levels):
    """{k: read_tree of scan<k>} through a local mount of `store` at mnt: what every mount of
    the same store, local or remote, must serve."""
    with Mount(store, mnt):
        return {k: read_tree(os.path.join(mnt, f"scan{k}")) for k in levels}


class LoopbackServersCase(unittest.TestCase):
    """A test class whose tests share servers on loopback (tests/remote): cls.tmp (removed after
    the class), cls.env for pcrfs and pcr against the servers (remote_env), serve() to start a
    server until the class ends, and remote mounts each with a cache_dir of its own. Subclasses
    call super().setUpClass() first."""

    tmp_prefix = "remote-e2e-"

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix=cls.tmp_prefix)
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.env = remote_env(cls.tmp)

    @classmethod
    def serve(cls, server):
        return serve_for_class(cls, server)

    def cache(self, name):
        return os.path.join(self.tmp, "cache-" + name)

    def mount(self, url, name, *options, env=None):
        mnt = os.path.join(self.tmp, "mnt-" + name)
        return Mount(url, mnt, "-o", ",".join(["cache_dir=" + self.cache(name), *options]),
                     env=env or self.env)


class Indexed:
    """A map-style dataset over `dataset` whose items are (index, dataset[index][0]): which
    sample each item of a DataLoader was (picklable, for spawn)."""

    def __init__(self, dataset):
        self.dataset = dataset

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        return i, self.dataset[i][0]


def photo(w, h, seed, mode="RGB"):
    """A deterministic photo-like image: smooth colour fields, edges and noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    chans = []
    for c in range(3):
        fx, fy, ph = rng.uniform(0.005, 0.05, 2).tolist() + [rng.uniform(0, 6.28)]
        base = 128 + 90 * np.sin(x * fx + ph) * np.cos(y * fy)
        base += (x > w * rng.uniform(0.2, 0.8)) * 40.0
        base += rng.normal(0, 12, (h, w))
        chans.append(np.clip(base, 0, 255).astype(np.uint8))
    im = Image.fromarray(np.stack(chans, axis=-1), "RGB")
    return im.convert(mode) if mode != "RGB" else im


def save_jpeg(im, path, **kw):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    im.save(path, "JPEG", **kw)


def make_messy_tree(root):
    """Nested and empty dirs, unicode and spaces, hidden files, non-JPEGs, broken JPEGs."""
    for i, (rel, mode, kw) in enumerate([
        ("train/cat/img 1.JPEG", "RGB", dict(quality=90)),
        ("train/cat/.hidden.jpg", "RGB", dict(quality=80, progressive=True)),
        ("train/dög/ünïcödé ñame.jpg", "RGB", dict(quality=85, subsampling=0)),
        ("train/dög/grey.jpg", "L", dict(quality=75)),
        ("val/a/b/c/deep.jpeg", "RGB", dict(quality=95, subsampling=1)),
        ("val/cmyk.jpg", "CMYK", dict(quality=88)),
        ("top level.jpg", "RGB", dict(quality=70, optimize=True)),
    ]):
        p = os.path.join(root, rel)
        save_jpeg(photo(97 + 13 * i, 61 + 7 * i, i, mode), p, **kw)
    os.makedirs(os.path.join(root, "empty/also empty"))
    os.makedirs(os.path.join(root, "val/nothing here"))
    with open(os.path.join(root, "labels.csv"), "w") as f:
        f.write("file,label\nimg 1.JPEG,cat\n")
    with open(os.path.join(root, "train/cat/meta.json"), "w") as f:
        json.dump({"k": [1, 2, 3]}, f)
    open(os.path.join(root, "train/zero.jpg"), "wb").close()
    with open(os.path.join(root, "train/random.jpg"), "wb") as f:
        f.write(os.urandom(3000))
    good = open(os.path.join(root, "train/cat/img 1.JPEG"), "rb").read()
    with open(os.path.join(root, "train/truncated.jpg"), "wb") as f:
        f.write(good[: len(good) * 2 // 3])
    with open(os.path.join(root, "train/trailing.jpg"), "wb") as f:
        f.write(good + b"GARBAGE AFTER EOI")
    buf = io.BytesIO()
    photo(40, 30, 99).save(buf, "PNG")
    with open(os.path.join(root, "train/actually png.JPEG"), "wb") as f:
        f.write(buf.getvalue())
    os.chmod(os.path.join(root, "labels.csv"), 0o640)
