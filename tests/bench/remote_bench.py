#!/usr/bin/python3
"""Remote-store benchmark (issue 13): pcrfs mounting a store over http:// and s3:// against the
original JPEG folder read through `rclone mount` (http remote) and `s3fs`, all from servers on
loopback inside a network namespace whose lo is capped (HTB), with latency added by the fault
proxy of tests/remote. Run as root with /usr/bin/python3, holding the benchmark lock:

  flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/remote_bench.py          # ~34 min
  flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/remote_bench.py --quick  # ~4 min

One nginx (autoindex on, for rclone's http remote) serves www/store (the pcr store) and
www/src (the JPEG folder it was built from); one fault proxy process in front of it adds the
latency, and counts every body byte it sends (origin bytes). The S3 server of tests/remote
(s3rver behind the SigV4-checking front) holds the same two folders, with its own proxy in front.

Setups (one fresh mount each, cold: fresh cache dirs, page cache dropped; then a 2nd epoch on
the same mount): pcrfs -o scans=K over http for each level, rclone mount of www/src with
--vfs-cache-mode off and full, s3fs of the bucket's src/, pcrfs s3:// at one level. An epoch is
8 forked reader processes (--readers) reading every file once (open, read to EOF, close) in a
seeded random order dealt round-robin; the listing (a walk of the tree) is timed apart, before.
Conditions: every cap x latency, the setups rotated within each. Also: index fetch and remount
times of stores of 10k, 100k and 1M entries (tiny hard-linked JPEGs), and a PyTorch ImageFolder
DataLoader (2 workers) over each mount at 100 Mbit/s + 20 ms. Details: tests/bench/README.md.

Two builds in one run: --pcrfs-b BIN adds setups "pcrfs-B Lk" (that binary, same options) beside
"pcrfs Lk" in every round, interleaved, and a table of their files/s ratios (B/A);
--conditions 100/20,1000/0 picks cap/latency pairs instead of every cap x latency, and
--no-rclone drops the rclone rows.
"""

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "remote"))
sys.path.insert(0, HERE)

from remote_servers import NGINX, Nginx, S3Server, die_with_parent, stop_process  # noqa: E402
import benchlib  # noqa: E402
import netns  # noqa: E402
from benchlib import (count_label, drop_caches, fail, find_tool, loadavg, log,  # noqa: E402
                      parse_count, timed, warn_unless_bench_lock, write_results)

benchlib.FAIL_CODE = 1

BENCH = "/var/tmp/pcrfs-bench"
WORK = os.path.join(BENCH, "remote-work")
INNER_FLAG = "--inside-namespace"
ACCESS_KEY = "AKIDPCRFSBENCH"
SECRET_KEY = "bench/remote+secret"
BUCKET = "pcrfs-bench"
REGION = "us-east-1"
MNT_PREFIX = "/tmp/remote-bench-mnt-"


def sh(*argv, **kw):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()[-2000:]}")
    return p.stdout


# ----------------------------------------------------------------------------- data


def walk_files(root):
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def build_store(pcr, src, store):
    """pcr build SRC STORE unless STORE exists and was built by this pcr from this SRC."""
    stamp = os.path.join(os.path.dirname(store), os.path.basename(store) + ".facts.json")
    want = {"src": src, "pcr_mtime": os.path.getmtime(pcr), "pcr_size": os.path.getsize(pcr)}
    try:
        with open(stamp) as f:
            facts = json.load(f)
        if {k: facts.get(k) for k in want} == want and os.path.isdir(store):
            return facts
    except (OSError, ValueError):
        pass
    shutil.rmtree(store, ignore_errors=True)
    log(f"pcr build {src} -> {store}")
    secs = timed([pcr, "build", src, store, "--quiet"], "pcr build")
    facts = dict(want, build_seconds=round(secs, 1))
    with open(stamp, "w") as f:
        json.dump(facts, f)
    return facts


def prepare_dataset(args, pcr):
    data = args.data or os.path.join(WORK, f"imagenet{count_label(args.images)}")
    if not args.data and not os.path.isdir(data):
        log(f"generating {args.images} images into {data}")
        timed(["nice", sys.executable, os.path.join(REPO, "tests", "data", "make_dataset.py"), data,
               "--images", str(args.images), "--classes", str(max(10, args.images // 100)),
               "--seed", str(args.seed), "--grain", "3"], "make_dataset.py")
    www = os.path.join(WORK, "www-" + os.path.basename(os.path.normpath(data)))
    os.makedirs(www, exist_ok=True)
    src_link = os.path.join(www, "src")
    if os.path.islink(src_link) and os.readlink(src_link) != os.path.abspath(data):
        os.unlink(src_link)
    if not os.path.lexists(src_link):
        os.symlink(os.path.abspath(data), src_link)
    store = os.path.join(www, "store")
    build_store(pcr, os.path.abspath(data), store)
    with open(os.path.join(store, "manifest.json")) as f:
        manifest = json.load(f)
    rel = walk_files(data)
    src_bytes = sum(os.path.getsize(os.path.join(data, r)) for r in rel)
    return {"data": os.path.abspath(data), "www": www, "store": store, "files": rel,
            "src_bytes": src_bytes, "level_bytes": manifest["level_bytes"]}


def prepare_index_stores(args, pcr, www):
    """Stores of N entries (hard links to 1,000 tiny JPEGs, 1,000 per folder) for the index
    fetch and remount times; the index size is what matters."""
    tiny = os.path.join(WORK, "tiny-src")
    if not os.path.isdir(tiny):
        log("generating 1,000 tiny JPEGs")
        timed(["nice", sys.executable, os.path.join(REPO, "tests", "data", "make_dataset.py"), tiny,
               "--images", "1000", "--classes", "10", "--short-side", "32:48", "--splits",
               "train", "--split-fractions", "1", "--seed", "5"], "make_dataset.py (tiny)")
    pool = [os.path.join(tiny, r) for r in walk_files(tiny)]
    out = {}
    for n in args.index_sizes:
        name = f"idx{count_label(n)}"
        tree = os.path.join(WORK, name + "-src")
        if not os.path.exists(tree + ".done"):
            shutil.rmtree(tree, ignore_errors=True)
            log(f"hard-link tree of {n} files: {tree}")
            for i in range(n):
                d = os.path.join(tree, f"c{i // 1000:04d}")
                if i % 1000 == 0:
                    os.makedirs(d)
                os.link(pool[i % len(pool)], os.path.join(d, f"i{i:07d}.JPEG"))
            open(tree + ".done", "w").close()
        store = os.path.join(WORK, name + ".pcr")
        facts = build_store(pcr, tree, store)
        link = os.path.join(www, name)
        if not os.path.lexists(link):
            os.symlink(store, link)
        out[n] = {"name": name, "index_bytes": os.path.getsize(benchlib.index_path(store)),
                  "build_seconds": facts.get("build_seconds")}
    return out


# ----------------------------------------------------------------------------- network


def set_cap(mbit, ports):
    """Caps what the servers the clients talk to send: packets on lo from a source port in
    ports go through one HTB class of mbit; everything else (requests, and a proxy's or the S3
    front's own upstream traffic, which would otherwise cross the cap twice) through an
    uncapped class. None: no qdisc at all."""
    if "htb" in sh("tc", "qdisc", "show", "dev", "lo"):
        sh("tc", "qdisc", "del", "dev", "lo", "root")
    if mbit is None:
        return
    sh("tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "20")
    sh("tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb",
       "rate", f"{mbit:g}mbit", "ceil", f"{mbit:g}mbit", "burst", "256k", "cburst", "256k",
       "quantum", "65536")
    sh("tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:20", "htb",
       "rate", "40gbit", "ceil", "40gbit", "burst", "8m", "cburst", "8m", "quantum", "65536")
    for port in ports:
        sh("tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1",
           "u32", "match", "ip", "sport", str(port), "0xffff", "flowid", "1:10")


def url_port(url):
    return int(url.rsplit(":", 1)[1].split("/")[0])


class AutoindexNginx(Nginx):
    """tests/remote's nginx with folder listings on (rclone's http remote lists folders)."""

    def write_config(self):
        path = super().write_config()
        with open(path) as f:
            conf = f.read().replace("autoindex off;", "autoindex on; autoindex_exact_size on;")
        conf = conf.replace(" buffer=64k flush=1s;", ";")  # exact counts at once
        with open(path, "w") as f:
            f.write(conf)
        return path


# The latency proxies (--proxy): "node" is tests/remote/latency_proxy.js (one event loop,
# 70-95 µs of CPU per small ranged GET: 6,300-9,500 GETs/s with 20 ms added, more than a
# level-10 epoch at rclone's files/s needs, ~6,000), "python" tests/remote/fault_proxy.py (a
# thread per connection under the GIL, 300-450 µs per GET: it tops out at 2,500-3,500 GETs/s on
# this machine, its 20 ms then 40-70). tests/bench/README.md has the measurements
# (proxy_load_bench.py). Both answer /__reset, a /__fault latency rule and
# /__stats with the same counters, so one run puts every setup behind the same kind.
PROXY_KINDS = ("node", "python")
DEFAULT_PROXY = "node"
PROXY_NAMES = {"node": "`tests/remote/latency_proxy.js`",
               "python": "`tests/remote/fault_proxy.py`"}


def add_proxy_argument(ap):
    ap.add_argument("--proxy", choices=PROXY_KINDS, default=DEFAULT_PROXY,
                    help="the latency proxy in front of every server (default %(default)s: "
                         "tests/remote/latency_proxy.js; python: tests/remote/fault_proxy.py, "
                         "which tops out at 2,500-3,500 GETs/s)")


class ProxyProcess:
    """A latency proxy in its own process (not this one's GIL), in front of upstream: kind
    "python" is tests/remote/fault_proxy.py, "node" tests/remote/latency_proxy.js."""

    def __init__(self, upstream, tmp, name, kind="python"):
        if kind not in PROXY_KINDS:
            raise ValueError(f"proxy kind {kind!r}: one of {PROXY_KINDS}")
        self.upstream, self.tmp, self.name, self.kind = upstream, tmp, name, kind
        self.proc, self.url = None, None

    def argv(self, ready):
        if self.kind == "node":
            node = shutil.which("node")
            if not node:
                raise RuntimeError("--proxy node: node is not installed (--proxy python)")
            return [node, os.path.join(REPO, "tests", "remote", "latency_proxy.js"),
                    "--upstream", self.upstream, "--ready-file", ready]
        return [sys.executable, os.path.join(REPO, "tests", "remote", "remote_servers.py"),
                "proxy", "--upstream", self.upstream, "--ready-file", ready]

    def __enter__(self):
        ready = os.path.join(self.tmp, self.name + ".ready")
        self.log = open(os.path.join(self.tmp, self.name + ".log"), "wb")
        self.proc = subprocess.Popen(self.argv(ready), stdout=subprocess.DEVNULL,
                                     stderr=self.log, preexec_fn=die_with_parent)
        deadline = time.monotonic() + 30
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{self.kind} proxy did not start: {self.name}.log")
            time.sleep(0.05)
        with open(ready) as f:
            self.url = json.load(f)["url"]
        return self

    def __exit__(self, *exc):
        stop_process(self.proc)
        self.log.close()

    def control(self, method, path, obj=None):
        data = json.dumps(obj).encode() if obj is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())

    def reset(self, latency_ms=0):
        self.control("POST", "/__reset", {})
        if latency_ms:
            self.control("POST", "/__fault", {"fault": "latency", "ms": latency_ms})

    def stats(self):
        return self.control("GET", "/__stats")

    def cpu_seconds(self):
        """The proxy process's CPU (user + system) so far."""
        return benchlib.proc_cpu_seconds(self.proc.pid)


class NginxDirect:
    """nginx itself as the origin (no proxy, no added latency): origin bytes and requests from
    its access log ($body_bytes_sent of the combined format)."""

    def __init__(self, nginx):
        self.nginx, self.url, self.offset = nginx, nginx.url, 0

    def reset(self, latency_ms=0):
        assert latency_ms == 0
        time.sleep(0.2)
        self.offset = os.path.getsize(self.nginx.access_log)

    def stats(self):
        time.sleep(0.2)
        with open(self.nginx.access_log, "rb") as f:
            f.seek(self.offset)
            text = f.read().decode(errors="replace")
        out = {"requests": 0, "bytes_to_client": 0, "statuses": {}}
        for line in text.splitlines():
            m = LOG_RE.search(line)
            if not m:
                continue
            out["requests"] += 1
            out["bytes_to_client"] += int(m.group(2))
            out["statuses"][m.group(1)] = out["statuses"].get(m.group(1), 0) + 1
        return out


class S3Direct:
    """The S3 server's front as the origin: its own counters (bytes_to_client, requests)."""

    def __init__(self, s3):
        self.s3, self.url, self.base = s3, s3.endpoint, None

    def reset(self, latency_ms=0):
        assert latency_ms == 0
        self.base = self.s3.front_stats()

    def stats(self):
        now = self.s3.front_stats()
        return {"requests": now["requests"] - self.base["requests"],
                "bytes_to_client": now["bytes_to_client"] - self.base["bytes_to_client"],
                "statuses": {}}


LOG_RE = __import__("re").compile(r'" (\d{3}) (\d+) "')


def curl_rate(url, seconds_hint=None):
    out = sh("curl", "-s", "-o", os.devnull, "-w", "%{size_download} %{time_total}", url)
    got, secs = out.split()
    return int(got) * 8 / float(secs) / 1e6


# ----------------------------------------------------------------------------- mounts


class MountProc:
    """A FUSE daemon in the foreground (argv) for a with-block; always unmounted."""

    def __init__(self, argv, mnt, log_path, env=None, timeout=120):
        self.argv, self.mnt, self.log_path, self.env, self.timeout = argv, mnt, log_path, env, \
            timeout
        self.proc = None
        self.mount_seconds = None

    def __enter__(self):
        if os.path.ismount(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], stderr=subprocess.DEVNULL)
        os.makedirs(self.mnt, exist_ok=True)
        self.logf = open(self.log_path, "wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(self.argv, stdout=self.logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=self.env)
        while not os.path.ismount(self.mnt):
            if self.proc.poll() is not None:
                self.logf.close()
                raise RuntimeError(f"{os.path.basename(self.argv[0])} exited "
                                   f"{self.proc.returncode}: {tail(self.log_path)}")
            if time.monotonic() - t0 > self.timeout:
                self.__exit__()
                raise RuntimeError(f"{self.argv[0]} did not mount in {self.timeout} s")
            time.sleep(0.01)
        self.mount_seconds = time.monotonic() - t0
        return self

    def __exit__(self, *exc):
        if self.proc is None:
            return False
        if os.path.ismount(self.mnt):
            subprocess.run(["fusermount3", "-u", self.mnt], stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if os.path.ismount(self.mnt):
            subprocess.run(["fusermount3", "-uz", self.mnt], stderr=subprocess.DEVNULL)
        self.logf.close()
        return False


def tail(path, n=1500):
    try:
        with open(path, "rb") as f:
            return f.read()[-n:].decode(errors="replace").strip()
    except OSError:
        return "(no log)"


class Env:
    """Everything the setups need: tools, servers, proxies, scratch folders."""

    def __init__(self, args, tmp, pcr, pcrfs, ds):
        self.args, self.tmp, self.pcr, self.pcrfs, self.ds = args, tmp, pcr, pcrfs, ds
        self.disk_cache = None
        self.serial = 0

    def scratch(self, name):
        self.serial += 1
        d = os.path.join(self.tmp, f"{name}-{self.serial}")
        os.makedirs(d)
        return d

    def cap_ports(self, latency_ms):
        """The ports whose answers cross the cap: the proxies' with added latency, else the
        servers'."""
        if latency_ms or self.args.always_proxy:
            return [url_port(o.url) for o in (self.http_proxy, getattr(self, "s3_proxy", None))
                    if o]
        return [url_port(o.url) for o in (self.http_direct, getattr(self, "s3_direct", None))
                if o]

    def pcrfs_env(self):
        env = dict(os.environ)
        env.update(AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_REGION=REGION, HOME=self.tmp)
        return env


def setup_names(args):
    names = [f"pcrfs L{k}" for k in args.levels]
    if args.pcrfs_b:
        names += [f"pcrfs-B L{k}" for k in args.levels]
    if args.rclone:
        names += ["rclone off", "rclone full"]
    if not args.no_s3:
        names += ["s3fs", f"pcrfs s3 L{args.s3_level}"]
    return names


def open_setup(env, name, mnt, origin):
    """A MountProc for a setup (fresh cache dirs); the root to read is the mount point."""
    a = env.args
    log_path = os.path.join(env.tmp, f"{name.replace(' ', '-')}-{env.serial}.log")
    if name.startswith("pcrfs"):
        level = int(name.split("L")[-1])
        opts = [f"scans={level}", "cache_dir=" + env.scratch("pcrfs-cache")] + a.pcrfs_opt
        if env.disk_cache:
            opts.append(f"disk_cache={a.disk_cache}")
        if " s3 " in name:
            url = f"s3://{BUCKET}/store"
            opts += ["endpoint=" + origin.url, "addressing=path", "region=" + REGION]
        else:
            url = origin.url + "/store"
        binary = a.pcrfs_b if name.startswith("pcrfs-B") else env.pcrfs
        argv = [binary, url, mnt, "-f", "-o", ",".join(opts)]
        return MountProc(argv, mnt, log_path, env=env.pcrfs_env())
    if name.startswith("rclone"):
        mode = name.split()[1]
        conf = os.path.join(env.tmp, "rclone.conf")
        open(conf, "a").close()
        argv = ["rclone", "mount", ":http:", mnt, "--http-url", origin.url + "/src/",
                "--read-only", "--vfs-cache-mode", mode, "--cache-dir",
                env.scratch("rclone-cache"), "--config", conf, "--log-level", "NOTICE"]
        return MountProc(argv, mnt, log_path)
    if name == "s3fs":
        pw = os.path.join(env.tmp, "s3fs.passwd")
        if not os.path.exists(pw):
            fd = os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(f"{ACCESS_KEY}:{SECRET_KEY}\n")
        argv = ["s3fs", f"{BUCKET}:/src", mnt, "-f", "-o",
                f"ro,url={origin.url},use_path_request_style,endpoint={REGION},sigv4,"
                f"passwd_file={pw},dbglevel=warn"]
        return MountProc(argv, mnt, log_path)
    raise ValueError(name)


# ----------------------------------------------------------------------------- readers


def reader_main(root, paths, wfd, start_r, timeline=False):
    os.read(start_r, 1)
    buf = bytearray(1 << 20)
    n = nbytes = errors = 0
    done = []  # --timeline: when each file was done
    t0 = time.monotonic()
    for rel in paths:
        try:
            fd = os.open(os.path.join(root, rel), os.O_RDONLY)
            try:
                while True:
                    got = os.readv(fd, [buf])
                    if got <= 0:
                        break
                    nbytes += got
            finally:
                os.close(fd)
            n += 1
            if timeline:
                done.append(time.monotonic())
        except OSError:
            errors += 1
    t1 = time.monotonic()
    os.write(wfd, json.dumps({"files": n, "bytes": nbytes, "errors": errors, "t0": t0,
                              "t1": t1, "done": done}).encode())
    os._exit(0)


def epoch_order(rel, seed):
    """The order run_epoch reads rel in (reader i takes order[i::readers])."""
    order = list(rel)
    random.Random(seed).shuffle(order)
    return order


def run_epoch(root, rel, readers, seed, timeout, timeline=False):
    """One epoch; with timeline, also when each file was done (seconds from the start)."""
    order = epoch_order(rel, seed)
    start_r, start_w = os.pipe()
    kids = []
    for i in range(readers):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.close(start_w)
            try:
                reader_main(root, order[i::readers], w, start_r, timeline)
            finally:
                os._exit(1)
        os.close(w)
        kids.append((pid, r))
    os.close(start_r)
    t0 = time.monotonic()
    os.write(start_w, b"x" * readers)
    os.close(start_w)
    results, timed_out = [], False
    for pid, r in kids:
        chunks = []
        while True:
            left = timeout - (time.monotonic() - t0)
            if left <= 0:
                timed_out = True
                break
            import select
            ready, _, _ = select.select([r], [], [], left)
            if not ready:
                continue
            b = os.read(r, 65536)
            if not b:
                break
            chunks.append(b)
        if timed_out:
            for p, _ in kids:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        os.waitpid(pid, 0)
        os.close(r)
        if chunks:
            results.append(json.loads(b"".join(chunks)))
    t1 = time.monotonic()
    if timed_out or len(results) != readers:
        return {"timed_out": True, "seconds": t1 - t0, "files": sum(x["files"] for x in results),
                "bytes": sum(x["bytes"] for x in results), "errors": len(rel)}
    start = min(x["t0"] for x in results)
    end = max(x["t1"] for x in results)
    files = sum(x["files"] for x in results)
    out = {"seconds": end - start, "files": files, "bytes": sum(x["bytes"] for x in results),
           "errors": sum(x["errors"] for x in results), "files_per_s": files / (end - start)}
    if timeline:
        out["timeline"] = {"done": sorted(round(t - t0, 4) for x in results for t in x["done"]),
                           "start": round(start - t0, 4)}
    return out


def list_tree(root):
    t0 = time.monotonic()
    n = 0
    stack = [root]
    while stack:
        d = stack.pop()
        with os.scandir(d) as it:
            for e in it:
                if e.is_dir():
                    stack.append(e.path)
                else:
                    n += 1
    return time.monotonic() - t0, n


def is_s3(name):
    return name == "s3fs" or " s3 " in name


def origin_for(env, name, latency_ms):
    """Where a setup's requests go: the proxy (added latency), or with none the server itself
    (the Python proxy costs small requests throughput; see proxy_check)."""
    if latency_ms or env.args.always_proxy:
        return env.s3_proxy if is_s3(name) else env.http_proxy
    return env.s3_direct if is_s3(name) else env.http_direct


def measure_setup(env, name, cond, rel):
    """Cold: fresh mount and cache dirs, page cache dropped; listing; epoch 1; epoch 2."""
    a = env.args
    mnt = MNT_PREFIX + name.replace(" ", "-")
    proxy = origin_for(env, name, cond["latency_ms"])
    if not a.no_drop:
        drop_caches()
    proxy.reset(cond["latency_ms"])
    rec = {"setup": name, **cond, "via": "proxy" if isinstance(proxy, ProxyProcess) else "direct"}
    try:
        with open_setup(env, name, mnt, proxy) as m:
            rec["mount_s"] = m.mount_seconds
            rec["list_s"], rec["listed"] = list_tree(mnt)
            st = proxy.stats()
            rec["mount_list_origin_bytes"] = st["bytes_to_client"]
            rec["mount_list_requests"] = st["requests"]
            for epoch in (1, 2):
                if epoch == 2 and not a.no_drop:
                    drop_caches()  # the mount's page cache: epoch 2 is served by the daemon
                proxy.reset(cond["latency_ms"])
                e = run_epoch(mnt, rel, a.readers, a.seed + epoch, a.epoch_timeout,
                              a.timeline)
                st = proxy.stats()
                e["origin_bytes"] = st["bytes_to_client"]
                e["origin_requests"] = st["requests"]
                e["statuses"] = st["statuses"]
                rec[f"e{epoch}"] = e
                if name.startswith("pcrfs"):
                    try:
                        e["xattr"] = json.loads(os.getxattr(mnt, "user.pcrfs.remote"))
                    except OSError:
                        pass
    except RuntimeError as e:
        rec["error"] = str(e)
    msg = f"{cond['label']:>14} {name:<14}"
    for epoch in (1, 2):
        e = rec.get(f"e{epoch}")
        if e and not e.get("timed_out"):
            msg += (f"  e{epoch} {e['files_per_s']:7.1f} files/s {e['bytes'] / 1e6:6.1f} MB "
                    f"origin {e['origin_bytes'] / 1e6:6.1f} MB err {e['errors']}")
        elif e:
            msg += f"  e{epoch} TIMED OUT"
    if "error" in rec:
        msg += "  ERROR " + rec["error"][:300]
    log(msg)
    return rec


def measure_local(env, rel, levels):
    """A local pcrfs mount of the same store: the 2nd epoch is the disk-cache reference."""
    out = {}
    for k in levels:
        mnt = MNT_PREFIX + f"local-L{k}"
        if not env.args.no_drop:
            drop_caches()
        log_path = os.path.join(env.tmp, f"local-L{k}.log")
        argv = [env.pcrfs, env.ds["store"], mnt, "-f", "-o", f"scans={k}"]
        with MountProc(argv, mnt, log_path) as m:
            list_tree(mnt)
            e1 = run_epoch(mnt, rel, env.args.readers, env.args.seed + 1, env.args.epoch_timeout)
            if not env.args.no_drop:
                drop_caches()
            e2 = run_epoch(mnt, rel, env.args.readers, env.args.seed + 2, env.args.epoch_timeout)
            out[k] = {"mount_s": m.mount_seconds, "e1": e1, "e2": e2}
        log(f"local L{k}: e1 {e1.get('files_per_s', 0):.0f} e2 {e2.get('files_per_s', 0):.0f} "
            f"files/s")
    return out


def proxy_check(env, rel):
    """The proxy without a cap: curl of a large file and a cold pcrfs/rclone epoch, direct
    to nginx and through the proxy."""
    set_cap(None, ())
    big = os.path.join(env.ds["www"], "blob-1g")
    if not os.path.exists(big):
        with open(big, "wb") as f:
            f.truncate(1 << 30)
    out = {"curl_direct_mbit": curl_rate(env.nginx.url + "/blob-1g"),
           "curl_proxy_mbit": curl_rate(env.http_proxy.url + "/blob-1g")}
    env.http_proxy.reset()
    k = max(env.args.levels)
    for via, base in (("direct", env.nginx.url), ("proxy", env.http_proxy.url)):
        mnt = MNT_PREFIX + "check"
        if not env.args.no_drop:
            drop_caches()
        argv = [env.pcrfs, base + "/store", mnt, "-f", "-o",
                f"scans={k},cache_dir={env.scratch('check-cache')}"]
        with MountProc(argv, mnt, os.path.join(env.tmp, f"check-{via}.log"),
                       env=env.pcrfs_env()):
            list_tree(mnt)
            e = run_epoch(mnt, rel, env.args.readers, env.args.seed + 1, env.args.epoch_timeout)
        out[f"pcrfs_L{k}_{via}_files_per_s"] = e.get("files_per_s")
        out[f"pcrfs_L{k}_{via}_seconds"] = e.get("seconds")
    st = env.http_proxy.stats()
    out["proxy_requests"] = st["requests"]
    log(f"proxy check (no cap): {json.dumps(out)}")
    return out


def cap_check(env, mbit):
    """curl from nginx and through the proxy at the cap: ~2 s worth of a sparse file."""
    set_cap(mbit, env.cap_ports(0))
    direct = curl_rate(f"{env.nginx.url}/blob-cap-{mbit}")
    set_cap(mbit, env.cap_ports(20))
    return {"direct": direct, "proxy": curl_rate(f"{env.http_proxy.url}/blob-cap-{mbit}")}


# ----------------------------------------------------------------------------- index times


def measure_index(env, idx, cap, latency_ms):
    set_cap(cap, env.cap_ports(20))
    out = {}
    for n, info in sorted(idx.items()):
        cache = env.scratch("idx-cache")
        mnt = MNT_PREFIX + "idx"
        url = env.http_proxy.url + "/" + info["name"]
        argv = [env.pcrfs, url, mnt, "-f", "-o", f"scans=1,cache_dir={cache}"]
        rec = {}
        for what in ("fetch", "remount"):
            env.http_proxy.reset(latency_ms)
            with MountProc(argv, mnt, os.path.join(env.tmp, f"idx-{n}.log"),
                           env=env.pcrfs_env(), timeout=600) as m:
                rec[f"{what}_s"] = m.mount_seconds
                st = env.http_proxy.stats()
                rec[f"{what}_statuses"] = st["statuses"]
                rec[f"{what}_bytes"] = st["bytes_to_client"]
                if what == "remount":
                    t0 = time.monotonic()
                    with os.scandir(os.path.join(mnt, "c0000")) as it:
                        rec["first_listing_entries"] = sum(1 for _ in it)
                    rec["first_listing_s"] = time.monotonic() - t0
        out[n] = rec
        log(f"index {n} entries at {cap} Mbit/s + {latency_ms} ms: fetch {rec['fetch_s']:.2f} s "
            f"{rec['fetch_statuses']}, remount {rec['remount_s']:.2f} s {rec['remount_statuses']}")
    return out


# ----------------------------------------------------------------------------- DataLoader


def loader_child(root, images, seed, workers):
    """One DataLoader epoch over ImageFolder(root) (a subprocess, so torch stays out of the
    benchmark process); prints JSON."""
    import torch
    from torch.utils.data import DataLoader, Subset
    from torchvision import datasets, transforms
    torch.manual_seed(seed)
    t0 = time.monotonic()
    ds = datasets.ImageFolder(root, transform=transforms.Compose(
        [transforms.RandomResizedCrop(224), transforms.ToTensor()]))
    t_list = time.monotonic() - t0
    idx = list(range(len(ds)))
    random.Random(seed).shuffle(idx)
    if images:
        idx = idx[:images]
    dl = DataLoader(Subset(ds, idx), batch_size=64, shuffle=False, num_workers=workers)
    t1 = time.monotonic()
    n = 0
    for x, _ in dl:
        n += x.shape[0]
    t2 = time.monotonic()
    print(json.dumps({"images": n, "list_s": t_list, "seconds": t2 - t1,
                      "images_per_s": n / (t2 - t1)}))


def measure_loader(env, names, cond, rounds):
    a = env.args
    out = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            mnt = MNT_PREFIX + name.replace(" ", "-")
            proxy = origin_for(env, name, cond["latency_ms"])
            if not a.no_drop:
                drop_caches()
            proxy.reset(cond["latency_ms"])
            try:
                with open_setup(env, name, mnt, proxy):
                    root = os.path.join(mnt, "train") if os.path.isdir(
                        os.path.join(mnt, "train")) else mnt
                    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--loader-child",
                                        root, "--loader-images", str(a.loader_images), "--seed",
                                        str(a.seed + r), "--loader-workers", str(a.loader_workers)],
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                       timeout=a.epoch_timeout * 3)
                    if p.returncode != 0:
                        raise RuntimeError(p.stderr.strip()[-500:])
                    rec = json.loads(p.stdout.strip().splitlines()[-1])
                    st = proxy.stats()
                    rec["origin_bytes"] = st["bytes_to_client"]
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                rec = {"error": str(e)[:500]}
            out[name].append(rec)
            log(f"loader {name}: {json.dumps(rec)[:200]}")
    return out


# ----------------------------------------------------------------------------- report


def verdict(ok):
    return benchlib.verdict(ok, fail_mark="FAIL")


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    m = len(xs) // 2
    return xs[m] if len(xs) % 2 else (xs[m - 1] + xs[m]) / 2


def level_of(name):
    return int(name.split("L")[-1]) if name.startswith("pcrfs") else None


def served_bytes(ds, name):
    k = level_of(name)
    return ds["level_bytes"][k - 1] if k else ds["src_bytes"]


def f1(x, fmt="{:.1f}"):
    return "-" if x is None else fmt.format(x)


def summarize(results):
    """{(label, setup): {"e1": median files/s, ...}} over rounds."""
    groups = {}
    for r in results:
        groups.setdefault((r["label"], r["setup"]), []).append(r)
    out = {}
    for key, recs in groups.items():
        s = {"n": len(recs), "errors": [r["error"] for r in recs if "error" in r]}
        for ep in ("e1", "e2"):
            es = [r[ep] for r in recs if ep in r and not r[ep].get("timed_out")]
            s[ep] = median([e["files_per_s"] for e in es])
            s[ep + "_all"] = [r.get(ep, {}).get("files_per_s") for r in
                              sorted(recs, key=lambda r: r.get("round", 0))]
            s[ep + "_origin"] = max([e["origin_bytes"] for e in es], default=None)
            s[ep + "_bytes"] = max([e["bytes"] for e in es], default=None)
            s[ep + "_requests"] = median([e["origin_requests"] for e in es])
            s[ep + "_errors"] = max([e["errors"] for e in es], default=None)
            s[ep + "_timeouts"] = sum(1 for r in recs if r.get(ep, {}).get("timed_out"))
        s["list_s"] = median([r.get("list_s") for r in recs])
        s["mount_s"] = median([r.get("mount_s") for r in recs])
        s["list_origin"] = median([r.get("mount_list_origin_bytes") for r in recs])
        out[key] = s
    return out


def two_builds(conds, levels, summ):
    """(condition label, level, summary of pcrfs Lk, of pcrfs-B Lk) where both were measured."""
    keys = [(c["label"], k) for c in conds for k in levels]
    return [(lab, k, summ[(lab, f"pcrfs L{k}")], summ[(lab, f"pcrfs-B L{k}")]) for lab, k in keys
            if (lab, f"pcrfs L{k}") in summ and (lab, f"pcrfs-B L{k}") in summ]


def report(args, meta, ds, conds, summ, local, idx_res, loader_res, proxy_chk, caps_meas):
    L = ["# pcrfs remote-store benchmark", ""]
    L.append(f"- Date: {meta['date']}; commit {meta['commit']}; host {meta['host']}, "
             f"{os.cpu_count()} cores; load average {meta['load0']} at the start, "
             f"{meta['load1']} at the end; {meta['elapsed'] / 60:.1f} min.")
    L.append(f"- Data: `{ds['data']}`, {len(ds['files'])} JPEGs, "
             f"{ds['src_bytes'] / 1e6:.1f} MB ({ds['src_bytes'] / len(ds['files']) / 1024:.1f} "
             f"KiB mean); store levels " + ", ".join(
                 f"L{k} {ds['level_bytes'][k - 1] / 1e6:.1f} MB "
                 f"({100 * ds['level_bytes'][k - 1] / ds['src_bytes']:.0f}%)"
                 for k in args.levels) + ".")
    L.append(f"- Network: one network namespace, its lo's MTU {args.mtu} bytes (lo's own 64 KiB "
             "made nginx's answers just over one segment stall for ~40 ms: "
             "docs/notebook/2026-11-23-to-27-remote-stores.md); "
             "on its lo, an HTB class caps the answers of the "
             "server a client talks to (packets from its port: nginx or the S3 front, or the "
             "proxy in front of them; requests and a proxy's own upstream traffic are not "
             "capped, so no byte crosses the cap twice); one nginx (autoindex "
             "on) serving the store and the folder, one S3 server (s3rver behind the SigV4 "
             "front); a proxy process in front of each (" + PROXY_NAMES[args.proxy] + ") adds "
             "the latency per request and "
             "counts origin bytes (response bodies it sends). Measured through the proxy with "
             "curl (from nginx / through the proxy): " + ", ".join(
                 f"cap {c} -> {v['direct']:.0f} / {v['proxy']:.0f} Mbit/s"
                 for c, v in caps_meas.items()) + ". Rows with 0 ms talk to the servers "
             "directly (origin bytes from nginx's access log and the S3 front's counters), rows "
             "with added latency through the proxy." + (" (--always-proxy: every row through "
             "the proxy.)" if args.always_proxy else ""))
    L.append(f"- Readers: {args.readers} forked processes, every file once (open, read to EOF, "
             f"close), seeded random order; cold = fresh mount and cache dirs"
             + ("" if args.no_drop else ", `drop_caches`") + "; the listing (a walk) is timed "
             "apart; epoch 2 on the same mount, another order"
             + ("" if args.no_drop else ", after another `drop_caches` (so the daemon serves "
                "it, not the kernel's page cache)") + f". Medians of {args.repeat} "
             f"round(s), setups rotated. pcrfs options: "
             f"`{','.join(args.pcrfs_opt) or '(defaults)'}`"
             + (f", `disk_cache={args.disk_cache}`" if meta["disk_cache"] else
                " (this pcrfs has no `-o disk_cache`)") + ".")
    L.append("")
    L.append("## Files/s, bytes and amplification")
    L.append("")
    L.append("| cap, latency | setup | listing s | epoch 1 files/s | epoch 2 files/s | "
             "MB served | origin MB e1 | amplification e1 | origin MB e2 | requests/file e1 |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    nfiles = len(ds["files"])
    for c in conds:
        for name in setup_names(args):
            s = summ.get((c["label"], name))
            if not s:
                continue
            served = s["e1_bytes"]
            amp = s["e1_origin"] / served if served and s["e1_origin"] is not None else None
            err = ""
            if s["errors"]:
                err = " (error: " + s["errors"][0][:80].replace("|", "/") + ")"
            if s["e1_errors"]:
                err += f" ({s['e1_errors']} read errors)"
            if s["e1_timeouts"]:
                err += " (timed out)"
            L.append(f"| {c['label']} | {name}{err} | {f1(s['list_s'], '{:.2f}')} | {f1(s['e1'])} "
                     f"| {f1(s['e2'])} | {f1(served and served / 1e6)} | "
                     f"{f1(s['e1_origin'] and s['e1_origin'] / 1e6)} | {f1(amp, '{:.3f}')} | "
                     f"{f1(s['e2_origin'] is not None and s['e2_origin'] / 1e6 or 0)} | "
                     f"{f1(s['e1_requests'] and s['e1_requests'] / nfiles, '{:.2f}')} |")
    L.append("")
    if args.pcrfs_b:
        L.append(f"## Two builds: B = `{args.pcrfs_b}` over A = `{meta['pcrfs']}`")
        L.append("")
        L.append("Median files/s of pcrfs-B Lk / median of pcrfs Lk, same conditions, setups "
                 "interleaved in every round (each round's ratio in brackets).")
        L.append("")
        L.append("| cap, latency | level | A e1 | B e1 | B/A e1 | A e2 | B e2 | B/A e2 |")
        L.append("|---|---|---:|---:|---:|---:|---:|---:|")
        for label, k, sa, sb in two_builds(conds, args.levels, summ):
            cells = []
            for ep in ("e1", "e2"):
                per = ", ".join(f"{b / a:.2f}" for a, b in zip(sa[ep + "_all"], sb[ep + "_all"])
                                if a and b)
                ratio = sb[ep] / sa[ep] if sa[ep] and sb[ep] else None
                cells.append(f"{f1(sa[ep])} | {f1(sb[ep])} | {f1(ratio, '{:.3f}')} ({per})")
            L.append(f"| {label} | L{k} | " + " | ".join(cells) + " |")
        L.append("")
    L.append("## Targets")
    L.append("")
    L.append("First epoch: pcrfs Lk files/s >= 0.8 x peer files/s x (source bytes / level bytes), "
             "the peer being the better rclone row; origin bytes <= 1.1 x bytes served.")
    L.append("")
    L.append("| cap, latency | level | pcrfs files/s | peer files/s | bytes ratio | "
             "target files/s | verdict | amplification | verdict |")
    L.append("|---|---|---:|---:|---:|---:|---|---:|---|")
    verdicts = []
    for c in conds:
        peers = [summ.get((c["label"], p), {}).get("e1") for p in ("rclone off", "rclone full")]
        peers = [p for p in peers if p]
        peer = max(peers) if peers else None
        for k in args.levels:
            s = summ.get((c["label"], f"pcrfs L{k}"))
            if not s:
                continue
            ratio = ds["src_bytes"] / ds["level_bytes"][k - 1]
            target = 0.8 * peer * ratio if peer else None
            ok1 = None if target is None or s["e1"] is None else s["e1"] >= target
            amp = s["e1_origin"] / s["e1_bytes"] if s["e1_bytes"] else None
            ok2 = None if amp is None else amp <= 1.1
            verdicts += [ok1, ok2]
            L.append(f"| {c['label']} | L{k} | {f1(s['e1'])} | {f1(peer)} | {ratio:.2f} | "
                     f"{f1(target)} | {verdict(ok1)} | {f1(amp, '{:.3f}')} | {verdict(ok2)} |")
    L.append("")
    L.append("Second epoch with the disk cache: no origin bytes and files/s >= 0.9 x a local "
             "store's second epoch (same level, same readers).")
    L.append("")
    L.append("| cap, latency | level | files/s e2 | local files/s e2 | origin MB e2 | verdict |")
    L.append("|---|---|---:|---:|---:|---|")
    for c in conds:
        for k in args.levels:
            s = summ.get((c["label"], f"pcrfs L{k}"))
            if not s:
                continue
            loc = local.get(k, {}).get("e2", {}).get("files_per_s")
            if not meta["disk_cache"]:
                v = "n/a: no disk cache"
            else:
                ok = (s["e2"] is not None and loc is not None and s["e2_origin"] == 0
                      and s["e2"] >= 0.9 * loc)
                verdicts.append(ok)
                v = verdict(ok)
            L.append(f"| {c['label']} | L{k} | {f1(s['e2'])} | {f1(loc)} | "
                     f"{f1((s['e2_origin'] or 0) / 1e6)} | {v} |")
    L.append("")
    if local:
        L.append("Local store (same pcrfs, no network): " + "; ".join(
            f"L{k} e1 {f1(v['e1'].get('files_per_s'), '{:.0f}')}, e2 "
            f"{f1(v['e2'].get('files_per_s'), '{:.0f}')} files/s" for k, v in local.items())
            + ".")
        L.append("")
    if idx_res:
        L.append("## Index fetch and remount")
        L.append("")
        L.append("`pcrfs URL MNT -o scans=1,cache_dir=D` until the mount point is up: a fresh D "
                 "(downloads manifest.json and index.pcri), then again with the same D (one "
                 "conditional request per file). Target: a remount of 1M entries under 1 s, "
                 "304s only.")
        L.append("")
        L.append("| network | entries | index MB | fetch s | remount s | remount requests | "
                 "verdict |")
        L.append("|---|---:|---:|---:|---:|---|---|")
        for label, res in idx_res.items():
            for n, r in sorted(res["entries"].items()):
                ok = r["remount_statuses"] == {"304": 2} and (n < 1000000 or r["remount_s"] < 1)
                verdicts.append(ok)
                L.append(f"| {label} | {n:,} | {res['sizes'][n] / 1e6:.1f} | {r['fetch_s']:.2f} "
                         f"| {r['remount_s']:.2f} | {json.dumps(r['remount_statuses'])} | "
                         f"{verdict(ok)} |")
        L.append("")
    if loader_res:
        L.append(f"## PyTorch DataLoader ({args.loader_workers} workers) at "
                 f"{loader_res['label']}")
        L.append("")
        L.append(f"ImageFolder over the mount's train/ (RandomResizedCrop(224) + ToTensor, batch "
                 f"64), {args.loader_images or 'all'} images of a seeded shuffle, fresh mount "
                 f"each; images/s over the iteration (the ImageFolder scan apart); median of "
                 f"{args.loader_rounds}.")
        L.append("")
        L.append("| setup | scan s | images/s | vs rclone off | origin MB |")
        L.append("|---|---:|---:|---:|---:|")
        base = median([r.get("images_per_s") for r in loader_res["runs"].get("rclone off", [])])
        for name, runs in loader_res["runs"].items():
            ips = median([r.get("images_per_s") for r in runs])
            err = next((r["error"] for r in runs if "error" in r), "")
            origin = median([r.get("origin_bytes") for r in runs])
            L.append(f"| {name}{' (error: ' + err[:80] + ')' if err else ''} | "
                     f"{f1(median([r.get('list_s') for r in runs]), '{:.2f}')} | {f1(ips)} | "
                     f"{f1(ips / base if ips and base else None, '{:.2f}x')} | "
                     f"{f1(origin and origin / 1e6)} |")
        L.append("")
    if proxy_chk:
        k = max(args.levels)
        L.append("## Is the proxy the bottleneck? (no cap, no added latency)")
        L.append("")
        L.append(f"curl of a 1 GiB file: {proxy_chk['curl_direct_mbit']:.0f} Mbit/s from nginx, "
                 f"{proxy_chk['curl_proxy_mbit']:.0f} Mbit/s through the proxy. pcrfs L{k} cold "
                 f"epoch: {f1(proxy_chk.get(f'pcrfs_L{k}_direct_files_per_s'))} files/s direct, "
                 f"{f1(proxy_chk.get(f'pcrfs_L{k}_proxy_files_per_s'))} files/s through the proxy "
                 f"({proxy_chk['proxy_requests']} requests).")
        L.append("")
    n_fail = sum(1 for v in verdicts if v is False)
    n_pass = sum(1 for v in verdicts if v)
    L.append(f"Targets: {n_pass} PASS, {n_fail} FAIL.")
    return "\n".join(L) + "\n"


def plot(args, ds, conds, summ, loader_res, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = setup_names(args)
    n = len(conds) + (1 if loader_res else 0)
    cols = 2 if n > 1 else 1
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 3.6 * rows), squeeze=False)
    for ax, c in zip(axes.flat, conds):
        e1 = [summ.get((c["label"], nm), {}).get("e1") or 0 for nm in names]
        e2 = [summ.get((c["label"], nm), {}).get("e2") or 0 for nm in names]
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], e1, 0.4, label="epoch 1 (cold)", color="#4477aa")
        ax.bar([x + 0.2 for x in xs], e2, 0.4, label="epoch 2", color="#aaccee")
        peers = [summ.get((c["label"], p), {}).get("e1") for p in ("rclone off", "rclone full")]
        peer = max([p for p in peers if p], default=None)
        tx, ty = [], []
        for x, nm in zip(xs, names):
            k = level_of(nm)
            if peer and k and " s3 " not in nm:
                tx.append(x - 0.2)
                ty.append(0.8 * peer * ds["src_bytes"] / ds["level_bytes"][k - 1])
        if tx:
            ax.scatter(tx, ty, marker="_", s=300, color="#cc3311", zorder=3,
                       label="target (epoch 1)")
        ax.set_yscale("log")
        ax.set_ylim(bottom=5)
        ax.set_xticks(list(xs))
        ax.set_xticklabels([nm.replace("pcrfs ", "") for nm in names], rotation=30, fontsize=8)
        ax.set_ylabel("files/s (log)")
        ax.set_title(c["label"], fontsize=10)
        ax.legend(fontsize=7)
    if loader_res:
        ax = axes.flat[len(conds)]
        lnames = list(loader_res["runs"])
        vals = [median([r.get("images_per_s") for r in loader_res["runs"][nm]]) or 0
                for nm in lnames]
        ax.bar(range(len(lnames)), vals, color="#228833")
        ax.set_xticks(list(range(len(lnames))))
        ax.set_xticklabels([nm.replace("pcrfs ", "") for nm in lnames], rotation=30, fontsize=8)
        ax.set_ylabel("images/s")
        ax.set_title(f"DataLoader ({args.loader_workers} workers), {loader_res['label']}",
                     fontsize=10)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(f"pcrfs remote store vs rclone / s3fs, {len(ds['files'])} JPEGs, "
                 f"{args.readers} readers", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


# ----------------------------------------------------------------------------- main


def inner_main(args):
    t_start = time.monotonic()
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load0": loadavg(),
            "host": os.uname().nodename}
    try:
        meta["commit"] = sh("git", "-C", REPO, "rev-parse", "--short", "HEAD").strip()
    except RuntimeError:
        meta["commit"] = "?"
    pcr = find_tool("mount-tools/pcr", "pcr", args.pcr)
    pcrfs = find_tool("fs/pcrfs", "pcrfs", args.pcrfs)
    ds = prepare_dataset(args, pcr)
    idx_info = prepare_index_stores(args, pcr, ds["www"]) if args.index_sizes else {}
    set_cap(None, ())
    tmp = tempfile.mkdtemp(prefix="remote-bench-")
    help_text = subprocess.run([pcrfs, "--help"], capture_output=True, text=True)
    env = Env(args, tmp, pcr, pcrfs, ds)
    env.disk_cache = "disk_cache" in (help_text.stdout + help_text.stderr)
    meta["disk_cache"] = env.disk_cache
    log(f"pcrfs {pcrfs}: disk cache {'yes' if env.disk_cache else 'no'}; data {ds['data']}, "
        f"{len(ds['files'])} files")
    results, local, idx_res, loader_res, proxy_chk, caps_meas = [], {}, {}, None, None, {}
    pairs = args.conditions or [(c, l) for c in args.caps for l in args.latencies]
    conds = [{"cap_mbit": c, "latency_ms": l, "label": f"{c} Mbit/s, {l} ms"} for c, l in pairs]
    meta["pcrfs"] = pcrfs
    names = setup_names(args)
    try:
        with AutoindexNginx(ds["www"], workers=2) as nginx, \
                ProxyProcess(nginx.url, tmp, "http-proxy", args.proxy) as hp:
            env.nginx, env.http_proxy = nginx, hp
            env.http_direct = NginxDirect(nginx)
            s3 = None
            if not args.no_s3:
                log("S3 server: uploading the folder and the store")
                t0 = time.monotonic()
                s3 = S3Server(None, BUCKET, ACCESS_KEY, SECRET_KEY, region=REGION).__enter__()
                s3.upload(ds["data"], "src")
                s3.upload(ds["store"], "store")
                log(f"uploaded in {time.monotonic() - t0:.0f} s")
            try:
                if s3:
                    env.s3_proxy = ProxyProcess(s3.endpoint, tmp, "s3-proxy",
                                                args.proxy).__enter__()
                    env.s3_direct = S3Direct(s3)
                if not args.no_proxy_check:
                    proxy_chk = proxy_check(env, ds["files"])
                for c in sorted({c["cap_mbit"] for c in conds}):
                    blob = os.path.join(ds["www"], f"blob-cap-{c}")
                    with open(blob, "wb") as f:
                        f.truncate(int(c * 1e6 / 8 * 2))
                    env.http_proxy.reset()
                    caps_meas[c] = cap_check(env, c)
                if args.local:
                    set_cap(None, ())
                    local = measure_local(env, ds["files"], args.levels)
                for r in range(args.repeat):
                    for ci, c in enumerate(conds):
                        set_cap(c["cap_mbit"], env.cap_ports(c["latency_ms"]))
                        rot = (ci + r) % len(names)
                        for name in names[rot:] + names[:rot]:
                            rec = measure_setup(env, name, c, ds["files"])
                            rec["round"] = r
                            results.append(rec)
                if idx_info:
                    for c in args.index_caps:
                        label = f"{c} Mbit/s, {args.index_latency} ms"
                        idx_res[label] = {"entries": measure_index(env, idx_info, c,
                                                                   args.index_latency),
                                          "sizes": {n: v["index_bytes"] for n, v in
                                                    idx_info.items()}}
                if args.loader_rounds:
                    c = {"cap_mbit": args.loader_cap, "latency_ms": args.loader_latency,
                         "label": f"{args.loader_cap} Mbit/s, {args.loader_latency} ms"}
                    set_cap(args.loader_cap, env.cap_ports(args.loader_latency))
                    lnames = [f"pcrfs L{k}" for k in args.levels] + ["rclone off"]
                    loader_res = {"label": c["label"],
                                  "runs": measure_loader(env, lnames, c, args.loader_rounds)}
            finally:
                if s3:
                    if getattr(env, "s3_proxy", None):
                        env.s3_proxy.__exit__(None, None, None)
                    s3.__exit__(None, None, None)
    finally:
        set_cap(None, ())
        shutil.rmtree(tmp, ignore_errors=True)
    meta["load1"] = loadavg()
    meta["elapsed"] = time.monotonic() - t_start
    summ = summarize(results)
    text = report(args, meta, ds, conds, summ, local, idx_res, loader_res, proxy_chk, caps_meas)
    write_results(text, args.out, os.path.splitext(args.out)[0] + ".json",
                  {"meta": meta, "args": vars(args), "results": results, "local": local,
                   "index": idx_res, "loader": loader_res, "proxy_check": proxy_chk,
                   "caps_measured": caps_meas,
                   "dataset": {k: v for k, v in ds.items() if k != "files"},
                   "files": len(ds["files"])}, json_default=str)
    if args.plot:
        plot(args, ds, conds, summ, loader_res, args.plot)
        log(f"plot: {args.plot}")
    log(f"results: {args.out}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="500 images, 100 Mbit/s + 20 ms only, levels 1 and 10, the 10k index, "
                         "100 loader images")
    ap.add_argument("--images", type=int, default=2000, help="generated dataset size")
    ap.add_argument("--data", help="an existing JPEG folder instead of the generated one")
    ap.add_argument("--caps", default="100,1000", help="Mbit/s, comma-separated")
    ap.add_argument("--latencies", default="0,20", help="ms added per request, comma-separated")
    ap.add_argument("--levels", default="1,2,5,10")
    ap.add_argument("--readers", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every condition")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--s3-level", type=int, default=5, help="level of the pcrfs s3:// row")
    ap.add_argument("--no-s3", action="store_true", help="no S3 server, s3fs or s3:// rows")
    ap.add_argument("--disk-cache", default="2G", help="-o disk_cache=SIZE when pcrfs has it")
    ap.add_argument("-o", dest="pcrfs_opt", action="append", default=[],
                    help="extra -o for every remote pcrfs mount")
    ap.add_argument("--index-sizes", default="10k,100k,1m", help="'' for none")
    ap.add_argument("--index-caps", default="100,1000")
    ap.add_argument("--index-latency", type=int, default=20)
    ap.add_argument("--loader-rounds", type=int, default=1, help="0: no DataLoader runs")
    ap.add_argument("--loader-images", type=int, default=300, help="0: the whole train split")
    ap.add_argument("--loader-workers", type=int, default=2)
    ap.add_argument("--loader-cap", type=int, default=100)
    ap.add_argument("--loader-latency", type=int, default=20)
    ap.add_argument("--no-local", dest="local", action="store_false",
                    help="skip the local-store reference epochs")
    ap.add_argument("--no-proxy-check", action="store_true")
    add_proxy_argument(ap)
    ap.add_argument("--always-proxy", action="store_true",
                    help="0 ms rows through the proxy too (default: straight to the servers)")
    ap.add_argument("--no-drop", action="store_true", help="no drop_caches before cold epochs")
    ap.add_argument("--mtu", type=int, default=1500,
                    help="the namespace's lo MTU (an Ethernet link's 1500 by default; lo's own "
                         "65536 makes answers just over one segment stall for ~40 ms)")
    ap.add_argument("--timeline", action="store_true",
                    help="keep, in the JSON, when each file of an epoch was done")
    ap.add_argument("--epoch-timeout", type=float, default=300)
    ap.add_argument("--pcr")
    ap.add_argument("--pcrfs")
    ap.add_argument("--pcrfs-b", help="a second pcrfs binary: setups 'pcrfs-B Lk' beside "
                    "'pcrfs Lk' in every round, and a table of B/A files/s")
    ap.add_argument("--conditions", help="cap/latency pairs, e.g. 100/20,1000/0 (default: "
                    "every --caps x --latencies)")
    ap.add_argument("--no-rclone", dest="rclone", action="store_false",
                    help="no rclone rows (their targets then read n/a)")
    ap.add_argument("--out", default=os.path.join(BENCH, "remote_results.md"))
    ap.add_argument("--plot", default=os.path.join(BENCH, "remote_bench.png"))
    ap.add_argument("--loader-child", help=argparse.SUPPRESS)
    ap.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.loader_child:
        loader_child(args.loader_child, args.loader_images, args.seed, args.loader_workers)
        return 0
    if not getattr(args, INNER_FLAG.lstrip("-").replace("-", "_")):
        warn_unless_bench_lock()
    if args.quick:
        args.images = 500 if args.images == 2000 else args.images
        args.caps = "100" if args.caps == "100,1000" else args.caps
        args.levels = "1,10" if args.levels == "1,2,5,10" else args.levels
        args.latencies = "20" if args.latencies == "0,20" else args.latencies
        args.index_sizes = "10k" if args.index_sizes == "10k,100k,1m" else args.index_sizes
        args.index_caps = "100"
        args.loader_images = min(args.loader_images or 100, 100)
    args.caps = [int(x) for x in args.caps.split(",") if x]
    if args.conditions:
        try:
            args.conditions = [tuple(int(v) for v in x.split("/")) for x in
                               args.conditions.split(",") if x]
        except ValueError:
            fail(f"--conditions {args.conditions}: pairs CAP/LATENCY, e.g. 100/20,1000/0")
        if any(len(p) != 2 for p in args.conditions):
            fail("--conditions: pairs CAP/LATENCY, e.g. 100/20,1000/0")
        args.caps = sorted({c for c, _ in args.conditions})
    if args.pcrfs_b:
        args.pcrfs_b = os.path.abspath(args.pcrfs_b)
        if not os.access(args.pcrfs_b, os.X_OK):
            fail(f"--pcrfs-b {args.pcrfs_b}: not an executable")
    args.latencies = [int(x) for x in args.latencies.split(",") if x]
    args.levels = [int(x) for x in args.levels.split(",") if x]
    args.index_sizes = [parse_count(x) for x in args.index_sizes.split(",") if x.strip()]
    args.index_caps = [int(x) for x in args.index_caps.split(",") if x]
    if not netns.MIN_MTU <= args.mtu <= netns.MAX_MTU:
        fail(f"--mtu {args.mtu}: between {netns.MIN_MTU} and {netns.MAX_MTU}")
    if os.geteuid() != 0:
        fail("needs root (drop_caches, FUSE mounts, a network namespace)")
    for tool in ("rclone", "s3fs", "fusermount3", "tc", "curl", NGINX):
        if not shutil.which(tool) and not os.access(tool, os.X_OK):
            fail(f"{tool}: not installed (setup.sh bench deps)")
    if not args.inside_namespace:
        # Everything below runs in a new network namespace: servers and clients on its lo.
        os.execvp("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__),
                              INNER_FLAG, *sys.argv[1:]])
    netns.shape_loopback(None, netns.MIN_BURST_KIB, args.mtu)  # lo up, its MTU; caps: set_cap
    return inner_main(args)


if __name__ == "__main__":
    sys.exit(main())
