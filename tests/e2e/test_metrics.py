#!/usr/bin/python3
"""Prometheus metrics of a mount (issue 31): -o metrics serves /metrics, -o metrics_file
rewrites a textfile, -o metrics_label labels every series. A local mount and an HTTP mount
(nginx) are read and scraped; the numbers are checked against the bytes read and nginx's
access log, the text by a strict parser and by Debian's `promtool check metrics`, and a real
Prometheus scrapes the mount on loopback and answers a query through its HTTP API."""

import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import unittest
import urllib.parse
import urllib.request
import json

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "remote"))

from pcrtest import PCR, PCRFS, LoopbackServersCase, Mount, photo, run, save_jpeg  # noqa: E402
from remote_servers import Nginx, free_port  # noqa: E402

PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"


def parse_exposition(text):
    """Parses the Prometheus text format 0.0.4 strictly: every family has # HELP then # TYPE
    before its samples, appears once, and its samples are contiguous and named after it; label
    values are escaped; a series appears once; counters end in _total; histogram buckets are
    cumulative, end with le="+Inf" and match _count. Returns {(name, ((label, value), ...)):
    value} with the labels sorted."""
    series = {}
    families = {}
    family = ftype = None
    help_of = None
    buckets = {}  # (name, labels without le) -> [(le, value)]
    assert text.endswith("\n"), "the text must end with a line feed"
    for n, line in enumerate(text.split("\n")[:-1], 1):
        where = f"line {n}: {line!r}"
        assert line, f"{where}: empty line"
        if line.startswith("#"):
            m = re.fullmatch(rf"# (HELP|TYPE) ({NAME}) (.*)", line)
            assert m, where
            kind, name, rest = m.groups()
            if kind == "HELP":
                assert name not in families, f"{where}: family {name} twice"
                assert re.fullmatch(r"([^\\]|\\\\|\\n)*", rest), f"{where}: bad HELP escape"
                help_of = name
            else:
                assert help_of == name, f"{where}: TYPE without its HELP before"
                assert rest in ("counter", "gauge", "histogram"), where
                families[name] = rest
                family, ftype = name, rest
                if rest == "counter":
                    assert name.endswith("_total"), f"{where}: a counter ends in _total"
            continue
        m = re.fullmatch(rf"({NAME})(?:\{{(.*)\}})? (\S+)", line)
        assert m, f"{where}: not a sample"
        name, body, value = m.groups()
        labels = []
        if body:
            pos = 0
            while pos < len(body):
                lm = re.compile(rf'({LABEL})="((?:[^"\\\n]|\\\\|\\"|\\n)*)"(,|$)').match(body, pos)
                assert lm, f"{where}: bad label at {body[pos:]!r}"
                value_text = re.sub(r"\\(.)", lambda x: "\n" if x.group(1) == "n" else x.group(1),
                                    lm.group(2))
                labels.append((lm.group(1), value_text))
                pos = lm.end()
        names = [k for k, _ in labels]
        assert len(names) == len(set(names)), f"{where}: a label twice"
        assert family is not None, f"{where}: a sample before any TYPE"
        if ftype == "histogram":
            assert name in (family + "_bucket", family + "_sum", family + "_count"), where
        else:
            assert name == family, f"{where}: sample of another family than {family}"
        v = float(value)  # also "+Inf", "NaN"
        key = (name, tuple(sorted(labels)))
        assert key not in series, f"{where}: series twice"
        series[key] = v
        if name.endswith("_bucket") and ftype == "histogram":
            le = dict(labels)["le"]
            rest = tuple(sorted((k, x) for k, x in labels if k != "le"))
            buckets.setdefault((family, rest), []).append((float(le), v))
    for (fam, rest), bs in buckets.items():
        les = [le for le, _ in bs]
        assert les == sorted(les) and les[-1] == math.inf, f"{fam}{rest}: buckets out of order"
        counts = [c for _, c in bs]
        assert counts == sorted(counts), f"{fam}{rest}: buckets not cumulative"
        assert series[(fam + "_count", rest)] == counts[-1], f"{fam}{rest}: _count != +Inf"
        assert (fam + "_sum", rest) in series, f"{fam}{rest}: no _sum"
    return series


def value(series, name, **labels):
    """The value of the one series of `name` whose labels include `labels`."""
    found = [v for (n, ls), v in series.items()
             if n == name and all(dict(ls).get(k) == x for k, x in labels.items())]
    assert len(found) == 1, f"{name}{labels}: {len(found)} series"
    return found[0]


def http(url, method="GET", raw=None, port=None):
    """(status, body) of one request; raw: bytes sent as they are to 127.0.0.1:port."""
    if raw is not None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(raw)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return int(data.split(b" ", 2)[1]), data.split(b"\r\n\r\n", 1)[1]
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers


def read_all(root):
    """Reads every file under root once; returns (files of at least one byte, bytes)."""
    files = total = 0
    for dirpath, _, names in os.walk(root):
        for name in sorted(names):
            with open(os.path.join(dirpath, name), "rb") as f:
                n = len(f.read())
            files += n > 0
            total += n
    return files, total


def source_bytes(src):
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(src) for n in ns)


class MetricsCase(LoopbackServersCase):
    tmp_prefix = "metrics-e2e-"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.src = os.path.join(cls.tmp, "src")
        for i in range(18):
            save_jpeg(photo(96 + 8 * (i % 5), 80 + 4 * (i % 3), seed=i),
                      os.path.join(cls.src, f"class{i % 3}", f"img{i:03d}.jpg"), quality=90)
        with open(os.path.join(cls.src, "notes.txt"), "w") as f:
            f.write("not a jpeg\n")
        cls.www = os.path.join(cls.tmp, "www")
        cls.store = os.path.join(cls.www, "store")
        os.makedirs(cls.www)
        run([PCR, "build", cls.src, cls.store, "--quiet", "--images-per-record", "6"])
        cls.nginx = cls.serve(Nginx(cls.www))

    def metrics_url(self, m):
        found = re.search(r"metrics at (http://\S+/metrics)", m.log())
        self.assertIsNotNone(found, m.log())
        return found.group(1)

    def scrape(self, url):
        status, body, headers = http(url)
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
        return body.decode()

    def promtool(self, text):
        if PROMTOOL is None:
            self.skipTest("promtool missing (apt-get install prometheus)")
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertEqual(p.stdout + p.stderr, "")

    def test_local_mount_counts_what_was_read(self):
        mnt = os.path.join(self.tmp, "mnt-local")
        with Mount(self.store, mnt, "-o", "metrics=127.0.0.1:0,push=0,metrics_label=dataset=toy",
                   "-o", 'metrics_label=note=say "hi"') as m:
            url = self.metrics_url(m)
            files, total = read_all(os.path.join(mnt, "scan3"))
            text = self.scrape(url)
            series = parse_exposition(text)
            self.promtool(text)
            for (name, labels), _ in series.items():
                self.assertEqual(dict(labels)["mount"], os.path.realpath(mnt), name)
                self.assertEqual(dict(labels)["dataset"], "toy", name)
                self.assertEqual(dict(labels)["note"], 'say "hi"', name)
            self.assertIn('note="say \\"hi\\""', text)
            self.assertEqual(value(series, "pcrfs_bytes_served_total", level="3"), total)
            self.assertEqual(value(series, "pcrfs_bytes_served_total", level="5"), 0)
            self.assertEqual(value(series, "pcrfs_files_served_total", level="3"), files)
            src = source_bytes(self.src)
            self.assertLessEqual(abs(value(series, "pcrfs_source_bytes_total", level="3") - src),
                                 files)
            saved = value(series, "pcrfs_bytes_saved_total", level="3")
            self.assertAlmostEqual(saved, src - total, delta=files)
            self.assertGreater(saved, total)  # level 3 is a fraction of the source
            self.assertGreaterEqual(value(series, "pcrfs_fuse_requests_total", op="read"), files)
            self.assertGreater(value(series, "pcrfs_fuse_requests_total", op="lookup"), 0)
            self.assertEqual(value(series, "pcrfs_fuse_requests_total", op="read"),
                             value(series, "pcrfs_fuse_request_duration_seconds_count", op="read"))
            # The records were just written: their bytes come from the page cache, or the disk.
            self.assertGreater(value(series, "pcrfs_store_read_bytes_total", kind="demand") +
                               value(series, "pcrfs_store_page_cache_hit_bytes_total"), 0)
            self.assertEqual(value(series, "pcrfs_damaged_reads_total"), 0)
            self.assertGreater(value(series, "pcrfs_resident_memory_bytes"), 1 << 20)
            # glibc's books of the heap (a sanitizer's allocator keeps its own: not asserted).
            if not os.environ.get("PCRFS_SANITIZE"):
                in_use = value(series, "pcrfs_heap_bytes", state="in_use")
                self.assertGreater(in_use, value(series, "pcrfs_index_memory_bytes"))
                self.assertLess(in_use, value(series, "pcrfs_resident_memory_bytes") + (64 << 20))
                self.assertGreaterEqual(value(series, "pcrfs_heap_bytes", state="free"), 0)
            # What the memory holds: a format 4 index, and the tables of the records read
            # (level 3: a kind byte and, per group, a CRC and an end: 25 bytes per image).
            self.assertGreater(value(series, "pcrfs_index_memory_bytes"), 0)
            self.assertGreaterEqual(value(series, "pcrfs_record_table_bytes"), 25 * files)
            # A local store has no cache folder: the tables stay in memory, none in a file.
            self.assertEqual(value(series, "pcrfs_record_table_file_bytes"), 0)
            self.assertLessEqual(value(series, "pcrfs_piece_cache_bytes", cache="small") +
                                 value(series, "pcrfs_piece_cache_bytes", cache="large"), 256 << 20)
            self.assertEqual(value(series, "pcrfs_build_info", version=re.search(
                r'version="([^"]+)"', text).group(1)), 1)
            self.assertFalse(any(n.startswith("pcrfs_remote_") for n, _ in series))

            # The server's edges: other paths, methods, a HEAD, a request head too large.
            self.assertEqual(http(url.replace("/metrics", "/"))[0], 404)
            self.assertEqual(http(url, method="POST")[0], 405)
            status, body, _ = http(url, method="HEAD")
            self.assertEqual((status, body), (200, b""))
            port = int(urllib.parse.urlparse(url).port)
            huge = b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"
            self.assertEqual(http(None, raw=huge, port=port)[0], 431)
            self.assertEqual(http(None, raw=b"NONSENSE\r\n\r\n", port=port)[0], 400)
            # A client that connects and says nothing does not stop the next scrape for long.
            idle = socket.create_connection(("127.0.0.1", port))
            t0 = time.monotonic()
            self.scrape(url)
            self.assertLess(time.monotonic() - t0, 8)
            idle.close()

            self.check_with_prometheus(port, total)

    def check_with_prometheus(self, port, total):
        if PROMETHEUS is None:
            self.skipTest("prometheus missing (apt-get install prometheus)")
        home = os.path.join(self.tmp, "prometheus")
        os.makedirs(home, exist_ok=True)
        config = os.path.join(home, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: pcrfs\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{port}']\n")
        web = free_port()
        log = open(os.path.join(home, "log"), "w+")
        p = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                              f"--storage.tsdb.path={home}/data",
                              f"--web.listen-address=127.0.0.1:{web}"],
                             stdout=log, stderr=subprocess.STDOUT, cwd=home)
        try:
            query = "http://127.0.0.1:%d/api/v1/query?query=%s" % (
                web, urllib.parse.quote('pcrfs_bytes_served_total{level="3",dataset="toy"}'))
            got = None
            deadline = time.monotonic() + 25
            while time.monotonic() < deadline:
                try:
                    status, body, _ = http(query)
                    result = json.loads(body)["data"]["result"] if status == 200 else []
                    if result:
                        got = result
                        break
                except (OSError, ValueError, KeyError):
                    pass
                time.sleep(0.3)
            log.seek(0)
            self.assertIsNotNone(got, "Prometheus never had the series: " + log.read()[-3000:])
            self.assertEqual(len(got), 1, got)
            self.assertEqual(float(got[0]["value"][1]), total)
            self.assertEqual(got[0]["metric"]["job"], "pcrfs")
            status, body, _ = http("http://127.0.0.1:%d/api/v1/targets" % web)
            target = json.loads(body)["data"]["activeTargets"][0]
            self.assertEqual(target["health"], "up", target)
        finally:
            p.terminate()
            p.wait(timeout=20)
            log.close()

    def test_pushed_files_count_as_served(self):
        """With the defaults (files pushed into the page cache as their record's bytes
        arrive), the served, files and source counters add up to what the readers read: pushed
        files are counted by level as READ replies are, not apart."""
        mnt = os.path.join(self.tmp, "mnt-push")
        with Mount(self.store, mnt, "-o", "metrics=127.0.0.1:0,scans=3") as m:
            url = self.metrics_url(m)
            files, total = read_all(mnt)
            series = parse_exposition(self.scrape(url))
            pushed = value(series, "pcrfs_pushed_bytes_total", level="3")
            self.assertGreater(pushed, 0, "nothing was pushed: the test checks nothing")
            self.assertEqual(value(series, "pcrfs_pushed_bytes_total", level="1"), 0)
            served = value(series, "pcrfs_bytes_served_total", level="3")
            self.assertLessEqual(abs(served - total), total / 100, (served, total, pushed))
            self.assertEqual(value(series, "pcrfs_files_served_total", level="3"), files)
            self.assertLessEqual(abs(value(series, "pcrfs_source_bytes_total", level="3")
                                     - source_bytes(self.src)), source_bytes(self.src) / 100)

    def test_http_mount_counts_requests(self):
        url = self.nginx.url + "/store"
        with self.mount(url, "http", "metrics=0", "push=0") as m:
            murl = self.metrics_url(m)
            self.assertTrue(murl.startswith("http://127.0.0.1:"), murl)
            files, total = read_all(os.path.join(m.mnt, "scan5"))
            # nginx writes its access log within a second: the record GETs it saw are the
            # requests the daemon counts (the metadata was fetched before the fork, apart).
            deadline = time.monotonic() + 10
            while True:
                series = parse_exposition(self.scrape(murl))
                with open(self.nginx.access_log) as f:
                    logged = sum("/store/records/" in line for line in f)
                requests = (value(series, "pcrfs_remote_requests_total", kind="demand") +
                            value(series, "pcrfs_remote_requests_total", kind="background"))
                if requests == logged or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            self.assertEqual(requests, logged)
            self.assertGreater(requests, 0)
            self.assertEqual(value(series, "pcrfs_remote_attempts_total"), requests)
            self.assertEqual(value(series, "pcrfs_remote_request_duration_seconds_count"),
                             requests)
            self.assertEqual(value(series, "pcrfs_remote_first_byte_seconds_count"), requests)
            self.assertGreater(value(series, "pcrfs_remote_first_byte_seconds_sum"), 0)
            self.assertEqual(value(series, "pcrfs_remote_retries_total", reason="server_error"), 0)
            self.assertEqual(value(series, "pcrfs_credentials_info", source="none"), 1)
            self.assertEqual(value(series, "pcrfs_bytes_served_total", level="5"), total)
            self.assertEqual(value(series, "pcrfs_files_served_total", level="5"), files)
            received = (value(series, "pcrfs_remote_received_bytes_total", kind="demand") +
                        value(series, "pcrfs_remote_received_bytes_total", kind="background"))
            self.assertGreater(received, 0)
            self.assertGreater(value(series, "pcrfs_range_cache_inserted_bytes_total"), 0)
            # A remote store's tables keep their rows in a file of the cache folder (level 5:
            # per image 5 CRCs, 5 ends and a row CRC, 64 bytes; the heap keeps a kind byte per
            # image and each table's ~300 bytes: RecordTableTest).
            table_file = value(series, "pcrfs_record_table_file_bytes")
            self.assertGreaterEqual(table_file, 64 * files)
            self.assertEqual(table_file % 64, 0)
            self.promtool(self.scrape(murl))
            # What `pcr top` reads: the same text without labels, under the 64 KiB xattr cap.
            text = os.getxattr(m.mnt, "user.pcrfs.metrics").decode()
            self.assertLess(len(text), 48 << 10)
            self.assertIn("pcrfs_remote_first_byte_seconds_bucket{le=", text)
            self.assertEqual(value(parse_exposition(text), "pcrfs_bytes_served_total",
                                   level="5"), total)

    def test_metrics_file_is_rewritten_atomically(self):
        mnt = os.path.join(self.tmp, "mnt-file")
        prom = os.path.join(self.tmp, "textfile", "pcrfs.prom")
        os.makedirs(os.path.dirname(prom))
        with Mount(self.store, mnt, "-o", f"metrics_file={prom},metrics_interval=1,push=0"):
            files, total = read_all(os.path.join(mnt, "scan10"))
            deadline = time.monotonic() + 10
            parsed = 0
            while True:
                # Every read of the file parses: never a half-written one.
                if os.path.exists(prom):
                    with open(prom) as f:
                        series = parse_exposition(f.read())
                    parsed += 1
                    if value(series, "pcrfs_bytes_served_total", level="10") == total:
                        break
                self.assertLess(time.monotonic(), deadline, "metrics_file never caught up")
                time.sleep(0.05)
            self.assertEqual(value(series, "pcrfs_files_served_total", level="10"), files)
            with open(prom) as f:
                self.promtool(f.read())
        self.assertGreater(parsed, 0)
        # An hour between rewrites: the file written at mount has no reads; the reads reach it
        # only through the last write, as the mount ends.
        os.remove(prom)
        with Mount(self.store, mnt, "-o", f"metrics_file={prom},metrics_interval=3600,push=0"):
            deadline = time.monotonic() + 10
            while not os.path.exists(prom):
                self.assertLess(time.monotonic(), deadline, "metrics_file not written at mount")
                time.sleep(0.05)
            more_files, more = read_all(os.path.join(mnt, "scan1"))
            with open(prom) as f:
                self.assertEqual(value(parse_exposition(f.read()), "pcrfs_bytes_served_total",
                                       level="1"), 0)
        with open(prom) as f:
            series = parse_exposition(f.read())
        self.assertEqual(value(series, "pcrfs_bytes_served_total", level="1"), more)
        self.assertEqual(value(series, "pcrfs_files_served_total", level="1"), more_files)

    def test_pcr_top_shows_the_reads(self):
        mnt = os.path.join(self.tmp, "mnt-top")
        with Mount(self.store, mnt, "-o", "push=0"):
            _, before = read_all(os.path.join(mnt, "scan2", "class0"))  # in no view's delta
            top = subprocess.Popen([PCR, "top", mnt, "--json", "--interval", "1", "--count", "4"],
                                   stdout=subprocess.PIPE, text=True)
            try:
                views = [json.loads(top.stdout.readline())]  # two samples taken: read now
                files, total = read_all(os.path.join(mnt, "scan2", "class1"))
                views += [json.loads(line) for line in top.stdout]
                self.assertEqual(top.wait(timeout=30), 0)
            finally:
                top.kill()
                top.wait()
                top.stdout.close()
            self.assertEqual(len(views), 4)
            level2 = [v["levels"].get("2", {"bytes": 0, "files": 0}) for v in views[1:]]
            self.assertEqual(sum(l["bytes"] for l in level2), total)
            self.assertEqual(sum(l["files"] for l in level2), files)
            self.assertEqual(views[0]["levels"], {})
            self.assertEqual(views[-1]["bytes_served_total"], before + total)
            busy = [v for v in views if v["levels"]]
            self.assertGreater(busy[0]["saved_ratio"], 0.5)  # level 2: a fifth of the source
            self.assertGreater(busy[0]["fuse_reads_per_second"], 0)
            self.assertEqual(views[-1]["origin"], "store")
            # On a terminal: one screen, redrawn in place.
            screen = subprocess.run(["script", "-qec", f"{PCR} top {mnt} -n 1 -i 0.2", "/dev/null"],
                                    capture_output=True, text=True, timeout=30)
            self.assertEqual(screen.returncode, 0, screen.stdout + screen.stderr)
            self.assertIn("\x1b[H\x1b[2J", screen.stdout)
            self.assertIn("saved against the source", screen.stdout)
            self.assertIn("piece cache hit ratio", screen.stdout)
        p = subprocess.run([PCR, "top", self.tmp, "--count", "1"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(p.stderr.strip(), f"pcr top: {self.tmp}: not the root of a pcrfs mount")

    def test_bad_options_are_one_line_and_exit_1(self):
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        mnt = os.path.join(self.tmp, "mnt-bad")
        os.makedirs(mnt, exist_ok=True)
        cases = [
            (f"metrics=127.0.0.1:{port}", f"-o metrics=127.0.0.1:{port}: cannot listen"),
            ("metrics=99999", "-o metrics=99999: expected PORT or ADDR:PORT"),
            ("metrics=example.com:80", "-o metrics=example.com:80: expected"),
            ("metrics=0,metrics_label=9x=y", "-o metrics_label=9x=y: expected NAME=VALUE"),
            ("metrics=0,metrics_label=mount=y", "-o metrics_label=mount=y: expected"),
            ("metrics=0,metrics_label=a=1,metrics_label=a=2", "label a given twice"),
            ("metrics_label=a=1", "-o metrics_label: needs -o metrics or -o metrics_file"),
            (f"metrics_file={self.tmp}/no/such/x.prom", "-o metrics_file="),
        ]
        try:
            for option, want in cases:
                p = subprocess.run([PCRFS, self.store, mnt, "-f", "-o", option],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 1, option + ": " + p.stderr)
                self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
                self.assertIn(want, p.stderr, option)
        finally:
            busy.close()


if __name__ == "__main__":
    unittest.main()
