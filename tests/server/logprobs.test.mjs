// logprobs.test.mjs: OpenAI log-probabilities from the model engine's sampler
// (cpu, or cuda under TF_ENGINE=cuda; the row's own softmax): chat `logprobs` + `top_logprobs` and completions
// `logprobs: n`, whole and streamed (the chunks' entries add up to the whole
// reply's), in the shapes of the openai package's types; out-of-range
// values are 400s in the OpenAI error shape.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { start, post, modelArgs } from './lib.mjs';

let srv, oa, dir;
before(async () => {
  dir = fs.mkdtempSync('/tmp/tf-logprobs-');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '3', '-q', '-o', path.join(dir, 'tiny')]);
  srv = await start([...modelArgs(), '--model', 'tiny', path.join(dir, 'tiny')]);
  oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  assert.equal((await srv.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

const chat = (extra = {}) => ({ model: 'tiny', messages: [{ role: 'user', content: 'Tell me more.' }],
  max_tokens: 8, logprobs: true, top_logprobs: 3, ...extra });

function checkEntry(e, ntop) {
  assert.equal(typeof e.token, 'string');
  assert.ok(e.logprob <= 0 && Number.isFinite(e.logprob));
  assert.ok(Array.isArray(e.bytes) && e.bytes.every((b) => Number.isInteger(b) && b >= 0 && b < 256));
  // ids the tokenizer does not define are never drawn nor offered
  assert.ok(e.bytes.length > 0, 'a drawn token stands for some text');
  for (const t of e.top_logprobs) assert.ok(t.bytes.length > 0 && Number.isFinite(t.logprob));
  assert.equal(e.top_logprobs.length, ntop);
  for (let k = 1; k < ntop; k++) assert.ok(e.top_logprobs[k].logprob <= e.top_logprobs[k - 1].logprob);
  assert.ok(e.top_logprobs[0].logprob >= e.logprob);
}

test('chat: greedy logprobs, one entry a token, the token first among its alternatives', async () => {
  const r = await oa.chat.completions.create(chat({ temperature: 0 }));
  const c = r.choices[0].logprobs.content;
  assert.equal(r.choices[0].logprobs.refusal, null);
  assert.equal(c.length, r.usage.completion_tokens);
  for (const e of c) {
    checkEntry(e, 3);
    assert.equal(e.top_logprobs[0].token, e.token);
    assert.equal(e.top_logprobs[0].logprob, e.logprob);
    assert.deepEqual(e.top_logprobs[0].bytes, e.bytes);
  }
});

test('chat: sampled and streamed, the chunks carry the whole reply\'s entries', async () => {
  const req = chat({ temperature: 1, seed: 4, max_tokens: 10 });
  const whole = await oa.chat.completions.create(req);
  const s = await oa.chat.completions.create({ ...req, stream: true });
  const streamed = [];
  for await (const ch of s)
    for (const c of ch.choices) if (c.logprobs) streamed.push(...c.logprobs.content);
  assert.deepEqual(streamed, whole.choices[0].logprobs.content);
  for (const e of streamed) checkEntry(e, 3);
});

test('chat: logprobs without alternatives, and none when not asked', async () => {
  const r = await oa.chat.completions.create(chat({ top_logprobs: 0, temperature: 0 }));
  for (const e of r.choices[0].logprobs.content) assert.deepEqual(e.top_logprobs, []);
  const off = await oa.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
  assert.equal(off.choices[0].logprobs ?? null, null); // absent, as the reference leaves it
});

test('completions: logprobs n, whole and streamed', async () => {
  const req = { model: 'tiny', prompt: 'Once upon a time', max_tokens: 8, temperature: 1, seed: 8, logprobs: 2 };
  const whole = await oa.completions.create(req);
  const lp = whole.choices[0].logprobs;
  const n = whole.usage.completion_tokens;
  for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) assert.equal(lp[k].length, n, k);
  for (let i = 0; i < n; i++) {
    assert.ok(lp.token_logprobs[i] <= 0);
    const alts = Object.values(lp.top_logprobs[i]);
    assert.ok(alts.length >= 1 && alts.length <= 2);
    assert.ok(Math.max(...alts) >= lp.token_logprobs[i]);
    if (i) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
  }
  assert.equal(lp.text_offset[0], 0);
  const s = await oa.completions.create({ ...req, stream: true });
  const got = { tokens: [], token_logprobs: [], top_logprobs: [], text_offset: [] };
  for await (const ch of s)
    for (const c of ch.choices) if (c.logprobs) for (const k in got) got[k].push(...c.logprobs[k]);
  assert.deepEqual(got, lp);
  const off = await oa.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 2 });
  assert.equal(off.choices[0].logprobs ?? null, null); // absent, as the reference leaves it
});

test('out-of-range and misplaced values are 400 invalid_request_error', async () => {
  const bad = [
    ['/v1/chat/completions', chat({ top_logprobs: 21 })],
    ['/v1/chat/completions', chat({ top_logprobs: -1 })],
    ['/v1/chat/completions', chat({ logprobs: false })],
    ['/v1/chat/completions', chat({ logprobs: 'yes' })],
    ['/v1/completions', { model: 'tiny', prompt: 'x', logprobs: 21 }],
    ['/v1/completions', { model: 'tiny', prompt: 'x', logprobs: true }],
  ];
  for (const [route, body] of bad) {
    const r = await post(srv.url + route, body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.json.error.type, 'invalid_request_error');
    assert.match(r.json.error.message, /logprobs/);
  }
  await assert.rejects(oa.chat.completions.create(chat({ top_logprobs: 30 })), (e) => e.status === 400);
});
