// prefix.test.mjs: the model engine's prompt (prefix) cache behind both SDKs
// (cpu, or cuda under TF_ENGINE=cuda):
// the same seeded request twice resumes the saved prefix (cached tokens in
// the usage: prompt_tokens_details.cached_tokens, cache_read_input_tokens)
// and gives exactly the same reply and log-probabilities as the first, and
// as a server without the cache; the next turn of a conversation and
// another question under the same system prompt resume; /metrics counts
// the hits.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { start, modelArgs } from './lib.mjs';

let srv, plain, oa, oaPlain, an, dir;
before(async () => {
  dir = fs.mkdtempSync('/tmp/tf-prefix-');
  const pack = path.join(dir, 'tiny');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '3', '-q', '-o', pack]);
  srv = await start([...modelArgs(), '--model', 'tiny', '--prefix-cache', '4', pack]);
  plain = await start([...modelArgs(), '--model', 'tiny', '--prefix-cache', '0', pack]);
  oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  oaPlain = new OpenAI({ baseURL: plain.url + '/v1', apiKey: 'x', maxRetries: 0 });
  an = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  assert.equal((await srv.stop()).code, 0);
  assert.equal((await plain.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

// 600 token ids of the tiny vocabulary (two whole 256-token blocks and a tail).
const ids = (salt, n = 600) => Array.from({ length: n }, (_, i) => 3 + ((i * 37 + salt * 101) % 500));
const cached = (u) => u.prompt_tokens_details.cached_tokens;

test('completions: the same seeded prompt twice resumes 512 tokens, same text and logprobs', async () => {
  const req = { model: 'tiny', prompt: ids(1), max_tokens: 8, temperature: 1, seed: 5, logprobs: 3 };
  const first = await oa.completions.create(req);
  const second = await oa.completions.create(req);
  assert.equal(cached(first.usage), 0);
  assert.equal(cached(second.usage), 512);
  assert.equal(second.usage.prompt_tokens, 600);
  assert.equal(second.choices[0].text, first.choices[0].text);
  assert.deepEqual(second.choices[0].logprobs, first.choices[0].logprobs);
  const ref = await oaPlain.completions.create(req);
  assert.equal(cached(ref.usage), 0);
  assert.equal(ref.choices[0].text, first.choices[0].text);
  assert.deepEqual(ref.choices[0].logprobs, first.choices[0].logprobs);
});

test('completions: a prompt sharing the first two blocks resumes them, as a fresh server answers', async () => {
  const shared = ids(2);
  const other = [...shared.slice(0, 530), ...ids(3, 90)];
  const req = (prompt) => ({ model: 'tiny', prompt, max_tokens: 6, temperature: 0.8, seed: 9 });
  await oa.completions.create(req(shared));
  const r = await oa.completions.create(req(other));
  assert.equal(cached(r.usage), 512);
  const ref = await oaPlain.completions.create(req(other));
  assert.equal(r.choices[0].text, ref.choices[0].text);
});

test('chat, streamed: a long conversation asked twice reports cached tokens, same reply', async () => {
  const long = Array.from({ length: 120 }, (_, i) => `word${i % 17} and`).join(' ');
  const req = { model: 'tiny', messages: [{ role: 'user', content: long }], max_tokens: 8,
    temperature: 1, seed: 21, stream: true, stream_options: { include_usage: true } };
  const read = async () => {
    let text = '', usage = null;
    for await (const ch of await oa.chat.completions.create(req)) {
      if (ch.usage) usage = ch.usage;
      for (const c of ch.choices) text += (c.delta.content ?? '') + (c.delta.reasoning_content ?? '');
    }
    return { text, usage };
  };
  const a = await read();
  const b = await read();
  assert.ok(a.usage.prompt_tokens > 256, `prompt of ${a.usage.prompt_tokens} tokens`);
  assert.equal(cached(a.usage), 0);
  assert.ok(cached(b.usage) > 0);
  assert.equal(cached(b.usage) % 256, 0);
  assert.equal(b.text, a.text);
});

test('chat: the next turn, and another question under the same system prompt, resume', async () => {
  const system = { role: 'system', content: 'Be terse. ' + Array.from({ length: 60 }, (_, i) => `fact ${i % 23} is ${i % 7};`).join(' ') };
  const ask = (messages) => ({ model: 'tiny', messages, max_tokens: 5, temperature: 0 });
  const turn1 = [system, { role: 'user', content: 'First question?' }];
  const a = await oa.chat.completions.create(ask(turn1));
  const m = a.choices[0].message;
  const turn2 = [...turn1, { role: 'assistant', content: m.content ?? 'ok', reasoning_content: m.reasoning_content },
    { role: 'user', content: 'And the second?' }];
  const b = await oa.chat.completions.create(ask(turn2));
  assert.ok(a.usage.prompt_tokens > 512, `prompt of ${a.usage.prompt_tokens} tokens`);
  assert.ok(cached(b.usage) >= 512 && cached(b.usage) % 256 === 0, `cached ${cached(b.usage)}`);
  const ref = await oaPlain.chat.completions.create(ask(turn2));
  assert.deepEqual(b.choices[0].message, ref.choices[0].message);
  const c = await oa.chat.completions.create(ask([system, { role: 'user', content: 'Another user asks this.' }]));
  assert.ok(cached(c.usage) >= 256, `cached ${cached(c.usage)}`);
});

test('anthropic: cache_read_input_tokens on the second request', async () => {
  const long = Array.from({ length: 120 }, (_, i) => `line ${i % 13} of the brief`).join('\n');
  const req = { model: 'tiny', max_tokens: 6, temperature: 1, messages: [{ role: 'user', content: long }] };
  const a = await an.messages.create(req);
  const b = await an.messages.create(req);
  assert.equal(a.usage.cache_read_input_tokens, 0);
  assert.ok(b.usage.cache_read_input_tokens > 0);
  assert.equal(b.usage.input_tokens + b.usage.cache_read_input_tokens,
    a.usage.input_tokens + a.usage.cache_read_input_tokens);
  assert.deepEqual(b.content, a.content);
});

test('/metrics counts prefix cache hits (tf_ and vLLM names)', async () => {
  const text = await (await fetch(srv.url + '/metrics')).text();
  const value = (name) => Number(text.match(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, 'm'))?.[1]);
  assert.equal(value('tf_prefix_cache_enabled'), 1);
  assert.ok(value('tf_prefix_cache_hits_total') >= 6);
  assert.ok(value('tf_prefix_cache_lookups_total') >= value('tf_prefix_cache_hits_total'));
  assert.ok(value('tf_prefix_cache_hit_tokens_total') >= 4 * 256);
  assert.ok(value('tf_prefix_cache_entries') >= 1);
  assert.ok(value('vllm:prefix_cache_hits_total') >= 4 * 256);
  assert.ok(value('vllm:prefix_cache_queries_total') > value('vllm:prefix_cache_hits_total'));
  const off = await (await fetch(plain.url + '/metrics')).text();
  assert.match(off, /^tf_prefix_cache_enabled\{[^}]*\} 0$/m);
});
