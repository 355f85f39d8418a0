// dsv41.test.mjs: tf-serve with the DeepSeek-V4.1 family (a synthetic tiny
// pack's tokenizer, the chat encoding, the DSML reader) and the stub engine:
// tool calls whole and streamed through both SDKs, the tool round trip with
// reasoning restored by call id, thinking on and off, refusals.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { start, post } from './lib.mjs';

const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } } }];
const want = [{ city: 'Paris', days: 3 }, { city: '東京' }];

let srv, oa, an, dir;
before(async () => {
  dir = fs.mkdtempSync('/tmp/tf-dsv41-');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '7', '-q', '-o', path.join(dir, 'tiny')]);
  srv = await start(['--stub-token-ms', '1', '--model', 'deepseek-v41', path.join(dir, 'tiny')]);
  oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  an = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  assert.equal((await srv.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

test('chat: DSML tool calls become tool_calls', async () => {
  const r = await oa.chat.completions.create({ model: 'deepseek-v41', messages: [{ role: 'user', content: 'weather? @tool' }], tools });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, 'Checking.');
  assert.equal(m.reasoning_content, 'I should look up the weather.');
  assert.equal(m.tool_calls.length, 2);
  m.tool_calls.forEach((c, i) => {
    assert.match(c.id, /^call_[0-9a-f]{24}$/);
    assert.equal(c.type, 'function');
    assert.equal(c.function.name, 'get_weather');
    assert.deepEqual(JSON.parse(c.function.arguments), want[i]);
  });
});

test('chat: without tools offered the markup stays content', async () => {
  const r = await oa.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: '@tool' }], tools, tool_choice: 'none' });
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.match(r.choices[0].message.content, /DSML/);
  assert.equal(r.choices[0].message.tool_calls, undefined);
});

test('chat streamed: tool call deltas assemble to the same calls', async () => {
  const s = await oa.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: '@tool' }], tools, stream: true });
  const calls = [];
  let fin;
  for await (const c of s) {
    const ch = c.choices[0];
    if (!ch) continue;
    fin = ch.finish_reason ?? fin;
    for (const t of ch.delta.tool_calls ?? []) {
      calls[t.index] ??= { id: t.id, name: t.function?.name, args: '' };
      calls[t.index].args += t.function?.arguments ?? '';
    }
  }
  assert.equal(fin, 'tool_calls');
  assert.deepEqual(calls.map((c) => JSON.parse(c.args)), want);
  assert.ok(calls.every((c) => c.name === 'get_weather' && /^call_/.test(c.id)));
});

test('tool round trip: results go back, reasoning restored by call id', async () => {
  const first = await oa.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'weather? @tool' }], tools });
  const m = first.choices[0].message;
  const history = (withReasoning) => [
    { role: 'user', content: 'weather? @tool' },
    { role: 'assistant', content: m.content, tool_calls: m.tool_calls, ...(withReasoning ? { reasoning_content: m.reasoning_content } : {}) },
    ...m.tool_calls.map((c, i) => ({ role: 'tool', tool_call_id: c.id, content: i ? 'cloudy' : 'sunny' })),
    { role: 'user', content: 'and now? @short' },
  ];
  const a = await oa.chat.completions.create({ model: 'x', messages: history(false), tools, max_tokens: 50 });
  const b = await oa.chat.completions.create({ model: 'x', messages: history(true), tools, max_tokens: 50 });
  assert.equal(a.choices[0].message.content, 'Short reply.');
  assert.equal(a.usage.prompt_tokens, b.usage.prompt_tokens);
});

test('thinking off: no reasoning, content only', async () => {
  const r = await oa.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi @think' }], reasoning_effort: 'none' });
  assert.equal(r.choices[0].message.content, 'Hello there!');
  assert.equal(r.choices[0].message.reasoning_content, undefined);
});

test('messages: tool_use blocks, whole and streamed', async () => {
  const atools = [{ name: 'get_weather', description: 'Weather', input_schema: tools[0].function.parameters }];
  const m = await an.messages.create({ model: 'x', max_tokens: 300, tools: atools, thinking: { type: 'enabled', budget_tokens: 100 },
    messages: [{ role: 'user', content: 'weather? @tool' }] });
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text', 'tool_use', 'tool_use']);
  assert.deepEqual(m.content.filter((b) => b.type === 'tool_use').map((b) => b.input), want);
  const s = an.messages.stream({ model: 'x', max_tokens: 300, tools: atools, messages: [{ role: 'user', content: 'weather? @tool' }] });
  const fm = await s.finalMessage();
  assert.equal(fm.stop_reason, 'tool_use');
  assert.deepEqual(fm.content.filter((b) => b.type === 'tool_use').map((b) => b.input), want);
  // Round trip: the tool results go back.
  const uses = fm.content.filter((b) => b.type === 'tool_use');
  const r = await an.messages.create({ model: 'x', max_tokens: 50, tools: atools, messages: [
    { role: 'user', content: 'weather? @tool' },
    { role: 'assistant', content: fm.content },
    { role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: 'sunny' })) },
    { role: 'user', content: 'thanks @short' }] });
  assert.equal(r.content[0].text, 'Short reply.');
});

test('refusals of the chat encoding keep the wire messages', async () => {
  const e = await post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], reasoning_effort: 'huge' });
  assert.equal(e.status, 400);
  assert.deepEqual(e.json, { error: { message: 'reasoning_effort must be 1-100 or low / medium / high / max', type: 'invalid_request_error' } });
  const k = await post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }], chat_template_kwargs: [] });
  assert.equal(k.status, 400);
  assert.equal(k.json.error.message, 'chat_template_kwargs must be a JSON object or null');
});

test('streamed replies read the same as whole ones', async () => {
  for (const [content, extra] of [['@tool', { tools }], ['@think', {}], ['@stop', { stop: ['END'] }], ['@plain', { reasoning_effort: 'none' }]]) {
    const body = { model: 'x', messages: [{ role: 'user', content }], ...extra };
    const whole = (await oa.chat.completions.create(body)).choices[0];
    const s = await oa.chat.completions.create({ ...body, stream: true });
    let c = '', r = '', fin;
    const calls = [];
    for await (const ch of s) {
      const x = ch.choices[0];
      if (!x) continue;
      c += x.delta.content ?? '';
      r += x.delta.reasoning_content ?? '';
      fin = x.finish_reason ?? fin;
      for (const t of x.delta.tool_calls ?? []) {
        calls[t.index] ??= { name: t.function?.name, args: '' };
        calls[t.index].args += t.function?.arguments ?? '';
      }
    }
    assert.equal(c, whole.message.content ?? '', content);
    assert.equal(r, whole.message.reasoning_content ?? '', content);
    assert.equal(fin, whole.finish_reason, content);
    assert.deepEqual(calls.map((x) => [x.name, JSON.parse(x.args)]),
      (whole.message.tool_calls ?? []).map((x) => [x.function.name, JSON.parse(x.function.arguments)]), content);
  }
});
