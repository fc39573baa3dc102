#!/usr/bin/python3
"""pcrfs from Python without a mount (issue 41): pcrfs.torch.RecordDataset, which reads each
record's level-K prefix with one ranged GET as the PCR paper's reader does, against
torchvision's ImageFolder over a pcrfs mount of the same store and over `rclone mount` of the
original JPEGs, on scale_remote_bench's ImageNet-sized stores behind a capped, delayed link.
Run as root with /usr/bin/python3 (it takes the benchmark lock itself):

  /usr/bin/python3 tests/bench/python_bench.py                       # 100k files, levels 1,5,10
  /usr/bin/python3 tests/bench/python_bench.py --size 10k --levels 5  # a quick look

Data: the stores of `scale_remote_bench.py --short-side 333:500` (its --build-only makes them:
photo crops with a short side of 333-500 px, ~35 KiB, in 1,000 ImageNet-named class folders).
Inside a new network namespace one nginx (autoindex on, for rclone) serves the store and the
source folder; the node latency proxy adds --latency ms (20) before every answer and counts the
body bytes it sends (origin bytes); an HTB cap of --cap Mbit/s (1000) on what it sends.

Per level K, each from a cold page cache (the three interleaved, in this order):
  record   pcrfs.torch.RecordDataset(URL, root="train", scans=K, shuffle_buffer=1024) under a
           DataLoader of --record-workers workers (fork), batch 64, the sample being the file's
           bytes (no decoding: this measures reading). No mount.
  mount    `pcrfs URL MNT -o scans=K,disk_cache=0,remote_cache=F x level bytes,cache_size=1/8
           of that` (F: --cache-fraction, 0.01 by default: a level 100x the cache), then
           torchvision.datasets.ImageFolder(MNT/train) under a DataLoader of --workers workers
           (fork), shuffle=True, batch 64, the same bytes loader.
  rclone   (once, not per level) `rclone mount :http: --vfs-cache-mode off` of the source
           folder, the same ImageFolder DataLoader.
Each dataset is built (the folder walked) before the clock starts. Reported per setup: files/s
over the epoch, bytes, origin bytes (the proxy's), CPU seconds per 1,000 images (the DataLoader
workers' user+sys from RUSAGE_CHILDREN, plus the daemon's or rclone's own CPU), and for record
the byte-ratio ideal: rclone's files/s x source bytes / level bytes. Targets (issue 41):
record >= 0.9 x the ideal; record's CPU per image <= the mount's.
"""

import argparse
import fcntl
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "remote"))
sys.path.insert(0, HERE)
import benchlib  # noqa: E402
import netns  # noqa: E402
from benchlib import (drop_caches, fail, find_tool, loadavg, log, parse_count,  # noqa: E402
                      proc_cpu_seconds, write_results)
from remote_bench import AutoindexNginx, MountProc, ProxyProcess, set_cap, url_port  # noqa: E402
import scale_remote_bench as srb  # noqa: E402

benchlib.FAIL_CODE = 1
INNER_FLAG = "--inside-namespace"
MNT = "/tmp/python-bench-mnt"
OUT = os.path.join(srb.BENCH, "python_bench")
BATCH = 64


def raw_loader(f):
    return f.read()


def raw_path_loader(path):
    with open(path, "rb") as f:
        return f.read()


def collate(batch):
    """(number of samples, their bytes): nothing is stacked."""
    return len(batch), sum(len(b) for b, _ in batch)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def drain(dataset, workers, shuffle, seed):
    """Reads an epoch of dataset through a DataLoader: (files, bytes, seconds, workers' CPU s)."""
    import torch
    import torch.utils.data
    g = torch.Generator()
    g.manual_seed(seed)
    kw = dict(batch_size=BATCH, num_workers=workers, collate_fn=collate,
              multiprocessing_context="fork")
    if shuffle:
        kw.update(shuffle=True, generator=g)
    loader = torch.utils.data.DataLoader(dataset, **kw)
    cpu0, t0 = children_cpu(), time.monotonic()
    files = nbytes = 0
    it = iter(loader)
    for n, b in it:
        files += n
        nbytes += b
    seconds = time.monotonic() - t0
    del it  # the workers are joined (and their CPU counted) before the reading below
    return files, nbytes, seconds, children_cpu() - cpu0


def epoch_record(env, size, k):
    import pcrfs.torch
    proxy = env["proxy"]
    url = f"{proxy.url}/{size['store_link']}"
    drop_caches()
    proxy.reset(env["args"].latency)
    data = pcrfs.torch.RecordDataset(url, root="train", scans=k, seed=1, shuffle_buffer=1024,
                                     loader=raw_loader,
                                     cache_dir=tempfile.mkdtemp(prefix="rec-", dir=env["tmp"]))
    opened = proxy.stats()
    proxy.reset(env["args"].latency)
    files, nbytes, secs, cpu = drain(data, env["args"].record_workers, False, 1)
    st = proxy.stats()
    return {"files": files, "bytes": nbytes, "seconds": secs, "files_per_s": files / secs,
            "cpu_s": cpu, "origin_bytes": st["bytes_to_client"], "requests": st["requests"],
            "open_requests": opened["requests"]}


def epoch_mount(env, size, k, argv, daemon_name):
    import torchvision.datasets
    a, proxy = env["args"], env["proxy"]
    drop_caches()
    proxy.reset(a.latency)
    log_path = os.path.join(env["tmp"], f"{daemon_name}-{size['n']}-L{k}.log")
    with MountProc(argv, MNT, log_path, timeout=900) as m:
        data = torchvision.datasets.ImageFolder(os.path.join(MNT, "train") if k else MNT,
                                                loader=raw_path_loader)
        proxy.reset(a.latency)
        dcpu0 = proc_cpu_seconds(m.proc.pid)
        files, nbytes, secs, cpu = drain(data, a.workers, True, 1)
        dcpu = proc_cpu_seconds(m.proc.pid) - dcpu0
        st = proxy.stats()
    return {"files": files, "bytes": nbytes, "seconds": secs, "files_per_s": files / secs,
            "cpu_s": cpu + dcpu, "daemon_cpu_s": dcpu, "origin_bytes": st["bytes_to_client"],
            "requests": st["requests"]}


def pcrfs_argv(env, size, k):
    level = size["level_bytes"][k - 1]
    cache = max(1 << 20, int(level * env["args"].cache_fraction))
    opts = [f"scans={k}", "disk_cache=0", f"remote_cache={cache}",
            f"cache_size={max(1 << 20, cache // 8)}",
            f"cache_dir={tempfile.mkdtemp(prefix='mnt-', dir=env['tmp'])}"]
    return [env["pcrfs"], f"{env['proxy'].url}/{size['store_link']}", MNT, "-f", "-o",
            ",".join(opts)]


def rclone_argv(env, size):
    conf = os.path.join(env["tmp"], "rclone.conf")
    open(conf, "a").close()
    # rclone serves the source folder, whose classes are at its top: ImageFolder(MNT).
    return ["rclone", "mount", ":http:", MNT, "--http-url",
            f"{env['proxy'].url}/{size['src_link']}/", "--read-only", "--vfs-cache-mode", "off",
            "--checkers", "32", "--cache-dir", tempfile.mkdtemp(prefix="rc-", dir=env["tmp"]),
            "--config", conf, "--log-level", "NOTICE"]


def summarize(e, label):
    log(f"  {label}: {e['files']:,} files in {e['seconds']:.1f} s = {e['files_per_s']:,.0f} "
        f"files/s, {e['bytes'] / 1e6:,.1f} MB served, origin {e['origin_bytes'] / 1e6:,.1f} MB "
        f"in {e['requests']:,} requests, {1000 * e['cpu_s'] / max(1, e['files']):.2f} CPU s "
        f"per 1,000 files")


def inner_main(args):
    pcrfs_bin = find_tool("fs/pcrfs", "pcrfs", args.pcrfs)
    p = srb.names(args.size, 1)
    with open(p["facts"]) as f:
        facts = json.load(f)
    size = dict(facts, **p)
    www = os.path.join(srb.WORK, "www")
    os.makedirs(www, exist_ok=True)
    for link, target in ((p["src_link"], p["data"]), (p["store_link"], p["store"])):
        lp = os.path.join(www, link)
        if os.path.islink(lp):
            os.unlink(lp)
        os.symlink(target, lp)
    tmp = tempfile.mkdtemp(prefix="python-bench-")
    os.makedirs(MNT, exist_ok=True)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load0": loadavg(),
            "commit": srb.git_commit(REPO), "args": vars(args), "pcrfs": pcrfs_bin,
            "src_bytes": facts["src_bytes"], "files": facts["files"],
            "level_bytes": facts["level_bytes"]}
    results = {"levels": {}}
    set_cap(None, ())
    try:
        with AutoindexNginx(www, workers=2) as nginx, \
                ProxyProcess(nginx.url, tmp, "proxy", "node") as proxy:
            set_cap(args.cap, [url_port(proxy.url)])
            env = {"args": args, "proxy": proxy, "pcrfs": pcrfs_bin, "tmp": tmp}
            if not args.no_rclone:
                log("rclone of the source JPEGs")
                results["rclone"] = epoch_mount(env, size, 0, rclone_argv(env, size), "rclone")
                summarize(results["rclone"], "rclone")
            for k in args.levels:
                log(f"level {k}")
                r = {}
                r["record"] = epoch_record(env, size, k)
                summarize(r["record"], f"L{k} RecordDataset")
                r["mount"] = epoch_mount(env, size, k, pcrfs_argv(env, size, k), "pcrfs")
                summarize(r["mount"], f"L{k} ImageFolder over the mount")
                results["levels"][k] = r
    finally:
        set_cap(None, ())
        shutil.rmtree(tmp, ignore_errors=True)
    meta["load1"] = loadavg()
    report(args, {"meta": meta, "results": results})
    return 0


def report(args, data):
    meta, res = data["meta"], data["results"]
    rc = res.get("rclone")
    lines = [f"# pcrfs.torch.RecordDataset vs ImageFolder over a mount vs rclone "
             f"({meta['date']}, commit {meta['commit']})", "",
             f"{meta['files']:,} files ({meta['src_bytes'] / 1e9:.2f} GB of JPEGs), "
             f"{args.cap} Mbit/s + {args.latency} ms, mount cache {args.cache_fraction:g} of the "
             f"level, {args.workers} DataLoader workers over mounts, {args.record_workers} for "
             f"RecordDataset; load {meta['load0']} -> {meta['load1']}.", ""]
    if rc:
        lines.append(f"rclone: {rc['files_per_s']:,.0f} files/s, "
                     f"{1000 * rc['cpu_s'] / rc['files']:.2f} CPU s per 1,000 files.")
        lines.append("")
    lines += ["| level | RecordDataset files/s | ideal | of ideal | mount files/s | "
              "RecordDataset / mount | origin / served (record, mount) | "
              "CPU s per 1,000 (record, mount) |", "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for k, r in sorted(res["levels"].items(), key=lambda kv: int(kv[0])):
        rec, mnt = r["record"], r["mount"]
        lb = meta["level_bytes"][int(k) - 1]
        ideal = rc["files_per_s"] * meta["src_bytes"] / lb if rc else None
        of = rec["files_per_s"] / ideal if ideal else None
        cpu_r = 1000 * rec["cpu_s"] / max(1, rec["files"])
        cpu_m = 1000 * mnt["cpu_s"] / max(1, mnt["files"])
        lines.append(
            f"| {k} | {rec['files_per_s']:,.0f} | {ideal:,.0f} | "
            f"{of:.2f} {benchlib.verdict(of >= 0.9)} | {mnt['files_per_s']:,.0f} | "
            f"{rec['files_per_s'] / mnt['files_per_s']:.2f} | "
            f"{rec['origin_bytes'] / max(1, rec['bytes']):.3f}, "
            f"{mnt['origin_bytes'] / max(1, mnt['bytes']):.3f} | "
            f"{cpu_r:.2f}, {cpu_m:.2f} {benchlib.verdict(cpu_r <= cpu_m)} |"
            if ideal else f"| {k} | {rec['files_per_s']:,.0f} | | | {mnt['files_per_s']:,.0f} | "
            f"| | {cpu_r:.2f}, {cpu_m:.2f} |")
    text = "\n".join(lines) + "\n"
    write_results(text, args.out, os.path.splitext(args.out)[0] + ".json", data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="100k", help="10k or 100k (scale_remote_bench's stores)")
    ap.add_argument("--levels", default="1,5,10")
    ap.add_argument("--cap", type=int, default=1000, help="Mbit/s")
    ap.add_argument("--latency", type=int, default=20, help="ms before each answer")
    ap.add_argument("--cache-fraction", type=float, default=0.01)
    ap.add_argument("--workers", type=int, default=16, help="DataLoader workers over mounts")
    ap.add_argument("--record-workers", type=int, default=4,
                    help="DataLoader workers for RecordDataset")
    ap.add_argument("--no-rclone", action="store_true")
    ap.add_argument("--pcrfs")
    ap.add_argument("--pythonpath", help="the pcrfs package (default: build/python)")
    ap.add_argument("--out", default=os.path.join(OUT, "python_bench.md"))
    ap.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.size = parse_count(args.size)
    args.levels = [int(k) for k in args.levels.split(",")]
    srb.SHORT_SIDE = srb.AXIS_SHORT_SIDE
    sys.path.insert(0, args.pythonpath or os.path.join(REPO, "build", "python"))
    if os.geteuid() != 0:
        fail("needs root (FUSE mounts, drop_caches, a network namespace, tc)")
    if getattr(args, INNER_FLAG.lstrip("-").replace("-", "_")):
        netns.shape_loopback(None, netns.MIN_BURST_KIB)
        return inner_main(args)
    p = srb.names(args.size, 1)
    if not os.path.exists(p["facts"]):
        fail(f"no store of {args.size:,} files: run tests/bench/scale_remote_bench.py "
             f"--sizes {args.size} --short-side 333:500 --build-only first")
    os.makedirs(OUT, exist_ok=True)
    mine = set(benchlib.ancestors())
    if not (benchlib.bench_lock_holders() & mine):
        log(f"waiting for {benchlib.BENCH_LOCK}")
        lock = open(benchlib.BENCH_LOCK, "a")
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.set_inheritable(lock.fileno(), True)
    os.execvp("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__),
                          INNER_FLAG, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
