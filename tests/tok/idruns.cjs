// idruns.cjs N SEED VOCAB ADDED: N deterministic runs of token ids (one JSON
// array per line) for the decode conformance check: half from ids below 256
// (single characters of the byte alphabet in the DeepSeek vocab, so runs
// split UTF-8 characters and leave invalid bytes), the rest ordinary vocab
// ids below VOCAB and added tokens in [VOCAB, VOCAB + ADDED).
'use strict';
const [N, SEED, VOCAB, ADDED] = process.argv.slice(2).map(Number);
let seed = SEED >>> 0;
function rnd() { // mulberry32
	seed = (seed + 0x6D2B79F5) >>> 0;
	let t = seed;
	t = Math.imul(t ^ (t >>> 15), t | 1);
	t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
	return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rnd() * n);
const out = [];
for (let i = 0; i < N; i++) {
	const ids = [];
	for (let k = int(40); k > 0; k--) {
		const r = rnd();
		ids.push(r < 0.5 ? int(256) : r < 0.95 ? 256 + int(VOCAB - 256) : VOCAB + int(ADDED));
	}
	out.push(JSON.stringify(ids));
}
process.stdout.write(out.join('\n') + '\n');
