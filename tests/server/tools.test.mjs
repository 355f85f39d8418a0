// tools.test.mjs: strict and forced tool calls through both SDKs against
// tf-serve with the cpu engine on a tiny random-weight pack (the DeepSeek-
// V4.1 family): the reply is constrained to the DSML calls block, so every
// call parses and its arguments validate against the tool's schema
// (tests/server/validate.py, python3-jsonschema), though the weights are
// noise. Chat (strict, required, a named function), Responses, Anthropic
// (tool_choice tool and any), and the refusals.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { start, post, modelArgs } from './lib.mjs';

const here = path.dirname(new URL(import.meta.url).pathname);
const weather = { type: 'object', additionalProperties: false, required: ['city', 'days'], properties: {
  city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 10 },
  unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } } };
const search = { type: 'object', required: ['query', 'filters'], properties: {
  query: { type: 'string', minLength: 1, maxLength: 8 }, limit: { type: 'number', minimum: 0, maximum: 50 },
  filters: { type: 'array', maxItems: 3, items: { type: 'object', required: ['k'], additionalProperties: false,
    properties: { k: { enum: ['a', 'b'] }, on: { type: 'boolean' } } } } } };
const schemaOf = { get_weather: weather, search };
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: weather, strict: true } },
  { type: 'function', function: { name: 'search', description: 'Search', parameters: search, strict: true } }];

let srv, oa, an, dir;
before(async () => {
  dir = fs.mkdtempSync('/tmp/tf-tools-');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '5', '-q', '-o', path.join(dir, 'tiny')]);
  srv = await start([...modelArgs(2), '--model', 'tiny', '--max-tokens', '1200', path.join(dir, 'tiny')]);
  oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0, timeout: 300000 });
  an = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0, timeout: 300000 });
});
after(async () => {
  assert.equal((await srv.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

// check([[name, argsText]]): every call parses and validates.
function check(calls) {
  assert.ok(calls.length > 0);
  const input = calls.map(([n, a]) => JSON.stringify({ schema: schemaOf[n], text: a })).join('\n') + '\n';
  const out = execFileSync('python3', [path.join(here, 'validate.py')], { input, encoding: 'utf8' }).trim().split('\n');
  assert.deepEqual(calls.map(([n, a], i) => `${n} ${out[i]}: ${a}`), calls.map(([n, a]) => `${n} ok: ${a}`));
}

const ask = (extra) => ({ model: 'tiny', messages: [{ role: 'user', content: 'Call a tool.' }], max_tokens: 1200,
  temperature: 1, thinking: false, tools, ...extra });

test('chat: tool_choice required and a named function: the calls validate', async () => {
  const jobs = [1, 2, 3].map((seed) => ask({ seed, tool_choice: 'required' }))
    .concat([4, 5].map((seed) => ask({ seed, tool_choice: { type: 'function', function: { name: 'search' } } })));
  const replies = await Promise.all(jobs.map((j) => oa.chat.completions.create(j)));
  const calls = [];
  replies.forEach((r, i) => {
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
    for (const c of r.choices[0].message.tool_calls) {
      if (i >= 3) assert.equal(c.function.name, 'search');
      calls.push([c.function.name, c.function.arguments]);
    }
  });
  check(calls);
  // Streamed == whole.
  const s = await oa.chat.completions.create({ ...jobs[0], stream: true });
  let args = '';
  for await (const ch of s) for (const t of ch.choices[0]?.delta?.tool_calls ?? []) args += t.function?.arguments ?? '';
  assert.equal(args, replies[0].choices[0].message.tool_calls.map((c) => c.function.arguments).join(''));
});

test('responses: strict function tools with tool_choice required', async () => {
  const rtools = tools.map((t) => ({ type: 'function', ...t.function }));
  const r = await oa.responses.create({ model: 'tiny', input: 'Call a tool.', tools: rtools, tool_choice: 'required',
    temperature: 1, seed: 7, reasoning: { effort: 'none' }, max_output_tokens: 1200 });
  const calls = r.output.filter((o) => o.type === 'function_call');
  assert.equal(r.status, 'completed');
  check(calls.map((c) => [c.name, c.arguments]));
  const n = await oa.responses.create({ model: 'tiny', input: 'x', tools: rtools, tool_choice: { type: 'function', name: 'get_weather' },
    temperature: 1, seed: 8, reasoning: { effort: 'none' }, max_output_tokens: 1200 });
  const nc = n.output.filter((o) => o.type === 'function_call');
  assert.ok(nc.every((c) => c.name === 'get_weather'));
  check(nc.map((c) => [c.name, c.arguments]));
});

test('anthropic: tool_choice tool and any force a valid tool_use', async () => {
  const atools = tools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
  const ms = await Promise.all([
    an.messages.create({ model: 'tiny', max_tokens: 1200, temperature: 1, tools: atools, tool_choice: { type: 'tool', name: 'get_weather' },
      messages: [{ role: 'user', content: 'weather?' }] }),
    an.messages.create({ model: 'tiny', max_tokens: 1200, temperature: 1, tools: atools, tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'anything' }] })]);
  const calls = [];
  ms.forEach((m, i) => {
    assert.equal(m.stop_reason, 'tool_use');
    const uses = m.content.filter((b) => b.type === 'tool_use');
    if (i === 0) assert.ok(uses.every((u) => u.name === 'get_weather'));
    for (const u of uses) calls.push([u.name, JSON.stringify(u.input)]);
  });
  check(calls);
});

test('refusals: 400 naming the fault', async () => {
  const bad = [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object',
    properties: { s: { type: 'string', pattern: '^a+$' } } } } }];
  const cases = [
    [ask({ tools: bad }), "'pattern'"],
    [ask({ tool_choice: { type: 'function', function: { name: 'nope' } } }), "'nope'"],
    [ask({ response_format: { type: 'json_object' } }), 'together'],
  ];
  for (const [body, word] of cases) {
    const r = await post(srv.url + '/v1/chat/completions', body);
    assert.equal(r.status, 400, r.text);
    assert.ok(r.json.error.message.includes(word), r.json.error.message);
  }
  const a = await post(srv.url + '/v1/messages', { model: 'x', max_tokens: 5, messages: [{ role: 'user', content: 'x' }],
    tools: [{ name: 'f', input_schema: { type: 'object' } }], tool_choice: { type: 'tool' } });
  assert.equal(a.status, 400);
  assert.equal(a.json.type, 'error');
});
