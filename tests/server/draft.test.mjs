// draft.test.mjs: speculative drafts in tf-serve (cpu engine, tiny pack):
// every reply equals its `"draft": false` twin (the serial reference) byte
// for byte in what it says: text, finish reason, usage, logprobs. Greedy
// and at 0.8, streamed and not, with logprobs, stop strings and max_tokens,
// alone and batched with undrafted requests, through both SDKs; the tf
// block and /metrics count drafts. Random weights accept few drafts (prompt
// lookup accepts where the model repeats itself): the tests check identity,
// and print the acceptance they saw. With TF_ENGINE=cuda the servers run
// tf-serve --engine cuda --batch-invariant, the only path it drafts on.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { start, metric, modelArgs, engine } from './lib.mjs';

const invariant = engine === 'cuda' ? ['--batch-invariant'] : [];
let srv, oa, an, dir;
before(async () => {
  dir = fs.mkdtempSync('/tmp/tf-draft-');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '3', '-q', '-o', path.join(dir, 'tiny')]);
  // every row drafts as deep as its proposer goes: the verify path runs
  // on each row, whatever the measured costs would say
  srv = await start([...modelArgs(), ...invariant, '--model', 'tiny', '--drafts', '7', path.join(dir, 'tiny')],
    { TF_DRAFT_DEPTH: 'fixed' });
  oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  an = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  const drafted = await metric(srv.url, 'tf_draft_tokens_total');
  const accepted = await metric(srv.url, 'tf_draft_accepted_tokens_total');
  console.log(`draft: ${drafted} draft tokens verified, ${accepted} accepted`);
  assert.equal((await srv.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

const ask = (extra = {}) => ({ model: 'tiny', messages: [{ role: 'user', content: 'Count: one two three one two three one two' }],
  max_tokens: 24, ...extra });

// What a reply says, without its ids, times and draft counts.
function said(r) {
  const { id, created, tf, system_fingerprint, ...rest } = r;
  return rest;
}

async function twins(req) {
  const drafted = await oa.chat.completions.create(req);
  const plain = await oa.chat.completions.create({ ...req, draft: false });
  assert.deepEqual(said(drafted), said(plain));
  assert.equal(plain.tf.drafted, 0);
  return { drafted, plain };
}

for (const temperature of [0, 0.8]) {
  test(`chat at ${temperature}: drafted == plain, with logprobs`, async () => {
    const { drafted } = await twins(ask({ temperature, seed: 11, logprobs: true, top_logprobs: 2 }));
    assert.ok(drafted.tf.drafted > 0, 'the rows drafted');
    assert.ok(drafted.tf.accepted <= drafted.tf.drafted);
    assert.equal(drafted.choices[0].logprobs.content.length, drafted.usage.completion_tokens);
  });

  test(`chat at ${temperature}: streamed, drafted == plain`, async () => {
    const req = ask({ temperature, seed: 12, stream: true, stream_options: { include_usage: true } });
    const text = async (extra) => {
      let s = '', usage = null, finish = null;
      for await (const ch of await oa.chat.completions.create({ ...req, ...extra })) {
        for (const c of ch.choices) {
          s += c.delta?.content ?? '';
          finish = c.finish_reason ?? finish;
        }
        if (ch.usage) usage = ch.usage;
      }
      return { s, usage, finish };
    };
    const d = await text({}), p = await text({ draft: false });
    assert.deepEqual(d, p);
    const whole = await oa.chat.completions.create({ ...req, stream: false, stream_options: undefined });
    assert.equal(d.s, whole.choices[0].message.content ?? '');
  });
}

test('max_tokens inside a run and stop strings: drafted == plain', async () => {
  for (const max_tokens of [1, 2, 3, 5, 9]) await twins(ask({ temperature: 0, max_tokens }));
  const { plain } = await twins(ask({ temperature: 0.8, seed: 5, max_tokens: 32 }));
  const text = plain.choices[0].message.content ?? '';
  for (const at of [2, Math.floor(text.length / 2), text.length - 3]) {
    if (at < 1 || at + 2 > text.length) continue;
    const stop = text.slice(at, at + 2);
    const { drafted } = await twins(ask({ temperature: 0.8, seed: 5, max_tokens: 32, stop: [stop] }));
    assert.equal(drafted.choices[0].finish_reason, 'stop');
    assert.ok(!(drafted.choices[0].message.content ?? '').includes(stop));
  }
});

test('batched: drafted and undrafted requests at once each equal their twin alone', async () => {
  const reqs = [0, 1, 2, 3].map((k) => ask({ temperature: k % 2 ? 0.8 : 0, seed: 40 + k, max_tokens: 16,
    messages: [{ role: 'user', content: `Request ${k}: say it again and again` }] }));
  const alone = [];
  for (const r of reqs) alone.push(await oa.chat.completions.create({ ...r, draft: false }));
  const together = await Promise.all(reqs.map((r, k) => oa.chat.completions.create(k % 2 ? { ...r, draft: false } : r)));
  for (let k = 0; k < 4; k++) {
    assert.equal(together[k].choices[0].message.content, alone[k].choices[0].message.content);
    assert.deepEqual(together[k].usage, alone[k].usage);
  }
});

test('completions and anthropic: drafted == plain', async () => {
  const req = { model: 'tiny', prompt: 'abc abc abc abc abc', max_tokens: 20, temperature: 0 };
  const d = await oa.completions.create(req);
  const p = await oa.completions.create({ ...req, draft: false });
  assert.equal(d.choices[0].text, p.choices[0].text);
  assert.deepEqual(d.usage, p.usage);
  const m = { model: 'tiny', max_tokens: 16, temperature: 0.8, messages: [{ role: 'user', content: 'Hello there.' }] };
  const ad = await an.messages.create(m);
  const ap = await an.messages.create({ ...m, draft: false });
  assert.deepEqual(ad.content, ap.content);
  assert.deepEqual(ad.usage, ap.usage);
  assert.equal(ad.stop_reason, ap.stop_reason);
});

test('a bad draft field is a 400', async () => {
  await assert.rejects(oa.chat.completions.create(ask({ draft: 'no' })), (e) => e.status === 400 && /draft/.test(e.message));
});

test('/metrics counts drafts under tf_ and vLLM names', async () => {
  const t = await (await fetch(srv.url + '/metrics')).text();
  for (const name of ['tf_draft_rows_total', 'tf_draft_tokens_total', 'tf_draft_accepted_tokens_total',
    'vllm:spec_decode_num_drafts_total', 'vllm:spec_decode_num_draft_tokens_total',
    'vllm:spec_decode_num_accepted_tokens_total'])
    assert.match(t, new RegExp('^' + name + '\\{', 'm'), name);
  assert.ok(await metric(srv.url, 'tf_draft_tokens_total') > 0);
  assert.equal(await metric(srv.url, 'vllm:spec_decode_num_draft_tokens_total'),
    await metric(srv.url, 'tf_draft_tokens_total'));
});

// A chain pack (tf-pack-synth --chain): the DSpark drafts are the model's
// own greedy tokens, so drafts are accepted, and replies still equal their
// undrafted twins, alone and batched, through both SDKs.
test('a chain pack accepts drafts, and drafted == plain', async () => {
  const cdir = fs.mkdtempSync('/tmp/tf-chain-');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '3', '--chain', '-q', '-o', path.join(cdir, 'tiny')]);
  const cs = await start([...modelArgs(), ...invariant, '--model', 'tiny', '--drafts', '7', path.join(cdir, 'tiny')],
    { TF_DRAFT_DEPTH: 'fixed' });
  try {
    const co = new OpenAI({ baseURL: cs.url + '/v1', apiKey: 'x', maxRetries: 0 });
    const ca = new Anthropic({ baseURL: cs.url, apiKey: 'x', maxRetries: 0 });
    const req = { model: 'tiny', messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 32, temperature: 0 };
    const [d, d2, p] = await Promise.all([co.chat.completions.create(req), co.chat.completions.create({ ...req, seed: 3 }),
      co.chat.completions.create({ ...req, draft: false })]);
    assert.deepEqual(said(d), said(p));
    assert.deepEqual(said(d2).choices, said(p).choices);
    console.log(`chain: ${d.tf.accepted} of ${d.tf.drafted} drafts accepted`);
    assert.ok(d.tf.accepted > 0 && d.tf.accepted <= d.tf.drafted, 'drafts were accepted');
    const m = { model: 'tiny', max_tokens: 24, temperature: 0, messages: [{ role: 'user', content: 'Hello there.' }] };
    const ad = await ca.messages.create(m);
    const ap = await ca.messages.create({ ...m, draft: false });
    assert.deepEqual(ad.content, ap.content);
    assert.deepEqual(ad.usage, ap.usage);
    assert.ok(await metric(cs.url, 'tf_draft_accepted_tokens_total') > 0);
  } finally {
    assert.equal((await cs.stop()).code, 0);
    fs.rmSync(cdir, { recursive: true, force: true });
  }
});
