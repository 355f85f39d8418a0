// bench.cjs CACHE TOKENIZER.json CORPUS.txt [SECONDS]: encode rate of
// @lenml/tokenizers under node (one thread), one document per line, the
// anchor tools/bench.d/tokenize.sh prints next to tf-tokenize bench --lines.
'use strict';
const fs = require('fs');
const path = require('path');
const [cache, tokPath, corpus, secs] = process.argv.slice(2);
const { TokenizerLoader } = require(path.resolve(cache, 'node_modules/@lenml/tokenizers'));
const tok = TokenizerLoader.fromPreTrained({
	tokenizerJSON: JSON.parse(fs.readFileSync(tokPath, 'utf8')),
	tokenizerConfig: { tokenizer_class: 'PreTrainedTokenizer' },
});
const lines = fs.readFileSync(corpus, 'utf8').split('\n');
if (lines.length && lines[lines.length - 1] === '') lines.pop();
const bytes = lines.reduce((a, l) => a + Buffer.byteLength(l), 0);
let tokens = 0, passes = 0;
const t0 = process.hrtime.bigint();
let t = 0;
do {
	for (const l of lines) tokens += tok.encode(l, { add_special_tokens: false }).length;
	passes++;
	t = Number(process.hrtime.bigint() - t0) / 1e9;
} while (t < +(secs || 1));
console.log(`node @lenml/tokenizers: ${lines.length} documents, ${bytes} bytes, ` +
	`encode ${(bytes * passes / t / 1e6).toFixed(2)} MB/s (${(tokens / t).toFixed(0)} tokens/s, ${passes} passes)`);
