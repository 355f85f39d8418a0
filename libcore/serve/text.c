/* text.c: count_tokens, /tokenize and /detokenize over the family hook
 * (see text.h), and the tokenize body written from the ids as it is sent. */
#include "serve/text.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

static const char TAIL[] = "],\"token_strs\":null}";
#define TAILLEN (sizeof(TAIL) - 1)

static void put_json(struct tf_reply *r, json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT);
	json_decref(v);
	tf_buf_puts(&r->body, s ? s : "{}");
	free(s);
}

static size_t digits(int32_t v)
{
	size_t n = 1;
	for (uint32_t u = (uint32_t)v; u >= 10; u /= 10)
		n++;
	return n;
}

static void count_tokens(const struct tf_gen_env *env, const char *body, size_t n,
			 struct tf_reply *r)
{
	struct tf_req req;
	tf_status rc = tf_req_parse(TF_API_COUNT_TOKENS, body, n, env->family->vocab, &req);
	int32_t *ids = NULL;
	size_t nids = 0;
	if (!rc)
		rc = tf_gen_count(env, req.chat, &ids, &nids);
	if (rc)
		tf_reply_error(r, true, rc == TF_ERR_FORMAT ? 400 : 500, "invalid_request_error", NULL,
			       req.param, "%s", tf_errmsg(rc));
	else
		put_json(r, json_pack("{s:I}", "input_tokens", (json_int_t)nids));
	free(ids);
	tf_req_release(&req);
}

/* A tokenize that succeeded: the head of the body now, the rest from ids. */
static void tokenize_ok(const struct tf_gen_env *env, int32_t *ids, size_t nids,
			struct tf_text_answer *a)
{
	a->ids = ids;
	a->nids = nids;
	a->context = env->context;
	tf_buf_printf(&a->r.body, "{\"count\":%zu,\"max_model_len\":%u,\"tokens\":[", nids,
		      (unsigned)env->context);
	a->size = a->r.body.len + TAILLEN + (nids ? nids - 1 : 0);
	for (size_t i = 0; i < nids; i++)
		a->size += digits(ids[i]);
}

static void tokenize(const struct tf_gen_env *env, const json_t *b, struct tf_text_answer *a)
{
	const struct tf_family *f = env->family;
	const json_t *p = json_object_get(b, "prompt"), *m = json_object_get(b, "messages");
	int32_t *ids = NULL;
	size_t nids = 0;
	tf_status rc;
	if (json_is_string(p))
		rc = f->encode(f->ctx, json_string_value(p), json_string_length(p), &ids, &nids);
	else if (json_is_array(m) && json_array_size(m))
		rc = tf_gen_count(env, b, &ids, &nids);
	else
		rc = tf_err(TF_ERR_FORMAT, "tokenize needs a string prompt or a list of messages");
	if (rc) {
		tf_reply_error(&a->r, false, rc == TF_ERR_FORMAT ? 400 : 500, "invalid_request_error",
			       NULL, NULL, "%s", tf_errmsg(rc));
		free(ids);
		return;
	}
	tokenize_ok(env, ids, nids, a);
}

static void detokenize(const struct tf_gen_env *env, const json_t *b, struct tf_reply *r)
{
	const struct tf_family *f = env->family;
	const json_t *t = json_object_get(b, "tokens");
	size_t cnt = json_array_size(t), i;
	int32_t *ids = tf_alloc_array(cnt ? cnt : 1, sizeof(*ids));
	const json_t *v;
	bool ok = json_is_array(t) && ids;
	json_array_foreach(t, i, v) {
		json_int_t id = json_integer_value(v);
		if (!json_is_integer(v) || id < 0 || id >= f->vocab) {
			ok = false;
			break;
		}
		ids[i] = (int32_t)id;
	}
	struct tf_buf raw = TF_BUF_INIT, text = TF_BUF_INIT;
	if (!ok)
		tf_reply_error(r, false, 400, "invalid_request_error", NULL, "tokens",
			       "detokenize needs a list of token ids (0 to %u)", f->vocab - 1);
	else if (f->decode(f->ctx, ids, cnt, &raw))
		tf_reply_error(r, false, 500, "server_error", NULL, NULL, "decode failed");
	else {
		tf_utf8_fix(raw.data ? raw.data : "", raw.len, &text);
		put_json(r, json_pack("{s:s%}", "prompt", text.data ? text.data : "", text.len));
	}
	tf_buf_release(&raw);
	tf_buf_release(&text);
	free(ids);
}

void tf_text_serve(const struct tf_gen_env *env, enum tf_text_route k, const char *body, size_t n,
		   struct tf_buf *own, struct tf_text_answer *a)
{
	memset(a, 0, sizeof(*a));
	a->r.status = 200;
	a->r.type = "application/json";
	if (k == TF_TEXT_COUNT) {
		count_tokens(env, body, n, &a->r);
		if (own)
			tf_buf_release(own);
		return;
	}
	json_error_t e;
	json_t *b = json_loadb(n ? body : "{}", n ? n : 2, JSON_ALLOW_NUL, &e);
	if (own) /* the parsed copy is all that is needed now */
		tf_buf_release(own);
	if (!b)
		tf_reply_error(&a->r, false, 400, "invalid_request_error", NULL, NULL,
			       "the request body is not valid JSON: %s (at byte %d)", e.text, e.position);
	else if (!json_is_object(b))
		tf_reply_error(&a->r, false, 400, "invalid_request_error", NULL, NULL,
			       "the request body must be a JSON object");
	else if (k == TF_TEXT_TOKENIZE)
		tokenize(env, b, a);
	else
		detokenize(env, b, &a->r);
	json_decref(b);
}

size_t tf_text_read(struct tf_text_answer *a, size_t pos, char *buf, size_t max)
{
	if (pos != a->pos)
		return 0;
	size_t k = 0, head = a->r.body.len;
	while (k < max && a->pos < a->size) {
		const char *from;
		size_t n;
		bool cur = false;
		if (a->pos < head) {
			from = a->r.body.data + a->pos;
			n = head - a->pos;
		} else if (a->curoff < a->curlen) {
			from = a->cur + a->curoff;
			n = a->curlen - a->curoff;
			cur = true;
		} else if (a->next < a->nids) { /* the next id, after a comma */
			char d[12];
			size_t nd = 0;
			for (uint32_t u = (uint32_t)a->ids[a->next]; nd == 0 || u; u /= 10)
				d[nd++] = (char)('0' + u % 10);
			a->curlen = 0;
			if (a->next++)
				a->cur[a->curlen++] = ',';
			while (nd)
				a->cur[a->curlen++] = d[--nd];
			a->curoff = 0;
			continue;
		} else {
			size_t off = a->pos - (a->size - TAILLEN);
			from = TAIL + off;
			n = TAILLEN - off;
		}
		if (n > max - k)
			n = max - k;
		memcpy(buf + k, from, n);
		if (cur)
			a->curoff += n;
		a->pos += n;
		k += n;
	}
	return k;
}

void tf_text_release(struct tf_text_answer *a)
{
	free(a->ids);
	tf_reply_release(&a->r);
	memset(a, 0, sizeof(*a));
}
