// cpu.test.mjs: tf-serve with a model engine (cpu; cuda when run.sh is given
// TF_ENGINE=cuda, lib.mjs's modelArgs): the DeepSeek-V4.1 forward of a
// synthetic tiny pack (random weights, so the text is noise) behind both
// SDKs, streamed and not; a seeded request gives the same tokens alone and
// batched with others.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { start, modelArgs } from './lib.mjs';

let srv, oa, an, dir;
before(async () => {
  dir = fs.mkdtempSync('/tmp/tf-cpu-');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '3', '-q', '-o', path.join(dir, 'tiny')]);
  srv = await start([...modelArgs(), '--model', 'tiny', path.join(dir, 'tiny')]);
  oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  an = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  assert.equal((await srv.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

const ask = (extra = {}) => ({ model: 'tiny', messages: [{ role: 'user', content: 'Say something.' }],
  max_tokens: 8, ...extra });

test('openai: a whole reply of max_tokens tokens', async () => {
  const r = await oa.chat.completions.create(ask({ temperature: 0 }));
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 8);
  assert.ok(r.usage.prompt_tokens > 3);
});

test('openai: streamed, the chunks carry the same greedy reply', async () => {
  const whole = await oa.chat.completions.create(ask({ temperature: 0 }));
  const s = await oa.chat.completions.create(ask({ temperature: 0, stream: true,
    stream_options: { include_usage: true } }));
  let text = '', reasoning = '', finish = null, usage = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    for (const c of ch.choices) {
      text += c.delta.content ?? '';
      reasoning += c.delta.reasoning_content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  const m = whole.choices[0].message;
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 8);
  assert.equal(text, m.content ?? '');
  assert.equal(reasoning, m.reasoning_content ?? '');
});

test('anthropic: messages, streamed', async () => {
  const s = an.messages.stream({ model: 'tiny', max_tokens: 6, messages: [{ role: 'user', content: 'Hi' }] });
  const final = await s.finalMessage();
  assert.equal(final.stop_reason, 'max_tokens');
  assert.equal(final.usage.output_tokens, 6);
});

test('a seeded request gives the same reply alone and batched', async () => {
  const req = ask({ temperature: 1, seed: 11, max_tokens: 10 });
  const pick = (r) => JSON.stringify(r.choices[0].message);
  const alone = pick(await oa.chat.completions.create(req));
  const others = [1, 2, 3].map((k) => oa.chat.completions.create(ask({ temperature: 1, seed: 100 + k, max_tokens: 12 })));
  const again = oa.chat.completions.create(req);
  const [batched] = await Promise.all([again, ...others]);
  assert.equal(pick(batched), alone);
});
