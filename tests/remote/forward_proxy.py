#!/usr/bin/python3
"""A forward HTTP proxy on loopback that records what it is asked (tests of which requests may
go through a proxy: issue 43). It forwards plain-http requests ("GET http://host:port/path") to
their origin and relays the answer; CONNECT (https) is refused with 501. Used in-process:

    with ForwardProxy() as proxy:
        env["http_proxy"] = proxy.url
        ...
        proxy.requests()  # [{"method", "url", "headers"}] in arrival order
"""

import http.client
import http.server
import threading
import urllib.parse

_HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-connection", "te", "trailer",
        "transfer-encoding", "upgrade"}


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _forward(self):
        proxy = self.server.proxy
        with proxy.lock:
            proxy.seen.append({"method": self.command, "url": self.path,
                               "headers": {k.lower(): v for k, v in self.headers.items()}})
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        url = urllib.parse.urlsplit(self.path)
        if url.scheme != "http" or not url.hostname:
            self.send_error(501, "only absolute http:// URLs")
            return
        conn = http.client.HTTPConnection(url.hostname, url.port or 80, timeout=30)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            path = url.path + ("?" + url.query if url.query else "")
            conn.request(self.command, path or "/", body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as e:
            self.send_error(502, str(e))
            return
        finally:
            conn.close()
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP and k.lower() != "content-length":
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward

    def do_CONNECT(self):
        with self.server.proxy.lock:
            self.server.proxy.seen.append({"method": "CONNECT", "url": self.path, "headers": {}})
        self.send_error(501, "CONNECT not supported")

    def log_message(self, *args):
        pass


class ForwardProxy:
    def __init__(self):
        self.lock = threading.Lock()
        self.seen = []
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self):
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def requests(self):
        with self.lock:
            return list(self.seen)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
