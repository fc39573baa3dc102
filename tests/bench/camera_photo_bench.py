#!/usr/bin/python3
"""camera_photo_bench.py: what the default quality sample costs on camera-size photos (issue 46
item 1: one 6000x4000 JPEG took 23.9 s and 1.47 GB with the default sample, 0.27 s and 85 MB
without it).

usage: flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/camera_photo_bench.py \
           [--pcr PATH] [--baseline-pcr PATH] [--rounds R] [--out FILE]

Builds, in one run and interleaved round by round: (a) a folder holding one 6000x4000 photo
(seeded, tests/e2e/pcrtest.py's photo(), JPEG quality 90, 4:2:0) and (b) that photo beside 182
ImageNet-size photos, each with `pcr build` of this tree and of --baseline-pcr (default: the
installed `pcr`, for the before), with the default sample and with --quality-sample 0. Each
build runs under /usr/bin/time -v: wall seconds and peak RSS; the median over rounds, and the
ratios default/no-sample and this/baseline. Target: (a) with defaults at most 2 s and 200 MB.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))

import benchlib  # noqa: E402
from pcrtest import photo, save_jpeg  # noqa: E402


def timed_build(pcr, src, store, extra):
    shutil.rmtree(store, ignore_errors=True)
    p = subprocess.run(["/usr/bin/time", "-v", pcr, "build", src, store, "--quiet", *extra],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        benchlib.fail(f"{pcr} build {src} failed: {p.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)",
                     p.stderr)
    h, m, s = int(wall.group(1) or 0), int(wall.group(2)), float(wall.group(3))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    return h * 3600 + m * 60 + s, rss * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pcr", default=benchlib.find_tool("mount-tools/pcr", "pcr"))
    ap.add_argument("--baseline-pcr", default=shutil.which("pcr"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(benchlib.BENCH_ROOT, "camera_photo.md"))
    args = ap.parse_args()
    benchlib.warn_unless_bench_lock()
    work = os.path.join(benchlib.BENCH_ROOT, "work", "camera_photo")
    shutil.rmtree(work, ignore_errors=True)
    one, mixed = os.path.join(work, "one"), os.path.join(work, "mixed")
    benchlib.log("making a 6000x4000 photo and 182 small ones")
    save_jpeg(photo(6000, 4000, 46), os.path.join(one, "camera.jpg"), quality=90)
    os.makedirs(mixed)
    shutil.copy(os.path.join(one, "camera.jpg"), os.path.join(mixed, "camera.jpg"))
    for i in range(182):
        save_jpeg(photo(500, 375, 1000 + i), os.path.join(mixed, f"c{i % 4}", f"{i:03d}.jpg"),
                  quality=85)
    pcrs = [("this tree", args.pcr)]
    if args.baseline_pcr and os.path.realpath(args.baseline_pcr) != os.path.realpath(args.pcr):
        pcrs.append(("baseline", args.baseline_pcr))
    configs = [(src_name, src, who, pcr, sample_name, extra)
               for src_name, src in (("one 6000x4000", one), ("183 files", mixed))
               for who, pcr in pcrs
               for sample_name, extra in (("default sample", []),
                                          ("--quality-sample 0", ["--quality-sample", "0"]))]
    results = {c[:3] + (c[4],): [] for c in configs}
    store = os.path.join(work, "store")
    for r in range(args.rounds):
        rotated = configs[r % len(configs):] + configs[:r % len(configs)]
        for src_name, src, who, pcr, sample_name, extra in rotated:
            secs, rss = timed_build(pcr, src, store, extra)
            results[(src_name, src, who, sample_name)].append((secs, rss))
            benchlib.log(f"round {r + 1}: {src_name}, {who}, {sample_name}: {secs:.2f} s, "
                         f"{rss / benchlib.MiB:.0f} MiB")
    lines = ["| source | pcr | sample | wall s (median) | peak RSS MiB (median) |",
             "|---|---|---|---:|---:|"]
    med = {}
    for key, runs in results.items():
        secs = statistics.median(x[0] for x in runs)
        rss = statistics.median(x[1] for x in runs)
        med[key] = (secs, rss)
        lines.append(f"| {key[0]} | {key[2]} | {key[3]} | {secs:.2f} | {rss / benchlib.MiB:.0f} |")
    lines.append("")
    for src_name, src in (("one 6000x4000", one), ("183 files", mixed)):
        for who, _ in pcrs:
            a = med[(src_name, src, who, "default sample")]
            b = med[(src_name, src, who, "--quality-sample 0")]
            lines.append(f"- {src_name}, {who}: default / no sample = {a[0] / b[0]:.2f}x time, "
                         f"{a[1] / b[1]:.2f}x RSS")
        if len(pcrs) == 2:
            a = med[(src_name, src, "this tree", "default sample")]
            b = med[(src_name, src, "baseline", "default sample")]
            lines.append(f"- {src_name}, default sample: this tree / baseline = "
                         f"{a[0] / b[0]:.3f}x time, {a[1] / b[1]:.3f}x RSS")
    target = med[("one 6000x4000", one, "this tree", "default sample")]
    lines.append(f"- target (one 6000x4000, defaults, <= 2 s and 200 MB): {target[0]:.2f} s, "
                 f"{target[1] / 1e6:.0f} MB: "
                 f"{benchlib.verdict(target[0] <= 2 and target[1] <= 200e6)}")
    lines.append(f"- load average at the end: {benchlib.loadavg()}")
    benchlib.write_results("\n".join(lines) + "\n", args.out)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
