// careless.test.mjs: the smaller holes a careless client or operator finds:
// oversized request heads get tf's JSON and are counted, refusals at the
// header stage keep the connection open, API keys in either header and
// with comments in the key file, and label values escaped in /metrics.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { start, post, raw } from './lib.mjs';

let srv;
before(async () => { srv = await start(['--model', 'we"ird\\name']); });
after(async () => { assert.equal((await srv.stop()).code, 0); });

async function http4xx(url) {
  const t = await (await fetch(url + '/metrics')).text();
  return Number(t.match(/^tf_http_responses_total\{[^}]*code="4xx"\} (\d+)/m)[1]);
}

const body = (got) => JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4));

test('a long header or path gets a JSON 431 or 414, counted', async () => {
  const n0 = await http4xx(srv.url);
  const h = await raw(srv.port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(40000)}\r\n\r\n`);
  assert.match(h, /^HTTP\/1\.1 431 [^]*Content-Type: application\/json/);
  assert.match(body(h).error.message, /header is larger than 32768 bytes/);
  const u = await raw(srv.port, `GET /${'a'.repeat(20000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  assert.match(u, /^HTTP\/1\.1 414 [^]*Content-Type: application\/json/);
  assert.equal(body(u).error.type, 'invalid_request_error');
  assert.equal(await http4xx(srv.url), n0 + 2);
});

test('a head past the connection memory gets the same JSON, counted', async () => {
  const n0 = await http4xx(srv.url);
  const h = await raw(srv.port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(1 << 20)}\r\n\r\n`);
  assert.match(h, /^HTTP\/1\.1 431 [^]*Content-Type: application\/json/);
  assert.match(body(h).error.message, /header is larger than 32768 bytes/);
  const u = await raw(srv.port, `GET /${'a'.repeat(1 << 20)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  assert.match(u, /^HTTP\/1\.1 414 [^]*Content-Type: application\/json/);
  assert.match(body(u).error.message, /path is longer than 8192 bytes/);
  const l = await raw(srv.port, `GET /health HTTP/1.1\r\nHost: x\r\n${'a:\r\n'.repeat(5000)}\r\n`);
  assert.match(l, /^HTTP\/1\.1 431 [^]*Content-Type: application\/json/);
  assert.match(body(l).error.message, /header lines do not fit in the server's 64 KiB/);
  const bad = await raw(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n');
  assert.match(bad, /^HTTP\/1\.1 400 /);
  assert.equal(await http4xx(srv.url), n0 + 4);
});

test('heads past the connection memory among ordinary requests: each gets its own answer', async () => {
  const n0 = await http4xx(srv.url);
  const big = () => raw(srv.port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(300000)}\r\n\r\n`);
  const long = () => raw(srv.port, `GET /${'a'.repeat(300000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  const plain = () => raw(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
  const jobs = [];
  for (let i = 0; i < 20; i++) jobs.push(['431', big()], ['414', long()], ['200', plain()], ['200', plain()]);
  const got = await Promise.all(jobs.map(([, p]) => p));
  jobs.forEach(([want], i) => {
    assert.match(got[i], new RegExp(`^HTTP/1\\.1 ${want} [^]*Content-Type: application/json`), `request ${i}`);
  });
  // a keep-alive connection: one ordinary request, then a head too large
  const s = net.connect(srv.port, '127.0.0.1');
  let all = '';
  s.on('data', (d) => { all += d; });
  s.on('error', () => {});
  await new Promise((r) => s.on('connect', r));
  s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
  for (let i = 0; i < 100 && !all.includes('}'); i++) await new Promise((r) => setTimeout(r, 20));
  s.write(`GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(1 << 20)}\r\n\r\n`);
  await new Promise((r) => { s.on('close', r); setTimeout(r, 5000); });
  assert.match(all, /^HTTP\/1\.1 200 [^]*HTTP\/1\.1 431 [^]*Content-Type: application\/json/);
  assert.equal(await http4xx(srv.url), n0 + 41);
});

// Requests one after the other on one socket; resolves with each reply's
// status line, or null for those the server closed the socket before.
function sequence(port, reqs) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    const out = [];
    let got = '', i = 0;
    const next = () => { if (i < reqs.length) s.write(reqs[i++]); else { s.destroy(); resolve(out); } };
    s.on('data', (d) => {
      got += d;
      for (;;) {
        const e = got.indexOf('\r\n\r\n');
        if (e < 0) return;
        const len = Number((got.slice(0, e).match(/Content-Length: (\d+)/i) || [0, 0])[1]);
        if (got.length < e + 4 + len) return;
        out.push(got.slice(0, got.indexOf('\r\n')));
        got = got.slice(e + 4 + len);
        next();
      }
    });
    s.on('close', () => { while (out.length < reqs.length) out.push(null); resolve(out); });
    s.on('error', () => {});
    s.on('connect', next);
  });
}

test('refusals at the header stage keep the connection open', async () => {
  const health = 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n';
  const got = await sequence(srv.port, [
    'GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n', health,
    'POST /nowhere HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello', health,
    'POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}', health,
    'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"a":\r\n0\r\n\r\n', health,
  ]);
  assert.deepEqual(got, ['HTTP/1.1 404 Not Found', 'HTTP/1.1 200 OK', 'HTTP/1.1 404 Not Found', 'HTTP/1.1 200 OK',
    'HTTP/1.1 405 Method Not Allowed', 'HTTP/1.1 200 OK', 'HTTP/1.1 400 Bad Request', 'HTTP/1.1 200 OK']);
});

test('a 401 keeps the connection open', async () => {
  const k = await start(['--api-key', 'k-one']);
  try {
    const b = '{"messages":[{"role":"user","content":"@short"}]}';
    const got = await sequence(k.port, [
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ${b.length}\r\n\r\n${b}`,
      'GET /health HTTP/1.1\r\nHost: x\r\n\r\n',
    ]);
    assert.deepEqual(got, ['HTTP/1.1 401 Unauthorized', 'HTTP/1.1 200 OK']);
  } finally {
    await k.stop();
  }
});

test('a key in either header: a wrong or empty other one does not count against it', async () => {
  const k = await start(['--api-key', 'k-one']);
  try {
    const b = { messages: [{ role: 'user', content: '@short' }], max_tokens: 3 };
    const url = k.url + '/v1/chat/completions';
    assert.equal((await post(url, b, { 'x-api-key': 'wrong', authorization: 'Bearer k-one' })).status, 200);
    assert.equal((await post(url, b, { 'x-api-key': '', authorization: 'Bearer k-one' })).status, 200);
    assert.equal((await post(url, b, { 'x-api-key': 'k-one', authorization: 'Bearer wrong' })).status, 200);
    assert.equal((await post(url, b, { 'x-api-key': 'wrong', authorization: 'Bearer wrong' })).status, 401);
    assert.equal((await post(url, b, { 'x-api-key': '' })).status, 401);
  } finally {
    await k.stop();
  }
});

test('a key file: comments after a key are not part of it', async () => {
  const f = path.join(fs.mkdtempSync('/tmp/tf-keys-'), 'keys');
  fs.writeFileSync(f, '# keys\nsecret-1   # the CI key\nsec#ret-2\n\tsecret-3\t# tabbed\n', { mode: 0o600 });
  const k = await start(['--api-key-file', f]);
  try {
    const b = { messages: [{ role: 'user', content: '@short' }], max_tokens: 3 };
    const url = k.url + '/v1/chat/completions';
    assert.equal((await post(url, b, { authorization: 'Bearer secret-1' })).status, 200);
    assert.equal((await post(url, b, { authorization: 'Bearer secret-1   # the CI key' })).status, 401);
    assert.equal((await post(url, b, { authorization: 'Bearer sec#ret-2' })).status, 200);
    assert.equal((await post(url, b, { authorization: 'Bearer secret-3' })).status, 200);
  } finally {
    await k.stop();
  }
});

test('a model name with quotes and backslashes is escaped in /metrics', async () => {
  const t = await (await fetch(srv.url + '/metrics')).text();
  const labels = /^[a-zA-Z_:][a-zA-Z0-9_:]*\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\["\\n])*",?)*\} [0-9.e+-]+$/;
  for (const line of t.split('\n').filter((l) => l && !l.startsWith('#'))) assert.match(line, labels);
  assert.match(t, /^tf_requests_total\{model="we\\"ird\\\\name"\} /m);
});
