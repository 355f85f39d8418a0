// ref.cjs CACHE TOKENIZER.json [CORPUS.jsonl]: the reference ids of each
// document ({"text": ...} per line) by @lenml/tokenizers under node, one
// line of space-separated ids per document, as `tf-tokenize encode --jsonl`
// writes them. encode is Hugging Face's with add_special_tokens=False.
// ref.cjs --decode CACHE TOKENIZER.json IDS.json: the reverse, one JSON
// array of ids per line in, one {"text": ...} per line out
// (skip_special_tokens=False; invalid UTF-8 becomes U+FFFD as in WHATWG
// TextDecoder, which is from_utf8_lossy's rule).
//
// One known difference between JavaScript and the Oniguruma regexes Hugging
// Face runs is corrected first: in JavaScript \s also matches U+FEFF and not
// U+0085, while Oniguruma's \s is exactly Unicode White_Space; so \s and \S
// in the Split patterns are rewritten as that explicit class.
'use strict';
const fs = require('fs');
const path = require('path');
const decode = process.argv[2] === '--decode';
const [cache, tokPath, corpus] = process.argv.slice(decode ? 3 : 2);
const { TokenizerLoader } = require(path.resolve(cache, 'node_modules/@lenml/tokenizers'));

const WS = '\\t\\n\\v\\f\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
function fixRegex(re) {
	let out = '', inClass = false;
	for (let i = 0; i < re.length; i++) {
		const c = re[i];
		if (c === '\\' && i + 1 < re.length) {
			const e = re[++i];
			if (e === 's') out += inClass ? WS : `[${WS}]`;
			else if (e === 'S' && !inClass) out += `[^${WS}]`;
			else out += c + e;
			continue;
		}
		if (c === '[' && !inClass) inClass = true;
		else if (c === ']' && inClass) inClass = false;
		out += c;
	}
	return out;
}
// ByteLevel(use_regex) splits with the GPT-2 regex (Isolated) in Hugging
// Face; the JavaScript port hard-codes that regex, so it is made an explicit
// Split here to get the same \s correction.
const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
function fixPre(p) {
	if (!p) return p;
	if (p.type === 'Sequence') p.pretokenizers = p.pretokenizers.map(fixPre);
	if (p.type === 'Split' && p.pattern && p.pattern.Regex) p.pattern.Regex = fixRegex(p.pattern.Regex);
	if (p.type === 'ByteLevel' && p.use_regex !== false) {
		return { type: 'Sequence', pretokenizers: [
			{ type: 'Split', pattern: { Regex: fixRegex(GPT2) }, behavior: 'Isolated', invert: false },
			{ ...p, use_regex: false }] };
	}
	return p;
}

const json = JSON.parse(fs.readFileSync(tokPath, 'utf8'));
json.pre_tokenizer = fixPre(json.pre_tokenizer);
const tok = TokenizerLoader.fromPreTrained({
	tokenizerJSON: json,
	tokenizerConfig: { tokenizer_class: 'PreTrainedTokenizer', clean_up_tokenization_spaces: false },
});
const lines = fs.readFileSync(corpus || 0, 'utf8').split('\n');
const out = [];
for (const line of lines) {
	if (!line) continue;
	if (decode) {
		const ids = JSON.parse(line);
		const text = ids.length ? tok.decode(ids, { skip_special_tokens: false,
			clean_up_tokenization_spaces: false }) : '';
		out.push(JSON.stringify({ text }));
		continue;
	}
	const ids = tok.encode(JSON.parse(line).text, { add_special_tokens: false });
	out.push(ids.join(' '));
}
fs.writeFileSync(1, out.join('\n') + (out.length ? '\n' : ''));
