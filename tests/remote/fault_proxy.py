"""A fault-injecting HTTP/1.1 proxy for the remote-store tests (tests/remote/README.md).

It sits between a client (pcrfs) and an origin (nginx or the S3 front), passes every request
header through unchanged (Host, Authorization, Range, x-amz-*: signatures still verify upstream),
and injects faults chosen at runtime through a control API on the same port:

  POST /__fault   JSON rule or {"rules": [rule, ...]}: adds rules, answers their ids
  GET  /__fault   the active rules and how often each fired
  GET  /__stats   requests, bytes sent to the client, per-status and per-fault counts
  GET  /__requests  the last requests (method, path, range, status, body bytes, faults)
  POST /__reset   removes every rule and zeroes the stats

A rule: {"fault": KIND, ...parameters, ...selectors}. Kinds:
  latency   "ms": added before the response (adds up with every other matching rule)
  status    "status": 503/429/500/404/403/..., "retry_after": optional header value; the request
            never reaches the origin, the body is S3's XML error for that status
  reset     connection reset (RST): "after_bytes" of the body (default: none, not even headers)
  truncate  "bytes": send the headers (with the true length) and this many body bytes, then close
  stall     "after_bytes" (default 0) of the body, then a pause of "ms", then the rest
  full      a 200 with the whole object instead of a 206 (the Range header is removed)
  change    a changed object: "what" is a list of "etag", "total" (Content-Range total + 1),
            "bytes" (the first body byte flipped); default all three
Selectors: "count": N (the next N matching requests), "probability": p with "seed" (a seeded
random choice per matching request), "path": regex searched in the request path, "method".
Without count or probability a rule applies to every matching request until /__reset.

A header the proxy removes (Range for "full", conditionals for "change") is listed in the
request header x-fault-proxy-removed as JSON {name: value}, so the S3 front can still check the
signature the client computed.
"""

import http.client
import http.server
import json
import random
import re
import socket
import socketserver
import struct
import threading
import time
import urllib.parse
from collections import Counter, deque

CONTROL_PREFIX = "/__"
REMOVED_HEADER = "x-fault-proxy-removed"
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate",
              "proxy-authorization", "te", "trailer", "trailers", "transfer-encoding", "upgrade"}
KINDS = {"latency", "status", "reset", "truncate", "stall", "full", "change"}
S3_ERROR_CODES = {400: "BadRequest", 403: "AccessDenied", 404: "NoSuchKey", 408: "RequestTimeout",
                  429: "TooManyRequests", 500: "InternalError", 502: "BadGateway",
                  503: "SlowDown", 504: "GatewayTimeout"}
REQUEST_LOG_LIMIT = 20000
COPY_CHUNK = 256 * 1024


class RuleError(ValueError):
    pass


class Rule:
    """One fault and the requests it applies to. REQUIRES: the proxy's lock for apply()."""

    def __init__(self, rule_id, spec):
        if not isinstance(spec, dict):
            raise RuleError("a rule is a JSON object")
        self.id = rule_id
        self.spec = dict(spec)
        self.kind = spec.get("fault")
        if self.kind not in KINDS:
            raise RuleError(f"unknown fault {self.kind!r}: one of {sorted(KINDS)}")
        known = {"fault", "ms", "status", "retry_after", "after_bytes", "bytes", "what", "count",
                 "probability", "seed", "path", "method"}
        unknown = set(spec) - known
        if unknown:
            raise RuleError(f"unknown rule fields {sorted(unknown)}")
        self.ms = float(spec.get("ms", 0))
        self.status = int(spec.get("status", 503))
        self.retry_after = spec.get("retry_after")
        self.after_bytes = spec.get("after_bytes")
        self.bytes = int(spec.get("bytes", 0))
        if self.after_bytes is not None:
            self.after_bytes = int(self.after_bytes)
        if self.ms < 0 or self.bytes < 0 or (self.after_bytes or 0) < 0:
            raise RuleError("ms, bytes and after_bytes are not negative")
        self.what = set(spec.get("what", ["etag", "total", "bytes"]))
        if not self.what <= {"etag", "total", "bytes"}:
            raise RuleError(f"change: unknown 'what' {sorted(self.what)}")
        if self.kind == "status" and not 100 <= self.status <= 599:
            raise RuleError(f"status {self.status} is not an HTTP status")
        self.remaining = spec.get("count")
        if self.remaining is not None:
            self.remaining = int(self.remaining)
        self.probability = spec.get("probability")
        if self.probability is not None:
            self.probability = float(self.probability)
            if not 0 <= self.probability <= 1:
                raise RuleError(f"probability {self.probability} is not in [0, 1]")
        self.rng = random.Random(spec.get("seed", 0))
        self.path = re.compile(spec["path"]) if "path" in spec else None
        self.method = spec.get("method")
        self.fired = 0

    def applies(self, method, path):
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.method is not None and method != self.method:
            return False
        if self.path is not None and not self.path.search(path):
            return False
        if self.probability is not None and self.rng.random() >= self.probability:
            return False
        if self.remaining is not None:
            self.remaining -= 1
        self.fired += 1
        return True

    def describe(self):
        return {"id": self.id, **self.spec, "fired": self.fired, "remaining": self.remaining}


class Plan:
    """What happens to one request: summed latency and at most one other fault."""

    def __init__(self):
        self.latency_ms = 0.0
        self.action = None  # a Rule of a kind other than latency
        self.names = []


class ProxyState:
    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []  # GUARDED_BY(lock)
        self.next_id = 1  # GUARDED_BY(lock)
        self.reset_stats()

    def reset_stats(self):
        self.requests = 0
        self.bytes_to_client = 0
        self.bytes_from_upstream = 0
        self.upstream_requests = 0
        self.statuses = Counter()
        self.faults = Counter()
        self.log = deque(maxlen=REQUEST_LOG_LIMIT)

    def add_rules(self, specs):
        with self.lock:
            rules = []
            for spec in specs:
                rules.append(Rule(self.next_id + len(rules), spec))
            self.next_id += len(rules)
            self.rules.extend(rules)
            return [r.id for r in rules]

    def plan(self, method, path):
        plan = Plan()
        with self.lock:
            self.requests += 1
            for rule in self.rules:
                if rule.kind != "latency" and plan.action is not None:
                    continue
                if not rule.applies(method, path):
                    continue
                self.faults[rule.kind] += 1
                plan.names.append(rule.kind)
                if rule.kind == "latency":
                    plan.latency_ms += rule.ms
                else:
                    plan.action = rule
        return plan

    # Counts are taken before the client can see what they count (headers, each write), so a
    # client that has its answer finds it in /__stats.

    def begin(self, entry):
        with self.lock:
            self.log.append(entry)

    def count_status(self, entry, status):
        with self.lock:
            entry["status"] = status
            self.statuses[str(status)] += 1

    def count_bytes(self, entry, n, cut=None):
        with self.lock:
            entry["bytes"] += n
            self.bytes_to_client += n
            if cut:
                entry["cut"] = cut

    def stats(self):
        with self.lock:
            return {"requests": self.requests, "bytes_to_client": self.bytes_to_client,
                    "bytes_from_upstream": self.bytes_from_upstream,
                    "upstream_requests": self.upstream_requests,
                    "statuses": dict(self.statuses), "faults": dict(self.faults)}


def s3_error_body(status, path):
    code = S3_ERROR_CODES.get(status, "InjectedFault")
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
            f'<Message>injected by the fault proxy</Message><Resource>{path}</Resource>'
            f'<RequestId>fault-proxy</RequestId></Error>').encode()


def changed_etag(value):
    if value.endswith('"'):
        return value[:-1] + '-changed"'
    return value + "-changed"


def changed_content_range(value):
    m = re.fullmatch(r"bytes (\d+-\d+|\*)/(\d+)", value.strip())
    if not m:
        return value
    return f"bytes {m.group(1)}/{int(m.group(2)) + 1}"


class AbortConnection(Exception):
    """The fault ends the client connection; the handler must not write anything more."""


class ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pcrfs-fault-proxy"
    # The request line and headers; a slow client must not block the proxy forever.
    timeout = 300

    def setup(self):
        super().setup()
        self.upstream = None  # one keep-alive upstream connection per client connection
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def finish(self):
        if self.upstream is not None:
            self.upstream.close()
        try:
            super().finish()
        except (OSError, ValueError):  # the connection was reset on purpose
            pass

    def log_message(self, fmt, *args):  # quiet: the stats and request log say what happened
        pass

    def do_GET(self):
        self.dispatch()

    do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = do_GET

    def dispatch(self):
        try:
            if self.path.startswith(CONTROL_PREFIX):
                self.control()
            else:
                self.proxy()
        except AbortConnection:
            self.close_connection = True
        except (ConnectionError, socket.timeout, BrokenPipeError):
            self.close_connection = True

    # ----- control API -----

    def reply_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def control(self):
        state = self.server.state
        body = self.read_request_body()
        route = (self.command, urllib.parse.urlsplit(self.path).path)
        if route == ("POST", "/__fault"):
            try:
                spec = json.loads(body or b"{}")
                specs = spec["rules"] if isinstance(spec, dict) and "rules" in spec else [spec]
                if not isinstance(specs, list):
                    raise RuleError("'rules' is a list")
                ids = state.add_rules(specs)
            except (ValueError, re.error, TypeError, KeyError) as e:
                self.reply_json(400, {"error": f"bad fault rule: {e}"})
                return
            self.reply_json(200, {"ids": ids})
        elif route == ("GET", "/__fault"):
            with state.lock:
                self.reply_json(200, {"rules": [r.describe() for r in state.rules]})
        elif route == ("GET", "/__stats"):
            self.reply_json(200, state.stats())
        elif route == ("GET", "/__requests"):
            with state.lock:
                entries = list(state.log)
            self.reply_json(200, {"requests": entries})
        elif route == ("POST", "/__reset"):
            with state.lock:
                state.rules = []
                state.reset_stats()
            self.reply_json(200, {"ok": True})
        else:
            self.reply_json(404, {"error": f"no control endpoint {self.command} {self.path}"})

    # ----- proxying -----

    def read_request_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked_body()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def read_chunked_body(self):
        out = bytearray()
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return bytes(out)
            out += self.rfile.read(size)
            self.rfile.readline()

    def proxy(self):
        state = self.server.state
        body = self.read_request_body()
        plan = state.plan(self.command, self.path)
        # status: what the client got ("reset": no response at all); cut: a body cut short.
        entry = {"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                 "status": None, "bytes": 0, "faults": plan.names, "cut": None}
        state.begin(entry)
        if plan.latency_ms > 0:
            time.sleep(plan.latency_ms / 1000.0)
        rule = plan.action
        kind = rule.kind if rule else None
        if kind == "status":
            self.send_injected_status(rule, entry)
            return
        if kind == "reset" and not rule.after_bytes:
            state.count_status(entry, "reset")
            self.reset_client()
        headers = self.upstream_headers(rule)
        try:
            response = self.forward(headers, body)
        except OSError as e:
            self.send_bad_gateway(e, entry)
            return
        self.relay(response, rule, entry)

    def upstream_headers(self, rule):
        headers = []
        removed = {}
        for name, value in self.headers.items():
            lname = name.lower()
            # The proxy answered any Expect: 100-continue itself and has the whole body.
            if lname in HOP_BY_HOP or lname in ("content-length", "expect"):
                continue
            drop = False
            if rule is not None and rule.kind == "full" and lname == "range":
                drop = True
            if (rule is not None and rule.kind == "change" and "etag" in rule.what and
                    lname in ("if-none-match", "if-match", "if-modified-since", "if-range")):
                drop = True
            if drop:
                removed[lname] = value
            else:
                headers.append((name, value))
        if removed:
            headers.append((REMOVED_HEADER, json.dumps(removed)))
        return headers

    def forward(self, headers, body):
        """Sends the request upstream on this connection's keep-alive connection; one retry on a
        fresh connection when the kept one was closed by the origin."""
        server = self.server
        path = server.upstream_prefix + self.path
        for attempt in range(2):
            if self.upstream is None:
                self.upstream = http.client.HTTPConnection(server.upstream_host,
                                                           server.upstream_port, timeout=300)
            try:
                self.upstream.putrequest(self.command, path, skip_host=True,
                                         skip_accept_encoding=True)
                for name, value in headers:
                    self.upstream.putheader(name, value)
                if body or self.command in ("PUT", "POST"):
                    self.upstream.putheader("Content-Length", str(len(body)))
                self.upstream.endheaders(body if body else None)
                response = self.upstream.getresponse()
                with server.state.lock:
                    server.state.upstream_requests += 1
                return response
            except (http.client.RemoteDisconnected, ConnectionError, http.client.BadStatusLine):
                self.upstream.close()
                self.upstream = None
                if attempt == 1:
                    raise
        raise AssertionError("unreachable")

    def relay(self, response, rule, entry):
        kind = rule.kind if rule else None
        status = response.status
        headers = [(n, v) for n, v in response.getheaders() if n.lower() not in HOP_BY_HOP]
        if kind == "change":
            headers = self.change_headers(headers, rule)
        length = response.getheader("Content-Length")
        chunked = length is None and self.command != "HEAD" and status not in (204, 304)
        if chunked:  # small bodies (S3 errors, listings): buffer them to give a length
            data = response.read()
            headers = [(n, v) for n, v in headers if n.lower() != "content-length"]
            headers.append(("Content-Length", str(len(data))))
            length = len(data)
        else:
            data = None
            length = int(length or 0)
        self.server.state.count_status(entry, status)
        self.send_response_only(status)
        for name, value in headers:
            self.send_header(name, value)
        if response.will_close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command == "HEAD" or status in (204, 304):
            response.read()
            return
        limit = None
        if kind == "reset":
            limit = rule.after_bytes
        elif kind == "truncate":
            limit = rule.bytes
        flip = kind == "change" and "bytes" in rule.what
        stall_at = (rule.after_bytes or 0) if kind == "stall" else None
        sent = 0
        while sent < length:
            if data is not None:
                chunk = data[sent:sent + COPY_CHUNK]
            else:
                chunk = response.read(min(COPY_CHUNK, length - sent))
            if not chunk:
                break  # the origin sent less than it announced: so does the proxy
            with self.server.state.lock:
                self.server.state.bytes_from_upstream += len(chunk)
            if flip and sent == 0:
                chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
            if kind == "stall" and stall_at is not None and sent + len(chunk) >= stall_at:
                head, chunk = chunk[:stall_at - sent], chunk[stall_at - sent:]
                self.server.state.count_bytes(entry, len(head))
                self.wfile.write(head)
                self.wfile.flush()
                sent += len(head)
                time.sleep(rule.ms / 1000.0)
                stall_at = None
            if limit is not None and sent + len(chunk) >= limit:
                chunk = chunk[:limit - sent]
                sent += len(chunk)
                self.server.state.count_bytes(entry, len(chunk),
                                              cut=f"{kind} after {sent} body bytes")
                self.wfile.write(chunk)
                if kind == "reset":
                    self.reset_client()
                self.wfile.flush()
                raise AbortConnection()
            self.server.state.count_bytes(entry, len(chunk))
            self.wfile.write(chunk)
            sent += len(chunk)
        if sent < length:
            raise AbortConnection()
        response.read()  # closes an empty or fully read response: the connection is reusable

    def change_headers(self, headers, rule):
        out = []
        for name, value in headers:
            lname = name.lower()
            if lname == "etag" and "etag" in rule.what:
                value = changed_etag(value)
            elif lname == "content-range" and "total" in rule.what:
                value = changed_content_range(value)
            out.append((name, value))
        return out

    def send_bad_gateway(self, error, entry):
        body = f"fault proxy: upstream {self.server.upstream_host}:{self.server.upstream_port}: "
        body = (body + f"{error}\n").encode()
        self.server.state.count_status(entry, 502)
        self.send_response(502)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.server.state.count_bytes(entry, len(body))
            self.wfile.write(body)

    def send_injected_status(self, rule, entry):
        body = s3_error_body(rule.status, self.path)
        self.server.state.count_status(entry, rule.status)
        self.send_response(rule.status)
        self.send_header("Content-Type", "application/xml")
        if rule.retry_after is not None:
            self.send_header("Retry-After", str(rule.retry_after))
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.server.state.count_bytes(entry, len(body))
            self.wfile.write(body)

    def reset_client(self):
        """Closes the client connection with a TCP RST (SO_LINGER 0)."""
        try:
            self.wfile.flush()
        except OSError:
            pass
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # the socket closes only when its last file object does
        self.connection.close()
        raise AbortConnection()


class FaultProxyServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256

    def __init__(self, upstream_url, host="127.0.0.1", port=0):
        parts = urllib.parse.urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream {upstream_url!r}: an http://HOST[:PORT][/PREFIX] URL")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80
        self.upstream_prefix = parts.path.rstrip("/")
        self.state = ProxyState()
        super().__init__((host, port), ProxyHandler)

    def handle_error(self, request, client_address):
        pass  # a client that went away is normal here

    @property
    def url(self):
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"
