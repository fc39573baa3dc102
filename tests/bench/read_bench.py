#!/usr/bin/python3
"""Read benchmark: pcrfs against the native folder and squashfuse, side by side in one run.

Usage:
  tests/bench/read_bench.py                      # 10,000 images, all setups, ~4 minutes
  tests/bench/read_bench.py --quick              # 2,000 images, 1 round each: a smoke test
  tests/bench/read_bench.py --data DIR --out FILE [--levels 1,2,5,10] [--readers 1,2]
                            [--warm-epochs 7] [--cold-repeats 3] [--seed 1] [-o cache_size=512M ...]
  tests/bench/read_bench.py --fuse-requests 500  # also count FUSE requests per file (-d logs)

Setups, each over the same file list:
  native      the source folder itself, on the local file system
  squashfuse  `mksquashfs SRC IMG` (default options) mounted with `squashfuse_ll -f`
  pcrfs Lk    `pcr build SRC STORE` (default options) mounted with `pcrfs -f -o scans=k`, one
              mount per level, so the daemon's counters belong to one level only

Every epoch: R forked reader processes (--readers, default 1 and 2) read every file once (open,
readv into a 1 MiB buffer until EOF, close) in a seeded random order, the list dealt round-robin
between them. For each R:
  1. cold, --cold-repeats rounds (default 3): every setup in turn, with none of our other mounts
     up, gets `sync; echo 3 > /proc/sys/vm/drop_caches` and a fresh mount (so the page cache,
     the dentry/inode caches and the FUSE page cache are empty), a cold epoch, and at once a
     2nd epoch on the same mount; then the daemon's /proc/PID/io read_bytes, /proc/PID/stat
     utime+stime and /proc/PID/status VmHWM are read and it is unmounted. Median files/s and
     the worst (largest) read amplification over the rounds are reported. (Other mounts are
     down because a live pcrfs daemon keeps its mmapped index pages resident through
     drop_caches, which would make the next level's cold run warm for the index.)
  2. warm: every setup mounted at once, one untimed epoch each to fill the caches, then
     --warm-epochs rounds (default 7) of one epoch per setup, interleaved in rotating order, so
     that load changes on a shared machine hit every setup alike; the median is reported. The
     ratios to native and squashfuse use these interleaved warm epochs.
  3. warm, Python open(): as many rounds again, each reader using `open(path, "rb")` +
     readinto, as PIL's Image.open(path) and torchvision's pil_loader do. open() calls
     isatty(), an ioctl(TCGETS) that the kernel forwards to every FUSE daemon (no caching):
     the column beside the raw one shows what that round trip costs per file.

Device bytes: read_bytes (bytes this process caused to be fetched from the block layer) of the
daemon for FUSE setups, counted from its start (the mount happens after the cache drop, so the
index/superblock reads at mount time count too, shown apart as "at mount"); for native, the sum
of the reader processes' own read_bytes (each reader reads /proc/self/io when it finishes).
After each cache drop the programs' own files (the daemon executables and their shared
libraries, and every file this Python process maps) are read back into the page cache, so that
page faults on program code are not counted as data: without that, the 10 MB pcrfs binary
(debug info) and its libraries add ~14 MB of "device bytes" at every mount. Read amplification
= device bytes of the cold epoch / bytes served. Bytes served = the bytes the readers got, which for pcrfs
at level k is the sum of st_size at level k (checked against the store's manifest.json).

Targets (from the issue), each marked PASS/FAIL in the report, every ratio from this same run
with the same reader count:
  warm files/s of pcrfs at every level  >= 0.9 x native  and  >= 2 x squashfuse
  cold read amplification of pcrfs      <= 1.1
  pcrfs daemon peak RSS                 <= 100 MiB + the piece cache cap

The dataset is generated with tests/data/make_dataset.py if DATA is missing (default
/var/tmp/pcrfs-bench/imagenet10k, 10,000 images, seed 1). The store and the squashfs image are
built once into --work (default /var/tmp/pcrfs-bench/read-work) and reused by later runs
(--rebuild to rebuild). Mount points are WORK/../mnt-*; every mount is undone in a finally
block, and every epoch has a timeout (--timeout).

Needs root (drop_caches, FUSE mounts), squashfs-tools and squashfuse (apt-get), and a built
pcrfs (build/fs/pcrfs and build/mount-tools/pcr, else PATH). MB = 10^6 bytes, MiB = 2^20.
Results: markdown on stdout and in --out (default /var/tmp/pcrfs-bench/read_results.md).
"""

import argparse
import collections
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (BENCH_ROOT, MB, REPO, Mount, MiB, daemon_snapshot,  # noqa: E402
                      drop_caches, fail, find_tool, fmt_mb, loadavg, log, parse_size, proc_io,
                      program_files, run_epoch, timed, verdict, walk_files, warm_programs,
                      warn_unless_bench_lock, write_results)

TARGET_NATIVE = 0.9
TARGET_SQUASHFUSE = 2.0
TARGET_AMPLIFICATION = 1.1
TARGET_RSS_BASE = 100 * MiB


# ---------------------------------------------------------------- preparation

def prepare(args):
    """Dataset, pcrfs store and squashfs image; returns facts for the report header."""
    facts = {}
    if not os.path.isdir(args.data):
        argv = ["/usr/bin/python3", os.path.join(REPO, "tests/data/make_dataset.py"), args.data,
                "--images", str(args.images), "--seed", "1"]
        facts["dataset_seconds"] = timed(argv, "generating the dataset")
    os.makedirs(args.work, exist_ok=True)
    base = os.path.basename(os.path.normpath(args.data))
    store = os.path.join(args.work, base + ".pcrstore")
    sqfs = os.path.join(args.work, base + ".sqfs")
    if args.rebuild:
        shutil.rmtree(store, ignore_errors=True)
        for p in (sqfs, sqfs + ".done"):
            if os.path.exists(p):
                os.unlink(p)
    if not os.path.exists(os.path.join(store, "manifest.json")):
        shutil.rmtree(store, ignore_errors=True)
        facts["store_seconds"] = timed([args.pcr, "build", args.data, store, "-q"], "pcr build")
    if not os.path.exists(sqfs + ".done"):
        if os.path.exists(sqfs):
            os.unlink(sqfs)
        facts["sqfs_seconds"] = timed(["mksquashfs", args.data, sqfs, "-noappend", "-no-progress",
                                       "-quiet"], "mksquashfs")
        open(sqfs + ".done", "w").close()
    with open(os.path.join(store, "manifest.json")) as f:
        facts["manifest"] = json.load(f)
    facts["store"] = store
    facts["store_bytes"] = sum(os.path.getsize(os.path.join(d, n))
                               for d, _, ns in os.walk(store) for n in ns)
    facts["sqfs"] = sqfs
    facts["sqfs_bytes"] = os.path.getsize(sqfs)
    return facts


# ---------------------------------------------------------------- one setup

def shuffled(rel, seed):
    order = list(rel)
    random.Random(seed).shuffle(order)
    return order


def open_setup(args, facts, setup, level, debug=False, drop=True):
    """Drops the caches and mounts setup afresh; returns (root to read, Mount or None)."""
    tag = setup + (f"-L{level}" if level else "") + ("-debug" if debug else "")
    mnt = os.path.join(args.mnt_base, f"mnt-{tag}")
    log_path = os.path.join(args.work, f"daemon-{tag}.log")
    if drop:
        drop_caches()
        warm_programs(args.program_files)
    fg = "-d" if debug else "-f"
    if setup == "native":
        return args.data, None
    if setup == "squashfuse":
        m = Mount(["squashfuse_ll", fg, facts["sqfs"], mnt], mnt, log_path)
    else:
        opts = [f"scans={level}"] + args.pcrfs_opts
        m = Mount([args.pcrfs, facts["store"], mnt, fg, "-o", ",".join(opts)], mnt, log_path)
    return mnt, m


def median_by(items, key):
    return sorted(items, key=key)[len(items) // 2]


def measure_readers(args, facts, plan, readers, rel):
    """All setups of plan with `readers` reader processes; returns one result dict per setup.

    Cold: --cold-repeats rounds; in each, every setup in turn gets a cache drop, a fresh mount
    (no other mount of ours is up: a live pcrfs daemon keeps its mmapped index pages resident
    through drop_caches), a cold epoch and, right after, a second epoch on the same mount.
    Warm: every setup is mounted again, gets one untimed epoch to fill the caches, then
    --warm-epochs rounds of one epoch per setup, interleaved (rotating order), so that load
    changes on a shared machine hit every setup alike.
    """
    res = {key: {"setup": key[0], "level": key[1], "readers": readers, "cold_rounds": [],
                 "second_rounds": [], "warm_epochs": [], "warm_python_epochs": []}
           for key in plan}
    mounts, roots, hwm = {}, {}, collections.defaultdict(int)
    try:
        for rnd in range(args.cold_repeats):
            for key in plan:
                for other in list(mounts):
                    mounts.pop(other).close()
                roots[key], m = open_setup(args, facts, *key)
                if m:
                    mounts[key] = m
                mount_bytes = proc_io(m.pid)["read_bytes"] if m else 0
                cold = run_epoch(roots[key], shuffled(rel, args.seed), readers, args.timeout)
                if m:
                    snap = daemon_snapshot(m.pid)
                    cold.update(device_bytes=snap["read_bytes"], mount_device_bytes=mount_bytes,
                                daemon_cpu=snap["cpu"])
                else:
                    cold["device_bytes"] = cold["reader_read_bytes"]
                second = run_epoch(roots[key], shuffled(rel, args.seed + 1), readers, args.timeout)
                if m:
                    snap2 = daemon_snapshot(m.pid)
                    second["device_bytes"] = snap2["read_bytes"] - snap["read_bytes"]
                    hwm[key] = max(hwm[key], snap2["hwm"])
                    mounts.pop(key).close()
                else:
                    second["device_bytes"] = second["reader_read_bytes"]
                res[key]["cold_rounds"].append(cold)
                res[key]["second_rounds"].append(second)
                log(f"  {key[0]}{' L' + str(key[1]) if key[1] else ''} R{readers} round {rnd + 1}: "
                    f"cold {cold['files_per_s']:,.0f} files/s, 2nd epoch "
                    f"{second['files_per_s']:,.0f} files/s, amplification "
                    f"{cold['device_bytes'] / max(1, cold['bytes']):.3f}")
        for key in plan:  # warm phase: all mounted at once, caches filled by one untimed epoch
            if key[0] != "native":
                roots[key], mounts[key] = open_setup(args, facts, *key, drop=False)
            run_epoch(roots[key], shuffled(rel, args.seed + 2), readers, args.timeout)
        before = {key: daemon_snapshot(m.pid) for key, m in mounts.items()}
        for e in range(args.warm_epochs):
            order = plan[e % len(plan):] + plan[:e % len(plan)]
            for key in order:
                w = run_epoch(roots[key], shuffled(rel, args.seed + 3 + e), readers, args.timeout)
                res[key]["warm_epochs"].append(w)
        after = {key: daemon_snapshot(m.pid) for key, m in mounts.items()}
        for e in range(args.warm_epochs):  # the same with Python's open(): one ioctl per file
            order = plan[e % len(plan):] + plan[:e % len(plan)]
            for key in order:
                w = run_epoch(roots[key], shuffled(rel, args.seed + 3 + e), readers, args.timeout,
                              style="python")
                res[key]["warm_python_epochs"].append(w)
    finally:
        for m in mounts.values():
            m.close()
    out = []
    for key in plan:
        r = res[key]
        colds = r["cold_rounds"]
        r["cold"] = median_by(colds, lambda c: c["files_per_s"])
        r["second"] = median_by(r["second_rounds"], lambda c: c["files_per_s"])
        r["warm"] = median_by(r["warm_epochs"], lambda c: c["files_per_s"])
        r["warm_python"] = median_by(r["warm_python_epochs"], lambda c: c["files_per_s"])
        r["served_bytes"] = colds[0]["bytes"]
        worst = max(colds, key=lambda c: c["device_bytes"])
        r["device_bytes"] = worst["device_bytes"]
        r["amplification"] = worst["device_bytes"] / r["served_bytes"] if r["served_bytes"] else 0
        if key in mounts:
            r["mount_device_bytes"] = worst["mount_device_bytes"]
            r["daemon_cpu_cold"] = statistics.median(c["daemon_cpu"] for c in colds)
            r["daemon_cpu_warm"] = (after[key]["cpu"] - before[key]["cpu"]) / args.warm_epochs
            r["warm_device_bytes"] = after[key]["read_bytes"] - before[key]["read_bytes"]
            r["daemon_hwm"] = max(hwm[key], after[key]["hwm"])
        else:
            r["warm_device_bytes"] = sum(w["reader_read_bytes"] for w in r["warm_epochs"])
        served = {e["bytes"] for e in
                  colds + r["second_rounds"] + r["warm_epochs"] + r["warm_python_epochs"]}
        if len(served) != 1:
            r["warning"] = f"epochs served different byte counts: {sorted(served)}"
        out.append(r)
    return out


# ---------------------------------------------------------------- FUSE request counts

OPCODE_RE = re.compile(rb"opcode: ([A-Z_]+)")


def count_requests(args, setup, level, rel, facts):
    """Cold and warm epoch over len(rel) files with -d; returns {epoch: Counter(opcode)}."""
    _, mount = open_setup(args, facts, setup, level, debug=True)
    out = {}
    try:
        for epoch, seed in (("cold", args.seed), ("warm", args.seed + 1)):
            before = mount.log_offset()
            run_epoch(mount.mnt, shuffled(rel, seed), 1, args.timeout)
            time.sleep(0.2)
            after = mount.log_offset()
            with open(mount.log_path, "rb") as f:
                f.seek(before)
                out[epoch] = collections.Counter(
                    m.group(1).decode() for m in OPCODE_RE.finditer(f.read(after - before)))
    finally:
        mount.close()
    return out


# ---------------------------------------------------------------- report

def report(args, facts, rel, total_bytes, results, requests, started, elapsed, load0):
    L = []
    L.append("# pcrfs read benchmark")
    L.append("")
    m = facts["manifest"]
    cache_cap = args.cache_bytes
    L.append(f"- Date: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}, "
             f"run time {elapsed / 60:.1f} min; host: {platform.node()}, kernel {platform.release()}, "
             f"{os.cpu_count()} cores; load average at start {load0}, at end "
             f"{loadavg()}")
    head = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s"], capture_output=True,
                          text=True).stdout.strip()
    L.append(f"- pcrfs: `{args.pcrfs}` built {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(args.pcrfs_mtime))}"
             f", repository at `{head[:90]}`")
    L.append(f"- Dataset: `{args.data}`: {len(rel):,} files, {fmt_mb(total_bytes)} MB, "
             f"mean {total_bytes / max(1, len(rel)) / 1024:.1f} KiB")
    L.append(f"- pcrfs store: `{facts['store']}`, {facts['store_bytes'] / MB:,.1f} MB, "
             f"{m['num_records']} records of {m['options']['images_per_record']} files, "
             f"{m['num_jpeg']} JPEG + {m['num_passthrough']} passthrough"
             + (f", built in {facts['store_seconds']:.1f} s" if "store_seconds" in facts else ""))
    L.append(f"- squashfs image: `{facts['sqfs']}` (mksquashfs defaults), "
             f"{facts['sqfs_bytes'] / MB:,.1f} MB"
             + (f", built in {facts['sqfs_seconds']:.1f} s" if "sqfs_seconds" in facts else ""))
    L.append(f"- Mounts: pcrfs one `-o scans=K` mount per level (fresh for every cold round), options "
             f"`{','.join(args.pcrfs_opts) or '(defaults)'}`, piece cache cap "
             f"{cache_cap / MiB:.0f} MiB; squashfuse_ll: defaults")
    L.append(f"- Method: every epoch reads every file once (os.open + readv into a 1 MiB buffer "
             f"to EOF + close, in Python) in a seeded random order (seed {args.seed}), the list "
             f"dealt round-robin between R forked reader processes. Cold: {args.cold_repeats} "
             f"round(s); in each, every setup in turn gets `sync; echo 3 > drop_caches` and a "
             f"fresh mount, then a cold epoch and at once a 2nd epoch on the same mount; median "
             f"files/s shown, worst amplification. Only one of our mounts is up during a cold epoch "
             f"(a live pcrfs daemon keeps its mmapped index resident through drop_caches). Warm: "
             f"every setup mounted at once, one untimed epoch each to fill the caches, then "
             f"{args.warm_epochs} rounds of one epoch "
             f"per setup, interleaved in rotating order (so load changes on a shared machine hit "
             f"every setup alike); median shown. Then as many rounds reading with Python's "
             f"`open(path, 'rb')` + readinto (as PIL and torchvision do: open() calls isatty(), "
             f"an ioctl that the kernel forwards to a FUSE daemon); 'open() costs' = the extra "
             f"time per file and reader process against os.open.")
    L.append("- Device bytes: /proc/PID/io read_bytes of the daemon from its start (FUSE; what it "
             "reads at mount, e.g. the index, is shown apart) or the sum over the reader processes "
             "(native). After every cache drop the programs' own files (daemon executables, their "
             "libraries, what this Python maps) are read back into the page cache so page faults on "
             "code do not count as data. Amplification = cold device bytes / bytes served. "
             "MB = 10^6 bytes.")
    L.append("")
    L.append("## All measurements")
    L.append("")
    L.append("| setup | R | served MB | cold files/s | cold MB/s | 2nd epoch files/s | "
             "warm files/s | warm MB/s | warm files/s, Python open() | open() costs µs/file | "
             "device MB (cold) | of which at mount | amplification | "
             "device MB (warm) | daemon CPU s: cold / warm epoch | daemon peak RSS MiB |")
    L.append("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in results:
        name = r["setup"] + (f" L{r['level']}" if r["level"] else "")
        c, w = r["cold"], r["warm"]
        cpu = (f"{r['daemon_cpu_cold']:.2f} / {r['daemon_cpu_warm']:.2f}"
               if "daemon_cpu_cold" in r else "-")
        hwm = f"{r['daemon_hwm'] / MiB:.1f}" if "daemon_hwm" in r else "-"
        L.append(f"| {name} | {r['readers']} | {fmt_mb(r['served_bytes'])} | "
                 f"{c['files_per_s']:,.0f} | {c['mb_per_s']:,.1f} | "
                 f"{r['second']['files_per_s']:,.0f} | {w['files_per_s']:,.0f} | "
                 f"{w['mb_per_s']:,.1f} | {r['warm_python']['files_per_s']:,.0f} | "
                 f"{(1 / r['warm_python']['files_per_s'] - 1 / w['files_per_s']) * 1e6 * r['readers']:+.1f} | "
                 f"{fmt_mb(r['device_bytes'])} | "
                 f"{fmt_mb(r['mount_device_bytes']) if 'mount_device_bytes' in r else '-'} | "
                 f"{r['amplification']:.3f} | {fmt_mb(r['warm_device_bytes'])} | {cpu} | {hwm} |")
    L.append("")
    L.append("Every epoch, files/s (cold rounds | warm epochs):")
    L.append("")
    for r in results:
        L.append(f"- {r['setup']}{' L' + str(r['level']) if r['level'] else ''} R{r['readers']}: "
                 + ", ".join(f"{c['files_per_s']:,.0f}" for c in r["cold_rounds"]) + " | "
                 + ", ".join(f"{w['files_per_s']:,.0f}" for w in r["warm_epochs"]))
    L.append("")

    by = {(r["setup"], r["level"], r["readers"]): r for r in results}
    pcrfs_rows = [r for r in results if r["setup"] == "pcrfs"]
    verdicts = []
    if pcrfs_rows:
        L.append("## Targets (ratios from this run, same reader count)")
        L.append("")
        L.append(f"| pcrfs level | R | warm files/s | / native | >= {TARGET_NATIVE} | / squashfuse | "
                 f">= {TARGET_SQUASHFUSE} | cold amplification | <= {TARGET_AMPLIFICATION} | "
                 f"peak RSS MiB | <= {(TARGET_RSS_BASE + cache_cap) / MiB:.0f} |")
        L.append("|--:|--:|--:|--:|:-:|--:|:-:|--:|:-:|--:|:-:|")
        for r in pcrfs_rows:
            R = r["readers"]
            wf = r["warm"]["files_per_s"]
            nat = by.get(("native", 0, R))
            sq = by.get(("squashfuse", 0, R))
            cells = [f"{r['level']}", f"{R}", f"{wf:,.0f}"]
            if nat:
                x = wf / nat["warm"]["files_per_s"]
                cells += [f"{x:.2f}x", verdict(x >= TARGET_NATIVE)]
                verdicts.append(x >= TARGET_NATIVE)
            else:
                cells += ["-", "-"]
            if sq:
                x = wf / sq["warm"]["files_per_s"]
                cells += [f"{x:.2f}x", verdict(x >= TARGET_SQUASHFUSE)]
                verdicts.append(x >= TARGET_SQUASHFUSE)
            else:
                cells += ["-", "-"]
            a = r["amplification"]
            cells += [f"{a:.3f}", verdict(a <= TARGET_AMPLIFICATION)]
            verdicts.append(a <= TARGET_AMPLIFICATION)
            hwm = r["daemon_hwm"]
            cells += [f"{hwm / MiB:.1f}", verdict(hwm <= TARGET_RSS_BASE + cache_cap)]
            verdicts.append(hwm <= TARGET_RSS_BASE + cache_cap)
            L.append("| " + " | ".join(cells) + " |")
        L.append("")
        L.append(f"Overall: {sum(verdicts)} of {len(verdicts)} checks pass.")
        L.append("")
        # Cold and bandwidth context: pcrfs against the peers, cold.
        L.append("Cold files/s relative to the peers (not a target): " + "; ".join(
            f"L{r['level']} R{r['readers']}: "
            + (f"{r['cold']['files_per_s'] / by[('native', 0, r['readers'])]['cold']['files_per_s']:.2f}x native"
               if ("native", 0, r["readers"]) in by else "")
            + (f", {r['cold']['files_per_s'] / by[('squashfuse', 0, r['readers'])]['cold']['files_per_s']:.2f}x squashfuse"
               if ("squashfuse", 0, r["readers"]) in by else "")
            for r in pcrfs_rows))
        L.append("")
        lb = m["level_bytes"]
        bad = [r for r in pcrfs_rows if r["served_bytes"] != lb[r["level"] - 1]]
        L.append("Served bytes at level k = manifest.json level_bytes[k-1] for every pcrfs row: "
                 + ("yes" if not bad else "NO: " + ", ".join(
                     f"L{r['level']} served {r['served_bytes']} vs {lb[r['level'] - 1]}"
                     for r in bad)))
        L.append("")
    warnings = [r for r in results if "warning" in r]
    for r in warnings:
        L.append(f"Warning: {r['setup']} L{r['level']} R{r['readers']}: {r['warning']}")
    if requests:
        L.append(f"## FUSE requests per file (`-d` log, 1 reader, first {args.fuse_requests} "
                 f"files of the shuffled list, fresh mount after a cache drop)")
        L.append("")
        ops = sorted({op for v in requests.values() for c in v.values() for op in c})
        L.append("| daemon | epoch | " + " | ".join(ops) + " |")
        L.append("|---|---|" + "--:|" * len(ops))
        for name, v in requests.items():
            for epoch, c in v.items():
                L.append(f"| {name} | {epoch} | "
                         + " | ".join(f"{c.get(op, 0) / args.fuse_requests:.2f}" for op in ops)
                         + " |")
        L.append("")
    return "\n".join(L) + "\n"


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(
        description="pcrfs read benchmark against native and squashfuse (see the module docstring "
                    "at the top of this file for the method).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="image folder (generated if missing; default "
                    f"{BENCH_ROOT}/imagenet10k, or imagenet2k with --quick)")
    ap.add_argument("--images", type=int, help="images to generate if --data is missing "
                    "(default 10000, 2000 with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="2,000 images, 1 warm epoch: a smoke test of the harness")
    ap.add_argument("--levels", default="1,2,5,10", help="pcrfs levels (default 1,2,5,10)")
    ap.add_argument("--readers", default="1,2", help="reader process counts (default 1,2)")
    ap.add_argument("--setups", default="native,squashfuse,pcrfs",
                    help="which setups to run (default native,squashfuse,pcrfs)")
    ap.add_argument("--warm-epochs", type=int, help="interleaved warm epochs per setup, median "
                    "reported (default 7, 1 with --quick)")
    ap.add_argument("--cold-repeats", type=int, help="cold rounds (cache drop + fresh mount) per "
                    "setup; median files/s, worst amplification reported (default 3, 1 with "
                    "--quick)")
    ap.add_argument("--seed", type=int, default=1, help="shuffle seed (default 1)")
    ap.add_argument("-o", dest="pcrfs_opts", action="append", default=[],
                    help="extra pcrfs -o option, e.g. -o cache_size=512M (repeatable)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per epoch (default 600)")
    ap.add_argument("--fuse-requests", type=int, default=0, metavar="N",
                    help="also mount pcrfs (every level) and squashfuse with -d and count FUSE "
                         "requests per file over N files, cold and warm (default 0: off)")
    ap.add_argument("--work", default=f"{BENCH_ROOT}/read-work",
                    help="store, squashfs image and daemon logs (default %(default)s)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the store and squashfs image")
    ap.add_argument("--out", default=f"{BENCH_ROOT}/read_results.md", help="results file")
    ap.add_argument("--json", help="also write every raw number to this JSON file")
    args = ap.parse_args()
    warn_unless_bench_lock()

    if os.geteuid() != 0:
        fail("needs root (drop_caches and FUSE mounts)")
    for tool in ("mksquashfs", "squashfuse_ll", "fusermount3"):
        if not shutil.which(tool):
            fail(f"{tool} not found: apt-get install -y squashfs-tools squashfuse fuse3")
    if args.data is None:
        args.data = f"{BENCH_ROOT}/imagenet2k" if args.quick else f"{BENCH_ROOT}/imagenet10k"
    if args.images is None:
        args.images = 2000 if args.quick else 10000
    if args.warm_epochs is None:
        args.warm_epochs = 1 if args.quick else 7
    if args.cold_repeats is None:
        args.cold_repeats = 1 if args.quick else 3
    if args.warm_epochs < 1 or args.cold_repeats < 1:
        fail("--warm-epochs and --cold-repeats must be at least 1")
    args.data = os.path.abspath(args.data)
    args.levels = [int(x) for x in args.levels.split(",")]
    args.readers = [int(x) for x in args.readers.split(",")]
    args.setups = args.setups.split(",")
    if any(not 1 <= k <= 10 for k in args.levels):
        fail("levels are 1..10")
    args.mnt_base = os.path.dirname(os.path.normpath(args.work))
    args.pcr = find_tool("mount-tools/pcr", "pcr")
    args.pcrfs = find_tool("fs/pcrfs", "pcrfs")
    args.pcrfs_mtime = os.path.getmtime(args.pcrfs)
    args.program_files = sorted(set(program_files(args.pcrfs))
                                | set(program_files(shutil.which("squashfuse_ll"))))
    args.cache_bytes = 256 * MiB
    for o in args.pcrfs_opts:
        for kv in o.split(","):
            if kv.startswith("cache_size="):
                args.cache_bytes = parse_size(kv.split("=", 1)[1]) or args.cache_bytes

    started = time.time()
    load0 = loadavg()
    facts = prepare(args)
    rel, total_bytes = walk_files(args.data)
    if not rel:
        fail(f"no files under {args.data}")
    log(f"{len(rel)} files, {total_bytes / MB:.1f} MB; setups {args.setups}, levels {args.levels}, "
        f"readers {args.readers}")

    plan = []
    if "native" in args.setups:
        plan.append(("native", 0))
    if "squashfuse" in args.setups:
        plan.append(("squashfuse", 0))
    if "pcrfs" in args.setups:
        plan += [("pcrfs", k) for k in args.levels]
    results = []
    for R in args.readers:
        log(f"{R} reader(s): {len(plan)} setups x {args.cold_repeats} cold round(s), then "
            f"{args.warm_epochs} interleaved warm epoch(s)")
        for r in measure_readers(args, facts, plan, R, rel):
            log(f"  {r['setup']}{' L' + str(r['level']) if r['level'] else ''} R{R}: cold "
                f"{r['cold']['files_per_s']:,.0f} files/s, warm {r['warm']['files_per_s']:,.0f} "
                f"files/s, amplification {r['amplification']:.3f}")
            results.append(r)

    requests = {}
    if args.fuse_requests:
        sub = shuffled(rel, args.seed)[:args.fuse_requests]
        if "squashfuse" in args.setups:
            requests["squashfuse"] = count_requests(args, "squashfuse", 0, sub, facts)
        if "pcrfs" in args.setups:
            for k in args.levels:
                requests[f"pcrfs L{k}"] = count_requests(args, "pcrfs", k, sub, facts)

    text = report(args, facts, rel, total_bytes, results, requests, started,
                  time.time() - started, load0)
    write_results(text, args.out, args.json, {"results": results, "requests": requests})
    log(f"results written to {args.out}")


if __name__ == "__main__":
    main()
