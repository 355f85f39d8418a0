// writer.test.mjs: the stream writers: the X-TF-Timing stamps (each
// token's make time, before the client could read it), a client that stops
// reading while the server has megabytes for it (every token arrives, in
// order, once it reads again), and one that leaves with a full socket
// (its request ends, the server keeps serving).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { start, frames, metric, sleep } from './lib.mjs';

let srv;
before(async () => {
  srv = await start(['--stub-token-ms', '0', '--stub-piece-us', '0', '--keepalive', '0',
    '--context', '100000', '--max-tokens', '90000']);
});
after(async () => { assert.equal((await srv.stop()).code, 0); });

const LONG = 'Plenty to say here, more than the limit lets through. ';

function request(n, headers = '') {
  const body = JSON.stringify({
    model: 'stub', stream: true, max_tokens: n, ignore_eos: true,
    messages: [{ role: 'user', content: '@long' }],
  });
  return 'POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n' +
    `${headers}Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
}

// The body of a chunked HTTP response.
function dechunk(bytes) {
  const s = bytes.toString('latin1');
  let at = s.indexOf('\r\n\r\n') + 4, out = '';
  for (;;) {
    const nl = s.indexOf('\r\n', at);
    const n = parseInt(s.slice(at, nl), 16);
    if (!(n > 0)) break;
    out += s.slice(nl + 2, nl + 2 + n);
    at = nl + 2 + n + 2;
  }
  return Buffer.from(out, 'latin1').toString('utf8');
}

function text(fs) {
  return fs.map((f) => f.data?.choices?.[0]?.delta?.reasoning_content ??
    f.data?.choices?.[0]?.delta?.content ?? '').join('');
}

test('X-TF-Timing: a tf-made stamp before each token event, made before it arrived', async () => {
  const stamped = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-tf-timing': '1' },
    body: JSON.stringify({ stream: true, max_tokens: 40, ignore_eos: true, messages: [{ role: 'user', content: '@long' }] }),
  });
  const dec = new TextDecoder();
  let buf = '', seen = 0;
  for await (const chunk of stamped.body) {
    const arrived = process.hrtime.bigint(); // CLOCK_MONOTONIC, as the server's stamps
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const f = frames(block + '\n\n')[0];
      if (!text([f])) continue;
      const m = block.match(/^: tf-made (\d+)\n/);
      assert.ok(m, `no stamp before ${block}`);
      assert.ok(BigInt(m[1]) <= arrived, 'made after it arrived');
      assert.ok(arrived - BigInt(m[1]) < 60n * 1000000000n, 'not the same clock');
      seen++;
    }
  }
  assert.equal(seen, 40);
  const plain = await (await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ stream: true, max_tokens: 5, messages: [{ role: 'user', content: '@long' }] }),
  })).text();
  assert.ok(!plain.includes('tf-made'));
});

test('a client that stops reading gets every token, in order, when it reads again', async () => {
  const n = 60000; // about 13 MB of frames: more than the socket buffers hold
  const got = await new Promise((resolve, reject) => {
    const s = net.connect(srv.port, '127.0.0.1');
    const parts = [];
    s.on('data', (d) => {
      parts.push(d);
      if (d.toString('latin1').endsWith('0\r\n\r\n')) s.end();
    });
    s.on('close', () => resolve(Buffer.concat(parts)));
    s.on('error', reject);
    s.write(request(n));
    s.pause();
    setTimeout(() => s.resume(), 1500);
  });
  const fs = frames(dechunk(got));
  assert.equal(fs[fs.length - 1].data, '[DONE]');
  const t = text(fs);
  assert.equal(t.length, n);
  assert.equal(t, LONG.repeat(Math.ceil(n / LONG.length)).slice(0, n));
});

test('a client that leaves with a full socket is let go; the server goes on', async () => {
  await new Promise((resolve) => {
    const s = net.connect(srv.port, '127.0.0.1');
    s.on('error', () => {});
    s.write(request(90000));
    s.pause();
    setTimeout(() => { s.destroy(); resolve(); }, 1000);
  });
  let held = 1;
  for (let i = 0; i < 50 && held !== 0; i++) {
    await sleep(100);
    held = await metric(srv.url, 'tf_requests_inflight');
  }
  assert.equal(held, 0);
  const r = await fetch(srv.url + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ max_tokens: 3, messages: [{ role: 'user', content: '@short' }] }),
  });
  assert.equal(r.status, 200);
});
