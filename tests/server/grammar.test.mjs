// grammar.test.mjs: constrained output through the real openai client
// against tf-serve with the cpu engine on a tiny random-weight pack: the
// text is noise, so a reply that parses and validates shows that the mask
// did the work. Replies are checked by tests/server/validate.py
// (python3-jsonschema), which shares no code with the grammar layer. The
// schema, regex and choice cases run again on the stub engine, whose
// constrained draws are the grammar's mask alone (an allowed id picked by
// the seed, the end as soon as the grammar allows it).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import { start, post, modelArgs } from './lib.mjs';

const here = path.dirname(new URL(import.meta.url).pathname);
const schemas = JSON.parse(fs.readFileSync(path.join(here, '../data/grammar/schemas.json'), 'utf8'));

let srv, stub, oa, os, dir;
before(async () => {
  dir = fs.mkdtempSync('/tmp/tf-grammar-');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '5', '-q', '-o', path.join(dir, 'tiny')]);
  srv = await start([...modelArgs(2), '--model', 'tiny', '--max-tokens', '1500', path.join(dir, 'tiny')]);
  stub = await start(['--stub-token-ms', '0', '--stub-piece-us', '0', '--model', 'tiny', path.join(dir, 'tiny')]);
  oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0, timeout: 300000 });
  os = new OpenAI({ baseURL: stub.url + '/v1', apiKey: 'x', maxRetries: 0, timeout: 300000 });
});
after(async () => {
  assert.equal((await srv.stop()).code, 0);
  assert.equal((await stub.stop()).code, 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

// validate([{schema, text}]) -> ['ok' | reason, ...]
function validate(cases) {
  const input = cases.map((c) => JSON.stringify(c)).join('\n') + '\n';
  const out = execFileSync('python3', [path.join(here, 'validate.py')], { input, encoding: 'utf8' });
  return out.trim().split('\n');
}

const ask = (extra = {}) => ({ model: 'tiny', messages: [{ role: 'user', content: 'Reply in JSON.' }],
  max_tokens: 1500, temperature: 1, thinking: false, ...extra });

async function inBatches(items, size, fn) {
  const out = [];
  for (let i = 0; i < items.length; i += size) out.push(...await Promise.all(items.slice(i, i + size).map(fn)));
  return out;
}

// Schemas marked open leave strings unbounded: random weights may fill
// max_tokens inside one (finish "length", a cut document); every reply
// that ends ("stop") must validate, and every bounded schema must end.
for (const [eng, client] of [['cpu', () => oa], ['stub', () => os]]) {
  test(`${eng}: json_schema: ${schemas.length} schemas x 2 seeds, every reply validates`, async () => {
    const jobs = [];
    for (const s of schemas) for (const seed of [1, 2]) jobs.push({ s, seed });
    const replies = await inBatches(jobs, 8, async ({ s, seed }) => {
      const r = await client().chat.completions.create(ask({ seed,
        response_format: { type: 'json_schema', json_schema: { name: s.name, schema: s.schema, strict: true } } }));
      return { name: s.name, seed, schema: s.schema, open: s.open, text: r.choices[0].message.content,
        finish: r.choices[0].finish_reason };
    });
    const ended = replies.filter((r) => r.finish === 'stop');
    const verdicts = validate(ended.map((r) => ({ schema: r.schema, text: r.text })));
    const bad = ended.map((r, k) => ({ ...r, v: verdicts[k] })).filter((r) => r.v !== 'ok');
    bad.push(...replies.filter((r) => r.finish !== 'stop' && !r.open).map((r) => ({ ...r, v: 'did not end' })));
    assert.ok(ended.length >= replies.length - 6, `${ended.length} of ${replies.length} ended`);
    assert.deepEqual(bad.map((r) => `${r.name}/${r.seed} ${r.finish}: ${r.v}: ${r.text.slice(0, 200)}`), []);
  });

  test(`${eng}: json_schema: streamed equals whole`, async () => {
    const s = schemas.find((x) => x.name === 'order');
    const req = ask({ seed: 9, response_format: { type: 'json_schema', json_schema: { name: 'o', schema: s.schema } } });
    const whole = await client().chat.completions.create(req);
    const stream = await client().chat.completions.create({ ...req, stream: true });
    let text = '';
    for await (const ch of stream) text += ch.choices[0]?.delta?.content ?? '';
    assert.equal(text, whole.choices[0].message.content);
    assert.deepEqual(validate([{ schema: s.schema, text }]), ['ok']);
  });
}

test('json_object: a JSON object', async () => {
  for (const seed of [3, 4, 5, 6]) {
    const r = await oa.chat.completions.create(ask({ seed, max_tokens: 400, response_format: { type: 'json_object' } }));
    if (r.choices[0].finish_reason === 'length') continue; /* cut inside an open string */
    const v = JSON.parse(r.choices[0].message.content);
    assert.equal(typeof v, 'object');
    assert.ok(v !== null && !Array.isArray(v));
  }
});

for (const [eng, client] of [['cpu', () => oa], ['stub', () => os]]) {
  test(`${eng}: guided_regex and guided_choice (vLLM fields)`, async () => {
    const re = '[A-Z]{2}-[0-9]{3}( ok| no)?';
    for (const seed of [1, 2, 3]) {
      const r = await client().chat.completions.create(ask({ seed, guided_regex: re }));
      assert.match(r.choices[0].message.content, new RegExp(`^(?:${re})$`));
      const c = await client().chat.completions.create(ask({ seed, guided_choice: ['yes', 'no', 'maybe later'] }));
      assert.ok(['yes', 'no', 'maybe later'].includes(c.choices[0].message.content), c.choices[0].message.content);
      assert.equal(c.choices[0].finish_reason, 'stop');
    }
  });

  test(`${eng}: completions: guided_json as a schema and as text`, async () => {
    const schema = schemas.find((x) => x.name === 'sentiment').schema;
    for (const g of [schema, JSON.stringify(schema)]) {
      const r = await client().completions.create({ model: 'tiny', prompt: 'x', max_tokens: 800, seed: 5, guided_json: g });
      assert.equal(r.choices[0].finish_reason, 'stop');
      assert.deepEqual(validate([{ schema, text: r.choices[0].text }]), ['ok']);
    }
  });
}

test('refusals: 400 naming the keyword or the fault', async () => {
  const cases = [
    [{ response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { not: { type: 'string' } } } } }, "'not'"],
    [{ response_format: { type: 'json_schema', json_schema: { name: 'n', schema: { type: 'string', format: 'hostname' } } } }, "'format'"],
    [{ guided_json: { type: 'array', uniqueItems: true } }, "'uniqueItems'"],
    [{ guided_regex: '(a)\\1' }, 'not supported'],
    [{ guided_regex: '(a' }, 'missing closing parenthesis'],
    [{ guided_choice: [] }, 'guided_choice'],
    [{ guided_regex: 'a', guided_choice: ['a'] }, 'together'],
    [{ response_format: { type: 'xml' } }, 'response_format'],
    [{ guided_regex: 'a', logprobs: true }, 'logprobs'],
    [{ guided_json: { type: 'string', minLength: 5, maxLength: 2 } }, 'matches nothing'],
  ];
  for (const [extra, word] of cases) {
    const r = await post(srv.url + '/v1/chat/completions', ask(extra));
    assert.equal(r.status, 400, JSON.stringify(extra) + ' ' + r.text);
    assert.ok(r.json.error.message.includes(word), r.json.error.message);
    assert.equal(r.json.error.type, 'invalid_request_error');
  }
});
