// drain.test.mjs: SIGTERM/SIGINT drain with the stub engine: a counted
// request finishes while new ones get 503; past the drain time, or on a
// second signal, the engine halts and what still runs fails with
// "server restarting" (streams: a server_error frame, then [DONE]).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { start, post, stream, sleep } from './lib.mjs';

const chat = (content, extra = {}) => ({ messages: [{ role: 'user', content }], reasoning_effort: 'none', ...extra });

test('a counted request finishes; new ones get 503; health says draining', async () => {
  const srv = await start(['--drain', '10', '--stub-token-ms', '20']);
  let signalled = false;
  const running = stream(srv.url + '/v1/chat/completions', chat('@long', { max_tokens: 40, stream: true }), (f) => {
    if (!signalled && f.data?.choices?.[0]?.delta?.content) { signalled = true; srv.proc.kill('SIGTERM'); }
    return false;
  });
  while (!signalled) await sleep(10);
  await sleep(50);
  const r = await post(srv.url + '/v1/chat/completions', chat('@short'));
  assert.equal(r.status, 503);
  assert.equal(r.headers.get('retry-after'), '30');
  assert.deepEqual(r.json, { error: { message: 'server restarting: retry shortly', type: 'server_error', param: null, code: 'server_restarting' } });
  const a = await post(srv.url + '/v1/messages', { model: 'x', max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(a.status, 503);
  assert.equal(a.json.type, 'error');
  assert.equal(a.json.error.type, 'overloaded_error');
  const h = await fetch(srv.url + '/health');
  assert.equal(h.status, 503);
  assert.equal(h.headers.get('retry-after'), '30');
  assert.deepEqual(await h.json(), { status: 'draining', requests_in_progress: 1 });
  // Not counted, never drained: tokenize still answers.
  assert.equal((await post(srv.url + '/tokenize', { prompt: 'x' })).status, 200);
  const done = await running;
  const last = done.frames.filter((f) => f.data?.choices?.[0]?.finish_reason);
  assert.equal(last.length, 1);
  assert.equal(last[0].data.choices[0].finish_reason, 'length');
  assert.equal(done.frames[done.frames.length - 1].data, '[DONE]');
  const text = done.frames.map((f) => f.data?.choices?.[0]?.delta?.content ?? '').join('');
  assert.equal(text.length, 40, 'no token lost or doubled');
  const exit = await srv.exited;
  assert.equal(exit.code, 0);
  assert.match(srv.stderr(), /draining 1 request/);
  assert.doesNotMatch(srv.stderr(), /halted/);
});

test('past the drain time the engine halts: streams get server_error and [DONE], replies 503', async () => {
  const srv = await start(['--drain', '0.3', '--stub-token-ms', '5']);
  let open = 0;
  const s1 = stream(srv.url + '/v1/chat/completions', chat('@hang', { stream: true }), () => { open++; return false; });
  const s2 = stream(srv.url + '/v1/messages', { model: 'x', max_tokens: 100, stream: true, messages: [{ role: 'user', content: '@hang' }] }, () => { open++; return false; });
  const whole = post(srv.url + '/v1/chat/completions', chat('@hang'));
  while (open < 2) await sleep(10);
  await sleep(100);
  srv.proc.kill('SIGTERM');
  const t0 = Date.now();
  const [a, b, c] = await Promise.all([s1, s2, whole]);
  assert.ok(Date.now() - t0 >= 250, 'drain time honoured');
  const fa = a.frames;
  assert.equal(fa[fa.length - 1].data, '[DONE]');
  assert.equal(fa[fa.length - 2].data.error.type, 'server_error');
  assert.equal(fa[fa.length - 2].data.error.code, 'server_restarting');
  assert.equal(fa[fa.length - 2].data.error.message, 'server restarting: retry shortly');
  const fb = b.frames;
  assert.equal(fb[fb.length - 1].event, 'error');
  assert.equal(fb[fb.length - 1].data.error.type, 'overloaded_error');
  assert.ok(c.status >= 500);
  assert.equal(c.json.error.code, 'server_restarting');
  const exit = await srv.exited;
  assert.equal(exit.code, 0);
  assert.match(srv.stderr(), /halted/);
});

test('a second signal cuts the drain short', async () => {
  const srv = await start(['--drain', '60', '--stub-token-ms', '5']);
  let open = false;
  const s = stream(srv.url + '/v1/chat/completions', chat('@hang', { stream: true }), () => { open = true; return false; });
  while (!open) await sleep(10);
  srv.proc.kill('SIGINT');
  await sleep(200);
  assert.equal((await fetch(srv.url + '/health')).status, 503);
  const t0 = Date.now();
  srv.proc.kill('SIGTERM');
  const r = await s;
  assert.ok(Date.now() - t0 < 5000);
  assert.equal(r.frames[r.frames.length - 1].data, '[DONE]');
  assert.equal(r.frames[r.frames.length - 2].data.error.type, 'server_error');
  assert.equal((await srv.exited).code, 0);
});

test('an idle server stops at once', async () => {
  const srv = await start(['--drain', '60']);
  const t0 = Date.now();
  const exit = await srv.stop('SIGTERM');
  assert.equal(exit.code, 0);
  assert.ok(Date.now() - t0 < 2000);
});
