// corpus.cjs [N] [SEED]: write the tokenizer conformance corpus to stdout,
// N documents (default 2400) as JSON lines {"text": ...}, the same bytes for
// the same N and SEED on every machine. Each document mixes a few pieces
// drawn from the families below, so that the ids exercise every branch of
// the DeepSeek pre-tokenizer, the BPE merges and the added tokens.
'use strict';
const N = +(process.argv[2] || 2400);
let seed = +(process.argv[3] || 20261129) >>> 0;
function rnd() { // mulberry32
	seed = (seed + 0x6D2B79F5) >>> 0;
	let t = seed;
	t = Math.imul(t ^ (t >>> 15), t | 1);
	t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
	return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
}
const int = (n) => Math.floor(rnd() * n);
const pick = (a) => a[int(a.length)];
const rep = (s, n) => s.repeat(n);
// Code points assigned after Unicode 14.0 (the tables of PCRE2 10.42 and of
// Python 3.11; node knows newer ones): property classes of these differ
// between the implementations, so the corpus leaves them out.
const newer = [
	'88f-88f', '897-897', 'c5c-c5c', 'cdc-cdc', 'cf3-cf3', 'ece-ece', '1acf-1add', '1ae0-1aeb',
	'1b4e-1b4f', '1b7f-1b7f', '1c89-1c8a', '20c1-20c1', '2427-2429', '2b96-2b96', '2ffc-2fff',
	'31e4-31e5', '31ef-31ef', 'a7cb-a7cf', 'a7d2-a7d2', 'a7d4-a7d4', 'a7da-a7dc', 'a7f1-a7f1',
	'fbc3-fbd2', 'fd90-fd91', 'fdc8-fdce', '105c0-105f3', '10940-10959', '10d40-10d65',
	'10d69-10d85', '10d8e-10d8f', '10ec2-10ec7', '10ed0-10ed8', '10efa-10eff', '1123f-11241',
	'11380-11389', '1138b-1138b', '1138e-1138e', '11390-113b5', '113b7-113c0', '113c2-113c2',
	'113c5-113c5', '113c7-113ca', '113cc-113d5', '113d7-113d8', '113e1-113e2', '116d0-116e3',
	'11b00-11b09', '11b60-11b67', '11bc0-11be1', '11bf0-11bf9', '11db0-11ddb', '11de0-11de9',
	'11f00-11f10', '11f12-11f3a', '11f3e-11f5a', '1342f-1342f', '13439-13455', '13460-143fa',
	'16100-16139', '16d40-16d79', '16ea0-16eb8', '16ebb-16ed3', '16ff2-16ff6', '187f8-187ff',
	'18cff-18cff', '18d09-18d1e', '18d80-18df2', '1b132-1b132', '1b155-1b155', '1cc00-1ccfc',
	'1cd00-1ceb3', '1ceba-1ced0', '1cee0-1cef0', '1d2c0-1d2d3', '1df25-1df2a', '1e030-1e06d',
	'1e08f-1e08f', '1e4d0-1e4f9', '1e5d0-1e5fa', '1e5ff-1e5ff', '1e6c0-1e6de', '1e6e0-1e6f5',
	'1e6fe-1e6ff', '1f6d8-1f6d8', '1f6dc-1f6dc', '1f774-1f77f', '1f7d9-1f7d9', '1f8b2-1f8bb',
	'1f8c0-1f8c1', '1f8d0-1f8d8', '1fa54-1fa57', '1fa75-1fa77', '1fa87-1fa8a', '1fa8e-1fa8f',
	'1faad-1faaf', '1fabb-1fabf', '1fac6-1fac6', '1fac8-1fac8', '1facd-1facf', '1fada-1fadc',
	'1fadf-1fadf', '1fae8-1faea', '1faef-1faef', '1faf7-1faf8', '1fbcb-1fbef', '1fbfa-1fbfa',
	'2b739-2b73f', '2cea2-2cead', '2ebf0-2ee5d', '31350-33479'
].map((r) => r.split('-').map((h) => parseInt(h, 16)));
const old = (c) => !newer.some(([a, b]) => c >= a && c <= b);
const cp = (c) => String.fromCodePoint(c);
function range(lo, hi) {
	let c;
	do c = lo + int(hi - lo + 1);
	while (!old(c));
	return cp(c);
}
const many = (f, n) => Array.from({ length: n }, f).join('');

const words = ['the', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'Hello', 'World',
	"don't", "it's", "we'll", "they've", 'I', 'a', 'tokenizer', 'DeepSeek', 'internationalization',
	'naïve', 'café', 'Ünïcödé', 'straße', 'Привет', 'мир', 'Γειά', 'σου', 'κόσμε', 'שלום', 'مرحبا',
	'بالعالم', 'नमस्ते', 'दुनिया', 'สวัสดี', 'ชาวโลก', 'សួស្តី', 'ពិភពលោក', '你好', '世界', '中文分词',
	'こんにちは', 'カタカナ', 'ひらがな', '漢字かな交じり文', '한국어', '안녕하세요', 'ąęłńóśźż',
	'ÀÉÎÕÜ', 'ǅǈǋ', 'ﬁﬂ', 'ℌℑℜ', '𝔘𝔫𝔦𝔠𝔬𝔡𝔢', 'ꙮ', 'ᚠᛇᚻ', '𐌰𐌱𐌲', 'ꦲꦏ꧀ꦱꦫ', 'ትግርኛ', 'ᏣᎳᎩ'];
const spaces = [' ', '  ', '   ', '\t', '\t\t', '\u00a0', '\u3000', '\u2003', '\u200b', '\u2028',
	'\u0085', '\ufeff', '\u180e', '\u202f', '\u205f', '\u1680', ' \t ', '\u000b', '\u000c'];
const newlines = ['\n', '\r\n', '\r', '\n\n', '\r\n\r\n', '\n\n\n', ' \n', '\t\n', '\n ', '\r\r\n',
	'  \n  ', '\n\t\t'];
const punct = ['.', ',', '!', '?', ';', ':', '...', '--', '—', '–', '«', '»', '“', '”', '‘', '’',
	'(', ')', '[', ']', '{', '}', '<', '>', '@', '#', '$', '%', '^', '&', '*', '+', '=', '|',
	'\\', '/', '~', '`', '"', "'", '_', '-', '。', '、', '！', '？', '：', '；', '（', '）', '【', '】',
	'¿', '¡', '§', '©', '®', '™', '€', '£', '¥', '°', '±', '×', '÷', '→', '⇒', '∀', '∑', '√', '∞',
	'≠', '≤', '★', '♥', '♪', '✓', '✗', '·', '•', '…'];
const digits = () => pick([
	() => String(int(10 ** (1 + int(12)))),
	() => many(() => pick('0123456789'), 1 + int(40)),
	() => many(() => range(0x660, 0x669), 1 + int(9)),  // Arabic-Indic
	() => many(() => range(0x966, 0x96f), 1 + int(9)),  // Devanagari
	() => many(() => range(0xff10, 0xff19), 1 + int(9)), // fullwidth
	() => pick(['½', '²³', '⅓⅔', 'Ⅻ', '①②③', '𝟙𝟚𝟛', '٣٫١٤', '1,234,567.89', '3.14159', '-42', '+1e-10',
		'0x1F', '2026-11-29', '12:34:56', 'v1.2.3', '1st', '2nd', '100%', '$9.99', '1/2'])])();
const emoji = ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇯🇵', '🇺🇸🇬🇧', '❤️', '🧑🏿‍💻', '👩‍❤️‍💋‍👨', '🐈‍⬛',
	'✊🏾', '🫠', '🤷‍♀️', '1️⃣', '#️⃣', '©️', '🏴󠁧󠁢󠁳󠁣󠁴󠁿', '😀😃😄😁', '🙂\u200d🙃'];
const combining = () => many(() => pick(['e', 'a', 'o', 'n', 'i', 'ก', 'क', 'ب']) +
	many(() => range(0x300, 0x36f), int(4)), 1 + int(6));
const scripts = {
	cjk: () => many(() => range(0x4e00, 0x9fa5), 1 + int(20)),
	cjkext: () => many(() => pick([range(0x3400, 0x4dbf), range(0x9fa6, 0x9fff), range(0x20000, 0x2a6df),
		range(0xf900, 0xfaff)]), 1 + int(8)),
	kana: () => many(() => pick([range(0x3040, 0x309f), range(0x30a0, 0x30ff), range(0x31f0, 0x31ff),
		range(0xff66, 0xff9d)]), 1 + int(15)),
	hangul: () => many(() => range(0xac00, 0xd7a3), 1 + int(10)),
	thai: () => many(() => range(0xe01, 0xe5b), 1 + int(25)),
	khmer: () => many(() => range(0x1780, 0x17f9), 1 + int(25)),
	deva: () => many(() => range(0x900, 0x97f), 1 + int(25)),
	arabic: () => many(() => pick([range(0x600, 0x6ff), range(0x750, 0x77f), range(0xfe70, 0xfefc)]),
		1 + int(25)),
	hebrew: () => many(() => range(0x591, 0x5f4), 1 + int(15)),
	cyr: () => many(() => range(0x400, 0x4ff), 1 + int(15)),
	greek: () => many(() => range(0x370, 0x3ff), 1 + int(15)),
	latin: () => many(() => range(0xc0, 0x24f), 1 + int(15)),
	misc: () => many(() => pick([range(0x2000, 0x2bff), range(0x1d400, 0x1d7ff), range(0x1f300, 0x1faff),
		range(0xe000, 0xe0ff), range(0xfe00, 0xfe0f), range(0xe0100, 0xe01ef)]), 1 + int(10)),
};
const code = [
	'int main(void) {\n\treturn 0;\n}\n',
	'def f(x):\n    return x ** 2  # square\n',
	'for (let i = 0; i < n; ++i) { sum += a[i]; }',
	'#include <stdio.h>\n#define MAX(a,b) ((a)>(b)?(a):(b))\n',
	'SELECT id, name FROM users WHERE age >= 18 ORDER BY name;',
	'fn main() -> Result<(), Box<dyn Error>> { println!("{}", 42); Ok(()) }',
	'$ ls -la | grep "\\.c$" && echo done\n',
	'<div class="x"><a href="https://example.com/?q=1&r=2">link</a></div>',
	'x = {"a": [1, 2, 3], "b": null}\nprint(x["a"][0])',
	'    if (p != NULL && p->next) {\r\n        p = p->next;\r\n    }\r\n',
	'```python\nimport numpy as np\narr = np.zeros((3, 4), dtype=np.float32)\n```',
	'std::vector<std::pair<int,int>> v; v.emplace_back(1,2);',
	'\t\t\t}\n\t\t}\n\t}\n}',
	'// TODO: fix this\n/* multi\n   line */',
	'let re = /^[a-z]+\\d*$/gi; re.test("abc123");',
	'name:\n  - item: 1\n    value: "x"\n',
];
function json() {
	const v = () => pick([() => int(1e6), () => rnd().toFixed(6), () => JSON.stringify(pick(words)),
		() => 'true', () => 'null', () => '[]', () => '{}'])();
	const o = {};
	for (let i = 0; i < 1 + int(5); i++) o[pick(words)] = pick([v(), [v(), v()], { k: v() }]);
	return JSON.stringify(o, null, pick([0, 2, 4, '\t']));
}
const specials = ['<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜▁pad▁｜>', '<｜User｜>',
	'<｜Assistant｜>', '<|EOT|>', '<｜tool▁calls▁begin｜>', '<｜tool▁call▁begin｜>', '<｜tool▁sep｜>',
	'<｜fim▁hole｜>', '<｜fim▁begin｜>', '<｜fim▁end｜>', '<｜place▁holder▁no▁0｜>',
	'<｜place▁holder▁no▁17｜>', '<｜place▁holder▁no▁799｜>', '<｜System｜>', '<think>', '</think>',
	'｜DSML｜', '<｜DSML｜ calls>', '</｜DSML｜ invoke>', '<｜latest_reminder｜>', '<｜deepseek_image｜>',
	'<｜User', 'User｜>', '<｜', '｜>', '<<｜User｜>>', '<｜User｜><｜User｜>', '<think></think>',
	'<｜begin▁of▁sentence｜', '<｜end▁of▁sentence｜><｜begin▁of▁sentence｜>'];
function randomCodePoints() {
	return many(() => {
		let c;
		do c = pick([() => int(0x80), () => int(0x800), () => int(0x10000), () => int(0x30000),
			() => int(0x110000)])();
		while ((c >= 0xd800 && c <= 0xdfff) || !old(c));
		return cp(c);
	}, 1 + int(30));
}
function longWord() {
	return pick([
		() => rep(pick(['a', 'ab', 'abc', 'x', '0', ' ', '\n', '-', '=', '.', 'é', '中', 'ก', '😀']), 50 + int(400)),
		() => many(() => pick('abcdefghijklmnopqrstuvwxyz'), 100 + int(400)),
		() => 'pneumonoultramicroscopicsilicovolcanoconiosis'.repeat(1 + int(4)),
		() => many(() => pick(words), 30).replace(/ /g, ''),
	])();
}
const families = [
	() => pick(words), () => pick(words), () => pick(words),
	() => pick(spaces), () => pick(newlines), () => pick(punct), () => digits(),
	() => pick(emoji), () => combining(), () => pick(Object.values(scripts))(),
	() => pick(code), () => json(), () => pick(specials), () => randomCodePoints(),
	() => many(() => pick(spaces), 1 + int(6)), () => many(() => pick(newlines) + pick(spaces), 1 + int(4)),
	() => pick(punct) + pick(words), () => ' ' + pick(punct) + pick(newlines),
];
const fixed = ['', ' ', '  ', '\n', '\r\n', ' \n ', 'a', '3333333', '1234567890', '  Hello', 'Hello  ',
	'Hello\n\n\nworld', '\t\tx', '   \n\t  y', 'a  b   c    d', "I'm he's we'd", 'ปลา', 'ខ្មែរ',
	'🤖🤖', '<｜User｜>', 'x<｜User｜>y', '<｜begin▁of▁sentence｜><｜begin▁of▁sentence｜>',
	'\u00a0\u00a0x', 'x\u3000\u3000', '\u0085', 'a\u0085b', 'a\ufeffb', '\u180e', 'a\u180eb', 'ab\u2028cd'];
// Long runs: one BPE word of thousands of symbols, long space runs.
fixed.push('a'.repeat(5000), 'ab'.repeat(2000), '中'.repeat(2000), ' '.repeat(3000) + 'x',
	'é'.repeat(2000), '😀'.repeat(1000), '\n'.repeat(2000) + 'y', 'x' + '\t '.repeat(1500));
const out = [];
for (const t of fixed) out.push(t);
while (out.length < N) {
	const k = 1 + int(pick([3, 6, 12, 40]));
	let s = '';
	for (let i = 0; i < k; i++) s += pick(families)() + (rnd() < 0.5 ? pick([' ', '', '\n', ' ']) : '');
	if (rnd() < 0.03) s += longWord();
	out.push(s);
}
process.stdout.write(out.slice(0, N).map((t) => JSON.stringify({ text: t })).join('\n') + '\n');
