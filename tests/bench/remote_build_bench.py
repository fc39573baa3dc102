#!/usr/bin/python3
"""remote_build_bench.py: `pcr build` from remote sources against the same images locally.

usage: flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/remote_build_bench.py
           [--images N] [--pcr PATH] [--repeat R]

Generates N JPEGs (320x240, quality 90) in 10 folders, a tar of them, and times (median of R
runs, --quality-sample 0, -j 2): a local folder build, a local tar build, the tar at an http://
URL (nginx behind the fault proxy, which counts the bytes the builder fetched) and the objects
under an s3:// prefix (the S3 test server: s3rver behind a front that checks every SigV4
signature). Every remote store is compared with its local twin (provenance.json aside). Needs
tests/remote/install.sh. The servers are the tests' own, on loopback: the times say what the
builder costs over HTTP, not what a real object store does.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tarfile
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import REPO, warn_unless_bench_lock  # noqa: E402

sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
sys.path.insert(0, os.path.join(REPO, "tests", "remote"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=2000)
    ap.add_argument("--pcr", default=os.environ.get("PCR") or
                    os.path.join(REPO, "build", "mount-tools", "pcr"))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    warn_unless_bench_lock()
    os.environ["PCR"] = args.pcr
    from pcrtest import photo, remote_env, run, save_jpeg, store_bytes
    from remote_servers import FaultProxy, Nginx, S3Server

    tmp = tempfile.mkdtemp(prefix="remote-build-bench-")
    try:
        src = os.path.join(tmp, "src")
        for i in range(args.images):
            save_jpeg(photo(320, 240, seed=i), os.path.join(src, f"c{i % 10}", f"{i:05d}.jpg"),
                      quality=90)
        www = os.path.join(tmp, "www")
        os.makedirs(www)
        tar = os.path.join(www, "src.tar")
        with tarfile.open(tar, "w") as t:
            t.add(src, arcname=".")
        env = remote_env(tmp)
        opts = ["--quiet", "--quality-sample", "0", "-j", "2"]

        def timed(source, name, e=env):
            times = []
            for r in range(args.repeat):
                store = os.path.join(tmp, f"{name}{r}")
                t0 = time.monotonic()
                run([args.pcr, "build", source, store, *opts], env=e)
                times.append(time.monotonic() - t0)
                if r:
                    shutil.rmtree(store)
            return statistics.median(times), os.path.join(tmp, f"{name}0")

        results = {"images": args.images, "tar_bytes": os.path.getsize(tar)}
        results["local_folder_s"], local = timed(src, "local")
        results["local_tar_s"], local_tar = timed(tar, "localtar")
        with Nginx(www) as nginx, FaultProxy(nginx.url) as proxy:
            results["http_tar_s"], http_store = timed(f"{proxy.url}/src.tar", "http")
            with urllib.request.urlopen(f"{proxy.url}/__stats") as f:
                stats = json.load(f)
            results["http_requests_per_build"] = stats["requests"] / args.repeat
            results["http_bytes_per_build"] = stats["bytes_to_client"] / args.repeat
        assert store_bytes(http_store) == store_bytes(local_tar), "http tar store differs"
        with S3Server(None, "bench", "AKIDBENCH", "bench/secret") as s3:
            s3.upload(src, prefix="train")
            e = dict(env, AWS_ACCESS_KEY_ID="AKIDBENCH", AWS_SECRET_ACCESS_KEY="bench/secret",
                     AWS_ENDPOINT_URL=s3.endpoint)
            results["s3_prefix_s"], s3_store = timed("s3://bench/train", "s3", e)
        # Object mtimes differ from the local files' here: compare the records only.
        a, b = store_bytes(local), store_bytes(s3_store)
        assert {k: v for k, v in a.items() if k.startswith("records/")} == \
            {k: v for k, v in b.items() if k.startswith("records/")}, "s3 records differ"
        print(json.dumps({k: round(v, 2) if isinstance(v, float) else v
                          for k, v in results.items()}, indent=1))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
