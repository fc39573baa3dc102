#!/usr/bin/python3
"""object_output_bench.py: `pcr build SRC s3://...` and `pcr merge s3://... s3://...` against the
same work on local folders.

usage: flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/object_output_bench.py
           [--images N] [--shards S] [--pcr PATH] [--repeat R]

Generates N JPEGs (320x240, quality 90) in 10 folders and, interleaved in each of R rounds,
times (--quality-sample 0, -j 2): a build into a local folder and one into the S3 test server
(s3rver behind a front that checks every SigV4 signature); then, from S parts built once both
ways, a local merge and a merge on the server (records copied with CopyObject), with the bytes
the merge downloaded (the front's count) against the parts' record bytes. Every S3 store is
downloaded and compared with the local build (provenance.json aside). Prints medians and the
S3/local ratios. The server is the tests' own, on loopback: the ratios say what the upload and
copy paths cost over HTTP, not what a real object store does. Needs tests/remote/install.sh.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import REPO, warn_unless_bench_lock  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
sys.path.insert(0, os.path.join(REPO, "tests", "remote"))

BUCKET = "bench"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--pcr", default=os.environ.get("PCR") or
                    os.path.join(REPO, "build", "mount-tools", "pcr"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warn_unless_bench_lock()
    os.environ["PCR"] = args.pcr
    from pcrtest import photo, remote_env, run, save_jpeg, store_bytes
    from remote_servers import S3Server

    tmp = tempfile.mkdtemp(prefix="object-output-bench-")
    try:
        src = os.path.join(tmp, "src")
        for i in range(args.images):
            save_jpeg(photo(320, 240, seed=i), os.path.join(src, f"c{i % 10}", f"{i:05d}.jpg"),
                      quality=90)
        opts = ["--quiet", "--quality-sample", "0", "--images-per-record", "64"]
        with S3Server(None, BUCKET, "AKIDBENCH", "bench/secret") as s3:
            env = dict(remote_env(tmp), AWS_ACCESS_KEY_ID="AKIDBENCH",
                       AWS_SECRET_ACCESS_KEY="bench/secret", AWS_ENDPOINT_URL=s3.endpoint,
                       PCRFS_CACHE_DIR=os.path.join(tmp, "cache"))

            def timed(cmd):
                t0 = time.monotonic()
                run([args.pcr, *cmd], env=env)
                return time.monotonic() - t0

            def download(prefix):
                dst = os.path.join(tmp, "dl")
                shutil.rmtree(dst, ignore_errors=True)
                client = s3.client()
                for page in client.get_paginator("list_objects_v2").paginate(
                        Bucket=BUCKET, Prefix=prefix + "/"):
                    for o in page.get("Contents", []):
                        path = os.path.join(dst, o["Key"][len(prefix) + 1:])
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        client.download_file(BUCKET, o["Key"], path)
                client.close()
                return store_bytes(dst)

            n = args.shards
            local_parts = [os.path.join(tmp, f"part-{i}") for i in range(n)]
            for i in range(n):
                run([args.pcr, "build", src, local_parts[i], "--shard", f"{i}/{n}", "-j", "2",
                     *opts], env=env)
                run([args.pcr, "build", src, f"s3://{BUCKET}/parts/part-{i}", "--shard",
                     f"{i}/{n}", "-j", "2", *opts], env=env)
            record_bytes = sum(os.path.getsize(os.path.join(p, "records", f))
                               for p in local_parts for f in os.listdir(os.path.join(p, "records")))
            t = {"build_local": [], "build_s3": [], "merge_local": [], "merge_s3": []}
            fetched = []
            for r in range(args.repeat):  # interleaved: both setups see the same machine load
                local = os.path.join(tmp, f"local{r}")
                t["build_local"].append(timed(["build", src, local, "-j", "2", *opts]))
                t["build_s3"].append(timed(["build", src, f"s3://{BUCKET}/b{r}", "-j", "2",
                                            *opts]))
                merged = os.path.join(tmp, f"merged{r}")
                t["merge_local"].append(timed(["merge", *local_parts, merged]))
                before = s3.front_stats()["bytes_to_client"]
                t["merge_s3"].append(timed(["merge", f"s3://{BUCKET}/parts",
                                            f"s3://{BUCKET}/m{r}"]))
                fetched.append(s3.front_stats()["bytes_to_client"] - before)
                ref = store_bytes(local)
                assert download(f"b{r}") == ref, "the S3 build differs from the local one"
                assert download(f"m{r}") == ref, "the S3 merge differs from the local build"
                shutil.rmtree(merged)
                if r:
                    shutil.rmtree(local)
        med = {k: statistics.median(v) for k, v in t.items()}
        print(json.dumps({
            "images": args.images, "shards": n, "repeat": args.repeat,
            "median_s": {k: round(v, 2) for k, v in med.items()},
            "build_s3_over_local": round(med["build_s3"] / med["build_local"], 2),
            "merge_s3_over_local": round(med["merge_s3"] / med["merge_local"], 2),
            "merge_s3_fetched_bytes": statistics.median(fetched),
            "parts_record_bytes": record_bytes,
        }, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
