#!/usr/bin/python3
"""One origin for many nodes (issue 45 item 3): N mounts (N cache folders, as N nodes) read the
same level of a store, each in its own shuffled order, at the same time, over a capped origin
link, either straight from the origin or through the shared cache tier of contrib/cache-tier
(nginx proxy_cache + slice). Reports each mount's time and files/s, the bytes that crossed the
origin link, and their ratio to the level's record bytes, against one mount alone.

  flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/cache_tier_bench.py \\
      [--store DIR] [--level 5] [--mounts 4] [--cap 100] [--readers 8] [--rounds 2] \\
      [--node-cpu 0] [--keep-logs DIR] [--skip-straight] [--own-links]

Setups, interleaved in each round (the order reversed every other round):
  alone-origin  one mount reading the origin (http://ORIGIN/store)
  alone-tier    one mount through an empty tier (s3://pcr/store -o endpoint=TIER,no_sign,...)
  N-origin      N mounts reading the origin at once
  N-tier        N mounts through an empty tier at once
  N-own         (--own-links) N mounts reading the origin at once, each over a link of its own
                at --cap: what N independent nodes with N origins see, but for sharing this
                machine's cores; the control that tells the tier's cost (N-tier / N-own) from
                N nodes' daemons and readers on one machine (N-own / alone-origin)

Everything runs in a network namespace of its own (unshare -n, as root). The origin is nginx
serving the store's parent folder; only its answers are capped: an HTB class at --cap Mbit/s
takes the packets from the origin's port (a u32 filter on the source port), everything else on
lo (mounts to tier) goes through an uncapped class. Origin bytes are that class's byte counter
(`tc -s class show dev lo`), headers included. With --own-links, N more nginx servers (one
worker each) serve the same folder, each on a port of its own with an HTB class of its own at
--cap; node i of N-own reads server i, and its origin bytes are the sum of those classes (every
setup's origin bytes are the sum over all capped classes). Needs root, nginx with njs
(tests/remote/install.sh) and a built tree (build/fs/pcrfs, build/mount-tools/pcr).
Each node (its daemon and its readers) runs in cgroup v1 cpu and cpuacct groups of its own: the
report gives each setup's CPU seconds per node (cpuacct.usage) and the time a quota held it
back (cpu.stat throttled_time). --node-cpu F gives every node a quota of F cores
(cpu.cfs_quota_us) in every setup, alone or not, for a loaded machine where N nodes would
otherwise compete for its cores (nodes of a cluster have their own); default 0: no quota (a
quota binds a node alone, whose bursts are larger, more than N nodes). --keep-logs DIR keeps
each tier's access log (request times: rt=, nginx's cache lock waits show as 0.5 s steps).
Tier nodes mount with -o fetch_align=SLICE (tests/remote/cache_tier.py, as pcr-cache-tier
prints).
Targets (issue 45): N-tier origin bytes <= 1.2x the level's record bytes, and every N-tier
mount at least as fast as alone-origin. With --own-links the report adds each setup's mount
time / N-own and a table per round with N-tier / N-own (and its median). On the 2-core machine
of 2026-11-29, 4-own itself took 1.05-1.07x alone-origin and 4-tier / 4-own was 1.05 (level 5)
and 1.01 (level 10): docs/cache-tier.md#measured.
"""

import argparse
import contextlib
import os
import statistics
import random
import re
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

import benchlib  # noqa: E402
from benchlib import fail, log  # noqa: E402
import netns  # noqa: E402
from cache_tier import CacheTier  # noqa: E402
from remote_servers import Nginx  # noqa: E402

INNER_FLAG = "--inside-namespace"
DEFAULT_STORE = os.path.join(benchlib.BENCH_ROOT, "remote-work", "www-imagenet4k", "store")
OUT = os.path.join(benchlib.BENCH_ROOT, "results", "cache_tier.md")
UNCAPPED_MBIT = 20000
CGROUP_V1 = "/sys/fs/cgroup"
CGROUP_PARENT = "pcrfs-tier-bench"


class NodeCpu:
    """A node's cgroup in the cgroup v1 cpu and cpuacct hierarchies: a quota of `cores` (none
    if 0), its CPU time and the time the quota held it back. Without those hierarchies (a
    cgroup v2 machine) and without a quota: no accounting (counters() gives None)."""

    def __init__(self, name, cores):
        self.dirs = {c: os.path.join(CGROUP_V1, c, CGROUP_PARENT, name)
                     for c in ("cpu", "cpuacct")}
        missing = [c for c in self.dirs if not os.path.isdir(os.path.join(CGROUP_V1, c))]
        if missing:
            if cores > 0:
                fail(f"--node-cpu {cores:g}: no cgroup v1 hierarchy for {' and '.join(missing)} "
                     f"under {CGROUP_V1} (leave --node-cpu out)")
            self.dirs = {}
            return
        for d in self.dirs.values():
            os.makedirs(d, exist_ok=True)
        quota = int(cores * 100000) if cores > 0 else -1
        self._write("cpu", "cpu.cfs_period_us", "100000")
        self._write("cpu", "cpu.cfs_quota_us", str(quota))

    def _write(self, ctrl, name, value):
        with open(os.path.join(self.dirs[ctrl], name), "w") as f:
            f.write(value)

    def join(self):
        """Moves the calling process into the node's cgroups (in a child: preexec_fn, or a
        reader's cgroup callback); returns the cpu cgroup's name."""
        for ctrl in self.dirs:
            self._write(ctrl, "cgroup.procs", str(os.getpid()))
        return os.path.basename(self.dirs["cpu"]) if self.dirs else None

    def counters(self):
        """(CPU seconds, throttled seconds) so far; None without accounting."""
        if not self.dirs:
            return None
        with open(os.path.join(self.dirs["cpuacct"], "cpuacct.usage")) as f:
            usage = int(f.read()) / 1e9
        with open(os.path.join(self.dirs["cpu"], "cpu.stat")) as f:
            stat = dict(line.split() for line in f if line.strip())
        return usage, int(stat.get("throttled_time", 0)) / 1e9

    def remove(self):
        for d in self.dirs.values():
            try:
                os.rmdir(d)
            except OSError:
                pass
        for c in self.dirs:
            try:
                os.rmdir(os.path.join(CGROUP_V1, c, CGROUP_PARENT))
            except OSError:
                pass


ORIGIN_CLASS = "1:20"


def own_class(i):
    """The HTB class of own link i (--own-links): 1:100, 1:101, ... (hex minor numbers)."""
    return f"1:{0x100 + i:x}"


def cap_origin(port, rate_mbit, own_ports=()):
    """HTB on lo: packets from the origin's port at rate_mbit (class 1:20), from own_ports[i]
    at rate_mbit each (class own_class(i): links that share nothing), the rest uncapped
    (1:10)."""
    sh = netns.sh
    sh("tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10")
    links = [(ORIGIN_CLASS, port)] + [(own_class(i), p) for i, p in enumerate(own_ports)]
    for classid, rate in (("1:10", UNCAPPED_MBIT), *((c, rate_mbit) for c, _ in links)):
        sh("tc", "class", "add", "dev", "lo", "parent", "1:", "classid", classid, "htb",
           "rate", f"{rate}mbit", "ceil", f"{rate}mbit", "burst", "256k", "cburst", "256k",
           "quantum", "65536")
    for classid, p in links:
        sh("tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1",
           "u32", "match", "ip", "sport", str(p), "0xffff", "flowid", classid)


def link_bytes(classid):
    """Bytes an HTB class has sent (this tc prints no JSON for HTB classes)."""
    out = netns.sh("tc", "-s", "class", "show", "dev", "lo", "classid", classid)
    m = re.search(r"Sent (\d+) bytes", out)
    if not m:
        raise RuntimeError(f"tc: no byte count for class {classid} in {out!r}")
    return int(m.group(1))


def origin_link_bytes(own_links=0):
    """Bytes the origin's class and the own_links own links' classes have sent."""
    return sum(link_bytes(c) for c in [ORIGIN_CLASS, *map(own_class, range(own_links))])


def level_record_bytes(pcr, store, level):
    """The level's record bytes from `pcr inspect` (what reading the whole level reads)."""
    out = subprocess.run([pcr, "inspect", store], capture_output=True, text=True,
                         check=True).stdout
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    for line in out.splitlines():
        m = re.match(rf"\s+{level}\s+.*\s([0-9.]+) (B|KiB|MiB|GiB)\s*$", line)
        if m:
            return float(m.group(1)) * units[m.group(2)]
    fail(f"pcr inspect {store}: no record bytes for level {level}")


class Node:
    """One pcrfs mount (foreground daemon) with its own cache folder."""

    def __init__(self, pcrfs, url, mnt, options, env, cpu=None):
        os.makedirs(mnt, exist_ok=True)
        self.mnt = mnt
        self.cpu = cpu
        self.log = open(mnt + ".log", "wb")
        self.proc = subprocess.Popen([pcrfs, url, mnt, "-f", "-o", ",".join(options)],
                                     stdout=subprocess.DEVNULL, stderr=self.log, env=env,
                                     preexec_fn=cpu.join if cpu else None)
        deadline = time.monotonic() + 60
        while not benchlib.is_mounted(mnt):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                with open(mnt + ".log", errors="replace") as f:
                    fail(f"pcrfs {url} {mnt} did not mount: {f.read()[-600:]}")
            time.sleep(0.05)

    def stop(self):
        benchlib.stop_mount(self.mnt, self.proc)
        self.log.close()


def run_setup(args, name, count, kind, origin, files, tmp, pcrfs, cpus, own=()):
    """kind: "origin" (every node reads origin), "tier" (through a fresh tier in front of
    origin) or "own" (node i reads own[i], over a link of its own)."""
    via_tier = kind == "tier"
    env = {"PATH": "/usr/bin:/bin", "HOME": tmp, "no_proxy": "127.0.0.1,localhost"}
    tier = None
    if via_tier:
        tier = CacheTier(origin.url, slice_size=args.slice, workers=2).__enter__()
    nodes = []
    try:
        for i in range(count):
            cache = tempfile.mkdtemp(prefix=f"{name}-{i}-cache-", dir=tmp)
            mnt = os.path.join(tmp, f"{name}-{i}-mnt")
            options = [f"cache_dir={cache}", f"scans={args.level}"]
            if via_tier:
                url = tier.store_url("store")
                options += tier.mount_options()
            elif kind == "own":
                url = own[i].url + "/store"
            else:
                url = origin.url + "/store"
            nodes.append(Node(pcrfs, url, mnt, options, env, cpus[i]))
        before = origin_link_bytes(len(own))
        cpu_before = [cpus[i].counters() for i in range(count)]
        results = [None] * count
        errors = []

        def epoch(i):
            order = list(files)
            random.Random(1000 * args.round + i).shuffle(order)
            try:
                results[i] = benchlib.run_epoch(nodes[i].mnt, order, args.readers, args.timeout,
                                                cgroup=cpus[i].join)
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(f"mount {i}: {e}")

        threads = [threading.Thread(target=epoch, args=(i,)) for i in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            fail(f"{name}: {'; '.join(errors)}")
        origin_bytes = origin_link_bytes(len(own)) - before
        cpu_used = [None if cpu_before[i] is None else
                    tuple(b - a for a, b in zip(cpu_before[i], cpus[i].counters()))
                    for i in range(count)]
    finally:
        for n in nodes:
            n.stop()
        if tier:
            if args.keep_logs:
                os.makedirs(args.keep_logs, exist_ok=True)
                tier.keep_access_log = os.path.join(args.keep_logs,
                                                    f"{name}-round{args.round}.log")
            tier.__exit__(None, None, None)
    return {"setup": name, "mounts": count, "via_tier": via_tier, "own_links": kind == "own",
            "round": args.round,
            "origin_bytes": origin_bytes,
            "per_mount": [{"wall": r["wall"], "files_per_s": r["files_per_s"],
                           "bytes": r["bytes"], "files": r["files"],
                           "cpu_s": c and c[0], "throttled_s": c and c[1]}
                          for r, c in zip(results, cpu_used)]}


def inner_main(args):
    netns.shape_loopback(None, netns.MIN_BURST_KIB)
    pcrfs = benchlib.find_tool("fs/pcrfs", "pcrfs", args.pcrfs)
    pcr = benchlib.find_tool("mount-tools/pcr", "pcr", args.pcr)
    store = os.path.abspath(args.store)
    level_bytes = level_record_bytes(pcr, store, args.level)
    files = None
    rows = []
    cpus = [NodeCpu(f"node{i}", args.node_cpu) for i in range(args.mounts)]
    try:
        with tempfile.TemporaryDirectory(prefix="pcrfs-tier-bench-") as tmp, \
                Nginx(os.path.dirname(store), workers=2) as origin, \
                contextlib.ExitStack() as stack:
            if os.path.basename(store) != "store":
                fail(f"--store {store}: the folder must be named store (served as /store)")
            own = [stack.enter_context(Nginx(os.path.dirname(store), workers=1))
                   for _ in range(args.mounts if args.own_links else 0)]
            cap_origin(origin.port, args.cap, [o.port for o in own])
            setups = [("alone-origin", 1, "origin"), ("alone-tier", 1, "tier"),
                      (f"{args.mounts}-origin", args.mounts, "origin"),
                      (f"{args.mounts}-tier", args.mounts, "tier")]
            if own:
                setups.append((f"{args.mounts}-own", args.mounts, "own"))
            if args.skip_straight:  # N mounts straight from the origin: N times the epoch
                setups = [s for s in setups if s[0] != f"{args.mounts}-origin"]
            for rnd in range(args.rounds):
                args.round = rnd
                for name, count, kind in (setups if rnd % 2 == 0 else setups[::-1]):
                    if files is None:
                        # The level's file list, from a local mount of the store (no network).
                        with tempfile.TemporaryDirectory(dir=tmp) as lm:
                            n = Node(pcrfs, store, lm, [f"scans={args.level}"], None)
                            try:
                                files = benchlib.list_tree(lm)
                            finally:
                                n.stop()
                        files = [f if isinstance(f, str) else f[0] for f in files]
                    log(f"round {rnd}: {name} (load {benchlib.loadavg()})")
                    row = run_setup(args, name, count, kind, origin, files, tmp, pcrfs, cpus,
                                    own)
                    row["origin_ratio"] = row["origin_bytes"] / level_bytes
                    log(f"  origin {row['origin_bytes'] / 2**20:.1f} MiB "
                        f"({row['origin_ratio']:.2f}x the level), walls "
                        f"{[round(m['wall'], 2) for m in row['per_mount']]}")
                    rows.append(row)
    finally:
        for c in cpus:
            c.remove()
    data = {"meta": {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "commit": benchlib.sh("git", "-C", benchlib.REPO, "rev-parse", "--short",
                                           "HEAD").strip(),
                     "args": {k: v for k, v in vars(args).items()
                              if k not in ("inside_namespace", "round")},
                     "level_record_bytes": level_bytes, "files": len(files),
                     "load": benchlib.loadavg()},
            "rows": rows}
    report(args, data)
    return 0


def report(args, data):
    rows = data["rows"]
    meta = data["meta"]
    names = []
    for r in rows:
        if r["setup"] not in names:
            names.append(r["setup"])
    alone = [m["wall"] for r in rows if r["setup"] == "alone-origin" for m in r["per_mount"]]
    alone_wall = sum(alone) / len(alone)
    alone_ratio = (sum(r["origin_ratio"] for r in rows if r["setup"] == "alone-origin")
                   / sum(1 for r in rows if r["setup"] == "alone-origin"))
    alone_t = [m["wall"] for r in rows if r["setup"] == "alone-tier" for m in r["per_mount"]]
    alone_tier_wall = sum(alone_t) / len(alone_t)
    own_name, tier_name = f"{args.mounts}-own", f"{args.mounts}-tier"
    own_w = [m["wall"] for r in rows if r["setup"] == own_name for m in r["per_mount"]]
    own_wall = sum(own_w) / len(own_w) if own_w else None
    lines = [f"# Cache tier: {args.mounts} mounts, one origin ({meta['date']}, {meta['commit']})",
             "", f"Level {args.level} of {args.store} ({meta['files']} files, record bytes "
             f"{meta['level_record_bytes'] / 2**20:.1f} MiB), origin link {args.cap} Mbit/s, "
             f"{args.readers} readers per mount, slice {args.slice}, {args.rounds} rounds "
             f"interleaved, each node's CPU "
             f"{f'{args.node_cpu:g} cores' if args.node_cpu > 0 else 'not capped'}; "
             f"load {meta['load']}.", "",
             "| setup | mean s per mount (slowest) | files/s per mount | origin bytes / level "
             "| mount time / alone-origin | / alone-tier | "
             + (f"/ {own_name} | " if own_wall else "") + "CPU s per node (throttled) |",
             "|---|---:|---:|---:|---:|---:|" + ("---:|" if own_wall else "") + "---:|"]
    verdicts = []
    for name in names:
        rs = [r for r in rows if r["setup"] == name]
        walls = [m["wall"] for r in rs for m in r["per_mount"]]
        fps = [m["files_per_s"] for r in rs for m in r["per_mount"]]
        ratio = sum(r["origin_ratio"] for r in rs) / len(rs)
        mean_wall = sum(walls) / len(walls)
        cpu = [m["cpu_s"] for r in rs for m in r["per_mount"] if m["cpu_s"] is not None]
        thr = [m["throttled_s"] for r in rs for m in r["per_mount"] if m["cpu_s"] is not None]
        cpu_cell = f"{sum(cpu) / len(cpu):.2f} ({sum(thr) / len(thr):.2f})" if cpu else "-"
        lines.append(f"| {name} | {mean_wall:.2f} ({max(walls):.2f}) | "
                     f"{sum(fps) / len(fps):,.0f} | {ratio:.2f}x | "
                     f"{mean_wall / alone_wall:.2f} | {mean_wall / alone_tier_wall:.2f} | "
                     + (f"{mean_wall / own_wall:.2f} | " if own_wall else "")
                     + f"{cpu_cell} |")
        if name.endswith("-tier") and not name.startswith("alone"):
            worst = max(r["origin_ratio"] for r in rs)
            verdicts.append(f"- origin bytes <= 1.2x one level: worst {worst:.2f}x "
                            f"{benchlib.verdict(worst <= 1.2)}")
            verdicts.append(f"- every mount at least as fast as alone-origin: slowest "
                            f"{max(walls):.2f} s vs alone {alone_wall:.2f} s "
                            f"{benchlib.verdict(max(walls) <= alone_wall)}; the link's floor "
                            f"for the tier is {ratio / alone_ratio:.2f}x alone-origin (its "
                            f"origin bytes / alone-origin's)")
    if own_wall:
        rs = [r for r in rows if r["setup"] == own_name]
        walls = [m["wall"] for r in rs for m in r["per_mount"]]
        verdicts.append(f"- control, {own_name} ({args.mounts} mounts straight from the origin, "
                        f"each over a link of its own): mean {own_wall:.2f} s, slowest "
                        f"{max(walls):.2f} s = {own_wall / alone_wall:.2f}x "
                        f"({max(walls) / alone_wall:.2f}x) alone-origin's {alone_wall:.2f} s")
        lines += ["", *per_round_table(rows, names, tier_name, own_name)]
    lines += ["", *verdicts, ""]
    out = args.out
    benchlib.write_results("\n".join(lines), out, os.path.splitext(out)[0] + ".json", data)


def per_round_table(rows, names, tier_name, own_name):
    """Each round's mean s per mount of every setup, and N-tier / N-own (its median last)."""
    def mean_wall(r):
        return sum(m["wall"] for m in r["per_mount"]) / len(r["per_mount"])

    rounds = sorted({r["round"] for r in rows})
    ratio_col = tier_name in names
    lines = ["Mean s per mount, per round (the setups' order reversed every other round):", "",
             "| round | " + " | ".join(names) + (f" | {tier_name} / {own_name} |"
                                                  if ratio_col else " |"),
             "|---:|" + "---:|" * (len(names) + ratio_col)]
    ratios = []
    for rnd in rounds:
        by = {r["setup"]: mean_wall(r) for r in rows if r["round"] == rnd}
        cells = [f"{by[n]:.2f}" if n in by else "-" for n in names]
        if ratio_col:
            ratio = by[tier_name] / by[own_name]
            ratios.append(ratio)
            cells.append(f"{ratio:.3f}")
        lines.append(f"| {rnd} | " + " | ".join(cells) + " |")
    if ratios:
        lines.append("| median | " + " | ".join(
            f"{statistics.median(mean_wall(r) for r in rows if r['setup'] == n):.2f}"
            for n in names) + f" | {statistics.median(ratios):.3f} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=DEFAULT_STORE, help="a store folder named store "
                    "(default: remote_bench.py's 4,000-file ImageNet-like store)")
    ap.add_argument("--level", type=int, default=5)
    ap.add_argument("--mounts", type=int, default=4)
    ap.add_argument("--cap", type=int, default=100, help="origin link, Mbit/s (default 100)")
    ap.add_argument("--readers", type=int, default=8, help="reader processes per mount")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--slice", default="256k", help="the tier's slice (default 256k)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per epoch")
    ap.add_argument("--node-cpu", type=float, default=0,
                    help="cores per node (a cgroup cpu quota for its daemon and readers, in "
                    "every setup); 0: no quota (the default)")
    ap.add_argument("--skip-straight", action="store_true",
                    help="leave out N mounts straight from the origin (they take N times as long)")
    ap.add_argument("--own-links", action="store_true",
                    help="add N-own: N mounts straight from the origin at once, each over a "
                    "link of its own at --cap (N origin servers on the same folder), the "
                    "control for N nodes sharing this machine")
    ap.add_argument("--keep-logs", metavar="DIR", help="copy each tier's access log here")
    ap.add_argument("--pcrfs")
    ap.add_argument("--pcr")
    ap.add_argument("--out", default=OUT)
    ap.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if os.geteuid() != 0:
        fail("needs root (FUSE mounts, a network namespace, tc)")
    if (not 1 <= args.level <= 10 or args.mounts < 2 or args.cap <= 0 or args.rounds < 1
            or args.node_cpu < 0):
        fail("--level 1..10, --mounts >= 2, --cap > 0, --rounds >= 1, --node-cpu >= 0")
    if not os.path.isdir(os.path.join(args.store, "records")):
        fail(f"--store {args.store}: not a store folder (build it with remote_bench.py, or "
             f"pcr build SRC DIR/store)")
    if getattr(args, "inside_namespace"):
        return inner_main(args)
    benchlib.warn_unless_bench_lock()
    os.execvp("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__),
                          INNER_FLAG, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
