"""A pcrfs store read without a mount: what ``pcrfs STORE MNT -o scans=K,OPTIONS`` serves, from
Python, with no FUSE, no /dev/fuse and no privileges::

    import pcrfs
    store = pcrfs.Store("s3://bucket/imagenet.pcr", scans=5, remote_cache="1G")
    store.listdir("train")              # ['n01440764', ...]
    store.stat("train/n01440764/a.JPEG").st_size   # its size at level 5
    data = store.read("train/n01440764/a.JPEG")    # its bytes at level 5
    with store.open("train/n01440764/a.JPEG") as f:
        image = PIL.Image.open(f).convert("RGB")

Every byte is the mount's at the same level: the same C++ filesystem serves it (the extension
pcrfs._pcrfs over fs/store_session.h). Keyword options are the mount's ``-o`` options, checked by
the same table (``pcrfs --help``): ``cache_dir``, ``remote_cache``, ``disk_cache``,
``remote_timeout``, ``endpoint``, ``region``, ``no_sign=True``, ``form="baseline"``, ... Options
that only a mount uses (``threads``, ``uid``, ``metrics``, ...) are refused. Credentials come from
the environment and files, as for a mount, never from options.

Errors: FileNotFoundError, NotADirectoryError, IsADirectoryError for paths; OSError with errno
EIO for damaged data (the line the daemon logs: ``damaged data: RECORD: "PATH" (level K): ...``)
or a server that keeps failing; PermissionError for refused credentials; ValueError for a bad
option (``scans=11``: ``-o scans=11: expected an integer in 1..10``).

Processes: a Store records the process that opened it. In a child (fork: DataLoader workers,
multiprocessing) it opens the store again at its first use, because the C++ side runs threads
(the record scheduler's, a remote store's HTTP client) that a child does not have; the parent's
state is left alone, never destroyed there. Pickling (spawn, forkserver) carries the URL or path,
the level and the options, never a credential; the copy opens at its first use.

Thread-safe: the GIL is released while reading, so threads read in parallel.
"""

import errno
import io
import os

__all__ = ["Store", "StoreFile"]

def _option_pairs(scans, options):
    """The keyword options as the (NAME, VALUE) text pairs of the mount's table: True is a flag
    (no_sign=True), False or None leaves the option out."""
    pairs = []
    if scans is not None:
        pairs.append(("scans", str(scans)))
    for name, value in options.items():
        if value is None or value is False:
            continue
        if value is True:
            text = ""
        elif isinstance(value, os.PathLike):
            text = os.fspath(value)
        else:
            text = str(value)
        pairs.append((name, text))
    return pairs


def _native():
    try:
        from . import _pcrfs
    except ImportError as e:  # a pure-Python install: the hint client only
        raise ImportError("pcrfs.Store needs the extension pcrfs._pcrfs, which this installation "
                          "lacks (build pcrfs with pybind11-dev installed)") from e
    return _pcrfs


class Store:
    """The store at `url_or_path` (a folder, or s3://, gs://, az://, http(s):// as pcrfs mounts
    it), at level `scans` (1..10; default: the level ``msssim=X`` chooses, else 10). Paths are
    relative to the store's root ("train/cat/a.jpg"; "" or "/" is the root)."""

    def __init__(self, url_or_path, scans=None, **options):
        self.url = os.fspath(url_or_path)
        self.options = dict(options)
        self._scans = scans
        self._pairs = _option_pairs(scans, self.options)
        self._session = None
        self._pid = None
        self._live()  # errors now, in the process that makes the Store

    @property
    def scans(self):
        """The level served: scans, or what msssim chose, or 10."""
        return self._live().level

    @property
    def name(self):
        """The store as errors name it: its path, or its URL without a query."""
        return self._live().name

    def _live(self):
        """The C++ session of this process: opened here if the one held is another process's
        (after fork) or none (after unpickling). The other process's session is dropped, which
        leaks it here (fs/store_session.h): its threads are not this process's."""
        session = self._session
        if session is None or self._pid != os.getpid():
            session = _native().Session(self.url, self._pairs)
            self._session, self._pid = session, os.getpid()
        return session

    def __getstate__(self):
        return {"url": self.url, "scans": self._scans, "options": self.options}

    def __setstate__(self, state):
        self.url, self._scans, self.options = state["url"], state["scans"], state["options"]
        self._pairs = _option_pairs(self._scans, self.options)
        self._session = None
        self._pid = None

    def __repr__(self):
        return f"pcrfs.Store({self.url!r}, scans={self._scans!r})"

    def listdir(self, path=""):
        """The names in the folder at `path`, in the store's order (as the mount lists them)."""
        return [name for name, _ in self._live().listdir(os.fspath(path))]

    def scandir(self, path=""):
        """[(name, is_dir)] of the folder at `path`, in the store's order."""
        return self._live().listdir(os.fspath(path))

    def walk(self, top=""):
        """os.walk over the store, top-down: (dirpath, dirnames, filenames), dirpath relative to
        the root ("" for the root)."""
        top = os.fspath(top).strip("/")
        stack = [top]
        while stack:
            dirpath = stack.pop()
            dirs, files = [], []
            for name, is_dir in self._live().listdir(dirpath):
                (dirs if is_dir else files).append(name)
            yield dirpath, dirs, files
            stack.extend(reversed([dirpath + "/" + d if dirpath else d for d in dirs]))

    def stat(self, path):
        """os.stat_result of `path` as the mount's stat gives it: st_size at this level,
        st_mtime, st_mode (read-only), st_ino (the mount's inode number)."""
        return _stat_result(self._live().stat(os.fspath(path)))

    def exists(self, path):
        try:
            self._live().resolve(os.fspath(path))
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False

    def isdir(self, path):
        try:
            return _is_dir(self._live().stat(os.fspath(path)))
        except (FileNotFoundError, NotADirectoryError):
            return False

    def read(self, path):
        """The bytes of the file at `path` at this level."""
        path = os.fspath(path)
        session = self._live()
        ino = session.resolve(path)
        st = session.stat_ino(ino)
        if _is_dir(st):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        data = session.read(ino, 0, st[6])
        if len(data) < st[6]:  # never for an immutable store; kept honest anyway
            rest = [data]
            while True:
                more = session.read(ino, sum(map(len, rest)), 1 << 20)
                if not more:
                    break
                rest.append(more)
            data = b"".join(rest)
        return data

    def open(self, path, mode="rb", buffering=-1):
        """A read-only binary file object of `path` (io.BufferedReader over a StoreFile, seekable;
        PIL.Image.open takes it). buffering=0: the StoreFile itself."""
        if mode not in ("r", "rb", "br"):
            raise ValueError(f"pcrfs stores are read-only and binary: mode {mode!r}")
        raw = StoreFile(self, os.fspath(path))
        if buffering == 0:
            return raw
        return io.BufferedReader(raw, buffering if buffering > 1 else 128 * 1024)


def _is_dir(st):
    return (st[0] & 0o170000) == 0o040000


def _stat_result(t):
    mode, ino, dev, nlink, uid, gid, size, at, mt, ct, at_ns, mt_ns, ct_ns, blksize, blocks = t
    return os.stat_result(
        (mode, ino, dev, nlink, uid, gid, size, at, mt, ct),
        {"st_atime": at_ns / 1e9, "st_mtime": mt_ns / 1e9, "st_ctime": ct_ns / 1e9,
         "st_atime_ns": at_ns, "st_mtime_ns": mt_ns, "st_ctime_ns": ct_ns,
         "st_blksize": blksize, "st_blocks": blocks})


class StoreFile(io.RawIOBase):
    """One file of a Store, read-only and seekable (a raw file: Store.open buffers it). Reads go
    to the store at the file's inode number, which is the same in every process, so a StoreFile
    keeps working in a forked child (the Store opens itself there)."""

    def __init__(self, store, path):
        super().__init__()
        self.name = path
        self._store = store
        session = store._live()
        self._ino = session.resolve(path)
        st = session.stat_ino(self._ino)
        if _is_dir(st):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        self._size = st[6]
        self._pos = 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def readinto(self, buffer):
        if self.closed:
            raise ValueError("I/O operation on closed file")
        view = memoryview(buffer).cast("B")
        if self._pos >= self._size or len(view) == 0:
            return 0
        n = self._store._live().readinto(self._ino, self._pos, view[:self._size - self._pos])
        self._pos += n
        return n

    def readall(self):
        if self._pos >= self._size:
            return b""
        data = self._store._live().read(self._ino, self._pos, self._size - self._pos)
        self._pos += len(data)
        return data

    def seek(self, offset, whence=io.SEEK_SET):
        if self.closed:
            raise ValueError("I/O operation on closed file")
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self._size + offset
        else:
            raise ValueError(f"invalid whence ({whence})")
        if pos < 0:
            raise OSError(errno.EINVAL, "negative seek position", self.name)
        self._pos = pos
        return pos

    def tell(self):
        return self._pos

    def __repr__(self):
        return f"<pcrfs.StoreFile {self.name!r}>"
