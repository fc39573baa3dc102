"""Telling a pcrfs mount which files a process will read next, in order.

A training loop knows its epoch's order before the epoch starts. pcrfs listens on a Unix socket
(named by the mount root's extended attribute ``user.pcrfs.hint_socket``) for the paths a reader
will open, one per line, and fetches those files ahead in exactly that order, as far as its
cache has room (README, "Telling pcrfs the read order"; docs/design.md, "Hints")::

    from pcrfs.hint import Hinter
    with Hinter("/mnt/imagenet") as hinter:
        hinter.hint(paths_in_the_order_they_will_be_read)
        ...

    # with torch: hint each epoch's order as the epoch starts
    from pcrfs.hint import HintedSampler
    sampler = HintedSampler(RandomSampler(dataset), [p for p, _ in dataset.samples],
                            Hinter(root))
    loader = DataLoader(dataset, sampler=sampler, num_workers=8)

The channel is one-way: the daemon never answers, so nothing here waits for it. Paths are written
by a background thread; ``hint()`` hands it a batch (any iterable, consumed lazily) and returns at
once unless ``max_batches`` batches already wait. Where the mount has no hint socket (not pcrfs,
or mounted with ``-o hints=no``) a Hinter warns once and does nothing. Pure Python, no torch
needed (HintedSampler works with any sampler: torch's, or a list of indices).

Not fork-safe: make the Hinter in the process that iterates the sampler (DataLoader iterates it
in the main process).
"""

import os
import queue
import socket
import threading
import warnings

__all__ = ["Hinter", "HintedSampler", "mount_root", "HINT_SOCKET_XATTR"]

HINT_SOCKET_XATTR = "user.pcrfs.hint_socket"

# Bytes written to the socket at once; a reset waits at most for one such write.
_CHUNK_BYTES = 64 * 1024
_RESET = object()  # a marker in the batch queue
_STOP = object()


def mount_root(path):
    """The root of the mount that holds `path` (its nearest existing folder): the last folder
    going up whose parent is on another device."""
    path = os.path.realpath(os.fspath(path))
    while not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    dev = os.stat(path).st_dev
    while True:
        parent = os.path.dirname(path)
        if parent == path or os.stat(parent).st_dev != dev:
            return path
        path = parent


class Hinter:
    """A connection to the hint socket of the pcrfs mount that holds `path_or_mount`.

    hint(paths)  queue paths (absolute under the mount, or relative to its root:
                 "scan3/train/n01/a.JPEG", or "train/n01/a.JPEG" on a -o scans=K mount) to be
                 sent in order; returns at once unless max_batches batches still wait.
    reset()      drop the hints not sent yet, and tell the daemon to drop this connection's
                 hints it still holds (a new epoch).
    flush(t)     wait (at most t seconds) until every batch handed over has been written.
    close()      stop; hints not sent yet are dropped. Also on leaving a with-block.

    ``active`` is False where the mount has no hint socket; every call then does nothing.
    ``skipped`` counts paths that could not be sent (a newline in the name).
    """

    def __init__(self, path_or_mount, max_batches=4):
        self.root = mount_root(path_or_mount)
        self._root_bytes = os.fsencode(self.root).rstrip(b"/")
        self.socket_path = None
        self.skipped = 0
        self._sock = None
        self._warned = False
        self._generation = 0  # bumped by reset(): the batch being written is abandoned
        self._lock = threading.Lock()
        self._batches = queue.Queue(maxsize=max_batches)
        self._idle = threading.Condition(self._lock)
        self._pending = 0  # batches handed over and not finished
        self._thread = None
        try:
            self.socket_path = os.getxattr(self.root, HINT_SOCKET_XATTR).decode()
        except OSError as e:
            self._warn(f"{self.root} has no hint socket ({e.strerror}): not a pcrfs mount, or "
                       "mounted with -o hints=no; hints are ignored")
            return
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.socket_path)
        except OSError as e:
            sock.close()
            self._warn(f"cannot connect to {self.socket_path}: {e.strerror}; hints are ignored")
            return
        self._sock = sock
        self._thread = threading.Thread(target=self._write, name="pcrfs-hinter", daemon=True)
        self._thread.start()

    @property
    def active(self):
        return self._sock is not None

    def _warn(self, message):
        if not self._warned:
            self._warned = True
            warnings.warn("pcrfs.hint: " + message, RuntimeWarning, stacklevel=3)

    def _line(self, path):
        b = os.fsencode(path)
        if b.startswith(b"/") and b.startswith(self._root_bytes + b"/"):
            b = b[len(self._root_bytes) + 1:]
        if b"\n" in b:
            self.skipped += 1
            return None
        return b + b"\n"

    def _put(self, item):
        with self._lock:
            self._pending += 1
        self._batches.put(item)

    def hint(self, paths):
        """Queues `paths` (an iterable of str, bytes or os.PathLike; read lazily by the writer
        thread, in order) to be sent after the batches handed over before."""
        if self.active:
            self._put(paths)

    def reset(self):
        """Drops the batches not written yet and sends #reset: the daemon drops this
        connection's hints it still holds. Hints given after it are sent after it."""
        if not self.active:
            return
        self._drop_unsent()
        self._put(_RESET)

    def _drop_unsent(self):
        """Drops the batches the writer has not taken yet (a batch it holds sees the new
        generation and stops)."""
        with self._lock:
            self._generation += 1
        while True:
            try:
                self._batches.get_nowait()
            except queue.Empty:
                break
            self._done()

    def flush(self, timeout=None):
        """Waits until every batch handed over so far is written to the socket (the daemon may
        still hold lines in it). Returns False if `timeout` seconds passed first."""
        if not self.active:
            return True
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def close(self):
        if self._thread is not None:
            self._drop_unsent()
            self._batches.put(_STOP)
            self._thread.join()
            self._thread = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to tidy
            pass

    def _done(self):
        with self._idle:
            self._pending -= 1
            self._idle.notify_all()

    def _send(self, data):
        try:
            self._sock.sendall(data)
            return True
        except OSError as e:  # unmounted: the daemon is gone
            self._warn(f"{self.socket_path}: {e.strerror}; hints are ignored from now on")
            return False

    def _write(self):
        broken = False
        while True:
            item = self._batches.get()
            if item is _STOP:
                return
            try:
                if broken:
                    continue
                if item is _RESET:
                    broken = not self._send(b"#reset\n")
                    continue
                with self._lock:
                    generation = self._generation
                out = []
                size = 0
                for path in item:
                    line = self._line(path)
                    if line is None:
                        continue
                    out.append(line)
                    size += len(line)
                    if size >= _CHUNK_BYTES:
                        if self._generation != generation or not self._send(b"".join(out)):
                            broken = self._generation == generation
                            break
                        out, size = [], 0
                else:
                    if out and self._generation == generation:
                        broken = not self._send(b"".join(out))
            except Exception as e:  # a bad path in a batch: the batch ends, the thread goes on
                self._warn(f"a hint batch failed: {e!r}")
            finally:
                self._done()


class HintedSampler:
    """Wraps a sampler (torch's, or any iterable of indices, or of lists of indices for a batch
    sampler) and, each time an epoch's iteration starts, hints the paths of its indices in the
    order they will be yielded, after a #reset that drops what is left of the epoch before.

    paths_of_indices  a sequence (``[p for p, _ in dataset.samples]``) or a callable: index ->
                      path
    hinter            a Hinter (one that is not active makes this a plain pass-through)
    ahead             None (default): the whole epoch at once, read lazily by the Hinter's thread
                      (the daemon keeps only what its cache has room for; the rest waits in the
                      socket); N: at most N indices ahead of iteration.
    """

    def __init__(self, sampler, paths_of_indices, hinter, ahead=None):
        self.sampler = sampler
        self.hinter = hinter
        self.ahead = ahead
        if callable(paths_of_indices):
            self._path = paths_of_indices
        else:
            self._path = paths_of_indices.__getitem__

    def __len__(self):
        return len(self.sampler)

    def set_epoch(self, epoch):
        """DistributedSampler's: passed on."""
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def _flat(self, items):
        for item in items:
            if isinstance(item, (list, tuple)):
                yield from item
            else:
                yield int(item)

    def __iter__(self):
        order = list(iter(self.sampler))
        if not self.hinter.active:
            yield from order
            return
        self.hinter.reset()
        if self.ahead is None:
            self.hinter.hint(self._path(i) for i in self._flat(order))
            yield from order
            return
        flat = list(self._flat(order))
        per_item = [len(x) if isinstance(x, (list, tuple)) else 1 for x in order]
        step = max(1, self.ahead // 8)
        sent = 0
        done = 0  # indices yielded so far
        for item, n in zip(order, per_item):
            target = min(len(flat), done + self.ahead)
            if target - sent >= step or (target == len(flat) and sent < target):
                self.hinter.hint([self._path(i) for i in flat[sent:target]])
                sent = target
            done += n
            yield item
