#!/usr/bin/python3
"""Large files through the mount (issue 16): `cat` of 64 MB, 300 MB and 3 GB files through
pcrfs against native `cat` of the source, cold and warm, and the daemon's peak RSS.

    flock /var/tmp/pcrfs-bench/bench.lock tests/bench/large_file_bench.py [--rounds 3]

Files are random bytes (passthrough: every level serves the whole file) made once under
--dir (default /var/tmp/pcrfs-bench/large). Cold = after `echo 3 > /proc/sys/vm/drop_caches`
(source, record and FUSE pages all dropped); warm = the second of two reads. Each round runs
native and pcrfs for each file, alternating which goes first. Targets: pcrfs within 1.5x native
(cold), daemon VmHWM within the cache budget (-o cache_size, 256 MiB) + 64 MiB.
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (REPO, Mount, drop_caches, proc_status_kib,  # noqa: E402
                      warn_unless_bench_lock, write_results)

MIB = 1 << 20
SIZES = {"f64M.bin": 64 * MIB, "f300M.bin": 300 * MIB, "f3G.bin": 3 * 1024 * MIB}
CACHE_MIB = 256


def tool(name, rel):
    built = os.path.join(REPO, "build", rel)
    return built if os.path.exists(built) else name


PCR = os.environ.get("PCR", tool("pcr", "mount-tools/pcr"))
PCRFS = os.environ.get("PCRFS", tool("pcrfs", "fs/pcrfs"))


def make_files(src):
    os.makedirs(src, exist_ok=True)
    for name, size in SIZES.items():
        path = os.path.join(src, name)
        if os.path.exists(path) and os.path.getsize(path) == size:
            continue
        rng = random.Random(size)
        with open(path + ".tmp", "wb") as f:
            for _ in range(size // (4 * MIB)):
                f.write(rng.randbytes(4 * MIB))
        os.rename(path + ".tmp", path)


def timed_cat(path):
    t = time.monotonic()
    subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dir", default="/var/tmp/pcrfs-bench/large")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None, help="markdown results file (default DIR/results.md)")
    args = ap.parse_args()
    warn_unless_bench_lock()
    src, store, mnt = (os.path.join(args.dir, x) for x in ("src", "store", "mnt"))
    make_files(src)
    version = subprocess.run([PCR, "--version"], capture_output=True, text=True).stdout.strip()
    if not os.path.exists(os.path.join(store, "manifest.json")) or \
            os.path.getmtime(store) < os.path.getmtime(PCR):
        subprocess.run([PCR, "build", src, store, "--force", "--quiet", "--quality-sample", "0"],
                       check=True)
    daemon = Mount([PCRFS, store, mnt, "-f", "-o", f"scans=1,cache_size={CACHE_MIB}M"], mnt,
                   os.path.join(args.dir, "pcrfs.log"))
    try:
        res = {n: {"native cold": [], "pcrfs cold": [], "native warm": [], "pcrfs warm": []}
               for n in SIZES}
        for r in range(args.rounds):
            for name in SIZES:
                order = [("native", os.path.join(src, name)), ("pcrfs", os.path.join(mnt, name))]
                if r % 2:
                    order.reverse()
                for who, path in order:
                    drop_caches()
                    res[name][f"{who} cold"].append(timed_cat(path))
                    res[name][f"{who} warm"].append(timed_cat(path))
                print(f"round {r + 1}: {name} " + ", ".join(
                    f"{k} {v[-1]:.2f}s" for k, v in res[name].items()), flush=True)
        hwm = proc_status_kib(daemon.pid, "VmHWM")
    finally:
        daemon.close()
    lines = [f"# Large files through the mount ({time.strftime('%Y-%m-%d %H:%M')}, {version}, "
             f"{args.rounds} rounds, medians, load {os.getloadavg()[0]:.2f})", "",
             "| file | native cold | pcrfs cold | ratio | target <= 1.5 | native warm | pcrfs warm | ratio |",
             "|---|---|---|---|---|---|---|---|"]
    for name, size in SIZES.items():
        m = {k: statistics.median(v) for k, v in res[name].items()}
        cold = m["pcrfs cold"] / m["native cold"]
        warm = m["pcrfs warm"] / m["native warm"]
        lines.append(f"| {name} ({size / 1e6:.0f} MB) | {m['native cold']:.2f} s | "
                     f"{m['pcrfs cold']:.2f} s | {cold:.2f} | {'pass' if cold <= 1.5 else 'FAIL'} | "
                     f"{m['native warm']:.3f} s | {m['pcrfs warm']:.3f} s | {warm:.2f} |")
    budget = (CACHE_MIB + 64) * 1024
    lines += ["", f"Daemon peak RSS (VmHWM) over the whole run: {hwm / 1024:.1f} MiB "
              f"(target <= {CACHE_MIB} + 64 MiB: {'pass' if hwm <= budget else 'FAIL'})."]
    write_results("\n".join(lines) + "\n", args.out or os.path.join(args.dir, "results.md"))


if __name__ == "__main__":
    main()
