// lib.mjs: start a real tf-serve (stub engine unless told, loopback, a free
// port) for the server tests, and small HTTP helpers over fetch and raw sockets.
import { spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';

const bin = path.join(process.env.TF_BIN || '../../build/bin', 'tf-serve');

// Servers still running when a test file ends (a test failed before its
// stop) are killed, so no server outlives the run.
const running = new Set();
process.on('exit', () => { for (const p of running) p.kill('SIGKILL'); });

// The engine of the tests that serve a model (a synthetic pack): cpu, or
// cuda when run.sh was given TF_ENGINE=cuda (TF_TEST_ENGINE; TF_TEST_DEVICE
// picks the device). modelArgs(j) are tf-serve's options for it (j: the
// cpu engine's threads).
export const engine = process.env.TF_TEST_ENGINE || 'cpu';
export function modelArgs(j = 1) {
  if (engine !== 'cuda') return ['--engine', 'cpu', '-j', String(j)];
  const dev = process.env.TF_TEST_DEVICE;
  return ['--engine', 'cuda', ...(dev ? ['--device', dev] : [])];
}

// start(args): resolves to {url, port, proc, stderr(), stop(sig), exited}
export function start(args = [], env = {}) {
  const proc = spawn(bin, ['--engine', 'stub', '--host', '127.0.0.1', '--port', '0', ...args], {
    env: { ...process.env, TF_LOG: 'warn', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(proc);
  proc.on('exit', () => running.delete(proc));
  let err = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => {
    if (code !== 0) console.error(`tf-serve exited ${code ?? signal}; its stderr:\n${err}`);
    resolve({ code, signal });
  }));
  return new Promise((resolve, reject) => {
    // a device engine opens the driver and uploads the weights first
    const wait = args.includes('cuda') ? 120000 : 10000;
    const timer = setTimeout(() => reject(new Error('tf-serve did not start: ' + err)), wait);
    proc.stderr.on('data', (d) => {
      err += d;
      const m = err.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m && timer) {
        clearTimeout(timer);
        const port = Number(m[1]);
        resolve({
          port,
          url: `http://127.0.0.1:${port}`,
          proc,
          exited,
          stderr: () => err,
          async stop(sig = 'SIGTERM') {
            if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
            return exited;
          },
        });
      }
    });
    proc.on('exit', (code) => { clearTimeout(timer); reject(new Error(`tf-serve exited ${code}: ${err}`)); });
  });
}

export async function post(url, body, headers = {}) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* SSE or text */ }
  return { status: r.status, headers: r.headers, text, json };
}

// SSE frames of a text: [{event, data}] with data parsed when JSON; comments
// as {comment}.
export function frames(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    if (!block) continue;
    const f = {};
    for (const line of block.split('\n')) {
      if (line.startsWith(':')) f.comment = line.slice(1).trim();
      else if (line.startsWith('event: ')) f.event = line.slice(7);
      else if (line.startsWith('data: ')) {
        const d = line.slice(6);
        try { f.data = JSON.parse(d); } catch { f.data = d; }
      }
    }
    out.push(f);
  }
  return out;
}

// Read a streaming POST incrementally; onFrame(frame, all) may return true to stop.
export async function stream(url, body, onFrame = () => false, signal) {
  const r = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
    signal,
  });
  const dec = new TextDecoder();
  let buf = '';
  const all = [];
  for await (const chunk of r.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const f = frames(buf.slice(0, i + 2))[0];
      buf = buf.slice(i + 2);
      if (!f) continue;
      all.push(f);
      if (onFrame(f, all)) return { status: r.status, frames: all, stopped: true };
    }
  }
  return { status: r.status, headers: r.headers, frames: all };
}

// Send raw bytes, resolve with what came back (until the server closes or ms).
export function raw(port, bytes, ms = 2000) {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    const done = () => { s.destroy(); resolve(got); };
    const t = setTimeout(done, ms);
    s.on('data', (d) => { got += d; });
    s.on('close', () => { clearTimeout(t); resolve(got); });
    s.on('error', () => { clearTimeout(t); resolve(got); });
    s.write(bytes);
  });
}

export async function metric(url, name) {
  const t = await (await fetch(url + '/metrics')).text();
  const line = t.split('\n').find((l) => l.startsWith(name + '{'));
  return line ? Number(line.split(' ').pop()) : NaN;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function content(frames) {
  return frames.map((f) => f.data?.choices?.[0]?.delta?.content ?? '').join('');
}
