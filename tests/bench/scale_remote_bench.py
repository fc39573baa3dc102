#!/usr/bin/python3
"""Remote stores at ImageNet scale (issue 34, items 4-6): synthetic stores of 10k, 100k and
(flag-gated) 1.28M real photo crops with ImageNet-like names, served by nginx in a capped
network namespace (1 Gbit/s, 20 ms before each answer through the fault proxy), against
`rclone mount` of the source JPEGs. Run as root with /usr/bin/python3:

  /usr/bin/python3 tests/bench/scale_remote_bench.py                    # 10k and 100k
  /usr/bin/python3 tests/bench/scale_remote_bench.py --sizes 10k,100k,1280k --epoch-files 20000
  ... --from-json /var/tmp/pcrfs-bench/scale/scale_remote_results.json --plot docs/scale_remote_latest.png

Data (outside the benchmark lock, niced; cached in /var/tmp/pcrfs-bench/scale/, keyed by size and
seed): `tests/data/make_dataset.py --images N --classes 1000 --short-side 64:96 --seed S
--splits train --split-fractions 1` (1,000 class folders `nXXXXXXXX`, files
`nXXXXXXXX_INDEX.JPEG`; crops with a short side of 64-96 px, ~2.4 KiB, so that 1.28M files
generate in about half an hour on 2 cores; `--short-side 333:500` makes ImageNet-sized crops
of ~35 KiB (ImageNet's own average ~110 KiB: the photos are smoother), kept apart), then
`pcr build SRC STORE --quiet` timed as a child of its own (`os.wait4`: wall, CPU, peak RSS).
The stores are not rebuilt when pcr changes (`--rebuild` does); the facts file records the pcr
commit that built them.

Then the script takes the benchmark lock itself (unless an ancestor holds it) and re-executes
in a new network namespace (`unshare -n`): one nginx (autoindex on, for rclone) serves every
size's store and source folder, one latency proxy in front (--proxy: node, the default, is
tests/remote/latency_proxy.js; python the fault proxy, which tops out near 3,000 GETs/s) adds
`--latency` ms before each answer and counts the body bytes it sends (origin bytes); its
answers cross an HTB cap of `--cap` Mbit/s (remote_bench.set_cap). Per size and per level K
(`--levels`), from a cold page cache and a fresh cache folder with `-o disk_cache=2G`:

  mount     `pcrfs URL MNT -f -o scans=K,cache_dir=D,disk_cache=2G`, exec until mounted; the
            proxy's bytes by then (what a node moves before its first read); then the first
            byte of one file of the epoch (mount-to-first-byte, from exec).
  find      `find MNT -type f | wc -l` (checked against N); daemon VmRSS/RssAnon after it.
  epoch     --epoch-files files (a seeded random subset of the store, all of it when smaller),
            shuffled, dealt round-robin to --readers (16) forked readers (open, readv to EOF,
            close; remote_bench.run_epoch): files/s, bytes served, origin bytes, daemon CPU,
            VmRSS/RssAnon/VmHWM after it.
  disk cache after unmount: files, folders and bytes under D; then a remount with the same D,
            timed until mounted and until the first file is read again (from the disk cache).
rclone: `rclone mount :http: --http-url PROXY/src-N/ --read-only --vfs-cache-mode off
--checkers 32`, the tree listed first (timed apart: rclone sends a HEAD per file), then the same
epoch (same files, same order). Target per level: files/s >= 0.9 x rclone's x (rclone's bytes /
the level's bytes), origin bytes <= 1.05 x bytes served; daemon RSS after find + epoch < 150 MiB
beyond its caches; pcr build peak RSS < 512 MiB and time per file flat (<= 1.2x the smallest
size's).

A level larger than the cache (issue 40, item 5), instead of the rows above:
  --cache-fractions 0.1,0.01   per size, level (default 1,3,5,10; crops 333:500 by default) and
            fraction F, a cold mount with -o disk_cache=0,remote_cache=F x the level's bytes
            (pcr inspect --json),cache_size=1/8 of that (each at least 1 MiB) and the epoch:
            files/s against rclone's (target >= 1) and the byte-ratio ideal (rclone's files/s x
            source bytes / level bytes), origin / served (target <= 1.10), GETs, proxy CPU.
  --quick   issue 40's table: 3,000 ImageNet-like files, rclone and L1/L5/L10 with
            -o remote_cache=8M,cache_size=1M,disk_cache=0.
  --hints [on|both]   each epoch's order sent first through the mount's hint socket
            (python/pcrfs/hint.py's Hinter in a process of its own: start_hints).
"""

import argparse
import fcntl
import hashlib
import json
import os
import random
import re
import select
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
from benchlib import (count_label, drop_caches, fail, find_tool, loadavg, log,  # noqa: E402
                      parse_count, proc_cpu_seconds, proc_status_kib, write_results)
from remote_bench import (AutoindexNginx, MountProc, ProxyProcess,  # noqa: E402
                          add_proxy_argument, epoch_order, list_tree, run_epoch, set_cap,
                          url_port)
from scale_bench import run_rusage  # noqa: E402

benchlib.FAIL_CODE = 1
BENCH = "/var/tmp/pcrfs-bench"
WORK = os.path.join(BENCH, "scale")
INNER_FLAG = "--inside-namespace"
MNT = "/tmp/scale-remote-mnt"
DEFAULT_SHORT_SIDE = "64:96"
SHORT_SIDE = DEFAULT_SHORT_SIDE  # --short-side
DEFAULT_CLASSES = 1000
CLASSES = DEFAULT_CLASSES  # --classes
# The cache-smaller-than-level axis (issue 40, item 5): --cache-fractions, --quick.
AXIS_LEVELS = "1,3,5,10"
AXIS_SHORT_SIDE = "333:500"
QUICK_FILES, QUICK_CLASSES, QUICK_LEVELS = 3000, 30, "1,5,10"
QUICK_CACHE = (8 * (1 << 20), 1 << 20)  # the issue's -o remote_cache=8M,cache_size=1M
HINT_MODES = {"off": (False,), "on": (True,), "both": (False, True)}  # --hints
# Issue 40's table (2026-11-28: 3,000 ImageNet-like files, 1 Gbit/s + 20 ms, 16 readers).
ISSUE40 = "rclone 628 files/s; pcrfs L1 5,188, L5 182 (3.54x origin/served), L10 75 (5.15x)"
MIB = 1 << 20
SETTLE_S = 11  # after an epoch, RSS is read again this much later (heap trimmer: 10 s)


def git_commit(path):
    r = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True,
                       text=True)
    return r.stdout.strip() or "?"


# ----------------------------------------------------------------------------- data


def names(n, seed):
    # Stores of other crop sizes (--short-side) live beside the default ones.
    side = "" if SHORT_SIDE == DEFAULT_SHORT_SIDE else "-ss" + SHORT_SIDE.replace(":", "-")
    side += "" if CLASSES == DEFAULT_CLASSES else f"-c{CLASSES}"
    tag = f"{count_label(n)}-s{seed}{side}"
    return {"data": os.path.join(WORK, f"photos-{n}-s{seed}{side}"),
            "store": os.path.join(WORK, f"store-{tag}"),
            "facts": os.path.join(WORK, f"store-{tag}.facts.json"),
            "src_link": f"src-{tag}", "store_link": f"store-{tag}"}


def source_files(data):
    """Relative paths of the JPEGs under data (sorted walk) and their total size; cached."""
    cache = data + ".files.json"
    if os.path.exists(cache):
        with open(cache) as f:
            return json.load(f)
    rel, total = benchlib.walk_files(data)
    out = {"files": rel, "bytes": total}
    with open(cache + ".tmp", "w") as f:
        json.dump(out, f)
    os.rename(cache + ".tmp", cache)
    return out


def link_tree(args, n, out):
    """n files named like ImageNet's, hard links to the --generate-max generated crops in turn
    (file i is crop i mod M, in that crop's class folder): a 1.28M-file tree without 1.28M
    crops to generate (~1 hour on 2 cores); pcr build still transcodes every file."""
    base = names(args.generate_max, args.seed)["data"]
    if not os.path.isdir(base):
        prepare_size(args, args.generate_max, None)
    pool = source_files(base)["files"]
    log(f"hard-link tree of {n:,} files into {out} (crops of {base} in turn)")
    tmp = out + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    made = set()
    for i in range(n):
        rel = pool[i % len(pool)]
        cls = rel.split("/")[-2]
        d = os.path.join(tmp, "train", cls)
        if cls not in made:
            os.makedirs(d, exist_ok=True)
            made.add(cls)
        os.link(os.path.join(base, rel), os.path.join(d, f"{cls}_{i}.JPEG"))
    os.rename(tmp, out)


def prepare_size(args, n, pcr):
    """Generates the photos and builds the store of n files once; returns the facts."""
    p = names(n, args.seed)
    os.makedirs(WORK, exist_ok=True)
    if n > args.generate_max and not os.path.isdir(p["data"]):
        link_tree(args, n, p["data"])
    if not os.path.isdir(p["data"]):
        log(f"generating {n:,} photo crops into {p['data']} (niced)")
        t0 = time.monotonic()
        r = subprocess.run(["nice", "-n", "10", sys.executable,
                            os.path.join(REPO, "tests", "data", "make_dataset.py"), p["data"],
                            "--images", str(n), "--classes", str(CLASSES), "--seed", str(args.seed),
                            "--short-side", SHORT_SIDE, "--splits", "train",
                            "--split-fractions", "1"], stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            fail(f"make_dataset.py --images {n} failed ({r.returncode})")
        log(f"generated in {time.monotonic() - t0:.0f} s")
    src = source_files(p["data"])
    facts = None
    if os.path.exists(p["facts"]) and not args.rebuild:
        with open(p["facts"]) as f:
            facts = json.load(f)
    if pcr and (facts is None or not os.path.isdir(p["store"])):
        shutil.rmtree(p["store"], ignore_errors=True)
        log(f"pcr build {p['data']} -> {p['store']} (niced)")
        r = run_rusage(["nice", "-n", "10", pcr, "build", p["data"], p["store"], "--quiet"],
                       p["store"] + ".build.log", timeout=6 * 3600)
        if r["rc"] != 0:
            fail(f"pcr build of {n} files failed ({r['rc']}): see {p['store']}.build.log")
        with open(os.path.join(p["store"], "manifest.json")) as f:
            manifest = json.load(f)
        facts = {"n": n, "seed": args.seed, "short_side": SHORT_SIDE, "pcr": pcr,
                 "pcr_commit": git_commit(os.path.dirname(os.path.realpath(pcr))),
                 "built": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                 "load_at_build": loadavg(),
                 "build": r, "src_bytes": src["bytes"], "files": len(src["files"]),
                 "level_bytes": manifest["level_bytes"],
                 "index_bytes": os.path.getsize(benchlib.index_path(p["store"])),
                 "manifest_bytes": os.path.getsize(os.path.join(p["store"], "manifest.json")),
                 "store_bytes": sum(os.path.getsize(os.path.join(d, f))
                                    for d, _, fs in os.walk(p["store"]) for f in fs)}
        with open(p["facts"], "w") as f:
            json.dump(facts, f, indent=1)
        b = facts["build"]
        log(f"built {n:,} files in {b['wall']:.1f} s ({b['cpu']:.1f} CPU s), peak RSS "
            f"{b['maxrss'] / MIB:.0f} MiB; index {facts['index_bytes']:,} bytes")
    return facts


# ----------------------------------------------------------------------------- measuring


def record_tables(store):
    """Records and the bytes before their data (header + tables section: what a reader fetches
    once per record for the piece CRCs, docs/format.md), summed over every record."""
    d = os.path.join(store, "records")
    n = total = 0
    for name in os.listdir(d):
        with open(os.path.join(d, name), "rb") as f:
            head = f.read(64)
        n += 1
        total += int.from_bytes(head[24:32], "little")
    return n, total


def rss(pid):
    return {k: proc_status_kib(pid, k) * 1024 for k in ("VmRSS", "RssAnon", "RssFile", "VmHWM")}


def tree_count(path):
    files = dirs = size = 0
    for d, ds, fs in os.walk(path):
        dirs += len(ds)
        files += len(fs)
        for f in fs:
            try:
                size += os.lstat(os.path.join(d, f)).st_size
            except OSError:
                pass
    return {"files": files, "dirs": dirs, "bytes": size}


def metrics(path):
    """The gauges and counters of a metrics file whose names mention cache/bytes/rss."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                name, _, value = line.rpartition(" ")
                base = name.split("{")[0]
                if any(w in base for w in ("cache", "memory", "resident", "bytes", "duration",
                                             "first_byte", "requests", "reads_total", "heap")):
                    key = re.sub(r'mount="[^"]*",?', "", name).replace(",}", "}")
                    key = key.replace("{}", "")
                    try:
                        out[key] = out.get(key, 0) + float(value)
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def wait_mounted(proc, mnt, t0, timeout, log_path):
    while not os.path.ismount(mnt):
        if proc.poll() is not None:
            with open(log_path, errors="replace") as f:
                raise RuntimeError(f"exited {proc.returncode}: {f.read()[-600:]}")
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"not mounted in {timeout} s")
        time.sleep(0.002)
    return time.monotonic() - t0


def unmount(proc, mnt):
    benchlib.stop_mount(mnt, proc)


def read_file(path):
    with open(path, "rb", buffering=0) as f:
        first = f.read(1)
        t = time.monotonic()
        n = len(first)
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            n += len(b)
    return t, n


def discard(path):
    """Removes path in a detached, niced process: on this machine's ext4 (mounted with
    `discard`) every unlink waits for its discard, ~300 files/s, and a 1.28M-file epoch leaves
    a disk cache of 60,000-250,000 files."""
    trash = path + ".trash"
    os.rename(path, trash)
    subprocess.Popen(["nice", "-n", "19", "ionice", "-c", "3", "rm", "-rf", trash],
                     stdin=subprocess.DEVNULL, start_new_session=True)


# The hint client start_hints runs: python/pcrfs/hint.py's Hinter, in a process of its own (as a
# training loop's main process would hold it), sending the epoch's order from a file of paths.
HINT_CLIENT = r"""
import sys, time, warnings
from pcrfs.hint import Hinter
mnt, listing = sys.argv[1], sys.argv[2]
with open(listing, "rb") as f:
    paths = [p for p in f.read().split(b"\n") if p]
warnings.simplefilter("always")
h = Hinter(mnt)
print("active" if h.active else "inactive", h.socket_path or "-", flush=True)
t0 = time.monotonic()
h.hint(paths)
h.flush()
print("sent", len(paths), h.skipped, round(time.monotonic() - t0, 3), flush=True)
h.close()
"""


def start_hints(env, mnt, ordered_files, wanted):
    """The hint channel (issue 40: a reader that knows the epoch's order tells the daemon, so a
    file at level k is fetched before it is asked for). Called after the mount is up and before
    the epoch's readers start, with the mount point and the epoch's files (paths relative to
    mnt, as the readers open them) in the order they are read: reader r of R takes
    ordered_files[r::R] (remote_bench.run_epoch), so the order hinted is the readers' order of
    first reads. wanted: this epoch is one with hints (--hints on, or the "on" half of --hints
    both). Starts HINT_CLIENT (python/pcrfs/hint.py's Hinter, PYTHONPATH=REPO/python) and waits
    until it has connected to the mount's hint socket; returns the Popen for stop_hints(), or
    None if there is no socket (a binary without the hint channel, or -o hints=no)."""
    if not wanted:
        return None
    listing = os.path.join(env["tmp"], "hints.txt")
    with open(listing, "wb") as f:
        f.write(b"".join(os.fsencode(p) + b"\n" for p in ordered_files))
    penv = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"))
    env["hint_runs"] = env.get("hint_runs", 0) + 1
    err_path = os.path.join(env["tmp"], f"hints-{env['hint_runs']}.err")
    errf = open(err_path, "wb")
    proc = subprocess.Popen([sys.executable, "-c", HINT_CLIENT, mnt, listing], env=penv,
                            stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL)
    errf.close()
    proc.hint_info = {"paths": len(ordered_files)}
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline().decode().split() if ready else []
    if line[:1] != ["active"]:
        stop_hints(proc)
        if not env.get("hints_warned"):
            log(f"--hints: no hint socket on {mnt} ({' '.join(line) or 'no answer'}; "
                f"{read_tail(err_path)}): epochs run without hints")
            env["hints_warned"] = True
        return None
    proc.hint_info["socket"] = line[1]
    return proc


def read_tail(path, n=300):
    try:
        with open(path, "rb") as f:
            return f.read().decode(errors="replace").strip()[-n:]
    except OSError:
        return ""


def stop_hints(handle):
    """Ends what start_hints started (a Popen: terminated if it has not sent every path yet,
    then waited for); returns what it said: paths, socket, and once every path was written
    to the socket, sent_s (seconds from connecting; the daemon stops reading the socket while
    16,384 hinted files wait, so this is about when the last ones were taken)."""
    if handle is None:
        return None
    info = getattr(handle, "hint_info", {})
    if isinstance(handle, subprocess.Popen):
        if handle.poll() is None:
            handle.terminate()
            info["terminated"] = True
        try:
            out, _ = handle.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            handle.kill()
            out, _ = handle.communicate()
        for line in (out or b"").decode().splitlines():
            w = line.split()
            if w[:1] == ["sent"] and len(w) == 4:
                info["sent"], info["skipped"], info["sent_s"] = int(w[1]), int(w[2]), float(w[3])
        info["returncode"] = handle.returncode
    return info


def level_bytes(pcr, store, facts):
    """Bytes of every level 1..10 (what the mounted level serves: the sum of its files'
    st_size): `pcr inspect --json`'s levels[].bytes, else the store's manifest.json
    level_bytes (the facts file's copy)."""
    if pcr:
        r = subprocess.run([pcr, "inspect", store, "--json"], capture_output=True, text=True)
        if r.returncode == 0:
            try:
                levels = json.loads(r.stdout)["levels"]
                out = [int(lv["bytes"]) for lv in sorted(levels, key=lambda lv: lv["level"])]
                if len(out) == 10:
                    return out, "pcr inspect --json"
            except (ValueError, KeyError, TypeError):
                pass
    try:
        with open(os.path.join(store, "manifest.json")) as f:
            return [int(b) for b in json.load(f)["level_bytes"]], "manifest.json"
    except (OSError, ValueError, KeyError):
        return list(facts["level_bytes"]), "facts (manifest.json at build time)"


def cache_configs(args, size, k):
    """The cache axis's configurations for level k of a size: the fixed caches of --quick, or
    one per --cache-fractions (remote_cache = that fraction of the level's bytes, at least 1
    MiB; the piece cache --piece-cache-fraction of it, at least 1 MiB)."""
    lb = size["level_bytes_now"][k - 1]
    if args.fixed_cache:
        rc, cs = args.fixed_cache
        return [{"fraction": None, "remote_cache": rc, "cache_size": cs, "level_bytes": lb,
                 "tag": f"rc{rc // MIB}M", "label": f"remote_cache={size_opt(rc)},"
                 f"cache_size={size_opt(cs)}"}]
    out = []
    for frac in args.cache_fractions:
        rc = max(MIB, int(lb * frac))
        cs = max(MIB, int(rc * args.piece_cache_fraction))
        out.append({"fraction": frac, "remote_cache": rc, "cache_size": cs, "level_bytes": lb,
                    "tag": f"f{frac:g}", "label": f"cache {frac:g} of the level "
                    f"(remote_cache={size_opt(rc)},cache_size={size_opt(cs)})"})
    return out


def size_opt(nbytes):
    """A -o SIZE for pcrfs: whole KiB (ParseSize takes K/M/G/T suffixes)."""
    return f"{max(1, nbytes // 1024)}K"


def pcrfs_level(env, size, k, subset, cache_cfg=None, hints=False):
    """A cold mount at level k: bytes before the first read, mount-to-first-byte, find, RSS, the
    epoch, the disk cache, and a reopen of that cache. With cache_cfg (the cache axis: a
    "remote_cache" and a "cache_size" in bytes), no disk cache and those two caches instead;
    then there is no disk cache to reopen and no settled RSS to wait for."""
    a, proxy = env["args"], env["proxy"]
    url = f"{proxy.url}/{size['store_link']}"
    tag = (f"{size['n']}-L{k}" + (f"-{cache_cfg['tag']}" if cache_cfg else "")
           + ("-hints" if hints else "") + (f"-{env['label']}" if env.get("label") else ""))
    cache = tempfile.mkdtemp(prefix=f"cache-{tag}-", dir=env["tmp"])
    mfile = os.path.join(env["tmp"], f"metrics-{tag}.prom")
    if cache_cfg:
        caches = ["disk_cache=0", f"remote_cache={size_opt(cache_cfg['remote_cache'])}",
                  f"cache_size={size_opt(cache_cfg['cache_size'])}"]
    else:
        caches = [f"disk_cache={a.disk_cache}"]
    opts = [f"scans={k}", f"cache_dir={cache}", *caches,
            f"metrics_file={mfile}", "metrics_interval=1"] + a.pcrfs_opt
    argv = [env["pcrfs"], url, MNT, "-f", "-o", ",".join(opts)]
    rec = {"level": k, "hints": {"wanted": hints, "started": False}}
    if cache_cfg:
        rec["cache"] = dict(cache_cfg, options=",".join(caches))
    log_path = os.path.join(env["tmp"], f"pcrfs-{tag}.log")
    first = os.path.join(MNT, subset[0])
    drop_caches()
    benchlib.warm_programs(env["programs"])
    proxy.reset(a.latency)
    os.makedirs(MNT, exist_ok=True)
    with open(log_path, "wb") as logf:
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
        try:
            rec["mount_s"] = wait_mounted(proc, MNT, t0, 600, log_path)
            st = proxy.stats()
            rec["bytes_before_read"] = st["bytes_to_client"]
            rec["requests_before_read"] = st["requests"]
            tb, _ = read_file(first)
            rec["first_byte_s"] = tb - t0
            pid = proc.pid
            rec["rss_mounted"] = rss(pid)
            t1 = time.monotonic()
            out = subprocess.run(f"find {MNT} -type f | wc -l", shell=True, capture_output=True,
                                 text=True).stdout.strip()
            rec["find_s"] = time.monotonic() - t1
            rec["find_count"] = int(out or 0)
            rec["rss_find"] = rss(pid)
            proxy.reset(a.latency)
            hinter = start_hints(env, MNT, epoch_order(subset, a.seed + 1), hints)
            rec["hints"]["started"] = hinter is not None
            cpu0 = proc_cpu_seconds(pid)
            proxy_cpu0 = proxy.cpu_seconds()
            perf = None
            if a.perf:
                rec["perf_data"] = os.path.join(WORK, f"perf-{tag}.data")
                perf = subprocess.Popen(["perf", "record", "-F", "499", "-g", "-p", str(pid),
                                         "-o", rec["perf_data"]], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
                time.sleep(0.5)
            try:
                e = run_epoch(MNT, subset, a.readers, a.seed + 1, a.epoch_timeout)
            finally:
                info = stop_hints(hinter)
                if info:
                    rec["hints"]["client"] = info
            if hinter is not None:
                try:  # what the daemon did with them: lines, queued, taken, not_found, ...
                    rec["hints"]["daemon"] = json.loads(os.getxattr(MNT, "user.pcrfs.hints"))
                except (OSError, ValueError):
                    pass
            e["daemon_cpu_s"] = proc_cpu_seconds(pid) - cpu0
            e["proxy_cpu_s"] = proxy.cpu_seconds() - proxy_cpu0
            if perf:
                perf.send_signal(2)
                perf.wait()
            st = proxy.stats()
            e["origin_bytes"], e["origin_requests"] = st["bytes_to_client"], st["requests"]
            rec["epoch"] = e
            rec["rss_epoch"] = rss(pid)
            epoch_end = time.monotonic()
            time.sleep(1.2)  # one metrics_interval
            rec["metrics"] = metrics(mfile)
            try:
                rec["xattr"] = json.loads(os.getxattr(MNT, "user.pcrfs.remote"))
                # The scheduler's model (chunk, rate, latency) and the pusher's counts.
                rec["prefetch"] = os.getxattr(MNT, "user.pcrfs.prefetch").decode()
            except OSError:
                pass
            if not cache_cfg:
                # Once the daemon's heap trimmer has run (every 10 s: common/heap_trimmer.h),
                # what the epoch freed is no longer resident.
                time.sleep(max(0.0, SETTLE_S - (time.monotonic() - epoch_end)))
                rec["rss_settled"] = rss(pid)
        except RuntimeError as ex:
            rec["error"] = str(ex)
        finally:
            unmount(proc, MNT)
    rec["disk_cache"] = tree_count(cache)
    if "error" not in rec and not cache_cfg:
        # Reopen the disk cache: a fresh daemon on the same cache folder.
        drop_caches()
        benchlib.warm_programs(env["programs"])
        proxy.reset(a.latency)
        argv = [x.replace(mfile, mfile + ".reopen") for x in argv]
        with open(log_path + ".reopen", "wb") as logf:
            t0 = time.monotonic()
            proc = subprocess.Popen(argv, stdout=logf, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            try:
                rec["reopen_mount_s"] = wait_mounted(proc, MNT, t0, 600, log_path + ".reopen")
                tb, _ = read_file(first)
                rec["reopen_first_byte_s"] = tb - t0
                st = proxy.stats()
                rec["reopen_origin_bytes"] = st["bytes_to_client"]
                rec["reopen_statuses"] = st["statuses"]
            except RuntimeError as ex:
                rec["reopen_error"] = str(ex)
            finally:
                unmount(proc, MNT)
    discard(cache)
    e = rec.get("epoch", {})
    log(f"{size['n']:,} L{k}{' ' + cache_cfg['label'] if cache_cfg else ''}"
        f"{' with hints' if hints else ''}: "
        f"mount {rec.get('mount_s', 0):.2f} s, "
        f"{rec.get('bytes_before_read', 0):,} B before the first read, first byte "
        f"{rec.get('first_byte_s', 0):.2f} s, find {rec.get('find_s', 0):.2f} s; epoch "
        f"{e.get('files_per_s', 0):.0f} files/s, {e.get('bytes', 0) / 1e6:.1f} MB served, origin "
        f"{e.get('origin_bytes', 0) / 1e6:.1f} MB in {e.get('origin_requests', 0):,} GETs, "
        f"errors {e.get('errors')}, proxy CPU {e.get('proxy_cpu_s', 0):.1f} s; RSS "
        f"{rec.get('rss_epoch', {}).get('VmRSS', 0) / MIB:.1f} MiB; disk cache "
        f"{rec['disk_cache']['files']} files; reopen {rec.get('reopen_mount_s', 0):.2f} s "
        f"{rec.get('error', '')}")
    return rec


def rclone_epoch(env, size, subset):
    a, proxy = env["args"], env["proxy"]
    conf = os.path.join(env["tmp"], "rclone.conf")
    open(conf, "a").close()
    rc_cache = tempfile.mkdtemp(prefix="rclone-cache-", dir=env["tmp"])
    argv = ["rclone", "mount", ":http:", MNT, "--http-url",
            f"{proxy.url}/{size['src_link']}/", "--read-only", "--vfs-cache-mode", "off",
            "--checkers", str(a.rclone_checkers), "--cache-dir", rc_cache, "--config", conf,
            "--log-level", "NOTICE"]
    rec = {}
    drop_caches()
    proxy.reset(a.latency)
    try:
        with MountProc(argv, MNT, os.path.join(env["tmp"], f"rclone-{size['n']}.log")) as m:
            rec["mount_s"] = m.mount_seconds
            rec["list_s"], rec["listed"] = list_tree(MNT)
            rec["list_requests"] = proxy.stats()["requests"]
            proxy.reset(a.latency)
            proxy_cpu0 = proxy.cpu_seconds()
            e = run_epoch(MNT, subset, a.readers, a.seed + 1, a.epoch_timeout)
            e["proxy_cpu_s"] = proxy.cpu_seconds() - proxy_cpu0
            st = proxy.stats()
            e["origin_bytes"], e["origin_requests"] = st["bytes_to_client"], st["requests"]
            rec["epoch"] = e
    except RuntimeError as ex:
        rec["error"] = str(ex)
    shutil.rmtree(rc_cache, ignore_errors=True)
    e = rec.get("epoch", {})
    log(f"{size['n']:,} rclone: listing {rec.get('list_s', 0):.1f} s ({rec.get('listed')} files), "
        f"epoch {e.get('files_per_s', 0):.0f} files/s, {e.get('bytes', 0) / 1e6:.1f} MB, errors "
        f"{e.get('errors')} {rec.get('error', '')}")
    return rec


def keep_logs(tmp, dest):
    """Copies the daemons', rclone's and the hint client's logs (each up to 16 MiB) from the
    scratch folder, which is then deleted, into dest (emptied first); returns dest."""
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest, exist_ok=True)
    for name in sorted(os.listdir(tmp)):
        path = os.path.join(tmp, name)
        if (os.path.isfile(path) and re.search(r"\.(log|err)(\.reopen)?$", name)
                and os.path.getsize(path) <= 16 * MIB):
            shutil.copyfile(path, os.path.join(dest, name))
    return dest


def inner_main(args):
    t_start = time.monotonic()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load0": loadavg(),
            "commit": git_commit(REPO), "args": {k: v for k, v in vars(args).items()}}
    pcrfs = find_tool("fs/pcrfs", "pcrfs", args.pcrfs)
    meta["pcrfs"] = pcrfs
    meta["proxy"] = args.proxy
    pcr = find_tool("mount-tools/pcr", "pcr", args.pcr) if axis_mode(args) else None
    # Which binary ran: a build folder may be rebuilt between runs (it was, 2026-11-27), so
    # its time and hash are kept; pass a copy with --pcrfs to pin one.
    meta["pcrfs_mtime"] = time.strftime("%Y-%m-%d %H:%M:%S UTC",
                                        time.gmtime(os.path.getmtime(pcrfs)))
    with open(pcrfs, "rb") as f:
        meta["pcrfs_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    pcrfs_b = args.pcrfs_b
    if pcrfs_b:
        if not axis_mode(args):
            fail("--pcrfs-b compares binaries on the cache axis (--cache-fractions or --quick)")
        meta["pcrfs_b"] = pcrfs_b
        with open(pcrfs_b, "rb") as f:
            meta["pcrfs_b_sha256"] = hashlib.sha256(f.read()).hexdigest()[:16]
    sizes = []
    www = os.path.join(WORK, "www")
    os.makedirs(www, exist_ok=True)
    for n in args.sizes:
        p = names(n, args.seed)
        with open(p["facts"]) as f:
            facts = json.load(f)
        for link, target in ((p["src_link"], p["data"]), (p["store_link"], p["store"])):
            lp = os.path.join(www, link)
            if os.path.islink(lp):
                os.unlink(lp)
            os.symlink(target, lp)
        facts["records"], facts["table_bytes"] = record_tables(p["store"])
        if axis_mode(args):
            facts["level_bytes_now"], facts["level_bytes_from"] = level_bytes(pcr, p["store"],
                                                                              facts)
        files = source_files(p["data"])["files"]
        m = len(files)
        if args.epoch_files and n > args.full_epoch_max:
            m = min(args.epoch_files, m)
        subset = random.Random(args.seed).sample(files, m)
        sizes.append(dict(facts, **p, subset=subset))
    tmp = tempfile.mkdtemp(prefix="scale-remote-")
    programs = benchlib.program_files(pcrfs) + benchlib.program_files(shutil.which("rclone"))
    if pcrfs_b:
        programs += benchlib.program_files(pcrfs_b)
    binaries = [("A", pcrfs), ("B", pcrfs_b)] if pcrfs_b else [("", pcrfs)]
    row_index = 0
    results, last_rclone = [], None
    if args.rclone_from:
        with open(args.rclone_from) as f:
            earlier = [r for r in json.load(f)["results"] if r.get("rclone", {}).get("epoch")]
        if not earlier:
            fail(f"--rclone-from {args.rclone_from}: no rclone epoch in it")
        last = max(earlier, key=lambda r: r["n"])
        last_rclone = dict(last["rclone"], measured_at=last["n"], source=args.rclone_from)
    set_cap(None, ())
    try:
        with AutoindexNginx(www, workers=2) as nginx, \
                ProxyProcess(nginx.url, tmp, "proxy", args.proxy) as proxy:
            set_cap(args.cap, [url_port(proxy.url)])
            env = {"args": args, "proxy": proxy, "pcrfs": pcrfs, "tmp": tmp,
                   "programs": programs}
            for size in sizes:
                rec = {"n": size["n"], "epoch_files": len(size["subset"]), "levels": {}}
                log(f"size {size['n']:,}: epoch of {len(size['subset']):,} files, "
                    f"{args.readers} readers")
                for k in args.levels:
                    if not axis_mode(args):
                        rec["levels"][k] = pcrfs_level(env, size, k, size["subset"])
                        continue
                    for cfg in cache_configs(args, size, k):
                        for h in HINT_MODES[args.hints]:
                            # A then B, B then A on the next row: a drift in the machine's
                            # load favours neither.
                            order = binaries if row_index % 2 == 0 else binaries[::-1]
                            row_index += 1
                            for label, binary in order:
                                lv = pcrfs_level(dict(env, pcrfs=binary, label=label), size, k,
                                                 size["subset"], cfg, h)
                                lv["binary"] = label
                                rec.setdefault("cache_axis", []).append(lv)
                if args.no_rclone:
                    pass
                elif (size["n"] <= args.rclone_max and not args.rclone_from) or \
                        last_rclone is None:
                    rec["rclone"] = last_rclone = rclone_epoch(env, size, size["subset"])
                    last_rclone = dict(last_rclone, measured_at=size["n"])
                else:
                    rec["rclone"] = last_rclone  # its listing would take rclone too long
                results.append(rec)
    finally:
        set_cap(None, ())
        meta["logs"] = keep_logs(tmp, os.path.splitext(args.out)[0] + ".logs")
        discard(tmp)
    meta["load1"] = loadavg()
    meta["elapsed_s"] = time.monotonic() - t_start
    facts = {s["n"]: {k: v for k, v in s.items() if k != "subset"} for s in sizes}
    data = {"meta": meta, "facts": facts, "results": results}
    finish(args, data)
    return 0


# ----------------------------------------------------------------------------- report


def fmt(x, spec=",.0f"):
    return "-" if x is None else format(x, spec)


def analyse(data):
    """Per size and level: the numbers of the table and the verdicts."""
    rows = []
    facts = {int(k): v for k, v in data["facts"].items()}
    smallest = min(facts)
    base_per_file = facts[smallest]["build"]["wall"] / facts[smallest]["files"]
    for r in data["results"]:
        n = r["n"]
        f = facts[n]
        rc = r.get("rclone", {}).get("epoch")
        for k, lv in sorted(r["levels"].items(), key=lambda kv: int(kv[0])):
            e = lv.get("epoch", {})
            row = {"n": n, "level": int(k), "epoch_files": r["epoch_files"],
                   "bytes_before_read": lv.get("bytes_before_read"),
                   "per_file_before_read": (lv["bytes_before_read"] / f["files"]
                                            if lv.get("bytes_before_read") else None),
                   "mount_s": lv.get("mount_s"), "first_byte_s": lv.get("first_byte_s"),
                   "find_s": lv.get("find_s"), "files_per_s": e.get("files_per_s"),
                   "served": e.get("bytes"), "origin": e.get("origin_bytes"),
                   "errors": e.get("errors"), "daemon_cpu_s": e.get("daemon_cpu_s"),
                   "rss_find": lv.get("rss_find", {}).get("VmRSS"),
                   "rss_epoch": lv.get("rss_epoch", {}).get("VmRSS"),
                   "anon_epoch": lv.get("rss_epoch", {}).get("RssAnon"),
                   "range_memory": lv.get("metrics", {}).get(
                       'pcrfs_range_cache_bytes{tier="memory"}'),
                   "hwm": lv.get("rss_epoch", {}).get("VmHWM"),
                   "cache_files": lv.get("disk_cache", {}).get("files"),
                   "cache_dirs": lv.get("disk_cache", {}).get("dirs"),
                   "cache_bytes": lv.get("disk_cache", {}).get("bytes"),
                   "reopen_s": lv.get("reopen_mount_s"),
                   "reopen_first_byte_s": lv.get("reopen_first_byte_s"),
                   "build_s_per_file": f["build"]["wall"] / f["files"],
                   "build_rss": f["build"]["maxrss"], "error": lv.get("error")}
            row["amp"] = (row["origin"] / row["served"]) if row["served"] else None
            m = lv.get("metrics", {})
            # The daemon's own accounts (metrics; absent from runs before they existed).
            small = m.get('pcrfs_piece_cache_bytes{cache="small"}')
            row["piece_memory"] = (None if small is None else
                                   small + m.get('pcrfs_piece_cache_bytes{cache="large"}', 0))
            row["table_memory"] = m.get("pcrfs_record_table_bytes")
            row["index_memory"] = m.get("pcrfs_index_memory_bytes")
            # A remote store's tables' rows in a file of the cache folder (page cache, not RSS).
            row["table_file"] = m.get("pcrfs_record_table_file_bytes")
            row["anon_epoch"] = lv.get("rss_epoch", {}).get("RssAnon")
            row["rss_beyond"] = (row["rss_epoch"] - row["range_memory"]
                                 if row["rss_epoch"] and row["range_memory"] is not None else None)
            # Beyond the two caches a user sizes (-o remote_cache, -o cache_size).
            row["rss_beyond_caches"] = (row["rss_beyond"] - row["piece_memory"]
                                        if row["rss_beyond"] is not None and
                                        row["piece_memory"] is not None else None)
            settled = lv.get("rss_settled", {}).get("VmRSS")
            row["rss_settled_beyond_caches"] = (
                settled - row["range_memory"] - row["piece_memory"]
                if settled and row["rss_beyond_caches"] is not None else None)
            if row["served"] and f.get("table_bytes"):
                row["amp_data"] = (row["origin"] - f["table_bytes"]) / row["served"]
            if rc and rc.get("files_per_s") and row["served"] and row["files_per_s"]:
                row["rclone_fps"] = rc["files_per_s"]
                row["byte_ratio"] = (rc["bytes"] / rc["files"]) / (row["served"] / e["files"])
                row["target_fps"] = 0.9 * rc["files_per_s"] * row["byte_ratio"]
                row["vs_rclone"] = row["files_per_s"] / (rc["files_per_s"] * row["byte_ratio"])
            row["build_flat"] = row["build_s_per_file"] / base_per_file
            rows.append(row)
    return rows


def chk(x, ok):
    """PASS/FAIL of ok(x), or nothing when x was not measured."""
    return "" if x is None else benchlib.verdict(ok(x))


def analyse_axis(data):
    """The cache axis's rows: per size, level and cache, files/s against rclone's and against
    the byte-ratio ideal (rclone's files/s x source bytes / level bytes), origin / served, GETs."""
    rows = []
    facts = {int(k): v for k, v in data["facts"].items()}
    for r in data["results"]:
        n = r["n"]
        f = facts[n]
        rc = r.get("rclone", {}).get("epoch") or {}
        lb = f.get("level_bytes_now") or f["level_bytes"]
        for lv in r.get("cache_axis", []):
            k = int(lv["level"])
            e = lv.get("epoch", {})
            c = lv.get("cache", {})
            row = {"n": n, "level": k, "epoch_files": r["epoch_files"],
                   "fraction": c.get("fraction"), "remote_cache": c.get("remote_cache"),
                   "cache_size": c.get("cache_size"), "level_bytes": lb[k - 1],
                   "files_per_s": e.get("files_per_s"), "served": e.get("bytes"),
                   "origin": e.get("origin_bytes"), "gets": e.get("origin_requests"),
                   "errors": e.get("errors"), "seconds": e.get("seconds"),
                   "daemon_cpu_s": e.get("daemon_cpu_s"), "proxy_cpu_s": e.get("proxy_cpu_s"),
                   "rss_epoch": lv.get("rss_epoch", {}).get("VmRSS"),
                   "error": lv.get("error"), "rclone_fps": rc.get("files_per_s"),
                   "hints": lv.get("hints", {}), "binary": lv.get("binary", ""),
                   "rclone_gets": rc.get("origin_requests")}
            row["amp"] = row["origin"] / row["served"] if row["served"] else None
            row["gets_per_file"] = (row["gets"] / e["files"]
                                    if row["gets"] is not None and e.get("files") else None)
            row["proxy_cores"] = (row["proxy_cpu_s"] / row["seconds"]
                                  if row["proxy_cpu_s"] is not None and row["seconds"] else None)
            if row["rclone_fps"] and row["files_per_s"]:
                row["vs_rclone"] = row["files_per_s"] / row["rclone_fps"]
                row["ideal_fps"] = row["rclone_fps"] * f["src_bytes"] / lb[k - 1]
                row["vs_ideal"] = row["files_per_s"] / row["ideal_fps"]
            rows.append(row)
    return rows


def hint_label(h):
    if not h.get("started"):
        return "wanted" if h.get("wanted") else "no"
    d = h.get("daemon")
    if not d:
        return "yes"
    return f"yes ({fmt(d.get('taken'))} taken, {fmt(d.get('read_before'))} read before)"


def mib_label(nbytes):
    return "-" if nbytes is None else (f"{nbytes / MIB:.0f}M" if nbytes >= 10 * MIB
                                       else f"{nbytes / MIB:.1f}M")


def finish_axis(args, data):
    """The report of the cache axis (--cache-fractions) or of --quick."""
    rows = analyse_axis(data)
    m = data["meta"]
    a = m["args"]
    facts = {int(k): v for k, v in data["facts"].items()}
    proxy = m.get("proxy", "python")
    quick = a.get("quick")
    title = ("Issue 40's table again: a level larger than the cache" if quick else
             "A level larger than the cache (issue 40, item 5)")
    any_facts = next(iter(facts.values()))
    L = [f"## {title}: {', '.join(f'{n:,}' for n in sorted(facts))} files", "",
         f"{m['date']}, commit {m['commit']}, pcrfs {m.get('pcrfs_mtime', '?')} "
         f"(sha256 {m.get('pcrfs_sha256', '?')}), load {m['load0']} at the start, "
         f"{m.get('load1')} at the end, {m.get('elapsed_s', 0) / 60:.1f} min. nginx behind "
         f"{'tests/remote/latency_proxy.js' if proxy == 'node' else 'tests/remote/fault_proxy.py'}"
         f" ({a['latency']} ms before each answer), answers capped at {a['cap']} Mbit/s by HTB "
         f"in a network namespace; photo crops (short side {any_facts.get('short_side', '?')} "
         f"px) with ImageNet-like names in {a.get('classes') or DEFAULT_CLASSES:,} class "
         f"folders. Each row a cold mount (page cache dropped, fresh cache folder) with "
         f"`-o disk_cache=0,remote_cache=R,cache_size=P`"
         + (" (R = 8M, P = 1M, as in the issue)" if quick else
            f" (R = the fraction of the mounted level's bytes, at least 1 MiB; P = "
            f"{a.get('piece_cache_fraction', 0.125):g} R, at least 1 MiB)")
         + (f", `-o {','.join(a['pcrfs_opt'])}`" if a.get("pcrfs_opt") else "")
         + f"; an epoch of every file (or a seeded subset of {a['epoch_files']:,} above "
         f"{a.get('full_epoch_max', 0):,}), shuffled, {a['readers']} readers; rclone "
         f"`--vfs-cache-mode off` over the source JPEGs, the same files in the same order. "
         f"Hints: {a.get('hints') or 'off'} (the hints column: yes = the epoch's order was "
         f"sent through the hint socket before the readers started, with the daemon's count of "
         f"hinted files taken for fetching and of those read before their turn; 'wanted' = "
         f"asked for, but the mount had no hint socket).", "",
         "Ideal = rclone's files/s x source bytes / level bytes (the level's byte saving at "
         "rclone's byte rate). Targets: files/s >= rclone's, origin / served <= 1.10. GETs = "
         "requests through the proxy during the epoch; proxy CPU in cores over the epoch (the "
         "proxy is the bottleneck when it nears 1).", "",
         "| N | level | cache (of level) | remote_cache / cache_size | level MB | files/s | "
         "rclone files/s | vs rclone (>= 1) | ideal files/s | vs ideal | origin / served "
         "(<= 1.10) | GETs (/file) | daemon CPU s | proxy CPU cores | hints | errors |",
         "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--|--:|"]
    for r in rows:
        size_label = f"{r['n']:,}"
        if r["epoch_files"] != r["n"]:
            size_label += f" ({r['epoch_files']:,} read)"
        actual = r["remote_cache"] / r["level_bytes"] if r["remote_cache"] else None
        frac = f"{actual:.3g}" if actual is not None else "-"
        if r["fraction"] is not None:  # as asked, and as it is once the 1 MiB floor applies
            frac = (f"{r['fraction']:g}" if abs(actual / r["fraction"] - 1) < 0.01 else
                    f"{r['fraction']:g} ({frac}: 1 MiB floor)")
        binary = f" {r['binary']}" if r.get("binary") else ""
        L.append(
            f"| {size_label} | {r['level']}{binary} | {frac} | {mib_label(r['remote_cache'])} / "
            f"{mib_label(r['cache_size'])} | {r['level_bytes'] / 1e6:.1f} | "
            f"{fmt(r['files_per_s'])} | {fmt(r['rclone_fps'])} | "
            f"{fmt(r.get('vs_rclone'), '.2f')} {chk(r.get('vs_rclone'), lambda x: x >= 1.0)} | "
            f"{fmt(r.get('ideal_fps'))} | {fmt(r.get('vs_ideal'), '.2f')} | "
            f"{fmt(r['amp'], '.3f')} {chk(r['amp'], lambda x: x <= 1.10)} | "
            f"{fmt(r['gets'])} ({fmt(r['gets_per_file'], '.2f')}) | "
            f"{fmt(r['daemon_cpu_s'], '.1f')} | {fmt(r['proxy_cores'], '.2f')} | "
            f"{hint_label(r['hints'])} | {fmt(r['errors'])}"
            f"{' ' + r['error'] if r.get('error') else ''} |")
    if m.get("pcrfs_b"):
        L += ["", f"A = {m['pcrfs']} (sha256 {m.get('pcrfs_sha256', '?')}), B = {m['pcrfs_b']} "
              f"(sha256 {m.get('pcrfs_b_sha256', '?')}), mounted in turn for each row (the level "
              "column's A / B), the order alternating row by row.", "",
              "| N | level | cache (of level) | hints | files/s A | files/s B | B / A | "
              "GETs/file A | GETs/file B | origin / served A | B |",
              "|--:|--:|--:|--|--:|--:|--:|--:|--:|--:|--:|"]
        pairs, seen = {}, {}
        for r in rows:  # a level asked twice (--levels 10,10) is two pairs
            key = (r["n"], r["level"], r["fraction"], hint_label(r["hints"]).startswith("yes"))
            nth = seen[key + (r["binary"],)] = seen.get(key + (r["binary"],), -1) + 1
            pairs.setdefault(key + (nth,), {})[r["binary"]] = r
        for (n, k, frac, hinted, _), p in pairs.items():
            a_row, b_row = p.get("A", {}), p.get("B", {})
            ratio = (b_row["files_per_s"] / a_row["files_per_s"]
                     if a_row.get("files_per_s") and b_row.get("files_per_s") else None)
            L.append(f"| {n:,} | {k} | {fmt(frac, 'g')} | {'yes' if hinted else 'no'} | "
                     f"{fmt(a_row.get('files_per_s'))} | {fmt(b_row.get('files_per_s'))} | "
                     f"{fmt(ratio, '.2f')} | {fmt(a_row.get('gets_per_file'), '.2f')} | "
                     f"{fmt(b_row.get('gets_per_file'), '.2f')} | {fmt(a_row.get('amp'), '.3f')} | "
                     f"{fmt(b_row.get('amp'), '.3f')} |")
    if quick:
        L += ["", f"The issue's numbers (2026-11-28, the Python fault proxy): {ISSUE40}."]
    levels = sorted({r["level"] for r in rows})
    L += ["", "| N | source MB (KB/file) | level MB: " + " / ".join(f"L{k}" for k in levels)
          + " | level bytes from | rclone listing s | rclone files/s | rclone GETs | "
          "rclone proxy CPU cores |", "|--:|--:|--:|--|--:|--:|--:|--:|"]
    for r in data["results"]:
        f = facts[r["n"]]
        lb = f.get("level_bytes_now") or f["level_bytes"]
        rc = r.get("rclone", {})
        e = rc.get("epoch", {})
        cores = (e["proxy_cpu_s"] / e["seconds"] if e.get("proxy_cpu_s") is not None and
                 e.get("seconds") else None)
        per_file = f["src_bytes"] / f["files"] / 1e3
        L.append(f"| {r['n']:,} | {f['src_bytes'] / 1e6:.1f} ({per_file:.1f}) | "
                 + " / ".join(f"{lb[k - 1] / 1e6:.1f}" for k in levels)
                 + f" | {f.get('level_bytes_from', 'manifest.json')} | "
                 f"{'-' if 'measured_at' in rc else fmt(rc.get('list_s'), '.1f')} | "
                 f"{fmt(e.get('files_per_s'))}"
                 + (f" (the {rc['measured_at']:,} run)" if "measured_at" in rc else "")
                 + f" | {fmt(e.get('origin_requests'))} | {fmt(cores, '.2f')} |")
    L.append("")
    text = "\n".join(L) + "\n"
    write_results(text, args.out, os.path.splitext(args.out)[0] + ".json", data,
                  json_default=str)
    if args.plot:
        plot_axis(rows, args.plot)
        log(f"plot: {args.plot}")


def plot_axis(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ns = sorted({r["n"] for r in rows})
    fig, ax = plt.subplots(len(ns), 2, figsize=(11, 3.6 * len(ns)), squeeze=False)

    def key(r):  # one line per cache, hints and binary (--pcrfs-b)
        return (r["fraction"] if r["fraction"] is not None else -1.0,
                bool(r["hints"].get("wanted")), r.get("binary", ""))

    for i, n in enumerate(ns):
        rs = [r for r in rows if r["n"] == n]
        for j, kk in enumerate(sorted({key(r) for r in rs}, reverse=True)):
            cr = sorted((r for r in rs if key(r) == kk), key=lambda r: r["level"])
            lab = (f"cache {kk[0]:g} of level" if kk[0] >= 0 else
                   f"remote_cache={mib_label(cr[0]['remote_cache'])}")
            lab += ", hints" if kk[1] else ""
            lab += f", {kk[2]}" if kk[2] else ""
            ls = ("s" if kk[1] else "o") + (":" if kk[2] == "A" else "--" if kk[1] else "-")
            ax[i][0].plot([r["level"] for r in cr], [r["files_per_s"] or 0 for r in cr], ls,
                          color=f"C{j}", label=f"pcrfs, {lab}")
            ax[i][1].plot([r["level"] for r in cr], [r["amp"] or 0 for r in cr], ls,
                          color=f"C{j}", label=lab)
        base = sorted({r["level"]: r for r in rs if r.get("ideal_fps")}.values(),
                      key=lambda r: r["level"])
        if base:
            ax[i][0].plot([r["level"] for r in base], [r["ideal_fps"] for r in base], "x:",
                          color="gray", label="ideal (rclone x source / level bytes)")
            ax[i][0].axhline(base[0]["rclone_fps"], color="black", ls=":", label="rclone")
        ax[i][0].set(yscale="log", xlabel="level", ylabel="epoch files/s",
                     title=f"{n:,} files: cold shuffled epoch")
        ax[i][0].legend(fontsize=7)
        ax[i][1].axhline(1.10, color="gray", ls=":")
        ax[i][1].set(xlabel="level", ylabel="origin / served", ylim=(0, None),
                     title=f"{n:,} files: origin bytes / bytes served (target <= 1.10)")
        ax[i][1].legend(fontsize=7)
    benchlib.save_figure(fig, path, dpi=90)


def finish(args, data):
    if any(r.get("cache_axis") for r in data["results"]):
        finish_axis(args, data)
        return
    rows = analyse(data)
    m = data["meta"]
    facts = {int(k): v for k, v in data["facts"].items()}
    a = m["args"]
    V = benchlib.verdict
    L = [f"## Remote stores at scale: {', '.join(f'{n:,}' for n in sorted(facts))} files", "",
         f"{m['date']}, commit {m['commit']}, pcrfs {m.get('pcrfs_mtime', '?')} "
         f"(sha256 {m.get('pcrfs_sha256', '?')}), load {m['load0']} at the start, {m.get('load1')} at "
         f"the end, {m.get('elapsed_s', 0) / 60:.1f} min. nginx behind "
         f"{'the latency proxy' if m.get('proxy') == 'node' else 'the fault proxy'} "
         f"({a['latency']} ms before each answer), answers capped at {a['cap']} Mbit/s by HTB in "
         f"a network namespace; photo crops (short side {SHORT_SIDE} px) with ImageNet-like "
         f"names in 1,000 class folders; each level a cold mount (page cache dropped, fresh "
         f"cache folder, `-o disk_cache={a['disk_cache']}`); epoch = every file of stores "
         f"of up to {a.get('full_epoch_max', 0):,} files, else a seeded random subset of "
         f"{a['epoch_files']:,}, shuffled, {a['readers']} readers; rclone "
         f"`--vfs-cache-mode off` over the source JPEGs, the same files in the same order.", "",
         "| N | level | bytes before 1st read (/file) | mount s | 1st byte s | find s | "
         "epoch files/s | rclone x byte ratio | vs rclone (>= 0.9) | origin / served "
         "(<= 1.05) | without tables | RSS after find, epoch MiB | beyond the range cache | disk cache files+dirs | reopen s |",
         "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        scaled = (r["rclone_fps"] * r["byte_ratio"]) if r.get("rclone_fps") else None
        size_label = f"{r['n']:,}"
        if r["epoch_files"] != r["n"]:
            size_label += f" ({r['epoch_files']:,} read)"
        L.append(
            f"| {size_label} | {r['level']} | {fmt(r['bytes_before_read'])} "
            f"({fmt(r['per_file_before_read'], '.1f')}) | {fmt(r['mount_s'], '.2f')} | "
            f"{fmt(r['first_byte_s'], '.2f')} | {fmt(r['find_s'], '.2f')} | "
            f"{fmt(r['files_per_s'])} | {fmt(scaled)} | "
            f"{fmt(r.get('vs_rclone'), '.2f')} {chk(r.get('vs_rclone'), lambda x: x >= 0.9)} | "
            f"{fmt(r['amp'], '.3f')} {chk(r['amp'], lambda x: x <= 1.05)} | "
            f"{fmt(r.get('amp_data'), '.3f')} | "
            f"{fmt(r['rss_find'] and r['rss_find'] / MIB, '.1f')}, "
            f"{fmt(r['rss_epoch'] and r['rss_epoch'] / MIB, '.1f')} | "
            f"{fmt(r['rss_beyond'] and r['rss_beyond'] / MIB, '.1f')} | "
            f"{fmt(r['cache_files'])}+{fmt(r['cache_dirs'])} | {fmt(r['reopen_s'], '.2f')} |")
    mem = [r for r in rows if r.get("rss_beyond_caches") is not None]
    if mem:
        L += ["", "Daemon memory after the epoch (MiB): VmRSS, the range cache's memory tier "
              "(`-o remote_cache`) and the piece cache (`-o cache_size`), then what is beyond "
              "those two caches at the epoch's end and "
              f"{SETTLE_S} s later (once the heap trimmer has returned what the epoch freed) and, "
              "of it, the record tables (the piece offsets and CRCs of the groups read: bounded "
              "at 128 MiB, least recently used out) and the index; RssAnon, and the tables' "
              "rows kept in a file of the cache folder (page cache, not RSS).", "",
              "| N | level | VmRSS | range cache | piece cache | beyond both (< 150) | "
              f"{SETTLE_S} s later | of it: record tables | index | RssAnon | tables' file |",
              "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
        for r in mem:
            L.append(f"| {r['n']:,} | {r['level']} | {r['rss_epoch'] / MIB:.1f} | "
                     f"{r['range_memory'] / MIB:.1f} | {r['piece_memory'] / MIB:.1f} | "
                     f"{r['rss_beyond_caches'] / MIB:.1f} "
                     f"{chk(r['rss_beyond_caches'], lambda x: x < 150 * MIB)} | "
                     f"{fmt(r['rss_settled_beyond_caches'] and r['rss_settled_beyond_caches'] / MIB, '.1f')} "
                     f"{chk(r['rss_settled_beyond_caches'], lambda x: x < 150 * MIB)} | "
                     f"{fmt(r['table_memory'] and r['table_memory'] / MIB, '.1f')} | "
                     f"{fmt(r['index_memory'] and r['index_memory'] / MIB, '.1f')} | "
                     f"{fmt(r.get('anon_epoch') and r['anon_epoch'] / MIB, '.1f')} | "
                     f"{fmt(r.get('table_file') and r['table_file'] / MIB, '.1f')} |")
    L += ["", "Without tables: (origin bytes - the header and tables section of every record) / "
          "served. A reader fetches a record's tables section (136 bytes per image + its name) "
          "once, for the piece CRCs; an epoch that touches every record moves all of them.",
          "", "| N | index bytes (/file) | records, tables MB | pcr build s | per file (vs smallest) | CPU s | "
          "peak RSS MiB (< 512) | source MB | L1 / L5 / L10 MB | rclone listing s | "
          "rclone epoch files/s |", "|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in data["results"]:
        f = facts[r["n"]]
        b = f["build"]
        base = facts[min(facts)]["build"]["wall"] / facts[min(facts)]["files"]
        rc = r.get("rclone", {})
        lb = f["level_bytes"]
        L.append(f"| {r['n']:,} | {f['index_bytes']:,} ({f['index_bytes'] / f['files']:.1f}) | "
                 f"{f.get('records', 0):,}, {f.get('table_bytes', 0) / 1e6:.2f} | "
                 f"{b['wall']:.1f} | {b['wall'] / f['files'] * 1e3:.3f} ms "
                 f"({b['wall'] / f['files'] / base:.2f}x) | {b['cpu']:.1f} "
                 f"({b['cpu'] / f['files'] * 1e3:.3f} ms/file) | "
                 f"{b['maxrss'] / MIB:.0f} {V(b['maxrss'] < 512 * MIB)} | "
                 f"{f['src_bytes'] / 1e6:.1f} | {lb[0] / 1e6:.1f} / {lb[4] / 1e6:.1f} / "
                 f"{lb[9] / 1e6:.1f} | "
                 f"{'-' if 'measured_at' in rc else fmt(rc.get('list_s'), '.1f')} | "
                 f"{fmt(rc.get('epoch', {}).get('files_per_s'))}"
                 f"{' (the ' + format(rc['measured_at'], ',') + ' run)' if 'measured_at' in rc else ''} |")
    L.append("")
    text = "\n".join(L) + "\n"
    write_results(text, args.out, os.path.splitext(args.out)[0] + ".json", data,
                  json_default=str)
    if args.plot:
        plot(rows, data, args.plot)
        log(f"plot: {args.plot}")


def plot(rows, data, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 5, figsize=(20, 3.8))
    levels = sorted({r["level"] for r in rows})
    ns = sorted({r["n"] for r in rows})
    for i, k in enumerate(levels):
        rs = [r for r in rows if r["level"] == k]
        c = f"C{i}"
        ax[0].plot([r["n"] for r in rs], [r["files_per_s"] for r in rs], "o-", color=c,
                   label=f"pcrfs L{k}")
        ax[0].plot([r["n"] for r in rs], [r.get("target_fps") and r["target_fps"] / 0.9
                                          for r in rs], "x--", color=c,
                   label=f"rclone x byte ratio L{k}")
        ax[2].plot([r["n"] for r in rs], [(r["rss_epoch"] or 0) / MIB for r in rs], "o-",
                   color=c, label=f"L{k} VmRSS")
        ax[2].plot([r["n"] for r in rs], [r["rss_beyond"] and r["rss_beyond"] / MIB
                                          for r in rs], "s--", color=c,
                   label=f"L{k} less the range cache")
        ax[4].plot([r["n"] for r in rs], [r["cache_files"] or 0 for r in rs], "o-", color=c,
                   label=f"L{k} files")
        ax[1].plot([r["n"] for r in rs], [r["amp"] for r in rs], "^:", color=c,
                   label=f"origin / served L{k}")
    ax[0].set(xscale="log", yscale="log", xlabel="files in store", ylabel="epoch files/s",
              title="cold epoch vs rclone (scaled)")
    ax[0].legend(fontsize=6)
    per = [next(r for r in rows if r["n"] == n) for n in ns]
    ax[1].plot(ns, [r["bytes_before_read"] / 1e6 for r in per], "o-", label="before 1st read MB")
    ax[1].plot(ns, [r["first_byte_s"] for r in per], "s-", label="mount to 1st byte s")
    ax[1].set(xscale="log", yscale="log", xlabel="files in store", title="first bytes")
    ax[1].legend(fontsize=7)
    ax[2].axhline(150, color="gray", ls=":")
    ax[2].set(xscale="log", xlabel="files in store", ylabel="MiB",
              title="daemon RSS after find + epoch (target: dashed < 150)")
    ax[2].legend(fontsize=7)
    facts = {int(k): v for k, v in data["facts"].items()}
    ax[3].plot(ns, [facts[n]["build"]["cpu"] / facts[n]["files"] * 1e3 for n in ns], "o-",
               label="CPU ms per file")
    ax3 = ax[3].twinx()
    ax3.plot(ns, [r["build_rss"] / MIB for r in per], "s--", color="C1", label="peak RSS MiB")
    ax[3].set(xscale="log", xlabel="files in store", ylabel="CPU ms per file", ylim=(0, None),
              title="pcr build")
    ax3.set(ylabel="peak RSS MiB", ylim=(0, None))
    ax[3].legend(fontsize=7, loc="lower left")
    ax[4].set(xscale="log", yscale="log", xlabel="files in store",
              title="disk cache files after the epoch")
    ax[4].legend(fontsize=7)
    ax3.legend(fontsize=7, loc="lower right")
    benchlib.save_figure(fig, path, dpi=90)


# ----------------------------------------------------------------------------- main


def axis_mode(args):
    """True for the cache axis (--cache-fractions) and --quick: caches smaller than the level."""
    return bool(args.cache_fractions or args.quick)


def resolve_axis_args(ap, args):
    """Defaults that depend on --cache-fractions / --quick; the script's own defaults otherwise
    (so a run without them is the run it always was)."""
    args.fixed_cache = None
    if args.cache_fractions and args.quick:
        ap.error("--quick has its own caches (remote_cache=8M,cache_size=1M): no --cache-fractions")
    if args.cache_fractions:
        try:
            args.cache_fractions = [float(x) for x in args.cache_fractions.split(",") if x]
        except ValueError:
            ap.error(f"--cache-fractions {args.cache_fractions}: comma-separated fractions")
        if not args.cache_fractions or any(not 0 < f < 1 for f in args.cache_fractions):
            ap.error("--cache-fractions: fractions between 0 and 1 (exclusive)")
    if not 0 < args.piece_cache_fraction <= 1:
        ap.error("--piece-cache-fraction: in (0, 1]")
    if args.quick:
        args.fixed_cache = QUICK_CACHE
        if args.sizes is None:
            args.sizes = str(QUICK_FILES)
        args.levels = args.levels or QUICK_LEVELS
        args.classes = args.classes or QUICK_CLASSES
    if axis_mode(args):
        args.levels = args.levels or AXIS_LEVELS
        args.short_side = args.short_side or AXIS_SHORT_SIDE
        # Beside the default run's results, not over them.
        stem = "scale_remote_issue40" if args.quick else "scale_remote_cache_axis"
        if args.out == ap.get_default("out"):
            args.out = os.path.join(WORK, stem + ".md")
        if args.plot == ap.get_default("plot"):
            args.plot = os.path.join(WORK, stem + ".png")
    args.sizes = args.sizes or "10k,100k"
    args.levels = args.levels or "1,5,10"
    args.short_side = args.short_side or DEFAULT_SHORT_SIDE
    args.classes = args.classes or DEFAULT_CLASSES


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default=None, help="e.g. 10k,100k,1280k (default 10k,100k; "
                    f"{QUICK_FILES} with --quick)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--levels", default=None,
                    help=f"default 1,5,10; {AXIS_LEVELS} with --cache-fractions, "
                         f"{QUICK_LEVELS} with --quick")
    ap.add_argument("--readers", type=int, default=16)
    ap.add_argument("--epoch-files", type=int, default=20000,
                    help="files per epoch (a seeded random subset) above --full-epoch-max; 0: all")
    ap.add_argument("--full-epoch-max", type=int, default=100000,
                    help="stores of up to this many files get a full epoch")
    ap.add_argument("--cap", type=int, default=1000, help="Mbit/s")
    ap.add_argument("--latency", type=int, default=20, help="ms before each answer")
    ap.add_argument("--disk-cache", default="2G")
    ap.add_argument("-o", dest="pcrfs_opt", action="append", default=[],
                    help="extra -o for every pcrfs mount")
    ap.add_argument("--rclone-checkers", type=int, default=32)
    ap.add_argument("--no-rclone", action="store_true")
    ap.add_argument("--rclone-from", help="an earlier run's JSON: its largest size's rclone epoch "
                    "stands for every size here (no rclone mount)")
    ap.add_argument("--perf", action="store_true",
                    help="perf record -g of the daemon during each epoch (WORK/perf-N-Lk.data)")
    ap.add_argument("--rclone-max", type=int, default=200000,
                    help="larger sizes reuse the rclone epoch of the largest size measured")
    ap.add_argument("--epoch-timeout", type=float, default=900)
    ap.add_argument("--rebuild", action="store_true", help="rebuild the stores")
    ap.add_argument("--generate-max", type=int, default=100000,
                    help="larger sizes are hard links to this many generated crops")
    ap.add_argument("--build-only", action="store_true", help="data and stores only")
    ap.add_argument("--pcr")
    ap.add_argument("--pcrfs")
    ap.add_argument("--pcrfs-b", help="a second pcrfs binary to compare (the cache axis and "
                    "--quick): every row is mounted with --pcrfs (A) and with this one (B) in "
                    "turn, the order alternating row by row; the report adds B / A per row")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--short-side", default=None, metavar="LO:HI",
                    help=f"the crops' short side in px (make_dataset.py; default "
                         f"{DEFAULT_SHORT_SIDE}, ImageNet-like {AXIS_SHORT_SIDE} with "
                         f"--cache-fractions and --quick)")
    ap.add_argument("--classes", type=int, default=None,
                    help=f"class folders of generated data (default {DEFAULT_CLASSES}; "
                         f"{QUICK_CLASSES} with --quick)")
    add_proxy_argument(ap)
    ap.add_argument("--cache-fractions", metavar="F,...",
                    help="the cache-smaller-than-level axis (issue 40, item 5): per level, one "
                         "cold epoch per fraction F with -o disk_cache=0,remote_cache=F x the "
                         "level's bytes (at least 1 MiB),cache_size=(see --piece-cache-fraction)"
                         f"; e.g. 0.1,0.01 (levels default to {AXIS_LEVELS}, crops to "
                         f"{AXIS_SHORT_SIDE})")
    ap.add_argument("--piece-cache-fraction", type=float, default=0.125,
                    help="with --cache-fractions: -o cache_size as a fraction of remote_cache "
                         "(at least 1 MiB; default %(default)s)")
    ap.add_argument("--quick", action="store_true",
                    help=f"issue 40's table: {QUICK_FILES:,} ImageNet-like files "
                         f"({QUICK_CLASSES} classes, crops {AXIS_SHORT_SIDE}), rclone and "
                         f"pcrfs L1/L5/L10 with -o remote_cache=8M,cache_size=1M,disk_cache=0")
    ap.add_argument("--hints", nargs="?", const="on", default="off", choices=sorted(HINT_MODES),
                    help="the cache axis with the reader's order as hints (issue 40, item 4): "
                         "on (--hints alone), both (each row with and without), off (default). "
                         "start_hints() sends each epoch's order through the mount's hint "
                         "socket (python/pcrfs/hint.py) before its readers start")
    ap.add_argument("--out", default=os.path.join(WORK, "scale_remote_results.md"))
    ap.add_argument("--plot", default=os.path.join(WORK, "scale_remote.png"))
    ap.add_argument("--from-json", help="report and plot from earlier runs' JSON (comma-separated)")
    ap.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    resolve_axis_args(ap, args)
    global SHORT_SIDE, CLASSES
    SHORT_SIDE = args.short_side
    CLASSES = args.classes
    if args.from_json:
        data = None
        for path in args.from_json.split(","):  # several runs: one report, sizes in order
            with open(path) as f:
                d = json.load(f)
            if data is None:
                data = d
                continue
            data["facts"].update(d["facts"])
            data["results"] += d["results"]
            data["meta"]["date"] += ", " + d["meta"]["date"]
            data["meta"]["commit"] += ", " + d["meta"]["commit"]
        data["results"].sort(key=lambda r: r["n"])
        if args.out == ap.get_default("out"):
            args.out = os.path.splitext(args.from_json.split(",")[0])[0] + ".md"
        finish(args, data)
        return 0
    try:
        args.sizes = [parse_count(s) for s in args.sizes.split(",") if s]
        args.levels = [int(k) for k in args.levels.split(",")]
    except ValueError:
        fail(f"--sizes {args.sizes} / --levels {args.levels}: comma-separated counts")
    if os.geteuid() != 0:
        fail("needs root (FUSE mounts, drop_caches, a network namespace, tc)")
    if getattr(args, INNER_FLAG.lstrip("-").replace("-", "_")):
        netns.shape_loopback(None, netns.MIN_BURST_KIB, args.mtu)
        return inner_main(args)
    pcr = find_tool("mount-tools/pcr", "pcr", args.pcr)
    for n in args.sizes:
        prepare_size(args, n, pcr)
    if args.build_only:
        return 0
    mine = set(benchlib.ancestors())
    if not (benchlib.bench_lock_holders() & mine):
        log(f"waiting for {benchlib.BENCH_LOCK}")
        lock = open(benchlib.BENCH_LOCK, "a")
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.set_inheritable(lock.fileno(), True)  # held until the namespaced child exits
    os.execvp("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__),
                          INNER_FLAG, *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
