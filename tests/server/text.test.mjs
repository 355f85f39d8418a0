// text.test.mjs: the text routes under big and odd input: a 30 MB
// /v1/tokenize stays within the memory tf-serve(1) states and gives it
// back, and does not stall the other requests of its HTTP thread; U+0000
// is a character like any other in every route that takes text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { start, post, sleep } from './lib.mjs';

let srv;
before(async () => { srv = await start(['--http-threads', '1', '--stub-token-ms', '1']); });
after(async () => { assert.equal((await srv.stop()).code, 0); });

// Under ASan (SANITIZE=1) freed memory stays in quarantine: RSS bounds are skipped.
const sanitized = fs.readFileSync(path.join(process.env.TF_BIN || '../../build/bin', 'tf-serve')).includes('__asan_init');
const kib = (pid, key) => Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(new RegExp(`^${key}:\\s+(\\d+)`, 'm'))[1]);

test('a 30 MB tokenize: memory within 8x the body, given back, other requests unstalled', async () => {
  const n = 30 * 1000 * 1000;
  const body = '{"prompt":"' + 'x'.repeat(n) + '"}';
  await post(srv.url + '/tokenize', { prompt: 'warm up' });
  const pid = srv.proc.pid;
  const rss0 = kib(pid, 'VmRSS'), peak0 = kib(pid, 'VmHWM');
  const big = fetch(srv.url + '/v1/tokenize', { method: 'POST', headers: { 'content-type': 'application/json' }, body })
    .then(async (r) => ({ status: r.status, text: await r.text() }));
  // Meanwhile, on the one HTTP thread: health answers at once.
  let slowest = 0, polls = 0, done = false;
  big.then(() => { done = true; });
  while (!done && polls < 200) {
    const t0 = Date.now();
    assert.equal((await fetch(srv.url + '/health')).status, 200);
    slowest = Math.max(slowest, Date.now() - t0);
    polls++;
    await sleep(20);
  }
  const r = await big;
  assert.equal(r.status, 200);
  const head = `{"count":${n},"max_model_len":4096,"tokens":[`, tail = '],"token_strs":null}';
  assert.equal(r.text.slice(0, head.length), head);
  assert.equal(r.text.slice(-(tail.length + 7)), '120,120' + tail);
  assert.equal(r.text.length, head.length + 4 * n - 1 + tail.length);
  assert.ok(slowest < 300, `health took up to ${slowest} ms while the tokenize ran (${polls} polls)`);
  if (sanitized) return;
  const peak = kib(pid, 'VmHWM') - peak0;
  assert.ok(peak * 1024 < 8 * body.length, `peak RSS grew by ${Math.round(peak / 1024)} MiB for a ${Math.round(body.length / 1048576)} MiB body`);
  await sleep(200);
  const left = kib(pid, 'VmRSS') - rss0;
  assert.ok(left < 48 * 1024, `${Math.round(left / 1024)} MiB left behind`);
});

const nul = 'x\u0000 yyyy'; // 7 bytes, 7 plain tokens

test('U+0000 in a tokenize prompt is a character', async () => {
  const r = await post(srv.url + '/v1/tokenize', { prompt: nul });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.count, 7);
  assert.equal(r.json.tokens[1], 0);
  const d = await post(srv.url + '/v1/detokenize', { tokens: r.json.tokens });
  assert.equal(d.json.prompt, nul);
});

test('U+0000 in a completion prompt is a character', async () => {
  const r = await post(srv.url + '/v1/completions', { prompt: nul, max_tokens: 1 });
  assert.equal(r.status, 200, r.text);
  assert.equal(r.json.usage.prompt_tokens, 7);
});

test('U+0000 in chat and messages content is a character', async () => {
  const plain = await post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: 'x. yyyy' }], max_tokens: 1 });
  const withNul = await post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: nul }], max_tokens: 1 });
  assert.equal(withNul.status, 200, withNul.text);
  assert.equal(withNul.json.usage.prompt_tokens, plain.json.usage.prompt_tokens);
  const think = await post(srv.url + '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b', reasoning_content: nul }, { role: 'user', content: 'c' }], max_tokens: 1,
  });
  const think2 = await post(srv.url + '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'a' }, { role: 'assistant', content: 'b', reasoning_content: 'x. yyyy' }, { role: 'user', content: 'c' }], max_tokens: 1,
  });
  assert.equal(think.json.usage.prompt_tokens, think2.json.usage.prompt_tokens);
  const count = await post(srv.url + '/v1/messages/count_tokens', { messages: [{ role: 'user', content: nul }] });
  const count2 = await post(srv.url + '/v1/messages/count_tokens', { messages: [{ role: 'user', content: 'x. yyyy' }] });
  assert.equal(count.status, 200, count.text);
  assert.equal(count.json.input_tokens, count2.json.input_tokens);
});

test('U+0000 where text cannot hold it is a 400 that names the field', async () => {
  const r = await post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], stop: ['a\u0000b'] });
  assert.equal(r.status, 400);
  assert.equal(r.json.error.param, 'stop');
  assert.match(r.json.error.message, /U\+0000/);
  const m = await post(srv.url + '/v1/chat/completions', { model: 'a\u0000b', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(m.status, 400);
  assert.equal(m.json.error.param, 'model');
  const role = await post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user\u0000x', content: 'hi' }] });
  assert.equal(role.status, 400);
});
