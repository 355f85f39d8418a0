// responses.test.mjs: POST /v1/responses through the real openai client:
// with the DeepSeek-V4.1 family and the stub engine (output items,
// function calls read from DSML, input items, the SSE event sequence,
// streamed == whole, refusals, stored responses: previous_response_id,
// retrieve, delete, eviction), and with the cpu engine on a tiny
// random-weight pack for text.format json_schema (every reply that ends
// parses and validates with tests/server/validate.py, python3-jsonschema).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { start, post, modelArgs } from './lib.mjs';

const here = path.dirname(new URL(import.meta.url).pathname);
const schemas = JSON.parse(fs.readFileSync(path.join(here, '../data/grammar/schemas.json'), 'utf8'));
const tools = [{ type: 'function', name: 'get_weather', description: 'Weather for a city',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } }];
const want = [{ city: 'Paris', days: 3 }, { city: '東京' }];

let stub, cpu, small, off, oa, oc, os, oo, dir;
before(async () => {
  dir = fs.mkdtempSync('/tmp/tf-responses-');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '5', '-q', '-o', path.join(dir, 'tiny')]);
  stub = await start(['--stub-token-ms', '1', '--model', 'deepseek-v41', path.join(dir, 'tiny')]);
  cpu = await start([...modelArgs(2), '--model', 'tiny', '--max-tokens', '1500', path.join(dir, 'tiny')]);
  small = await start(['--stub-token-ms', '1', '--model', 'deepseek-v41', '--responses-store', '2', path.join(dir, 'tiny')]);
  off = await start(['--stub-token-ms', '1', '--model', 'deepseek-v41', path.join(dir, 'tiny')], { TF_RESPONSES_STORE: '0' });
  oa = new OpenAI({ baseURL: stub.url + '/v1', apiKey: 'x', maxRetries: 0 });
  os = new OpenAI({ baseURL: small.url + '/v1', apiKey: 'x', maxRetries: 0 });
  oo = new OpenAI({ baseURL: off.url + '/v1', apiKey: 'x', maxRetries: 0 });
  oc = new OpenAI({ baseURL: cpu.url + '/v1', apiKey: 'x', maxRetries: 0, timeout: 300000 });
});
after(async () => {
  assert.equal((await stub.stop()).code, 0);
  assert.equal((await cpu.stop()).code, 0);
  assert.equal((await small.stop()).code, 0);
  assert.equal((await off.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

function validate(cases) {
  const input = cases.map((c) => JSON.stringify(c)).join('\n') + '\n';
  const out = execFileSync('python3', [path.join(here, 'validate.py')], { input, encoding: 'utf8' });
  return out.trim().split('\n');
}

test('a string input: a reasoning item, a message with output_text, usage', async () => {
  const r = await oa.responses.create({ model: 'deepseek-v41', input: 'hi @think', instructions: 'Be brief.', max_output_tokens: 200 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_[0-9a-f]{24}$/);
  assert.equal(r.status, 'completed');
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].type, 'reasoning_text');
  assert.equal(r.output[0].content[0].text, 'Let me think about the greeting.');
  assert.equal(r.output[1].role, 'assistant');
  assert.equal(r.output[1].content[0].type, 'output_text');
  assert.equal(r.output_text, 'Hello there!');
  assert.equal(r.instructions, 'Be brief.');
  assert.equal(r.store, true); /* OpenAI's default */
  const u = r.usage;
  assert.ok(u.input_tokens > 0 && u.output_tokens > 0);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.ok(u.output_tokens_details.reasoning_tokens > 0 && u.output_tokens_details.reasoning_tokens < u.output_tokens);
});

test('reasoning.effort none: no reasoning item; max_output_tokens: incomplete', async () => {
  const r = await oa.responses.create({ model: 'x', input: 'hi @think', reasoning: { effort: 'none' } });
  assert.deepEqual(r.output.map((o) => o.type), ['message']);
  assert.equal(r.output_text, 'Hello there!');
  assert.equal(r.usage.output_tokens_details.reasoning_tokens, 0);
  const l = await oa.responses.create({ model: 'x', input: '@long', max_output_tokens: 5, reasoning: { effort: 'none' } });
  assert.equal(l.status, 'incomplete');
  assert.deepEqual(l.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(l.usage.output_tokens, 5);
});

test('tools: DSML calls become function_call items', async () => {
  const r = await oa.responses.create({ model: 'x', input: 'weather? @tool', tools });
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message', 'function_call', 'function_call']);
  assert.equal(r.output_text, 'Checking.');
  const calls = r.output.filter((o) => o.type === 'function_call');
  calls.forEach((c, i) => {
    assert.match(c.id, /^fc_/);
    assert.match(c.call_id, /^call_/);
    assert.equal(c.name, 'get_weather');
    assert.equal(c.status, 'completed');
    assert.deepEqual(JSON.parse(c.arguments), want[i]);
  });
  // The round trip: items back in as input (message, reasoning, calls, outputs).
  const next = await oa.responses.create({ model: 'x', tools, max_output_tokens: 50, input: [
    { role: 'user', content: 'weather? @tool' },
    ...r.output.map(({ id, status, ...item }) => item),
    ...calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: 'sunny' })),
    { role: 'user', content: [{ type: 'input_text', text: 'and now? @short' }] }] });
  assert.equal(next.output_text, 'Short reply.');
  const none = await oa.responses.create({ model: 'x', input: '@tool', tools, tool_choice: 'none' });
  assert.ok(none.output.every((o) => o.type !== 'function_call'));
  assert.match(none.output_text, /DSML/);
});

// The event types of a stream with the repeated deltas folded.
const shape = (events) => events.map((e) => e.type).filter((t, i, a) => !(t.endsWith('.delta') && a[i - 1] === t));

test('stream: the event sequence the SDK reads, streamed == whole', async () => {
  const events = [];
  const s = await oa.responses.create({ model: 'x', input: 'weather? @tool', tools, stream: true });
  for await (const e of s) events.push(e);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.deepEqual(shape(events), [
    'response.created', 'response.in_progress',
    'response.output_item.added', 'response.content_part.added', 'response.reasoning_text.delta',
    'response.reasoning_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.content_part.added', 'response.output_text.delta',
    'response.output_text.done', 'response.content_part.done', 'response.output_item.done',
    'response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done',
    'response.output_item.added', 'response.function_call_arguments.delta', 'response.function_call_arguments.done', 'response.output_item.done',
    'response.completed']);
  const done = events.at(-1).response;
  const whole = await oa.responses.create({ model: 'x', input: 'weather? @tool', tools });
  // Ids are fresh per reply; the stream helper adds parsed fields.
  const strip = (r) => JSON.parse(JSON.stringify(r.output.map(({ id, call_id, ...o }) => o),
    (k, v) => (k === 'parsed' || k === 'parsed_arguments' ? undefined : v)));
  assert.deepEqual(strip(done), strip(whole));
  assert.deepEqual(done.usage, whole.usage);
  // The SDK's stream helper assembles the same response.
  const st = oa.responses.stream({ model: 'x', input: 'weather? @tool', tools });
  let text = '';
  st.on('response.output_text.delta', (e) => { text += e.delta; });
  const fin = await st.finalResponse();
  assert.equal(text, 'Checking.');
  assert.equal(fin.output.find((o) => o.type === 'message').content[0].text, 'Checking.');
  assert.deepEqual(strip(fin), strip(whole));
  for (const body of [{ input: 'hi @think' }, { input: '@stop', reasoning: { effort: 'none' } }, { input: '@long', max_output_tokens: 9 }]) {
    const w = await oa.responses.create({ model: 'x', ...body });
    const sd = oa.responses.stream({ model: 'x', ...body });
    const f = await sd.finalResponse();
    // (a cut stream's snapshot keeps its items as added: the SDK reads no
    // output_item.done, and only response.completed replaces the snapshot)
    const text = (r) => r.output.map((o) => [o.type, (o.content ?? []).map((c) => c.text).join('')]);
    assert.deepEqual(text(f), text(w), JSON.stringify(body));
    if (w.status === 'completed') assert.equal(f.status, 'completed');
  }
  const cut = [];
  for await (const e of await oa.responses.create({ model: 'x', input: '@long', max_output_tokens: 9, stream: true })) cut.push(e);
  assert.equal(cut.at(-1).type, 'response.incomplete');
  assert.deepEqual(cut.at(-1).response.incomplete_details, { reason: 'max_output_tokens' });
  assert.equal(cut.at(-1).response.output.at(-1).status, 'incomplete');
});

test('refusals: 400 in OpenAI shape', async () => {
  const cases = [
    [{ input: 'x', store: 'yes' }, 'store'],
    [{ input: 'x', previous_response_id: 7 }, 'previous_response_id'],
    [{ input: 'x', tools: [{ type: 'web_search' }] }, "'web_search'"],
    [{ input: [] }, 'input'],
    [{ input: [{ type: 'item_reference', id: 'x' }] }, 'item_reference'],
    [{ input: 'x', text: { format: { type: 'json_schema', name: 'n', schema: { not: {} } } } }, "'not'"],
    [{ input: 'x', tool_choice: 'sometimes' }, 'tool_choice'],
    [{ input: 'x', max_output_tokens: 0 }, 'max_output_tokens'],
  ];
  for (const [body, word] of cases) {
    await assert.rejects(oa.responses.create({ model: 'x', ...body }), (e) => {
      assert.equal(e.status, 400, JSON.stringify(body));
      assert.ok(e.message.includes(word), e.message);
      assert.equal(e.type, 'invalid_request_error');
      return true;
    });
  }
});

// An SDK error in OpenAI's shape: the status, param and code null.
function notFound(param) {
  return (e) => {
    assert.equal(e.status, 404);
    assert.match(e.message, /not found/);
    assert.equal(e.type, 'invalid_request_error');
    assert.equal(e.param, param);
    assert.equal(e.code, null);
    return true;
  };
}

test('previous_response_id: the stored conversation (inputs and outputs, in order) comes before the input', async () => {
  const r1 = await oa.responses.create({ model: 'x', input: 'hi @think', max_output_tokens: 200 });
  assert.equal(r1.store, true);
  const r2 = await oa.responses.create({ model: 'x', input: 'and then?', previous_response_id: r1.id, max_output_tokens: 200 });
  assert.equal(r2.previous_response_id, r1.id);
  const solo = await oa.responses.create({ model: 'x', input: 'and then?', store: false, max_output_tokens: 200 });
  assert.equal(solo.store, false);
  // the second prompt holds the first turn: as many tokens as sending it whole
  const whole = await oa.responses.create({ model: 'x', store: false, max_output_tokens: 200,
    input: [{ role: 'user', content: 'hi @think' }, ...r1.output, { role: 'user', content: 'and then?' }] });
  assert.ok(r2.usage.input_tokens > solo.usage.input_tokens + 4, `${r2.usage.input_tokens} vs ${solo.usage.input_tokens}`);
  assert.equal(r2.usage.input_tokens, whole.usage.input_tokens);
  // a chain: the third turn holds both earlier ones
  const r3 = await oa.responses.create({ model: 'x', input: 'more', previous_response_id: r2.id, max_output_tokens: 200 });
  assert.ok(r3.usage.input_tokens > r2.usage.input_tokens, `${r3.usage.input_tokens} vs ${r2.usage.input_tokens}`);
  // instructions are this request's, not carried over
  const r4 = await oa.responses.create({ model: 'x', input: 'and then?', instructions: 'Be brief.', previous_response_id: r1.id, max_output_tokens: 200 });
  assert.ok(r4.usage.input_tokens > r2.usage.input_tokens);
  assert.equal(r4.instructions, 'Be brief.');
  // store: false is not kept
  await assert.rejects(oa.responses.retrieve(solo.id), notFound(null));
  await assert.rejects(oa.responses.create({ model: 'x', input: 'x', previous_response_id: solo.id }), notFound('previous_response_id'));
});

test('retrieve and delete a stored response; unknown ids are 404', async () => {
  const r = await oa.responses.create({ model: 'x', input: 'hi @think', max_output_tokens: 200 });
  const got = await oa.responses.retrieve(r.id);
  assert.deepEqual(got, r);
  // a stream's stored response is its response.completed's
  const s = oa.responses.stream({ model: 'x', input: 'hi @think', max_output_tokens: 200 });
  const fin = await s.finalResponse();
  const sgot = await oa.responses.retrieve(fin.id);
  assert.equal(sgot.output_text, fin.output.at(-1).content[0].text);
  assert.deepEqual(sgot.output.map((o) => o.id), fin.output.map((o) => o.id));
  assert.deepEqual(sgot.usage, fin.usage);
  const d = await post(stub.url + '/v1/responses/' + fin.id, ''); // the id kept
  assert.equal(d.status, 405);
  assert.equal(d.headers.get('allow'), 'GET, DELETE');
  await oa.responses.retrieve(fin.id);
  await oa.responses.delete(r.id);
  await assert.rejects(oa.responses.retrieve(r.id), notFound(null));
  await assert.rejects(oa.responses.delete(r.id), notFound(null));
  await assert.rejects(oa.responses.create({ model: 'x', input: 'x', previous_response_id: r.id }), notFound('previous_response_id'));
  await assert.rejects(oa.responses.retrieve('resp_123'), notFound(null));
  const del = await fetch(stub.url + '/v1/responses/' + fin.id, { method: 'DELETE' });
  assert.deepEqual(await del.json(), { id: fin.id, object: 'response.deleted', deleted: true });
});

test('the store is bounded: the oldest response goes first', async () => {
  const ids = [];
  for (const input of ['one', 'two', 'three'])
    ids.push((await os.responses.create({ model: 'x', input, max_output_tokens: 20 })).id);
  await assert.rejects(os.responses.retrieve(ids[0]), notFound(null));
  await assert.rejects(os.responses.create({ model: 'x', input: 'x', previous_response_id: ids[0] }), notFound('previous_response_id'));
  assert.equal((await os.responses.retrieve(ids[1])).id, ids[1]);
  const r = await os.responses.create({ model: 'x', input: 'four', previous_response_id: ids[2], max_output_tokens: 20 });
  assert.equal(r.previous_response_id, ids[2]);
  await assert.rejects(os.responses.retrieve(ids[1]), notFound(null));
});

test('--responses-store 0: store: true and previous_response_id are 400, store left out is not kept', async () => {
  const r = await oo.responses.create({ model: 'x', input: 'hi', max_output_tokens: 20 });
  assert.equal(r.store, false);
  await assert.rejects(oo.responses.retrieve(r.id), (e) => e.status === 400);
  for (const [body, param] of [[{ store: true }, 'store'], [{ previous_response_id: r.id }, 'previous_response_id']]) {
    await assert.rejects(oo.responses.create({ model: 'x', input: 'x', ...body }), (e) => {
      assert.equal(e.status, 400);
      assert.equal(e.param, param);
      return true;
    });
  }
  const s = await post(off.url + '/v1/responses', '{"input": "x", "stream": true, "store": true}');
  assert.equal(s.status, 400);
});

test('text.format json_schema on random weights: every reply that ends validates', async () => {
  const pick = ['person', 'order', 'sentiment', 'enum_mix', 'coords', 'semver', 'discriminated', 'array_of_ints'];
  const jobs = [];
  for (const name of pick) for (const seed of [1, 2]) jobs.push({ s: schemas.find((x) => x.name === name), seed });
  const replies = [];
  for (let i = 0; i < jobs.length; i += 4) {
    replies.push(...await Promise.all(jobs.slice(i, i + 4).map(async ({ s, seed }) => {
      const r = await oc.responses.create({ model: 'tiny', input: 'Reply in JSON.', temperature: 1, seed,
        reasoning: { effort: 'none' }, max_output_tokens: 1500,
        text: { format: { type: 'json_schema', name: s.name, schema: s.schema, strict: true } } });
      return { name: s.name, seed, schema: s.schema, status: r.status, text: r.output_text };
    })));
  }
  const verdicts = validate(replies.map((r) => ({ schema: r.schema, text: r.text })));
  assert.deepEqual(replies.map((r, k) => `${r.name}/${r.seed} ${r.status}: ${verdicts[k]}`),
    replies.map((r) => `${r.name}/${r.seed} completed: ok`));
  // Streamed == whole under a schema.
  const s = schemas.find((x) => x.name === 'order');
  const body = { model: 'tiny', input: [{ role: 'user', content: 'Reply in JSON.' }], seed: 9, reasoning: { effort: 'none' },
    text: { format: { type: 'json_schema', name: 'o', schema: s.schema } } };
  const whole = await oc.responses.create(body);
  const st = oc.responses.stream(body);
  let text = '';
  st.on('response.output_text.delta', (e) => { text += e.delta; });
  await st.finalResponse();
  assert.equal(text, whole.output_text);
  assert.deepEqual(validate([{ schema: s.schema, text }]), ['ok']);
  // json_object.
  const j = await oc.responses.create({ model: 'tiny', input: 'JSON', seed: 3, reasoning: { effort: 'none' }, max_output_tokens: 400,
    text: { format: { type: 'json_object' } } });
  if (j.status === 'completed') assert.equal(typeof JSON.parse(j.output_text), 'object');
});
