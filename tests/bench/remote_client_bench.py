#!/usr/bin/python3
"""Throughput and latency of the remote client (remote/, through remote/pcr_fetch_test bench)
against nginx on loopback, directly and through the fault proxy with added latency: random
ranged GETs with a fixed number in flight. Run under the benchmark lock:

  flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/remote_client_bench.py \\
      build/remote/pcr_fetch_test
"""

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from remote_servers import FaultProxy, Nginx  # noqa: E402

SIZE = 256 << 20


def bench(fetch, url, requests, length, in_flight):
    p = subprocess.run([fetch, "bench", url, "object.bin", str(SIZE), str(requests), str(length),
                        str(in_flight)], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "no_proxy": "127.0.0.1"})
    out = json.loads(p.stdout)
    s = out["stats"]
    return (f"{length >> 10:>6} KiB {in_flight:>4} {out['requests_per_s']:>10.0f} "
            f"{out['mbit_per_s']:>9.0f} {s['latency_ms']['p50']:>5} {s['latency_ms']['p99']:>5}"
            f" {'ok' if out['ok'] else 'FAILED'}")


def main():
    fetch = sys.argv[1] if len(sys.argv) > 1 else "build/remote/pcr_fetch_test"
    with tempfile.TemporaryDirectory(prefix="remote-client-bench-") as root:
        with open(os.path.join(root, "object.bin"), "wb") as f:
            f.write(os.urandom(SIZE))
        header = f"{'range':>10} {'q':>4} {'requests/s':>10} {'Mbit/s':>9} {'p50':>5} {'p99':>5}"
        with Nginx(root) as n:
            print(f"nginx direct ({n.url})\n{header}")
            for length, q, reqs in [(4096, 1, 3000), (4096, 16, 20000), (4096, 64, 20000),
                                    (131072, 16, 5000), (8 << 20, 1, 40), (8 << 20, 4, 80)]:
                print(bench(fetch, n.url, reqs, length, q), flush=True)
            with FaultProxy(n.url) as proxy:
                proxy.fault(fault="latency", ms=20)
                print(f"through the fault proxy, +20 ms per request\n{header}")
                for length, q, reqs in [(4096, 1, 100), (4096, 16, 1000), (4096, 64, 2000),
                                        (8 << 20, 4, 40)]:
                    print(bench(fetch, proxy.url, reqs, length, q), flush=True)


if __name__ == "__main__":
    main()
