"""What the benchmark scripts in tests/bench share: logging, the tools and the work folder, the
page cache (drop_caches, program files read back after a drop), /proc readers, FUSE mounts run
as children and unmounted with retries, reader processes and their epochs, verdicts, and the
results files. Every benchmark runs under the bench lock (BENCH_LOCK, with flock(1)); this
module does not take it, and warn_unless_bench_lock() says when it is not held.

Imported by the scripts beside it (sys.path holds this folder when a script is run by path).
"""

import array
import json
import multiprocessing
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH_ROOT = "/var/tmp/pcrfs-bench"
BENCH_LOCK = os.path.join(BENCH_ROOT, "bench.lock")
MB = 1e6
MiB = 1 << 20

# The running script's name, for log lines and error messages ("read_bench").
NAME = os.path.splitext(os.path.basename(sys.argv[0] or "bench"))[0] or "bench"
# The exit code of fail() (a script may document another one).
FAIL_CODE = 2


def log(msg):
    print(f"[{NAME} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"{NAME}: {msg}", file=sys.stderr)
    sys.exit(FAIL_CODE)


def unmount(mnt, tries=20):
    """Unmounts mnt, every 0.25 s up to `tries` times, then lazily; True if it had to be lazy."""
    for _ in range(tries):
        if not os.path.ismount(mnt):
            return False
        if subprocess.run(["fusermount3", "-u", mnt], capture_output=True).returncode == 0:
            return False
        time.sleep(0.25)
    subprocess.run(["fusermount3", "-uz", mnt], stderr=subprocess.DEVNULL)
    return True


def stop_mount(mnt, proc, tries=20):
    """Unmounts mnt (lazily if it stays busy) and waits for its foreground daemon `proc` (a
    Popen), killing it after 60 s."""
    unmount(mnt, tries)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def sh(*argv, **kw):
    """Runs argv; its stdout, or fail() with the end of its stderr."""
    p = subprocess.run(argv, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        fail(f"{' '.join(argv[:3])} ... failed: {(p.stderr or p.stdout).strip()[-400:]}")
    return p.stdout


def loadavg():
    """The 1, 5 and 15 minute load averages, as the results headers print them."""
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def find_tool(build_rel, name, given=None):
    """`given` if set, else REPO/build/build_rel if built, else `name` on PATH; fails if none."""
    if given:
        return os.path.abspath(given)
    p = os.path.join(REPO, "build", build_rel)
    if os.access(p, os.X_OK):
        return p
    p = shutil.which(name)
    if not p:
        fail(f"{name} not found (build the project: ninja -C {REPO}/build)")
    return p


def parse_size(text):
    """Bytes of "512", "64K", "512M", "2G" (powers of 2), or None."""
    m = re.fullmatch(r"(\d+)([KMGkmg]?)", text.strip())
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]


def parse_count(text):
    """A count such as "10k", "1.5m", "2000" (powers of 10); an argparse type."""
    import argparse
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (e.g. 10k, 100k, 1m)")
    return int(round(float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6}[m.group(2).lower()]))


def count_label(n):
    """"1M", "10k" or "1234": a count as parse_count reads it back."""
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}M"
    if n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


# ---------------------------------------------------------------- the bench lock

def bench_lock_holders():
    """The pids that hold BENCH_LOCK (from /proc/locks; waiters left out)."""
    try:
        st = os.stat(BENCH_LOCK)
    except OSError:
        return set()
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    holders = set()
    with open("/proc/locks") as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 6 and fields[1] != "->" and fields[5] == want:
                holders.add(int(fields[4]))
    return holders


def ancestors(pid=None):
    """This process (or pid) and every parent up to init."""
    pid = pid or os.getpid()
    out = []
    while pid > 0:
        out.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            break
    return out


def warn_unless_bench_lock():
    """Logs a warning unless this process or an ancestor holds BENCH_LOCK, as it does when run as
    `flock BENCH_LOCK script ...`: timings taken beside another benchmark mean nothing."""
    if not bench_lock_holders() & set(ancestors()):
        log(f"WARNING: not run under `flock {BENCH_LOCK}`: another benchmark may run at the "
            "same time")


# ---------------------------------------------------------------- the page cache and /proc

def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def vmstat(key):
    with open("/proc/vmstat") as f:
        for line in f:
            k, v = line.split()
            if k == key:
                return int(v)
    return 0


def page_cache_drops():
    """How many times anyone wrote 1 or 3 to /proc/sys/vm/drop_caches since boot (/proc/vmstat
    drop_pagecache): a measurement during which another process dropped the caches is suspect."""
    return vmstat("drop_pagecache")


def proc_io(pid="self"):
    out = {}
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k.strip()] = int(v)
    return out


def proc_cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def daemon_snapshot(pid):
    return {"read_bytes": proc_io(pid)["read_bytes"], "cpu": proc_cpu_seconds(pid),
            "hwm": proc_status_kib(pid, "VmHWM") * 1024, "rss": proc_status_kib(pid, "VmRSS") * 1024}


def program_files(exe):
    """The executable exe, its shared libraries (ldd), and every file this Python process maps."""
    paths = {exe}
    r = subprocess.run(["ldd", exe], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        for tok in line.split():
            if tok.startswith("/"):
                paths.add(tok)
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].startswith("/"):
                paths.add(parts[5].strip())
    return sorted(p for p in paths if os.path.isfile(p))


def warm_programs(paths):
    """Reads program files back into the page cache after a cache drop, so that a daemon's
    (or a reader's) page faults on its own code are not counted as device bytes of the data.
    A 10 MB pcrfs binary with debug info plus its libraries otherwise adds ~14 MB at mount."""
    for p in paths:
        try:
            with open(p, "rb") as f:
                while f.read(1 << 20):
                    pass
        except OSError:
            pass


# ---------------------------------------------------------------- mounts

class Mount:
    """A FUSE daemon run in the foreground as our child; unmounted and reaped in close()."""

    def __init__(self, argv, mnt, log_path, timeout=30):
        self.mnt = mnt
        self.argv = argv
        os.makedirs(mnt, exist_ok=True)
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-u", mnt], check=False)
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None:
                self.log.close()
                with open(log_path, errors="replace") as f:
                    tail = f.read()[-2000:]
                raise RuntimeError(f"{argv[0]} exited with {self.proc.returncode}: {tail}")
            if time.monotonic() > deadline:
                self.close()
                raise TimeoutError(f"{' '.join(argv)}: not mounted after {timeout} s")
            time.sleep(0.02)
        self.pid = self.proc.pid

    def log_offset(self):
        self.log.flush()
        return os.path.getsize(self.log_path)

    def close(self):
        if self.proc is None:
            return
        try:
            for attempt in range(20):
                if not os.path.ismount(self.mnt):
                    break
                r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
                if r.returncode == 0:
                    break
                time.sleep(0.25)
            else:
                log(f"{self.mnt} busy: lazy unmount")
                subprocess.run(["fusermount3", "-uz", self.mnt], check=False)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            self.proc = None
            self.log.close()


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


# ---------------------------------------------------------------- files and commands

def walk_files(root):
    """(paths of the regular files under root relative to it, in sorted walk order, their total
    size)."""
    rel, total = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            if not os.path.isfile(p) or os.path.islink(p):
                continue
            rel.append(os.path.relpath(p, root))
            total += st.st_size
    return rel, total


def list_tree(root):
    """Recursive os.scandir walk, like a training framework listing its dataset: the files'
    paths relative to root (d_type only, no stat), sorted."""
    out, stack = [], [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(root, rel)) as it:
            for e in it:
                p = os.path.join(rel, e.name)
                if e.is_dir(follow_symlinks=False):
                    stack.append(p)
                elif e.is_file(follow_symlinks=False):
                    out.append(p)
    out.sort()
    return out


def timed(argv, what):
    """Seconds `argv` took; fails with the end of its output if it fails."""
    log(f"{what}: {' '.join(argv)}")
    t0 = time.monotonic()
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        fail(f"{what} failed ({r.returncode}):\n{r.stdout.decode(errors='replace')[-3000:]}")
    return time.monotonic() - t0


# ---------------------------------------------------------------- readers and epochs

def reader_main(paths, start_evt, conn, style="raw", cgroup=None):
    try:
        buf = bytearray(1 << 20)
        mv = memoryview(buf)
        io0 = proc_io()["read_bytes"]
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        cg = cgroup() if cgroup else None
        start_evt.wait()
        t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        nbytes = 0
        done = array.array("q")
        for p in paths:
            if style == "python":  # what PIL's Image.open(path) and torchvision's loader do:
                with open(p, "rb") as f:  # open() calls isatty(): ioctl(TCGETS)
                    while True:
                        n = f.readinto(mv)
                        if not n:
                            break
                        nbytes += n
            else:
                fd = os.open(p, os.O_RDONLY)
                try:
                    while True:
                        n = os.readv(fd, [mv])
                        if n == 0:
                            break
                        nbytes += n
                finally:
                    os.close(fd)
            done.append(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
        t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        io1 = proc_io()["read_bytes"]
        conn.send({"ok": True, "t0": t0, "t1": t1, "files": len(paths), "bytes": nbytes,
                   "read_bytes": io1 - io0, "cgroup": cg, "done": done.tobytes(),
                   "cpu": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)})
    except BaseException as e:  # report anything, including KeyboardInterrupt
        conn.send({"ok": False, "error": f"{type(e).__name__}: {e}"})
    finally:
        conn.close()


def run_epoch(root, rel_paths, readers, timeout, style="raw", on_start=None, cgroup=None,
              timeline=False):
    """Reads every file of rel_paths under root once with `readers` forked processes (the list
    dealt round-robin); returns the epoch's numbers. style "raw": os.open + readv + os.close;
    "python": open(path, "rb") + readinto. on_start() runs just before the readers are released
    (counters); cgroup() names a reader's cgroup (reader_cgroups); with timeline the start and
    the end of every file are kept (start_ns, done_ns: monotonic nanoseconds)."""
    ctx = multiprocessing.get_context("fork")
    start_evt = ctx.Event()
    procs, conns = [], []
    for i in range(readers):
        parent, child = ctx.Pipe(duplex=False)
        paths = [os.path.join(root, p) for p in rel_paths[i::readers]]
        pr = ctx.Process(target=reader_main, args=(paths, start_evt, child, style, cgroup),
                         daemon=True)
        pr.start()
        child.close()
        procs.append(pr)
        conns.append(parent)
    results = []
    try:
        time.sleep(0.05)  # let the readers reach the start line
        if on_start:
            on_start()
        start_evt.set()
        deadline = time.monotonic() + timeout
        for c in conns:
            left = deadline - time.monotonic()
            if left <= 0 or not c.poll(left):
                raise TimeoutError(f"epoch under {root} took longer than {timeout} s")
            r = c.recv()
            if not r["ok"]:
                raise RuntimeError(f"reader failed under {root}: {r['error']}")
            results.append(r)
    finally:
        done = len(results) == len(procs)
        for pr in procs:
            pr.join(5 if done else 0)
            if pr.is_alive():
                pr.kill()
                pr.join()
    start = min(r["t0"] for r in results)
    wall = (max(r["t1"] for r in results) - start) / 1e9
    files = sum(r["files"] for r in results)
    nbytes = sum(r["bytes"] for r in results)
    done = sorted(t for r in results for t in array.array("q", r["done"]))
    # Seconds from the start until 10%, 50%, 90% and all of the files were read.
    progress = {f"t{q}": (done[max(0, int(len(done) * q / 100) - 1)] - start) / 1e9
                for q in (10, 50, 90, 100)} if done else {}
    out = {"wall": wall, "files": files, "bytes": nbytes, "progress": progress,
           "reader_read_bytes": sum(r["read_bytes"] for r in results),
           "reader_cpu": sum(r["cpu"] for r in results),
           "files_per_s": files / wall, "mb_per_s": nbytes / MB / wall}
    if timeline:
        out.update(start_ns=start, done_ns=done)
    if cgroup:
        out["reader_cgroups"] = sorted({r["cgroup"] for r in results})
    return out


# ---------------------------------------------------------------- results

def index_path(store):
    """A store's index: index.pcri (format 4), or an older store's index.lmdb."""
    compact = os.path.join(store, "index.pcri")
    return compact if os.path.exists(compact) else os.path.join(store, "index.lmdb")


def fmt_mb(b):
    return f"{b / MB:,.1f}"


def verdict(ok, fail_mark="**FAIL**"):
    """A target's mark in a results table: PASS, FAIL (bold by default) or n/a (ok is None)."""
    return "n/a" if ok is None else ("PASS" if ok else fail_mark)


def save_figure(fig, path, **savefig_kw):
    """Saves a matplotlib figure (its folder made as needed) and closes it; returns the file's
    size."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, **savefig_kw)
    plt.close(fig)
    return os.path.getsize(path)


def write_results(text, out, json_path=None, data=None, json_default=None):
    """Prints the markdown results and writes them to `out` (its folder made as needed), and
    `data` as JSON to json_path if given."""
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
    sys.stdout.flush()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(data, f, indent=1, default=json_default)
