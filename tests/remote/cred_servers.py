#!/usr/bin/python3
"""Loopback fakes of the services that hand out AWS temporary credentials (tests/remote/README.md):
what pcrfs's credential chain and its background renewal are tested against.

  StsServer(keys, roles=..., source_keys=..., web_identity_token=...)
                        STS: AssumeRole (SigV4 checked with botocore's signer) and
                        AssumeRoleWithWebIdentity, real STS XML answers and errors
  ImdsServer(keys)      EC2 instance metadata, IMDSv2 only (token PUT, then role and credentials)
  ContainerServer(keys, auth_token=...)
                        the ECS / EKS Pod Identity container credentials endpoint

Every one mints credentials that live `lifetime` seconds and registers each new key with the S3
front (`keys`: an S3Server, a remote_servers.FrontKeys, or None), so the front accepts exactly the
keys these services handed out and answers 400 ExpiredToken once one has expired, as S3 does.
Each is a context manager (.url, .pid, .env()) and a CLI subcommand that runs until SIGTERM/SIGINT
and writes a ready file with JSON once it answers:

  cred_servers.py sts --s3-endpoint URL --role ARN --source-keys-file F --ready-file R
  cred_servers.py imds --s3-endpoint URL --ready-file R
  cred_servers.py container --s3-endpoint URL --ready-file R   (token: $PCRFS_CONTAINER_TOKEN)
  cred_servers.py credential-process --s3-endpoint URL --lifetime S [--log F]
                        prints one credential_process answer (for a profile's credential_process)
"""

import argparse
import base64
import datetime
import hashlib
import hmac
import http.server
import json
import math
import os
import re
import secrets
import string
import sys
import threading
import time
import urllib.parse
from xml.sax.saxutils import escape as xml_escape

import botocore.auth
import botocore.awsrequest
import botocore.compat
import botocore.credentials

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from remote_servers import FrontKeys, ServerError, serve_until_signal  # noqa: E402

ACCOUNT = "123456789012"
STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"
MAX_SKEW = 15 * 60
DEFAULT_LIFETIME = 20.0


def iso8601(epoch):
    """AWS's Expiration format: UTC, whole seconds, a Z."""
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def random_id(prefix, n=16):
    return prefix + "".join(secrets.choice(string.ascii_uppercase + string.digits)
                            for _ in range(n))


class Minter:
    """Makes temporary credentials and registers each with the S3 front, so the front accepts a
    key exactly while the service that minted it says it is valid. revoke_after (seconds, None:
    never) removes a key from the front that long after it expired: the front then answers 403
    InvalidAccessKeyId instead of 400 ExpiredToken (real S3 never forgets; this only bounds the
    front's key list in long runs)."""

    def __init__(self, keys=None, lifetime=DEFAULT_LIFETIME, revoke_after=None):
        self.keys = FrontKeys(keys) if isinstance(keys, str) else keys
        self.lifetime = lifetime
        self.revoke_after = revoke_after
        self.lock = threading.Lock()
        self.minted = []  # every credential handed out, in order (secrets included: a test's)
        self.timers = []

    def mint(self, **info):
        """New credentials: {"access_key", "secret_key", "token", "expires_at" (epoch seconds,
        whole), "expiration" (ISO 8601 Z), **info}."""
        expires_at = math.ceil(time.time() + self.lifetime)
        creds = {"access_key": random_id("ASIA"),
                 # '/' and '+' like real secrets and tokens: they must survive every encoding
                 "secret_key": base64.b64encode(secrets.token_bytes(30)).decode(),
                 "token": base64.b64encode(secrets.token_bytes(120)).decode(),
                 "expires_at": expires_at, "expiration": iso8601(expires_at), **info}
        if self.keys is not None:
            self.keys.add_key(creds["access_key"], creds["secret_key"], creds["token"], expires_at)
        with self.lock:
            self.minted.append(creds)
            if self.keys is not None and self.revoke_after is not None:
                delay = max(0.0, expires_at + self.revoke_after - time.time())
                timer = threading.Timer(delay, self._revoke, (creds["access_key"],))
                timer.daemon = True
                timer.start()
                self.timers.append(timer)
        return creds

    def _revoke(self, access_key):
        try:
            self.keys.remove_key(access_key)
        except (ServerError, OSError):
            pass  # the front is gone already: nothing left to revoke

    def lookup(self, access_key):
        """The credentials minted with that access key id, or None."""
        with self.lock:
            return next((c for c in self.minted if c["access_key"] == access_key), None)

    def close(self):
        with self.lock:
            for timer in self.timers:
                timer.cancel()
            self.timers = []


class _Handler(http.server.BaseHTTPRequestHandler):
    """Hands every request to the fake's respond(method, path, headers, body); keep-alive."""
    protocol_version = "HTTP/1.1"

    def _any(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            status, headers, out = self.server.fake.respond(self.command, self.path,
                                                            self.headers, body)
        except Exception as e:  # e.g. the S3 front refused a key: say so, keep serving
            status, headers, out = 500, {"Content-Type": "text/plain"}, repr(e).encode()
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(out)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

    def log_message(self, *args):
        pass


class _Fake:
    """A threaded http.server on 127.0.0.1 in a thread of this process, with a Minter. Subclasses
    answer in serve(method, path, headers, body) -> (status, headers, body bytes). Paths under
    /__ are the control API: GET /__requests (the record), POST /__control {field: value} for the
    fields in CONTROLS (rotating tokens from another process)."""

    CONTROLS = ("lifetime",)  # attributes POST /__control may set

    def __init__(self, keys=None, lifetime=DEFAULT_LIFETIME, revoke_after=None, port=0):
        self.minter = Minter(keys, lifetime, revoke_after)
        self.port = port
        self.lock = threading.Lock()
        self.log = []
        self.server = None
        self.thread = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def pid(self):
        return os.getpid()

    @property
    def lifetime(self):
        return self.minter.lifetime

    @lifetime.setter
    def lifetime(self, seconds):
        self.minter.lifetime = seconds

    @property
    def minted(self):
        with self.minter.lock:
            return list(self.minter.minted)

    def lookup(self, access_key):
        """The credentials this fake minted with that access key id (secret and token), or None."""
        return self.minter.lookup(access_key)

    def requests(self, **match):
        """Every request so far (dicts), or those whose fields equal match's."""
        with self.lock:
            return [dict(r) for r in self.log if all(r.get(k) == v for k, v in match.items())]

    def record(self, **entry):
        with self.lock:
            self.log.append(entry)

    def __enter__(self):
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), _Handler)
        self.server.daemon_threads = True
        self.server.fake = self
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                       name=type(self).__name__)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
        self.minter.close()

    def respond(self, method, path, headers, body):
        if path.startswith("/__"):
            return self.control(method, path, body)
        return self.serve(method, path, headers, body)

    def control(self, method, path, body):
        if method == "GET" and path == "/__requests":
            return json_answer(200, {"requests": self.requests()})
        if method == "POST" and path == "/__control":
            try:
                changes = json.loads(body or b"{}")
                for name, value in changes.items():
                    if name not in self.CONTROLS:
                        raise ValueError(f"no control {name!r} (known: {self.CONTROLS})")
                for name, value in changes.items():
                    self.set_control(name, value)
            except (ValueError, AttributeError) as e:
                return json_answer(400, {"error": str(e)})
            return json_answer(200, {"changed": sorted(changes)})
        return json_answer(404, {"error": f"no control {method} {path}"})

    def set_control(self, name, value):
        setattr(self, name, value)

    def ready_info(self):
        return {"url": self.url, "pid": self.pid, **self.env()}


def json_answer(status, obj, headers=None):
    return status, {"Content-Type": "application/json", **(headers or {})}, json.dumps(
        obj).encode()


def text_answer(status, text):
    return status, {"Content-Type": "text/plain"}, text.encode()


# ----------------------------------------------------------------------------- STS


class StsError(Exception):
    def __init__(self, status, code, message, sender=True):
        super().__init__(message)
        self.status, self.code, self.sender = status, code, sender


class _RecomputeSigV4(botocore.auth.SigV4Auth):
    """botocore's SigV4Auth recomputing a received request's signature: it canonicalizes exactly
    the headers the client listed in SignedHeaders, as received (botocore signing a request of its
    own would leave out user-agent and add host), and the caller sets the request's
    context["timestamp"] to its x-amz-date."""

    def __init__(self, credentials, service, region, signed_names):
        super().__init__(credentials, service, region)
        self.signed_names = signed_names

    def headers_to_sign(self, request):
        out = botocore.compat.HTTPHeaders()
        for name in self.signed_names:
            out[name] = request.headers[name]
        return out


class StsServer(_Fake):
    """A fake STS on loopback: POST / form-encoded, Version=2011-06-15.

    AssumeRole: the caller's SigV4 signature (service sts, any region) is recomputed with
    botocore's signer from the source keys this STS knows (source_keys {ak: sk} or {ak: (sk,
    token)}, .add_source_key(), and every key it minted itself: role chaining) and refused like
    STS does: 403 MissingAuthenticationToken, InvalidClientTokenId (an unknown key or a wrong
    token), ExpiredToken (a source past its expiry), SignatureDoesNotMatch (also for a clock 15
    minutes off). AssumeRoleWithWebIdentity (unsigned): the WebIdentityToken must equal
    .web_identity_token (.rotate_web_identity_token() makes the old one 400
    ExpiredTokenException; anything else is 400 InvalidIdentityToken). Both need a RoleArn in
    roles (403 AccessDenied otherwise). .requests() records each call: action, role_arn,
    session_name, source_access_key, duration, status, code, access_key (the one minted)."""

    CONTROLS = ("lifetime", "web_identity_token")

    def __init__(self, keys=None, roles=(), source_keys=None, web_identity_token=None,
                 lifetime=DEFAULT_LIFETIME, revoke_after=None, port=0):
        super().__init__(keys, lifetime, revoke_after, port)
        self.roles = set(roles)
        self.sources = {}
        for ak, value in (source_keys or {}).items():
            sk, token = value if isinstance(value, tuple) else (value, None)
            self.add_source_key(ak, sk, token)
        self.web_identity_token = web_identity_token
        self.expired_identity_tokens = set()

    def env(self):
        """What points an SDK (and pcrfs) at this STS."""
        return {"AWS_ENDPOINT_URL_STS": self.url}

    def add_role(self, role_arn):
        self.roles.add(role_arn)

    def add_source_key(self, access_key, secret_key, token=None, expires_at=None):
        """A key AssumeRole accepts signatures from."""
        with self.lock:
            self.sources[access_key] = {"secret_key": secret_key, "token": token,
                                        "expires_at": expires_at}

    def set_control(self, name, value):
        if name == "web_identity_token":
            self.rotate_web_identity_token(value)
        else:
            super().set_control(name, value)

    def rotate_web_identity_token(self, new_token):
        """The identity provider issued a new token: the old one now counts as expired."""
        with self.lock:
            if self.web_identity_token is not None:
                self.expired_identity_tokens.add(self.web_identity_token)
            self.web_identity_token = new_token

    def serve(self, method, path, headers, body):
        entry = {"action": None, "role_arn": None, "session_name": None,
                 "source_access_key": None, "duration": None, "status": 200, "code": None,
                 "access_key": None}
        try:
            if method != "POST" or urllib.parse.urlsplit(path).path != "/":
                raise StsError(400, "InvalidAction", f"STS takes a POST to /, not {method} {path}")
            form = {k: v[-1] for k, v in urllib.parse.parse_qs(
                body.decode("utf-8", "replace"), keep_blank_values=True).items()}
            entry.update(action=form.get("Action"), role_arn=form.get("RoleArn"),
                         session_name=form.get("RoleSessionName"),
                         duration=form.get("DurationSeconds"))
            if form.get("Version") != "2011-06-15":
                raise StsError(400, "InvalidAction", "Could not find operation "
                               f"{form.get('Action')} for version {form.get('Version')}")
            if form.get("Action") == "AssumeRole":
                self.check_signature(method, path, headers, body, entry)
                creds = self.assume(form, "AssumeRole", entry)
                xml = self.result_xml("AssumeRole", form, creds, "")
            elif form.get("Action") == "AssumeRoleWithWebIdentity":
                self.check_web_identity(form.get("WebIdentityToken"))
                creds = self.assume(form, "AssumeRoleWithWebIdentity", entry)
                xml = self.result_xml("AssumeRoleWithWebIdentity", form, creds,
                                      "<SubjectFromWebIdentityToken>system:serviceaccount:pcrfs:"
                                      "test</SubjectFromWebIdentityToken>"
                                      "<Audience>sts.amazonaws.com</Audience>"
                                      "<Provider>pcrfs-test-oidc</Provider>")
            else:
                raise StsError(400, "InvalidAction", "Could not find operation "
                               f"{form.get('Action')} for version 2011-06-15")
            entry["access_key"] = creds["access_key"]
            self.record(**entry)
            return 200, {"Content-Type": "text/xml"}, xml.encode()
        except StsError as e:
            entry.update(status=e.status, code=e.code)
            self.record(**entry)
            return e.status, {"Content-Type": "text/xml"}, self.error_xml(e).encode()

    def assume(self, form, action, entry):
        for name in ("RoleArn", "RoleSessionName"):
            if not form.get(name):
                raise StsError(400, "ValidationError", f"1 validation error detected: Value null "
                               f"at '{name[0].lower() + name[1:]}' failed to satisfy constraint:"
                               f" Member must not be null")
        if form["RoleArn"] not in self.roles:
            raise StsError(403, "AccessDenied", f"User is not authorized to perform: sts:{action}"
                           f" on resource: {form['RoleArn']}")
        creds = self.minter.mint(action=action, role_arn=form["RoleArn"],
                                 source_access_key=entry["source_access_key"])
        # A key this STS minted can sign the next AssumeRole (role chaining).
        self.add_source_key(creds["access_key"], creds["secret_key"], creds["token"],
                            creds["expires_at"])
        return creds

    def check_web_identity(self, token):
        with self.lock:
            expected, expired = self.web_identity_token, token in self.expired_identity_tokens
        if expected is not None and token == expected:
            return
        if expired:
            raise StsError(400, "ExpiredTokenException", "Token expired: current date/time must "
                           "be before the expiration date/time of the web identity token")
        raise StsError(400, "InvalidIdentityToken", "The web identity token that was passed could "
                       "not be validated by AWS. Get a new identity token from the identity "
                       "provider and then retry the request.")

    def check_signature(self, method, path, headers, body, entry):
        """Recomputes the request's SigV4 signature with botocore's signer; sets
        entry["source_access_key"]. Raises StsError as STS refuses."""
        auth = headers.get("Authorization")
        if not auth:
            raise StsError(403, "MissingAuthenticationToken",
                           "Request is missing Authentication Token")
        m = re.fullmatch(r"AWS4-HMAC-SHA256 Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/"
                         r"aws4_request,\s*SignedHeaders=([a-z0-9;-]+),\s*Signature=([0-9a-f]{64})",
                         auth.strip())
        if not m:
            raise StsError(400, "IncompleteSignature", f"Authorization header requires a "
                           f"Credential, SignedHeaders and Signature: {auth[:60]}")
        ak, date, region, service, signed, signature = m.groups()
        entry["source_access_key"] = ak
        with self.lock:
            source = self.sources.get(ak)
        if source is None:
            raise StsError(403, "InvalidClientTokenId",
                           "The security token included in the request is invalid.")
        token = headers.get("X-Amz-Security-Token")
        if token != source["token"]:
            raise StsError(403, "InvalidClientTokenId",
                           "The security token included in the request is invalid.")
        if source["expires_at"] is not None and time.time() >= source["expires_at"]:
            raise StsError(403, "ExpiredToken",
                           "The security token included in the request is expired")
        if service != "sts":
            raise StsError(403, "SignatureDoesNotMatch",
                           "Credential should be scoped to correct service: 'sts'.")
        amz_date = headers.get("X-Amz-Date", "")
        signed_names = signed.split(";")
        if "host" not in signed_names or "x-amz-date" not in signed_names or not re.fullmatch(
                r"\d{8}T\d{6}Z", amz_date) or amz_date[:8] != date:
            raise StsError(403, "SignatureDoesNotMatch", "The request signature must sign host "
                           "and x-amz-date, and its credential date must be x-amz-date's")
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        if abs(time.time() - when) > MAX_SKEW:
            raise StsError(403, "SignatureDoesNotMatch", f"Signature expired: {amz_date} is "
                           f"now earlier than the time 15 minutes ago, or later than 15 from now.")
        missing = [n for n in signed_names if headers.get(n) is None]
        if missing:
            raise StsError(403, "SignatureDoesNotMatch", f"signed headers not sent: {missing}")
        content_sha = headers.get("X-Amz-Content-SHA256")
        if content_sha and re.fullmatch(r"[0-9a-f]{64}", content_sha) and \
                content_sha != hashlib.sha256(body).hexdigest():
            raise StsError(400, "InvalidRequest", "x-amz-content-sha256 does not match the body")
        request = botocore.awsrequest.AWSRequest(
            method=method, url=f"http://{headers.get('Host')}{path}",
            headers={n: headers.get(n) for n in signed_names}, data=body)
        request.context["timestamp"] = amz_date
        signer = _RecomputeSigV4(botocore.credentials.Credentials(ak, source["secret_key"], token),
                                 "sts", region, signed_names)
        canonical = signer.canonical_request(request)
        expected = signer.signature(signer.string_to_sign(request, canonical), request)
        if not hmac.compare_digest(expected, signature):
            raise StsError(403, "SignatureDoesNotMatch", "The request signature we calculated "
                           "does not match the signature you provided. Check your AWS Secret "
                           "Access Key and signing method. Consult the service documentation "
                           "for details.")

    def result_xml(self, action, form, creds, extra):
        role_name = form["RoleArn"].rsplit("/", 1)[-1]
        session = form["RoleSessionName"]
        role_id = "AROA" + hashlib.sha256(form["RoleArn"].encode()).hexdigest()[:17].upper()
        return (f'<{action}Response xmlns="{STS_NS}">\n'
                f"  <{action}Result>\n"
                + (f"    {extra}\n" if extra else "") +
                f"    <AssumedRoleUser>\n"
                f"      <Arn>arn:aws:sts::{ACCOUNT}:assumed-role/{xml_escape(role_name)}/"
                f"{xml_escape(session)}</Arn>\n"
                f"      <AssumedRoleId>{role_id}:{xml_escape(session)}</AssumedRoleId>\n"
                f"    </AssumedRoleUser>\n"
                f"    <Credentials>\n"
                f"      <AccessKeyId>{creds['access_key']}</AccessKeyId>\n"
                f"      <SecretAccessKey>{xml_escape(creds['secret_key'])}</SecretAccessKey>\n"
                f"      <SessionToken>{xml_escape(creds['token'])}</SessionToken>\n"
                f"      <Expiration>{creds['expiration']}</Expiration>\n"
                f"    </Credentials>\n"
                f"  </{action}Result>\n"
                f"  <ResponseMetadata><RequestId>{random_request_id()}</RequestId>"
                f"</ResponseMetadata>\n"
                f"</{action}Response>\n")

    @staticmethod
    def error_xml(e):
        return (f'<ErrorResponse xmlns="{STS_NS}">\n'
                f"  <Error>\n"
                f"    <Type>{'Sender' if e.sender else 'Receiver'}</Type>\n"
                f"    <Code>{e.code}</Code>\n"
                f"    <Message>{xml_escape(str(e))}</Message>\n"
                f"  </Error>\n"
                f"  <RequestId>{random_request_id()}</RequestId>\n"
                f"</ErrorResponse>\n")


def random_request_id():
    h = secrets.token_hex(16)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


# ----------------------------------------------------------------------------- IMDS / container


class _MetadataService(_Fake):
    """The current credentials of a metadata service: the same ones until half their lifetime is
    left, then fresh ones (IMDS and the container agents offer new credentials well before the
    old ones expire, so a client that renews early gets a new key). Counts requests by kind."""

    def __init__(self, keys, lifetime, revoke_after, port):
        super().__init__(keys, lifetime, revoke_after, port)
        self._counts = {}
        self._current = None

    def counts(self):
        with self.lock:
            return dict(self._counts)

    def count(self, kind):
        with self.lock:
            self._counts[kind] = self._counts.get(kind, 0) + 1

    def current_credentials(self):
        with self.lock:
            cur = self._current
            if cur is None or cur["expires_at"] - time.time() < self.lifetime / 2:
                cur = self._current = self.minter.mint(source=type(self).__name__)
            return cur


class ImdsServer(_MetadataService):
    """EC2 instance metadata, IMDSv2 only: PUT /latest/api/token with
    X-aws-ec2-metadata-token-ttl-seconds (1-21600; 400 otherwise) gives a token; GET
    /latest/meta-data/iam/security-credentials/ (the role name) and .../ROLE (the credentials JSON)
    need it in X-aws-ec2-metadata-token (401 without a valid one: IMDSv1 is refused).
    .counts() by kind: token, credentials, role_list, unauthorized, bad_token_request, not_found.
    .invalidate_tokens() makes every issued token invalid (a client must fetch a new one)."""

    PREFIX = "/latest/meta-data/iam/security-credentials/"

    def __init__(self, keys=None, role="pcrfs-test-role", lifetime=DEFAULT_LIFETIME,
                 revoke_after=None, port=0):
        super().__init__(keys, lifetime, revoke_after, port)
        self.role = role
        self.tokens = {}  # token -> expiry (time.monotonic())

    def env(self):
        return {"AWS_EC2_METADATA_SERVICE_ENDPOINT": self.url + "/"}

    def invalidate_tokens(self):
        with self.lock:
            self.tokens.clear()

    def serve(self, method, path, headers, body):
        kind, answer = self.answer(method, path, headers)
        self.count(kind)
        self.record(method=method, path=path, kind=kind, status=answer[0])
        return answer

    def answer(self, method, path, headers):
        if path == "/latest/api/token":
            if method != "PUT":
                return "not_found", text_answer(405, "Method Not Allowed")
            ttl = headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
            if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return "bad_token_request", text_answer(400, "Bad Request")
            token = base64.urlsafe_b64encode(secrets.token_bytes(42)).decode()
            with self.lock:
                self.tokens[token] = time.monotonic() + int(ttl)
            return "token", (200, {"Content-Type": "text/plain",
                                   "X-aws-ec2-metadata-token-ttl-seconds": ttl}, token.encode())
        token = headers.get("X-aws-ec2-metadata-token")
        with self.lock:
            valid = token is not None and self.tokens.get(token, 0) > time.monotonic()
        if not valid:
            return "unauthorized", text_answer(401, "Unauthorized")
        if method != "GET":
            return "not_found", text_answer(405, "Method Not Allowed")
        if path == self.PREFIX:
            return "role_list", text_answer(200, self.role)
        if path == self.PREFIX + self.role:
            c = self.current_credentials()
            return "credentials", json_answer(200, {
                "Code": "Success", "LastUpdated": iso8601(time.time()), "Type": "AWS-HMAC",
                "AccessKeyId": c["access_key"], "SecretAccessKey": c["secret_key"],
                "Token": c["token"], "Expiration": c["expiration"]})
        return "not_found", text_answer(404, "Not Found")


class ContainerServer(_MetadataService):
    """The container credentials endpoint (ECS, EKS Pod Identity): GET path answers
    {"AccessKeyId", "SecretAccessKey", "Token", "Expiration", "RoleArn"}. With auth_token set the
    request needs "Authorization: TOKEN" (401 without one, 403 with another; .auth_token can be
    changed at any time, like a rotated token file). .counts() by kind: credentials,
    unauthorized, forbidden, not_found."""

    CONTROLS = ("lifetime", "auth_token")

    def __init__(self, keys=None, path="/v2/credentials/pcrfs-test", auth_token=None,
                 role_arn=f"arn:aws:iam::{ACCOUNT}:role/pcrfs-container",
                 lifetime=DEFAULT_LIFETIME, revoke_after=None, port=0):
        super().__init__(keys, lifetime, revoke_after, port)
        self.path = path
        self.auth_token = auth_token
        self.role_arn = role_arn

    @property
    def full_uri(self):
        return self.url + self.path

    def env(self):
        env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": self.full_uri}
        if self.auth_token is not None:
            env["AWS_CONTAINER_AUTHORIZATION_TOKEN"] = self.auth_token
        return env

    def serve(self, method, path, headers, body):
        kind, answer = self.answer(method, path, headers)
        self.count(kind)
        self.record(method=method, path=path, kind=kind, status=answer[0],
                    authorization=headers.get("Authorization"))
        return answer

    def answer(self, method, path, headers):
        if method != "GET" or path != self.path:
            return "not_found", json_answer(404, {"code": "NotFound", "message": "not found"})
        expected, got = self.auth_token, headers.get("Authorization")
        if expected is not None and got is None:
            return "unauthorized", json_answer(401, {"code": "Unauthorized",
                                                     "message": "no Authorization header"})
        if expected is not None and not hmac.compare_digest(got.encode(), expected.encode()):
            return "forbidden", json_answer(403, {"code": "AccessDenied",
                                                  "message": "invalid authorization token"})
        c = self.current_credentials()
        return "credentials", json_answer(200, {
            "AccessKeyId": c["access_key"], "SecretAccessKey": c["secret_key"],
            "Token": c["token"], "Expiration": c["expiration"], "RoleArn": self.role_arn})


# ----------------------------------------------------------------------------- CLI


def credential_process(endpoint, lifetime, log=None):
    """One credential_process answer: fresh credentials registered with the S3 front at
    endpoint. log (a path) gets a JSON line with them, secrets included, for the test to find."""
    creds = Minter(endpoint, lifetime).mint(source="credential_process")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps(creds) + "\n")
    return {"Version": 1, "AccessKeyId": creds["access_key"],
            "SecretAccessKey": creds["secret_key"], "SessionToken": creds["token"],
            "Expiration": creds["expiration"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--s3-endpoint", help="the S3 front whose keys follow the minted ones")
    common.add_argument("--lifetime", type=float, default=DEFAULT_LIFETIME,
                        help="seconds each minted credential lives")
    common.add_argument("--revoke-after", type=float,
                        help="remove a key from the front this long after it expired")
    common.add_argument("--port", type=int, default=0)
    common.add_argument("--ready-file")
    p = sub.add_parser("sts", parents=[common], help="STS AssumeRole / AssumeRoleWithWebIdentity")
    p.add_argument("--role", action="append", default=[], help="a role ARN (repeatable)")
    p.add_argument("--source-keys-file",
                   help='JSON [{"access_key", "secret_key", "session_token"?}] AssumeRole accepts')
    p.add_argument("--web-identity-token-file", help="the expected WebIdentityToken (read once)")
    p = sub.add_parser("imds", parents=[common], help="EC2 instance metadata (IMDSv2)")
    p.add_argument("--role-name", default="pcrfs-test-role")
    p = sub.add_parser("container", parents=[common], help="container credentials endpoint")
    p.add_argument("--path", default="/v2/credentials/pcrfs-test")
    p.add_argument("--role-arn", default=f"arn:aws:iam::{ACCOUNT}:role/pcrfs-container")
    p = sub.add_parser("credential-process", help="print one credential_process answer")
    p.add_argument("--s3-endpoint", required=True)
    p.add_argument("--lifetime", type=float, default=DEFAULT_LIFETIME)
    p.add_argument("--log", help="append the minted credentials (secrets too) as a JSON line")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "credential-process":
            print(json.dumps(credential_process(args.s3_endpoint, args.lifetime, args.log)))
            return 0
        common_kw = {"keys": args.s3_endpoint, "lifetime": args.lifetime,
                     "revoke_after": args.revoke_after, "port": args.port}
        if args.cmd == "sts":
            sources = {}
            if args.source_keys_file:
                with open(args.source_keys_file) as f:
                    for k in json.load(f):
                        sources[k["access_key"]] = (k["secret_key"], k.get("session_token"))
            token = None
            if args.web_identity_token_file:
                with open(args.web_identity_token_file) as f:
                    token = f.read().strip()
            server = StsServer(roles=args.role, source_keys=sources, web_identity_token=token,
                               **common_kw)
        elif args.cmd == "imds":
            server = ImdsServer(role=args.role_name, **common_kw)
        else:
            server = ContainerServer(path=args.path, role_arn=args.role_arn,
                                     auth_token=os.environ.get("PCRFS_CONTAINER_TOKEN"),
                                     **common_kw)
        return serve_until_signal(server, args.ready_file)
    except (ServerError, ValueError, OSError, KeyError) as e:
        print(f"cred_servers {args.cmd}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
