#!/usr/bin/python3
"""A bandwidth-capped disk for benchmarks: ext4 on a loop device, reads capped by cgroup v1 blkio.

    from throttle import ThrottledDisk, measure_read_rate
    with ThrottledDisk("/var/tmp/pcrfs-bench/x.img", 2 << 30, "/var/tmp/pcrfs-bench/x-disk") as d:
        d.join()                         # this process (and what it forks from now on) is capped
        d.cap(50e6)                      # 50 MB/s of reads from the loop device
        subprocess.Popen([...], preexec_fn=d.preexec())   # a child in the cgroup
        print(measure_read_rate(d, 50e6))                 # is the cap real? (a cold read)
        d.cap(None)

How it works. The image is a sparse file (on the root file system) attached to a loop device with
direct I/O (`losetup --direct-io=on`), so the loop device's reads go to the backing disk and never
through the host's page cache for the image: a cold read of a file on the loop file system is a
real read, charged once. A cgroup v1 blkio cgroup (/sys/fs/cgroup/blkio/NAME) caps reads from the
loop device with blkio.throttle.read_bps_device "MAJ:MIN BPS". The throttle applies to block I/O
a process of the cgroup submits (its reads, the readahead they trigger, posix_fadvise WILLNEED):
every process whose reads should be capped must be in the cgroup, e.g. a FUSE daemon that reads
the device on behalf of its clients. blkio.throttle.io_service_bytes of the cgroup counts the
bytes it submitted to the device (service_bytes()), which shows the charging works.

The file system is created with lazy_itable_init=0,lazy_journal_init=0 (no ext4lazyinit writes
in the background later) and mounted noatime (a first read would otherwise write atimes).

Run as a script for a self-test: `throttle.py IMG SIZE MNT [--caps 25,50,100]` creates the disk,
measures cold read rates under each cap and uncapped, and tears it all down.
"""

import argparse
import atexit
import json
import os
import re
import subprocess
import sys
import time

CGROUP_ROOT = "/sys/fs/cgroup/blkio"
MB = 1e6
MiB = 1 << 20

_EXT_MAGIC_OFFSET = 1024 + 56  # s_magic in the ext2/3/4 superblock
_EXT_MAGIC = b"\x53\xef"


def _run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def _holds_ext_fs(path):
    try:
        with open(path, "rb") as f:
            f.seek(_EXT_MAGIC_OFFSET)
            return f.read(2) == _EXT_MAGIC
    except OSError:
        return False


def _mounted_devices():
    """{mountpoint: device} from /proc/mounts (octal escapes decoded)."""
    out = {}
    with open("/proc/mounts") as f:
        for line in f:
            dev, mnt = line.split()[:2]
            dec = lambda s: re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)
            out[dec(mnt)] = dec(dev)
    return out


def cgroup_of(pid="self"):
    """The blkio cgroup path of pid (e.g. '/' or '/pcrfs-bench')."""
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            _, ctrl, path = line.rstrip("\n").split(":", 2)
            if "blkio" in ctrl.split(","):
                return path
    return None


class ThrottledDisk:
    """An ext4 file system on a loop device (direct I/O to its backing file), whose reads a
    cgroup v1 blkio throttle can cap."""

    def __init__(self, image_path, size_bytes, mountpoint, cgroup_name="pcrfs-bench",
                 read_ahead_kb=None):
        """Creates (or reuses, if the image already exists and holds an ext file system) a sparse
        image of size_bytes, runs mkfs.ext4 when new, attaches it with losetup --direct-io=on,
        mounts it (noatime) on mountpoint and creates the blkio cgroup cgroup_name. A reused
        image smaller than size_bytes is grown (resize2fs). read_ahead_kb, if given, is written
        to the loop device's queue/read_ahead_kb (the kernel's default for loop is 128)."""
        if not os.path.isfile(os.path.join(CGROUP_ROOT, "blkio.throttle.read_bps_device")):
            raise RuntimeError(f"no cgroup v1 blkio throttle at {CGROUP_ROOT}")
        self.image_path = os.path.abspath(image_path)
        self.mountpoint = os.path.abspath(mountpoint)
        self.cgroup_name = cgroup_name
        self.cgroup = os.path.join(CGROUP_ROOT, cgroup_name)
        self.device = None
        self.majmin = None
        self.created = False
        self._mounted = False
        self._closed = False
        if self.mountpoint in _mounted_devices():
            raise RuntimeError(f"{self.mountpoint} is already mounted "
                               f"({_mounted_devices()[self.mountpoint]}): unmount it first")
        try:
            self._detach_stale_loops()
            if not (os.path.exists(self.image_path) and _holds_ext_fs(self.image_path)):
                os.makedirs(os.path.dirname(self.image_path), exist_ok=True)
                with open(self.image_path, "wb") as f:
                    f.truncate(int(size_bytes))
                _run(["mkfs.ext4", "-F", "-q", "-m", "0",
                      "-E", "lazy_itable_init=0,lazy_journal_init=0", self.image_path])
                self.created = True
            elif os.path.getsize(self.image_path) < size_bytes:
                with open(self.image_path, "r+b") as f:
                    f.truncate(int(size_bytes))
                _run(["e2fsck", "-f", "-y", self.image_path])
                _run(["resize2fs", self.image_path])
            self.device = _run(["losetup", "-f", "--show", "--direct-io=on",
                                self.image_path]).strip()
            name = os.path.basename(self.device)
            with open(f"/sys/block/{name}/dev") as f:
                self.majmin = f.read().strip()
            with open(f"/sys/block/{name}/loop/dio") as f:
                if f.read().strip() != "1":
                    raise RuntimeError(f"{self.device}: direct I/O is not on")
            if read_ahead_kb is not None:
                with open(f"/sys/block/{name}/queue/read_ahead_kb", "w") as f:
                    f.write(f"{int(read_ahead_kb)}\n")
            os.makedirs(self.mountpoint, exist_ok=True)
            _run(["mount", "-t", "ext4", "-o", "noatime", self.device, self.mountpoint])
            self._mounted = True
            os.makedirs(self.cgroup, exist_ok=True)
            self.cap(None)
        except BaseException:
            self.close()
            raise
        atexit.register(self.close)

    # ------------------------------------------------------------ the throttle

    def cap(self, bytes_per_s):
        """Caps reads from the loop device by processes of the cgroup at bytes_per_s (rounded to
        an integer); None or 0 removes the cap."""
        bps = int(bytes_per_s) if bytes_per_s else 0
        with open(os.path.join(self.cgroup, "blkio.throttle.read_bps_device"), "w") as f:
            f.write(f"{self.majmin} {bps}\n")

    def current_cap(self):
        """The cap in bytes/s now set for the device, or None."""
        with open(os.path.join(self.cgroup, "blkio.throttle.read_bps_device")) as f:
            for line in f:
                dev, bps = line.split()
                if dev == self.majmin:
                    return int(bps)
        return None

    def join(self, pid=None):
        """Moves pid (default: the calling process, all its threads) into the cgroup. Children
        forked afterwards are in it too."""
        with open(os.path.join(self.cgroup, "cgroup.procs"), "w") as f:
            f.write(f"{pid or os.getpid()}\n")

    def leave(self, pid=None):
        """Moves pid (default: the calling process) back to the root blkio cgroup."""
        with open(os.path.join(CGROUP_ROOT, "cgroup.procs"), "w") as f:
            f.write(f"{pid or os.getpid()}\n")

    def preexec(self):
        """A callable for subprocess.Popen(preexec_fn=...): the child joins the cgroup before it
        executes its program."""
        procs = os.path.join(self.cgroup, "cgroup.procs")

        def _join():
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0\n")  # 0 = the writing process
            finally:
                os.close(fd)
        return _join

    def contains(self, pid="self"):
        """True if pid is in this cgroup."""
        return cgroup_of(pid) == "/" + self.cgroup_name

    def procs(self):
        with open(os.path.join(self.cgroup, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]

    def drop_caches(self):
        """Makes the file system cold without touching the rest of the machine: syncs it,
        unmounts it (its page cache, dentries and inodes go; the loop device's own page cache,
        which holds the file system's metadata blocks, goes at its last close) and mounts it
        again. The image's pages are never cached (direct I/O). A global
        `echo 3 > /proc/sys/vm/drop_caches` would also empty every other process's page cache
        on a shared machine. Fails if a file on the disk is still open (umount: busy)."""
        name = os.path.basename(self.device)
        _run(["umount", self.mountpoint])
        self._mounted = False
        # Nobody else holds the loop device open, so umount was its last close; make sure.
        fd = os.open(self.device, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        _run(["mount", "-t", "ext4", "-o", "noatime", self.device, self.mountpoint])
        self._mounted = True
        with open(f"/sys/block/{name}/stat") as f:
            return int(f.read().split()[2]) * 512

    # ------------------------------------------------------------ counters

    def service_bytes(self):
        """blkio.throttle.io_service_bytes of the cgroup for the loop device: {'Read': bytes,
        'Write': ..., ...}, cumulative since the cgroup was created (or reset)."""
        out = {}
        with open(os.path.join(self.cgroup, "blkio.throttle.io_service_bytes")) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3 and parts[0] == self.majmin:
                    out[parts[1]] = int(parts[2])
        return out

    def charged_read_bytes(self):
        return self.service_bytes().get("Read", 0)

    def device_read_bytes(self):
        """Bytes read from the loop device by anyone (sectors read in /sys/block/loopN/stat)."""
        with open(f"/sys/block/{os.path.basename(self.device)}/stat") as f:
            return int(f.read().split()[2]) * 512

    # ------------------------------------------------------------ teardown

    def close(self):
        """Unmounts, detaches the loop device, removes the cap and the cgroup (moving the
        processes still in it back to the root cgroup first). Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors = []
        if os.path.isdir(self.cgroup):
            try:
                if self.majmin:
                    self.cap(None)
            except OSError as e:
                errors.append(f"uncap: {e}")
        if self._mounted:
            for attempt in range(20):
                r = subprocess.run(["umount", self.mountpoint], capture_output=True, text=True)
                if r.returncode == 0:
                    break
                time.sleep(0.25)
            else:
                errors.append(f"umount {self.mountpoint}: {r.stderr.strip()}; lazy unmount")
                subprocess.run(["umount", "-l", self.mountpoint], capture_output=True)
            self._mounted = False
        if self.device:
            r = subprocess.run(["losetup", "-d", self.device], capture_output=True, text=True)
            if r.returncode != 0:
                errors.append(f"losetup -d {self.device}: {r.stderr.strip()}")
            self.device = None
        if os.path.isdir(self.cgroup):
            try:
                for pid in self.procs():
                    try:
                        self.leave(pid)
                    except OSError:
                        pass  # exited meanwhile
                os.rmdir(self.cgroup)
            except OSError as e:
                errors.append(f"rmdir {self.cgroup}: {e}")
        if errors:
            print("throttle: " + "; ".join(errors), file=sys.stderr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _detach_stale_loops(self):
        """Loop devices still attached to our image from an earlier run that died, and not
        mounted anywhere, are detached."""
        r = subprocess.run(["losetup", "-j", self.image_path], capture_output=True, text=True)
        mounted = set(_mounted_devices().values())
        for line in r.stdout.splitlines():
            dev = line.split(":", 1)[0]
            if dev.startswith("/dev/loop") and dev not in mounted:
                subprocess.run(["losetup", "-d", dev], capture_output=True)


# ---------------------------------------------------------------- verifying the cap

_READER = r"""
import json, os, sys, time
path, nbytes = sys.argv[1], int(sys.argv[2])
fd = os.open(path, os.O_RDONLY)
buf = bytearray(1 << 20)
mv = memoryview(buf)
got = 0
t0 = time.monotonic()
while got < nbytes:
    n = os.readv(fd, [mv[:min(len(buf), nbytes - got)]])
    if n == 0:
        break
    got += n
t1 = time.monotonic()
os.close(fd)
io = dict((k.strip(), int(v)) for k, v in (l.split(":") for l in open("/proc/self/io")))
print(json.dumps({"bytes": got, "seconds": t1 - t0, "read_bytes": io["read_bytes"]}))
"""


def ensure_probe_file(disk, size_bytes=320 * MiB, name=".throttle-probe"):
    """A file of random bytes on the disk (created once, reused while its size matches)."""
    path = os.path.join(disk.mountpoint, name)
    if not (os.path.isfile(path) and os.path.getsize(path) == size_bytes):
        with open(path, "wb") as f:
            left = size_bytes
            while left:
                n = min(left, 8 * MiB)
                f.write(os.urandom(n))
                left -= n
            f.flush()
            os.fsync(f.fileno())
    return path


def evict(path):
    """Drops path's pages from the page cache (the file system is on a direct-I/O loop device,
    so the backing image holds no cached copy either)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def measure_read_rate(disk, bytes_per_s, seconds=3.0, path=None, min_bytes=32 * MiB,
                      timeout=120):
    """Caps the disk at bytes_per_s (None: uncapped), evicts a probe file from the page cache and
    reads about `seconds` worth of it (at least min_bytes; all of it when uncapped) with a
    buffered, sequential 1 MiB reader in a child process that joins the cgroup. Returns
    {"cap", "bytes", "seconds", "rate", "ratio" (rate / cap), "charged" (the cgroup's
    io_service_bytes Read delta), "device" (the loop device's sectors-read delta)}. The cap is
    removed afterwards."""
    path = path or ensure_probe_file(disk)
    size = os.path.getsize(path)
    nbytes = size if not bytes_per_s else min(size, max(min_bytes, int(bytes_per_s * seconds)))
    evict(path)
    disk.cap(bytes_per_s)
    try:
        c0, d0 = disk.charged_read_bytes(), disk.device_read_bytes()
        r = subprocess.run([sys.executable, "-c", _READER, path, str(nbytes)], capture_output=True,
                           text=True, timeout=timeout, preexec_fn=disk.preexec())
        if r.returncode != 0:
            raise RuntimeError(f"probe reader failed: {r.stderr.strip()}")
        c1, d1 = disk.charged_read_bytes(), disk.device_read_bytes()
    finally:
        disk.cap(None)
    out = json.loads(r.stdout)
    out["cap"] = bytes_per_s
    out["rate"] = out["bytes"] / out["seconds"]
    out["ratio"] = out["rate"] / bytes_per_s if bytes_per_s else None
    out["charged"] = c1 - c0
    out["device"] = d1 - d0
    return out


def check_caps(disk, caps, log):
    """Measures a cold read of a 64 MiB probe file under each cap (bytes/s) and logs it; returns
    the measurements as one phrase for a report ("24.8 MB/s under the 25 MB/s cap, ...")."""
    probe = ensure_probe_file(disk, 64 * MiB)
    checks = []
    for c in caps:
        r = measure_read_rate(disk, c, path=probe, seconds=2.0, min_bytes=8 * MiB)
        checks.append(f"{r['rate'] / MB:.1f} MB/s under the {c / MB:g} MB/s cap")
        log(f"cap check: {checks[-1]}")
    return ", ".join(checks)


def main():
    ap = argparse.ArgumentParser(description="Self-test: create a throttled loop disk and measure "
                                 "cold read rates under caps.")
    ap.add_argument("image")
    ap.add_argument("size", help="image size, e.g. 1G")
    ap.add_argument("mountpoint")
    ap.add_argument("--caps", default="25,50,100", help="MB/s, comma separated (MB = 10^6)")
    ap.add_argument("--cgroup", default="pcrfs-throttle-test")
    ap.add_argument("--keep", action="store_true", help="keep the image file")
    args = ap.parse_args()
    m = re.fullmatch(r"(\d+)([KMG]?)", args.size.upper())
    size = int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
    with ThrottledDisk(args.image, size, args.mountpoint, cgroup_name=args.cgroup) as d:
        print(f"{d.device} ({d.majmin}) on {d.mountpoint}, cgroup {d.cgroup}"
              f"{', new file system' if d.created else ''}")
        for cap in [float(x) * MB for x in args.caps.split(",") if x] + [None]:
            r = measure_read_rate(d, cap)
            print(f"cap {cap / MB if cap else 'none':>5} MB/s: read {r['bytes'] / MB:7.1f} MB in "
                  f"{r['seconds']:5.2f} s = {r['rate'] / MB:7.1f} MB/s"
                  + (f" ({r['ratio']:.3f} of the cap)" if cap else "")
                  + f"; charged to the cgroup {r['charged'] / MB:.1f} MB, loop device "
                  f"{r['device'] / MB:.1f} MB")
    if not args.keep:
        os.unlink(args.image)


if __name__ == "__main__":
    main()
