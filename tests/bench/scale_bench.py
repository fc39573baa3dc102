#!/usr/bin/python3
"""Scale benchmark: pcrfs at 10k, 100k and 1M files, against the native tree and squashfuse.

Usage (as root, holding the shared benchmark lock):
  flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/scale_bench.py \
      [--sizes 10k,100k,1m] [--plot docs/scale.png] [--pcrfs-opts index_rss=32M,...]
      [--repeats 5] [--find-repeats 5] [--stat-files 10000] [--read-files 10000]
      [--levels 1,5,10] [--rebuild] [--out FILE] [--json FILE] [--work DIR]
  /usr/bin/python3 tests/bench/scale_bench.py --plot-only RESULTS.json --plot docs/scale.png

Run time (2 cores): 10k + 100k about 1.5 minutes with their builds; the first run with 1M adds
its builds (about 8 minutes) and about 4 minutes of measurements (the dataset itself, if it
must be generated, takes about 25 minutes more).

Data: one ImageNet-shaped tree of 1,000,000 small JPEGs (1,000 classes,
train/<class>/<class>_<index>.JPEG, short side 64..96 px, 2.4 KiB mean), generated if missing
(about 25 minutes on 2 cores) by
  tests/data/make_dataset.py /var/tmp/pcrfs-bench/tiny1m --images 1000000 --classes 1000
      --short-side 64:96 --splits train --split-fractions 1
Image i depends only on (seed, i), so the size-N dataset is the subset of files with index < N;
those are hard-link trees /var/tmp/pcrfs-bench/tiny10k, tiny100k cut from the 1M tree (or from
--superset, any complete tree holding every index < N).

Builds, once per size and reused (facts in WORK/tinyN.facts.json; --rebuild to redo; a store is
rebuilt when the pcr binary changed since, unless --keep-builds), each after
`sync; echo 3 > drop_caches` (the source is read cold, as a first build of a big tree is):
  pcr build SRC STORE -q               wall s, CPU s (user+sys), peak RSS (os.wait4 of that child)
  mksquashfs SRC IMG -noappend         the same, default compression
and the sizes: store, index (index.pcri), records, index bytes per entry (entries = files + directories,
from `pcr inspect --json`), squashfs image, native tree (du, apparent and allocated).

Measurements per size N, every "cold" one after sync + drop_caches, the programs' own files read
back into the page cache (benchlib.warm_programs), and a fresh mount; only one of our mounts is
up at a time:
  mount     `pcrfs STORE MNT` (background mode, as a user types it) timed from exec until a stat
            of MNT/scan1 answers, and until the command returned; cold, then warm (unmount and
            mount again at once). Same for `squashfuse_ll IMG MNT` (stat of MNT/train).
            --repeats rounds (default 5), median.
  find      `sh -c 'find ROOT -type f | wc -l'` (the count is checked against N), cold on a fresh
            mount and warm (again on the same mount), for native (ROOT = the source folder),
            squashfuse and pcrfs (ROOT = MNT/scan1); with every -o readdirplus= value if
            `pcrfs --help` mentions it. --find-repeats rounds (default 5), setups in rotating
            order, median.
            Kernel slab growth (/proc/meminfo SReclaimable + SUnreclaim) per find.
  stat      --stat-files random files (seeded), os.stat each, per-call latency (perf_counter_ns),
            cold (fresh mount, nothing listed before) and warm (same files again); p50/p99/mean
            µs; daemon CPU per LOOKUP = daemon CPU of the cold pass / distinct path components.
  read      --read-files random files read whole (benchlib.run_epoch, 1 reader) at each of
            --levels through MNT/scanK, cold and warm; files/s, µs/file, daemon CPU µs/file,
            bytes served and device bytes (daemon /proc/PID/io read_bytes) per file; native too.
  memory    one ladder mount through a sequence: after mount (and a first stat), after a find of
            MNT/scan1, after the stat files, after reading the read files at level 1, then at
            level 10: VmRSS, VmHWM, RssAnon, RssFile of the daemon.

Targets (issue 4), each marked PASS/FAIL per size: mount (cold) < 1 s; find <= 2x native and
faster than squashfuse (the target is read for the cold find, a fresh mount after a cache drop;
warm is checked too); daemon peak RSS (VmHWM) < 100 MiB; RSS flat in N: the largest size's
VmHWM at most 1.5x the smallest's.

Output: markdown on stdout and in --out (default /var/tmp/pcrfs-bench/scale_results.md), every
raw number in --json (default: --out with .json), a PNG (--plot, default
/var/tmp/pcrfs-bench/scale.png): log-log of build time, sizes, mount time, find time, stat
latency, daemon RSS against N, and the read cost per level. --plot-only JSON redraws the plot;
--from-json JSON reprints the markdown too. Cache drops by other processes during a measurement
(/proc/vmstat drop_pagecache beyond our own) are listed as interference in the report.
Work files (stores, images, logs, mount points) are in --work (default
/var/tmp/pcrfs-bench/scale-work). Every mount is undone in a finally block; every command has a
timeout. MB = 10^6 bytes, MiB = 2^20.
"""

import argparse
import glob
import json
import math
import os
import platform
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
from benchlib import (BENCH_ROOT, MB, REPO, Mount, MiB, count_label, fail,  # noqa: E402
                      find_tool, loadavg, log, parse_count, proc_cpu_seconds, proc_io, proc_status_kib,
                      program_files, run_epoch, verdict, vmstat, warm_programs,
                      warn_unless_bench_lock, write_results)

FULL = 1_000_000
TARGET_MOUNT_S = 1.0
TARGET_FIND_NATIVE = 2.0
TARGET_RSS = 100 * MiB
TARGET_RSS_FLAT = 1.5

DATASET_ARGS = ["--images", str(FULL), "--classes", "1000", "--short-side", "64:96",
                "--splits", "train", "--split-fractions", "1"]


# ---------------------------------------------------------------- /proc and small helpers

def meminfo_kib():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, _, v = line.partition(":")
            out[k] = int(v.split()[0])
    return out


def slab_bytes():
    m = meminfo_kib()
    return (m["SReclaimable"] + m["SUnreclaim"]) * 1024


def daemon_mem(pid):
    out = {k: proc_status_kib(pid, k) * 1024 for k in ("VmRSS", "VmHWM", "RssAnon", "RssFile",
                                                       "RssShmem")}
    out["cpu"] = proc_cpu_seconds(pid)
    out["read_bytes"] = proc_io(pid)["read_bytes"]
    out["threads"] = proc_status_kib(pid, "Threads")
    return out


# Cache drops by other processes (another benchmark on the shared machine) would make a warm
# measurement cold: /proc/vmstat drop_pagecache counts every drop, ours are counted apart.
_OWN_DROPS = 0
WARNINGS = []


def drop_caches():
    global _OWN_DROPS
    _OWN_DROPS += 1
    benchlib.drop_caches()


def foreign_drops():
    return vmstat("drop_pagecache") - _OWN_DROPS


def watch_end(what, f0):
    """Records a warning if another process dropped the caches since foreign_drops() was f0:
    the item's warm numbers (and maybe its cold ones) are then not to be trusted."""
    n = foreign_drops() - f0
    if n > 0:
        WARNINGS.append(f"{what}: {n} cache drop(s) by another process during the measurement")
        log(f"WARNING: {WARNINGS[-1]}")
    return n


def pct(values, p):
    s = sorted(values)
    if not s:
        return 0.0
    k = (len(s) - 1) * p / 100
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def run_rusage(argv, log_path, timeout):
    """Runs argv to completion; returns wall s, CPU s (user+sys) and peak RSS of that child alone
    (os.wait4), and the exit code. Kills it after timeout s."""
    with open(log_path, "wb") as logf:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT)
        timer = threading.Timer(timeout, lambda: os.kill(p.pid, signal.SIGKILL))
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
    return {"wall": wall, "cpu": ru.ru_utime + ru.ru_stime, "user": ru.ru_utime,
            "sys": ru.ru_stime, "maxrss": ru.ru_maxrss * 1024, "rc": p.returncode}


def tree_bytes(path):
    total = 0
    for d, _, names in os.walk(path):
        for n in names:
            total += os.lstat(os.path.join(d, n)).st_size
    return total


def du_bytes(path, apparent):
    argv = ["du", "-s", "-B1"] + (["--apparent-size"] if apparent else []) + [path]
    r = subprocess.run(argv, capture_output=True, text=True, check=True)
    return int(r.stdout.split()[0])


# ---------------------------------------------------------------- datasets

def live_partials(out):
    found = []
    for p in glob.glob(out + ".partial-*"):
        pid = p.rsplit("-", 1)[1]
        if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
            found.append(p)
    return found


def ensure_full(args):
    if os.path.isdir(args.data):
        return
    busy = live_partials(args.data)
    if busy:
        fail(f"{args.data} is being generated right now ({busy[0]}); wait until it is renamed")
    argv = ["/usr/bin/python3", os.path.join(REPO, "tests/data/make_dataset.py"), args.data] \
        + DATASET_ARGS
    log(f"generating the 1M dataset (15-25 min on 2 cores): {' '.join(argv)}")
    t0 = time.monotonic()
    r = subprocess.run(argv)
    if r.returncode != 0:
        fail(f"make_dataset.py failed ({r.returncode})")
    log(f"dataset generated in {time.monotonic() - t0:.0f} s")


INDEX_RE = re.compile(r"_(\d+)\.[A-Za-z]+$")


def make_subset(src, dst, n):
    """Hard-link tree of the files of src whose index (name _<index>.EXT) is below n."""
    tmp = f"{dst}.partial-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    count = 0
    for dirpath, dirnames, filenames in os.walk(src):
        dirnames.sort()
        rel = os.path.relpath(dirpath, src)
        os.makedirs(os.path.join(tmp, rel), exist_ok=True)
        for name in filenames:
            m = INDEX_RE.search(name)
            if m and int(m.group(1)) < n:
                os.link(os.path.join(dirpath, name), os.path.join(tmp, rel, name))
                count += 1
    if count != n:
        shutil.rmtree(tmp, ignore_errors=True)
        fail(f"{src} holds {count} files with index < {n}, not {n}")
    os.rename(tmp, dst)


def dataset_for(args, n):
    if n == FULL and not args.superset:
        ensure_full(args)
        return args.data
    dst = os.path.join(BENCH_ROOT, f"tiny{count_label(n).lower()}")
    if os.path.isdir(dst):
        return dst
    src = args.superset
    if not src:
        ensure_full(args)
        src = args.data
    log(f"making {dst}: hard links to the files of {src} with index < {n}")
    make_subset(src, dst, n)
    return dst


def list_files(root):
    rel = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        r = os.path.relpath(dirpath, root)
        for name in sorted(filenames):
            rel.append(name if r == "." else os.path.join(r, name))
    return rel


# ---------------------------------------------------------------- builds

def prepare_size(args, n):
    """Dataset, store and squashfs image of size n, built once; returns the facts. The store is
    rebuilt when the pcr binary changed since (unless --keep-builds); the squashfs image is
    kept."""
    src = dataset_for(args, n)
    tag = f"tiny{count_label(n).lower()}"
    store = os.path.join(args.work, tag + ".pcrstore")
    sqfs = os.path.join(args.work, tag + ".sqfs")
    facts_path = os.path.join(args.work, tag + ".facts.json")
    old = {}
    if not args.rebuild and os.path.exists(facts_path):
        with open(facts_path) as f:
            old = json.load(f)
        if old.get("src") != src or old.get("files") != n:
            old = {}
    need_store = not (old.get("build") and os.path.exists(os.path.join(store, "manifest.json")))
    if not need_store and old["built_with"]["pcr_mtime"] != os.path.getmtime(args.pcr):
        if args.keep_builds:
            log(f"{count_label(n)}: {args.pcr} changed since the store was built; reusing it "
                "(--keep-builds)")
        else:
            log(f"{count_label(n)}: {args.pcr} changed since the store was built: rebuilding it "
                "(--keep-builds to reuse it)")
            need_store = True
    need_sqfs = not (old.get("mksquashfs") and os.path.exists(sqfs))
    if not need_store and not need_sqfs:
        return old
    facts = dict(old, n=n, src=src, store=store, sqfs=sqfs)
    if need_store:
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(store + ".partial", ignore_errors=True)
        drop_caches()
        warm_programs(args.program_files)
        argv = [args.pcr, "build", src, store, "-q"] + shlex.split(args.pcr_args)
        log(f"{count_label(n)}: {' '.join(argv)} (source cold)")
        b = run_rusage(argv, os.path.join(args.work, tag + ".build.log"), args.build_timeout)
        if b["rc"] != 0:
            fail(f"pcr build failed ({b['rc']}), see {tag}.build.log in {args.work}")
        facts["build"] = b
        facts["built_with"] = {"pcr": args.pcr, "pcr_mtime": os.path.getmtime(args.pcr),
                               "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                               "load": open("/proc/loadavg").read().split()[:3]}
        r = subprocess.run([args.pcr, "inspect", store, "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"pcr inspect failed: {r.stderr}")
        insp = json.loads(r.stdout)
        facts["inspect"] = {k: insp[k] for k in ("entries", "directories", "files", "jpeg",
                                                 "passthrough", "records", "source_bytes")}
        facts["inspect"]["options"] = insp.get("options", {})
        facts["level_bytes"] = [lv["bytes"] for lv in insp["levels"]]
        facts["files"] = insp["files"]
        facts["store_bytes"] = tree_bytes(store)
        facts["index_bytes"] = os.path.getsize(benchlib.index_path(store))
        facts["records_bytes"] = tree_bytes(os.path.join(store, "records"))
        facts["record_files"] = len(os.listdir(os.path.join(store, "records")))
        facts["store_du"] = du_bytes(store, apparent=False)
    if need_sqfs:
        if os.path.exists(sqfs):
            os.unlink(sqfs)
        drop_caches()
        warm_programs(args.program_files)
        argv = ["mksquashfs", src, sqfs, "-noappend", "-no-progress", "-quiet"]
        log(f"{count_label(n)}: {' '.join(argv)} (source cold)")
        sq = run_rusage(argv, os.path.join(args.work, tag + ".mksquashfs.log"), args.build_timeout)
        if sq["rc"] != 0:
            fail(f"mksquashfs failed ({sq['rc']})")
        facts["mksquashfs"] = sq
        facts["sqfs_bytes"] = os.path.getsize(sqfs)
        facts["sqfs_date"] = time.strftime("%Y-%m-%d %H:%M:%S")
    if "native_du" not in facts:
        facts["native_apparent"] = du_bytes(src, apparent=True)
        facts["native_du"] = du_bytes(src, apparent=False)
    if facts["files"] != n:
        fail(f"{store} holds {facts['files']} files, expected {n}")
    with open(facts_path, "w") as f:
        json.dump(facts, f, indent=1)
    facts["fresh_build"] = True
    return facts


# ---------------------------------------------------------------- mounts

def pcrfs_argv(args, store, mnt, extra=(), foreground=True):
    opts = list(args.pcrfs_opts) + list(extra)
    argv = [args.pcrfs, store, mnt] + (["-f"] if foreground else [])
    if opts:
        argv += ["-o", ",".join(opts)]
    return argv


def find_pids(argv):
    want = ("\0".join(argv) + "\0").encode()
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/cmdline", "rb") as f:
                    if f.read() == want:
                        pids.append(int(d))
            except OSError:
                pass
    return pids


def pid_alive(pid):
    """False once pid has exited, zombie included: a background daemon is reparented to init,
    which may take a second or two to reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def unmount_bg(mnt, pid, timeout=60):
    """Unmounts a background daemon's mount and waits for that daemon (pid) to exit."""
    if benchlib.unmount(mnt, tries=40):
        log(f"{mnt} busy: lazy unmount")
    if pid is None:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not pid_alive(pid):
            return
        log(f"daemon {pid} still alive after unmount: {sig.name}")
        os.kill(pid, sig)
        time.sleep(2)


def time_mount(argv, mnt, probe, timeout):
    """Runs a background-mode mount command; returns (seconds until the command returned,
    seconds until a stat of probe answered, daemon pid). The caller must unmount."""
    os.makedirs(mnt, exist_ok=True)
    if os.path.ismount(mnt):
        subprocess.run(["fusermount3", "-u", mnt], check=False)
    t0 = time.perf_counter()
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout)
    t1 = time.perf_counter()
    pids = find_pids(argv)
    pid = pids[0] if len(pids) == 1 else None
    try:
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited with {r.returncode}")
        deadline = t1 + timeout
        while not os.path.ismount(mnt):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{mnt}: not mounted {timeout} s after the command returned")
            time.sleep(0.001)
        os.stat(probe)
        t2 = time.perf_counter()
    except BaseException:
        unmount_bg(mnt, pid)
        raise
    return t1 - t0, t2 - t0, pid


# ---------------------------------------------------------------- measurements

class Setups:
    """Mount points and argv for one size."""

    def __init__(self, args, facts, rel):
        self.args, self.facts, self.rel = args, facts, rel
        self.top = rel[0].split(os.sep)[0]
        self.mnt_pcrfs = os.path.join(args.work, "mnt-pcrfs")
        self.mnt_sq = os.path.join(args.work, "mnt-squashfuse")
        tag = f"tiny{count_label(facts['n']).lower()}"
        self.log_base = os.path.join(args.work, tag)

    def open(self, setup, extra=()):
        """(root of the tree, Mount or None) for setup in native, squashfuse, pcrfs."""
        if setup == "native":
            return self.facts["src"], None
        if setup == "squashfuse":
            m = Mount(["squashfuse_ll", "-f", self.facts["sqfs"], self.mnt_sq], self.mnt_sq,
                      self.log_base + ".squashfuse.log", timeout=self.args.mount_timeout)
            return self.mnt_sq, m
        m = Mount(pcrfs_argv(self.args, self.facts["store"], self.mnt_pcrfs, extra),
                  self.mnt_pcrfs, self.log_base + ".pcrfs.log", timeout=self.args.mount_timeout)
        return os.path.join(self.mnt_pcrfs, "scan1"), m


def cold_start(args):
    drop_caches()
    warm_programs(args.program_files)


def measure_mounts(args, S):
    out = {"pcrfs": {"cold": [], "warm": [], "cold_returned": [], "warm_returned": []},
           "squashfuse": {"cold": [], "warm": [], "cold_returned": [], "warm_returned": []}}
    mem_after_mount = None
    for rnd in range(args.repeats):
        order = ["pcrfs", "squashfuse"] if rnd % 2 == 0 else ["squashfuse", "pcrfs"]
        for setup in order:
            if setup == "pcrfs":
                argv = pcrfs_argv(args, S.facts["store"], S.mnt_pcrfs, foreground=False)
                mnt, probe = S.mnt_pcrfs, os.path.join(S.mnt_pcrfs, "scan1")
            else:
                argv = ["squashfuse_ll", S.facts["sqfs"], S.mnt_sq]
                mnt, probe = S.mnt_sq, os.path.join(S.mnt_sq, S.top)
            for phase in ("cold", "warm"):
                if phase == "cold":
                    cold_start(args)
                    f0 = foreign_drops()
                ret, ans, pid = time_mount(argv, mnt, probe, args.mount_timeout)
                try:
                    if setup == "pcrfs" and phase == "cold" and mem_after_mount is None and pid:
                        mem_after_mount = daemon_mem(pid)
                finally:
                    unmount_bg(mnt, pid)
                out[setup][phase].append(ans)
                out[setup][phase + "_returned"].append(ret)
                log(f"  mount {setup} {phase}: returned {ret * 1e3:.0f} ms, stat answered "
                    f"{ans * 1e3:.0f} ms")
            watch_end(f"{count_label(S.facts['n'])} mount {setup} round {rnd + 1}", f0)
    for setup in out:
        for k in list(out[setup]):
            out[setup][k + "_median"] = med(out[setup][k])
    out["pcrfs_mem_after_mount"] = mem_after_mount
    return out


def run_find(root, expect, timeout):
    s0 = slab_bytes()
    t0 = time.perf_counter()
    r = subprocess.run(["sh", "-c", f"find {shlex.quote(root)} -type f | wc -l"],
                       capture_output=True, text=True, timeout=timeout)
    t = time.perf_counter() - t0
    s1 = slab_bytes()
    count = int(r.stdout.strip() or -1)
    if count != expect:
        raise RuntimeError(f"find {root}: {count} files, expected {expect} ({r.stderr[-500:]})")
    return {"s": t, "count": count, "slab_delta": s1 - s0, "slab_after": s1}


def measure_find(args, S, variants):
    """variants: list of (name, extra pcrfs options). Returns {setup name: {cold: [...], ...}}."""
    n = S.facts["n"]
    plan = [("native", "native", ()), ("squashfuse", "squashfuse", ())] + \
        [(name, "pcrfs", extra) for name, extra in variants]
    res = {name: {"cold": [], "warm": [], "mem": []} for name, _, _ in plan}
    for rnd in range(args.find_repeats):
        k = rnd % len(plan)
        for name, setup, extra in plan[k:] + plan[:k]:
            cold_start(args)
            f0 = foreign_drops()
            root, m = S.open(setup, extra)
            try:
                if m:
                    os.stat(root)  # the daemon has opened the store
                    mem0 = daemon_mem(m.pid)
                c = run_find(root, n, args.find_timeout)
                if m:
                    mem1 = daemon_mem(m.pid)
                w = run_find(root, n, args.find_timeout)
                if m:
                    mem2 = daemon_mem(m.pid)
                    c["daemon_cpu"] = mem1["cpu"] - mem0["cpu"]
                    w["daemon_cpu"] = mem2["cpu"] - mem1["cpu"]
                    res[name]["mem"].append({"after_mount": mem0, "after_cold": mem1,
                                             "after_warm": mem2})
            finally:
                if m:
                    m.close()
            watch_end(f"{count_label(n)} find {name} round {rnd + 1}", f0)
            res[name]["cold"].append(c)
            res[name]["warm"].append(w)
            log(f"  find {name}: cold {c['s']:.2f} s (slab +{c['slab_delta'] / MiB:.0f} MiB), "
                f"warm {w['s']:.2f} s")
    for name in res:
        for phase in ("cold", "warm"):
            rows = res[name][phase]
            res[name][phase + "_s"] = med([r["s"] for r in rows])
            res[name][phase + "_slab_delta"] = med([r["slab_delta"] for r in rows])
            if rows and "daemon_cpu" in rows[0]:
                res[name][phase + "_daemon_cpu"] = med([r["daemon_cpu"] for r in rows])
    return res


def stat_pass(paths):
    lat = []
    for p in paths:
        t0 = time.perf_counter_ns()
        os.stat(p)
        lat.append(time.perf_counter_ns() - t0)
    us = [x / 1e3 for x in lat]
    return {"p50_us": pct(us, 50), "p99_us": pct(us, 99), "mean_us": statistics.fmean(us),
            "max_us": max(us), "n": len(us)}


def components(rels):
    seen = set()
    for r in rels:
        parts = r.split(os.sep)
        for i in range(1, len(parts) + 1):
            seen.add(os.sep.join(parts[:i]))
    return len(seen)


def measure_stat(args, S, sample):
    res = {}
    for setup in ("native", "squashfuse", "pcrfs"):
        cold_start(args)
        f0 = foreign_drops()
        root, m = S.open(setup)
        try:
            paths = [os.path.join(root, r) for r in sample]
            if m:
                os.stat(S.mnt_pcrfs if setup == "pcrfs" else S.mnt_sq)
                before = daemon_mem(m.pid)
            c = stat_pass(paths)
            if m:
                mid = daemon_mem(m.pid)
            w = stat_pass(paths)
            if m:
                after = daemon_mem(m.pid)
                lookups = components(sample) + (1 if setup == "pcrfs" else 0)  # + scan1
                c["lookups"] = lookups
                c["daemon_cpu"] = mid["cpu"] - before["cpu"]
                c["daemon_cpu_us_per_lookup"] = c["daemon_cpu"] / lookups * 1e6
                c["device_bytes"] = mid["read_bytes"] - before["read_bytes"]
                w["daemon_cpu"] = after["cpu"] - mid["cpu"]
                res[setup + "_mem"] = after
        finally:
            if m:
                m.close()
        watch_end(f"{count_label(S.facts['n'])} stat {setup}", f0)
        res[setup] = {"cold": c, "warm": w}
        log(f"  stat {setup}: cold p50 {c['p50_us']:.1f} µs p99 {c['p99_us']:.0f} µs, warm p50 "
            f"{w['p50_us']:.1f} µs")
    return res


def read_numbers(e, files, d0=None, d1=None):
    out = {"files_per_s": e["files_per_s"], "us_per_file": e["wall"] / files * 1e6,
           "bytes_per_file": e["bytes"] / files, "bytes": e["bytes"], "wall": e["wall"]}
    if d0 is not None:
        out["daemon_cpu_us_per_file"] = (d1["cpu"] - d0["cpu"]) / files * 1e6
        out["device_bytes_per_file"] = (d1["read_bytes"] - d0["read_bytes"]) / files
    else:
        out["device_bytes_per_file"] = e["reader_read_bytes"] / files
    return out


def measure_read(args, S, sample):
    res = {}
    files = len(sample)
    for setup, level in [("native", 0)] + [("pcrfs", k) for k in args.levels]:
        cold_start(args)
        f0 = foreign_drops()
        root, m = S.open(setup)
        if m:
            root = os.path.join(S.mnt_pcrfs, f"scan{level}")
        try:
            d0 = d1 = d2 = None
            if m:
                os.stat(root)
                d0 = daemon_mem(m.pid)
            c = run_epoch(root, sample, 1, args.timeout)
            if m:
                d1 = daemon_mem(m.pid)
            w = run_epoch(root, sample, 1, args.timeout)
            if m:
                d2 = daemon_mem(m.pid)
        finally:
            if m:
                m.close()
        key = f"L{level}" if level else "native"
        watch_end(f"{count_label(S.facts['n'])} read {key}", f0)
        res[key] = {"cold": read_numbers(c, files, d0, d1), "warm": read_numbers(w, files, d1, d2)}
        if m:
            res[key]["mem"] = d2
        log(f"  read {key}: cold {res[key]['cold']['us_per_file']:.0f} µs/file, warm "
            f"{res[key]['warm']['us_per_file']:.0f} µs/file")
    return res


def measure_memory(args, S, stat_sample, read_sample):
    """One ladder mount through mount, find, stats, reads at level 1 and 10."""
    n = S.facts["n"]
    cold_start(args)
    f0 = foreign_drops()
    root, m = S.open("pcrfs")
    steps = []
    try:
        os.stat(root)
        steps.append(("after mount", daemon_mem(m.pid), slab_bytes()))
        run_find(root, n, args.find_timeout)
        steps.append(("after find", daemon_mem(m.pid), slab_bytes()))
        stat_pass([os.path.join(root, r) for r in stat_sample])
        steps.append((f"after {len(stat_sample):,} stats", daemon_mem(m.pid), slab_bytes()))
        for k in (1, 10):
            run_epoch(os.path.join(S.mnt_pcrfs, f"scan{k}"), read_sample, 1, args.timeout)
            steps.append((f"after reading {len(read_sample):,} at L{k}", daemon_mem(m.pid),
                          slab_bytes()))
    finally:
        m.close()
    watch_end(f"{count_label(n)} memory sequence", f0)
    for name, mem, _ in steps:
        log(f"  memory {name}: VmRSS {mem['VmRSS'] / MiB:.1f} MiB (anon {mem['RssAnon'] / MiB:.1f}"
            f", file {mem['RssFile'] / MiB:.1f}), VmHWM {mem['VmHWM'] / MiB:.1f} MiB")
    return [{"step": name, "mem": mem, "slab": slab} for name, mem, slab in steps]


def measure_size(args, facts, variants):
    n = facts["n"]
    t0 = time.monotonic()
    rel = list_files(facts["src"])
    if len(rel) != n:
        fail(f"{facts['src']} holds {len(rel)} files, expected {n}")
    S = Setups(args, facts, rel)
    rng = random.Random(args.seed)
    stat_sample = rng.sample(rel, min(args.stat_files, n))
    read_sample = random.Random(args.seed + 1).sample(rel, min(args.read_files, n))
    del rel
    out = {"n": n}
    log(f"{count_label(n)}: mount times ({args.repeats} rounds)")
    out["mount"] = measure_mounts(args, S)
    log(f"{count_label(n)}: find ({args.find_repeats} rounds)")
    out["find"] = measure_find(args, S, variants)
    log(f"{count_label(n)}: stat of {len(stat_sample):,} random files")
    out["stat"] = measure_stat(args, S, stat_sample)
    log(f"{count_label(n)}: read of {len(read_sample):,} random files at levels {args.levels}")
    out["read"] = measure_read(args, S, read_sample)
    log(f"{count_label(n)}: memory sequence")
    out["memory"] = measure_memory(args, S, stat_sample, read_sample)
    out["seconds"] = time.monotonic() - t0
    return out


# ---------------------------------------------------------------- report

def fnum(x, nd=0):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,.{nd}f}"


def exponent(ns, ys):
    """Growth exponent b of y ~ N^b between the smallest and the largest N."""
    pts = [(n, y) for n, y in zip(ns, ys) if y and y > 0]
    if len(pts) < 2:
        return "-"
    (n0, y0), (n1, y1) = pts[0], pts[-1]
    return f"{math.log(y1 / y0) / math.log(n1 / n0):.2f}"


def peak_hwm(r):
    return max(s["mem"]["VmHWM"] for s in r["memory"])


def peak_anon(r):
    return max(s["mem"]["RssAnon"] for s in r["memory"])


def report(args, facts_by_n, results, variants, started, elapsed, load0):
    L = []
    ns = [r["n"] for r in results]
    labels = [count_label(n) for n in ns]
    L.append("# pcrfs scale benchmark")
    L.append("")
    head = args.head
    fresh = [count_label(n) for n in ns if facts_by_n[n].get("fresh_build")]
    L.append(f"- Date: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}, "
             f"measurements {elapsed / 60:.1f} min, builds "
             + (f"made in this run ({', '.join(fresh)})" if fresh else "reused from earlier runs")
             + f"; host {platform.node()}, "
             f"kernel {platform.release()}, {os.cpu_count()} cores, "
             f"{meminfo_kib()['MemTotal'] / 2**20:.0f} GiB RAM; load average at start {load0}, "
             f"at end {loadavg()}")
    L.append(f"- pcrfs `{args.pcrfs}` built "
             f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(args.pcrfs_mtime))}"
             f", pcr `{args.pcr}`, repository at `{head[:90]}`"
             + (" (with uncommitted changes)" if args.dirty else ""))
    L.append(f"- pcrfs options: `{','.join(args.pcrfs_opts) or '(defaults)'}`; find variants: "
             + ", ".join(f"`{name}`" for name, _ in variants))
    L.append("- Datasets: " + "; ".join(
        f"{count_label(n)}: `{facts_by_n[n]['src']}`" for n in ns)
        + " (train/<class>/<class>_<index>.JPEG, 1,000 classes, short side 64-96 px)")
    L.append(f"- Method: see the docstring of tests/bench/scale_bench.py. Cold = sync + "
             f"drop_caches + program files re-read + fresh mount. Mount: {args.repeats} rounds, "
             f"median; find: {args.find_repeats} rounds, median; stat: {args.stat_files:,} "
             f"random files (seed {args.seed}); read: {args.read_files:,} random files "
             f"(seed {args.seed + 1}), 1 reader.")
    warnings = getattr(args, "warnings", [])
    L.append("- Interference: " + ("none seen (no cache drop by another process during the "
                                   "measurements, from /proc/vmstat drop_pagecache)" if not warnings
                                   else "**" + "; ".join(warnings) + "**: rerun those"))
    L.append("")

    # Targets summary
    L.append("## Targets (issue 4)")
    L.append("")
    L.append("| N | mount cold < 1 s | " + " | ".join(
        f"find {name}: cold / warm" for name, _ in variants)
        + f" | daemon VmHWM < {TARGET_RSS / MiB:.0f} MiB |")
    L.append("|--:|:-:|" + ":-:|" * len(variants) + ":-:|")
    for r in results:
        fd = r["find"]
        cells = [count_label(r["n"]), f"{r['mount']['pcrfs']['cold_median'] * 1e3:,.0f} ms "
                 + verdict(r["mount"]["pcrfs"]["cold_median"] < TARGET_MOUNT_S)]
        for name, _ in variants:
            v = []
            for ph in ("cold", "warm"):
                x = fd[name][ph + "_s"]
                ok = x <= TARGET_FIND_NATIVE * fd["native"][ph + "_s"] and x < fd["squashfuse"][ph + "_s"]
                v.append(f"{x / fd['native'][ph + '_s']:.2f}x nat, "
                         f"{x / fd['squashfuse'][ph + '_s']:.2f}x sq {verdict(ok)}")
            cells.append(" / ".join(v))
        h = peak_hwm(r)
        cells.append(f"{h / MiB:.1f} MiB {verdict(h < TARGET_RSS)}")
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    if len(results) >= 2:
        h0, h1 = peak_hwm(results[0]), peak_hwm(results[-1])
        L.append(f"Daemon memory flat in N (VmHWM at {labels[-1]} <= {TARGET_RSS_FLAT}x {labels[0]}): "
                 f"{h1 / h0:.2f}x {verdict(h1 / h0 <= TARGET_RSS_FLAT)}. Find target read as: "
                 f"<= {TARGET_FIND_NATIVE:.0f}x native and faster than squashfuse, for the cold "
                 "find (fresh mount after a cache drop); warm shown too.")
        L.append("")

    # Builds
    L.append("## Build and sizes")
    L.append("")
    L.append("| N | pcr build wall s | images/s | CPU s | peak RSS MiB | mksquashfs wall s | "
             "CPU s | peak RSS MiB | native MB (apparent / du) | store MB | records | "
             "index MB | index B/entry | squashfs MB |")
    L.append("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for n in ns:
        f = facts_by_n[n]
        b, s = f["build"], f["mksquashfs"]
        L.append(f"| {count_label(n)} | {b['wall']:.1f} | {n / b['wall']:,.0f} | {b['cpu']:.1f} | "
                 f"{b['maxrss'] / MiB:.0f} | {s['wall']:.1f} | {s['cpu']:.1f} | "
                 f"{s['maxrss'] / MiB:.0f} | {f['native_apparent'] / MB:,.1f} / "
                 f"{f['native_du'] / MB:,.1f} | {f['store_bytes'] / MB:,.1f} | "
                 f"{f['inspect']['records']} | {f['index_bytes'] / MB:,.2f} | "
                 f"{f['index_bytes'] / f['inspect']['entries']:.0f} | {f['sqfs_bytes'] / MB:,.1f} |")
    L.append("")
    L.append("Builds: " + "; ".join(
        f"{count_label(n)} built {facts_by_n[n]['built_with']['date']} (load "
        f"{' '.join(facts_by_n[n]['built_with']['load'])})"
        + (" **by an older pcr binary**" if facts_by_n[n]["built_with"]["pcr_mtime"]
           != getattr(args, "pcr_mtime", facts_by_n[n]["built_with"]["pcr_mtime"]) else "")
        for n in ns)
        + ". Source cold (drop_caches before each build). Entries = files + directories "
        "(`pcr inspect --json`).")
    L.append("")

    # Mount
    L.append("## Mount time (exec until a stat of the tree's top answers; median)")
    L.append("")
    L.append("| N | pcrfs cold ms | pcrfs warm ms | command returned (cold) ms | squashfuse cold ms "
             f"| squashfuse warm ms | pcrfs cold < {TARGET_MOUNT_S:.0f} s |")
    L.append("|--:|--:|--:|--:|--:|--:|:-:|")
    for r in results:
        m = r["mount"]
        c = m["pcrfs"]["cold_median"]
        L.append(f"| {count_label(r['n'])} | {c * 1e3:,.0f} | {m['pcrfs']['warm_median'] * 1e3:,.0f} | "
                 f"{m['pcrfs']['cold_returned_median'] * 1e3:,.0f} | "
                 f"{m['squashfuse']['cold_median'] * 1e3:,.0f} | "
                 f"{m['squashfuse']['warm_median'] * 1e3:,.0f} | {verdict(c < TARGET_MOUNT_S)} |")
    L.append("")

    # Find
    L.append("## `find ROOT -type f | wc -l` (median s; count checked = N)")
    L.append("")
    L.append("| N | setup | cold s | warm s | slab growth cold MiB | slab B/file | daemon CPU s "
             "cold / warm | cold / native | cold / squashfuse | warm / native | warm / squashfuse "
             "| target cold | target warm |")
    L.append("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|:-:|")
    for r in results:
        fd = r["find"]
        nat, sq = fd["native"], fd["squashfuse"]
        for name, v in fd.items():
            cells = [count_label(r["n"]), name, f"{v['cold_s']:.2f}", f"{v['warm_s']:.2f}",
                     f"{v['cold_slab_delta'] / MiB:,.0f}",
                     f"{v['cold_slab_delta'] / r['n']:,.0f}",
                     (f"{v['cold_daemon_cpu']:.2f} / {v['warm_daemon_cpu']:.2f}"
                      if "cold_daemon_cpu" in v else "-")]
            if name not in ("native", "squashfuse"):
                rc, rw = v["cold_s"] / nat["cold_s"], v["warm_s"] / nat["warm_s"]
                sc, sw = v["cold_s"] / sq["cold_s"], v["warm_s"] / sq["warm_s"]
                cells += [f"{rc:.2f}x", f"{sc:.2f}x", f"{rw:.2f}x", f"{sw:.2f}x",
                          verdict(rc <= TARGET_FIND_NATIVE and sc < 1),
                          verdict(rw <= TARGET_FIND_NATIVE and sw < 1)]
            elif name == "squashfuse":
                cells += [f"{v['cold_s'] / nat['cold_s']:.2f}x", "-",
                          f"{v['warm_s'] / nat['warm_s']:.2f}x", "-", "", ""]
            else:
                cells += ["-"] * 4 + ["", ""]
            L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append(f"Target (issue 4): pcrfs find time <= {TARGET_FIND_NATIVE:.0f}x native and faster "
             "than squashfuse. Read as the cold find (a fresh mount after a cache drop: what the "
             "first listing of a dataset costs); the warm find (same mount again) is checked too. "
             "Slab growth = /proc/meminfo SReclaimable + SUnreclaim after - before the cold find "
             "(dentries and inodes the kernel instantiates for the listing).")
    L.append("")

    # Stat
    L.append("## Random stat latency (µs per os.stat)")
    L.append("")
    L.append("| N | setup | cold p50 | cold p99 | cold mean | warm p50 | warm p99 | warm mean | "
             "LOOKUPs (cold) | daemon CPU µs / LOOKUP |")
    L.append("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        for setup in ("native", "squashfuse", "pcrfs"):
            c, w = r["stat"][setup]["cold"], r["stat"][setup]["warm"]
            L.append(f"| {count_label(r['n'])} | {setup} | {c['p50_us']:.1f} | {c['p99_us']:.0f} | "
                     f"{c['mean_us']:.1f} | {w['p50_us']:.1f} | {w['p99_us']:.1f} | "
                     f"{w['mean_us']:.1f} | {c.get('lookups', '-')} | "
                     f"{fnum(c.get('daemon_cpu_us_per_lookup'), 1)} |")
    L.append("")

    # Read
    L.append("## Read cost (random files read whole, 1 reader)")
    L.append("")
    L.append("| N | share read | setup | cold files/s | cold µs/file | cold daemon CPU µs/file | "
             "cold device B/file | warm files/s | warm µs/file | bytes/file |")
    L.append("|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        share = min(args.read_files, r["n"]) / r["n"]
        for key, v in r["read"].items():
            c, w = v["cold"], v["warm"]
            L.append(f"| {count_label(r['n'])} | {share:.0%} | "
                     f"{'pcrfs ' + key if key != 'native' else key} | "
                     f"{c['files_per_s']:,.0f} | {c['us_per_file']:,.0f} | "
                     f"{fnum(c.get('daemon_cpu_us_per_file'), 0)} | "
                     f"{c['device_bytes_per_file']:,.0f} | {w['files_per_s']:,.0f} | "
                     f"{w['us_per_file']:,.1f} | {c['bytes_per_file']:,.0f} |")
    L.append("")
    L.append("Device bytes per file depend on the share of the dataset read: the daemon fetches a "
             "record's whole level-k prefix once a few percent of its files have been read "
             "(`-o prefetch`, default 3%), so a 10% sample reads about every byte of the level, "
             "while a 1% sample reads each file's pieces alone.")
    L.append("")

    # Memory
    L.append("## Daemon memory (one ladder mount through the sequence; MiB)")
    L.append("")
    steps = [s["step"] for s in results[0]["memory"]]
    L.append("| N | " + " | ".join(f"{s}: VmRSS (anon + file)" for s in steps)
             + " | VmHWM | kernel slab after find | "
             f"peak < {TARGET_RSS / MiB:.0f} MiB |")
    L.append("|--:|" + "--:|" * (len(steps) + 2) + ":-:|")
    for r in results:
        cells = [count_label(r["n"])]
        for s in r["memory"]:
            mm = s["mem"]
            cells.append(f"{mm['VmRSS'] / MiB:.1f} ({mm['RssAnon'] / MiB:.1f} + "
                         f"{mm['RssFile'] / MiB:.1f})")
        hwm = peak_hwm(r)
        cells.append(f"{hwm / MiB:.1f}")
        cells.append(f"{r['memory'][1]['slab'] / MiB:,.0f}")
        cells.append(verdict(hwm < TARGET_RSS))
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    if len(results) >= 2:
        h0, h1 = peak_hwm(results[0]), peak_hwm(results[-1])
        a0, a1 = peak_anon(results[0]), peak_anon(results[-1])
        L.append(f"Flat in N: VmHWM {h0 / MiB:.1f} MiB at {labels[0]}, {h1 / MiB:.1f} MiB at "
                 f"{labels[-1]}: {h1 / h0:.2f}x for {ns[-1] / ns[0]:,.0f}x the files "
                 f"(target <= {TARGET_RSS_FLAT}x): {verdict(h1 / h0 <= TARGET_RSS_FLAT)}. "
                 f"Anonymous memory alone (largest RssAnon of the sequence): {a0 / MiB:.1f} -> "
                 f"{a1 / MiB:.1f} MiB ({a1 / a0:.2f}x), the index among it (format 4 is held in the "
                 f"daemon's memory, about 72 bytes per file); the rest is file-backed (the "
                 f"executable).")
        L.append("")

    # Cost model
    L.append("## Cost model (growth exponent b of cost ~ N^b, smallest to largest N)")
    L.append("")
    L.append("| quantity | " + " | ".join(labels) + " | b |")
    L.append("|---|" + "--:|" * (len(labels) + 1))

    def row(name, ys, nd=1):
        L.append(f"| {name} | " + " | ".join(fnum(y, nd) for y in ys) + f" | {exponent(ns, ys)} |")

    F = [facts_by_n[n] for n in ns]
    row("pcr build wall s", [f["build"]["wall"] for f in F])
    row("pcr build CPU s", [f["build"]["cpu"] for f in F])
    row("pcr build peak RSS MiB", [f["build"]["maxrss"] / MiB for f in F])
    row("store MB", [f["store_bytes"] / MB for f in F])
    row("index MB", [f["index_bytes"] / MB for f in F], 2)
    row("index bytes / entry", [f["index_bytes"] / f["inspect"]["entries"] for f in F], 0)
    row("mount cold ms", [r["mount"]["pcrfs"]["cold_median"] * 1e3 for r in results], 0)
    row("mount warm ms", [r["mount"]["pcrfs"]["warm_median"] * 1e3 for r in results], 0)
    for name, _ in variants:
        row(f"find cold s ({name})", [r["find"][name]["cold_s"] for r in results], 2)
        row(f"find warm s ({name})", [r["find"][name]["warm_s"] for r in results], 2)
    row("find cold s (native)", [r["find"]["native"]["cold_s"] for r in results], 2)
    row("find cold s (squashfuse)", [r["find"]["squashfuse"]["cold_s"] for r in results], 2)
    row("cold stat p50 µs (LOOKUP)", [r["stat"]["pcrfs"]["cold"]["p50_us"] for r in results])
    row("daemon CPU µs / LOOKUP",
        [r["stat"]["pcrfs"]["cold"]["daemon_cpu_us_per_lookup"] for r in results])
    for k in args.levels:
        row(f"cold read µs/file L{k}", [r["read"][f"L{k}"]["cold"]["us_per_file"]
                                        for r in results], 0)
    for k in args.levels:
        row(f"warm read µs/file L{k}", [r["read"][f"L{k}"]["warm"]["us_per_file"]
                                        for r in results])
    for k in args.levels:
        row(f"daemon CPU µs/file cold L{k}",
            [r["read"][f"L{k}"]["cold"]["daemon_cpu_us_per_file"] for r in results])
    row("daemon VmHWM MiB", [peak_hwm(r) / MiB for r in results])
    L.append("")
    L.append("Bytes per file at each level (manifest), the level's share of the source:")
    L.append("")
    L.append("| N | " + " | ".join(f"L{k}" for k in range(1, 11)) + " | source |")
    L.append("|--:|" + "--:|" * 11)
    for n in ns:
        f = facts_by_n[n]
        lb = f["level_bytes"]
        L.append(f"| {count_label(n)} | " + " | ".join(f"{b / n:,.0f}" for b in lb)
                 + f" | {f['inspect']['source_bytes'] / n:,.0f} |")
    L.append("")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------- plot

def plot(data, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results, facts = data["results"], {int(k): v for k, v in data["facts"].items()}
    ns = [r["n"] for r in results]
    levels = data["levels"]
    fig, axes = plt.subplots(2, 4, figsize=(17, 8))
    C = {"pcrfs": "tab:blue", "native": "tab:green", "squashfuse": "tab:red"}

    def loglog(ax, title, ylabel):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks(ns)
        ax.set_xticklabels([count_label(n) for n in ns])
        ax.minorticks_off()
        ax.set_xticks(ns)
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(ylabel, fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        ax.tick_params(labelsize=8)

    F = [facts[n] for n in ns]
    ax = axes[0, 0]
    ax.plot(ns, [f["build"]["wall"] for f in F], "o-", c=C["pcrfs"], label="pcr build (wall)")
    ax.plot(ns, [f["build"]["cpu"] for f in F], "o:", c=C["pcrfs"], label="pcr build (CPU)")
    ax.plot(ns, [f["mksquashfs"]["wall"] for f in F], "s-", c=C["squashfuse"],
            label="mksquashfs (wall)")
    ax.plot(ns, [f["mksquashfs"]["cpu"] for f in F], "s:", c=C["squashfuse"],
            label="mksquashfs (CPU)")
    loglog(ax, "Build time", "seconds")
    ax.legend(fontsize=7)

    ax = axes[0, 1]
    ax.plot(ns, [f["store_bytes"] / MB for f in F], "o-", c=C["pcrfs"], label="pcrfs store")
    ax.plot(ns, [f["index_bytes"] / MB for f in F], "o--", c="tab:purple", label="index (index.pcri)")
    ax.plot(ns, [f["sqfs_bytes"] / MB for f in F], "s-", c=C["squashfuse"], label="squashfs image")
    ax.plot(ns, [f["native_apparent"] / MB for f in F], "^-", c=C["native"],
            label="native (apparent)")
    ax.plot(ns, [f["native_du"] / MB for f in F], "^:", c=C["native"], label="native (du)")
    loglog(ax, "Size (index: " + ", ".join(
        f"{f['index_bytes'] / f['inspect']['entries']:.0f}" for f in F) + " B/entry)", "MB")
    ax.legend(fontsize=7)

    ax = axes[0, 2]
    for setup, mk in (("pcrfs", "o"), ("squashfuse", "s")):
        ax.plot(ns, [r["mount"][setup]["cold_median"] * 1e3 for r in results], mk + "-",
                c=C[setup], label=f"{setup} cold")
        ax.plot(ns, [r["mount"][setup]["warm_median"] * 1e3 for r in results], mk + ":",
                c=C[setup], label=f"{setup} warm")
    ax.axhline(TARGET_MOUNT_S * 1e3, c="grey", lw=0.8, ls="--", label="target 1 s")
    loglog(ax, "Mount time (exec to first stat)", "ms")
    ax.legend(fontsize=7)

    ax = axes[0, 3]
    names = list(results[0]["find"].keys())
    styles = ["o", "D", "v", "P", "X"]
    shades = ["tab:blue", "tab:cyan", "tab:purple", "tab:olive", "tab:brown"]
    for i, name in enumerate(names):
        j = i - 2
        c = C.get(name) or shades[j % len(shades)]
        mk = {"native": "^", "squashfuse": "s"}.get(name, styles[j % len(styles)])
        ax.plot(ns, [r["find"][name]["cold_s"] for r in results], mk + "-", c=c,
                label=f"{name} cold")
        ax.plot(ns, [r["find"][name]["warm_s"] for r in results], mk + ":", c=c,
                label=f"{name} warm")
    loglog(ax, "find -type f | wc -l", "seconds")
    ax.legend(fontsize=6, ncol=2)

    ax = axes[1, 0]
    for setup, mk in (("native", "^"), ("squashfuse", "s"), ("pcrfs", "o")):
        ax.plot(ns, [r["stat"][setup]["cold"]["p50_us"] for r in results], mk + "-", c=C[setup],
                label=f"{setup} cold p50")
        ax.plot(ns, [r["stat"][setup]["cold"]["p99_us"] for r in results], mk + "--",
                c=C[setup], alpha=0.5, label=f"{setup} cold p99")
        ax.plot(ns, [r["stat"][setup]["warm"]["p50_us"] for r in results], mk + ":", c=C[setup],
                label=f"{setup} warm p50")
    loglog(ax, "Random stat latency", "µs per stat")
    ax.legend(fontsize=6, ncol=2)

    ax = axes[1, 1]
    steps = [s["step"] for s in results[0]["memory"]]
    for i, st in enumerate(steps):
        ax.plot(ns, [r["memory"][i]["mem"]["VmRSS"] / MiB for r in results], "o-",
                label=f"VmRSS {st}", alpha=0.8)
    ax.plot(ns, [peak_hwm(r) / MiB for r in results], "k*--", label="VmHWM (peak)")
    ax.axhline(TARGET_RSS / MiB, c="grey", lw=0.8, ls="--", label="target 100 MiB")
    loglog(ax, "pcrfs daemon memory", "MiB")
    ax.legend(fontsize=6)

    ax = axes[1, 2]
    cmap = plt.get_cmap("viridis")
    for j, r in enumerate(results):
        col = cmap(j / max(1, len(results) - 1) * 0.85)
        ax.plot(levels, [r["read"][f"L{k}"]["cold"]["us_per_file"] for k in levels], "o-",
                c=col, label=f"{count_label(r['n'])} cold")
        ax.plot(levels, [r["read"][f"L{k}"]["warm"]["us_per_file"] for k in levels], "o:",
                c=col, label=f"{count_label(r['n'])} warm")
        ax.plot(levels, [r["read"][f"L{k}"]["cold"]["daemon_cpu_us_per_file"] for k in levels],
                "x--", c=col, alpha=0.6, label=f"{count_label(r['n'])} daemon CPU (cold)")
        nat = r["read"]["native"]
        ax.axhline(nat["cold"]["us_per_file"], c=col, lw=0.7, ls="-.", alpha=0.7)
    ax.set_yscale("log")
    ax.set_xticks(levels)
    ax.set_xlabel("level (dash-dot: native cold)", fontsize=8)
    ax.set_ylabel("µs per file", fontsize=9)
    ax.set_title("Read cost per level (random files)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=6, ncol=1)

    ax = axes[1, 3]
    for j, n in enumerate(ns):
        col = cmap(j / max(1, len(ns) - 1) * 0.85)
        f = facts[n]
        ax.plot(range(1, 11), [b / n for b in f["level_bytes"]], "o-", c=col,
                label=f"{count_label(n)} served (manifest)")
        r = results[j]
        ax.plot(levels, [r["read"][f"L{k}"]["cold"]["device_bytes_per_file"] for k in levels],
                "x--", c=col, label=f"{count_label(n)} device (cold)")
        ax.axhline(f["inspect"]["source_bytes"] / n, c=col, lw=0.7, ls="-.")
    ax.set_yscale("log")
    ax.set_xticks(range(1, 11))
    ax.set_xlabel("level (dash-dot: source)", fontsize=8)
    ax.set_ylabel("bytes per file", fontsize=9)
    ax.set_title("Bytes per file per level", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.tick_params(labelsize=8)
    ax.legend(fontsize=6)

    fig.suptitle(f"pcrfs at {', '.join(count_label(n) for n in ns)} files: small JPEGs, 1,000 classes "
                 f"({data.get('date', '')}, {data.get('commit', '')[:7]})", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=72)
    plt.close(fig)
    from PIL import Image  # 256-colour palette: a third of the RGB PNG's size
    Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)
    log(f"plot written to {path} ({os.path.getsize(path) / 1024:.0f} KiB)")


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(
        description="pcrfs scale benchmark (10k/100k/1M files) against native and squashfuse; "
                    "the method is in the module docstring at the top of this file.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10k,100k,1m",
                    help="dataset sizes (default %(default)s; at most 1m)")
    ap.add_argument("--data", default=f"{BENCH_ROOT}/tiny1m",
                    help="the 1M-image tree (generated if missing; default %(default)s)")
    ap.add_argument("--superset", help="cut the smaller datasets from this tree instead of --data "
                    "(any complete tree holding every index < N)")
    ap.add_argument("--work", default=f"{BENCH_ROOT}/scale-work",
                    help="stores, squashfs images, logs, mount points (default %(default)s)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild stores and squashfs images")
    ap.add_argument("--keep-builds", action="store_true",
                    help="reuse earlier builds even if the pcr binary changed since (by default "
                         "a size is rebuilt when its store was made by another pcr build)")
    ap.add_argument("--pcr-args", default="", help="extra `pcr build` options (one string)")
    ap.add_argument("--pcrfs-opts", default="",
                    help="extra pcrfs -o options for every mount, e.g. index_rss=32M,threads=4")
    ap.add_argument("--repeats", type=int, default=5, help="mount time rounds (default 5)")
    ap.add_argument("--find-repeats", type=int, default=5, help="find rounds (default 5)")
    ap.add_argument("--stat-files", type=int, default=10000, help="random files stat'ed")
    ap.add_argument("--read-files", type=int, default=10000, help="random files read")
    ap.add_argument("--levels", default="1,5,10", help="read levels (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1, help="sampling seed (default 1)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per read epoch")
    ap.add_argument("--find-timeout", type=float, default=1800, help="seconds per find")
    ap.add_argument("--mount-timeout", type=float, default=120, help="seconds per mount")
    ap.add_argument("--build-timeout", type=float, default=6 * 3600, help="seconds per build")
    ap.add_argument("--out", default=f"{BENCH_ROOT}/scale_results.md", help="results (markdown)")
    ap.add_argument("--json", help="raw numbers (default: --out with .json)")
    ap.add_argument("--plot", default=f"{BENCH_ROOT}/scale.png", help="PNG (default %(default)s)")
    ap.add_argument("--plot-only", metavar="JSON", help="only redraw --plot from a results JSON")
    ap.add_argument("--from-json", metavar="JSON",
                    help="print the markdown of an earlier run (its JSON) and redraw --plot")
    args = ap.parse_args()

    if args.plot_only:
        with open(args.plot_only) as f:
            plot(json.load(f), args.plot)
        return
    if args.from_json:  # re-renders the markdown and the plot of an earlier run
        with open(args.from_json) as f:
            data = json.load(f)
        for k, v in data["settings"].items():
            setattr(args, k, v)
        facts_by_n = {int(k): v for k, v in data["facts"].items()}
        variants = [(name, ()) for name in data["variants"]]
        text = report(args, facts_by_n, data["results"], variants,
                      data["started"], data["measure_seconds"], data["load0"])
        sys.stdout.write(text)
        plot(data, args.plot)
        return
    if os.geteuid() != 0:
        fail("needs root (drop_caches and FUSE mounts)")
    for tool in ("mksquashfs", "squashfuse_ll", "fusermount3"):
        if not shutil.which(tool):
            fail(f"{tool} not found: apt-get install -y squashfs-tools squashfuse fuse3")
    try:
        sizes = sorted({parse_count(s) for s in args.sizes.split(",") if s})
    except argparse.ArgumentTypeError as e:
        fail(str(e))
    if not sizes or sizes[0] < 1 or sizes[-1] > FULL:
        fail(f"sizes must be in 1..{FULL}")
    args.levels = [int(x) for x in args.levels.split(",")]
    if any(not 1 <= k <= 10 for k in args.levels):
        fail("levels are 1..10")
    args.pcrfs_opts = [o for o in args.pcrfs_opts.split(",") if o]
    if any(o.startswith(("scans=", "msssim=")) for o in args.pcrfs_opts):
        fail("--pcrfs-opts: the benchmark needs the ladder root (no scans=/msssim=)")
    args.data = os.path.abspath(args.data)
    if args.superset:
        args.superset = os.path.abspath(args.superset)
    args.json = args.json or os.path.splitext(args.out)[0] + ".json"
    args.pcr = find_tool("mount-tools/pcr", "pcr")
    args.pcrfs = find_tool("fs/pcrfs", "pcrfs")
    args.pcrfs_mtime = os.path.getmtime(args.pcrfs)
    args.pcr_mtime = os.path.getmtime(args.pcr)
    args.head = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s"],
                               capture_output=True, text=True).stdout.strip()
    progs = set(program_files(args.pcrfs)) | set(program_files(shutil.which("squashfuse_ll")))
    for tool in ("find", "wc", "sh", "fusermount3", "du", "mksquashfs"):
        progs |= set(program_files(shutil.which(tool)))
    progs |= set(program_files(args.pcr))
    args.program_files = sorted(progs)
    args.dirty = bool(subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "fs",
                                      "index", "format", "mount-tools"],
                                     capture_output=True, text=True).stdout.strip())
    os.makedirs(args.work, exist_ok=True)

    helptext = subprocess.run([args.pcrfs, "--help"], capture_output=True, text=True)
    helptext = helptext.stdout + helptext.stderr
    if "readdirplus" in helptext and not any(o.startswith("readdirplus=")
                                             for o in args.pcrfs_opts):
        variants = [(f"pcrfs rdp={v}", (f"readdirplus={v}",)) for v in ("yes", "no", "auto")]
    else:
        variants = [("pcrfs", ())]

    warn_unless_bench_lock()
    started = time.time()
    load0 = loadavg()
    log(f"sizes {[count_label(n) for n in sizes]}, pcrfs {args.pcrfs}, find variants "
        f"{[v[0] for v in variants]}")
    facts_by_n = {}
    for n in sizes:
        facts_by_n[n] = prepare_size(args, n)
    t_measure = time.time()
    results = []
    for n in sizes:
        results.append(measure_size(args, facts_by_n[n], variants))
    elapsed = time.time() - t_measure
    args.warnings = WARNINGS

    text = report(args, facts_by_n, results, variants, t_measure, elapsed, load0)
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    data = {"date": time.strftime("%Y-%m-%d", time.localtime(started)), "commit": commit,
            "dirty": args.dirty, "argv": sys.argv, "levels": args.levels,
            "variants": [v[0] for v in variants], "pcrfs_opts": args.pcrfs_opts,
            "facts": facts_by_n, "results": results, "started": t_measure, "load0": load0,
            "settings": {k: getattr(args, k) for k in (
                "pcrfs", "pcrfs_mtime", "pcr_mtime", "head", "warnings", "pcr", "dirty", "pcrfs_opts", "repeats", "find_repeats", "stat_files",
                "read_files", "seed", "levels")},
            "run_seconds": time.time() - started, "measure_seconds": elapsed}
    write_results(text, args.out, args.json, data)
    plot(data, args.plot)
    log(f"results written to {args.out} and {args.json}; total "
        f"{(time.time() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
