/* family.c: the plain family, the </think> reader and UTF-8 helpers. */
#include "serve/family.h"
#include "serve/constrain.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#define PLAIN_EOS 257
#define THINK_END "</think>"

size_t tf_utf8_complete(const char *s, size_t n)
{
	/* Look back at most 3 bytes for a lead byte whose character is cut. */
	size_t i = n, back = 0;
	while (i > 0 && back < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
		i--;
		back++;
	}
	if (i == 0) /* only continuation bytes: invalid, let them through */
		return n;
	unsigned char c = (unsigned char)s[i - 1];
	size_t want = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
		: c >= 0xF0 && c <= 0xF4 ? 4 : 1; /* 1: ASCII, or a byte no character starts with */
	if (want == 1)
		return n;
	size_t have = back + 1;
	return have < want ? i - 1 : n;
}

/* The plain family: a role: text transcript. */
static tf_status content_text(const json_t *c, struct tf_buf *out)
{
	if (!c || json_is_null(c))
		return TF_OK;
	if (json_is_string(c))
		return tf_buf_append(out, json_string_value(c), json_string_length(c));
	if (json_is_array(c)) {
		size_t i;
		const json_t *part;
		json_array_foreach(c, i, part) {
			const json_t *t = json_object_get(part, "text");
			if (json_is_string(t)) {
				if (i && tf_buf_puts(out, "\n\n"))
					return TF_ERR_NOMEM;
				if (tf_buf_append(out, json_string_value(t), json_string_length(t)))
					return TF_ERR_NOMEM;
			}
		}
		return TF_OK;
	}
	char *s = json_dumps(c, JSON_COMPACT);
	tf_status rc = s ? tf_buf_puts(out, s) : TF_ERR_NOMEM;
	free(s);
	return rc;
}

static tf_status plain_thinking(const json_t *req, bool *thinking)
{
	*thinking = true;
	const json_t *kw = json_object_get(req, "chat_template_kwargs");
	const json_t *v = json_object_get(req, "thinking");
	if (json_is_object(kw) && json_object_get(kw, "enable_thinking"))
		v = json_object_get(kw, "enable_thinking");
	if (json_is_boolean(v))
		*thinking = json_is_true(v);
	else if (json_is_object(v)) {
		const char *t = json_string_value(json_object_get(v, "type"));
		*thinking = !t || strcmp(t, "disabled");
	}
	const json_t *eff = json_object_get(req, "reasoning_effort");
	if (json_is_object(kw) && json_object_get(kw, "reasoning_effort"))
		eff = json_object_get(kw, "reasoning_effort");
	if (json_is_string(eff)) {
		const char *e = json_string_value(eff);
		if (!strcmp(e, "none") || !strcmp(e, "minimal"))
			*thinking = false;
		else if (strcmp(e, "low") && strcmp(e, "medium") && strcmp(e, "high") &&
			 strcmp(e, "xhigh") && strcmp(e, "max"))
			return tf_err(TF_ERR_FORMAT,
				      "reasoning_effort must be 1-100 or low / medium / high / max");
	} else if (json_is_integer(eff)) {
		json_int_t e = json_integer_value(eff);
		if (e < 1 || e > 100)
			return tf_err(TF_ERR_FORMAT,
				      "reasoning_effort must be 1-100 or low / medium / high / max");
	} else if (eff && !json_is_null(eff)) {
		return tf_err(TF_ERR_FORMAT, "reasoning_effort must be 1-100 or low / medium / high / max");
	}
	return TF_OK;
}

static tf_status plain_render(void *ctx, const json_t *req, struct tf_buf *text, bool *thinking)
{
	const json_t *msgs = json_object_get(req, "messages");
	tf_status rc = plain_thinking(req, thinking);
	if (rc)
		return rc;
	const json_t *tools = json_object_get(req, "tools");
	const char *choice = json_string_value(json_object_get(req, "tool_choice"));
	if (json_is_array(tools) && json_array_size(tools) && !(choice && !strcmp(choice, "none"))) {
		if (tf_buf_puts(text, "tools:"))
			return TF_ERR_NOMEM;
		size_t i;
		const json_t *t;
		json_array_foreach(tools, i, t) {
			const char *name = json_string_value(
				json_object_get(json_object_get(t, "function"), "name"));
			if (tf_buf_printf(text, " %s", name ? name : "?"))
				return TF_ERR_NOMEM;
		}
		if (tf_buf_putc(text, '\n'))
			return TF_ERR_NOMEM;
	}
	size_t i;
	const json_t *m;
	json_array_foreach(msgs, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		if (tf_buf_printf(text, "%s: ", role ? role : "user"))
			return TF_ERR_NOMEM;
		const json_t *r = json_object_get(m, "reasoning_content");
		if (json_is_string(r) && (tf_buf_puts(text, "<think>") ||
					  tf_buf_append(text, json_string_value(r), json_string_length(r)) ||
					  tf_buf_puts(text, THINK_END)))
			return TF_ERR_NOMEM;
		if (content_text(json_object_get(m, "content"), text))
			return TF_ERR_NOMEM;
		const json_t *calls = json_object_get(m, "tool_calls");
		size_t k;
		const json_t *c;
		json_array_foreach(calls, k, c) {
			const json_t *f = json_object_get(c, "function");
			const char *n = json_string_value(json_object_get(f, "name"));
			const json_t *a = json_object_get(f, "arguments");
			if (tf_buf_printf(text, " [call %s ", n ? n : "?") ||
			    (json_is_string(a) ? tf_buf_append(text, json_string_value(a), json_string_length(a))
					       : tf_buf_puts(text, "{}")) ||
			    tf_buf_putc(text, ']'))
				return TF_ERR_NOMEM;
		}
		if (tf_buf_putc(text, '\n'))
			return TF_ERR_NOMEM;
	}
	return tf_buf_puts(text, *thinking ? "assistant: <think>" : "assistant: ");
}

static tf_status plain_encode(void *ctx, const char *text, size_t n, int32_t **ids, size_t *nids)
{
	*ids = tf_alloc_array(n ? n : 1, sizeof(**ids));
	if (!*ids)
		return tf_err(TF_ERR_NOMEM, "encode: out of memory");
	for (size_t i = 0; i < n; i++)
		(*ids)[i] = (unsigned char)text[i];
	*nids = n;
	return TF_OK;
}

static tf_status plain_decode(void *ctx, const int32_t *ids, size_t n, struct tf_buf *out)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= 0 && ids[i] < 256 && tf_buf_putc(out, (char)ids[i]))
			return tf_err(TF_ERR_NOMEM, "decode: out of memory");
	return TF_OK;
}

static const uint8_t *plain_bytes(void *ctx, uint32_t id, size_t *len)
{
	static const uint8_t bytes[256] = {
#define B4(n) n, n + 1, n + 2, n + 3
#define B16(n) B4(n), B4(n + 4), B4(n + 8), B4(n + 12)
		B16(0), B16(16), B16(32), B16(48), B16(64), B16(80), B16(96), B16(112),
		B16(128), B16(144), B16(160), B16(176), B16(192), B16(208), B16(224), B16(240),
#undef B16
#undef B4
	};
	*len = 1;
	return id < 256 ? &bytes[id] : NULL;
}

static tf_status plain_reader_new(void *ctx, bool thinking, const json_t *tools,
				  struct tf_reader **out)
{
	return tf_reader_think_new(thinking, out);
}

tf_status tf_family_plain(struct tf_family *out)
{
	*out = (struct tf_family){
		.name = "plain",
		.vocab = 258,
		.eos = PLAIN_EOS,
		.default_thinking = true,
		.render = plain_render,
		.encode = plain_encode,
		.decode = plain_decode,
		.reader_new = plain_reader_new,
		.reader_feed = tf_reader_think_feed,
		.reader_free = tf_reader_think_free,
		.text_bytes = plain_bytes,
		.think_end = -1,
		.grammar = tf_fgrammar_plain(),
	};
	return TF_OK;
}


tf_status tf_family_drawable(const struct tf_family *f, uint32_t n, uint8_t **out)
{
	uint8_t *d = malloc(n ? n : 1);
	if (!d)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	struct tf_buf text = TF_BUF_INIT;
	tf_status st = TF_OK;
	for (uint32_t id = 0; id < n && !st; id++) {
		int32_t one = (int32_t)id;
		text.len = 0;
		st = f->decode(f->ctx, &one, 1, &text);
		d[id] = text.len > 0;
	}
	tf_buf_release(&text);
	if (st) {
		free(d);
		return st;
	}
	*out = d;
	return TF_OK;
}

void tf_family_release(struct tf_family *f)
{
	if (f)
		tf_fgrammar_free(f->grammar);
	if (f && f->free)
		f->free(f->ctx);
	if (f)
		memset(f, 0, sizeof(*f));
}

/* The </think> reader. */
struct tf_reader {
	bool reasoning;   /* still in reasoning */
	struct tf_buf held; /* a tail that may start </think> */
};

tf_status tf_reader_think_new(bool thinking, struct tf_reader **out)
{
	struct tf_reader *r = tf_calloc(1, sizeof(*r));
	if (!r)
		return tf_err(TF_ERR_NOMEM, "reader: out of memory");
	r->reasoning = thinking;
	*out = r;
	return TF_OK;
}

static tf_status emit(tf_delta_fn fn, void *fctx, enum tf_delta_kind k, const char *s, size_t n)
{
	if (n == 0)
		return TF_OK;
	struct tf_delta d = {.kind = k, .text = s, .len = n};
	return fn(fctx, &d);
}

tf_status tf_reader_think_feed(struct tf_reader *r, const char *text, size_t n, bool final,
			       tf_delta_fn fn, void *fctx)
{
	tf_status rc;
	if (!r->reasoning)
		return emit(fn, fctx, TF_DELTA_CONTENT, text, n);
	if (tf_buf_append(&r->held, text, n))
		return tf_err(TF_ERR_NOMEM, "reader: out of memory");
	const char *s = r->held.data ? r->held.data : "";
	size_t len = r->held.len;
	const char *end = memmem(s, len, THINK_END, strlen(THINK_END));
	if (end) {
		size_t rest = len - (size_t)(end - s) - strlen(THINK_END);
		rc = emit(fn, fctx, TF_DELTA_REASONING, s, (size_t)(end - s));
		r->reasoning = false;
		if (!rc)
			rc = emit(fn, fctx, TF_DELTA_CONTENT, end + strlen(THINK_END), rest);
		tf_buf_reset(&r->held);
		return rc;
	}
	/* Hold back the longest tail that is a prefix of </think>. */
	size_t keep = 0;
	if (!final)
		for (size_t k = strlen(THINK_END) - 1; k > 0; k--)
			if (len >= k && !memcmp(s + len - k, THINK_END, k)) {
				keep = k;
				break;
			}
	rc = emit(fn, fctx, TF_DELTA_REASONING, s, len - keep);
	memmove(r->held.data, s + len - keep, keep);
	r->held.len = keep;
	if (r->held.data)
		r->held.data[keep] = 0;
	return rc;
}

void tf_reader_think_free(struct tf_reader *r)
{
	if (!r)
		return;
	tf_buf_release(&r->held);
	free(r);
}

void tf_utf8_fix(const char *s, size_t n, struct tf_buf *out)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;
	while (i < n) {
		unsigned char c = p[i];
		size_t len = 0;
		unsigned char lo = 0x80, hi = 0xBF;
		if (c < 0x80)
			len = 1;
		else if (c >= 0xC2 && c <= 0xDF)
			len = 2;
		else if (c >= 0xE0 && c <= 0xEF) {
			len = 3;
			lo = c == 0xE0 ? 0xA0 : 0x80;
			hi = c == 0xED ? 0x9F : 0xBF;
		} else if (c >= 0xF0 && c <= 0xF4) {
			len = 4;
			lo = c == 0xF0 ? 0x90 : 0x80;
			hi = c == 0xF4 ? 0x8F : 0xBF;
		}
		size_t k = 1;
		while (len > 1 && k < len && i + k < n &&
		       p[i + k] >= (k == 1 ? lo : 0x80) && p[i + k] <= (k == 1 ? hi : 0xBF))
			k++;
		if (len && k == len) {
			tf_buf_append(out, s + i, len);
			i += len;
		} else {
			tf_buf_puts(out, "\xef\xbf\xbd");
			i += k;
		}
	}
}


void tf_json_quote(struct tf_buf *out, const char *s, size_t n)
{
	static const char hex[] = "0123456789ABCDEF"; /* as jansson writes them */
	tf_buf_reserve(out, n + 2);
	tf_buf_putc(out, '"');
	size_t run = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		tf_buf_append(out, s + run, i - run);
		run = i + 1;
		char e[7] = {'\\', (char)c, 0};
		switch (c) {
		case '"': case '\\': break;
		case '\n': e[1] = 'n'; break;
		case '\r': e[1] = 'r'; break;
		case '\t': e[1] = 't'; break;
		case '\b': e[1] = 'b'; break;
		case '\f': e[1] = 'f'; break;
		default:
			e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15];
		}
		tf_buf_puts(out, e);
	}
	tf_buf_append(out, s + run, n - run);
	tf_buf_putc(out, '"');
}
