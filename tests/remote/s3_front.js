// The S3 test server: s3rver (the S3 protocol, objects on disk) behind a front that recomputes
// the AWS Signature V4 of every request with AWS's own signer (@smithy/signature-v4) and refuses
// a mismatch the way S3 does (403 SignatureDoesNotMatch, S3's XML error body). It also works
// around s3rver's range bugs (bytes=0-0 answered whole, suffix ranges wrong) so that ranged GETs
// give exact 206s, and maps virtual-host requests (Host: BUCKET.localhost) to path style.
// s3rver lacks UploadPartCopy (it answers NotImplemented): the front does it as S3 would, a
// ranged GET of the source and an UploadPart of those bytes to s3rver, answering
// <CopyPartResult>; and, as S3 does, CompleteMultipartUpload refuses (400 EntityTooSmall) a part
// under 5 MiB that is not the last, which s3rver does not check.
//
//   node s3_front.js CONFIG.json
//
// CONFIG: {"directory": s3rver's folder, "buckets": [names], "region": "us-east-1",
//          "keys": [{"access_key", "secret_key", "session_token"?, "expires_at"?}],
//          "allow_anonymous": false,
//          "port": 0, "check_clock": true (false accepts any x-amz-date, for AWS's examples)}
// Prints one JSON line {"port": N, "s3rver_port": M} once both listen. GET /__front/stats
// answers the front's counters (bucket names cannot start with "_").
//
// The accepted keys change at runtime, like temporary credentials do (tests/remote/cred_servers.py
// mints them): POST /__front/keys {"access_key", "secret_key", "session_token"?, "expires_at"?
// (epoch seconds)} adds or replaces one, DELETE /__front/keys/AK removes one, GET /__front/keys
// lists ids and expiry (never a secret). A key past its expires_at gets S3's 400 ExpiredToken.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const http = require('http');

const { Sha256 } = require('@aws-crypto/sha256-js');
const sigv4 = require('@smithy/signature-v4');
const S3rver = require('s3rver');
const FilesystemStore = require('s3rver/lib/stores/filesystem');

// s3rver's listing with a delimiter skips folders below a common prefix, and so misses every
// prefix with no object directly in it (s3://b/train/ when all objects are in train/CLASS/):
// list the whole prefix without a delimiter and group it here. One page holds everything (no
// continuation token to get wrong); clients accept a page longer than max-keys.
const listObjects = FilesystemStore.prototype.listObjects;
FilesystemStore.prototype.listObjects = async function(bucket, options) {
  const {delimiter = '', prefix = '', startAfter = ''} = options;
  if (!delimiter) return listObjects.call(this, bucket, options);
  const all = await listObjects.call(this, bucket, {prefix, startAfter});
  const objects = [];
  const commonPrefixes = new Set();
  for (const object of all.objects) {
    const idx = object.key.indexOf(delimiter, prefix.length);
    if (idx === -1) {
      objects.push(object);
    } else {
      commonPrefixes.add(object.key.slice(0, idx + delimiter.length));
    }
  }
  return {objects, commonPrefixes: [...commonPrefixes].sort(), isTruncated: false};
};

const ALGORITHM = 'AWS4-HMAC-SHA256';
const MAX_SKEW_MS = 15 * 60 * 1000;
const REMOVED_HEADER = 'x-fault-proxy-removed';

const config = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const region = config.region || 'us-east-1';
const keys = new Map();
const stats = {
  requests: 0,
  signed_ok: 0,
  signed_by_key: {},  // access key id -> requests signed with it that passed
  anonymous: 0,
  refused: {},
  range_fixed: 0,
  bytes_to_client: 0,
  part_copies: 0,  // UploadPartCopy requests answered
  part_copy_bytes: 0,
};
const MIN_PART = 5 * 1024 * 1024;
const MAX_COPY_PART = 5 * 1024 * 1024 * 1024;
const partSizes = new Map();  // uploadId -> Map(part number -> bytes)
let s3rverPort = 0;

function xmlEscape(s) {
  return String(s).replace(/[<>&'"]/g, (c) => ({
    '<': '&lt;', '>': '&gt;', '&': '&amp;', "'": '&apos;', '"': '&quot;',
  })[c]);
}

class S3Error extends Error {
  constructor(status, code, message, fields = {}) {
    super(message);
    this.status = status;
    this.code = code;
    this.fields = fields;
  }
}

function sendError(req, res, err) {
  stats.refused[err.code] = (stats.refused[err.code] || 0) + 1;
  const extra = Object.entries(err.fields)
      .map(([k, v]) => `<${k}>${xmlEscape(v)}</${k}>`).join('');
  const body = '<?xml version="1.0" encoding="UTF-8"?>\n' +
      `<Error><Code>${err.code}</Code><Message>${xmlEscape(err.message)}</Message>${extra}` +
      `<Resource>${xmlEscape(req.url)}</Resource>` +
      `<RequestId>${crypto.randomBytes(8).toString('hex')}</RequestId></Error>`;
  res.writeHead(err.status, {
    'Content-Type': 'application/xml',
    'Content-Length': Buffer.byteLength(body),
  });
  res.end(req.method === 'HEAD' ? undefined : body);
}

// "AWS4-HMAC-SHA256 Credential=AK/DATE/REGION/s3/aws4_request, SignedHeaders=a;b, Signature=hex"
function parseAuthorization(value) {
  if (!value.startsWith(ALGORITHM + ' ')) {
    throw new S3Error(400, 'InvalidArgument',
        `Unsupported Authorization Type (only ${ALGORITHM} is accepted)`);
  }
  const fields = {};
  for (const part of value.slice(ALGORITHM.length + 1).split(',')) {
    const eq = part.indexOf('=');
    if (eq > 0) fields[part.slice(0, eq).trim()] = part.slice(eq + 1).trim();
  }
  const scope = (fields.Credential || '').split('/');
  if (scope.length !== 5 || !fields.SignedHeaders || !fields.Signature ||
      scope[4] !== 'aws4_request') {
    throw new S3Error(400, 'AuthorizationHeaderMalformed',
        'The authorization header is malformed: ' +
        value.replace(/Signature=\w+/, 'Signature=…'));
  }
  return {
    accessKey: scope[0], date: scope[1], region: scope[2], service: scope[3],
    signedHeaders: fields.SignedHeaders.split(';'), signature: fields.Signature,
  };
}

// S3's canonical query: keys and values as the client sent them, decoded once (the signer
// encodes them again). A '+' stays a '+'.
function parseQuery(raw) {
  try {
    return parseQueryOrThrow(raw);
  } catch (err) {
    throw new S3Error(400, 'InvalidArgument', `a malformed query string: ${err.message}`);
  }
}

function parseQueryOrThrow(raw) {
  const query = {};
  if (!raw) return query;
  for (const part of raw.split('&')) {
    if (!part) continue;
    const eq = part.indexOf('=');
    const k = decodeURIComponent(eq < 0 ? part : part.slice(0, eq));
    const v = eq < 0 ? '' : decodeURIComponent(part.slice(eq + 1));
    if (k in query) {
      query[k] = [].concat(query[k], v);
    } else {
      query[k] = v;
    }
  }
  return query;
}

function amzDateToDate(s) {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(s || '');
  if (!m) return null;
  return new Date(Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +m[6]));
}

function sha256Hex(buf) {
  return crypto.createHash('sha256').update(buf).digest('hex');
}

// Checks the request's SigV4 signature; throws an S3Error on any mismatch.
async function verify(req, rawPath, rawQuery, body) {
  const auth = parseAuthorization(req.headers['authorization']);
  const key = keys.get(auth.accessKey);
  if (!key) {
    throw new S3Error(403, 'InvalidAccessKeyId',
        'The AWS Access Key Id you provided does not exist in our records.',
        {AWSAccessKeyId: auth.accessKey});
  }
  if (auth.region !== region || auth.service !== 's3') {
    throw new S3Error(400, 'AuthorizationHeaderMalformed',
        `The authorization header is malformed; the region '${auth.region}' is wrong; ` +
        `expecting '${region}'`, {Region: region});
  }
  const amzDate = req.headers['x-amz-date'];
  const signingDate = amzDateToDate(amzDate);
  if (!signingDate || !auth.signedHeaders.includes('x-amz-date') ||
      !auth.signedHeaders.includes('host')) {
    throw new S3Error(403, 'AccessDenied',
        'AWS authentication requires a valid x-amz-date header and signed host and x-amz-date');
  }
  if (auth.date !== amzDate.slice(0, 8)) {
    throw new S3Error(400, 'AuthorizationHeaderMalformed',
        `The authorization header is malformed; the credential date '${auth.date}' does not ` +
        `match x-amz-date '${amzDate}'`);
  }
  const skew = Math.abs(Date.now() - signingDate.getTime());
  if (config.check_clock !== false && skew > MAX_SKEW_MS) {
    throw new S3Error(403, 'RequestTimeTooSkewed',
        'The difference between the request time and the current time is too large.',
        {RequestTime: amzDate, ServerTime: new Date().toISOString()});
  }
  const contentSha = req.headers['x-amz-content-sha256'];
  if (!contentSha) {
    throw new S3Error(400, 'InvalidRequest',
        'Missing required header for this request: x-amz-content-sha256');
  }
  if (/^[0-9a-f]{64}$/.test(contentSha) && contentSha !== sha256Hex(body)) {
    throw new S3Error(400, 'XAmzContentSHA256Mismatch',
        'The provided \'x-amz-content-sha256\' header does not match what was computed.',
        {ClientComputedContentSHA256: contentSha, S3ComputedContentSHA256: sha256Hex(body)});
  }
  const token = req.headers['x-amz-security-token'];
  if ((key.session_token || token) && token !== key.session_token) {
    throw new S3Error(403, 'InvalidToken',
        'The provided token is malformed or otherwise invalid.');
  }
  // S3 reads the expiry from the session token itself, before it looks at the signature.
  if (isExpired(key)) {
    throw new S3Error(400, 'ExpiredToken', 'The provided token has expired.',
        token ? {'Token-0': token} : {});
  }

  // The headers the client signed, as received; a header the fault proxy removed counts as sent.
  const received = Object.assign({}, req.headers);
  if (received[REMOVED_HEADER]) {
    Object.assign(received, JSON.parse(received[REMOVED_HEADER]));
  }
  const headers = {};
  for (const name of auth.signedHeaders) {
    if (received[name] === undefined) {
      throw new S3Error(403, 'AccessDenied',
          `There were headers present in the request which were not signed / a signed ` +
          `header is missing: ${name}`);
    }
    headers[name] = received[name];
  }
  const request = {
    method: req.method, protocol: 'http:', hostname: 'unused', path: rawPath,
    query: parseQuery(rawQuery), headers, body,
  };
  const signer = new sigv4.SignatureV4({
    credentials: {accessKeyId: key.access_key, secretAccessKey: key.secret_key},
    region, service: 's3', sha256: Sha256, uriEscapePath: false, applyChecksum: false,
  });
  const signableHeaders = new Set(auth.signedHeaders);
  const signed = await signer.sign(request, {signingDate, signableHeaders});
  const expected = /Signature=([0-9a-f]+)/.exec(signed.headers['authorization'])[1];
  const expectedList = /SignedHeaders=([^,]+)/.exec(signed.headers['authorization'])[1];
  if (expected !== auth.signature || expectedList !== auth.signedHeaders.join(';')) {
    // What S3 answers: the canonical request and string to sign it computed.
    const prepared = sigv4.prepareRequest(request);
    prepared.headers['x-amz-date'] = amzDate;
    const canonical = signer.createCanonicalRequest(prepared,
        sigv4.getCanonicalHeaders(prepared, undefined, signableHeaders),
        await sigv4.getPayloadHash(prepared, Sha256));
    const scope = `${auth.date}/${region}/s3/aws4_request`;
    const stringToSign = await signer.createStringToSign(amzDate, scope, canonical, ALGORITHM);
    throw new S3Error(403, 'SignatureDoesNotMatch',
        'The request signature we calculated does not match the signature you provided. ' +
        'Check your key and signing method.', {
          AWSAccessKeyId: auth.accessKey, StringToSign: stringToSign,
          SignatureProvided: auth.signature, CanonicalRequest: canonical,
        });
  }
  return auth.accessKey;
}

function isExpired(key) {
  return key.expires_at !== undefined && key.expires_at !== null &&
      Date.now() / 1000 >= key.expires_at;
}

class ControlError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// Validates one key of the config or of POST /__front/keys; throws a ControlError(400).
function checkedKey(k) {
  const bad = (why) => new ControlError(400, `a bad key: ${why}`);
  if (!k || typeof k !== 'object') throw bad('not a JSON object');
  for (const name of ['access_key', 'secret_key']) {
    if (typeof k[name] !== 'string' || !k[name]) throw bad(`${name} must be a non-empty string`);
  }
  if (/[/\s,=]/.test(k.access_key)) {
    throw bad('an access key cannot hold / , = or spaces (the Credential field splits on them)');
  }
  if (k.session_token !== undefined && k.session_token !== null &&
      (typeof k.session_token !== 'string' || !k.session_token)) {
    throw bad('session_token must be a non-empty string or null');
  }
  if (k.expires_at !== undefined && k.expires_at !== null &&
      (typeof k.expires_at !== 'number' || !Number.isFinite(k.expires_at))) {
    throw bad('expires_at must be epoch seconds or null');
  }
  const key = {access_key: k.access_key, secret_key: k.secret_key};
  if (k.session_token) key.session_token = k.session_token;
  if (typeof k.expires_at === 'number') key.expires_at = k.expires_at;
  return key;
}

function sendJson(res, status, obj) {
  const out = JSON.stringify(obj);
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Content-Length': Buffer.byteLength(out),
  });
  res.end(out);
}

// The control API under /__front/ (bucket names cannot start with "_", so no S3 path clashes).
function handleControl(req, res, rawPath, body) {
  if (rawPath === '/__front/stats' && req.method === 'GET') {
    sendJson(res, 200, stats);
    return;
  }
  if (rawPath === '/__front/keys' && req.method === 'GET') {
    sendJson(res, 200, {keys: [...keys.values()].map((k) => ({
      access_key: k.access_key, expires_at: k.expires_at === undefined ? null : k.expires_at,
      session_token: Boolean(k.session_token), expired: isExpired(k),
    }))});
    return;
  }
  if (rawPath === '/__front/keys' && req.method === 'POST') {
    let parsed;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch (err) {
      throw new ControlError(400, `a bad key: ${err.message}`);
    }
    const key = checkedKey(parsed);
    const replaced = keys.has(key.access_key);
    keys.set(key.access_key, key);
    sendJson(res, 200, {access_key: key.access_key, replaced});
    return;
  }
  const m = /^\/__front\/keys\/([^/]+)$/.exec(rawPath);
  if (m && req.method === 'DELETE') {
    const ak = decodeURIComponent(m[1]);
    sendJson(res, 200, {access_key: ak, removed: keys.delete(ak)});
    return;
  }
  throw new ControlError(404, `no control ${req.method} ${rawPath}`);
}

function s3rverRequest(method, reqPath, headers, body) {
  return new Promise((resolve, reject) => {
    const r = http.request({host: '127.0.0.1', port: s3rverPort, method, path: reqPath, headers},
        resolve);
    r.on('error', reject);
    r.end(body && body.length ? body : undefined);
  });
}

async function readAll(stream) {
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  return Buffer.concat(chunks);
}

// s3rver reads "bytes=0-0" as the whole object and "bytes=-N" as "bytes=0-N", and fails on
// multi-range requests (S3 ignores those and answers 200). Returns {range, trimToOne} to send.
async function fixRange(range, objectPath, headers) {
  if (range === undefined) return {range};
  let m = /^bytes=(\d+)-(\d*)$/.exec(range);
  if (m) {
    if (m[2] !== '' && Number(m[2]) === 0 && Number(m[1]) === 0) {
      stats.range_fixed++;
      return {range: 'bytes=0-1', trimToOne: true};
    }
    return {range};
  }
  m = /^bytes=-(\d+)$/.exec(range);
  if (m) {
    stats.range_fixed++;
    const headHeaders = Object.assign({}, headers);
    delete headHeaders['range'];
    const head = await s3rverRequest('HEAD', objectPath, headHeaders);
    head.resume();
    if (head.statusCode !== 200) return {range};  // s3rver's own error (NoSuchKey, ...)
    const size = Number(head.headers['content-length']);
    const n = Number(m[1]);
    if (n === 0 || size === 0) return {range: `bytes=${size}-`};  // unsatisfiable: 416
    return {range: `bytes=${Math.max(0, size - n)}-${size - 1}`};
  }
  stats.range_fixed++;
  return {range: undefined};  // multi-range or not a byte range: the whole object, like S3
}

function notePart(uploadId, partNumber, size) {
  if (!partSizes.has(uploadId)) partSizes.set(uploadId, new Map());
  partSizes.get(uploadId).set(Number(partNumber), size);
}

// UploadPartCopy: PUT /BUCKET/KEY?partNumber=N&uploadId=U with x-amz-copy-source: /SRCBUCKET/SRCKEY
// and x-amz-copy-source-range: bytes=A-B (optional: the whole source).
async function uploadPartCopy(res, rawPath, rawQuery, query, headers) {
  const source = decodeURIComponent(headers['x-amz-copy-source'].split('?')[0]);
  const srcPath = '/' + source.replace(/^\//, '').split('/').map(encodeURIComponent).join('/');
  const base = {host: headers['host']};
  const head = await s3rverRequest('HEAD', srcPath, base);
  head.resume();
  if (head.statusCode === 404) throw new S3Error(404, 'NoSuchKey', 'The specified key does not exist.');
  if (head.statusCode !== 200) {
    throw new S3Error(head.statusCode, 'InvalidRequest', `copy source: ${head.statusCode}`);
  }
  const size = Number(head.headers['content-length']);
  let [a, b] = [0, size - 1];
  const range = headers['x-amz-copy-source-range'];
  if (range !== undefined) {
    const m = /^bytes=(\d+)-(\d+)$/.exec(range);
    if (!m) {
      throw new S3Error(400, 'InvalidArgument',
          'The x-amz-copy-source-range value must be of the form bytes=first-last');
    }
    [a, b] = [Number(m[1]), Number(m[2])];
    if (a > b || b >= size) {
      throw new S3Error(400, 'InvalidRange',
          `Range specified is not valid for source object of size: ${size}`);
    }
  }
  if (b - a + 1 > MAX_COPY_PART) {
    throw new S3Error(400, 'InvalidRequest', 'The specified copy source is larger than 5 GiB');
  }
  const get = await s3rverRequest('GET', srcPath,
      Object.assign({}, base, a === 0 && b === 0 ? {range: 'bytes=0-1'} : {range: `bytes=${a}-${b}`}));
  let data = await readAll(get);
  if (get.statusCode !== 206 && get.statusCode !== 200) {
    throw new S3Error(500, 'InternalError', `copy source read: ${get.statusCode}`);
  }
  data = data.subarray(0, b - a + 1);
  const putHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (!name.startsWith('x-amz-copy-source') && name !== 'content-length' &&
        name !== 'content-md5') {
      putHeaders[name] = value;
    }
  }
  putHeaders['content-length'] = String(data.length);
  putHeaders['x-amz-content-sha256'] = 'UNSIGNED-PAYLOAD';
  const put = await s3rverRequest('PUT', rawPath + '?' + rawQuery, putHeaders, data);
  const answer = await readAll(put);
  if (put.statusCode !== 200) {
    res.writeHead(put.statusCode, put.headers);
    res.end(answer);
    return;
  }
  notePart(query.uploadId, query.partNumber, data.length);
  stats.part_copies++;
  stats.part_copy_bytes += data.length;
  const body = '<?xml version="1.0" encoding="UTF-8"?>\n<CopyPartResult>' +
      `<LastModified>${new Date().toISOString()}</LastModified>` +
      `<ETag>${xmlEscape(put.headers['etag'])}</ETag></CopyPartResult>`;
  res.writeHead(200, {'Content-Type': 'application/xml', 'Content-Length': Buffer.byteLength(body)});
  res.end(body);
}

// S3 refuses to complete an upload whose parts but the last are under 5 MiB; s3rver does not.
function checkPartSizes(uploadId, body) {
  const sizes = partSizes.get(uploadId);
  if (!sizes) return;
  const numbers = [...String(body).matchAll(/<PartNumber>\s*(\d+)\s*<\/PartNumber>/g)]
      .map((m) => Number(m[1]));
  for (const n of numbers.slice(0, -1)) {
    if (sizes.has(n) && sizes.get(n) < MIN_PART) {
      throw new S3Error(400, 'EntityTooSmall',
          'Your proposed upload is smaller than the minimum allowed object size.',
          {PartNumber: n, ProposedSize: sizes.get(n), MinSizeAllowed: MIN_PART});
    }
  }
}

async function handle(req, res) {
  stats.requests++;
  const body = await readAll(req);
  const q = req.url.indexOf('?');
  let rawPath = q < 0 ? req.url : req.url.slice(0, q);
  const rawQuery = q < 0 ? '' : req.url.slice(q + 1);
  if (rawPath.startsWith('/__front/')) {
    try {
      handleControl(req, res, rawPath, body);
    } catch (err) {
      if (!(err instanceof ControlError)) throw err;
      sendJson(res, err.status, {error: err.message});  // not an S3 refusal: not counted
    }
    return;
  }
  const query = parseQuery(rawQuery);
  if ('X-Amz-Algorithm' in query || 'Signature' in query) {
    throw new S3Error(403, 'AccessDenied', 'This test server does not accept presigned URLs');
  }
  if (req.headers['authorization'] !== undefined) {
    const accessKey = await verify(req, rawPath, rawQuery, body);
    stats.signed_ok++;
    stats.signed_by_key[accessKey] = (stats.signed_by_key[accessKey] || 0) + 1;
  } else if (config.allow_anonymous && (req.method === 'GET' || req.method === 'HEAD')) {
    stats.anonymous++;
  } else {
    throw new S3Error(403, 'AccessDenied', 'Access Denied (an unsigned request)');
  }

  // Virtual-host style: Host BUCKET.localhost[:port] (or AWS's BUCKET.s3[.REGION].amazonaws.com)
  // means path /BUCKET/...
  const host = (req.headers['host'] || '').replace(/:\d+$/, '');
  const vhost = /^(.+?)\.(?:localhost|s3(?:[.-][a-z0-9-]+)?\.amazonaws\.com)$/.exec(host);
  if (vhost) rawPath = '/' + vhost[1] + (rawPath === '/' ? '' : rawPath);

  const headers = {};
  for (const [name, value] of Object.entries(req.headers)) {
    if (['authorization', 'host', 'connection', REMOVED_HEADER].includes(name)) continue;
    headers[name] = value;
  }
  headers['host'] = `127.0.0.1:${s3rverPort}`;
  let fix = {range: undefined};
  if ((req.method === 'GET' || req.method === 'HEAD') && headers['range'] !== undefined) {
    fix = await fixRange(headers['range'], rawPath, headers);
    if (fix.range === undefined) {
      delete headers['range'];
    } else {
      headers['range'] = fix.range;
    }
  }
  if ('uploadId' in query && 'partNumber' in query && req.method === 'PUT') {
    if (headers['x-amz-copy-source'] !== undefined) {
      await uploadPartCopy(res, rawPath, rawQuery, query, headers);
      return;
    }
    notePart(query.uploadId, query.partNumber, body.length);
  } else if ('uploadId' in query && req.method === 'POST') {
    checkPartSizes(query.uploadId, body);
    partSizes.delete(query.uploadId);
  } else if ('uploadId' in query && req.method === 'DELETE') {
    partSizes.delete(query.uploadId);
  }
  const upstream = await s3rverRequest(req.method,
      rawPath + (rawQuery ? '?' + rawQuery : ''), headers, body);
  const outHeaders = Object.assign({}, upstream.headers);
  delete outHeaders['connection'];
  delete outHeaders['keep-alive'];
  if (fix.trimToOne && upstream.statusCode === 206) {
    const data = (await readAll(upstream)).subarray(0, 1);
    const total = /\/(\d+)$/.exec(outHeaders['content-range'])[1];
    outHeaders['content-range'] = `bytes 0-0/${total}`;
    outHeaders['content-length'] = '1';
    res.writeHead(206, outHeaders);
    stats.bytes_to_client += req.method === 'HEAD' ? 0 : 1;
    res.end(req.method === 'HEAD' ? undefined : data);
    return;
  }
  // A client that goes away mid-body, or s3rver failing mid-body, ends the other side too.
  upstream.on('error', () => res.destroy());
  res.on('close', () => upstream.destroy());
  res.writeHead(upstream.statusCode, outHeaders);
  upstream.on('data', (c) => {
    stats.bytes_to_client += c.length;
  });
  upstream.pipe(res);
}

async function main() {
  for (const k of config.keys) {
    const key = checkedKey(k);
    keys.set(key.access_key, key);
  }
  const s3rver = new S3rver({
    address: '127.0.0.1', port: 0, silent: true, directory: config.directory,
    configureBuckets: config.buckets.map((name) => ({name})),
  });
  const addr = await s3rver.run();
  s3rverPort = addr.port;
  const front = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!(err instanceof S3Error)) {
        console.error('s3_front:', err && err.stack || err);
        err = new S3Error(500, 'InternalError', String(err && err.message || err));
      }
      if (res.headersSent) {
        res.destroy();
      } else {
        sendError(req, res, err);
      }
    });
  });
  front.keepAliveTimeout = 300 * 1000;
  front.headersTimeout = 310 * 1000;
  front.listen(config.port || 0, '127.0.0.1', () => {
    process.stdout.write(JSON.stringify({port: front.address().port, s3rver_port: s3rverPort}) +
        '\n');
  });
  const stop = () => {
    front.close();
    s3rver.close().finally(() => process.exit(0));
    setTimeout(() => process.exit(0), 2000).unref();
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main().catch((err) => {
  console.error('s3_front: ' + (err && err.stack || err));
  process.exit(1);
});
