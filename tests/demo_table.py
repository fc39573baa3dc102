#!/usr/bin/python3
"""Prints, for each level: files, bytes, % of source, and mean PSNR against the source pixels.

usage: demo_table.py SRC STORE [--mount MNT]
Reads files through a mount (MNT/scanK/...) when --mount is given, else through `pcr cat`.
"""

import argparse
import io
import os
import subprocess

import numpy as np
from PIL import Image


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("store")
    ap.add_argument("--mount")
    args = ap.parse_args()

    files = []
    for dirpath, _, names in os.walk(args.src):
        for n in sorted(names):
            files.append(os.path.relpath(os.path.join(dirpath, n), args.src))
    files.sort()
    source_bytes = sum(os.path.getsize(os.path.join(args.src, f)) for f in files)
    refs = {}
    for f in files:
        try:
            refs[f] = np.asarray(Image.open(os.path.join(args.src, f)).convert("RGB"))
        except Exception:
            pass  # not an image: served byte for byte

    def read(rel, k):
        if args.mount:
            with open(os.path.join(args.mount, f"scan{k}", rel), "rb") as fh:
                return fh.read()
        return subprocess.run(["pcr", "cat", args.store, rel, "--scans", str(k)], check=True,
                              stdout=subprocess.PIPE).stdout

    print(f"{'level':>5} {'files':>6} {'bytes':>12} {'% of source':>12} {'mean PSNR (dB)':>15}")
    for k in range(1, 11):
        total, psnrs = 0, []
        for f in files:
            data = read(f, k)
            total += len(data)
            if f in refs:
                img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
                psnrs.append(psnr(refs[f], img))
        finite = [p for p in psnrs if p != float("inf")]
        mean = "lossless" if not finite else f"{np.mean(finite):.2f}"
        if finite and len(finite) < len(psnrs):
            mean += f" ({len(psnrs) - len(finite)} exact)"
        print(f"{k:>5} {len(files):>6} {total:>12} {100.0 * total / source_bytes:>11.1f}% {mean:>15}")


if __name__ == "__main__":
    main()
