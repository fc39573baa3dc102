#!/usr/bin/python3
"""Mount to first byte of a remote store with an ImageNet-sized index (issue 34, item 3).

The store: 8 real JPEGs (from tests/data/make_dataset.py) built by `pcr build` into one record,
whose index.pcri is replaced by one for ~1.28M files (tests/bench/first_bytes_index.cc, built
here with g++ against this tree's libraries): the real files in folder a_real, 999 folders of
synthetic entries (names, sizes, times as an ImageNet-like tree has them) pointing into records
that do not exist; the manifest's counts follow the index. So a mount moves exactly what a
1.28M-file store's mount moves (manifest + index), and the first file read is real bytes (the
one record's ranges), checked against `pcr cat` of the small store.

Served by nginx in a new network namespace behind tests/remote's fault proxy, which adds the
latency before each answer; the proxy's answers cross an HTB cap (tests/bench/netns.py,
remote_bench.set_cap). For each condition and pcrfs binary, from a cold cache folder:
`pcrfs URL MNT -f` is started and MNT/scan10/a_real/FIRST is opened as soon as it is mounted;
reported: bytes the proxy sent before that read, seconds from exec to the mount and to the
first byte, the index's transfer time at line rate, and the daemon's "parsed N time(s)" line.

  flock /var/tmp/pcrfs-bench/bench.lock tests/bench/first_bytes_bench.py
  ... --conditions 1000:20,100:20 --repeat 3 --compare /work/main/build/fs/pcrfs
"""

import argparse
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "tests", "remote"))
sys.path.insert(0, HERE)
from remote_servers import Nginx  # noqa: E402
import benchlib  # noqa: E402
import netns  # noqa: E402
from benchlib import fail, find_tool, loadavg, log, sh, warn_unless_bench_lock, write_results  # noqa: E402,E501
from remote_bench import ProxyProcess, set_cap, url_port  # noqa: E402

benchlib.FAIL_CODE = 1
BENCH = "/var/tmp/pcrfs-bench"
WORK = os.path.join(BENCH, "first-bytes-work")
INNER_FLAG = "--inside-namespace"
MNT = "/tmp/first-bytes-bench-mnt"


def build_driver(build_dir):
    """g++ of first_bytes_index.cc against build_dir's static libraries (cached by inputs)."""
    src = os.path.join(HERE, "first_bytes_index.cc")
    libs = [os.path.join(build_dir, p) for p in ("index/libpcrfs_index.a",
                                                 "codec/libpcrfs_codec.a",
                                                 "common/libpcrfs_common.a")]
    h = hashlib.sha256()
    for p in [src, *libs]:
        with open(p, "rb") as f:
            h.update(f.read())
    exe = os.path.join(WORK, "first_bytes_index-" + h.hexdigest()[:12])
    if not os.path.exists(exe):
        log("building first_bytes_index")
        sh("g++", "-std=c++20", "-O2", "-I", REPO, src, *libs, "-lzstd", "-llmdb", "-lpthread",
           "-o", exe + ".tmp")
        os.rename(exe + ".tmp", exe)
    return exe


def prepare_store(args, pcr):
    """WORK/www/big: the synthetic store (cached by the files count and the driver)."""
    os.makedirs(WORK, exist_ok=True)
    src = os.path.join(WORK, "src")
    if not os.path.isdir(src):
        log("8 real JPEGs from make_dataset.py")
        tmp = os.path.join(WORK, "dataset.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        sh(sys.executable, os.path.join(REPO, "tests", "data", "make_dataset.py"), tmp,
           "--images", "8")
        os.makedirs(src + ".tmp", exist_ok=True)
        for dirpath, _, names in os.walk(tmp):
            for n in names:
                if n.endswith(".JPEG"):
                    shutil.copy(os.path.join(dirpath, n), os.path.join(src + ".tmp", n))
        shutil.rmtree(tmp)
        os.rename(src + ".tmp", src)
    www = os.path.join(WORK, "www")
    real = os.path.join(WORK, "real")
    if not os.path.isdir(real):
        sh(pcr, "build", src, real + ".tmp", "--quiet")
        os.rename(real + ".tmp", real)
    exe = build_driver(os.path.dirname(os.path.dirname(pcr)))
    big = os.path.join(www, f"big-{args.files}-{os.path.basename(exe)[-12:]}")
    info_path = big + ".json"
    if not os.path.exists(info_path):
        log(f"writing the index of {args.files} files")
        shutil.rmtree(big, ignore_errors=True)
        shutil.copytree(real, big)
        info = json.loads(sh(exe, real, os.path.join(big, "index.pcri"), str(args.files)))
        with open(os.path.join(big, "manifest.json")) as f:
            m = json.load(f)
        for k in ("num_entries", "num_directories", "num_jpeg", "num_records"):
            m[k] = info[k]
        with open(os.path.join(big, "manifest.json"), "w") as f:
            json.dump(m, f, indent=2)
        with open(info_path, "w") as f:
            json.dump(info, f)
    with open(info_path) as f:
        info = json.load(f)
    info["manifest_bytes"] = os.path.getsize(os.path.join(big, "manifest.json"))
    first = info["real"][0]
    want = subprocess.run([pcr, "cat", real, first, "-k", "10"], capture_output=True,
                          check=True).stdout
    return www, os.path.basename(big), info, first, want


def one_mount(pcrfs, url, first, want, proxy, tmp, tag):
    cache = tempfile.mkdtemp(prefix="cache-", dir=tmp)
    os.makedirs(MNT, exist_ok=True)
    log_path = os.path.join(tmp, tag + ".log")
    logf = open(log_path, "wb")
    path = os.path.join(MNT, "scan10", "a_real", first)
    t0 = time.monotonic()
    proc = subprocess.Popen([pcrfs, url, MNT, "-f", "-o", f"cache_dir={cache}"],
                            stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    rec = {}
    try:
        while not os.path.ismount(MNT):
            if proc.poll() is not None:
                with open(log_path, errors="replace") as f:
                    fail(f"pcrfs exited {proc.returncode}: {f.read()[-600:]}")
            if time.monotonic() - t0 > 300:
                fail("pcrfs did not mount in 300 s")
            time.sleep(0.002)
        rec["mount_s"] = time.monotonic() - t0
        rec["bytes_before_read"] = proxy.stats()["bytes_to_client"]
        with open(path, "rb", buffering=0) as f:
            head = f.read(1)
            rec["first_byte_s"] = time.monotonic() - t0
            data = head + f.read()
        rec["first_file_s"] = time.monotonic() - t0
        if data != want:
            fail(f"{path}: {len(data)} bytes, not the {len(want)} of pcr cat")
        st = proxy.stats()
        rec["bytes_total"] = st["bytes_to_client"]
        rec["statuses"] = st["statuses"]
    finally:
        benchlib.stop_mount(MNT, proc)
        logf.close()
        shutil.rmtree(cache, ignore_errors=True)
    with open(log_path, errors="replace") as f:
        parsed = re.search(r"parsed (\d+) time", f.read())
    rec["parses"] = int(parsed.group(1)) if parsed else None
    return rec


def inner_main(args):
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load0": loadavg()}
    try:
        meta["commit"] = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                                        capture_output=True, text=True).stdout.strip()
    except OSError:
        meta["commit"] = "?"
    pcr = find_tool("mount-tools/pcr", "pcr", args.pcr)
    binaries = [("this tree", find_tool("fs/pcrfs", "pcrfs", args.pcrfs))]
    if args.compare:
        binaries.append((args.compare_label, args.compare))
    www, name, info, first, want = prepare_store(args, pcr)
    log(f"store {name}: {info['num_entries']} entries, index.pcri {info['index_bytes']} bytes; "
        f"first read {first} ({len(want)} bytes at level 10)")
    tmp = tempfile.mkdtemp(prefix="first-bytes-")
    results = []
    set_cap(None, ())
    with Nginx(www, workers=2) as nginx, ProxyProcess(nginx.url, tmp, "proxy") as proxy:
        url = proxy.url + "/" + name
        for cond in args.conditions:
            mbit, ms = cond
            set_cap(mbit, [url_port(proxy.url)])
            line_s = info["index_bytes"] * 8 / (mbit * 1e6)
            for label, exe in binaries:
                runs = []
                for i in range(args.repeat):
                    proxy.reset(ms)
                    r = one_mount(exe, url, first, want, proxy, tmp, f"{mbit}-{ms}-{i}")
                    runs.append(r)
                    log(f"{label}, {mbit} Mbit/s + {ms} ms: mount {r['mount_s']:.2f} s, first "
                        f"byte {r['first_byte_s']:.2f} s, {r['bytes_before_read']} bytes before "
                        f"the read, {r['statuses']}, parsed {r['parses']}x")
                results.append({"mbit": mbit, "ms": ms, "binary": label, "line_s": line_s,
                                "runs": runs})
    set_cap(None, ())
    shutil.rmtree(tmp, ignore_errors=True)
    return report(args, meta, info, results)


def report(args, meta, info, results):
    lines = [f"## Mount to first byte, {info['num_jpeg']:,} files",
             "",
             f"{meta['date']}, commit {meta['commit']}, load {meta['load0']}; index.pcri "
             f"{info['index_bytes']:,} bytes ({info['index_bytes'] / info['num_jpeg']:.1f} per "
             f"file), manifest {info['manifest_bytes']:,}; nginx behind the fault proxy in a "
             f"network namespace, answers capped by HTB; median of {args.repeat} cold mounts "
             "(fresh cache folder each).",
             "",
             "| link | pcrfs | bytes before first read | mount s | first byte s | index at line "
             "rate s | first byte / line rate | parses | target |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        med = lambda k: statistics.median(x[k] for x in r["runs"])  # noqa: E731
        fb = med("first_byte_s")
        ratio = fb / r["line_s"]
        if r["mbit"] >= 1000:
            target, ok = "<= 2 s", fb <= 2.0
        else:
            target, ok = "<= 1.5x line rate", ratio <= 1.5
        parses = sorted({x["parses"] for x in r["runs"]}, key=str)
        lines.append(f"| {r['mbit']} Mbit/s + {r['ms']} ms | {r['binary']} | "
                     f"{int(med('bytes_before_read')):,} | {med('mount_s'):.2f} | {fb:.2f} | "
                     f"{r['line_s']:.2f} | {ratio:.2f} | {','.join(map(str, parses))} | {target}: "
                     f"{benchlib.verdict(ok)} |")
    lines.append("")
    text = "\n".join(lines) + "\n"
    write_results(text, args.out, args.out.rsplit(".", 1)[0] + ".json",
                  {"meta": meta, "info": info, "results": results})
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=1281167)
    ap.add_argument("--conditions", default="1000:20,100:20",
                    help="MBIT:MS pairs: the cap and the latency the proxy adds per answer")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", help="another pcrfs binary to measure the same way")
    ap.add_argument("--compare-label", default="compare")
    ap.add_argument("--pcr")
    ap.add_argument("--pcrfs")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--out", default=os.path.join(BENCH, "first_bytes_results.md"))
    ap.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        args.conditions = [tuple(int(v) for v in c.split(":")) for c in args.conditions.split(",")]
    except ValueError:
        fail(f"--conditions {args.conditions}: MBIT:MS pairs, comma-separated")
    if os.geteuid() != 0:
        fail("needs root (FUSE mounts, a network namespace, tc)")
    if not getattr(args, INNER_FLAG.lstrip("-").replace("-", "_")):
        warn_unless_bench_lock()
        os.execvp("unshare", ["unshare", "-n", sys.executable, os.path.abspath(__file__),
                              INNER_FLAG, *sys.argv[1:]])
    netns.shape_loopback(None, netns.MIN_BURST_KIB, args.mtu)
    return inner_main(args)


if __name__ == "__main__":
    sys.exit(main())
