#!/usr/bin/python3
"""The benchmarks' latency proxy (tests/remote/latency_proxy.js) with real requests on loopback:
in front of nginx it adds its latency before each answer (to many requests at once, not one after
the other), passes requests through unchanged (Range, multi-range, Host, Authorization, other
headers, bodies) on kept-alive connections, and counts requests, statuses and body bytes in
/__stats as fault_proxy.py does (what tests/bench/remote_bench.py's ProxyProcess reads)."""

import http.client
import http.server
import json
import os
import re
import shutil
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from remote_servers import Nginx, die_with_parent, stop_process, write_random_files  # noqa: E402

PROXY_JS = os.path.join(HERE, "latency_proxy.js")
TOKEN = "bench-token"


class LatencyProxy:
    """latency_proxy.js in its own process, in front of upstream."""

    def __init__(self, upstream, latency_ms=0):
        self.upstream, self.latency_ms = upstream, latency_ms

    def __enter__(self):
        self.tmp = tempfile.mkdtemp(prefix="latency-proxy-test-")
        ready = os.path.join(self.tmp, "ready.json")
        self.proc = subprocess.Popen(["node", PROXY_JS, "--upstream", self.upstream,
                                      "--latency", str(self.latency_ms), "--ready-file", ready],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     preexec_fn=die_with_parent)
        deadline = time.monotonic() + 20
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"latency_proxy.js did not start: "
                                     f"{self.proc.stderr.read().decode(errors='replace')}")
            time.sleep(0.02)
        with open(ready) as f:
            info = json.load(f)
        self.url = info["url"]
        assert info["pid"] == self.proc.pid
        return self

    def __exit__(self, *exc):
        stop_process(self.proc)
        self.proc.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def control(self, method, path, obj=None):
        data = json.dumps(obj).encode() if obj is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            with e:
                return e.code, json.loads(e.read())

    def stats(self):
        return self.control("GET", "/__stats")[1]


class EchoHandler(http.server.BaseHTTPRequestHandler):
    """Answers every request with JSON of what it received: method, path, headers as sent."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        out = json.dumps({"method": self.command, "path": self.path,
                          "headers": list(self.headers.items()),
                          "body": body.decode(errors="replace")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.send_header("X-Echo", "yes")
        self.end_headers()
        self.wfile.write(out)

    do_PUT = do_POST = do_GET


class EchoServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def request(url, path, headers=None, method="GET", body=None, conn=None):
    """(status, headers, body, seconds) of one request, on conn when given (keep-alive)."""
    parts = urllib.parse.urlsplit(url)
    own = conn is None
    conn = conn or http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    t0 = time.monotonic()
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, r.headers, data, time.monotonic() - t0
    finally:
        if own:
            conn.close()


class LatencyProxyTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("node"):
            raise AssertionError("node is not installed (tests/remote/install.sh)")
        cls.root = tempfile.mkdtemp(prefix="latency-proxy-root-")
        cls.files = write_random_files(cls.root, {"blob.bin": 1 << 20, "small.bin": 5000}, 7)
        cls.nginx = Nginx(cls.root).__enter__()
        cls.locked = Nginx(cls.root, bearer_token=TOKEN).__enter__()

    @classmethod
    def tearDownClass(cls):
        cls.nginx.__exit__(None, None, None)
        cls.locked.__exit__(None, None, None)
        shutil.rmtree(cls.root, ignore_errors=True)

    def test_ranges_pass_through_with_the_latency_added_and_bytes_counted(self):
        blob = self.files["blob.bin"]
        with LatencyProxy(self.nginx.url, latency_ms=150) as p:
            st, h, body, secs = request(p.url, "/blob.bin", {"Range": "bytes=1000-30999"})
            self.assertEqual((st, body), (206, blob[1000:31000]))
            self.assertEqual(h["Content-Range"], f"bytes 1000-30999/{len(blob)}")
            self.assertGreaterEqual(secs, 0.150)
            # Multi-range: nginx's multipart answer, part by part.
            st, h, multi, _ = request(p.url, "/blob.bin", {"Range": "bytes=0-9,500000-504095"})
            self.assertEqual(st, 206)
            boundary = re.search(r"boundary=(\S+)", h["Content-Type"]).group(1)
            self.assertEqual(int(h["Content-Length"]), len(multi))
            parts = [x for x in multi.split(b"--" + boundary.encode()) if b"\r\n\r\n" in x]
            got = [x.split(b"\r\n\r\n", 1)[1][:-2] for x in parts]
            self.assertEqual(got, [blob[0:10], blob[500000:504096]])
            st, h, body, _ = request(p.url, "/blob.bin", method="HEAD")
            self.assertEqual((st, body, h["Content-Length"]), (200, b"", str(len(blob))))
            st, _, body404, _ = request(p.url, "/missing")
            self.assertEqual(st, 404)
            s = p.stats()
            self.assertEqual(s["requests"], 4)
            self.assertEqual(s["upstream_requests"], 4)
            self.assertEqual(s["statuses"], {"206": 2, "200": 1, "404": 1})
            self.assertEqual(s["bytes_to_client"], 30000 + len(multi) + len(body404))
            self.assertEqual(s["bytes_from_upstream"], s["bytes_to_client"])
            self.assertEqual(s["faults"], {"latency": 4})
            self.assertEqual((s["latency_ms"], s["in_flight"]), (150, 0))

    def test_many_requests_wait_at_once_on_kept_alive_connections(self):
        small = self.files["small.bin"]
        n, latency = 48, 300
        with LatencyProxy(self.nginx.url, latency_ms=latency) as p:
            parts = urllib.parse.urlsplit(p.url)
            conns = [http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
                     for _ in range(n)]
            results = [None] * n

            def run(i):
                out = []
                for j in range(3):  # three in a row on the same connection
                    st, _, body, _ = request(p.url, "/small.bin",
                                             {"Range": f"bytes={i}-{i + 99}"}, conn=conns[i])
                    out.append(st == 206 and body == small[i:i + 100])
                results[i] = out

            t0 = time.monotonic()
            threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            secs = time.monotonic() - t0
            for c in conns:
                c.close()
            self.assertEqual(results, [[True] * 3] * n)
            # One after the other: 48 x 3 x 0.3 s = 43 s; at once: 3 x 0.3 s.
            self.assertGreaterEqual(secs, 3 * latency / 1000)
            self.assertLess(secs, 10)
            s = p.stats()
            self.assertEqual(s["requests"], 3 * n)
            self.assertEqual(s["bytes_to_client"], 3 * n * 100)
            self.assertGreater(s["max_in_flight"], n // 2)

    def test_headers_host_and_bodies_are_passed_unchanged(self):
        echo = EchoServer(("127.0.0.1", 0), EchoHandler)
        threading.Thread(target=echo.serve_forever, daemon=True).start()
        try:
            upstream = f"http://127.0.0.1:{echo.server_address[1]}/prefix"
            with LatencyProxy(upstream) as p:
                sent = {"Host": "bucket.s3.example:9000", "Authorization": "AWS4-HMAC-SHA256 x",
                        "Range": "bytes=0-9,20-29", "x-amz-date": "20261129T000000Z",
                        "X-Odd-Case": "Value"}
                st, h, body, _ = request(p.url, "/key/a%20b?x=1&y=2", sent)
                self.assertEqual((st, h["X-Echo"]), (200, "yes"))
                got = json.loads(body)
                self.assertEqual(got["path"], "/prefix/key/a%20b?x=1&y=2")
                for name, value in sent.items():
                    self.assertIn([name, value], got["headers"])
                st, _, body, _ = request(p.url, "/put", {"Content-Type": "text/plain"},
                                         method="PUT", body=b"payload")
                got = json.loads(body)
                self.assertEqual((st, got["method"], got["body"]), (200, "PUT", "payload"))
        finally:
            echo.shutdown()
            echo.server_close()

    def test_authorization_reaches_the_origin(self):
        with LatencyProxy(self.locked.url) as p:
            st, _, _, _ = request(p.url, "/small.bin")
            self.assertEqual(st, 401)
            st, _, body, _ = request(p.url, "/small.bin", {"Authorization": f"Bearer {TOKEN}"})
            self.assertEqual((st, body), (200, self.files["small.bin"]))

    def test_control_api_reset_latency_rules_and_refusals(self):
        with LatencyProxy(self.nginx.url) as p:
            request(p.url, "/small.bin")
            self.assertEqual(p.stats()["requests"], 1)
            self.assertEqual(p.control("POST", "/__reset", {}), (200, {"ok": True}))
            self.assertEqual(p.stats()["requests"], 0)
            # As remote_bench's ProxyProcess.reset(latency) does it.
            st, out = p.control("POST", "/__fault", {"fault": "latency", "ms": 200})
            self.assertEqual((st, out), (200, {"ids": [1]}))
            _, _, _, secs = request(p.url, "/small.bin")
            self.assertGreaterEqual(secs, 0.2)
            self.assertEqual(p.stats()["latency_ms"], 200)
            for bad in ({"fault": "status", "status": 503}, {"fault": "latency", "ms": 5,
                                                              "count": 1}, [1]):
                st, out = p.control("POST", "/__fault", bad)
                self.assertEqual(st, 400, bad)
                self.assertIn("bad fault rule", out["error"])
            p.control("POST", "/__reset", {})
            _, _, _, secs = request(p.url, "/small.bin")
            self.assertLess(secs, 0.2)
            self.assertEqual(p.control("GET", "/__nothing")[0], 404)

    def test_a_dead_upstream_gives_502_counted(self):
        with Nginx(self.root) as n:
            url = n.url
        with LatencyProxy(url) as p:
            st, _, body, _ = request(p.url, "/small.bin")
            self.assertEqual(st, 502)
            self.assertIn(b"latency proxy: upstream", body)
            s = p.stats()
            self.assertEqual((s["statuses"], s["upstream_errors"], s["bytes_to_client"]),
                             ({"502": 1}, 1, len(body)))

    def test_bad_arguments_are_one_line_errors(self):
        for argv in ([], ["--upstream", "https://x"], ["--upstream", "http://x", "--latency",
                                                        "-1"]):
            r = subprocess.run(["node", PROXY_JS, *argv], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(r.returncode, 2, argv)
            self.assertTrue(r.stderr.startswith("latency_proxy: "), r.stderr)


if __name__ == "__main__":
    unittest.main()
