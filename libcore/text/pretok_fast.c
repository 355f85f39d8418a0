/* pretok_fast.c: a hand-written equivalent of the DeepSeek pre-tokenizer's
 * three Split(Isolated) regexes, for speed. The regex path (pretok.c) stays
 * the reference: check_tokenizer.c compares the two on every code point in
 * several contexts and on the conformance corpus.
 *
 * Steps 1 and 2 (\p{N}{1,3}, then [一-龥぀-ゟ゠-ヿ]+) cut the text into maximal
 * runs of N characters (in chunks of three from the left), of CJK/kana, and
 * of everything else; N and the CJK ranges are disjoint. Step 3 is the
 * alternation, tried leftmost-first at each position:
 *   A1 [ASCII punctuation][A-Za-z]+
 *   A2 [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
 *   A3 ' '?[\p{P}\p{S}]+[\r\n]*
 *   A4 \s*[\r\n]+          ends after the last CR/LF of the space run
 *   A5 \s+(?!\S)           the run, less its last character unless at the end
 *   A6 \s+
 * with the backtracking each implies worked out below. A piece of N
 * characters matches none of them, so it is one piece. */
#include "text/pretok_fast.h"

#include "text/ucd.h"

/* The regexes this file stands for, as tokenizer.json spells them. */
const char *const tok_fast_patterns[3] = {
	"\\p{N}{1,3}",
	"[\xe4\xb8\x80""-\xe9\xbe\xa5""\xe3\x81\x80""-\xe3\x82\x9f""\xe3\x82\xa0""-\xe3\x83\xbf""]+",
	"[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|"
	"[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
	" ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
};

enum { L = TF_UCD_L, M = TF_UCD_M, P = TF_UCD_P, S = TF_UCD_S, WS = TF_UCD_WS };

/* The code point at s[i] (valid UTF-8) and its length. */
static inline size_t char_at(const uint8_t *s, size_t i, uint32_t *cp)
{
	uint8_t b = s[i];
	if (b < 0x80) {
		*cp = b;
		return 1;
	}
	if (b < 0xE0) {
		*cp = (uint32_t)(b & 0x1F) << 6 | (s[i + 1] & 0x3F);
		return 2;
	}
	if (b < 0xF0) {
		*cp = (uint32_t)(b & 0x0F) << 12 | (uint32_t)(s[i + 1] & 0x3F) << 6 | (s[i + 2] & 0x3F);
		return 3;
	}
	*cp = (uint32_t)(b & 0x07) << 18 | (uint32_t)(s[i + 1] & 0x3F) << 12 |
	      (uint32_t)(s[i + 2] & 0x3F) << 6 | (s[i + 3] & 0x3F);
	return 4;
}

static inline unsigned class_at(const uint8_t *s, size_t i, size_t *len)
{
	uint32_t cp;
	*len = char_at(s, i, &cp);
	return tf_ucd_class(cp);
}

static inline int ascii_alpha(uint8_t c)
{
	return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
}

static inline int ascii_punct(uint8_t c)
{
	return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
	       (c >= 0x7B && c <= 0x7E);
}

/* End of the run of characters in class mask from e. */
static inline size_t run(const uint8_t *s, size_t e, size_t b, unsigned mask)
{
	size_t len;
	while (e < b && (class_at(s, e, &len) & mask))
		e += len;
	return e;
}

/* The end of the step-3 match starting at p in s[..b), or 0 for none. */
static size_t match_at(const uint8_t *s, size_t p, size_t b)
{
	size_t l0, l1;
	uint8_t c0 = s[p];
	unsigned k0 = class_at(s, p, &l0);
	/* A1 */
	if (ascii_punct(c0) && p + 1 < b && ascii_alpha(s[p + 1])) {
		size_t e = p + 1;
		while (e < b && ascii_alpha(s[e]))
			e++;
		return e;
	}
	/* A2: the optional character, when a letter or mark follows it; else
	 * the run from p itself. */
	if (c0 != '\r' && c0 != '\n' && !(k0 & (L | P | S)) && p + l0 < b &&
	    (class_at(s, p + l0, &l1) & (L | M)))
		return run(s, p + l0 + l1, b, L | M);
	if (k0 & (L | M))
		return run(s, p + l0, b, L | M);
	/* A3 */
	size_t e = 0;
	if (c0 == ' ' && p + 1 < b && (class_at(s, p + 1, &l1) & (P | S)))
		e = run(s, p + 1 + l1, b, P | S);
	else if (k0 & (P | S))
		e = run(s, p + l0, b, P | S);
	if (e) {
		while (e < b && (s[e] == '\r' || s[e] == '\n'))
			e++;
		return e;
	}
	if (!(k0 & WS))
		return 0;
	/* A4-A6 over the space run [p, q) */
	size_t q = p, last = 0, nl = 0;
	while (q < b) {
		size_t len;
		if (!(class_at(s, q, &len) & WS))
			break;
		if (s[q] == '\r' || s[q] == '\n')
			nl = q + 1;
		last = len;
		q += len;
	}
	if (nl)
		return nl;
	if (q == b || q - last == p)
		return q;
	return q - last;
}

/* Step 3 over one piece of steps 1-2. */
static tf_status step3(const uint8_t *s, size_t a, size_t b, tok_piece_fn fn, void *ctx)
{
	size_t i = a, gap = a;
	tf_status st;
	while (i < b) {
		size_t e = match_at(s, i, b);
		if (!e) {
			uint32_t cp;
			i += char_at(s, i, &cp);
			continue;
		}
		if ((i > gap && (st = fn(ctx, (const char *)s + gap, i - gap))) ||
		    (st = fn(ctx, (const char *)s + i, e - i)))
			return st;
		i = gap = e;
	}
	return b > gap ? fn(ctx, (const char *)s + gap, b - gap) : TF_OK;
}

tf_status tok_fast_split(const char *text, size_t n, tok_piece_fn fn, void *ctx)
{
	const uint8_t *s = (const uint8_t *)text;
	size_t i = 0;
	tf_status st;
	while (i < n) {
		size_t start = i, len;
		unsigned k = class_at(s, i, &len);
		if (k & TF_UCD_N) {
			/* N characters in chunks of three */
			int chars = 0;
			while (i < n && chars < 3 && (class_at(s, i, &len) & TF_UCD_N)) {
				i += len;
				chars++;
			}
			if ((st = fn(ctx, text + start, i - start)))
				return st;
			continue;
		}
		unsigned want = k & TF_UCD_CJK;
		while (i < n) {
			k = class_at(s, i, &len);
			if ((k & TF_UCD_N) || (k & TF_UCD_CJK) != want)
				break;
			i += len;
		}
		if ((st = step3(s, start, i, fn, ctx)))
			return st;
	}
	return TF_OK;
}
