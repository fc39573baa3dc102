#!/usr/bin/env node
// A fast HTTP/1.1 latency proxy for the remote-store benchmarks (tests/bench/README.md).
//
// fault_proxy.py (a thread per connection under Python's GIL) carries 2,500-3,500 small ranged
// GETs/s on this 2-core machine with 20 ms added; a level-10 epoch at rclone's files/s needs
// ~6,000. This one carries 6,300-9,500 at 70-95 µs of CPU per GET (tests/bench/README.md,
// proxy_load_bench.py). It does one thing, in one event loop: it waits --latency ms (plus any latency
// rule added at runtime), then forwards the request unchanged (method, path, every header but
// the hop-by-hop ones: Host, Authorization, Range, multi-range, x-amz-*, so signatures still
// verify upstream) on a kept-alive upstream connection, and streams the answer back (status,
// headers, body) while counting its body bytes. Built-in node modules only.
//
//   node latency_proxy.js --upstream http://127.0.0.1:PORT[/PREFIX] [--latency MS]
//                         [--host 127.0.0.1] [--port 0] [--ready-file F]
//
// Prints {"url", "pid"} on stdout once listening (and writes it to --ready-file, atomically).
// Control endpoints, a subset of fault_proxy.py's with the same fields:
//   GET  /__stats   {"requests", "bytes_to_client", "bytes_from_upstream", "upstream_requests",
//                    "statuses": {"206": n, ...}, "faults": {"latency": n}, "latency_ms",
//                    "in_flight", "max_in_flight", "upstream_errors", "proxy": "latency_proxy.js"}
//   POST /__reset   zeroes the stats and removes the runtime latency rules (--latency stays)
//   POST /__fault   {"fault": "latency", "ms": N} (or {"rules": [...]}) adds N ms to every
//                   request until /__reset, as fault_proxy.py's latency rule does; any other
//                   kind or selector is refused with 400 (use fault_proxy.py for faults)
//   GET  /__fault   the runtime rules
// Counts are taken before the client can see what they count (status before the headers are
// sent, bytes before each write), so a client that has its answer finds it in /__stats.
// A request is counted in "requests" when it arrives, control requests excepted.

'use strict';

const fs = require('fs');
const http = require('http');

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate',
  'proxy-authorization', 'te', 'trailer', 'trailers', 'transfer-encoding', 'upgrade']);
const CONTROL_PREFIX = '/__';

function usage(msg) {
  process.stderr.write(`latency_proxy: ${msg}\nusage: node latency_proxy.js --upstream URL ` +
    '[--latency MS] [--host H] [--port P] [--ready-file F]\n');
  process.exit(2);
}

function parseArgs(argv) {
  const a = {upstream: null, latency: 0, host: '127.0.0.1', port: 0, readyFile: null};
  for (let i = 0; i < argv.length; i++) {
    const next = () => {
      if (i + 1 >= argv.length) usage(`${argv[i]} needs a value`);
      return argv[++i];
    };
    switch (argv[i]) {
      case '--upstream': a.upstream = next(); break;
      case '--latency': a.latency = Number(next()); break;
      case '--host': a.host = next(); break;
      case '--port': a.port = Number(next()); break;
      case '--ready-file': a.readyFile = next(); break;
      case '-h': case '--help': usage('help'); break;
      default: usage(`unknown argument ${argv[i]}`);
    }
  }
  if (!a.upstream) usage('--upstream is required');
  if (!Number.isFinite(a.latency) || a.latency < 0) usage('--latency: milliseconds >= 0');
  if (!Number.isInteger(a.port) || a.port < 0 || a.port > 65535) usage('--port: 0..65535');
  let u;
  try {
    u = new URL(a.upstream);
  } catch (e) {
    usage(`--upstream ${a.upstream}: not a URL`);
  }
  if (u.protocol !== 'http:' || !u.hostname) usage(`--upstream ${a.upstream}: an http:// URL`);
  a.upHost = u.hostname;
  a.upPort = Number(u.port || 80);
  a.upPrefix = u.pathname.replace(/\/+$/, '');
  return a;
}

const args = parseArgs(process.argv.slice(2));

function freshStats() {
  return {requests: 0, bytes_to_client: 0, bytes_from_upstream: 0, upstream_requests: 0,
    statuses: {}, faults: {}, in_flight: 0, max_in_flight: 0, upstream_errors: 0};
}
let stats = freshStats();
let rules = [];  // runtime latency rules: {id, fault: "latency", ms}
let nextRuleId = 1;
let ruleMs = 0;  // their sum

function countStatus(status) {
  const k = String(status);
  stats.statuses[k] = (stats.statuses[k] || 0) + 1;
}

// Many connections to the origin, kept alive; lifo reuses the warmest one.
const agent = new http.Agent({keepAlive: true, keepAliveMsecs: 1000, maxSockets: Infinity,
  maxFreeSockets: 4096, scheduling: 'lifo'});

function replyJson(res, status, obj) {
  const body = Buffer.from(JSON.stringify(obj));
  res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length': body.length});
  res.end(body);
}

function readBody(req, done) {
  const parts = [];
  req.on('data', (c) => parts.push(c));
  req.on('end', () => done(Buffer.concat(parts)));
  req.on('error', () => done(Buffer.alloc(0)));
}

function control(req, res) {
  readBody(req, (body) => {
    const route = `${req.method} ${req.url.split('?')[0]}`;
    if (route === 'GET /__stats') {
      replyJson(res, 200, Object.assign({}, stats, {latency_ms: args.latency + ruleMs,
        proxy: 'latency_proxy.js'}));
    } else if (route === 'POST /__reset') {
      stats = Object.assign(freshStats(), {in_flight: stats.in_flight});
      rules = [];
      ruleMs = 0;
      replyJson(res, 200, {ok: true});
    } else if (route === 'GET /__fault') {
      replyJson(res, 200, {rules});
    } else if (route === 'POST /__fault') {
      let specs;
      try {
        const spec = JSON.parse(body.length ? body.toString() : '{}');
        specs = spec && !Array.isArray(spec) && 'rules' in spec ? spec.rules : [spec];
        if (!Array.isArray(specs)) throw new Error("'rules' is a list");
        for (const s of specs) {
          if (!s || typeof s !== 'object' || s.fault !== 'latency') {
            throw new Error(`only {"fault": "latency", "ms": N} here (got ${JSON.stringify(s)}); ` +
              'other faults: tests/remote/fault_proxy.py');
          }
          const extra = Object.keys(s).filter((k) => k !== 'fault' && k !== 'ms');
          if (extra.length) throw new Error(`no selectors here: ${extra.join(', ')}`);
          if (!Number.isFinite(Number(s.ms || 0)) || Number(s.ms || 0) < 0) {
            throw new Error('ms: milliseconds >= 0');
          }
        }
      } catch (e) {
        replyJson(res, 400, {error: `bad fault rule: ${e.message}`});
        return;
      }
      const ids = [];
      for (const s of specs) {
        const rule = {id: nextRuleId++, fault: 'latency', ms: Number(s.ms || 0)};
        rules.push(rule);
        ruleMs += rule.ms;
        ids.push(rule.id);
      }
      replyJson(res, 200, {ids});
    } else {
      replyJson(res, 404, {error: `no control endpoint ${req.method} ${req.url}`});
    }
  });
}

function upstreamHeaders(raw) {
  const out = [];
  for (let i = 0; i < raw.length; i += 2) {
    if (!HOP_BY_HOP.has(raw[i].toLowerCase())) out.push(raw[i], raw[i + 1]);
  }
  return out;
}

function badGateway(req, res, err) {
  stats.upstream_errors++;
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = Buffer.from(`latency proxy: upstream ${args.upHost}:${args.upPort}: ` +
    `${err.message}\n`);
  countStatus(502);
  res.writeHead(502, {'Content-Type': 'text/plain', 'Content-Length': body.length});
  if (req.method !== 'HEAD') stats.bytes_to_client += body.length;
  res.end(req.method === 'HEAD' ? undefined : body);
}

function forward(req, res, headers, attempt) {
  const up = http.request({host: args.upHost, port: args.upPort, method: req.method,
    path: args.upPrefix + req.url, headers, agent, setHost: false});
  let answered = false;
  let clientGone = false;  // the client closed its connection before its answer was complete
  up.on('socket', (s) => s.setNoDelay(true));
  up.on('response', (upRes) => {
    answered = true;
    stats.upstream_requests++;
    const status = upRes.statusCode;
    countStatus(status);
    if (clientGone) {
      upRes.resume();
      return;
    }
    res.writeHead(status, upRes.statusMessage, upstreamHeaders(upRes.rawHeaders));
    upRes.on('data', (chunk) => {
      stats.bytes_from_upstream += chunk.length;
      stats.bytes_to_client += chunk.length;
      if (!res.write(chunk)) upRes.pause();
    });
    res.on('drain', () => upRes.resume());
    upRes.on('end', () => res.end());
    // The origin sent less than it announced: so does the proxy (the client sees a short body).
    upRes.on('aborted', () => res.destroy());
    upRes.on('error', () => res.destroy());
  });
  up.on('error', (err) => {
    if (answered || clientGone) {
      res.destroy();
      return;
    }
    // A kept-alive connection the origin closed meanwhile: once more on a fresh one, for
    // requests without a body (the body was consumed by the first attempt).
    if (attempt === 0 && up.reusedSocket && (req.method === 'GET' || req.method === 'HEAD') &&
        !res.destroyed) {
      forward(req, res, headers, 1);
      return;
    }
    badGateway(req, res, err);
  });
  res.on('close', () => {
    if (!res.writableFinished) {
      clientGone = true;
      up.destroy();
    }
  });
  if (req.method === 'GET' || req.method === 'HEAD') {
    up.end();
  } else {
    req.pipe(up);
  }
}

function proxy(req, res) {
  stats.requests++;
  stats.in_flight++;
  if (stats.in_flight > stats.max_in_flight) stats.max_in_flight = stats.in_flight;
  let done = false;
  const finish = () => {
    if (!done) {
      done = true;
      stats.in_flight--;
    }
  };
  res.on('finish', finish);
  res.on('close', finish);
  const headers = upstreamHeaders(req.rawHeaders);
  const ms = args.latency + ruleMs;
  if (ms > 0) {
    stats.faults.latency = (stats.faults.latency || 0) + 1;
    setTimeout(() => {
      if (!res.destroyed) forward(req, res, headers, 0);
    }, ms);
  } else {
    forward(req, res, headers, 0);
  }
}

const server = http.createServer((req, res) => {
  res.on('error', () => res.destroy());  // a client gone mid-answer: nothing more to send
  req.on('error', () => res.destroy());
  if (req.url.startsWith(CONTROL_PREFIX)) control(req, res);
  else proxy(req, res);
});
server.keepAliveTimeout = 300 * 1000;  // as nginx's and fault_proxy.py's
server.headersTimeout = 310 * 1000;
server.requestTimeout = 0;
server.maxHeadersCount = 0;
server.on('clientError', (err, socket) => socket.destroy());

server.listen(args.port, args.host, 1024, () => {
  const addr = server.address();
  const info = {url: `http://${addr.address}:${addr.port}`, pid: process.pid};
  if (args.readyFile) {
    fs.writeFileSync(args.readyFile + '.tmp', JSON.stringify(info) + '\n');
    fs.renameSync(args.readyFile + '.tmp', args.readyFile);
  }
  process.stdout.write(JSON.stringify(info) + '\n');
});
server.on('error', (err) => {
  process.stderr.write(`latency_proxy: ${err.message}\n`);
  process.exit(1);
});

for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    server.close();
    agent.destroy();
    process.exit(0);
  });
}
