/* dsml.c: the lenient DSML grammar, typed values and the whole-reply parse
 * (see dsml.h); the stream lives in dsml_stream.c, the OpenAI and
 * Anthropic shapes in dsml_shapes.c.
 *
 * Tags are matched by hand, as the reference's regular expressions read
 * them ("ws" is Python's str.isspace set):
 *   block      <｜DSML｜ ws? (calls|tool_calls|function_calls) >   (close: </｜DSML｜)
 *   invoke     <｜DSML｜ ws? invoke ws+ name="[^"]*" ws* >
 *   invoke end </｜DSML｜ ws? invoke>
 *   parameter  <｜DSML｜ ws? parameter ws+ name="[^"]*" ws+ string="(true|false)" ws* >
 *   value      lazily up to the first </｜DSML｜ ws? parameter>
 * Header probes answer three ways (matched, refused, or cut off by the end
 * of the text so far) so that the stream can tell a tag still arriving
 * from text. */
#include "text/dsml_impl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/rng.h"
#include "text/pyjson.h"

static const char *const BLOCK_NAMES[] = {"calls", "tool_calls", "function_calls"};

/* Text that may still become a calls block's opening tag is held back. */
static const char *const OPEN_TAGS[] = {
	MARK " calls>", MARK "calls>", MARK "tool_calls>", MARK "function_calls>",
	"\n\n" MARK " calls>", "\n\n" MARK "calls>", "\n\n" MARK "tool_calls>", "\n\n" MARK "function_calls>",
};

/* ---- text helpers ---- */

size_t dsml_space(const char *s, size_t len, size_t i)
{
	if (i >= len)
		return 0;
	unsigned char b = (unsigned char)s[i];
	if (b < 0x80)
		return (b >= 9 && b <= 13) || (b >= 0x1c && b <= 0x20);
	size_t n = b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
	if (!n || i + n > len)
		return 0;
	uint32_t cp = b & (0x7f >> n);
	for (size_t k = 1; k < n; k++) {
		unsigned char c = (unsigned char)s[i + k];
		if ((c & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (c & 0x3f);
	}
	switch (cp) {
	case 0x85: case 0xa0: case 0x1680: case 0x2028: case 0x2029: case 0x202f: case 0x205f: case 0x3000:
		return n;
	default:
		return cp >= 0x2000 && cp <= 0x200a ? n : 0;
	}
}

static size_t skip_spaces(const char *s, size_t len, size_t at)
{
	for (size_t n; (n = dsml_space(s, len, at)); at += n)
		;
	return at;
}

void dsml_strip(const char *s, size_t n, size_t *a, size_t *b)
{
	size_t x = skip_spaces(s, n, 0), y = n;
	while (y > x) {
		size_t c = y - 1;
		while (c > x && ((unsigned char)s[c] & 0xc0) == 0x80)
			c--;
		if (dsml_space(s, n, c) != y - c)
			break;
		y = c;
	}
	*a = x;
	*b = y;
}

static bool starts(const char *s, size_t len, size_t at, const char *w, size_t wn)
{
	return at <= len && len - at >= wn && !memcmp(s + at, w, wn);
}

static const char *find(const char *s, size_t len, size_t from, const char *w, size_t wn)
{
	return from <= len ? memmem(s + from, len - from, w, wn) : NULL;
}

size_t dsml_partial(const char *t, size_t len, const char *tag)
{
	size_t tn = strlen(tag);
	for (size_t k = tn - 1 < len ? tn - 1 : len; k > 0; k--)
		if (!memcmp(t + len - k, tag, k))
			return k;
	return 0;
}

/* The reference holds back the prefixes of these eight spellings only (the
 * goldens' deltas depend on it): a block opened as `<｜DSML｜ tool_calls>`
 * or with another space may be sent as content in part before it
 * completes. */
size_t dsml_hold(const char *t, size_t len)
{
	size_t most = 0;
	for (size_t i = 0; i < sizeof OPEN_TAGS / sizeof OPEN_TAGS[0]; i++) {
		size_t k = dsml_partial(t, len, OPEN_TAGS[i]);
		most = k > most ? k : most;
	}
	return most;
}

/* Whether s[0..n) is a proper prefix of a calls block's opening tag in
 * any spelling the grammar reads: `\n\n`? `<｜DSML｜` ws? name `>`. */
static bool open_tag_prefix(const char *s, size_t n)
{
	size_t i = 0;
	if (n && s[0] == '\n') {
		if (n == 1)
			return true;
		if (s[1] != '\n')
			return false;
		i = 2;
	}
	size_t m = n - i < MARK_LEN ? n - i : MARK_LEN;
	if (memcmp(s + i, MARK, m))
		return false;
	if ((i += m) == n)
		return true;
	size_t sp = dsml_space(s, n, i);
	for (size_t pass = 0; pass < (sp ? 2 : 1); pass++) {
		size_t j = pass ? i + sp : i;
		if (j == n)
			return true;
		for (size_t k = 0; k < sizeof BLOCK_NAMES / sizeof BLOCK_NAMES[0]; k++) {
			size_t wn = strlen(BLOCK_NAMES[k]), have = n - j;
			if (have <= wn && !memcmp(s + j, BLOCK_NAMES[k], have))
				return true; /* the name so far, its '>' still to come */
		}
	}
	return false;
}

size_t dsml_hold_all(const char *t, size_t len)
{
	const size_t longest = 2 + MARK_LEN + 4 + sizeof "function_calls";
	for (size_t p = len > longest ? len - longest : 0; p < len; p++)
		if (open_tag_prefix(t + p, len - p))
			return len - p;
	return 0;
}

/* ws? + one of names: the end of the name, or 0 (no name ends at 0). */
static size_t spaced_word(const char *t, size_t len, size_t at, const char *const *names, size_t nn)
{
	size_t sp = dsml_space(t, len, at);
	for (size_t pass = 0; pass < (sp ? 2 : 1); pass++) {
		size_t from = pass ? at : at + sp;
		for (size_t i = 0; i < nn; i++)
			if (starts(t, len, from, names[i], strlen(names[i])))
				return from + strlen(names[i]);
	}
	return 0;
}

bool dsml_block_tag(const char *s, size_t from, size_t to, bool close, struct dsml_match *m)
{
	const char *mark = close ? MARK_CLOSE : MARK;
	size_t mn = close ? MARK_CLOSE_LEN : MARK_LEN;
	for (const char *p; (p = find(s, to, from, mark, mn)); from = (size_t)(p - s) + 1) {
		size_t e = spaced_word(s, to, (size_t)(p - s) + mn, BLOCK_NAMES, 3);
		if (e && e < to && s[e] == '>') {
			*m = (struct dsml_match){(size_t)(p - s), e + 1};
			return true;
		}
	}
	return false;
}

/* ---- three-way header probes ---- */

struct step {
	enum dsml_got got;
	size_t at;
};

static struct step word_step(const char *t, size_t len, size_t at, const char *w)
{
	size_t wn = strlen(w), have = len - at;
	if (have >= wn && !memcmp(t + at, w, wn))
		return (struct step){DSML_OK, at + wn};
	return (struct step){have < wn && !memcmp(t + at, w, have) ? DSML_MORE : DSML_NO, 0};
}

static struct step spaced_step(const char *t, size_t len, size_t at, const char *w)
{
	if (at >= len)
		return (struct step){DSML_MORE, 0};
	size_t sp = dsml_space(t, len, at);
	struct step st = word_step(t, len, at + sp, w);
	if (st.got == DSML_OK || !sp)
		return st;
	struct step bare = word_step(t, len, at, w);
	return bare.got == DSML_OK ? bare : st;
}

static struct step spaced_char(const char *t, size_t len, size_t at, char c)
{
	size_t sp = skip_spaces(t, len, at);
	if (sp >= len)
		return (struct step){DSML_MORE, 0};
	return t[sp] == c ? (struct step){DSML_OK, sp + 1} : (struct step){DSML_NO, 0};
}

/* ws+ then w. */
static struct step spaced_then(const char *t, size_t len, size_t at, const char *w)
{
	size_t sp = skip_spaces(t, len, at);
	if (sp >= len)
		return (struct step){DSML_MORE, 0};
	if (sp == at)
		return (struct step){DSML_NO, 0};
	return word_step(t, len, sp, w);
}

/* The quoted name after `name="`: the closing quote, or MORE. */
static struct step quoted(const char *t, size_t len, size_t at)
{
	const char *q = at <= len ? memchr(t + at, '"', len - at) : NULL;
	return q ? (struct step){DSML_OK, (size_t)(q - t)} : (struct step){DSML_MORE, 0};
}

/* `<｜DSML｜ ws? WORD ws+ name="NAME"` at p: the step at the name's closing
 * quote (or why there is none), the name's start in *name. */
static struct step named_tag(const char *t, size_t len, size_t p, const char *word, size_t *name)
{
	if (!starts(t, len, p, MARK, MARK_LEN))
		return (struct step){DSML_NO, 0};
	struct step e = spaced_step(t, len, p + MARK_LEN, word);
	if (e.got != DSML_OK)
		return e;
	struct step q = spaced_then(t, len, e.at, "name=\"");
	if (q.got != DSML_OK)
		return q;
	*name = q.at;
	return quoted(t, len, q.at);
}

enum dsml_got dsml_invoke_at(const char *t, size_t len, size_t p, struct dsml_head *h)
{
	size_t name = 0;
	struct step close = named_tag(t, len, p, "invoke", &name);
	if (close.got != DSML_OK)
		return close.got;
	struct step gt = spaced_char(t, len, close.at + 1, '>');
	if (gt.got != DSML_OK)
		return gt.got;
	*h = (struct dsml_head){.start = p, .end = gt.at, .name = name, .name_len = close.at - name};
	return DSML_OK;
}

enum dsml_got dsml_param_at(const char *t, size_t len, size_t p, struct dsml_head *h)
{
	size_t name = 0;
	struct step close = named_tag(t, len, p, "parameter", &name);
	if (close.got != DSML_OK)
		return close.got;
	struct step v = spaced_then(t, len, close.at + 1, "string=\"");
	if (v.got != DSML_OK)
		return v.got;
	struct step yes = word_step(t, len, v.at, "true\""), no = word_step(t, len, v.at, "false\"");
	struct step flag = yes.got == DSML_OK ? yes : no.got == DSML_OK ? no :
			   (struct step){yes.got == DSML_MORE || no.got == DSML_MORE ? DSML_MORE : DSML_NO, 0};
	if (flag.got != DSML_OK)
		return flag.got;
	struct step gt = spaced_char(t, len, flag.at, '>');
	if (gt.got != DSML_OK)
		return gt.got;
	*h = (struct dsml_head){.start = p, .end = gt.at, .name = name, .name_len = close.at - name,
				.string = yes.got == DSML_OK};
	return DSML_OK;
}

bool dsml_search(const char *t, size_t len, size_t from, dsml_probe probe, struct dsml_head *hit,
		 size_t *again)
{
	bool more = false;
	size_t first_more = 0;
	for (const char *p; (p = find(t, len, from, MARK, MARK_LEN));) {
		size_t at = (size_t)(p - t);
		enum dsml_got g = probe(t, len, at, hit);
		if (g == DSML_OK) {
			*again = at;
			return true;
		}
		if (g == DSML_MORE && !more)
			more = true, first_more = at;
		from = at + 1;
	}
	if (again) {
		size_t tail = len > MARK_LEN - 1 ? len - (MARK_LEN - 1) : 0;
		*again = more ? first_more : (tail > from ? tail : from);
	}
	return false;
}

/* The end of `</｜DSML｜ ws? word` at p, or 0. */
static bool close_tag(const char *t, size_t len, size_t from, const char *word, struct dsml_match *m)
{
	const char *names[] = {word};
	for (const char *p; (p = find(t, len, from, MARK_CLOSE, MARK_CLOSE_LEN)); from = (size_t)(p - t) + 1) {
		size_t e = spaced_word(t, len, (size_t)(p - t) + MARK_CLOSE_LEN, names, 1);
		if (e) {
			*m = (struct dsml_match){(size_t)(p - t), e};
			return true;
		}
	}
	return false;
}

bool dsml_invoke_end(const char *s, size_t from, size_t to, struct dsml_match *m)
{
	return from <= to && close_tag(s, to, from, "invoke>", m);
}

bool dsml_param_close(const char *t, size_t len, size_t from, struct dsml_match *m)
{
	return from <= len && close_tag(t, len, from, "parameter>", m);
}

static bool invoke_open(const char *s, size_t from, size_t to, struct dsml_head *h)
{
	size_t again;
	return from <= to && dsml_search(s, to, from, dsml_invoke_at, h, &again);
}

/* The leftmost whole parameter in s[from..to): header and closing tag. */
static bool param_in(const char *s, size_t from, size_t to, struct dsml_head *h, struct dsml_match *c)
{
	if (from > to)
		return false;
	for (const char *p; (p = find(s, to, from, MARK, MARK_LEN)); from = (size_t)(p - s) + 1)
		if (dsml_param_at(s, to, (size_t)(p - s), h) == DSML_OK && dsml_param_close(s, to, h->end, c))
			return true;
	return false;
}

/* ---- values ---- */

enum { T_STRING = 1, T_INTEGER = 2, T_NUMBER = 4, T_BOOLEAN = 8, T_ARRAY = 16, T_OBJECT = 32, T_NULL = 64 };

static int type_of_name(const char *n)
{
	static const char *const names[] = {"string", "integer", "number", "boolean", "array", "object", "null"};
	for (int i = 0; i < 7; i++)
		if (!strcmp(n, names[i]))
			return 1 << i;
	return 0;
}

static int type_of_value(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_TRUE: case JSON_FALSE: return T_BOOLEAN;
	case JSON_INTEGER: return T_INTEGER;
	case JSON_REAL: return T_NUMBER;
	case JSON_STRING: return T_STRING;
	case JSON_ARRAY: return T_ARRAY;
	case JSON_OBJECT: return T_OBJECT;
	default: return T_NULL;
	}
}

/* The JSON types a parameter schema allows, or -1 when it does not say. A
 * type name the set does not know still says (the empty set). */
static int schema_types(const json_t *p)
{
	if (!json_is_object(p))
		return -1;
	const json_t *kind = json_object_get(p, "type");
	if (json_is_string(kind))
		return type_of_name(json_string_value(kind));
	if (json_is_array(kind) && json_array_size(kind)) {
		int t = 0;
		bool all = true;
		for (size_t i = 0; i < json_array_size(kind) && all; i++) {
			all = json_is_string(json_array_get(kind, i));
			if (all)
				t |= type_of_name(json_string_value(json_array_get(kind, i)));
		}
		if (all)
			return t;
	}
	static const char *const unions[] = {"anyOf", "oneOf"};
	for (int u = 0; u < 2; u++) {
		const json_t *members = json_object_get(p, unions[u]);
		if (!json_is_array(members) || !json_array_size(members))
			continue;
		int t = 0;
		for (size_t i = 0; i < json_array_size(members); i++) {
			int m = schema_types(json_array_get(members, i));
			if (m < 0)
				return -1;
			t |= m;
		}
		return t;
	}
	const json_t *e = json_object_get(p, "enum");
	if (json_is_array(e) && json_array_size(e)) {
		int t = 0;
		for (size_t i = 0; i < json_array_size(e); i++)
			t |= type_of_value(json_array_get(e, i));
		return t;
	}
	const json_t *c = json_object_get(p, "const");
	return c ? type_of_value(c) : -1;
}

static bool fits(const json_t *v, int t)
{
	int k = type_of_value(v);
	return (k & t) || (k == T_INTEGER && (t & T_NUMBER));
}

/* text with the arrays and objects it left open closed (rstripped first),
 * or false when it does not only stop short. */
static bool closed_json(const char *t, size_t n, struct tf_buf *out)
{
	struct tf_buf closers = TF_BUF_INIT;
	bool in_string = false, escaped = false, ok = true;
	for (size_t i = 0; i < n && ok; i++) {
		char c = t[i];
		if (in_string) {
			if (escaped) {
				escaped = false;
			} else {
				escaped = c == '\\';
				in_string = c != '"';
			}
		} else if (c == '"') {
			in_string = true;
		} else if (c == '[' || c == '{') {
			ok = !tf_buf_putc(&closers, c == '[' ? ']' : '}');
		} else if (c == ']' || c == '}') {
			ok = closers.len && closers.data[--closers.len] == c;
		}
	}
	ok = ok && closers.len && !in_string;
	if (ok) {
		size_t a, b;
		dsml_strip(t, n, &a, &b);
		tf_buf_reset(out);
		ok = !tf_buf_append(out, t, b); /* rstripped */
		for (size_t i = closers.len; ok && i-- > 0;)
			ok = !tf_buf_putc(out, closers.data[i]);
	}
	tf_buf_release(&closers);
	return ok;
}

static json_t *loads(const char *t, size_t n)
{
	return tf_pyjson_loads(t, n);
}

static json_t *closed_loads(const char *t, size_t n)
{
	struct tf_buf fixed = TF_BUF_INIT;
	json_t *v = closed_json(t, n, &fixed) ? loads(fixed.data, fixed.len) : NULL;
	tf_buf_release(&fixed);
	return v;
}

static json_t *raw_string(const char *raw, size_t n)
{
	return json_stringn_nocheck(raw, n);
}

/* A value read by its parameter schema. */
static json_t *typed_value(const char *raw, size_t n, const json_t *prop)
{
	int types = schema_types(prop);
	if (types < 0) {
		json_t *v = loads(raw, n);
		return v ? v : raw_string(raw, n);
	}
	size_t a, b;
	dsml_strip(raw, n, &a, &b);
	const char *text = raw + a;
	size_t tn = b - a;
	if (types & T_STRING)
		return (types & T_NULL) && tn == 4 && !memcmp(text, "null", 4) ? json_null() : raw_string(raw, n);
	json_t *cand[6];
	size_t nc = 0;
	json_t *v;
	if ((v = loads(text, tn)))
		cand[nc++] = v;
	if ((types & (T_ARRAY | T_OBJECT)) && (v = closed_loads(text, tn)))
		cand[nc++] = v;
	if (nc && json_is_string(cand[0])) {
		size_t x, y;
		const char *s = json_string_value(cand[0]);
		dsml_strip(s, json_string_length(cand[0]), &x, &y);
		if ((v = loads(s + x, y - x)))
			cand[nc++] = v;
	}
	if (tn == 4 && !memcmp(text, "True", 4))
		cand[nc++] = json_true();
	if (tn == 5 && !memcmp(text, "False", 5))
		cand[nc++] = json_false();
	if (tn == 4 && !memcmp(text, "None", 4))
		cand[nc++] = json_null();
	json_t *out = NULL;
	for (size_t i = 0; i < nc && !out; i++) {
		json_t *x = cand[i];
		if (json_is_real(x) && (types & T_INTEGER) && !(types & T_NUMBER)) {
			double f = json_real_value(x);
			if (isfinite(f) && floor(f) == f && fabs(f) < 9.2e18)
				x = json_integer((json_int_t)f); /* a new value; cand[i] is still released below */
			else
				x = json_incref(x);
		} else {
			x = json_incref(x);
		}
		if (x && fits(x, types))
			out = x;
		else
			json_decref(x);
	}
	for (size_t i = 0; i < nc; i++)
		json_decref(cand[i]);
	return out ? out : raw_string(raw, n);
}

json_t *dsml_param_value(const char *raw, size_t n, bool string, const json_t *prop)
{
	int types = schema_types(prop);
	if (string)
		return types < 0 || (types & T_STRING) ? raw_string(raw, n) : typed_value(raw, n, prop);
	json_t *v = loads(raw, n);
	if (v)
		return v;
	size_t a, b;
	dsml_strip(raw, n, &a, &b);
	if ((v = closed_loads(raw + a, b - a)))
		return v;
	return types >= 0 ? typed_value(raw, n, prop) : raw_string(raw, n);
}

/* ---- tools ---- */

struct tf_dsml_tools *tf_dsml_tools_new(const json_t *tools)
{
	struct tf_dsml_tools *t = calloc(1, sizeof *t);
	size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
	if (!t || (n && !(t->v = calloc(n, sizeof *t->v)))) {
		free(t);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		const json_t *tool = json_array_get(tools, i);
		if (!json_is_object(tool))
			continue;
		const json_t *inner = json_object_get(tool, "function");
		const json_t *f = json_is_object(inner) ? inner : tool;
		const json_t *name = json_object_get(f, "name");
		if (!tf_pyjson_truthy(name))
			continue;
		struct tf_buf b = TF_BUF_INIT;
		tf_status st = json_is_string(name) ? tf_buf_append(&b, json_string_value(name), json_string_length(name)) :
			       json_is_integer(name) ? tf_buf_printf(&b, "%lld", (long long)json_integer_value(name)) :
						       tf_pyjson_dump(&b, name, false);
		if (st) {
			tf_buf_release(&b);
			tf_dsml_tools_free(t);
			return NULL;
		}
		const json_t *params = json_object_get(f, "parameters");
		const json_t *props = json_is_object(params) ? json_object_get(params, "properties") : NULL;
		props = tf_pyjson_truthy(props) ? props : NULL;
		size_t k = 0;
		while (k < t->n && !(t->v[k].len == b.len && !memcmp(t->v[k].name, b.data, b.len)))
			k++;
		if (k < t->n) { /* a later tool of the same name replaces the schema, as a dict does */
			t->v[k].props = props;
			tf_buf_release(&b);
			continue;
		}
		struct dsml_tool *slot = &t->v[t->n];
		slot->props = props;
		if (!(slot->name = tf_buf_detach(&b, &slot->len))) {
			tf_dsml_tools_free(t);
			return NULL;
		}
		t->n++;
	}
	t->ref = json_incref((json_t *)tools);
	return t;
}

void tf_dsml_tools_free(struct tf_dsml_tools *t)
{
	if (!t)
		return;
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].name);
	free(t->v);
	json_decref(t->ref);
	free(t);
}

size_t tf_dsml_tools_count(const struct tf_dsml_tools *t)
{
	return t ? t->n : 0;
}

static bool eq_nocase(const char *a, size_t an, const char *b, size_t bn)
{
	if (an != bn)
		return false;
	for (size_t i = 0; i < an; i++) {
		char x = a[i], y = b[i];
		x = (char)(x >= 'A' && x <= 'Z' ? x + 32 : x);
		y = (char)(y >= 'A' && y <= 'Z' ? y + 32 : y);
		if (x != y)
			return false;
	}
	return true;
}

long dsml_known(const struct tf_dsml_tools *t, const char *name, size_t n)
{
	if (!t)
		return -1;
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i].len == n && !memcmp(t->v[i].name, name, n))
			return (long)i;
	long found = -1;
	for (size_t i = 0; i < t->n; i++) /* the last of equal lower-case names */
		if (eq_nocase(t->v[i].name, t->v[i].len, name, n))
			found = (long)i;
	if (found >= 0)
		return found;
	const char *tail = name;
	for (size_t i = 0; i + 1 < n; i++)
		if (name[i] == ':' && name[i + 1] == ':')
			tail = name + i + 2;
	size_t tn = n - (size_t)(tail - name);
	for (size_t i = 0; i < t->n; i++)
		if (eq_nocase(t->v[i].name, t->v[i].len, tail, tn))
			found = (long)i;
	return found;
}

const json_t *dsml_prop(const struct tf_dsml_tools *t, const char *call, size_t cn, const char *key, size_t kn)
{
	long i = dsml_known(t, call, cn);
	if (i < 0 || !json_is_object(t->v[i].props))
		return NULL;
	return json_object_getn(t->v[i].props, key, kn);
}

/* ---- calls ---- */

void dsml_new_id(char id[TF_DSML_ID_LEN + 1])
{
	static _Thread_local struct tf_rng rng;
	static _Thread_local bool seeded;
	uint8_t r[12];
	if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
		if (!seeded) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			tf_rng_seed(&rng, (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 32 ^ (uintptr_t)&rng);
			seeded = true;
		}
		for (size_t i = 0; i < sizeof r; i++)
			r[i] = (uint8_t)tf_rng_u64(&rng);
	}
	memcpy(id, "call_", 5);
	for (size_t i = 0; i < sizeof r; i++)
		snprintf(id + 5 + 2 * i, 3, "%02x", r[i]);
}

bool dsml_has_arg(const struct tf_dsml_call *c, const char *key, size_t kn)
{
	for (size_t i = 0; i < c->nargs; i++)
		if (c->args[i].key_len == kn && !memcmp(c->args[i].key, key, kn))
			return true;
	return false;
}

tf_status dsml_add_arg(struct tf_dsml_call *c, const char *key, size_t kn, json_t *value)
{
	struct tf_dsml_arg *a = realloc(c->args, (c->nargs + 1) * sizeof *a);
	char *k = malloc(kn + 1);
	if (!a || !k || !value) {
		if (a)
			c->args = a;
		free(k);
		json_decref(value);
		return tf_err(TF_ERR_NOMEM, "DSML arguments");
	}
	memcpy(k, key, kn);
	k[kn] = 0;
	c->args = a;
	c->args[c->nargs++] = (struct tf_dsml_arg){k, kn, value};
	return TF_OK;
}

void dsml_call_release(struct tf_dsml_call *c)
{
	for (size_t i = 0; i < c->nargs; i++) {
		free(c->args[i].key);
		json_decref(c->args[i].value);
	}
	free(c->args);
	free(c->name);
	memset(c, 0, sizeof *c);
}

tf_status dsml_call_init(struct tf_dsml_call *c, const char *name, size_t n)
{
	memset(c, 0, sizeof *c);
	dsml_new_id(c->id);
	if (!(c->name = malloc(n + 1)))
		return tf_err(TF_ERR_NOMEM, "DSML call");
	memcpy(c->name, name, n);
	c->name[n] = 0;
	return TF_OK;
}

tf_status dsml_fragment(struct tf_buf *out, bool first, const struct tf_dsml_arg *a)
{
	tf_status st;
	if ((st = tf_buf_putc(out, first ? '{' : ',')) || (st = tf_pyjson_dump_str(out, a->key, a->key_len)) ||
	    (st = tf_buf_putc(out, ':')))
		return st;
	return tf_pyjson_dump(out, a->value, true);
}

tf_status tf_dsml_call_arguments(const struct tf_dsml_call *c, struct tf_buf *out)
{
	if (!c->nargs)
		return tf_buf_puts(out, "{}");
	for (size_t i = 0; i < c->nargs; i++) {
		tf_status st = dsml_fragment(out, i == 0, &c->args[i]);
		if (st)
			return st;
	}
	return tf_buf_putc(out, '}');
}

/* One invoke's parameters in s[from..stop), the first of each name kept. */
static tf_status read_params(const char *s, size_t from, size_t stop, const struct tf_dsml_tools *tools,
			     struct tf_dsml_call *call)
{
	struct dsml_head h;
	struct dsml_match c;
	for (size_t pos = from; param_in(s, pos, stop, &h, &c); pos = c.end) {
		if (dsml_has_arg(call, s + h.name, h.name_len))
			continue;
		const json_t *prop = dsml_prop(tools, call->name, strlen(call->name), s + h.name, h.name_len);
		tf_status st = dsml_add_arg(call, s + h.name, h.name_len,
					    dsml_param_value(s + h.end, c.start - h.end, h.string, prop));
		if (st)
			return st;
	}
	return TF_OK;
}

/* The invokes of a calls block's body s[from..to), usable or not. */
static tf_status read_calls(const char *s, size_t from, size_t to, const struct tf_dsml_tools *tools,
			    struct tf_dsml_call **calls, size_t *n)
{
	struct dsml_head m, nxt;
	struct dsml_match end;
	for (size_t pos = from; invoke_open(s, pos, to, &m);) {
		bool has_end = dsml_invoke_end(s, m.end, to, &end);
		bool has_nxt = invoke_open(s, m.end, to, &nxt);
		size_t stop = has_end && (!has_nxt || end.start < nxt.start) ? end.start : has_nxt ? nxt.start : to;
		struct tf_dsml_call *grown = realloc(*calls, (*n + 1) * sizeof *grown);
		if (!grown)
			return tf_err(TF_ERR_NOMEM, "DSML calls");
		*calls = grown;
		struct tf_dsml_call *c = &grown[*n];
		tf_status st = dsml_call_init(c, s + m.name, m.name_len);
		if (st)
			return st;
		(*n)++;
		if ((st = read_params(s, m.end, stop, tools, c)))
			return st;
		bool closed = has_end && stop == end.start;
		pos = closed ? end.end : stop;
		if (!closed && !has_nxt)
			break;
	}
	return TF_OK;
}

void dsml_split(const char *t, size_t n, bool thinking, bool has_end, size_t end, bool has_blk,
		const struct dsml_match *blk, size_t *reasoning, size_t *rest_at)
{
	if (!thinking) {
		*reasoning = *rest_at = 0;
	} else if (has_end && (!has_blk || end < blk->start)) {
		*reasoning = end;
		*rest_at = end + THINK_END_LEN;
	} else if (has_blk) {
		size_t r = blk->start;
		if (r >= 2 && t[r - 1] == '\n' && t[r - 2] == '\n')
			r -= 2;
		else
			while (r && t[r - 1] == '\n')
				r--;
		*reasoning = *rest_at = r;
	} else {
		*reasoning = *rest_at = n;
	}
}

bool dsml_think_end(const char *t, size_t n, size_t from, size_t *at)
{
	const char *p = find(t, n, from, THINK_END, THINK_END_LEN);
	if (p)
		*at = (size_t)(p - t);
	return p != NULL;
}

void tf_dsml_reply_release(struct tf_dsml_reply *r)
{
	tf_buf_release(&r->reasoning);
	tf_buf_release(&r->content);
	for (size_t i = 0; i < r->ncalls; i++)
		dsml_call_release(&r->calls[i]);
	free(r->calls);
	r->calls = NULL;
	r->ncalls = 0;
}

tf_status tf_dsml_parse(const char *text, size_t n, bool thinking, const struct tf_dsml_tools *tools,
			struct tf_dsml_reply *out)
{
	*out = (struct tf_dsml_reply){.reasoning = TF_BUF_INIT, .content = TF_BUF_INIT};
	size_t end = 0, r, rest_at;
	struct dsml_match blk0;
	bool has_end = dsml_think_end(text, n, 0, &end);
	bool has_blk0 = dsml_block_tag(text, 0, n, false, &blk0);
	dsml_split(text, n, thinking, has_end, end, has_blk0, &blk0, &r, &rest_at);
	const char *rest = text + rest_at;
	size_t rn = n - rest_at, content = rn;
	struct tf_dsml_call *calls = NULL;
	size_t ncalls = 0, usable = 0;
	struct dsml_match blk, close;
	tf_status st = tf_buf_append(&out->reasoning, text, r);
	if (!st && tf_dsml_tools_count(tools) && dsml_block_tag(rest, 0, rn, false, &blk)) {
		bool has_close = dsml_block_tag(rest, blk.end, rn, true, &close);
		st = read_calls(rest, blk.end, has_close ? close.start : rn, tools, &calls, &ncalls);
		/* keep the calls of offered tools, under the offered spelling */
		for (size_t i = 0; i < ncalls && !st; i++) {
			long k = dsml_known(tools, calls[i].name, strlen(calls[i].name));
			char *name = k >= 0 ? strdup(tools->v[k].name) : NULL;
			if (k >= 0 && !name)
				st = tf_err(TF_ERR_NOMEM, "DSML calls");
			if (k < 0)
				dsml_call_release(&calls[i]);
			if (k < 0 || st)
				continue;
			free(calls[i].name);
			calls[i].name = name;
			struct tf_dsml_call c = calls[i];
			memset(&calls[i], 0, sizeof c);
			calls[usable++] = c;
		}
		for (size_t i = usable; i < ncalls; i++)
			dsml_call_release(&calls[i]);
		if (!st && usable) {
			content = blk.start;
			if (content >= 2 && rest[content - 1] == '\n' && rest[content - 2] == '\n')
				content -= 2;
		}
	}
	out->calls = calls;
	out->ncalls = usable;
	if (!st)
		st = tf_buf_append(&out->content, rest, content);
	if (st)
		tf_dsml_reply_release(out);
	return st;
}
