#!/usr/bin/python3
"""Runs a command in a new network namespace whose loopback is capped to a bandwidth, for the
remote-store benchmarks (servers and clients all on 127.0.0.1 inside it; mounts stay visible
outside, only the network is new).

  netns.py --rate-mbit 100 -- CMD ARGS...   # CMD inside the namespace, its exit status
  netns.py --rate-mbit 100 --self-check     # measure the achieved rate through nginx with curl

The cap is an HTB class on lo (netem is not in this kernel: latency comes from
tests/remote/fault_proxy.py). lo's MTU is set to an Ethernet link's 1500 bytes (--mtu; lo's
own 64 KiB made nginx's answers just over one segment stall for ~40 ms,
docs/notebook/2026-11-23-to-27-remote-stores.md); the burst is at least 64 KiB, 256 KiB by
default. Every byte on lo crosses the cap once, requests included. As root this uses
`unshare -n`, otherwise `unshare -rn` (a user namespace). From Python: run_capped(rate, argv).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

INNER_FLAG = "--inside-namespace"
MIN_BURST_KIB = 64
MIN_MTU, MAX_MTU = 576, 65536


def sh(*args):
    p = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"netns: {' '.join(args)} failed: {p.stderr.strip()}")
    return p.stdout


def shape_loopback(rate_mbit, burst_kib, mtu=1500):
    """Brings lo up with this MTU and, for a rate, caps everything it carries with one HTB
    class."""
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "link", "set", "lo", "mtu", str(mtu))
    if not rate_mbit:
        return
    sh("tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "10")
    sh("tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:10", "htb",
       "rate", f"{rate_mbit}mbit", "ceil", f"{rate_mbit}mbit", "burst", f"{burst_kib}k",
       "cburst", f"{burst_kib}k", "quantum", "65536")


def unshare_command(args):
    unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
    return [*unshare, sys.executable, os.path.abspath(__file__), INNER_FLAG, *args]


def run_capped(rate_mbit, argv, burst_kib=256, mtu=1500, **kw):
    """Runs argv in a new network namespace with lo capped at rate_mbit (None: no cap);
    returns its CompletedProcess (kw goes to subprocess.run)."""
    args = ["--burst-kib", str(burst_kib), "--mtu", str(mtu)]
    if rate_mbit:
        args += ["--rate-mbit", str(rate_mbit)]
    return subprocess.run(unshare_command([*args, "--", *argv]), **kw)


def self_check(rate_mbit, seconds):
    """Downloads a file of about `seconds` at the cap from nginx with curl; returns the report."""
    from remote_servers import Nginx
    with tempfile.TemporaryDirectory(prefix="pcrfs-netns-") as tmp:
        size = int((rate_mbit or 1000) * 1e6 / 8 * seconds)
        with open(os.path.join(tmp, "blob"), "wb") as f:
            f.truncate(size)  # sparse: nginx sends zeros from the page cache
        with Nginx(tmp) as nginx:
            out = sh("curl", "-s", "-o", os.devnull, "-w", "%{size_download} %{time_total}",
                     nginx.url + "/blob")
    got, secs = out.split()
    measured = int(got) * 8 / float(secs) / 1e6
    return {"rate_mbit": rate_mbit, "bytes": int(got), "seconds": round(float(secs), 3),
            "measured_mbit": round(measured, 1),
            "ratio": round(measured / rate_mbit, 3) if rate_mbit else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate-mbit", type=float, help="bandwidth cap of lo (default: none)")
    ap.add_argument("--burst-kib", type=int, default=256)
    ap.add_argument("--mtu", type=int, default=1500, help="lo's MTU (default 1500)")
    ap.add_argument("--self-check", action="store_true",
                    help="measure the achieved rate (curl from nginx) and print it as JSON")
    ap.add_argument("--seconds", type=float, default=3.0, help="self-check download time")
    ap.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.burst_kib < MIN_BURST_KIB:
        ap.error(f"--burst-kib {args.burst_kib}: at least {MIN_BURST_KIB}")
    if not MIN_MTU <= args.mtu <= MAX_MTU:
        ap.error(f"--mtu {args.mtu}: between {MIN_MTU} and {MAX_MTU}")
    if args.rate_mbit is not None and args.rate_mbit <= 0:
        ap.error(f"--rate-mbit {args.rate_mbit}: a positive rate")
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.self_check and not command:
        ap.error("give a command after -- or --self-check")
    if not args.inside_namespace:
        sys.argv[0] = os.path.abspath(__file__)
        os.execvp("unshare", unshare_command(sys.argv[1:]))
    rate = args.rate_mbit
    rate_text = f"{rate:g}" if rate else None
    shape_loopback(rate_text, args.burst_kib, args.mtu)
    if args.self_check:
        t0 = time.monotonic()
        report = self_check(rate, args.seconds)
        report["wall_seconds"] = round(time.monotonic() - t0, 3)
        print(json.dumps(report))
        return 0
    return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main())
