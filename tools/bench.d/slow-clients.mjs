// slow-clients.mjs PORT SLOW SECONDS: normal requests' latency while SLOW
// clients hold connections open by sending their request a byte a second
// (a slow-loris load, loopback only, bounded in count and time).
//
// Each slow client sends "GET /health HTTP/1.1 ... X-Slow: " then one byte
// a second, and connects again 100 ms after the server closes it (it
// holds on). Once all are open, 8 workers send normal requests for SECONDS
// (a whole chat completion, "@short", 4 tokens), each on a new connection
// (the worst case: it needs a slot), with a 10 s limit. Prints one line of
// figures: p50, p99 and max latency, failures, and what the slow clients
// saw (closed by the server, and how).
import http from 'node:http';
import net from 'node:net';

const [port, nslow, seconds] = process.argv.slice(2).map(Number);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let stopping = false;
const seen = { closed: 0, s408: 0, s503: 0, open: 0 };

function slowClient() {
  if (stopping) return;
  const s = net.connect(port, '127.0.0.1');
  let got = '', timer = null;
  s.on('connect', () => {
    seen.open++;
    s.write('GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ');
    timer = setInterval(() => s.write('x'), 1000);
  });
  s.on('data', (d) => { got += d; });
  s.on('error', () => {});
  s.on('close', () => {
    clearInterval(timer);
    if (stopping) return;
    seen.open--;
    seen.closed++;
    if (got.startsWith('HTTP/1.1 408')) seen.s408++;
    if (got.startsWith('HTTP/1.1 503')) seen.s503++;
    setTimeout(slowClient, 100);
  });
  return s;
}

function normal() {
  const body = JSON.stringify({ messages: [{ role: 'user', content: '@short' }], max_tokens: 4 });
  const t0 = process.hrtime.bigint();
  return new Promise((resolve) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/chat/completions', method: 'POST', agent: false,
      headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }, timeout: 10000 }, (res) => {
      res.resume();
      res.on('end', () => resolve({ ms: Number(process.hrtime.bigint() - t0) / 1e6, status: res.statusCode }));
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', (e) => resolve({ ms: Number(process.hrtime.bigint() - t0) / 1e6, status: e.message }));
    req.end(body);
  });
}

const socks = [];
for (let i = 0; i < nslow; i++) {
  socks.push(slowClient());
  if (i % 100 === 99) await sleep(50);
}
await sleep(3000); // all open, and past the server's 1 s grace
const lat = [], fails = {};
const end = Date.now() + seconds * 1000;
await Promise.all(Array.from({ length: 8 }, async () => {
  while (Date.now() < end) {
    const r = await normal();
    if (r.status === 200) lat.push(r.ms);
    else fails[r.status] = (fails[r.status] || 0) + 1;
  }
}));
stopping = true;
for (const s of socks) s.destroy();
lat.sort((a, b) => a - b);
const q = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))].toFixed(1) : 'n/a');
console.log(`${nslow} slow clients (${seen.open} open at the end; the server closed ${seen.closed}: ${seen.s503} with 503, ` +
  `${seen.s408} with 408): ${lat.length} normal requests ok in ${seconds} s, p50 ${q(0.5)} ms, p99 ${q(0.99)} ms, ` +
  `max ${q(1)} ms; failed: ${JSON.stringify(fails)}`);
process.exit(0);
