// anthropic.test.mjs: tf-serve driven by the official Anthropic SDK (pinned
// in package.json): messages streamed and not, event order, thinking,
// tool_use / tool_result history, count_tokens, errors.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { start, post, frames } from './lib.mjs';

let srv, client;
before(async () => {
  srv = await start(['--stub-token-ms', '2', '--http-threads', '1']); // the single-thread path
  client = new Anthropic({ baseURL: srv.url, apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  assert.equal((await srv.stop()).code, 0);
});

test('messages, not streamed: thinking and text blocks, usage', async () => {
  const m = await client.messages.create({
    model: 'stub', max_tokens: 200,
    thinking: { type: 'enabled', budget_tokens: 100 },
    messages: [{ role: 'user', content: 'hi @think' }],
  });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.match(m.id, /^msg_/);
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, 'Let me think about the greeting.');
  assert.equal(m.content[1].text, 'Hello there!');
  assert.equal(m.stop_reason, 'end_turn');
  assert.equal(m.stop_sequence, null);
  assert.ok(m.usage.input_tokens > 0);
  assert.ok(m.usage.output_tokens > 0);
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');
});

test('thinking is off unless asked', async () => {
  const m = await client.messages.create({
    model: 'stub', max_tokens: 200, system: 'be brief', messages: [{ role: 'user', content: 'hi @think' }],
  });
  assert.deepEqual(m.content.map((b) => b.type), ['text']);
  assert.equal(m.content[0].text, 'Hello there!');
});

test('streamed: event order and the final message', async () => {
  const s = client.messages.stream({
    model: 'stub', max_tokens: 200, thinking: { type: 'enabled', budget_tokens: 100 },
    messages: [{ role: 'user', content: 'hi @think' }],
  });
  const types = [];
  s.on('streamEvent', (e) => types.push(e.type));
  const m = await s.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.equal(types[types.length - 1], 'message_stop');
  assert.equal(types[types.length - 2], 'message_delta');
  const starts = types.filter((t) => t === 'content_block_start').length;
  const stops = types.filter((t) => t === 'content_block_stop').length;
  assert.equal(starts, 2);
  assert.equal(stops, 2);
  assert.equal(m.content[0].thinking, 'Let me think about the greeting.');
  assert.equal(m.content[1].text, 'Hello there!');
  assert.equal(m.stop_reason, 'end_turn');
});

test('stream wire: event names match data types, thinking closes with a signature', async () => {
  const r = await post(srv.url + '/v1/messages', {
    model: 'stub', max_tokens: 100, stream: true, thinking: { type: 'enabled', budget_tokens: 50 },
    messages: [{ role: 'user', content: '@think' }],
  });
  const f = frames(r.text);
  for (const x of f) assert.equal(x.event, x.data.type);
  const sig = f.findIndex((x) => x.data.delta?.type === 'signature_delta');
  assert.ok(sig > 0);
  assert.equal(f[sig + 1].data.type, 'content_block_stop');
  assert.equal(f[sig + 1].data.index, 0);
});

test('stop sequences and max_tokens', async () => {
  const m = await client.messages.create({
    model: 'stub', max_tokens: 100, stop_sequences: ['END'], messages: [{ role: 'user', content: '@stop' }],
  });
  assert.equal(m.content[0].text, 'abc ');
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, 'END');
  const l = await client.messages.create({ model: 'stub', max_tokens: 5, messages: [{ role: 'user', content: '@long' }] });
  assert.equal(l.stop_reason, 'max_tokens');
  assert.equal(l.usage.output_tokens, 5);
});

test('tool_use and tool_result history is accepted and rendered', async () => {
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  const messages = [
    { role: 'user', content: 'weather in Paris?' },
    { role: 'assistant', content: [{ type: 'text', text: 'Checking.' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny, 21 C' }] },
  ];
  const n = await client.messages.countTokens({ model: 'stub', tools, messages });
  const n0 = await client.messages.countTokens({ model: 'stub', messages: [{ role: 'user', content: 'weather in Paris?' }] });
  assert.ok(n.input_tokens > n0.input_tokens + 'sunny, 21 C'.length);
  const m = await client.messages.create({ model: 'stub', max_tokens: 50, tools, messages: [...messages, { role: 'user', content: 'thanks @short' }] });
  assert.equal(m.content[0].text, 'Short reply.');
});

test('count_tokens counts the rendered prompt', async () => {
  const r = await client.messages.countTokens({ model: 'stub', messages: [{ role: 'user', content: 'hi' }] });
  // plain family: "user: hi\nassistant: " in bytes
  assert.equal(r.input_tokens, 'user: hi\nassistant: '.length);
});

test('errors carry the Anthropic shape', async () => {
  const r = await post(srv.url + '/v1/messages', { model: 'stub', messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(r.status, 400);
  assert.equal(r.json.type, 'error');
  assert.equal(r.json.error.type, 'invalid_request_error');
  assert.match(r.json.error.message, /max_tokens/);
  await assert.rejects(
    client.messages.create({ model: 'stub', max_tokens: 10, messages: [{ role: 'system', content: 'x' }] }),
    (e) => e.status === 400 && e.error?.error?.type === 'invalid_request_error');
  const g = await fetch(srv.url + '/v1/messages');
  assert.equal(g.status, 405);
  assert.equal((await g.json()).error.type, 'invalid_request_error');
});
