/* stjson.c: strict JSON walker for safetensors headers. */
#include "pack/stjson.h"

#include <stdbool.h>
#include <string.h>

#include "base/buf.h"

#define MAX_DEPTH 64

struct rd {
	const unsigned char *p, *start, *end;
	const char *what;
	struct tf_buf s;   /* the last decoded string */
};

static tf_status bad(struct rd *r, const char *msg)
{
	return tf_err(TF_ERR_FORMAT, "'%s': bad header JSON at byte %zu: %s", r->what,
		      (size_t)(r->p - r->start), msg);
}

static void ws(struct rd *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static bool eat(struct rd *r, char c)
{
	ws(r);
	if (r->p < r->end && *r->p == (unsigned char)c) {
		r->p++;
		return true;
	}
	return false;
}

static int hex4(const unsigned char *p)
{
	int v = 0;
	for (int i = 0; i < 4; i++) {
		int c = p[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
				  c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (d < 0)
			return -1;
		v = v << 4 | d;
	}
	return v;
}

static tf_status put_utf8(struct tf_buf *b, unsigned cp)
{
	char o[4];
	size_t n;
	if (cp < 0x80) {
		o[0] = (char)cp, n = 1;
	} else if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
	} else if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
	} else {
		o[0] = (char)(0xf0 | cp >> 18), o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		o[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), o[3] = (char)(0x80 | (cp & 0x3f)), n = 4;
	}
	return tf_buf_append(b, o, n);
}

/* Length of a valid UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
	unsigned c = p[0];
	size_t n;
	unsigned lo = 0x80, hi = 0xbf;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
	else
		return 0;
	if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

/* A string into r->s (NUL-terminated; embedded NUL refused). */
static tf_status string(struct rd *r)
{
	tf_buf_reset(&r->s);
	tf_status st0 = tf_buf_reserve(&r->s, 16); /* data is never NULL after this */
	if (st0)
		return st0;
	if (!eat(r, '"'))
		return bad(r, "expected a string");
	for (;;) {
		const unsigned char *run = r->p;
		while (r->p < r->end && *r->p != '"' && *r->p != '\\' && *r->p >= 0x20 && *r->p < 0x80)
			r->p++;
		tf_status st = tf_buf_append(&r->s, run, (size_t)(r->p - run));
		if (st)
			return st;
		if (r->p >= r->end)
			return bad(r, "unterminated string");
		unsigned c = *r->p;
		if (c == '"') {
			r->p++;
			return TF_OK;
		}
		if (c < 0x20)
			return bad(r, "control character in a string");
		if (c >= 0x80) {
			size_t n = utf8_len(r->p, r->end);
			if (!n)
				return bad(r, "invalid UTF-8");
			if ((st = tf_buf_append(&r->s, r->p, n)))
				return st;
			r->p += n;
			continue;
		}
		/* an escape */
		if (r->end - r->p < 2)
			return bad(r, "unterminated escape");
		char e = (char)r->p[1];
		const char *simple = strchr("\"\\/bfnrt", e);
		if (simple && e) {
			static const char map[] = "\"\\/\b\f\n\r\t";
			st = tf_buf_putc(&r->s, map[simple - "\"\\/bfnrt"]);
			r->p += 2;
		} else if (e == 'u') {
			if (r->end - r->p < 6 || hex4(r->p + 2) < 0)
				return bad(r, "bad \\u escape");
			unsigned cp = (unsigned)hex4(r->p + 2);
			r->p += 6;
			if (cp >= 0xd800 && cp <= 0xdbff) {
				if (r->end - r->p < 6 || r->p[0] != '\\' || r->p[1] != 'u' ||
				    hex4(r->p + 2) < 0xdc00 || hex4(r->p + 2) > 0xdfff)
					return bad(r, "unpaired surrogate");
				cp = 0x10000 + ((cp - 0xd800) << 10) + ((unsigned)hex4(r->p + 2) - 0xdc00);
				r->p += 6;
			} else if (cp >= 0xdc00 && cp <= 0xdfff) {
				return bad(r, "unpaired surrogate");
			}
			if (!cp)
				return bad(r, "\\u0000 in a string");
			st = put_utf8(&r->s, cp);
		} else {
			return bad(r, "bad escape");
		}
		if (st)
			return st;
	}
}

/* A number; *is_uint and *v say whether it is a non-negative integer that
 * fits in 63 bits. */
static tf_status number(struct rd *r, bool *is_uint, uint64_t *v)
{
	ws(r);
	bool neg = false, frac = false;
	if (r->p < r->end && *r->p == '-')
		neg = true, r->p++;
	if (r->p >= r->end || *r->p < '0' || *r->p > '9')
		return bad(r, "expected a value");
	uint64_t x = 0;
	bool big = false;
	if (*r->p == '0') {
		r->p++;
	} else {
		while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
			if (x > (UINT64_C(1) << 62))
				big = true;
			x = x * 10 + (uint64_t)(*r->p++ - '0');
		}
	}
	if (r->p < r->end && *r->p == '.') {
		frac = true;
		r->p++;
		if (r->p >= r->end || *r->p < '0' || *r->p > '9')
			return bad(r, "bad number");
		while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
			r->p++;
	}
	if (r->p < r->end && (*r->p == 'e' || *r->p == 'E')) {
		frac = true;
		r->p++;
		if (r->p < r->end && (*r->p == '+' || *r->p == '-'))
			r->p++;
		if (r->p >= r->end || *r->p < '0' || *r->p > '9')
			return bad(r, "bad number");
		while (r->p < r->end && *r->p >= '0' && *r->p <= '9')
			r->p++;
	}
	if (!frac && big)
		return bad(r, "integer too big");
	*is_uint = !neg && !frac && x <= (uint64_t)INT64_MAX;
	*v = x;
	return TF_OK;
}

static bool word(struct rd *r, const char *w)
{
	size_t n = strlen(w);
	ws(r);
	if ((size_t)(r->end - r->p) >= n && !memcmp(r->p, w, n)) {
		r->p += n;
		return true;
	}
	return false;
}

static tf_status skip_value(struct rd *r, int depth)
{
	bool u;
	uint64_t v;
	tf_status st;
	if (depth > MAX_DEPTH)
		return bad(r, "nested too deeply");
	ws(r);
	if (r->p >= r->end)
		return bad(r, "expected a value");
	switch (*r->p) {
	case '"': return string(r);
	case '{':
		r->p++;
		if (eat(r, '}'))
			return TF_OK;
		do {
			if ((st = string(r)))
				return st;
			if (!eat(r, ':'))
				return bad(r, "expected ':'");
			if ((st = skip_value(r, depth + 1)))
				return st;
		} while (eat(r, ','));
		return eat(r, '}') ? TF_OK : bad(r, "expected ',' or '}'");
	case '[':
		r->p++;
		if (eat(r, ']'))
			return TF_OK;
		do
			if ((st = skip_value(r, depth + 1)))
				return st;
		while (eat(r, ','));
		return eat(r, ']') ? TF_OK : bad(r, "expected ',' or ']'");
	}
	if (word(r, "true") || word(r, "false") || word(r, "null"))
		return TF_OK;
	return number(r, &u, &v);
}

/* [uint, ...] into out (at most cap; more is reported as cap + 1). */
static tf_status uint_array(struct rd *r, uint64_t *out, int cap, int *n, bool *ok)
{
	*n = 0;
	*ok = true;
	if (!eat(r, '[')) {
		*ok = false;
		return skip_value(r, 1);
	}
	if (eat(r, ']'))
		return TF_OK;
	do {
		bool u;
		uint64_t v;
		ws(r);
		if (r->p < r->end && (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) {
			tf_status st = number(r, &u, &v);
			if (st)
				return st;
			if (!u)
				*ok = false;
		} else {
			tf_status st = skip_value(r, 1);
			if (st)
				return st;
			*ok = false;
			u = false, v = 0;
		}
		if (*n < cap)
			out[*n] = v;
		if (*n <= cap)
			(*n)++;
	} while (eat(r, ','));
	return eat(r, ']') ? TF_OK : bad(r, "expected ',' or ']'");
}

static tf_status entry(struct rd *r, struct tf_stjson_entry *e, struct tf_buf *dtype)
{
	e->dtype = NULL;
	e->ndim = -1;
	e->noffsets = -1;
	if (!eat(r, '{'))
		return bad(r, "expected '{'");
	if (eat(r, '}'))
		return TF_OK;
	unsigned seen = 0;
	do {
		tf_status st = string(r);
		if (st)
			return st;
		if (!eat(r, ':'))
			return bad(r, "expected ':'");
		int key = !strcmp(r->s.data, "dtype") ? 1 : !strcmp(r->s.data, "shape") ? 2 :
			  !strcmp(r->s.data, "data_offsets") ? 4 : 0;
		if (key & seen)
			return bad(r, "duplicate key in a tensor entry");
		seen |= (unsigned)key;
		bool ok;
		int n;
		if (key == 1) {
			ws(r);
			if (r->p < r->end && *r->p == '"') {
				if ((st = string(r)))
					return st;
				tf_buf_reset(dtype);
				if ((st = tf_buf_append(dtype, r->s.data, r->s.len)))
					return st;
				e->dtype = dtype->data;
			} else if ((st = skip_value(r, 1))) {
				return st;
			}
		} else if (key == 2) {
			if ((st = uint_array(r, e->shape, TF_STJSON_MAX_DIMS, &n, &ok)))
				return st;
			e->ndim = ok ? n : -2;
		} else if (key == 4) {
			if ((st = uint_array(r, e->offsets, 2, &n, &ok)))
				return st;
			e->noffsets = ok ? n : -2;
		} else if ((st = skip_value(r, 1))) {
			return st;
		}
	} while (eat(r, ','));
	return eat(r, '}') ? TF_OK : bad(r, "expected ',' or '}'");
}

static tf_status metadata(struct rd *r, json_t **out)
{
	if (*out)
		return bad(r, "duplicate __metadata__");
	if (!eat(r, '{'))
		return tf_err(TF_ERR_FORMAT, "'%s': __metadata__ is not an object", r->what);
	json_t *m = json_object();
	*out = m;
	if (!m)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	if (eat(r, '}'))
		return TF_OK;
	struct tf_buf key = TF_BUF_INIT;
	tf_status st = TF_OK;
	do {
		if ((st = string(r)) || (st = tf_buf_append(&key, r->s.data, r->s.len + 1)))
			break;
		if (!eat(r, ':')) {
			st = bad(r, "expected ':'");
			break;
		}
		ws(r);
		if (r->p >= r->end || *r->p != '"') {
			st = tf_err(TF_ERR_FORMAT, "'%s': __metadata__ '%s' is not a string", r->what,
				    key.data);
			break;
		}
		if ((st = string(r)))
			break;
		if (json_object_get(m, key.data)) {
			st = bad(r, "duplicate key in __metadata__");
			break;
		}
		json_object_set_new(m, key.data, json_string(r->s.data));
		tf_buf_reset(&key);
	} while (eat(r, ','));
	if (!st && !eat(r, '}'))
		st = bad(r, "expected ',' or '}'");
	tf_buf_release(&key);
	return st;
}

tf_status tf_stjson_walk(const char *text, size_t n, const char *what, tf_stjson_fn fn,
			 void *ctx, json_t **meta)
{
	struct rd r = {(const unsigned char *)text, (const unsigned char *)text,
		       (const unsigned char *)text + n, what, TF_BUF_INIT};
	struct tf_buf name = TF_BUF_INIT, dtype = TF_BUF_INIT;
	*meta = NULL;
	tf_status st = TF_OK;
	if (!eat(&r, '{')) {
		st = skip_value(&r, 0);
		if (!st)
			st = tf_err(TF_ERR_FORMAT, "'%s': header is not a JSON object", what);
		goto out;
	}
	if (eat(&r, '}'))
		goto end;
	do {
		if ((st = string(&r)))
			goto out;
		if (!eat(&r, ':')) {
			st = bad(&r, "expected ':'");
			goto out;
		}
		if (!strcmp(r.s.data, "__metadata__")) {
			if ((st = metadata(&r, meta)))
				goto out;
			continue;
		}
		tf_buf_reset(&name);
		if ((st = tf_buf_append(&name, r.s.data, r.s.len)))
			goto out;
		struct tf_stjson_entry e = {.name = name.data, .name_len = name.len};
		ws(&r);
		if (r.p >= r.end || *r.p != '{') {
			if (!(st = skip_value(&r, 1)))
				st = tf_err(TF_ERR_FORMAT, "'%s': tensor '%s': entry is not an object",
					    what, name.data);
			goto out;
		}
		if ((st = entry(&r, &e, &dtype)) || (st = fn(ctx, &e)))
			goto out;
	} while (eat(&r, ','));
	if (!eat(&r, '}')) {
		st = bad(&r, "expected ',' or '}'");
		goto out;
	}
end:
	ws(&r);
	if (r.p != r.end)
		st = bad(&r, "text after the header object");
out:
	tf_buf_release(&r.s);
	tf_buf_release(&name);
	tf_buf_release(&dtype);
	if (st) {
		json_decref(*meta);
		*meta = NULL;
	}
	return st;
}
