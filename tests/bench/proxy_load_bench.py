#!/usr/bin/python3
"""How many small ranged GETs/s a latency proxy carries (tests/bench/README.md, "The latency
proxy"): nginx on loopback serving a 64 MiB file, the proxy in front adding --latency ms, and
wrk with C keep-alive connections sending random single-range GETs of --range bytes. Per proxy
and connection count: GETs/s, wrk's p50/p99, the proxy's CPU (/proc/PID/stat) and its /__stats.

  flock /var/tmp/pcrfs-bench/bench.lock /usr/bin/python3 tests/bench/proxy_load_bench.py
  ... proxy_load_bench.py --proxies node,python --conns 64,128,192 --latency 20 --seconds 8
  ... proxy_load_bench.py --netns --cap 1000 --range 1024:8192   # in a namespace, answers capped

Needs wrk (`apt-get install wrk`) and node. --netns runs it all in a new network namespace (lo's
MTU 1500, as the remote benchmarks); --cap (with --netns) caps the proxy's answers by HTB as
remote_bench.set_cap does. Results: markdown on stdout, every number in --json.
"""

import argparse
import json
import os
import re
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
from benchlib import fail, log, proc_cpu_seconds  # noqa: E402
from remote_bench import PROXY_KINDS, ProxyProcess, set_cap, url_port  # noqa: E402

INNER_FLAG = "--inside-namespace"
OBJECT = 64 << 20
LUA = """
local lo, hi, size = %d, %d, %d
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end
function init(args)
  math.randomseed(os.time() * 1000 + (id or 0))
end
request = function()
  local len = math.random(lo, hi)
  local off = math.random(0, size - len - 1)
  return wrk.format("GET", "/blob", {["Range"] = "bytes=" .. off .. "-" .. (off + len - 1)})
end
"""


def wrk(url, conns, seconds, threads, script):
    out = subprocess.run(["wrk", "-t", str(threads), "-c", str(conns), "-d", f"{seconds}s",
                          "--latency", "-s", script, url + "/blob"],
                         capture_output=True, text=True).stdout
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not m:
        raise RuntimeError(f"wrk: no result: {out[-500:]}")
    lat = {}
    for pct, value, unit in re.findall(r"\s(50|90|99)%\s+([\d.]+)(us|ms|s)\b", out):
        lat[pct] = float(value) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: (.*)", out)
    return {"req_per_s": float(m.group(1)), "latency_ms": lat,
            "non_2xx": int(bad.group(1)) if bad else 0,
            "socket_errors": sock.group(1) if sock else ""}


def busy(fields):
    return sum(int(x) for x in fields[:3]) + sum(int(x) for x in fields[5:8])


def measure(args, tmp, nginx, kind, script):
    rows = []
    with ProxyProcess(nginx.url, tmp, f"proxy-{kind}", kind) as proxy:
        if args.cap:
            set_cap(args.cap, [url_port(proxy.url)])
        try:
            for c in args.conns:
                proxy.reset(args.latency)
                cpu0 = proc_cpu_seconds(proxy.proc.pid)
                with open("/proc/stat") as f:
                    st0 = f.readline().split()[1:]
                t0 = time.monotonic()
                rec = wrk(proxy.url, c, args.seconds, args.threads, script)
                wall = time.monotonic() - t0
                with open("/proc/stat") as f:
                    st1 = f.readline().split()[1:]
                cpu = proc_cpu_seconds(proxy.proc.pid) - cpu0
                st = proxy.stats()
                total = sum(int(x) for x in st1[:8]) - sum(int(x) for x in st0[:8])
                rec.update(proxy=kind, conns=c, latency=args.latency, cap=args.cap,
                           ideal=c / (args.latency / 1000) if args.latency else None,
                           proxy_cpu_s=round(cpu, 2), proxy_cores=round(cpu / wall, 2),
                           cpu_us_per_get=round(1e6 * cpu / max(1, st["requests"]), 1),
                           proxy_requests=st["requests"], body_bytes=st["bytes_to_client"],
                           mb_per_s=round(st["bytes_to_client"] / wall / 1e6, 1),
                           machine_busy=round((busy(st1) - busy(st0)) / max(1, total), 2),
                           loadavg=benchlib.loadavg())
                log(f"{kind} {c} connections: {rec['req_per_s']:,.0f} GETs/s, p50 "
                    f"{rec['latency_ms'].get('50')} ms, proxy {rec['proxy_cores']} cores")
                rows.append(rec)
        finally:
            if args.cap:
                set_cap(None, ())
    return rows


def report(args, rows):
    where = ("namespace" if args.netns else "host lo") + (
        f", answers capped at {args.cap:g} Mbit/s" if args.cap else "")
    L = [f"## Latency proxy capacity ({where})", "",
         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {benchlib.loadavg()}; "
         f"wrk -t{args.threads}, {args.seconds} s per row, random single-range GETs of "
         f"{args.range[0]}-{args.range[1]} bytes of a 64 MiB file from nginx, {args.latency} "
         "ms added.", "",
         "| proxy | connections | GETs/s | conns / latency | p50 ms | p99 ms | proxy CPU (cores) "
         "| CPU µs per GET | body MB/s | errors |",
         "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for r in rows:
        lat = r["latency_ms"]
        L.append(f"| {r['proxy']} | {r['conns']} | {r['req_per_s']:,.0f} | "
                 f"{'-' if r['ideal'] is None else format(r['ideal'], ',.0f')} | "
                 f"{lat.get('50', 0):.1f} | {lat.get('99', 0):.1f} | {r['proxy_cores']} | "
                 f"{r['cpu_us_per_get']:.0f} | {r['mb_per_s']} | "
                 f"{r['non_2xx']}{' ' + r['socket_errors'] if r['socket_errors'] else ''} |")
    return "\n".join(L) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--proxies", default="python,node")
    ap.add_argument("--conns", default="64,128,192")
    ap.add_argument("--latency", type=int, default=20, help="ms added before each answer")
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2, help="wrk threads")
    ap.add_argument("--range", default="4096:30720", help="LO:HI bytes per GET")
    ap.add_argument("--netns", action="store_true", help="in a new network namespace (root)")
    ap.add_argument("--cap", type=float, help="Mbit/s on the proxy's answers (with --netns)")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--json", help="every number")
    ap.add_argument(INNER_FLAG, action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        args.proxies = [p for p in args.proxies.split(",") if p]
        args.conns = [int(c) for c in args.conns.split(",") if c]
        args.range = [int(x) for x in args.range.split(":")]
    except ValueError:
        fail("--conns N,... / --range LO:HI: integers")
    if any(p not in PROXY_KINDS for p in args.proxies):
        fail(f"--proxies: of {','.join(PROXY_KINDS)}")
    if len(args.range) != 2 or not 0 < args.range[0] <= args.range[1] < OBJECT // 2:
        fail("--range LO:HI: 0 < LO <= HI < 32 MiB")
    if args.cap and not args.netns:
        fail("--cap needs --netns (tc on lo)")
    if not subprocess.run(["sh", "-c", "command -v wrk"], capture_output=True).stdout:
        fail("wrk is not installed (apt-get install wrk)")
    if args.netns and not args.inside_namespace:
        benchlib.warn_unless_bench_lock()
        unshare = ["unshare", "-n"] if os.geteuid() == 0 else ["unshare", "-rn"]
        os.execvp("unshare", [*unshare, sys.executable, os.path.abspath(__file__), INNER_FLAG,
                              *sys.argv[1:]])
    if args.inside_namespace:
        netns.shape_loopback(None, netns.MIN_BURST_KIB, args.mtu)
    else:
        benchlib.warn_unless_bench_lock()
    with tempfile.TemporaryDirectory(prefix="proxy-load-") as tmp:
        with open(os.path.join(tmp, "blob"), "wb") as f:
            f.write(os.urandom(OBJECT))
        script = os.path.join(tmp, "range.lua")
        with open(script, "w") as f:
            f.write(LUA % (args.range[0], args.range[1], OBJECT))
        rows = []
        with Nginx(tmp, workers=2) as nginx:
            for kind in args.proxies:
                rows += measure(args, tmp, nginx, kind, script)
    print(report(args, rows), end="")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
