// openai.test.mjs: tf-serve driven by the official OpenAI SDK (pinned in
// package.json): chat streamed and not, completions, models, stop strings,
// length, reasoning restore, errors, concurrent == solo.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { start, post, frames } from './lib.mjs';

let srv, client;
before(async () => {
  srv = await start(['--stub-token-ms', '2', '--model', 'deepseek-v41', '--alias', 'alias-a']);
  client = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'unused', maxRetries: 0 });
});
after(async () => {
  const { code } = await srv.stop();
  assert.equal(code, 0);
});

test('models lists the name and its aliases', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  assert.deepEqual(ids, ['deepseek-v41', 'alias-a']);
  for (const m of list.data) {
    assert.equal(m.object, 'model');
    assert.equal(m.context_length, 4096);
    assert.equal(m.max_model_len, 4096);
  }
});

test('chat, not streamed: reasoning and content split, usage adds up', async () => {
  const r = await client.chat.completions.create({
    model: 'deepseek-v41',
    messages: [{ role: 'user', content: 'hi @think' }],
    max_tokens: 200,
  });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  const m = r.choices[0].message;
  assert.equal(m.role, 'assistant');
  assert.equal(m.content, 'Hello there!');
  assert.equal(m.reasoning_content, 'Let me think about the greeting.');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const u = r.usage;
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(typeof u.prompt_tokens_details.cached_tokens, 'number');
  assert.ok(u.completion_tokens_details.reasoning_tokens > 0);
  assert.ok(u.completion_tokens_details.reasoning_tokens < u.completion_tokens);
});

test('chat with thinking off has no reasoning', async () => {
  for (const extra of [{ reasoning_effort: 'none' }, { chat_template_kwargs: { enable_thinking: false } }]) {
    const r = await client.chat.completions.create({
      model: 'deepseek-v41', messages: [{ role: 'user', content: 'hi @think' }], max_tokens: 50, ...extra,
    });
    assert.equal(r.choices[0].message.content, 'Hello there!');
    assert.equal(r.choices[0].message.reasoning_content, undefined);
  }
});

test('chat streamed: role first, deltas, finish, usage chunk, [DONE]', async () => {
  const s = await client.chat.completions.create({
    model: 'alias-a',
    messages: [{ role: 'user', content: 'hi @think' }],
    max_tokens: 200,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const c of s) chunks.push(c);
  assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant' });
  const content = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  const reasoning = chunks.map((c) => c.choices[0]?.delta?.reasoning_content ?? '').join('');
  assert.equal(content, 'Hello there!');
  assert.equal(reasoning, 'Let me think about the greeting.');
  const fin = chunks.filter((c) => c.choices[0]?.finish_reason);
  assert.equal(fin.length, 1);
  assert.equal(fin[0].choices[0].finish_reason, 'stop');
  const last = chunks[chunks.length - 1];
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
  for (const c of chunks) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.id, chunks[0].id);
    assert.equal(c.model, 'deepseek-v41');
  }
});

test('stream ends with data: [DONE] on the wire', async () => {
  const r = await post(srv.url + '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'hi @short' }], stream: true,
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  assert.ok(r.text.endsWith('data: [DONE]\n\n'));
  const f = frames(r.text);
  assert.equal(f.filter((x) => x.data === '[DONE]').length, 1);
  assert.ok(!f.some((x) => x.data?.usage), 'usage only with include_usage');
});

test('stop strings cut the text and are not sent', async () => {
  const r = await client.chat.completions.create({
    model: 'deepseek-v41', messages: [{ role: 'user', content: 'hi @stop' }], stop: ['END'], max_tokens: 100,
  });
  assert.equal(r.choices[0].message.content, 'abc ');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await client.chat.completions.create({
    model: 'deepseek-v41', messages: [{ role: 'user', content: 'hi @stop' }], stop: 'END', max_tokens: 100, stream: true,
  });
  let text = '';
  for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
  assert.equal(text, 'abc ');
});

test('max_tokens ends with length', async () => {
  const r = await client.chat.completions.create({
    model: 'deepseek-v41', messages: [{ role: 'user', content: 'hi @long' }], max_tokens: 12,
  });
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 12);
  const r2 = await client.chat.completions.create({
    model: 'deepseek-v41', messages: [{ role: 'user', content: 'hi @long' }], max_completion_tokens: 7,
  });
  assert.equal(r2.usage.completion_tokens, 7);
});

test('completions, streamed and not', async () => {
  const r = await client.completions.create({ model: 'deepseek-v41', prompt: 'hi @short', max_tokens: 50 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(r.choices[0].text, 'Short reply.');
  assert.equal(r.choices[0].finish_reason, 'stop');
  assert.equal(r.usage.prompt_tokens, 'hi @short'.length);
  const s = await client.completions.create({ model: 'deepseek-v41', prompt: [104, 105, 32, 64, 108, 111, 110, 103], max_tokens: 9, stream: true });
  let text = '', fin;
  for await (const c of s) { text += c.choices[0].text; fin = c.choices[0].finish_reason ?? fin; }
  assert.equal(text.length, 9);
  assert.equal(fin, 'length');
});

test('errors carry the OpenAI shape and status', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'x', messages: [] }),
    (e) => e.status === 400 && e.error?.type === 'invalid_request_error' && /messages must be a non-empty list/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5000 }),
    (e) => e.status === 400 && e.code === 'context_length_exceeded' && e.param === 'messages');
  await assert.rejects(
    client.completions.create({ model: 'x', prompt: [1, 999999] }),
    (e) => e.status === 400 && e.param === 'prompt' && /outside the vocabulary/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi' }], n: 2 }),
    (e) => e.status === 400 && /n must be 1/.test(e.message));
  await assert.rejects(
    client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi @fail' }], max_tokens: 10 }),
    (e) => e.status === 500 && e.error?.type === 'server_error');
});

test('a failed request fails alone, in the stream as an error frame', async () => {
  const [bad, good] = await Promise.all([
    post(srv.url + '/v1/chat/completions', { messages: [{ role: 'user', content: '@fail' }], stream: true }),
    client.chat.completions.create({ model: 'x', messages: [{ role: 'user', content: 'hi @short' }], reasoning_effort: 'none' }),
  ]);
  const f = frames(bad.text);
  assert.equal(f[f.length - 1].data, '[DONE]');
  assert.equal(f[f.length - 2].data.error.type, 'server_error');
  assert.equal(good.choices[0].message.content, 'Short reply.');
});

test('concurrent == solo for a seeded request', async () => {
  const ask = (seed, tag) => client.chat.completions.create({
    model: 'x', messages: [{ role: 'user', content: `${tag} @sample` }], max_tokens: 40,
    temperature: 0.7, seed, reasoning_effort: 'none',
  });
  const solo = (await ask(7, 'q')).choices[0].message.content;
  const all = await Promise.all([1, 2, 3, 7, 4, 5, 6, 8].map((s) => ask(s, s === 7 ? 'q' : `other ${s}`)));
  assert.equal(all[3].choices[0].message.content, solo);
  const other = (await ask(8, 'q')).choices[0].message.content;
  assert.notEqual(other, solo, 'the seed matters');
});

test('reasoning dropped from history is restored by content digest', async () => {
  const first = await client.chat.completions.create({
    model: 'x', messages: [{ role: 'user', content: 'hi @think' }], max_tokens: 200,
  });
  const answer = first.choices[0].message.content;
  // The next turn omits reasoning_content; /tokenize shows the rendered prompt grew by it.
  const msgs = [{ role: 'user', content: 'hi @think' }, { role: 'assistant', content: answer }, { role: 'user', content: 'more' }];
  const withR = [{ role: 'user', content: 'hi @think' }, { role: 'assistant', content: answer, reasoning_content: first.choices[0].message.reasoning_content }, { role: 'user', content: 'more' }];
  const a = await client.chat.completions.create({ model: 'x', messages: msgs, max_tokens: 5 });
  const b = await client.chat.completions.create({ model: 'x', messages: withR, max_tokens: 5 });
  assert.equal(a.usage.prompt_tokens, b.usage.prompt_tokens);
});
