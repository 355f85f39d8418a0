// ranks.test.mjs: tf-serve --local-ranks 2 (rank 0 serves, rank 1 a
// follower process; the host collectives over loopback) with the cpu engine
// on a synthetic tiny pack: both SDKs get the same seeded reply from the
// two ranks; /health and /metrics report the world; a follower killed
// under load ends rank 0 with exit 70 within the grace time + 0.5 s, every
// stream in flight ending with an error frame and [DONE] and new requests
// getting 503; SIGTERM drains, then stops the follower (exit 0). At world
// 4 (three followers): both SDKs' seeded replies agree and every rank
// stops with 0; a follower stopped (SIGSTOP) under load sends no more
// heartbeats, so rank 0 exits 70 within the heartbeat limit, its period and
// the grace time (+ 0.5 s), the streams end with an error frame, and no
// follower outlives it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { start, post, stream, sleep } from './lib.mjs';

let dir, pack;
const GRACE = 1, BEAT = 0.1, LIMIT = 0.4;
const env = { TF_TP_FAILFAST_GRACE_S: String(GRACE), TF_TP_HEARTBEAT_S: String(BEAT),
  TF_TP_HEARTBEAT_LIMIT_S: String(LIMIT) };
before(() => {
  dir = fs.mkdtempSync('/tmp/tf-ranks-');
  pack = path.join(dir, 'tiny');
  execFileSync(path.join(process.env.TF_BIN, 'tf-pack-synth'), ['-p', 'tiny', '--seed', '3', '-q', '-o', pack]);
});
after(() => fs.rmSync(dir, { recursive: true, force: true }));

const serve = (args = [], world = 2) => start(['--engine', 'cpu', '-j', '1', '--model', 'tiny', '--local-ranks', String(world), ...args, pack], env);
const alive = (pid) => { try { process.kill(pid, 0); } catch { return false; }
  try { return fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1][0] !== 'Z'; } catch { return false; } };
const followers = (srv) => execFileSync('pgrep', ['-P', String(srv.proc.pid)]).toString().trim().split('\n').map(Number);
const ask = (extra = {}) => ({ model: 'tiny', messages: [{ role: 'user', content: 'Say something.' }], max_tokens: 8, ...extra });

test('two ranks: both SDKs, the same seeded reply; health and metrics name the world', async () => {
  const srv = await serve();
  const oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  const an = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
  const req = ask({ temperature: 0.8, reasoning_effort: 'none' }); // the default seed: the prompt's
  const a = await oa.chat.completions.create(req);
  const b = await oa.chat.completions.create({ ...req, stream: true });
  let streamed = '';
  for await (const c of b) streamed += c.choices[0]?.delta?.content ?? '';
  assert.equal(a.usage.completion_tokens, 8);
  assert.equal(streamed, a.choices[0].message.content ?? '');
  const m = await an.messages.create({ model: 'tiny', max_tokens: 8, messages: req.messages, temperature: 0.8,
    thinking: { type: 'disabled' } });
  assert.equal(m.usage.output_tokens, 8);
  assert.equal(m.content.filter((c) => c.type === 'text').map((c) => c.text).join(''), a.choices[0].message.content ?? '');
  const h = await (await fetch(srv.url + '/health', { headers: { authorization: 'Bearer x' } })).json();
  assert.equal(h.world, 2);
  assert.deepEqual(h.ranks, [{ rank: 0, state: 'serving' }, { rank: 1, state: 'up' }]);
  const metrics = await (await fetch(srv.url + '/metrics')).text();
  assert.match(metrics, /^tf_tp_world 2$/m);
  assert.match(metrics, /^tf_tp_rank_up\{rank="1",state="up"\} 1$/m);
  const pids = followers(srv);
  assert.equal(pids.length, 1);
  const exit = await srv.stop('SIGTERM');
  assert.equal(exit.code, 0);
  assert.match(srv.stderr(), /rank 1: stopped after \d+ calls/);
});

test('a follower killed under load: streams get an error frame, new requests 503, rank 0 exits 70 in time', async () => {
  const srv = await serve();
  let seen = 0;
  const long = (i) => stream(srv.url + '/v1/chat/completions',
    ask({ max_tokens: 3000, ignore_eos: true, stream: true, seed: i, reasoning_effort: 'none' }), () => { seen++; return false; });
  const streams = [long(1), long(2), long(3)];
  while (seen < 12) await sleep(10);
  const [pid] = followers(srv);
  const t0 = Date.now();
  process.kill(pid, 'SIGKILL');
  const done = await Promise.all(streams);
  for (const d of done) {
    const f = d.frames;
    assert.equal(f[f.length - 1].data, '[DONE]', 'the stream ends');
    assert.ok(f.some((x) => x.data?.error?.type === 'server_error'), 'an error frame, not a hang');
  }
  await sleep(100);
  const r = await post(srv.url + '/v1/chat/completions', ask());
  assert.equal(r.status, 503);
  const exit = await srv.exited;
  const took = (Date.now() - t0) / 1000;
  assert.equal(exit.code, 70);
  assert.ok(took <= GRACE + 0.5, `rank 0 exited ${took.toFixed(3)} s after the kill`);
  assert.match(srv.stderr(), /tp fail-fast: rank 0: rank 1 closed the fate channel/);
});

test('SIGTERM with a stream running: it finishes, then every rank stops with 0', async () => {
  const srv = await serve();
  let n = 0;
  const s = stream(srv.url + '/v1/chat/completions', ask({ max_tokens: 30, ignore_eos: true, stream: true }), () => { n++; return false; });
  while (n < 3) await sleep(10);
  const [pid] = followers(srv);
  srv.proc.kill('SIGTERM');
  const d = await s;
  assert.ok(d.frames.some((f) => f.data?.choices?.[0]?.finish_reason === 'length'));
  assert.equal((await srv.exited).code, 0);
  assert.throws(() => process.kill(pid, 0), 'the follower is gone');
});

test('four ranks: both SDKs, the same seeded reply; health names every rank; SIGTERM stops them all', async () => {
  const srv = await serve([], 4);
  const oa = new OpenAI({ baseURL: srv.url + '/v1', apiKey: 'x', maxRetries: 0 });
  const an = new Anthropic({ baseURL: srv.url, apiKey: 'x', maxRetries: 0 });
  const req = ask({ temperature: 0.8, reasoning_effort: 'none' });
  const a = await oa.chat.completions.create(req);
  let streamed = '';
  for await (const c of await oa.chat.completions.create({ ...req, stream: true })) streamed += c.choices[0]?.delta?.content ?? '';
  assert.equal(a.usage.completion_tokens, 8);
  assert.equal(streamed, a.choices[0].message.content ?? '');
  const m = await an.messages.create({ model: 'tiny', max_tokens: 8, messages: req.messages, temperature: 0.8,
    thinking: { type: 'disabled' } });
  assert.equal(m.content.filter((c) => c.type === 'text').map((c) => c.text).join(''), a.choices[0].message.content ?? '');
  const h = await (await fetch(srv.url + '/health')).json();
  assert.equal(h.world, 4);
  assert.deepEqual(h.ranks.map((r) => r.state), ['serving', 'up', 'up', 'up']);
  const pids = followers(srv);
  assert.equal(pids.length, 3);
  assert.equal((await srv.stop('SIGTERM')).code, 0);
  for (const r of [1, 2, 3]) assert.match(srv.stderr(), new RegExp(`rank ${r}: stopped after \\d+ calls`));
  for (const pid of pids) assert.ok(!alive(pid), 'a follower is gone');
});

test('four ranks, a follower stopped under load: error frames, rank 0 exits 70 within the heartbeat limit', async () => {
  const srv = await serve([], 4);
  let seen = 0;
  const long = (i) => stream(srv.url + '/v1/chat/completions',
    ask({ max_tokens: 3000, ignore_eos: true, stream: true, seed: i, reasoning_effort: 'none' }), () => { seen++; return false; });
  const streams = [long(1), long(2)];
  while (seen < 8) await sleep(10);
  const pids = followers(srv);
  const t0 = Date.now();
  process.kill(pids[1], 'SIGSTOP');
  const done = await Promise.all(streams);
  for (const d of done) {
    const f = d.frames;
    assert.equal(f[f.length - 1].data, '[DONE]', 'the stream ends');
    assert.ok(f.some((x) => x.data?.error?.type === 'server_error'), 'an error frame, not a hang');
  }
  const exit = await srv.exited;
  const took = (Date.now() - t0) / 1000;
  assert.equal(exit.code, 70);
  assert.ok(took <= LIMIT + BEAT + GRACE + 0.5, `rank 0 exited ${took.toFixed(3)} s after the stop`);
  assert.match(srv.stderr(), /tp fail-fast: rank 0: rank 2 sent nothing on the fate channel/);
  await sleep(500);
  for (const pid of pids) assert.ok(!alive(pid), `follower ${pid} outlived rank 0`);
});
