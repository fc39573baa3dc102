#!/usr/bin/python3
"""Bandwidth-capped reads: a full epoch natively and through pcrfs from the same capped storage.

Usage:
  tests/bench/bwcap_bench.py                     # 10,000 images, caps 25/50/100 MB/s + uncapped
  tests/bench/bwcap_bench.py --quick             # 2,000 images, 1 round: a smoke test
  tests/bench/bwcap_bench.py [--data DIR] [--caps 25,50,100] [--levels 1,2,5,10] [--readers 4]
                             [--repeat 3] [--seed 1] [--rebuild] [-o OPT ...] [--out FILE]
                             [--json FILE] [--plot FILE] [--pcrfs BIN] [--pcr BIN]

Storage: the image folder (--data, default /var/tmp/pcrfs-bench/imagenet10k, generated with
tests/data/make_dataset.py --images 10000 --seed 1 if missing) is copied, and a store is built
from the copy with `pcr build` (defaults), onto one ext4 file system on a loop device with direct
I/O to its backing file (--disk-image, default /var/tmp/pcrfs-bench/bwcap.img; built once and
reused, --rebuild to copy and build again). tests/bench/throttle.py (ThrottledDisk) caps reads
from the loop device with a cgroup v1 blkio throttle (blkio.throttle.read_bps_device) for the
processes of the cgroup --cgroup. This process joins the cgroup at the start, so everything it
forks is capped too: the reader processes and the pcrfs daemons (which do the device reads for
FUSE); every epoch checks /proc/PID/cgroup of the daemon and of the readers. Before the
measurements, each round checks each cap with a cold sequential read of a 320 MiB probe file
(throttle.measure_read_rate) and reports the rate it measured.

Setups, per cap (--caps, MB/s with MB = 10^6; default 25,50,100) and uncapped: native (the
folder on the loop file system) and pcrfs at each level of --levels (default 1,2,5,10), one
`pcrfs STORE MNT -f -o scans=K` mount per level and epoch.

One epoch, every setup alike: the cap is set; the loop file system is unmounted and mounted
again (ThrottledDisk.drop_caches: its page cache, dentries and inodes go, and the image is never
cached, being read with direct I/O), which makes everything on the capped disk cold without a
global drop_caches that would empty the page cache of everyone else on a shared machine
(--global-drop does `sync; echo 3 > /proc/sys/vm/drop_caches` instead); the programs' own files
(the daemon binary, its libraries, what this Python maps; on the root file system, not on the
capped disk) are read back into the page cache, as in read_bench.py; the pcrfs mount (timed: the daemon reads the index at mount); the listing: a
recursive os.scandir walk of the tree, as a training framework lists its dataset (timed and
reported apart, before the epoch's timer starts); then the epoch: R forked reader processes
(--readers, default 4, I/O-bound readers like a DataLoader's workers) read every listed file
once (open, readv into a 1 MiB buffer to EOF, close) in a seeded random order (the sorted
listing shuffled with seed --seed + round, the same order for every setup of a round), dealt
round-robin between the readers. Epoch wall time = first reader start to last reader end.
Only one of our mounts is up at a time. Another process writing to drop_caches during an epoch
(/proc/vmstat drop_pagecache) evicts what the daemon prefetched, which it then reads twice: such
an epoch is run again (--retries, default 3) and listed in the report. Rounds: --repeat (default 3); in each round the caps
come in a rotated order, and within a cap the setups in a rotated order, so that load from
elsewhere on a shared machine hits every setup alike; medians over the rounds are reported.

Measured per epoch: files/s and MB/s served; device bytes: the cgroup's
blkio.throttle.io_service_bytes Read for the loop device (everything the cgroup read from the
capped device), the daemon's /proc/PID/io read_bytes (pcrfs) or the readers' own (native), and
the loop device's sectors read (/sys/block/loopN/stat), each as a delta over the epoch, and
over the mount + listing apart; achieved device MB/s = cgroup read bytes / epoch wall, next to
the cap; CPU seconds (utime + stime) of the daemon (/proc/PID/stat) and of the readers
(getrusage), the daemon's utilisation (CPU s / wall s; 100% = one core, the machine has 200%),
and the whole machine's busy CPU from /proc/stat (other users' work included, niced work
apart); progress: when 10/50/90/100% of the files had been read (--timeline also keeps, in the JSON,
the cgroup's read bytes and the files done every 10 ms; the JSON's busy_share, the share of
200 ms windows with the device at >= 80% of the cap, is coarse: the counter moves in bunches,
up to a record's whole prefix when the prefetcher queues it).

--variant OPT (repeatable) adds pcrfs at every level with an extra -o option as a setup of its
own, side by side (e.g. --variant prefetch=0, the record-prefix prefetcher off). --pcrfs-b BIN
adds another pcrfs binary the same way (setups "pcrfs Lk B", same options, same store), and a
table of its files/s over the first binary's per cap and level: a before/after comparison of
two builds in one interleaved run.

Target (from the issue), per cap and level k:
  pcrfs files/s >= 0.9 x (native bytes / level-k bytes) x native files/s
with native bytes and level bytes the bytes the epochs served (level k = manifest.json
level_bytes[k-1], checked), every number from this run, medians over the rounds. The daemon is
flagged as the bottleneck of an epoch if the device rate stays under 85% of the cap while the
daemon uses >= 80% of a core, or the machine's CPU is >= 90% busy; the uncapped row is a
reference (not bandwidth-bound), reported without a verdict.

Needs root (drop_caches, FUSE and loop mounts, cgroups), cgroup v1 blkio, python3-matplotlib
(hence /usr/bin/python3), pcr and pcrfs (default /usr/local/bin, else build/, else PATH; copied
to WORK/bin at the start so that a reinstall during the run cannot mix binaries). Results:
markdown on stdout and in --out (default /var/tmp/pcrfs-bench/bwcap_results.md), JSON (--json,
default --out with .json), PNG plot (--plot, default docs/bwcap.png; with --quick
/var/tmp/pcrfs-bench/bwcap_quick.png). Every mount is undone in a finally block; caps are
removed at exit; every epoch has a timeout (--timeout).
"""

import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (BENCH_ROOT, MB, REPO, Mount, MiB, save_figure, write_results, daemon_snapshot,  # noqa: E402
                      drop_caches, fail, fmt_mb, list_tree, loadavg, log, page_cache_drops,
                      proc_cpu_seconds, proc_io, program_files, run_epoch, timed, walk_files,
                      warm_programs, warn_unless_bench_lock)
from throttle import ThrottledDisk, cgroup_of, measure_read_rate, ensure_probe_file  # noqa: E402

GiB = 1 << 30

TARGET_FACTOR = 0.9
CAP_REACHED = 0.85        # device rate / cap above which the cap is the limit
DAEMON_CPU_BUSY = 0.8     # cores: a daemon this busy could be the limit
MACHINE_CPU_BUSY = 0.9    # fraction of all cores


def machine_cpu():
    """(busy jiffies without nice, nice jiffies, total jiffies) over all cores from /proc/stat;
    idle and iowait count as idle. Niced work (e.g. a background dataset generation) is apart:
    it yields the CPU to ours."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    return user + system + irq + softirq + steal, nice, sum(v[:8])


# ---------------------------------------------------------------- preparation

def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pick_tool(explicit, name, build_rel):
    for p in ([explicit] if explicit else [f"/usr/local/bin/{name}",
                                          os.path.join(REPO, "build", build_rel),
                                          shutil.which(name)]):
        if p and os.access(p, os.X_OK):
            return os.path.abspath(p)
    fail(f"{name} not found (--{name} BIN)")


def freeze_tools(args):
    """Copies pcr and pcrfs into WORK/bin so that the whole run uses one binary each."""
    binw = os.path.join(args.work, "bin")
    os.makedirs(binw, exist_ok=True)
    out = {}
    tools = [("pcr", args.pcr_src), ("pcrfs", args.pcrfs_src)]
    if args.pcrfs_b:
        tools.append(("pcrfs-b", args.pcrfs_b_src))
    for name, src in tools:
        dst = os.path.join(binw, name)
        shutil.copy2(src, dst)
        ver = subprocess.run([dst, "--version"], capture_output=True, text=True)
        out[name] = {"src": src, "path": dst, "mtime": os.path.getmtime(src),
                     "sha256": sha256(dst)[:12],
                     "version": [l for l in (ver.stdout + ver.stderr).splitlines()
                                 if l.startswith(name.split("-")[0] + " ")][:1]}
    args.pcr, args.pcrfs = out["pcr"]["path"], out["pcrfs"]["path"]
    if args.pcrfs_b:
        args.pcrfs_b = out["pcrfs-b"]["path"]
    return out


def prepare_disk(args, disk, src_files, src_bytes):
    """Copies --data into DISK/<name> and builds DISK/<name>.pcrstore with the run's pcr, unless
    DISK/<name>.ready.json says they are there already: the same dataset is reused; the store
    is rebuilt when pcr changed (its sha256), so that store and daemon come from one checkout."""
    name = os.path.basename(os.path.normpath(args.data))
    data = os.path.join(disk.mountpoint, name)
    store = os.path.join(disk.mountpoint, name + ".pcrstore")
    ready = os.path.join(disk.mountpoint, name + ".ready.json")
    want = {"source": args.data, "files": len(src_files), "bytes": src_bytes}
    pcr_sha = args.tools["pcr"]["sha256"]
    facts = {"data": data, "store": store}
    have = {}
    if not args.rebuild and os.path.exists(ready):
        with open(ready) as f:
            have = json.load(f)
        if any(have.get(k) != v for k, v in want.items()):
            have = {}
    if have and have.get("pcr_sha256") == pcr_sha:
        log(f"reusing {data} and {store}")
        facts.update({k: v for k, v in have.items() if k.endswith("_seconds")})
        return facts
    paths = (ready, store) if have else (ready, data, store)
    for p in paths:
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.unlink(p)
    if have:
        log(f"reusing {data}; pcr changed ({have.get('pcr_sha256')} -> {pcr_sha}): new store")
        want["copy_seconds"] = have.get("copy_seconds")
    else:
        log(f"copying {len(src_files)} files to {data}")
        t0 = time.monotonic()
        for rel in src_files:
            d = os.path.join(data, rel)
            os.makedirs(os.path.dirname(d), exist_ok=True)
            shutil.copyfile(os.path.join(args.data, rel), d)
        os.sync()
        want["copy_seconds"] = time.monotonic() - t0
    want["store_seconds"] = timed([args.pcr, "build", data, store, "-q"], "pcr build")
    want["pcr_sha256"] = pcr_sha
    os.sync()
    with open(ready, "w") as f:
        json.dump(want, f)
    os.sync()
    facts.update(copy_seconds=want["copy_seconds"], store_seconds=want["store_seconds"])
    return facts


# ---------------------------------------------------------------- one epoch

NATIVE = (0, "")
# The variant of --pcrfs-b: the second binary with the same options.
B_VARIANT = "B"


def setup_name(setup):
    """setup = (level, variant): (0, '') is native, (k, '') pcrfs at level k with the default
    options, (k, 'prefetch=0') the same with an extra -o option (--variant)."""
    level, variant = setup
    if not level:
        return "native"
    return f"pcrfs L{level}" + (f" {variant}" if variant else "")


def cap_name(cap):
    return f"{cap / MB:g} MB/s" if cap else "uncapped"


def one_epoch(args, facts, disk, cap, setup, order_seed):
    """A cold epoch of one setup under one cap; returns its numbers."""
    level, variant = setup
    tag = (f"L{level}" + (f"-v{args.variants.index(variant) + 1}" if variant else "")
           if level else "native")
    mnt = os.path.join(BENCH_ROOT, f"mnt-bwcap-{tag}")
    log_path = os.path.join(args.work, f"daemon-{tag}.log")
    mount = None
    disk.cap(cap)
    try:
        if args.global_drop:
            drop_caches()
        else:
            disk.drop_caches()  # remounts the loop file system: cold, and nobody else's caches
        warm_programs(args.program_files)
        drops0 = page_cache_drops()
        c0, d0, t0 = disk.charged_read_bytes(), disk.device_read_bytes(), time.monotonic()
        if level:
            b = args.pcrfs_b and variant == B_VARIANT
            opts = [f"scans={level}"] + args.pcrfs_opts + ([variant] if variant and not b else [])
            mount = Mount([args.pcrfs_b if b else args.pcrfs, facts["store"], mnt, "-f", "-o",
                           ",".join(opts)],
                             mnt, log_path)
            if not disk.contains(mount.pid):
                raise RuntimeError(f"pcrfs daemon {mount.pid} is in blkio cgroup "
                                   f"{cgroup_of(mount.pid)}, not {disk.cgroup_name}")
            root = mnt
        else:
            root = facts["data"]
        t1 = time.monotonic()
        mount_io = proc_io(mount.pid)["read_bytes"] if mount else 0
        rel = list_tree(root)
        t2 = time.monotonic()
        c1, d1 = disk.charged_read_bytes(), disk.device_read_bytes()
        if rel != facts["files"]:
            raise RuntimeError(f"{setup_name(setup)} lists {len(rel)} files, not the "
                               f"{len(facts['files'])} of the source tree")
        order = list(rel)
        random.Random(order_seed).shuffle(order)
        snap = {}
        samples, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                samples.append((time.clock_gettime_ns(time.CLOCK_MONOTONIC),
                                disk.charged_read_bytes()))
                stop.wait(0.01)
        sampler = threading.Thread(target=sample, daemon=True)

        def on_start():
            snap["c"], snap["d"] = disk.charged_read_bytes(), disk.device_read_bytes()
            snap["m"] = machine_cpu()
            if mount:
                snap["dio"] = proc_io(mount.pid)["read_bytes"]
                snap["dcpu"] = proc_cpu_seconds(mount.pid)
            sampler.start()
        try:
            ep = run_epoch(root, order, args.readers, args.timeout, on_start=on_start,
                           cgroup=cgroup_of, timeline=True)
        finally:
            stop.set()
            if sampler.is_alive():
                sampler.join()
        c2, d2, m2 = disk.charged_read_bytes(), disk.device_read_bytes(), machine_cpu()
        m1 = snap["m"]
        dt = max(1, m2[2] - m1[2]) / os.cpu_count()  # jiffies per core
        r = dict(ep)
        done = r.pop("done_ns")
        start = r.pop("start_ns")
        r.update(device_timeline(samples, start, done, cap, args.timeline))
        r.update(cap=cap, level=level, variant=variant, mount_s=t1 - t0, listing_s=t2 - t1,
                 listing_files=len(rel),
                 setup_device_bytes=c1 - c0, setup_loop_bytes=d1 - d0,
                 device_bytes=c2 - snap["c"], loop_bytes=d2 - snap["d"],
                 machine_busy_cores=(m2[0] - m1[0]) / dt, machine_nice_cores=(m2[1] - m1[1]) / dt,
                 foreign_drops=page_cache_drops() - drops0, load=loadavg())
        r["device_mb_per_s"] = r["device_bytes"] / MB / r["wall"]
        r["cap_fraction"] = r["device_bytes"] / r["wall"] / cap if cap else None
        # The files/s the cap allows for the bytes this epoch read, were the throttle exact.
        r["cap_bound_files_per_s"] = (r["files"] * cap / r["device_bytes"]
                                      if cap and r["device_bytes"] else 0.0)
        if any(cg != "/" + disk.cgroup_name for cg in r["reader_cgroups"]):
            raise RuntimeError(f"readers in blkio cgroups {r['reader_cgroups']}")
        if mount:
            s = daemon_snapshot(mount.pid)
            r.update(daemon_mount_read_bytes=mount_io,
                     daemon_read_bytes=s["read_bytes"] - snap["dio"],
                     daemon_cpu=s["cpu"] - snap["dcpu"], daemon_hwm=s["hwm"],
                     daemon_threads=len(os.listdir(f"/proc/{mount.pid}/task")))
            r["daemon_cpu_frac"] = r["daemon_cpu"] / r["wall"]
            try:  # the record scheduler's counters: speculative and demand reads, chunk, rate
                r["prefetch"] = os.getxattr(mount.mnt, "user.pcrfs.prefetch").decode()
            except OSError:
                r["prefetch"] = None
        else:
            r.update(daemon_read_bytes=None, daemon_cpu=0.0, daemon_cpu_frac=0.0)
        return r
    finally:
        if mount:
            mount.close()
        disk.cap(None)


def device_timeline(samples, start, done, cap, keep):
    """From the 10 ms samples of the cgroup's read bytes: the share of the epoch's 200 ms
    windows in which the device read at >= 80% of the cap (capped; the throttle dispatches in
    bunches about every 100 ms, so shorter windows would not tell) and, with keep, the whole
    timeline [(s, device MB, files done)] for the JSON."""
    out = {}
    pts = [(t, b) for t, b in samples if t >= start]
    if cap and len(pts) > 2:
        win = 200_000_000
        busy = n = j = 0
        while True:
            k = j
            while k < len(pts) and pts[k][0] < pts[j][0] + win:
                k += 1
            if k >= len(pts):
                break
            n += 1
            busy += (pts[k][1] - pts[j][1]) >= 0.8 * cap * (pts[k][0] - pts[j][0]) / 1e9
            j = k
        out["busy_share"] = busy / n if n else 0.0
    if keep and pts:
        b0, j = pts[0][1], 0
        tl = []
        for t, b in pts:
            while j < len(done) and done[j] <= t:
                j += 1
            tl.append((round((t - start) / 1e9, 4), round((b - b0) / MB, 3), j))
        out["timeline"] = tl
    return out


def bottleneck(r):
    """What limited an epoch, from its own counters (see the module docstring)."""
    cap_hit = r["cap"] and r["cap_fraction"] >= CAP_REACHED
    if cap_hit:
        return "cap"
    if r["level"] and r["daemon_cpu_frac"] >= DAEMON_CPU_BUSY:
        return "daemon CPU"
    if r["machine_busy_cores"] >= MACHINE_CPU_BUSY * os.cpu_count():
        return "machine CPU"
    return "latency" if not r["cap"] else "below cap"


# ---------------------------------------------------------------- the rounds

def run_rounds(args, facts, disk):
    caps = args.caps + [None]
    setups = [NATIVE] + [(k, "") for k in args.levels] + [(k, v) for v in args.variants
                                                           for k in args.levels]
    epochs = {(c, s): [] for c in caps for s in setups}
    probes = {c: [] for c in args.caps}
    discarded = []
    for rnd in range(args.repeat):
        cap_order = caps[rnd % len(caps):] + caps[:rnd % len(caps)]
        log(f"round {rnd + 1}/{args.repeat}: caps {[cap_name(c) for c in cap_order]} "
            f"(load {loadavg()})")
        for i, cap in enumerate(cap_order):
            if cap:
                p = measure_read_rate(disk, cap, path=facts["probe"])
                probes[cap].append(p)
                log(f"  throttle check {cap_name(cap)}: {p['rate'] / MB:.1f} MB/s "
                    f"({p['ratio']:.3f} of the cap), {p['charged'] / MB:.0f} MB charged")
            k = (rnd + i) % len(setups)
            for setup in setups[k:] + setups[:k]:
                for attempt in range(args.retries + 1):
                    r = one_epoch(args, facts, disk, cap, setup, args.seed + rnd)
                    if not r["foreign_drops"]:
                        break
                    log(f"  {cap_name(cap)} {setup_name(setup)}: another process dropped the "
                        f"page cache during the epoch ({r['foreign_drops']}x): "
                        + ("run again" if attempt < args.retries else "kept, flagged"))
                    discarded.append({"cap": cap, "setup": setup, "round": rnd,
                                      "files_per_s": r["files_per_s"],
                                      "device_bytes": r["device_bytes"], "bytes": r["bytes"]})
                r["round"] = rnd
                r["attempts"] = attempt + 1
                epochs[(cap, setup)].append(r)
                dcpu = f", daemon CPU {r['daemon_cpu']:.2f} s" if setup[0] else ""
                log(f"  {cap_name(cap)} {setup_name(setup)}: {r['files_per_s']:,.0f} files/s, "
                    f"{r['mb_per_s']:.1f} MB/s served, device {r['device_mb_per_s']:.1f} MB/s"
                    f"{dcpu}, readers CPU {r['reader_cpu']:.2f} s, listing "
                    f"{r['listing_s']:.2f} s"
                    + (f"; scheduler: {r['prefetch']}" if r.get("prefetch") else ""))
    return caps, setups, epochs, probes, discarded


MEDIAN_KEYS = ("wall", "files_per_s", "mb_per_s", "device_bytes", "loop_bytes",
               "device_mb_per_s", "reader_cpu", "reader_read_bytes", "daemon_cpu",
               "daemon_cpu_frac", "machine_busy_cores", "machine_nice_cores", "listing_s",
               "mount_s", "setup_device_bytes", "cap_bound_files_per_s")


def summarize(eps):
    s = {k: statistics.median(e[k] for e in eps) for k in MEDIAN_KEYS}
    s["bytes"] = eps[0]["bytes"]
    s["all_files_per_s"] = [e["files_per_s"] for e in eps]
    s["served_consistent"] = len({e["bytes"] for e in eps}) == 1
    s["cap"] = eps[0]["cap"]
    s["level"] = eps[0]["level"]
    s["cap_fraction"] = (s["device_bytes"] / s["wall"] / s["cap"]) if s["cap"] else None
    if eps[0]["level"]:
        s["daemon_read_bytes"] = statistics.median(e["daemon_read_bytes"] for e in eps)
        s["daemon_mount_read_bytes"] = max(e["daemon_mount_read_bytes"] for e in eps)
        s["daemon_hwm"] = max(e["daemon_hwm"] for e in eps)
        s["daemon_threads"] = eps[0]["daemon_threads"]
    s["bottlenecks"] = [bottleneck(e) for e in eps]
    s["daemon_bottleneck"] = any(b == "daemon CPU" for b in s["bottlenecks"])
    s["flagged"] = sum(1 for e in eps if e["foreign_drops"])
    s["progress"] = {k: statistics.median(e["progress"][k] for e in eps)
                     for k in eps[0]["progress"]}
    if "busy_share" in eps[0]:
        s["busy_share"] = statistics.median(e.get("busy_share", 0) for e in eps)
    return s


def targets(caps, setups, summ):
    """{(cap, level): {ideal, target, ratio, ok}} for every pcrfs level."""
    out = {}
    for cap in caps:
        nat = summ[(cap, NATIVE)]
        for setup in setups:
            if not setup[0]:
                continue
            s = summ[(cap, setup)]
            ideal = nat["files_per_s"] * nat["bytes"] / s["bytes"]
            out[(cap, setup)] = {"ideal": ideal, "target": TARGET_FACTOR * ideal,
                                 "of_ideal": s["files_per_s"] / ideal,
                                 "ok": s["files_per_s"] >= TARGET_FACTOR * ideal}
            if cap:
                # The same with every files/s clipped to what an exact throttle would allow
                # for the bytes the epoch read (the kernel's lets a first slice through at once).
                n = min(nat["files_per_s"], nat["cap_bound_files_per_s"])
                p = min(s["files_per_s"], s["cap_bound_files_per_s"])
                ideal_c = n * nat["bytes"] / s["bytes"]
                out[(cap, setup)].update(clipped_of_ideal=p / ideal_c,
                                         clipped_ok=p >= TARGET_FACTOR * ideal_c)
    return out


# ---------------------------------------------------------------- report and plot

def report(args, facts, caps, setups, summ, tg, probes, discarded, started, elapsed, load0,
           load1):
    L = ["# pcrfs bandwidth-capped read benchmark", ""]
    m = facts["manifest"]
    t = args.tools["pcrfs"]
    L.append(f"- Date: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}, run time "
             f"{elapsed / 60:.1f} min; host {platform.node()}, kernel {platform.release()}, "
             f"{os.cpu_count()} cores; load average at start {load0}, at end {load1}")
    head = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s"],
                          capture_output=True, text=True).stdout.strip()
    L.append(f"- pcrfs: `{t['src']}` ({' '.join(t['version'])}, built "
             f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(t['mtime']))}, sha256 "
             f"{t['sha256']}); repository at `{head[:80]}`")
    L.append(f"- Dataset: `{args.data}` copied to `{facts['data']}`: {len(facts['files']):,} files, "
             f"{fmt_mb(facts['src_bytes'])} MB, mean {facts['src_bytes'] / len(facts['files']) / 1024:.1f}"
             f" KiB; store `{facts['store']}` (`pcr build`, defaults), {fmt_mb(facts['store_bytes'])}"
             f" MB, {m['num_records']} records, built by `{args.tools['pcr']['src']}` (sha256 "
             f"{args.tools['pcr']['sha256']}, {' '.join(args.tools['pcr']['version'])})"
             + (f" in {facts['store_seconds']:.1f} s" if facts.get("store_seconds") else ""))
    L.append(f"- Storage: {facts['disk_desc']}")
    L.append(f"- Readers: {args.readers} forked processes; {args.repeat} round(s), caps and setups "
             f"in rotated order each round; medians shown. pcrfs options: "
             f"`scans=K{''.join(',' + o for o in args.pcrfs_opts)}`. MB = 10^6 bytes.")
    L.append("")
    L.append("Throttle check (cold sequential read of a 320 MiB probe file by one process in the "
             "cgroup, about 3 s per cap, every round):")
    L.append("")
    L.append("| cap | measured MB/s (each round) | median / cap | charged to the cgroup, MB |")
    L.append("|---|---|--:|--:|")
    for cap in args.caps:
        ps = probes[cap]
        rates = ", ".join(f"{p['rate'] / MB:.1f}" for p in ps)
        L.append(f"| {cap_name(cap)} | {rates} | "
                 f"{statistics.median(p['ratio'] for p in ps):.3f} | "
                 f"{statistics.median(p['charged'] for p in ps) / MB:.1f} |")
    L.append("")

    L.append("## Files/s against the target")
    L.append("")
    L.append(f"Target: pcrfs files/s >= {TARGET_FACTOR} x (native bytes / level bytes) x native "
             "files/s, at the same cap. Cells: measured files/s / target files/s: measured / "
             "ideal (ideal = native files/s x native bytes / level bytes), verdict; then in "
             "brackets measured / ideal with every files/s clipped to the cap-bound files/s "
             "(files x cap / device bytes: what an exact throttle allows; the kernel's lets about "
             "one 100 ms slice through at once, which flatters epochs shorter than a second).")
    L.append("")
    L.append("| cap | native files/s | " + " | ".join(f"L{k}" for k in args.levels) + " |")
    L.append("|---|--:|" + "---|" * len(args.levels))
    verdicts = []
    for variant in [""] + args.variants:
        for cap in caps:
            cells = []
            for k in args.levels:
                x = tg[(cap, (k, variant))]
                v = ("PASS" if x["ok"] else "**FAIL**") if cap else "ref."
                if cap and not variant:
                    verdicts.append(x["ok"])
                clip = (f" [{x['clipped_of_ideal']:.2f} {'pass' if x['clipped_ok'] else 'FAIL'}]"
                        if cap else "")
                cells.append(f"{summ[(cap, (k, variant))]['files_per_s']:,.0f} / "
                             f"{x['target']:,.0f}: {x['of_ideal']:.2f} {v}{clip}")
            L.append(f"| {cap_name(cap)}{', ' + variant if variant else ''} | "
                     f"{summ[(cap, NATIVE)]['files_per_s']:,.0f} | " + " | ".join(cells) + " |")
    L.append("")
    if args.pcrfs_b:
        tb = args.tools["pcrfs-b"]
        L.append(f"B = `{tb['src']}` (sha256 {tb['sha256']}) over A = `{t['src']}` (sha256 "
                 f"{t['sha256']}): median files/s of B / median files/s of A, same epochs "
                 "interleaved in every round (each round's ratios in brackets).")
        L.append("")
        L.append("| cap | " + " | ".join(f"L{k} B/A" for k in args.levels) + " |")
        L.append("|---|" + "--:|" * len(args.levels))
        for cap in caps:
            cells = []
            for k in args.levels:
                a_s, b_s = summ[(cap, (k, ""))], summ[(cap, (k, B_VARIANT))]
                per = ", ".join(f"{y / x:.2f}" for x, y in zip(a_s["all_files_per_s"],
                                                               b_s["all_files_per_s"]) if x)
                cells.append(f"{b_s['files_per_s'] / a_s['files_per_s']:.3f} ({per})")
            L.append(f"| {cap_name(cap)} | " + " | ".join(cells) + " |")
        L.append("")
    L.append(f"Capped rows, default options: {sum(verdicts)} of {len(verdicts)} pass. Daemon CPU "
             "the bottleneck in any epoch: "
             + (", ".join(f"{cap_name(c)} {setup_name(st)}" for (c, st), s in summ.items()
                          if st[0] and s["daemon_bottleneck"]) or "never") + ".")
    L.append("")

    L.append("## All measurements (medians over the rounds)")
    L.append("")
    L.append("| cap | setup | served MB | files/s | MB/s served | device MB | device MB/s | "
             "of cap | cap-bound files/s | listing s | mount s | setup device MB | daemon CPU s | "
             "daemon CPU % | readers CPU s | machine busy cores (+ niced) | limit |")
    L.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|")
    for cap in caps:
        for setup in setups:
            level = setup[0]
            s = summ[(cap, setup)]
            lim = sorted(set(s["bottlenecks"]))
            frac = f"{s['cap_fraction']:.2f}" if cap else "-"
            dcpu = f"{s['daemon_cpu']:.2f}" if level else "-"
            dpct = f"{100 * s['daemon_cpu_frac']:.0f}" if level else "-"
            cb = f"{s['cap_bound_files_per_s']:,.0f}" if cap else "-"
            flag = f" ({s['flagged']} disturbed)" if s["flagged"] else ""
            L.append(
                f"| {cap_name(cap)} | {setup_name(setup)}{flag} | {fmt_mb(s['bytes'])} | "
                f"{s['files_per_s']:,.0f} | {s['mb_per_s']:.1f} | {fmt_mb(s['device_bytes'])} | "
                f"{s['device_mb_per_s']:.1f} | {frac} | {cb} | {s['listing_s']:.2f} | "
                f"{s['mount_s']:.2f} | {fmt_mb(s['setup_device_bytes'])} | {dcpu} | {dpct} | "
                f"{s['reader_cpu']:.2f} | {s['machine_busy_cores']:.2f} "
                f"(+{s['machine_nice_cores']:.2f}) | {', '.join(lim)} |")
    L.append("")
    L.append("Columns: device MB = what the cgroup read from the loop device during the epoch "
             "(blkio.throttle.io_service_bytes); device MB/s = that / epoch wall; setup device "
             "MB = the same for the mount + listing before the epoch; cap-bound files/s = files x "
             "cap / device bytes, what an exact throttle would allow for the bytes read (the "
             "real one lets a burst of about one 100 ms slice through at the start, which "
             "flatters epochs under a second); daemon CPU % = daemon CPU s / epoch wall s (100 = "
             "one core of 2); machine busy cores = /proc/stat, everyone's work, niced work (a "
             "background dataset generation) apart; limit = `cap` when the device rate reached "
             f"{CAP_REACHED:.0%} of the cap, else `daemon CPU` (daemon >= {DAEMON_CPU_BUSY} core), "
             f"`machine CPU` (>= {MACHINE_CPU_BUSY:.0%} of the cores busy), else `below cap` "
             "(capped) or `latency` (uncapped).")
    L.append("")
    L.append("Progress within the epoch (medians): seconds until 10/50/90/100% of the files were "
             "read, against the epoch time an exact throttle would take for the device bytes "
             "(device bytes / cap).")
    L.append("")
    L.append("| cap | setup | t10 | t50 | t90 | t100 | device bytes / cap |")
    L.append("|---|---|--:|--:|--:|--:|--:|")
    for cap in caps:
        if not cap:
            continue
        for setup in setups:
            s = summ[(cap, setup)]
            pr = s["progress"]
            L.append(f"| {cap_name(cap)} | {setup_name(setup)} | {pr['t10']:.2f} | "
                     f"{pr['t50']:.2f} | {pr['t90']:.2f} | {pr['t100']:.2f} | "
                     f"{s['device_bytes'] / cap:.2f} |")
    L.append("")
    if discarded:
        L.append(f"Epochs run again because another process wrote to drop_caches during them "
                 f"(/proc/vmstat drop_pagecache; it evicts what the daemon prefetched, which is "
                 f"then read twice): {len(discarded)}: " + "; ".join(
                     f"{cap_name(d['cap'])} {setup_name(d['setup'])} round {d['round'] + 1} "
                     f"({d['files_per_s']:,.0f} files/s, device/served "
                     f"{d['device_bytes'] / max(1, d['bytes']):.2f})" for d in discarded))
        L.append("")
    L.append("Every epoch, files/s by round:")
    L.append("")
    for cap in caps:
        L.append(f"- {cap_name(cap)}: " + "; ".join(
            f"{setup_name(s)} " + ", ".join(f"{v:,.0f}" for v in summ[(cap, s)]["all_files_per_s"])
            for s in setups))
    L.append("")
    lb = m["level_bytes"]
    pc = [(c, st) for c in caps for st in setups if st[0]]
    bad = [setup_name(st) for c, st in pc
           if summ[(c, st)]["bytes"] != lb[st[0] - 1] or not summ[(c, st)]["served_consistent"]]
    L.append("Served bytes at level k = manifest.json level_bytes[k-1] in every epoch: "
             + ("yes" if not bad else "NO: " + ", ".join(sorted(set(bad)))))
    cross = [summ[k]["daemon_read_bytes"] / summ[k]["device_bytes"] for k in pc
             if summ[k]["device_bytes"]]
    L.append(f"Daemon /proc/PID/io read_bytes / cgroup read bytes over the pcrfs epochs: "
             f"{min(cross):.3f} to {max(cross):.3f}; daemon threads "
             f"{summ[pc[0]]['daemon_threads']}, peak RSS "
             f"{max(summ[k]['daemon_hwm'] for k in pc) / MiB:.1f} MiB.")
    L.append("")
    return "\n".join(L) + "\n", verdicts


def plot(args, caps, setups, summ, tg, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = len(caps)
    fig, axes = plt.subplots(1, n, figsize=(3.1 * n, 3.3), dpi=90)
    if n == 1:
        axes = [axes]
    lv = args.levels
    x = list(range(len(lv)))
    colors = ["tab:orange", "tab:purple", "tab:red", "tab:brown"]
    for ax, cap in zip(axes, caps):
        nat = summ[(cap, NATIVE)]["files_per_s"]
        ys = [summ[(cap, (k, ""))]["files_per_s"] for k in lv]
        ideal = [tg[(cap, (k, ""))]["ideal"] for k in lv]
        ax.axhline(nat, color="0.35", lw=1.2, label="native")
        ax.plot(x, ideal, "--", color="tab:green", lw=1.2,
                label="ideal: native x bytes ratio")
        ax.plot(x, [TARGET_FACTOR * v for v in ideal], ":", color="tab:green", lw=1,
                label=f"target ({TARGET_FACTOR} x ideal)")
        ax.plot(x, ys, "o-", color="tab:blue", lw=1.6, ms=5, label="pcrfs")
        top = max(ys)
        for v, c in zip(args.variants, colors):
            yv = [summ[(cap, (k, v))]["files_per_s"] for k in lv]
            ax.plot(x, yv, "s-", color=c, lw=1.1, ms=4, label=f"pcrfs {v}")
            top = max(top, max(yv))
        ax.set_xticks(x, [f"L{k}" for k in lv])
        ax.set_title(cap_name(cap) + (" cap" if cap else ""), fontsize=10)
        ax.set_ylim(0, max(top, max(ideal)) * 1.1)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda v, _: f"{v / 1000:g}k" if v >= 1000 else f"{v:g}"))
    axes[0].set_ylabel("files/s (cold epoch)")
    axes[0].legend(fontsize=7, loc="upper right")
    fig.suptitle(f"Cold epoch, {args.readers} readers, bandwidth-capped loop disk "
                 f"({len(summ[(caps[0], NATIVE)]['all_files_per_s'])}-round medians)",
                 fontsize=10)
    return save_figure(fig, path)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(
        description="pcrfs against native reads from the same bandwidth-capped loop disk (see "
                    "the module docstring for the method).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="image folder (generated if missing; default "
                    f"{BENCH_ROOT}/imagenet10k, imagenet2k with --quick)")
    ap.add_argument("--images", type=int, help="images to generate if --data is missing "
                    "(default 10000, 2000 with --quick)")
    ap.add_argument("--quick", action="store_true", help="2,000 images, 1 round: a smoke test")
    ap.add_argument("--caps", default="25,50,100", help="MB/s (10^6), comma separated; an "
                    "uncapped row is always added (default %(default)s)")
    ap.add_argument("--levels", default="1,2,5,10", help="pcrfs levels (default %(default)s)")
    ap.add_argument("--readers", type=int, default=4, help="reader processes (default 4)")
    ap.add_argument("--repeat", type=int, help="rounds (default 3, 1 with --quick)")
    ap.add_argument("--seed", type=int, default=1, help="shuffle seed (round r uses seed + r)")
    ap.add_argument("-o", dest="pcrfs_opts", action="append", default=[],
                    help="extra pcrfs -o option (repeatable)")
    ap.add_argument("--pcrfs", help="pcrfs binary (default /usr/local/bin/pcrfs, else build/)")
    ap.add_argument("--pcr", help="pcr binary (default /usr/local/bin/pcr, else build/)")
    ap.add_argument("--pcrfs-b", help="a second pcrfs binary, measured beside the first in the "
                    "same rounds (setups 'pcrfs Lk B'), with a table of B/A files/s")
    ap.add_argument("--disk-image", default=f"{BENCH_ROOT}/bwcap.img",
                    help="backing file of the loop disk (default %(default)s)")
    ap.add_argument("--disk-mnt", default=f"{BENCH_ROOT}/bwcap-disk",
                    help="where the loop disk is mounted (default %(default)s)")
    ap.add_argument("--cgroup", default="pcrfs-bwcap", help="blkio cgroup name")
    ap.add_argument("--read-ahead-kb", type=int, help="loop device read_ahead_kb (default: the "
                    "kernel's, 128)")
    ap.add_argument("--work", default=f"{BENCH_ROOT}/bwcap-work",
                    help="daemon logs and the frozen binaries (default %(default)s)")
    ap.add_argument("--rebuild", action="store_true", help="copy the data and build the store "
                    "again (and re-create the disk image)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per epoch")
    ap.add_argument("--variant", dest="variants", action="append", default=[],
                    help="also run pcrfs at every level with this extra -o option, as its own "
                         "setup side by side (repeatable), e.g. --variant prefetch=0")
    ap.add_argument("--global-drop", action="store_true", help="make every epoch cold with "
                    "`sync; echo 3 > /proc/sys/vm/drop_caches` instead of remounting the loop "
                    "file system (which leaves the rest of the machine's page cache alone)")
    ap.add_argument("--timeline", action="store_true", help="keep every epoch's device bytes "
                    "and files done every 10 ms in the JSON")
    ap.add_argument("--retries", type=int, default=3, help="re-runs of an epoch during which "
                    "another process dropped the page cache (default %(default)s)")
    ap.add_argument("--out", default=f"{BENCH_ROOT}/bwcap_results.md")
    ap.add_argument("--json", help="raw numbers (default: --out with .json)")
    ap.add_argument("--plot", help="PNG (default docs/bwcap.png; "
                    f"{BENCH_ROOT}/bwcap_quick.png with --quick)")
    args = ap.parse_args()
    warn_unless_bench_lock()

    if os.geteuid() != 0:
        fail("needs root (drop_caches, FUSE and loop mounts, cgroups)")
    q = args.quick
    args.data = os.path.abspath(args.data or f"{BENCH_ROOT}/{'imagenet2k' if q else 'imagenet10k'}")
    args.images = args.images or (2000 if q else 10000)
    args.repeat = args.repeat or (1 if q else 3)
    args.plot = args.plot or (f"{BENCH_ROOT}/bwcap_quick.png" if q
                              else os.path.join(REPO, "docs/bwcap.png"))
    args.json = args.json or os.path.splitext(args.out)[0] + ".json"
    args.levels = [int(x) for x in args.levels.split(",") if x]
    if any(not 1 <= k <= 10 for k in args.levels) or not args.levels:
        fail("levels are 1..10")
    args.caps = [float(x) * MB for x in args.caps.split(",") if x.strip() and float(x) > 0]
    if args.readers < 1 or args.repeat < 1:
        fail("--readers and --repeat must be at least 1")
    args.pcr_src = pick_tool(args.pcr, "pcr", "mount-tools/pcr")
    args.pcrfs_src = pick_tool(args.pcrfs, "pcrfs", "fs/pcrfs")
    if args.pcrfs_b:
        args.pcrfs_b_src = pick_tool(args.pcrfs_b, "pcrfs", "fs/pcrfs")
        args.variants.append(B_VARIANT)
    os.makedirs(args.work, exist_ok=True)
    args.tools = freeze_tools(args)

    started = time.time()
    load0 = loadavg()
    if not os.path.isdir(args.data):
        timed(["/usr/bin/python3", os.path.join(REPO, "tests/data/make_dataset.py"), args.data,
                  "--images", str(args.images), "--seed", "1"], "generating the dataset")
    src_files, src_bytes = walk_files(args.data)
    if not src_files:
        fail(f"no files under {args.data}")
    src_files.sort()

    if args.rebuild and os.path.exists(args.disk_image):
        os.unlink(args.disk_image)
    size = max(3 * GiB, int(2.5 * src_bytes) + GiB)
    disk = ThrottledDisk(args.disk_image, size, args.disk_mnt, cgroup_name=args.cgroup,
                         read_ahead_kb=args.read_ahead_kb)
    try:
        facts = prepare_disk(args, disk, src_files, src_bytes)
        facts["files"] = src_files
        facts["src_bytes"] = src_bytes
        with open(os.path.join(facts["store"], "manifest.json")) as f:
            facts["manifest"] = json.load(f)
        facts["store_bytes"] = sum(os.path.getsize(os.path.join(d, n))
                                   for d, _, ns in os.walk(facts["store"]) for n in ns)
        facts["probe"] = ensure_probe_file(disk)
        ra = open(f"/sys/block/{os.path.basename(disk.device)}/queue/read_ahead_kb").read().strip()
        facts["disk_desc"] = (
            f"ext4 (noatime) on `{disk.device}` ({disk.majmin}, read_ahead_kb {ra}), a loop "
            f"device with direct I/O to the sparse file `{args.disk_image}` on the root disk; "
            f"the source folder and the store on this one file system. Throttle: cgroup v1 "
            f"blkio `{disk.cgroup}`, `blkio.throttle.read_bps_device` = `{disk.majmin} BPS`; "
            f"this process, its reader processes and the pcrfs daemons are in the cgroup "
            f"(checked every epoch in /proc/PID/cgroup)")
        disk.join()
        args.program_files = sorted(set(program_files(args.pcrfs))
                                    | (set(program_files(args.pcrfs_b)) if args.pcrfs_b else set()))
        log(f"{len(src_files)} files ({src_bytes / MB:.1f} MB) on {disk.device}; caps "
            f"{[c / MB for c in args.caps]} MB/s + uncapped, levels {args.levels}, "
            f"{args.readers} readers, {args.repeat} round(s); load {load0}")
        caps, setups, epochs, probes, discarded = run_rounds(args, facts, disk)
    finally:
        disk.close()
    summ = {k: summarize(v) for k, v in epochs.items()}
    tg = targets(caps, setups, summ)
    text, verdicts = report(args, facts, caps, setups, summ, tg, probes, discarded, started,
                            time.time() - started, load0, loadavg())
    write_results(text, args.out, args.json,
                  {"args": {k: v for k, v in vars(args).items() if k != "program_files"},
                   "epochs": {f"{cap_name(c)} | {setup_name(s)}": v
                              for (c, s), v in epochs.items()},
                   "summary": {f"{cap_name(c)} | {setup_name(s)}": v
                               for (c, s), v in summ.items()},
                   "targets": {f"{cap_name(c)} | {setup_name(st)}": v for (c, st), v in tg.items()},
                   "throttle_check": {cap_name(c): v for c, v in probes.items()},
                   "discarded_epochs": discarded},
                  json_default=str)
    size = plot(args, caps, setups, summ, tg, args.plot)
    log(f"results in {args.out} and {args.json}; plot {args.plot} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
