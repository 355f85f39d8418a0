// slow.test.mjs: slow and idle clients against the connection slots: the
// whole-request deadline (--timeout covers headers and body, however
// steadily they trickle), and past --connections: idle keep-alive
// connections shed first, then the slowest senders, else a 503 at once.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { start, raw, sleep } from './lib.mjs';

const SLOTS = 12;
let srv;
before(async () => { srv = await start(['--connections', String(SLOTS), '--timeout', '2', '--http-threads', '2']); });
after(async () => { assert.equal((await srv.stop()).code, 0); });

// A socket that sends head, then one byte of more every ms until closed.
// Resolves .closed with {at: ms from the start, got: what came back}.
function trickle(port, head, more = 'X', ms = 200) {
  const s = net.connect(port, '127.0.0.1');
  const t0 = Date.now();
  let got = '', timer = null;
  const closed = new Promise((resolve) => {
    const done = () => { clearInterval(timer); resolve({ at: Date.now() - t0, got }); };
    s.on('close', done);
    s.on('error', () => {});
  });
  s.on('data', (d) => { got += d; });
  s.on('connect', () => {
    s.write(head);
    let i = 0;
    timer = setInterval(() => { if (!s.destroyed) s.write(more[i++ % more.length]); }, ms);
  });
  return { socket: s, closed, stop() { clearInterval(timer); s.destroy(); } };
}

// A keep-alive socket that made one request and stays open, silent.
function idle(port) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    s.on('error', () => {});
    s.on('data', (d) => {
      got += d;
      if (got.includes('\r\n\r\n') && got.endsWith('}')) resolve(s);
    });
    s.on('connect', () => s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n'));
    setTimeout(() => reject(new Error('no reply to the first request: ' + got)), 3000);
  });
}

const timed = (url, init = {}) => fetch(url, { ...init, signal: AbortSignal.timeout(3000) });

test('a client trickling its headers is cut at --timeout', async () => {
  const t = trickle(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ');
  const r = await Promise.race([t.closed, sleep(5000).then(() => null)]);
  t.stop();
  assert.ok(r, 'still open after 5 s with --timeout 2');
  assert.ok(r.at >= 1800 && r.at < 3500, `closed after ${r.at} ms`);
  assert.match(r.got, /^HTTP\/1\.1 408 /);
  assert.match(r.got, /"code":"request_timeout"/);
});

test('a trickled body is cut at --timeout', async () => {
  const t = trickle(srv.port, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
    'Content-Length: 1000\r\n\r\n{"messages":[{"role":"user","content":"');
  const r = await Promise.race([t.closed, sleep(5000).then(() => null)]);
  t.stop();
  assert.ok(r, 'still open after 5 s with --timeout 2');
  assert.ok(r.at >= 1800 && r.at < 3500, `closed after ${r.at} ms`);
  assert.match(r.got, /^HTTP\/1\.1 408 /);
});

test('past --connections, the slowest senders make room for new requests', async () => {
  const slow = [];
  for (let i = 0; i < SLOTS; i++) slow.push(trickle(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ', 'X', 300));
  await sleep(1200); // every slot taken, every sender past the 1 s grace
  try {
    for (let i = 0; i < 3; i++) {
      const t0 = Date.now();
      const h = await timed(srv.url + '/health');
      assert.equal(h.status, 200);
      assert.ok(Date.now() - t0 < 1000, `health took ${Date.now() - t0} ms`);
      const c = await timed(srv.url + '/v1/chat/completions', {
        method: 'POST', headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ messages: [{ role: 'user', content: '@short' }], max_tokens: 3 }),
      });
      assert.equal(c.status, 200);
      await c.text();
    }
    const cut = (await Promise.all(slow.map((t) => Promise.race([t.closed, sleep(10).then(() => null)])))).filter(Boolean);
    assert.ok(cut.length >= 1, 'a slow sender was displaced');
    for (const r of cut) assert.match(r.got, /^HTTP\/1\.1 503 [^]*Retry-After: 1\r\n/);
  } finally {
    for (const t of slow) t.stop();
  }
});

test('past --connections, idle keep-alive connections are shed first', async () => {
  await sleep(300);
  const socks = [];
  for (let i = 0; i < SLOTS; i++) socks.push(await idle(srv.port));
  const slow = trickle(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ');
  try {
    const closed = socks.map((s) => new Promise((resolve) => s.on('close', () => resolve(true))));
    const h = await timed(srv.url + '/health');
    assert.equal(h.status, 200);
    await sleep(100);
    const n = (await Promise.all(closed.map((p) => Promise.race([p, sleep(10).then(() => false)])))).filter(Boolean).length;
    assert.ok(n >= 1 && n <= 3, `${n} idle connections shed`);
    assert.equal(slow.socket.destroyed, false, 'the fresh slow sender was kept');
  } finally {
    slow.stop();
    for (const s of socks) s.destroy();
  }
});

test('when every slot is busy, a new connection gets 503 with Retry-After at once', async () => {
  await sleep(300);
  const ac = new AbortController();
  const open = [];
  for (let i = 0; i < SLOTS; i++) {
    open.push(fetch(srv.url + '/v1/chat/completions', {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ac.signal,
      body: JSON.stringify({ messages: [{ role: 'user', content: '@hang' }] }),
    }).catch(() => null));
  }
  await sleep(500);
  try {
    const t0 = Date.now(); // a new connection (fetch might reuse an idle one)
    const got = await raw(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n', 3000);
    assert.ok(Date.now() - t0 < 1000, `answered after ${Date.now() - t0} ms`);
    assert.match(got, /^HTTP\/1\.1 503 [^]*Retry-After: 1\r\n/);
    assert.equal(JSON.parse(got.slice(got.indexOf('\r\n\r\n') + 4)).error.code, 'server_busy');
  } finally {
    ac.abort();
    await Promise.all(open);
  }
  await sleep(300);
  assert.equal((await timed(srv.url + '/health')).status, 200);
});
