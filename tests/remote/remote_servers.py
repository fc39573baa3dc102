#!/usr/bin/python3
"""Test servers for pcrfs remote stores, on loopback: a module and a CLI (tests/remote/README.md).

  Nginx(root)                      nginx serving a folder (ranges, ETag, If-None-Match)
  S3Server(root, bucket, ak, sk)   s3rver behind a front that checks every SigV4 signature
  FaultProxy(upstream_url)         a proxy that injects latency, errors, resets, short bodies

Each is a context manager with .url (S3Server: .endpoint) and .pid. The CLI runs one until
SIGTERM/SIGINT and writes a ready file with JSON once it answers:

  remote_servers.py nginx --root DIR --ready-file F
  remote_servers.py s3 --root DIR --bucket B --access-key AK --secret-key SK --ready-file F
  remote_servers.py proxy --upstream URL --ready-file F
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import fault_proxy  # noqa: E402

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
NODE = shutil.which("node") or "/usr/bin/node"
NODE_MODULES = os.path.join(HERE, "node_modules")
START_TIMEOUT = 30.0

# Loopback never goes through an HTTP proxy a machine may have configured (urllib, boto3, curl).
for _var in ("no_proxy", "NO_PROXY"):
    _hosts = [h for h in os.environ.get(_var, "").split(",") if h]
    os.environ[_var] = ",".join(_hosts + [h for h in ("127.0.0.1", "localhost", ".localhost")
                                         if h not in _hosts])


class ServerError(RuntimeError):
    pass


def write_random_files(root, sizes, seed):
    """Writes {relative path: size} of seeded random bytes under root (folders made as needed);
    returns {relative path: bytes}: the fixture the servers' and clients' tests serve."""
    rng = random.Random(seed)
    out = {}
    for rel, size in sizes.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        data = rng.randbytes(size)
        with open(path, "wb") as f:
            f.write(data)
        out[rel] = data
    return out


def free_port(host="127.0.0.1"):
    """A port that was free a moment ago (callers retry when another process takes it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_until_answers(url, proc, log_path, timeout=START_TIMEOUT, context=None):
    """Waits until url answers any HTTP status; raises with the server's log if it died."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise ServerError(f"{proc.args[0]} exited {proc.returncode} before answering {url}:\n"
                              f"{read_tail(log_path)}")
        try:
            with urllib.request.urlopen(url, timeout=2, context=context) as r:
                r.read()
            return
        except urllib.error.HTTPError:
            return  # any status: it answers
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            pass
        if time.monotonic() > deadline:
            raise ServerError(f"{url} did not answer within {timeout:.0f} s:\n"
                              f"{read_tail(log_path)}")
        time.sleep(0.05)


def read_tail(path, limit=4000):
    try:
        with open(path, "rb") as f:
            return f.read()[-limit:].decode(errors="replace")
    except OSError:
        return "(no log)"


def die_with_parent():
    """preexec_fn: the server gets SIGTERM when the process that started it dies (a killed
    test must not leave nginx or node running). REQUIRES: started from a thread that lives as
    long as the server (the main thread, in tests and the CLI)."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def stop_process(proc, timeout=10):
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ----------------------------------------------------------------------------- nginx

NGINX_CONF = """\
{user}
worker_processes {workers};
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 1024; }}
http {{
    default_type application/octet-stream;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    access_log {prefix}/access.log combined;
    sendfile on;
    tcp_nopush on;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 1000000;
    etag on;
    server {{
        listen 127.0.0.1:{port}{ssl};
        {tls}
        root {root};
        location / {{
            {auth}
            autoindex off;
        }}
    }}
}}
"""


class Nginx:
    """nginx on 127.0.0.1 at a free port serving root: single and multi-range GETs, ETag,
    If-None-Match (304), keep-alive. tls=True serves HTTPS with a fresh self-signed certificate
    for 127.0.0.1 and localhost (.ca_file verifies it). bearer_token makes every request without
    "Authorization: Bearer TOKEN" get 401. required_query ({name: value}) makes every request
    whose query lacks exactly those parameters (name=value, as sent) get 403, as a CDN or a store
    behind signed URLs answers."""

    def __init__(self, root, tls=False, bearer_token=None, workers=2, port=None,
                 required_query=None):
        self.root = os.path.abspath(root)
        if not os.path.isdir(self.root):
            raise ServerError(f"nginx root {root}: not a directory")
        self.tls = tls
        self.bearer_token = bearer_token
        self.required_query = dict(required_query or {})
        for name, value in self.required_query.items():
            if not re.fullmatch(r"[A-Za-z0-9_]+", name) or re.search(r'["\\$;{}\s]', value):
                raise ServerError(f"nginx required_query: {name!r}={value!r} cannot be checked")
        self.workers = workers
        self.port = port
        self.prefix = None
        self.proc = None
        self.ca_file = None

    @property
    def url(self):
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def pid(self):
        return self.proc.pid

    @property
    def access_log(self):
        """The access log: unbuffered, a line as each request ends (after its answer, so a
        client may see the answer first: wait_for_log)."""
        return os.path.join(self.prefix, "access.log")

    def wait_for_log(self, count, keep=lambda line: True, offset=0, timeout=10.0):
        """The access log's lines from byte `offset` that `keep` keeps, once there are at
        least `count` of them (a number the client side knows: requests it sent); fails after
        `timeout` seconds with what there is."""
        deadline = time.monotonic() + timeout
        while True:
            with open(self.access_log) as f:
                f.seek(offset)
                lines = [line for line in f.read().splitlines() if keep(line)]
            if len(lines) >= count:
                return lines
            if time.monotonic() > deadline:
                raise AssertionError(f"nginx logged {len(lines)} of {count} requests in "
                                     f"{timeout:g} s: {lines[-5:]}")
            time.sleep(0.02)

    def __enter__(self):
        self.prefix = tempfile.mkdtemp(prefix="pcrfs-nginx-")
        try:
            if self.tls:
                self.make_certificate()
            fixed_port = self.port
            for _ in range(20):
                self.port = fixed_port or free_port()
                if self.try_start():
                    return self
            raise ServerError("nginx: no free port after 20 tries")
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def make_certificate(self):
        key = os.path.join(self.prefix, "server.key")
        self.ca_file = os.path.join(self.prefix, "server.crt")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-keyout", key, "-out", self.ca_file,
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def write_config(self):
        tls = ""
        if self.tls:
            tls = (f"ssl_certificate {self.ca_file}; "
                   f"ssl_certificate_key {os.path.join(self.prefix, 'server.key')};")
        auth = ""
        if self.bearer_token is not None:
            auth = f'if ($http_authorization != "Bearer {self.bearer_token}") {{ return 401; }}'
        for name, value in self.required_query.items():
            auth += f' if ($arg_{name} != "{value}") {{ return 403; }}'
        conf = NGINX_CONF.format(user="user root root;" if os.geteuid() == 0 else "",
                                 workers=self.workers, prefix=self.prefix, port=self.port,
                                 ssl=" ssl" if self.tls else "", tls=tls, root=self.root,
                                 auth=auth)
        path = os.path.join(self.prefix, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        return path

    def try_start(self):
        """Starts nginx on self.port; False when the port was taken in the meantime."""
        conf = self.write_config()
        log = os.path.join(self.prefix, "error.log")
        open(log, "w").close()
        with open(log, "ab") as err:
            self.proc = subprocess.Popen([NGINX, "-p", self.prefix, "-c", conf, "-e", log],
                                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=err, preexec_fn=die_with_parent)
        context = None
        if self.tls:
            import ssl
            context = ssl.create_default_context(cafile=self.ca_file)
        try:
            wait_until_answers(self.url + "/", self.proc, log, context=context)
            return True
        except ServerError:
            if "Address already in use" in read_tail(log):
                stop_process(self.proc)
                self.proc = None
                return False
            raise

    def __exit__(self, *exc):
        stop_process(self.proc)
        if self.prefix:
            shutil.rmtree(self.prefix, ignore_errors=True)

    def ready_info(self):
        info = {"url": self.url, "pid": self.pid}
        if self.ca_file:
            info["ca_file"] = self.ca_file
        return info


# ----------------------------------------------------------------------------- S3


def check_node_modules():
    missing = [m for m in ("s3rver", "@smithy/signature-v4", "@aws-crypto/sha256-js")
               if not os.path.isdir(os.path.join(NODE_MODULES, m))]
    if missing:
        raise ServerError(f"{NODE_MODULES}: missing npm packages {missing}: run "
                          f"tests/remote/install.sh (it needs the npm registry once)")


class FrontKeys:
    """The key list of a running s3_front.js, over its control API (POST/DELETE/GET
    /__front/keys). The credential fakes (cred_servers.py) take one of these, or an S3Server, or
    anything else with add_key/remove_key: from a CLI only the front's endpoint is known."""

    def __init__(self, endpoint):
        self.endpoint = endpoint.rstrip("/")

    def _call(self, method, path, obj=None):
        data = json.dumps(obj).encode() if obj is not None else None
        req = urllib.request.Request(self.endpoint + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            with e:
                raise ServerError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}")

    def add_key(self, access_key, secret_key, token=None, expires_at=None):
        """Accepts requests signed with this key (and, when token is given, only with that
        x-amz-security-token) until expires_at (epoch seconds; None: forever); after it they get
        400 ExpiredToken. Replaces a key with the same id."""
        key = {"access_key": access_key, "secret_key": secret_key}
        if token is not None:
            key["session_token"] = token
        if expires_at is not None:
            key["expires_at"] = expires_at
        return self._call("POST", "/__front/keys", key)

    def remove_key(self, access_key):
        return self._call("DELETE", "/__front/keys/" + urllib.parse.quote(access_key, safe=""))[
            "removed"]

    def keys(self):
        return self._call("GET", "/__front/keys")["keys"]


class S3Server:
    """s3rver on loopback behind s3_front.js, which checks every request's SigV4 signature with
    AWS's own signer. The bucket is created empty; when root is given its files are uploaded
    under prefix with boto3 through the front (signed, like `aws s3 sync`).

    .endpoint is the front's URL (path style: ENDPOINT/BUCKET/KEY; virtual-host style with Host:
    BUCKET.localhost:PORT). .client() is a boto3 client for it. .front_stats() the front's
    counters (requests, signed_ok, signed_by_key, anonymous, refused by S3 error code,
    range_fixed).
    check_clock=False accepts any x-amz-date (to replay AWS's published examples).

    The keys it accepts change at runtime, as temporary credentials do: .add_key(ak, sk, token,
    expires_at) and .remove_key(ak) (the front's /__front/keys API, see FrontKeys); a key past
    its expires_at gets S3's 400 ExpiredToken."""

    def __init__(self, root, bucket, access_key, secret_key, region="us-east-1", prefix="",
                 session_token=None, allow_anonymous=False, extra_buckets=(), port=0,
                 check_clock=True):
        self.root = root
        self.bucket = bucket
        self.access_key = access_key
        self.secret_key = secret_key
        self.region = region
        self.prefix = prefix.strip("/")
        self.session_token = session_token
        self.allow_anonymous = allow_anonymous
        self.buckets = [bucket, *extra_buckets]
        self.port = port
        self.check_clock = check_clock
        self.tmp = None
        self.proc = None
        self.endpoint = None

    @property
    def pid(self):
        return self.proc.pid

    @property
    def url(self):
        return self.endpoint

    def __enter__(self):
        check_node_modules()
        if self.root is not None and not os.path.isdir(self.root):
            raise ServerError(f"s3 root {self.root}: not a directory")
        self.tmp = tempfile.mkdtemp(prefix="pcrfs-s3-")
        try:
            self.start()
            if self.root is not None:
                self.upload(self.root, self.prefix)
            return self
        except BaseException:
            self.__exit__(None, None, None)
            raise

    def start(self):
        key = {"access_key": self.access_key, "secret_key": self.secret_key}
        if self.session_token:
            key["session_token"] = self.session_token
        config = {"directory": os.path.join(self.tmp, "data"), "buckets": self.buckets,
                  "region": self.region, "keys": [key], "allow_anonymous": self.allow_anonymous,
                  "port": self.port, "check_clock": self.check_clock}
        conf_path = os.path.join(self.tmp, "front.json")
        fd = os.open(conf_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:  # the secret stays out of the command line
            json.dump(config, f)
        log = os.path.join(self.tmp, "front.log")
        out = os.path.join(self.tmp, "front.out")
        with open(out, "wb") as stdout, open(log, "wb") as stderr:
            # s3rver's ListObjectsV2 continuation tokens use DES, which OpenSSL 3 keeps in its
            # legacy provider.
            self.proc = subprocess.Popen([NODE, "--openssl-legacy-provider",
                                          os.path.join(HERE, "s3_front.js"), conf_path],
                                         cwd=HERE, stdin=subprocess.DEVNULL, stdout=stdout,
                                         stderr=stderr, preexec_fn=die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            line = read_tail(out).strip()
            if line.endswith("}"):
                ports = json.loads(line.splitlines()[-1])
                break
            if self.proc.poll() is not None:
                raise ServerError(f"s3_front.js exited {self.proc.returncode}:\n{read_tail(log)}")
            if time.monotonic() > deadline:
                raise ServerError(f"s3_front.js did not start within {START_TIMEOUT:.0f} s:\n"
                                  f"{read_tail(log)}")
            time.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{ports['port']}"
        self.s3rver_port = ports["s3rver_port"]
        wait_until_answers(self.endpoint + "/__front/stats", self.proc, log)

    def sizes(self, prefix, bucket=None):
        """{key below prefix/: size} of the objects in `bucket` (default: the first)."""
        client = self.client()
        try:
            out = {}
            for page in client.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket or self.bucket, Prefix=prefix + "/"):
                for o in page.get("Contents", []):
                    out[o["Key"][len(prefix) + 1:]] = o["Size"]
            return out
        finally:
            client.close()

    def client(self, access_key=None, secret_key=None, session_token=None, endpoint=None,
               addressing_style="path"):
        """A boto3 S3 client for this server (or, through endpoint, a proxy in front of it),
        without retries: a test sees every error."""
        import boto3
        import botocore.config
        return boto3.client(
            "s3", endpoint_url=endpoint or self.endpoint, region_name=self.region,
            aws_access_key_id=access_key or self.access_key,
            aws_secret_access_key=secret_key or self.secret_key,
            aws_session_token=session_token or self.session_token,
            config=botocore.config.Config(s3={"addressing_style": addressing_style},
                                          retries={"total_max_attempts": 1}))

    def upload(self, root, prefix=""):
        """Uploads every file under root to s3://BUCKET/PREFIX/RELPATH through the front."""
        client = self.client()
        for dirpath, _, filenames in os.walk(root):
            for name in sorted(filenames):
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                key = f"{prefix}/{rel}" if prefix else rel
                client.upload_file(path, self.bucket, key)
        client.close()

    def front_stats(self):
        with urllib.request.urlopen(self.endpoint + "/__front/stats", timeout=30) as r:
            return json.loads(r.read())

    def add_key(self, access_key, secret_key, token=None, expires_at=None):
        """Accepts one more key (or replaces it); see FrontKeys.add_key."""
        return FrontKeys(self.endpoint).add_key(access_key, secret_key, token, expires_at)

    def remove_key(self, access_key):
        """Refuses that key from now on (403 InvalidAccessKeyId); True if it was known."""
        return FrontKeys(self.endpoint).remove_key(access_key)

    def keys(self):
        """The accepted keys: [{"access_key", "expires_at", "session_token": bool, "expired"}]."""
        return FrontKeys(self.endpoint).keys()

    def __exit__(self, *exc):
        stop_process(self.proc)
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def ready_info(self):
        return {"endpoint": self.endpoint, "bucket": self.bucket, "region": self.region,
                "pid": self.pid}


# ----------------------------------------------------------------------------- fault proxy


class FaultProxy:
    """fault_proxy.FaultProxyServer in a thread of this process, in front of upstream_url.
    .fault(rule), .stats(), .requests() and .reset() use the control API over HTTP, like any
    other client would."""

    def __init__(self, upstream_url, port=0):
        self.upstream_url = upstream_url
        self.port = port
        self.server = None
        self.thread = None

    @property
    def url(self):
        return self.server.url

    @property
    def pid(self):
        return os.getpid()

    def __enter__(self):
        self.server = fault_proxy.FaultProxyServer(self.upstream_url, port=self.port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name="fault-proxy")
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def control(self, method, path, obj=None):
        data = json.dumps(obj).encode() if obj is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def fault(self, **rule):
        """Adds one rule, e.g. fault(fault="status", status=503, count=2); returns its id."""
        return self.control("POST", "/__fault", rule)["ids"][0]

    def stats(self):
        return self.control("GET", "/__stats")

    def requests(self):
        return self.control("GET", "/__requests")["requests"]

    def reset(self):
        self.control("POST", "/__reset", {})

    def ready_info(self):
        return {"url": self.url, "pid": self.pid}


# ----------------------------------------------------------------------------- CLI


def write_ready_file(path, info):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(info, f)
        f.write("\n")
    os.replace(tmp, path)


def serve_until_signal(server, ready_file):
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    with server:
        info = server.ready_info()
        if ready_file:
            write_ready_file(ready_file, info)
        print(json.dumps(info), flush=True)
        while not stop.wait(0.5):
            proc = getattr(server, "proc", None)
            if proc is not None and proc.poll() is not None:
                print(f"server process exited {proc.returncode}", file=sys.stderr)
                return 1
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("nginx", help="nginx serving a folder")
    p.add_argument("--root", required=True)
    p.add_argument("--port", type=int)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--tls", action="store_true", help="HTTPS with a self-signed certificate")
    p.add_argument("--bearer-token", help="require Authorization: Bearer TOKEN")
    p.add_argument("--ready-file")
    p = sub.add_parser("proxy", help="fault-injecting proxy")
    p.add_argument("--upstream", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ready-file")
    add_s3_arguments(sub)
    args = ap.parse_args(argv)
    try:
        if args.cmd == "nginx":
            server = Nginx(args.root, tls=args.tls, bearer_token=args.bearer_token,
                           workers=args.workers, port=args.port)
        elif args.cmd == "proxy":
            server = FaultProxy(args.upstream, port=args.port)
        else:
            server = s3_server_from_args(args)
        return serve_until_signal(server, args.ready_file)
    except (ServerError, ValueError, OSError, subprocess.CalledProcessError) as e:
        print(f"remote_servers {args.cmd}: {e}", file=sys.stderr)
        return 1


def add_s3_arguments(sub):
    p = sub.add_parser("s3", help="s3rver behind a SigV4-verifying front")
    p.add_argument("--root", help="folder uploaded into the bucket (with boto3, signed)")
    p.add_argument("--prefix", default="", help="key prefix of the uploaded files")
    p.add_argument("--bucket", required=True)
    p.add_argument("--access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"))
    p.add_argument("--secret-key", help="default: $AWS_SECRET_ACCESS_KEY (keeps it out of ps)")
    p.add_argument("--session-token", help="require this x-amz-security-token")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--allow-anonymous", action="store_true", help="accept unsigned GET/HEAD")
    p.add_argument("--no-clock-check", action="store_true",
                   help="accept any x-amz-date (to replay AWS's published examples)")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ready-file")


def s3_server_from_args(args):
    secret = args.secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
    if not args.access_key or not secret:
        raise ServerError("s3: give --access-key and --secret-key (or AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY)")
    return S3Server(args.root, args.bucket, args.access_key, secret, region=args.region,
                    prefix=args.prefix, session_token=args.session_token,
                    allow_anonymous=args.allow_anonymous, port=args.port,
                    check_clock=not args.no_clock_check)


if __name__ == "__main__":
    sys.exit(main())
