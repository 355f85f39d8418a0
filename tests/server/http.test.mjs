// http.test.mjs: the HTTP surface without an SDK: the reference server's
// recorded exchanges (tests/data/wire.jsonl: statuses, error shapes and
// messages), health, metrics, tokenize, limits (404, 405, 413, 431, bad
// HTTP), API keys.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { start, post, raw } from './lib.mjs';

const wire = fs.readFileSync(path.join(import.meta.dirname, '../data/wire.jsonl'), 'utf8')
  .split('\n').filter(Boolean).map((l) => JSON.parse(l)).filter((r) => r.method);

let srv;
before(async () => { srv = await start(['--stub-token-ms', '1', '--model', 'deepseek-v41', '--body-max', '64K']); });
after(async () => { assert.equal((await srv.stop()).code, 0); });

async function replay(r) {
  const res = await fetch(srv.url + r.path, {
    method: r.method,
    headers: r.method === 'POST' ? { 'content-type': 'application/json' } : {},
    body: r.method === 'POST' ? r.body : undefined,
  });
  const text = await res.text();
  return { status: res.status, type: res.headers.get('content-type'), text };
}

// Refusals whose words do not depend on the model: same status, same shape, same message.
for (const name of ['chat-effort-bad', 'chat-kwargs-bad', 'chat-temp-bad', 'chat-max-frac', 'chat-empty',
  'not-object', 'tokenize-bad', 'unknown-get', 'unknown-post']) {
  test(`wire: ${name}`, async () => {
    const r = wire.find((w) => w.name === name);
    const got = await replay(r);
    assert.equal(got.status, r.status);
    assert.equal(got.type, r.type);
    assert.deepEqual(JSON.parse(got.text), JSON.parse(r.response));
  });
}

// Refusals whose numbers follow the model: same status, type, code and param.
for (const name of ['chat-context', 'chat-context-stream', 'completion-context', 'completion-ids-bad']) {
  test(`wire: ${name} (shape)`, async () => {
    const r = wire.find((w) => w.name === name);
    const want = JSON.parse(r.response).error;
    const body = JSON.parse(r.body);
    if (name === 'completion-ids-bad') body.prompt = [104, 258];
    const got = await replay({ ...r, body: JSON.stringify(body) });
    assert.equal(got.status, r.status);
    const e = JSON.parse(got.text).error;
    assert.deepEqual(Object.keys(e).sort(), Object.keys(want).sort());
    assert.equal(e.type, want.type);
    assert.equal(e.code, want.code);
    assert.equal(e.param, want.param);
    assert.equal(e.message.split(/\d/)[0], want.message.split(/\d/)[0]);
  });
}

// Successful exchanges: same status, content type, object kinds and field sets.
for (const name of ['models', 'chat-think', 'chat-think-stream', 'chat-length', 'chat-length-stream',
  'chat-stop-stream', 'chat-ignore-eos', 'completion', 'completion-stream', 'tokenize-messages']) {
  test(`wire: ${name} (fields)`, async () => {
    const r = wire.find((w) => w.name === name);
    const got = await replay(r);
    assert.equal(got.status, r.status);
    assert.equal(got.type, r.type);
    if (r.type === 'text/event-stream') {
      const want = r.response.split('\n\n').filter(Boolean);
      const have = got.text.split('\n\n').filter(Boolean);
      assert.equal(have[have.length - 1], 'data: [DONE]');
      const w0 = JSON.parse(want[0].slice(6)), h0 = JSON.parse(have[0].slice(6));
      assert.deepEqual(Object.keys(h0).sort(), Object.keys(w0).sort());
      assert.deepEqual(Object.keys(h0.choices[0]).sort(), Object.keys(w0.choices[0]).sort().filter((k) => k in h0.choices[0]));
      const wl = JSON.parse(want[want.length - 2].slice(6)), hl = JSON.parse(have[have.length - 2].slice(6));
      assert.equal(hl.choices[0].finish_reason, wl.choices[0].finish_reason);
      return;
    }
    const want = JSON.parse(r.response), have = JSON.parse(got.text);
    for (const k of Object.keys(want)) if (k !== 'tensorfold') assert.ok(k in have, `field ${k}`);
    if (want.choices) {
      assert.equal(have.object, want.object);
      assert.equal(have.choices[0].finish_reason, want.choices[0].finish_reason);
      for (const k of Object.keys(want.usage)) assert.ok(k in have.usage, `usage.${k}`);
      if (want.choices[0].message) assert.deepEqual(Object.keys(have.choices[0].message).sort(), Object.keys(want.choices[0].message).sort());
    }
  });
}

test('health', async () => {
  const r = await fetch(srv.url + '/health');
  assert.equal(r.status, 200);
  const j = await r.json();
  assert.equal(j.status, 'ok');
  assert.equal(j.requests_in_progress, 0);
});

test('metrics: tf_ and vllm: names in the Prometheus text format', async () => {
  await post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: '@short' }] });
  await post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: '@short' }], stream: true });
  const r = await fetch(srv.url + '/metrics');
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const t = await r.text();
  for (const n of ['tf_requests_total', 'tf_completion_tokens_total', 'tf_requests_running', 'tf_draining',
    'tf_time_to_first_token_seconds_bucket', 'vllm:num_requests_running', 'vllm:num_requests_waiting',
    'vllm:prompt_tokens_total', 'vllm:generation_tokens_total', 'vllm:time_to_first_token_seconds_count',
    'vllm:e2e_request_latency_seconds_sum', 'vllm:request_success_total',
    'tf_inter_token_latency_seconds_bucket', 'vllm:inter_token_latency_seconds_count']) {
    assert.match(t, new RegExp(`^${n}\\{`, 'm'), n);
  }
  for (const line of t.split('\n').filter((l) => l && !l.startsWith('#')))
    assert.match(line, /^[a-zA-Z_:][a-zA-Z0-9_:]*\{[^}]*\} [0-9.e+-]+$/);
  assert.ok(Number(t.match(/^tf_requests_total\{[^}]*\} (\S+)/m)[1]) >= 2);
  // The stream's gaps: 12 token events -> at least 11 gaps counted.
  assert.ok(Number(t.match(/^tf_inter_token_latency_seconds_count\{[^}]*\} (\S+)/m)[1]) >= 11);
});

test('tokenize and detokenize round trip', async () => {
  const t = await post(srv.url + '/tokenize', { prompt: 'héllo' });
  assert.equal(t.status, 200);
  assert.equal(t.json.count, t.json.tokens.length);
  const d = await post(srv.url + '/detokenize', { tokens: t.json.tokens });
  assert.equal(d.json.prompt, 'héllo');
  const cut = await post(srv.url + '/detokenize', { tokens: t.json.tokens.slice(0, 2) });
  assert.equal(cut.json.prompt, 'h\ufffd');
  const bad = await post(srv.url + '/detokenize', { tokens: [1e9] });
  assert.equal(bad.status, 400);
});

test('404 unknown path, 405 wrong method with Allow', async () => {
  const r = await fetch(srv.url + '/v2/chat');
  assert.equal(r.status, 404);
  assert.deepEqual(await r.json(), { error: 'not found' });
  const m = await fetch(srv.url + '/health', { method: 'POST', body: '{}' });
  assert.equal(m.status, 405);
  assert.equal(m.headers.get('allow'), 'GET');
  assert.equal((await m.json()).error.type, 'invalid_request_error');
});

test('413 for a body over the limit, with the route shape', async () => {
  const big = JSON.stringify({ messages: [{ role: 'user', content: 'x'.repeat(70000) }] });
  const r = await post(srv.url + '/v1/chat/completions', big);
  assert.equal(r.status, 413);
  assert.equal(r.json.error.type, 'invalid_request_error');
  const a = await post(srv.url + '/v1/messages', big);
  assert.equal(a.status, 413);
  assert.equal(a.json.type, 'error');
  // Chunked (no Content-Length): refused once it grows past the limit.
  const c = await raw(srv.port, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n' +
    '11170\r\n' + 'x'.repeat(70000) + '\r\n0\r\n\r\n');
  assert.match(c, /^HTTP\/1\.1 413/);
});

test('400 for bad JSON; 431 for too many headers; malformed HTTP is refused', async () => {
  const r = await post(srv.url + '/v1/chat/completions', '{"messages": [');
  assert.equal(r.status, 400);
  assert.match(r.json.error.message, /not valid JSON/);
  let h = 'GET /health HTTP/1.1\r\nHost: x\r\n';
  for (let i = 0; i < 120; i++) h += `X-H${i}: ${i}\r\n`;
  assert.match(await raw(srv.port, h + '\r\n'), /^HTTP\/1\.1 431/);
  assert.match(await raw(srv.port, 'GET /health\r\n\r\n'), /^HTTP\/1\.1 400/);
  assert.match(await raw(srv.port, 'GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n'), /^HTTP\/1\.1 400/);
  assert.doesNotMatch(await raw(srv.port, 'GARBAGE\r\n\r\n'), /^HTTP\/1\.1 200/);
  assert.doesNotMatch(await raw(srv.port, 'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n' +
    'Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n'), /^HTTP\/1\.1 200/);
  assert.match(await raw(srv.port, 'GET /health HTTP/9.9\r\nHost: x\r\n\r\n'), /^HTTP\/1\.1 505/);
  // The server still answers afterwards.
  assert.equal((await fetch(srv.url + '/health')).status, 200);
});

test('API keys: Bearer or x-api-key, 401 otherwise, /health open', async () => {
  const k = await start(['--api-key', 'k-one, k-two'], {});
  try {
    const body = { messages: [{ role: 'user', content: '@short' }], max_tokens: 5 };
    const none = await post(k.url + '/v1/chat/completions', body);
    assert.equal(none.status, 401);
    assert.equal(none.headers.get('www-authenticate'), 'Bearer');
    assert.equal(none.json.error.type, 'authentication_error');
    const wrong = await post(k.url + '/v1/chat/completions', body, { authorization: 'Bearer k-three' });
    assert.equal(wrong.status, 401);
    const a = await post(k.url + '/v1/messages', { ...body, model: 'x' }, { 'x-api-key': 'nope' });
    assert.equal(a.status, 401);
    assert.equal(a.json.error.type, 'authentication_error');
    assert.equal((await post(k.url + '/v1/chat/completions', body, { authorization: 'Bearer k-two' })).status, 200);
    assert.equal((await post(k.url + '/v1/chat/completions', body, { 'x-api-key': 'k-one' })).status, 200);
    assert.equal((await fetch(k.url + '/metrics')).status, 401);
    const h = await fetch(k.url + '/health');
    assert.equal(h.status, 200);
    assert.deepEqual(await h.json(), { status: 'ok' });
  } finally {
    assert.equal((await k.stop()).code, 0);
  }
});

test('API key file', async () => {
  const f = path.join(fs.mkdtempSync('/tmp/tf-keys-'), 'keys');
  fs.writeFileSync(f, '# keys\nsecret-1\n', { mode: 0o600 });
  const k = await start(['--api-key-file', f]);
  try {
    const body = { messages: [{ role: 'user', content: '@short' }], max_tokens: 5 };
    assert.equal((await post(k.url + '/v1/chat/completions', body)).status, 401);
    assert.equal((await post(k.url + '/v1/chat/completions', body, { authorization: 'Bearer secret-1' })).status, 200);
  } finally {
    await k.stop();
  }
});
