#!/usr/bin/python3
"""End-to-end loader benchmark: a PyTorch DataLoader over ImageFolder, natively and through pcrfs.

Usage:
  tests/bench/loader_bench.py                        # 5,000 images, 2 rounds: see README for the time
  tests/bench/loader_bench.py --quick                # 1,000 images, 1 round: a smoke test
  tests/bench/loader_bench.py --cap 50,10 --repeat 3 --plot docs/loader.png
  tests/bench/loader_bench.py [--images N] [--levels 1,2,5,10] [--cap MB_PER_S,...] [--no-warm]
                              [--batch-size 64] [--workers 2] [--seed 1] [--decode-sample 500]
                              [--rebuild] [--out FILE] [--json FILE] [--plot FILE] [-o OPT ...]
                              [--variant OPT ...]

What one epoch is (the "loader"): torchvision.datasets.ImageFolder over the dataset root (one
folder per class), with the default PIL loader semantics (open, read, PIL decode, convert('RGB')),
transforms RandomResizedCrop(224) + ToTensor, and a DataLoader(batch_size 64, num_workers 2,
shuffle=True with a torch.Generator seeded per round, so every setup of a round sees the same
order and the same crops). Workers run torch.set_num_threads(1). The main process only iterates
the batches (no model): images/s is the loader's ceiling.

Where the time goes: the dataset's __getitem__ is instrumented. For every image the worker
measures, wall clock (perf_counter_ns) and its own thread's CPU time (thread_time_ns):
  read       open + read() of the whole file into memory (what a cold file costs in I/O wait)
  decode     PIL Image.open(BytesIO(bytes)) + convert('RGB'), from memory
  transform  RandomResizedCrop(224) + ToTensor
and returns these, its worker id and its process CPU time and wall time since it started, with
the sample (the DataLoader collates them into a tensor per batch); the collate function
(default_collate: stacking 64 float tensors of 3x224x224, 38.5 MB, into shared memory) times
itself too. Per setup the report gives images/s, mean ms/image of each phase ("other" = the
workers' wall time outside the phases: start-up, queue hand-off), the share of the workers' wall
time spent in read (I/O wait), the workers' CPU / wall, and the CPU per image of everything
involved (workers + main + pcrfs daemon: on a 2-core machine they compete for the same cores).

Setups: native (the dataset folder on ext4) and pcrfs levels 1, 2, 5, 10 (--levels), one
`pcrfs -f -o scans=K STORE MNT` mount per level, ImageFolder over the mount's root. --variant OPT
(repeatable) adds pcrfs at every level with an extra -o option as a setup of its own, side by
side in the same rounds (e.g. --variant prefetch=0,readahead=0, no speculative reads), and a
table of the defaults' images/s over the variant's.

Disk and bandwidth cap: the dataset (a seeded --images subset of --source, copied into
DISK/data/<class>/<file>) and its store (`pcr build`, defaults, DISK/data.pcrstore) live on an
ext4 file system on a loop device (direct I/O to its backing file --disk-image), built once and
reused (--rebuild). tests/bench/throttle.py (ThrottledDisk) caps its reads with a cgroup v1
blkio throttle; this process joins the cgroup (--cgroup) at the start, so the pcrfs daemons and
the DataLoader workers it forks are throttled too (each daemon's cgroup is checked). Each cap is
checked first with a cold sequential read of a 64 MiB probe file (throttle.measure_read_rate).
Conditions, for every setup:
  warm          (unless --no-warm) uncapped, every setup mounted, every file read once, then
                one timed epoch per setup: the page cache serves all bytes
  cold          sync, drop_caches, the programs' own files read back into the page cache (as in
                read_bench.py), a fresh mount, one epoch; only one of our mounts is up at a time
  cold, cap C   the same under each cap C of --cap (MB/s, MB = 10^6; default 50)
Rounds: --repeat (default 2); in each, every condition runs every setup, in an order rotated
each round; medians over the rounds are reported. Device bytes: sectors read of the loop device
(/sys/block/loopN/stat) during the epoch.

Decode cost, single process, files in memory (--decode-sample images, default 500): the bytes of
each setup (native source files; pcrfs level k files read through the mount) are decoded with
PIL (Image.open + convert('RGB')) --decode-reps times (default 5) in rotated order; median ms per
image, CPU (thread_time) and wall. Level 10 pixels are checked equal to the source pixels.

Needs root (drop_caches, FUSE and loop mounts, cgroups), Debian's python3-torch,
python3-torchvision, python3-pil, python3-matplotlib (hence /usr/bin/python3), and the installed
pcr/pcrfs (PATH, i.e. /usr/local/bin; --pcr/--pcrfs to choose others). Results: markdown on stdout and in --out (default
/var/tmp/pcrfs-bench/loader_results.md), JSON in --json (default the same path with .json), a
PNG plot in --plot (default docs/loader.png; /var/tmp/pcrfs-bench/loader_quick.png with --quick).
Every mount is undone in a finally block; every batch has a timeout (--timeout).
"""

import argparse
import io
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from benchlib import (BENCH_ROOT, MB, REPO, Mount, MiB, save_figure, write_results, drop_caches, fail,  # noqa: E402
                      loadavg, log, page_cache_drops, proc_cpu_seconds, proc_status_kib,
                      program_files, walk_files, warm_programs,
                      warn_unless_bench_lock)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
from PIL import Image, features  # noqa: E402
from torch.utils.data import DataLoader, default_collate  # noqa: E402
from torchvision import datasets, transforms  # noqa: E402

# Fields of the per-image info tensor a worker returns with each sample.
F_READ, F_READ_CPU, F_DEC, F_DEC_CPU, F_TF, F_TF_CPU, F_BYTES, F_WORKER, F_PCPU, F_T_END, \
    F_T_INIT = range(11)
NFIELDS = 11


# ---------------------------------------------------------------- the instrumented dataset

_WORKER = {"init_cpu": 0, "init_wall": 0, "id": -1}


def worker_init(worker_id):
    torch.set_num_threads(1)
    _WORKER["id"] = worker_id
    _WORKER["init_cpu"] = time.process_time_ns()
    _WORKER["init_wall"] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class TimedImageFolder(datasets.ImageFolder):
    """ImageFolder whose samples carry how long the worker spent reading, decoding and
    transforming them. Decoding is the default pil_loader's (Image.open + convert('RGB')), but
    from the bytes already in memory, so that reading and decoding are timed apart."""

    def __getitem__(self, index):
        path, target = self.samples[index]
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        with open(path, "rb") as f:
            data = f.read()
        w1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        img = Image.open(io.BytesIO(data))
        img = img.convert("RGB")
        w2, c2 = time.perf_counter_ns(), time.thread_time_ns()
        sample = self.transform(img)
        w3, c3 = time.perf_counter_ns(), time.thread_time_ns()
        info = torch.tensor([w1 - w0, c1 - c0, w2 - w1, c2 - c1, w3 - w2, c3 - c2, len(data),
                             _WORKER["id"], time.process_time_ns() - _WORKER["init_cpu"],
                             time.clock_gettime_ns(time.CLOCK_MONOTONIC), _WORKER["init_wall"]],
                            dtype=torch.int64)
        return sample, target, info


TRANSFORM = transforms.Compose([transforms.RandomResizedCrop(224), transforms.ToTensor()])


def timed_collate(batch):
    """default_collate, plus its own wall and CPU time (ns) appended to the batch."""
    w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    out = default_collate(batch)
    out.append(torch.tensor([time.perf_counter_ns() - w0, time.thread_time_ns() - c0]))
    return out


def run_epoch(root, args, seed):
    """One DataLoader epoch over ImageFolder(root); returns its numbers."""
    t_list0 = time.monotonic()
    ds = TimedImageFolder(root, transform=TRANSFORM)
    listing = time.monotonic() - t_list0
    g = torch.Generator()
    g.manual_seed(seed)
    dl = DataLoader(ds, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                    generator=g, worker_init_fn=worker_init, collate_fn=timed_collate,
                    timeout=args.timeout,
                    persistent_workers=False)
    cpu0 = time.process_time()
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    infos, n, first, wait, collate = [], 0, None, 0, np.zeros(2, dtype=np.int64)
    it = iter(dl)
    while True:
        tw = time.perf_counter_ns()
        try:
            x, y, info, ct = next(it)
        except StopIteration:
            break
        wait += time.perf_counter_ns() - tw
        if first is None:
            first = (time.clock_gettime_ns(time.CLOCK_MONOTONIC) - t0) / 1e9
        n += x.shape[0]
        infos.append(info.numpy().copy())
        collate += ct.numpy()
        del x, y, info, ct
    t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    main_cpu = time.process_time() - cpu0
    del it, dl
    a = np.concatenate(infos) if infos else np.zeros((0, NFIELDS), dtype=np.int64)
    if n != len(ds):
        raise RuntimeError(f"epoch under {root} yielded {n} of {len(ds)} images")
    wall = (t1 - t0) / 1e9
    workers = {}
    for w in np.unique(a[:, F_WORKER]):
        rows = a[a[:, F_WORKER] == w]
        init = rows[0, F_T_INIT]
        workers[int(w)] = {"images": len(rows), "cpu": rows[:, F_PCPU].max() / 1e9,
                           "wall": (rows[:, F_T_END].max() - init) / 1e9,
                           "start": (init - t0) / 1e9}
    worker_wall = sum(w["wall"] for w in workers.values())
    worker_cpu = sum(w["cpu"] for w in workers.values())
    ms = lambda col: float(a[:, col].mean() / 1e6)  # noqa: E731
    return {
        "images": n, "wall": wall, "images_per_s": n / wall, "listing_s": listing,
        "first_batch_s": first, "main_wait_s": wait / 1e9, "main_cpu_s": main_cpu,
        "bytes": int(a[:, F_BYTES].sum()),
        "read_ms": ms(F_READ), "read_cpu_ms": ms(F_READ_CPU),
        "decode_ms": ms(F_DEC), "decode_cpu_ms": ms(F_DEC_CPU),
        "transform_ms": ms(F_TF), "transform_cpu_ms": ms(F_TF_CPU),
        "read_ms_p90": float(np.percentile(a[:, F_READ], 90) / 1e6),
        "worker_wall_s": worker_wall, "worker_cpu_s": worker_cpu,
        "io_wait_frac": float(a[:, F_READ].sum() / 1e9 / worker_wall) if worker_wall else 0.0,
        "worker_cpu_frac": worker_cpu / worker_wall if worker_wall else 0.0,
        "collate_ms": collate[0] / 1e6 / n, "collate_cpu_ms": collate[1] / 1e6 / n,
        "other_ms": (worker_wall - (a[:, [F_READ, F_DEC, F_TF]].sum() + collate[0]) / 1e9)
        / n * 1e3,
        "workers": workers,
    }


# ---------------------------------------------------------------- disk, dataset and store

class PlainDisk:
    """--no-throttle: the data on the root file system, no cap, no device counters."""

    def __init__(self, mountpoint):
        self.mountpoint = mountpoint
        self.device = None
        self.majmin = None
        os.makedirs(mountpoint, exist_ok=True)

    def cap(self, bytes_per_s):
        if bytes_per_s is not None:
            raise RuntimeError("no bandwidth cap without throttle.py")

    def join(self, pid=None):
        pass

    def preexec(self):
        return None

    def close(self):
        pass


def device_read_bytes(disk):
    """Bytes read from the loop device (its sectors-read counter), 0 without one."""
    return disk.device_read_bytes() if disk.device else 0


def charged_read_bytes(disk):
    """Read bytes charged to our blkio cgroup on the loop device, 0 without one."""
    return disk.charged_read_bytes() if disk.device else 0


def machine_busy_seconds():
    """CPU seconds all cores spent busy since boot (/proc/stat: everything but idle and iowait)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def choose_subset(args):
    rel, _ = walk_files(args.source)
    rel = [p for p in rel if p.lower().endswith((".jpeg", ".jpg"))]
    if len(rel) < args.images:
        fail(f"{args.source} holds {len(rel)} JPEGs, fewer than --images {args.images}")
    pick = sorted(random.Random(args.seed).sample(rel, args.images))
    # DISK/data/<class>/<file>: the class is the file's parent folder (the split is dropped).
    out = [(p, os.path.join(os.path.basename(os.path.dirname(p)), os.path.basename(p)))
           for p in pick]
    if len({d for _, d in out}) != len(out):
        fail("file names collide once the split folders are dropped")
    return out


def prepare_disk_contents(args, disk, subset):
    """Copies the subset into DISK/data and builds DISK/data.pcrstore, unless DISK/READY.json
    says this exact subset and store are already there."""
    root = disk.mountpoint
    data, store = os.path.join(root, "data"), os.path.join(root, "data.pcrstore")
    ready = os.path.join(root, "READY.json")
    # A store made by another pcr (perhaps of another index format) is built again.
    pcr_st = os.stat(args.pcr)
    want = {"source": args.source, "images": args.images, "seed": args.seed,
            "files": [d for _, d in subset],
            "pcr": [os.path.realpath(args.pcr), pcr_st.st_size, pcr_st.st_mtime]}
    facts = {"data": data, "store": store}
    if not args.rebuild and os.path.exists(ready):
        with open(ready) as f:
            if json.load(f) == want:
                log(f"reusing {data} and {store}")
                return facts
    for p in (ready, data, store):
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.exists(p):
            os.unlink(p)
    t0 = time.monotonic()
    for src, dst in subset:
        d = os.path.join(data, dst)
        os.makedirs(os.path.dirname(d), exist_ok=True)
        shutil.copyfile(os.path.join(args.source, src), d)
    facts["copy_seconds"] = time.monotonic() - t0
    log(f"copied {len(subset)} files in {facts['copy_seconds']:.1f} s; pcr build")
    t0 = time.monotonic()
    r = subprocess.run([args.pcr, "build", data, store, "-q"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    if r.returncode != 0:
        fail(f"pcr build failed ({r.returncode}):\n{r.stdout.decode(errors='replace')[-3000:]}")
    facts["store_seconds"] = time.monotonic() - t0
    os.sync()
    with open(ready, "w") as f:
        json.dump(want, f)
    os.sync()
    return facts


# ---------------------------------------------------------------- conditions and rounds

NATIVE = (0, "")


def setup_name(setup):
    """setup = (level, variant): (0, '') is native, (k, '') pcrfs at level k with the default
    options (and -o), (k, 'prefetch=0') the same with an extra -o option (--variant)."""
    level, variant = setup
    if not level:
        return "native"
    return f"pcrfs L{level}" + (f" {variant}" if variant else "")


def cond_name(cond):
    kind, cap = cond
    if kind == "cold":
        return f"cold, {cap / MB:g} MB/s cap" if cap else "cold, uncapped"
    return "warm (page cache)"


def mount_level(args, facts, setup, disk):
    level, variant = setup
    tag = f"L{level}" + (f"-v{args.variants.index(variant) + 1}" if variant else "")
    mnt = os.path.join(BENCH_ROOT, f"mnt-loader-{tag}")
    log_path = os.path.join(BENCH_ROOT, f"loader-daemon-{tag}.log")
    opts = [f"scans={level}"] + args.pcrfs_opts + ([variant] if variant else [])
    m = Mount([args.pcrfs, facts["store"], mnt, "-f", "-o", ",".join(opts)], mnt, log_path)
    from throttle import cgroup_of
    cg = cgroup_of(m.pid)
    if disk.majmin and cg != cgroup_of("self"):
        m.close()
        raise RuntimeError(f"pcrfs daemon in blkio cgroup {cg}, not ours ({cgroup_of('self')})")
    return m


def measured_epoch(args, facts, disk, root, mount, seed, drops0=None):
    """One epoch with the device, cgroup and daemon counters around it. drops0: the
    drop_caches count from which a foreign cache drop would spoil the epoch (default: now)."""
    drops0 = page_cache_drops() if drops0 is None else drops0
    dev0, ch0 = device_read_bytes(disk), charged_read_bytes(disk)
    d0 = proc_cpu_seconds(mount.pid) if mount else 0.0
    busy0 = machine_busy_seconds()
    r = run_epoch(root, args, seed)
    busy = machine_busy_seconds() - busy0
    r["device_bytes"] = device_read_bytes(disk) - dev0
    r["charged_bytes"] = charged_read_bytes(disk) - ch0
    r["foreign_drops"] = page_cache_drops() - drops0
    if mount:
        r["daemon_cpu_s"] = proc_cpu_seconds(mount.pid) - d0
        r["daemon_hwm"] = proc_status_kib(mount.pid, "VmHWM") * 1024
        try:  # what the record prefetcher did (its probe pauses it on bandwidth-bound storage)
            r["prefetch"] = os.getxattr(mount.mnt, "user.pcrfs.prefetch").decode()
        except OSError:
            r["prefetch"] = None
    else:
        r["daemon_cpu_s"] = 0.0
    ours = r["worker_cpu_s"] + r["main_cpu_s"] + r["daemon_cpu_s"]
    r["cpu_ms_per_image"] = ours / r["images"] * 1e3
    # Busy CPU seconds of the machine not spent in our processes (other jobs; also the kernel's
    # loop and writeback threads): a shared machine's load, per epoch.
    r["foreign_cpu_s"] = max(0.0, busy - ours)
    return r


def cold_epoch(args, facts, disk, setup, cap, seed):
    disk.cap(cap)
    drop_caches()
    warm_programs(args.program_files)
    mount = None
    try:
        t0 = time.monotonic()
        if setup[0]:
            mount = mount_level(args, facts, setup, disk)
        mount_s = time.monotonic() - t0
        root = mount.mnt if mount else facts["data"]
        r = measured_epoch(args, facts, disk, root, mount, seed)
        r["mount_s"] = mount_s
        return r
    finally:
        if mount:
            mount.close()
        disk.cap(None)


def read_all(root):
    n = 0
    for d, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                n += len(f.read())
    return n


def warm_epochs(args, facts, disk, setups, seed):
    disk.cap(None)
    mounts, out = {}, {}
    try:
        roots = {}
        drops0 = page_cache_drops()
        for s in setups:
            if s[0]:
                mounts[s] = mount_level(args, facts, s, disk)
                roots[s] = mounts[s].mnt
            else:
                roots[s] = facts["data"]
            read_all(roots[s])
        for s in setups:
            out[s] = measured_epoch(args, facts, disk, roots[s], mounts.get(s), seed, drops0)
    finally:
        for m in mounts.values():
            m.close()
    return out


def run_rounds(args, facts, disk):
    setups = [NATIVE] + [(k, "") for k in args.levels] + [(k, v) for v in args.variants
                                                           for k in args.levels]
    conds = ([("warm", None)] if args.warm else []) + [("cold", None)] \
        + [("cold", c) for c in sorted(args.caps, reverse=True)]
    res = {(c, s): [] for c in conds for s in setups}
    for rnd in range(args.repeat):
        order = setups[rnd % len(setups):] + setups[:rnd % len(setups)]
        seed = args.seed * 1000 + rnd
        for cond in conds:
            log(f"round {rnd + 1}/{args.repeat}, {cond_name(cond)}: "
                f"{', '.join(setup_name(s) for s in order)} (load {loadavg()})")
            if cond[0] == "cold":
                got = {}
                for s in order:
                    got[s] = cold_epoch(args, facts, disk, s, cond[1], seed)
                    log_epoch(cond, s, got[s])
            else:
                got = warm_epochs(args, facts, disk, order, seed)
                for s in order:
                    log_epoch(cond, s, got[s])
            for s in setups:
                got[s]["round"] = rnd
                got[s]["loadavg"] = loadavg()
                res[(cond, s)].append(got[s])
    return conds, setups, res


def log_epoch(cond, setup, r):
    log(f"  {cond_name(cond)}, {setup_name(setup)}: {r['images_per_s']:,.0f} images/s "
        + (f"[{r['foreign_drops']} FOREIGN CACHE DROPS] " if r["foreign_drops"] else "") +
        f"({r['wall']:.1f} s), read {r['read_ms']:.2f} decode {r['decode_ms']:.2f} transform "
        f"{r['transform_ms']:.2f} ms/image, I/O wait {r['io_wait_frac'] * 100:.0f}%, device "
        f"{r['device_bytes'] / MB:.1f} MB, daemon CPU {r['daemon_cpu_s']:.2f} s"
        + (f", prefetcher: {r['prefetch']}" if r.get("prefetch") else ""))


def summarize(epochs):
    keys = ["images_per_s", "wall", "read_ms", "read_cpu_ms", "read_ms_p90", "decode_ms",
            "decode_cpu_ms", "transform_ms", "transform_cpu_ms", "collate_ms", "collate_cpu_ms",
            "other_ms", "io_wait_frac", "charged_bytes",
            "worker_cpu_frac", "cpu_ms_per_image", "daemon_cpu_s", "device_bytes", "bytes",
            "first_batch_s", "listing_s", "main_cpu_s"]
    s = {k: statistics.median(e[k] for e in epochs) for k in keys}
    s["all_images_per_s"] = [e["images_per_s"] for e in epochs]
    s["all_foreign_drops"] = [e["foreign_drops"] for e in epochs]
    s["all_foreign_cpu"] = [e["foreign_cpu_s"] for e in epochs]
    if any("mount_s" in e for e in epochs):
        s["mount_s"] = statistics.median(e.get("mount_s", 0) for e in epochs)
    if any("daemon_hwm" in e for e in epochs):
        s["daemon_hwm"] = max(e.get("daemon_hwm", 0) for e in epochs)
    return s


# ---------------------------------------------------------------- decode cost in one process

def decode_bench(args, facts, disk, subset):
    disk.cap(None)
    rel = [d for _, d in subset]
    sample = random.Random(args.seed + 7).sample(rel, min(args.decode_sample, len(rel)))
    setups = [0] + args.levels
    blobs = {}
    for level in setups:
        if level:
            m = mount_level(args, facts, (level, ""), disk)
            try:
                blobs[level] = [open(os.path.join(m.mnt, p), "rb").read() for p in sample]
            finally:
                m.close()
        else:
            blobs[0] = [open(os.path.join(facts["data"], p), "rb").read() for p in sample]
    # Level 10 must decode to the source pixels; every level to the source's size and mode.
    mismatch, size_mismatch = 0, 0
    for a, b10 in zip(blobs[0], blobs.get(10, blobs[0])):
        ia = Image.open(io.BytesIO(a)).convert("RGB")
        ib = Image.open(io.BytesIO(b10)).convert("RGB")
        if ia.size != ib.size or not np.array_equal(np.asarray(ia), np.asarray(ib)):
            mismatch += 1
    for level in args.levels:
        for a, b in zip(blobs[0], blobs[level]):
            if Image.open(io.BytesIO(a)).size != Image.open(io.BytesIO(b)).size:
                size_mismatch += 1
    progressive = {lv: sum(1 for b in blobs[lv] if Image.open(io.BytesIO(b)).info.get("progressive")
                           or Image.open(io.BytesIO(b)).info.get("progression"))
                   for lv in setups}
    times = {lv: {"cpu": [], "wall": []} for lv in setups}
    torch.set_num_threads(1)
    for rep in range(args.decode_reps):
        order = setups[rep % len(setups):] + setups[:rep % len(setups)]
        for lv in order:
            c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
            for b in blobs[lv]:
                Image.open(io.BytesIO(b)).convert("RGB")
            c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
            times[lv]["cpu"].append((c1 - c0) / len(sample) / 1e6)
            times[lv]["wall"].append((w1 - w0) / len(sample) / 1e6)
    out = {}
    for lv in setups:
        out[lv] = {"images": len(sample), "mean_bytes": sum(map(len, blobs[lv])) / len(sample),
                   "cpu_ms": statistics.median(times[lv]["cpu"]),
                   "wall_ms": statistics.median(times[lv]["wall"]),
                   "all_cpu_ms": times[lv]["cpu"], "progressive": progressive[lv]}
    return {"levels": out, "l10_pixel_mismatches": mismatch if 10 in blobs else None,
            "size_mismatches": size_mismatch, "sample": len(sample)}


# ---------------------------------------------------------------- report and plot

def report(args, facts, conds, setups, res, summ, dec, started, elapsed, load0, load1):
    L = ["# pcrfs end-to-end DataLoader benchmark", ""]
    m = facts["manifest"]
    head = subprocess.run(["git", "-C", REPO, "log", "-1", "--format=%h %s"], capture_output=True,
                          text=True).stdout.strip()
    L.append(f"- Date: {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(started))}, run time "
             f"{elapsed / 60:.1f} min; host {platform.node()}, kernel {platform.release()}, "
             f"{os.cpu_count()} cores; load average at start {load0}, at end {load1}")
    L.append(f"- torch {torch.__version__}, torchvision {torchvision.__version__}, Pillow "
             f"{Image.__version__} (libjpeg-turbo: {features.check_feature('libjpeg_turbo')}), "
             f"numpy {np.__version__}, Python {platform.python_version()}")
    L.append(f"- pcrfs: `{args.pcrfs}` (installed "
             f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(os.path.getmtime(args.pcrfs)))}), repository at `{head[:90]}`; mount options "
             f"`scans=K{''.join(',' + o for o in args.pcrfs_opts)}`, one mount per level"
             + "".join(f"; variant: the same with `,{v}`" for v in args.variants))
    L.append(f"- Dataset: {args.images:,} JPEGs, a seeded subset (seed {args.seed}) of "
             f"`{args.source}` copied to `{facts['data']}` (one folder per class, "
             f"{len(facts['classes'])} classes), {facts['source_bytes'] / MB:,.1f} MB, mean "
             f"{facts['source_bytes'] / args.images / 1024:.1f} KiB; store `{facts['store']}` "
             f"({m['num_records']} records, {m['num_jpeg']} JPEG + {m['num_passthrough']} "
             f"passthrough)")
    L.append(f"- Disk: {facts['disk_desc']}")
    L.append(f"- Loader: ImageFolder (open + read, PIL decode + convert('RGB') from memory), "
             f"RandomResizedCrop(224) + ToTensor, DataLoader batch_size {args.batch_size}, "
             f"num_workers {args.workers}, shuffle with a generator seeded per round, workers "
             f"torch.set_num_threads(1); the main process only iterates. {args.repeat} round(s), "
             f"setups rotated each round; medians shown.")
    L.append("- Cold: sync + drop_caches + programs' files read back + a fresh mount before "
             "every epoch, one mount up at a time. Warm: all mounted, every file read once, then "
             "the timed epochs. ms/image are means over images of each worker's wall time in "
             "the phase; I/O wait = share of the workers' wall time spent in read; CPU ms/image "
             "= (workers + main + pcrfs daemon CPU) / images. MB = 10^6 bytes.")
    L.append("")
    nat = {c: summ[(c, NATIVE)] for c in conds}
    L.append("## Images/s")
    L.append("")
    L.append("| setup | served MB | " + " | ".join(cond_name(c) for c in conds) + " |")
    L.append("|---|--:|" + "--:|" * len(conds))
    for s in setups:
        cells = [setup_name(s), f"{summ[(conds[0], s)]['bytes'] / MB:,.1f}"]
        for c in conds:
            v = summ[(c, s)]["images_per_s"]
            cells.append(f"{v:,.0f}" + (f" ({v / nat[c]['images_per_s']:.2f}x)" if s[0] else ""))
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("(x = images/s relative to native under the same condition.)")
    L.append("")
    for v in args.variants:
        L.append(f"Defaults over `{v}` (images/s of pcrfs with the defaults / with `{v}`, "
                 f"medians of the same rounds; >= 1 means the defaults are at least as fast):")
        L.append("")
        L.append("| condition | " + " | ".join(f"L{k}" for k in args.levels) + " |")
        L.append("|---|" + "--:|" * len(args.levels))
        for c in conds:
            L.append(f"| {cond_name(c)} | " + " | ".join(
                f"{summ[(c, (k, ''))]['images_per_s'] / summ[(c, (k, v))]['images_per_s']:.2f}"
                for k in args.levels) + " |")
        L.append("")
    L.append("## Where the time goes")
    L.append("")
    L.append("| condition | setup | images/s | read ms | decode ms | transform ms | collate ms | "
             "other ms | I/O wait | worker CPU/wall | CPU ms/image | daemon CPU s | device MB (/ served) | "
             "read p90 ms | first batch s |")
    L.append("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for c in conds:
        for s in setups:
            r = summ[(c, s)]
            L.append(f"| {cond_name(c)} | {setup_name(s)} | {r['images_per_s']:,.0f} | "
                     f"{r['read_ms']:.2f} | {r['decode_ms']:.2f} | {r['transform_ms']:.2f} | "
                     f"{r['collate_ms']:.2f} | {r['other_ms']:.2f} | {r['io_wait_frac'] * 100:.0f}% | "
                     f"{r['worker_cpu_frac'] * 100:.0f}% | {r['cpu_ms_per_image']:.2f} | "
                     f"{r['daemon_cpu_s']:.2f} | {r['device_bytes'] / MB:,.1f} "
                     f"({r['device_bytes'] / r['bytes']:.2f}x) | "
                     f"{r['read_ms_p90']:.2f} | {r['first_batch_s']:.2f} |")
    L.append("")
    L.append("CPU time inside the phases (thread_time, ms/image; the rest of the wall time above "
             "is waiting: for the device in read, for a core in decode/transform):")
    L.append("")
    L.append("| condition | setup | read CPU | decode CPU | transform CPU | collate CPU |")
    L.append("|---|---|--:|--:|--:|--:|")
    for c in conds:
        for s in setups:
            r = summ[(c, s)]
            L.append(f"| {cond_name(c)} | {setup_name(s)} | {r['read_cpu_ms']:.2f} | "
                     f"{r['decode_cpu_ms']:.2f} | {r['transform_cpu_ms']:.2f} | "
                     f"{r['collate_cpu_ms']:.2f} |")
    L.append("")
    lv = dec["levels"]
    L.append(f"## Decode cost, one process, files in memory ({dec['sample']} images, "
             f"{args.decode_reps} reps, median)")
    L.append("")
    L.append("| setup | mean KiB | progressive files | decode CPU ms/image | / native | "
             "decode wall ms/image |")
    L.append("|---|--:|--:|--:|--:|--:|")
    for s in [0] + args.levels:
        d = lv[s]
        L.append(f"| {setup_name((s, ''))} | {d['mean_bytes'] / 1024:.1f} | {d['progressive']} | "
                 f"{d['cpu_ms']:.2f} | {d['cpu_ms'] / lv[0]['cpu_ms']:.2f}x | {d['wall_ms']:.2f} |")
    L.append("")
    if dec["l10_pixel_mismatches"] is not None:
        L.append(f"Level 10 decodes to the source pixels: "
                 f"{dec['sample'] - dec['l10_pixel_mismatches']} of {dec['sample']} images "
                 f"identical. Image sizes equal to the source at every level: "
                 f"{'yes' if not dec['size_mismatches'] else 'NO (' + str(dec['size_mismatches']) + ')'}.")
        L.append("")
    L.append("## Every epoch (images/s, one per round; in brackets: CPU seconds other "
             "processes used during the epoch)")
    L.append("")
    for c in conds:
        L.append(f"- {cond_name(c)}: " + "; ".join(
            f"{setup_name(s)} " + ", ".join(
                f"{v:,.0f}" + ("*" if d else "") + f" ({fc:.1f})"
                for v, d, fc in zip(summ[(c, s)]['all_images_per_s'],
                                    summ[(c, s)]['all_foreign_drops'],
                                    summ[(c, s)]['all_foreign_cpu']))
            for s in setups))
    L.append("")
    spoiled = sum(1 for v in summ.values() for d in v["all_foreign_drops"] if d)
    total = sum(len(v["all_foreign_drops"]) for v in summ.values())
    L.append(f"Epochs during which another process dropped the page cache (/proc/vmstat "
             f"drop_pagecache; marked * above): {spoiled} of {total}.")
    L.append("")
    mounts = [f"{setup_name(s)} {summ[(c, s)]['mount_s']:.2f}" for c in conds for s in setups
              if s[0] and "mount_s" in summ[(c, s)] and c == conds[0]]
    if mounts:
        L.append(f"Mount time, {cond_name(conds[0])} (s): " + ", ".join(mounts) + ". ImageFolder "
                 "listing (s, cold uncapped): " + ", ".join(
                     f"{setup_name(s)} {summ[(('cold', None), s)]['listing_s']:.2f}"
                     for s in setups) + ".")
        L.append("")
    bad = []
    lb = m["level_bytes"]
    for s in setups:
        if s[0] and summ[(conds[0], s)]["bytes"] != lb[s[0] - 1]:
            bad.append(f"{setup_name(s)} served {summ[(conds[0], s)]['bytes']} vs manifest "
                       f"{lb[s[0] - 1]}")
    if summ[(conds[0], NATIVE)]["bytes"] != facts["source_bytes"]:
        bad.append(f"native served {summ[(conds[0], NATIVE)]['bytes']} vs "
                   f"{facts['source_bytes']}")
    dev = sum(e["device_bytes"] for (c, s), v in res.items() for e in v if c[0] == "cold")
    chg = sum(e["charged_bytes"] for (c, s), v in res.items() for e in v if c[0] == "cold")
    if dev:
        L.append(f"Loop device reads during the cold epochs: {dev / MB:,.1f} MB, of which "
                 f"{chg / MB:,.1f} MB charged to our cgroup (the throttle caps what is charged).")
        L.append("")
    L.append("Bytes served = manifest level_bytes (pcrfs) and the source size (native): "
             + ("yes" if not bad else "NO: " + "; ".join(bad)))
    L.append("")
    return "\n".join(L) + "\n"


def plot(args, conds, setups, summ, dec, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [setup_name(s).replace("pcrfs ", "") for s in setups]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), gridspec_kw={"width_ratios": [1, 1.9, 0.8]})
    palette = ["#ff7f0e", "#d62728", "#9467bd", "#8c564b"]
    colors, k = [], 0
    for c in conds:
        if c[0] == "warm":
            colors.append("#2ca02c")
        elif not c[1]:
            colors.append("#1f77b4")
        else:
            colors.append(palette[k % len(palette)])
            k += 1
    ax = axes[0]
    w = 0.8 / len(conds)
    for i, c in enumerate(conds):
        ys = [summ[(c, s)]["images_per_s"] for s in setups]
        xs = [j + (i - (len(conds) - 1) / 2) * w for j in range(len(setups))]
        ax.bar(xs, ys, w, label=cond_name(c), color=colors[i])
    ax.set_xticks(range(len(setups)))
    ax.set_xticklabels(names)
    ax.set_ylabel("images/s (higher is better)")
    ax.set_title(f"DataLoader images/s ({args.workers} workers)")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=2)
    ax.grid(axis="y", alpha=0.3)

    ax = axes[1]
    phases = [("read_ms", "read (I/O wait)", "#7f7f7f"), ("decode_ms", "decode", "#1f77b4"),
              ("transform_ms", "transform", "#2ca02c"), ("collate_ms", "collate", "#bcbd22"),
              ("other_ms", "other (queue, start-up)", "#dddddd")]
    x, ticks, labels = 0, [], []
    for i, c in enumerate(conds):
        for j, s in enumerate(setups):
            r = summ[(c, s)]
            bottom = 0
            for key, lab, col in phases:
                v = max(0.0, r[key])
                ax.bar(x, v, 0.8, bottom=bottom, color=col, label=lab if (i, j) == (0, 0) else None)
                bottom += v
            ticks.append(x)
            labels.append(names[j])
            x += 1
        if i < len(conds) - 1:
            ax.axvline(x, color="k", lw=0.5, alpha=0.4)
        ax.text(x - len(setups) / 2 - 0.5, 1.0, cond_name(c), transform=ax.get_xaxis_transform(),
                ha="center", va="bottom", fontsize=8)
        x += 1
    ax.set_xticks(ticks)
    ax.set_xticklabels(labels, fontsize=7, rotation=90)
    ax.set_ylabel("worker wall ms per image")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=5)
    ax.grid(axis="y", alpha=0.3)

    ax = axes[2]
    lv = dec["levels"]
    ys = [lv[s]["cpu_ms"] for s in [0] + args.levels]
    ax.bar(range(len(ys)), ys, 0.6, color=["#7f7f7f"] + ["#1f77b4"] * len(args.levels))
    for j, v in enumerate(ys):
        ax.text(j, v, f"{v / ys[0]:.2f}x", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(ys)))
    ax.set_xticklabels(["native"] + [f"L{k}" for k in args.levels])
    ax.set_ylabel("decode CPU ms per image")
    ax.set_title("PIL decode, 1 process, in memory", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    return save_figure(fig, path, dpi=80)


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(
        description="End-to-end PyTorch DataLoader benchmark, native against pcrfs levels, with "
                    "and without a bandwidth cap (method: the module docstring).",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", default=f"{BENCH_ROOT}/imagenet10k",
                    help="image tree to take the subset from (default %(default)s; generated "
                    "with tests/data/make_dataset.py --images 10000 --seed 1 if missing)")
    ap.add_argument("--images", type=int, help="images in the subset (default 5000, 1000 with "
                    "--quick)")
    ap.add_argument("--quick", action="store_true", help="1,000 images, 1 round, 100-image "
                    "decode sample, no warm condition: a smoke test")
    ap.add_argument("--levels", default="1,2,5,10", help="pcrfs levels (default %(default)s)")
    ap.add_argument("--cap", default="50", help="bandwidth caps, MB/s (10^6 bytes), comma "
                    "separated; each is a cold condition (default %(default)s); 0 or '' for none")
    ap.add_argument("--no-warm", dest="warm", action="store_false", help="skip the warm condition")
    ap.add_argument("--repeat", type=int, help="rounds (default 2, 1 with --quick)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1, help="subset and shuffle seed")
    ap.add_argument("--decode-sample", type=int, help="images in the decode benchmark "
                    "(default 500, 100 with --quick)")
    ap.add_argument("--decode-reps", type=int, default=5)
    ap.add_argument("--disk-image", default=f"{BENCH_ROOT}/loader.img",
                    help="backing file of the loop disk (default %(default)s)")
    ap.add_argument("--disk-mnt", default=f"{BENCH_ROOT}/loader-disk",
                    help="where the loop disk is mounted (default %(default)s)")
    ap.add_argument("--cgroup", default="pcrfs-loader", help="blkio cgroup name")
    ap.add_argument("--no-throttle", action="store_true", help="no loop disk, no cap: the data "
                    "in --disk-mnt on the root file system (for systems without cgroup v1 blkio)")
    ap.add_argument("--rebuild", action="store_true", help="copy the subset and build the "
                    "store again")
    ap.add_argument("-o", dest="pcrfs_opts", action="append", default=[],
                    help="extra pcrfs -o option (repeatable)")
    ap.add_argument("--variant", dest="variants", action="append", default=[],
                    help="also run pcrfs at every level with this extra -o option, as its own "
                         "setup side by side (repeatable), e.g. --variant prefetch=0,readahead=0")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per batch")
    ap.add_argument("--pcr", help="pcr binary (default: the one on PATH, /usr/local/bin/pcr)")
    ap.add_argument("--pcrfs", help="pcrfs binary (default: the one on PATH)")
    ap.add_argument("--out", default=f"{BENCH_ROOT}/loader_results.md")
    ap.add_argument("--json", help="raw numbers (default: --out with .json)")
    ap.add_argument("--plot", help="PNG plot (default docs/loader.png; "
                    f"{BENCH_ROOT}/loader_quick.png with --quick)")
    args = ap.parse_args()
    warn_unless_bench_lock()

    if os.geteuid() != 0:
        fail("needs root (drop_caches, FUSE and loop mounts, cgroups)")
    q = args.quick
    args.images = args.images or (1000 if q else 5000)
    args.repeat = args.repeat or (1 if q else 2)
    args.decode_sample = args.decode_sample or (100 if q else 500)
    if q:
        args.warm = False
    args.plot = args.plot or (f"{BENCH_ROOT}/loader_quick.png" if q
                              else os.path.join(REPO, "docs/loader.png"))
    args.json = args.json or os.path.splitext(args.out)[0] + ".json"
    args.levels = [int(x) for x in args.levels.split(",") if x]
    if any(not 1 <= k <= 10 for k in args.levels):
        fail("levels are 1..10")
    args.caps = [float(x) * MB for x in args.cap.split(",") if x.strip() and float(x) > 0]
    if args.no_throttle and args.caps:
        fail("--no-throttle runs no cap: add --cap 0")
    args.source = os.path.abspath(args.source)
    for name in ("pcr", "pcrfs"):
        p = getattr(args, name) or shutil.which(name)
        if not p or not os.access(p, os.X_OK):
            fail(f"{name} not found: install it (ninja -C build install) or pass --{name}")
        setattr(args, name, os.path.abspath(p))

    started = time.time()
    load0 = loadavg()
    if not os.path.isdir(args.source):
        log(f"generating {args.source}")
        subprocess.run(["/usr/bin/python3", os.path.join(REPO, "tests/data/make_dataset.py"),
                        args.source, "--images", "10000", "--seed", "1"], check=True)
    subset = choose_subset(args)
    src_bytes = sum(os.path.getsize(os.path.join(args.source, s)) for s, _ in subset)

    if args.no_throttle:
        disk = PlainDisk(args.disk_mnt)
        disk_desc = f"no loop disk, no cap (`--no-throttle`): `{args.disk_mnt}` on the root fs"
    else:
        from throttle import ThrottledDisk
        size = int(2.3 * src_bytes) + 320 * MiB  # data, store, 64 MiB cap probe, ext4
        if args.rebuild and os.path.exists(args.disk_image):
            os.unlink(args.disk_image)
        disk = ThrottledDisk(args.disk_image, size, args.disk_mnt, cgroup_name=args.cgroup)
        with open(f"/sys/block/{os.path.basename(disk.device)}/queue/read_ahead_kb") as f:
            ra = f.read().strip()
        disk_desc = (f"ext4 on `{disk.device}` ({disk.majmin}, read_ahead_kb {ra}), a loop "
                     f"device with direct I/O to `{args.disk_image}`; cgroup v1 blkio `{args.cgroup}` "
                     f"(read_bps_device) caps its reads; the daemons, this process and its "
                     f"DataLoader workers are in the cgroup")
    try:
        facts = prepare_disk_contents(args, disk, subset)
        facts["disk_desc"] = disk_desc
        facts["source_bytes"] = src_bytes
        facts["classes"] = sorted({os.path.dirname(d) for _, d in subset})
        with open(os.path.join(facts["store"], "manifest.json")) as f:
            facts["manifest"] = json.load(f)
        if args.caps:
            from throttle import check_caps
            facts["disk_desc"] += ("; a cold sequential read of a probe file measured "
                                   + check_caps(disk, args.caps, log))
        disk.join()
        args.program_files = sorted(set(program_files(args.pcrfs)))
        log(f"{args.images} images ({src_bytes / MB:.1f} MB), levels {args.levels}, caps "
            f"{[c / MB for c in args.caps]} MB/s, warm {args.warm}, {args.repeat} round(s); "
            f"load {load0}")
        conds, setups, res = run_rounds(args, facts, disk)
        log("decode benchmark")
        dec = decode_bench(args, facts, disk, subset)
    finally:
        disk.close()
    summ = {k: summarize(v) for k, v in res.items()}
    load1 = loadavg()
    text = report(args, facts, conds, setups, res, summ, dec, started, time.time() - started, load0,
                  load1)
    write_results(text, args.out, args.json,
                  {"args": {k: v for k, v in vars(args).items() if k != "program_files"},
                   "conditions": [cond_name(c) for c in conds],
                   "epochs": {f"{cond_name(c)} | {setup_name(s)}": v for (c, s), v in res.items()},
                   "summary": {f"{cond_name(c)} | {setup_name(s)}": v for (c, s), v in summ.items()},
                   "decode": {setup_name((k, "")): v for k, v in dec["levels"].items()},
                   "l10_pixel_mismatches": dec["l10_pixel_mismatches"]},
                  json_default=str)
    size = plot(args, conds, setups, summ, dec, args.plot)
    log(f"results in {args.out} and {args.json}; plot {args.plot} ({size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
