// keepalive.test.mjs: keepalives on silent streams, disconnects cancel,
// cancel of whole replies.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { start, stream, metric, sleep } from './lib.mjs';

let srv;
before(async () => { srv = await start(['--keepalive', '0.2', '--stub-wait-ms', '1000', '--stub-token-ms', '5']); });
after(async () => { assert.equal((await srv.stop()).code, 0); });

test('chat: at least 3 keepalives before the first token', async () => {
  const r = await stream(srv.url + '/v1/chat/completions', {
    messages: [{ role: 'user', content: '@wait' }], stream: true, reasoning_effort: 'none',
  });
  const first = r.frames.findIndex((f) => f.data?.choices?.[0]?.delta?.content);
  const keepalives = r.frames.slice(0, first).filter((f) => f.comment === 'keepalive').length;
  assert.ok(keepalives >= 3, `${keepalives} keepalives`);
  assert.equal(r.frames[r.frames.length - 1].data, '[DONE]');
});

test('messages: message_start, then pings, then deltas', async () => {
  const r = await stream(srv.url + '/v1/messages', {
    model: 'x', max_tokens: 50, stream: true, messages: [{ role: 'user', content: '@wait' }],
  });
  const types = r.frames.map((f) => f.event);
  const ms = types.indexOf('message_start'), ping = types.indexOf('ping'), delta = types.indexOf('content_block_delta');
  assert.ok(ms === 0 && ms < ping && ping < delta, types.join(','));
  assert.ok(types.filter((t) => t === 'ping').length >= 3);
  assert.deepEqual(r.frames[ping].data, { type: 'ping' });
});

test('a client leaving a silent stream cancels it', async () => {
  const before = await metric(srv.url, 'tf_requests_cancelled_total');
  const ac = new AbortController();
  const r = stream(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: '@hang' }], stream: true },
    (f) => { if (f.comment === 'keepalive') ac.abort(); return false; }, ac.signal).catch((e) => e);
  assert.equal((await r).name, 'AbortError');
  let n = before;
  for (let i = 0; i < 100 && n === before; i++) { await sleep(20); n = await metric(srv.url, 'tf_requests_cancelled_total'); }
  assert.equal(n, before + 1);
  for (let i = 0; i < 50 && await metric(srv.url, 'tf_requests_running') !== 0; i++) await sleep(20);
  assert.equal(await metric(srv.url, 'tf_requests_running'), 0);
});

test('a client leaving a whole reply cancels it', async () => {
  const before = await metric(srv.url, 'tf_requests_cancelled_total');
  const ac = new AbortController();
  const r = fetch(srv.url + '/v1/chat/completions', {
    method: 'POST', body: JSON.stringify({ messages: [{ role: 'user', content: '@hang' }] }), signal: ac.signal,
  }).catch((e) => e);
  await sleep(300);
  assert.equal(await metric(srv.url, 'tf_requests_running'), 1);
  ac.abort();
  assert.equal((await r).name, 'AbortError');
  let n = before;
  for (let i = 0; i < 100 && n === before; i++) { await sleep(20); n = await metric(srv.url, 'tf_requests_cancelled_total'); }
  assert.equal(n, before + 1);
});

test('keepalive 0 turns them off', async () => {
  const off = await start(['--stub-wait-ms', '500'], { TF_SSE_KEEPALIVE_S: '0' });
  try {
    const r = await stream(off.url + '/v1/chat/completions', { messages: [{ role: 'user', content: '@wait' }], stream: true });
    assert.equal(r.frames.filter((f) => f.comment).length, 0);
  } finally {
    await off.stop();
  }
});
