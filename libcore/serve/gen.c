/* gen.c: a generation in flight: render, submit, read tokens into text,
 * stop strings, deltas, and the OpenAI and Anthropic wire shapes. */
#include "serve/gen.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "base/hmap.h"
#include "serve/constrain.h"
#include "serve/gen_impl.h"
#include "serve/logprobs.h"
#include "serve/metrics.h"

double tf_gen_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void tf_gen_hex(char *out, size_t nbytes)
{
	uint8_t b[32];
	if (nbytes > sizeof(b))
		nbytes = sizeof(b);
	if (getrandom(b, nbytes, 0) != (ssize_t)nbytes) { /* never in practice; stay unique-ish */
		uint64_t t = (uint64_t)(tf_gen_now() * 1e9);
		for (size_t i = 0; i < nbytes; i++)
			b[i] = (uint8_t)(t >> (8 * (i % 8))) ^ (uint8_t)i;
	}
	tf_hex(b, nbytes, out);
}

void tf_reply_release(struct tf_reply *r)
{
	tf_buf_release(&r->body);
	memset(r, 0, sizeof(*r));
}

static const char *anthropic_type(int status)
{
	switch (status) {
	case 400: case 405: case 422: case 431: return "invalid_request_error";
	case 413: return "request_too_large";
	case 401: return "authentication_error";
	case 403: return "permission_error";
	case 404: return "not_found_error";
	case 429: return "rate_limit_error";
	case 503: return "overloaded_error";
	}
	return "api_error";
}

/* Reals with 9 significant digits: every float (logprobs) round-trips,
 * without the noise of its nearest double. */
char *tf_gen_dump(json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(v);
	return s;
}

json_t *tf_gen_error_json(bool anthropic, int status, const char *kind, const char *code,
			  const char *param, const char *msg)
{
	if (anthropic)
		return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
				 anthropic_type(status), "message", msg);
	json_t *e = json_pack("{s:s,s:s}", "message", msg, "type", kind);
	if (param)
		json_object_set_new(e, "param", json_string(param));
	else if (code)
		json_object_set_new(e, "param", json_null());
	if (code)
		json_object_set_new(e, "code", json_string(code));
	return json_pack("{s:o}", "error", e);
}

void tf_reply_error(struct tf_reply *r, bool anthropic, int status, const char *kind,
		    const char *code, const char *param, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	tf_buf_reset(&r->body);
	r->status = status;
	r->type = "application/json";
	char *s = tf_gen_dump(tf_gen_error_json(anthropic, status, kind, code, param, msg));
	if (s)
		tf_buf_puts(&r->body, s);
	free(s);
}

/* SSE frames. */
void tf_gen_sse(struct tf_gen *g, json_t *v)
{
	char *s = tf_gen_dump(v);
	if (!s)
		return;
	if (g->anthropic || g->req.api == TF_API_RESPONSES) {
		const char *type = strstr(s, "\"type\":\"");
		const char *end = type ? strchr(type + 8, '"') : NULL;
		if (end)
			tf_buf_printf(g->out, "event: %.*s\n", (int)(end - type - 8), type + 8);
	}
	tf_buf_puts(g->out, "data: ");
	tf_buf_puts(g->out, s);
	tf_buf_puts(g->out, "\n\n");
	free(s);
	g->t_last_write = tf_gen_now();
}

static json_t *chunk(struct tf_gen *g, json_t *choice)
{
	bool chat = g->req.api == TF_API_CHAT;
	return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", g->id, "object",
			 chat ? "chat.completion.chunk" : "text_completion", "created",
			 (json_int_t)g->created, "model", g->env->model, "choices", choice);
}

void tf_gen_note_event(struct tf_gen *g)
{
	double t = tf_gen_now();
	if (g->events) {
		double gap = t - g->t_last_event;
		g->itl_sum += gap;
		if (gap > g->itl_max)
			g->itl_max = gap;
		g->itl_n[tf_metrics_bucket(gap)]++;
	}
	g->events++;
	g->t_last_event = t;
}

/* The pending log-probabilities as a choice's value (null when not asked). */
static void lp_flush(struct tf_gen *g, struct tf_buf *o)
{
	if (g->lp)
		tf_lpout_flush(&g->lpo, o);
	else
		tf_buf_puts(o, "null");
}

/* The pending entries as a JSON value (for the frames built with jansson). */
static json_t *lp_json(struct tf_gen *g)
{
	struct tf_buf b = TF_BUF_INIT;
	lp_flush(g, &b);
	json_t *v = json_loadb(b.data ? b.data : "null", b.len ? b.len : 4, 0, NULL);
	tf_buf_release(&b);
	return v ? v : json_null();
}

/* Anthropic content blocks. */
static void block_close(struct tf_gen *g)
{
	if (g->block < 0)
		return;
	if (g->block_kind == TF_DELTA_REASONING)
		tf_gen_sse(g, json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
				      g->block, "delta", "type", "signature_delta", "signature", ""));
	tf_gen_sse(g, json_pack("{s:s,s:i}", "type", "content_block_stop", "index", g->block));
	g->block = -1;
}

static void block_open(struct tf_gen *g, enum tf_delta_kind kind, int call)
{
	if (g->block >= 0 && g->block_kind == (int)kind && (kind != TF_DELTA_CALL || g->block_call == call))
		return;
	block_close(g);
	g->block = g->nblocks++;
	g->block_kind = kind;
	g->block_call = call;
	json_t *cb;
	if (kind == TF_DELTA_REASONING)
		cb = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", "");
	else if (kind == TF_DELTA_CONTENT)
		cb = json_pack("{s:s,s:s}", "type", "text", "text", "");
	else
		cb = json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id", g->calls[call].id, "name",
			       g->calls[call].name, "input");
	tf_gen_sse(g, json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", g->block,
			      "content_block", cb));
}

static void stream_delta(struct tf_gen *g, const struct tf_delta *d, const char *text)
{
	if (g->timing && g->t_made > 0) /* an SSE comment: every client skips it */
		tf_buf_printf(g->out, ": tf-made %lld\n", (long long)(g->t_made * 1e9));
	if (g->anthropic) {
		if (d->kind == TF_DELTA_ARGS) {
			block_open(g, TF_DELTA_CALL, d->index);
			tf_gen_sse(g, json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
					      g->block, "delta", "type", "input_json_delta", "partial_json", text));
		} else if (d->kind == TF_DELTA_CALL) {
			block_open(g, TF_DELTA_CALL, d->index);
		} else {
			block_open(g, d->kind, 0);
			bool th = d->kind == TF_DELTA_REASONING;
			tf_gen_sse(g, json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
					      g->block, "delta", "type", th ? "thinking_delta" : "text_delta",
					      th ? "thinking" : "text", text));
		}
		tf_gen_note_event(g);
		return;
	}
	/* The frequent frames, written directly: the same bytes jansson would
	 * give, without building objects per token. */
	if (d->kind == TF_DELTA_REASONING || d->kind == TF_DELTA_CONTENT ||
	    g->req.api == TF_API_COMPLETIONS) {
		tf_buf_puts(g->out, "data: ");
		tf_buf_append(g->out, g->head.data, g->head.len);
		if (g->req.api == TF_API_COMPLETIONS) {
			tf_json_quote(g->out, d->text, d->len);
		} else if (d->kind == TF_DELTA_CONTENT) {
			tf_buf_puts(g->out, "{\"content\":");
			tf_json_quote(g->out, d->text, d->len);
		} else {
			tf_buf_puts(g->out, "{\"reasoning_content\":");
			tf_json_quote(g->out, d->text, d->len);
			tf_buf_puts(g->out, ",\"reasoning\":");
			tf_json_quote(g->out, d->text, d->len);
		}
		if (g->req.api != TF_API_COMPLETIONS)
			tf_buf_puts(g->out, "}");
		if (g->lp) {
			tf_buf_puts(g->out, ",\"logprobs\":");
			lp_flush(g, g->out);
		}
		tf_buf_puts(g->out, ",\"finish_reason\":null}]}\n\n");
		g->t_last_write = tf_gen_now();
		tf_gen_note_event(g);
		return;
	}
	json_t *delta;
	if (g->req.api == TF_API_COMPLETIONS) {
		json_t *choice = json_pack("{s:i,s:s,s:n}", "index", 0, "text", text, "finish_reason");
		if (g->lp)
			json_object_set_new(choice, "logprobs", lp_json(g));
		tf_gen_sse(g, chunk(g, choice));
		tf_gen_note_event(g);
		return;
	}
	switch (d->kind) {
	case TF_DELTA_REASONING:
		delta = json_pack("{s:s,s:s}", "reasoning_content", text, "reasoning", text);
		break;
	case TF_DELTA_CONTENT:
		delta = json_pack("{s:s}", "content", text);
		break;
	case TF_DELTA_CALL:
		delta = json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", d->index, "id",
				  g->calls[d->index].id, "type", "function", "function", "name",
				  g->calls[d->index].name, "arguments", "");
		break;
	default:
		delta = json_pack("{s:[{s:i,s:{s:s}}]}", "tool_calls", "index", d->index, "function",
				  "arguments", text);
		break;
	}
	json_t *choice = json_pack("{s:i,s:o,s:n}", "index", 0, "delta", delta, "finish_reason");
	if (g->lp)
		json_object_set_new(choice, "logprobs", lp_json(g));
	tf_gen_sse(g, chunk(g, choice));
	tf_gen_note_event(g);
}

static tf_status on_delta(void *ctx, const struct tf_delta *d)
{
	struct tf_gen *g = ctx;
	if ((d->kind == TF_DELTA_REASONING || d->kind == TF_DELTA_CONTENT || d->kind == TF_DELTA_ARGS) &&
	    d->len == 0)
		return TF_OK;
	char *text = tf_strndup(d->text ? d->text : "", d->len);
	if (!text)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	tf_status rc = TF_OK;
	switch (d->kind) {
	case TF_DELTA_REASONING:
		rc = tf_buf_append(&g->reasoning, d->text, d->len);
		break;
	case TF_DELTA_CONTENT:
		g->saw_answer = true;
		rc = tf_buf_append(&g->content, d->text, d->len);
		break;
	case TF_DELTA_CALL: {
		g->saw_answer = true;
		if (d->index != (int)g->ncalls) {
			rc = tf_err(TF_ERR_INTERNAL, "reader: call %d opened out of order", d->index);
			break;
		}
		if (tf_realloc_array(&g->calls, g->ncalls + 1, sizeof(*g->calls))) {
			rc = tf_err(TF_ERR_NOMEM, "out of memory");
			break;
		}
		struct call *c = &g->calls[g->ncalls++];
		memset(c, 0, sizeof(*c));
		if (d->id && !g->anthropic && strlen(d->id) < sizeof(c->id)) {
			strcpy(c->id, d->id);
		} else {
			strcpy(c->id, g->anthropic ? "toolu_" : "call_");
			tf_gen_hex(c->id + strlen(c->id), 12);
		}
		c->name = tf_strdup(d->name ? d->name : "");
		break;
	}
	case TF_DELTA_ARGS:
		if (d->index < 0 || (size_t)d->index >= g->ncalls)
			rc = tf_err(TF_ERR_INTERNAL, "reader: arguments for unknown call %d", d->index);
		else
			rc = tf_buf_append(&g->calls[d->index].args, d->text, d->len);
		break;
	}
	if (!rc && g->req.api == TF_API_RESPONSES)
		rc = tf_resp_delta(g, d);
	else if (!rc && g->stream)
		stream_delta(g, d, text);
	free(text);
	return rc;
}

static tf_status feed(struct tf_gen *g, const char *text, size_t n, bool final)
{
	g->reader_final |= final;
	if (g->reader)
		return g->env->family->reader_feed(g->reader, text, n, final, on_delta, g);
	struct tf_delta d = {.kind = TF_DELTA_CONTENT, .text = text, .len = n};
	return n ? on_delta(g, &d) : TF_OK;
}

/* Complete text in: cut at stop strings, hold back what may start one. */
static tf_status text_in(struct tf_gen *g, const char *text, size_t n, bool final)
{
	if (g->stop_hit)
		return TF_OK;
	if (g->req.nstop == 0)
		return feed(g, text, n, final);
	if (tf_buf_append(&g->held, text, n))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	const char *s = g->held.data ? g->held.data : "";
	size_t len = g->held.len, cut = len, keep = 0;
	for (size_t i = 0; i < g->req.nstop; i++) {
		const char *st = g->req.stop[i];
		size_t sl = strlen(st);
		const char *at = memmem(s, len, st, sl);
		if (at && (size_t)(at - s) < cut) {
			cut = (size_t)(at - s);
			g->stop_hit = st;
		}
		for (size_t k = sl - 1; k > keep && !final; k--)
			if (len >= k && !memcmp(s + len - k, st, k)) {
				keep = k;
				break;
			}
	}
	tf_status rc;
	if (g->stop_hit) {
		rc = feed(g, s, cut, true);
		tf_engine_job_cancel(g->job);
		tf_buf_reset(&g->held);
		return rc;
	}
	rc = feed(g, s, len - keep, final);
	memmove(g->held.data, s + len - keep, keep);
	g->held.len = keep;
	if (g->held.data)
		g->held.data[keep] = 0;
	return rc;
}

static tf_status tokens_in(struct tf_gen *g, const int32_t *t, const double *made, size_t n)
{
	const struct tf_family *f = g->env->family;
	size_t nlp = 0;
	if (g->lp && n) {
		nlp = tf_engine_job_logprobs(g->job, g->lp_read, g->lpv, n);
		g->lp_read += n;
	}
	for (size_t i = 0; i < n; i++) {
		if (g->stop_hit)
			return TF_OK;
		g->nused++;
		g->t_made = made[i];
		if (i < nlp)
			tf_lpout_add(&g->lpo, t[i], &g->lpv[i]);
		tf_status rc = f->decode(f->ctx, &t[i], 1, &g->raw);
		if (rc)
			return rc;
		size_t ok = tf_utf8_complete(g->raw.data ? g->raw.data : "", g->raw.len);
		if (ok) {
			/* Complete characters go on; invalid bytes become U+FFFD. */
			tf_buf_reset(&g->fixed);
			tf_utf8_fix(g->raw.data, ok, &g->fixed);
			rc = text_in(g, g->fixed.data, g->fixed.len, false);
			memmove(g->raw.data, g->raw.data + ok, g->raw.len - ok);
			g->raw.len -= ok;
			g->raw.data[g->raw.len] = 0;
			if (rc)
				return rc;
		}
		if (g->thinking && !g->saw_answer)
			g->reasoning_tokens++;
	}
	return TF_OK;
}

static const char *finish_reason(struct tf_gen *g, const char **stop_seq)
{
	*stop_seq = NULL;
	if (g->stop_hit) {
		*stop_seq = g->stop_hit;
		return g->anthropic ? "stop_sequence" : "stop";
	}
	if (g->res.end == TF_ENGINE_LENGTH)
		return g->anthropic ? "max_tokens" : "length";
	if (g->ncalls)
		return g->anthropic ? "tool_use" : "tool_calls";
	return g->anthropic ? "end_turn" : "stop";
}

static json_t *usage_json(struct tf_gen *g)
{
	const struct tf_engine_result *r = &g->res;
	if (g->anthropic)
		return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", (int)(r->prompt - r->cached),
				 "output_tokens", (int)r->completion, "cache_read_input_tokens",
				 (int)r->cached, "cache_creation_input_tokens", 0);
	return json_pack("{s:i,s:i,s:i,s:{s:i},s:{s:i}}", "prompt_tokens", (int)r->prompt,
			 "completion_tokens", (int)r->completion, "total_tokens",
			 (int)(r->prompt + r->completion), "prompt_tokens_details", "cached_tokens",
			 (int)r->cached, "completion_tokens_details", "reasoning_tokens",
			 (int)g->reasoning_tokens);
}

static json_t *extras_json(struct tf_gen *g)
{
	const struct tf_engine_result *r = &g->res;
	return json_pack("{s:i,s:i,s:i,s:s,s:f,s:f,s:f,s:f,s:i,s:i,s:i,s:i}", "prompt", (int)r->prompt,
			 "cached", (int)r->cached, "completion", (int)r->completion, "finish",
			 tf_engine_end_str(r->end), "queued_s", r->queued_s, "ttft_s", r->ttft_s,
			 "prefill_s", r->prefill_s, "decode_s", r->decode_s, "rounds", (int)r->rounds,
			 "drafts", (int)r->drafts, "drafted", (int)r->drafted, "accepted",
			 (int)r->accepted);
}

static bool failed(const struct tf_gen *g)
{
	return g->res.end == TF_ENGINE_FAILED;
}

static const char *fail_message(const struct tf_gen *g)
{
	return g->res.halted ? "server restarting: retry shortly" : g->res.why;
}

static void stream_close(struct tf_gen *g)
{
	const char *seq;
	const char *fr = finish_reason(g, &seq);
	if (g->req.api == TF_API_RESPONSES) {
		tf_resp_close(g);
		return;
	}
	if (g->anthropic) {
		block_close(g);
		if (failed(g)) {
			int status = g->res.halted ? 503 : 500;
			tf_gen_sse(g, tf_gen_error_json(true, status, "server_error", NULL, NULL, fail_message(g)));
			return;
		}
		tf_gen_sse(g, json_pack("{s:s,s:{s:s,s:s?},s:o}", "type", "message_delta", "delta",
				      "stop_reason", fr, "stop_sequence", seq, "usage", usage_json(g)));
		tf_gen_sse(g, json_pack("{s:s}", "type", "message_stop"));
		return;
	}
	if (failed(g)) {
		tf_gen_sse(g, tf_gen_error_json(false, 500, "server_error",
				       g->res.halted ? "server_restarting" : NULL, NULL, fail_message(g)));
	} else {
		json_t *choice = g->req.api == TF_API_CHAT
			? json_pack("{s:i,s:{},s:s}", "index", 0, "delta", "finish_reason", fr)
			: json_pack("{s:i,s:s,s:s}", "index", 0, "text", "", "finish_reason", fr);
		if (g->lp)
			json_object_set_new(choice, "logprobs", lp_json(g));
		json_t *c = chunk(g, choice);
		json_object_set_new(c, "tf", extras_json(g));
		tf_gen_sse(g, c);
		if (g->req.include_usage) {
			json_t *u = chunk(g, json_object());
			json_array_clear(json_object_get(u, "choices"));
			json_object_set_new(u, "usage", usage_json(g));
			tf_gen_sse(g, u);
		}
	}
	tf_buf_puts(g->out, "data: [DONE]\n\n");
}

static void stream_open(struct tf_gen *g)
{
	if (g->req.api == TF_API_RESPONSES) {
		tf_resp_open(g);
	} else if (g->anthropic) {
		tf_gen_sse(g, json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}}", "type",
				      "message_start", "message", "id", g->id, "type", "message", "role",
				      "assistant", "model", g->env->model, "content", "stop_reason",
				      "stop_sequence", "usage", "input_tokens", (int)g->nprompt,
				      "output_tokens", 0));
	} else if (g->req.api == TF_API_CHAT) {
		tf_gen_sse(g, chunk(g, json_pack("{s:i,s:{s:s},s:n}", "index", 0, "delta", "role",
					       "assistant", "finish_reason")));
	}
	g->t_last_write = tf_gen_now();
}

/* Reasoning memory. */
struct memo_entry {
	char *key, *val;
};

struct tf_memo {
	pthread_mutex_t mu;
	struct tf_hmap map; /* key -> slot + 1 */
	struct memo_entry *ring;
	size_t cap, next;
};

tf_status tf_memo_new(size_t cap, struct tf_memo **out)
{
	struct tf_memo *m = tf_calloc(1, sizeof(*m));
	if (!m || !(m->ring = tf_calloc(cap ? cap : 1, sizeof(*m->ring)))) {
		free(m);
		return tf_err(TF_ERR_NOMEM, "reasoning memory: out of memory");
	}
	m->cap = cap ? cap : 1;
	pthread_mutex_init(&m->mu, NULL);
	tf_hmap_init(&m->map, TF_HMAP_STR);
	*out = m;
	return TF_OK;
}

void tf_memo_free(struct tf_memo *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->cap; i++) {
		free(m->ring[i].key);
		free(m->ring[i].val);
	}
	tf_hmap_release(&m->map);
	pthread_mutex_destroy(&m->mu);
	free(m->ring);
	free(m);
}

static void memo_put(struct tf_memo *m, const char *key, const char *val, size_t vlen)
{
	char *k = tf_strdup(key), *v = tf_strndup(val, vlen);
	if (!k || !v) {
		free(k);
		free(v);
		return;
	}
	pthread_mutex_lock(&m->mu);
	uintptr_t old;
	if (tf_hmap_get_str(&m->map, k, strlen(k), &old)) { /* refresh in place */
		free(m->ring[old - 1].val);
		m->ring[old - 1].val = v;
		free(k);
	} else {
		struct memo_entry *e = &m->ring[m->next];
		if (e->key)
			tf_hmap_del_str(&m->map, e->key, strlen(e->key), NULL);
		free(e->key);
		free(e->val);
		e->key = k;
		e->val = v;
		if (tf_hmap_put_str(&m->map, k, strlen(k), m->next + 1)) {
			free(e->key);
			free(e->val);
			e->key = e->val = NULL;
		}
		m->next = (m->next + 1) % m->cap;
	}
	pthread_mutex_unlock(&m->mu);
}

static char *memo_get(struct tf_memo *m, const char *key)
{
	char *v = NULL;
	uintptr_t slot;
	pthread_mutex_lock(&m->mu);
	if (tf_hmap_get_str(&m->map, key, strlen(key), &slot))
		v = tf_strdup(m->ring[slot - 1].val);
	pthread_mutex_unlock(&m->mu);
	return v;
}

static void content_key(const char *text, size_t n, char *key)
{
	uint8_t d[TF_SHA256_LEN];
	strcpy(key, "c:");
	if (tf_sha256(text, n, d))
		memset(d, 0, sizeof(d));
	tf_hex(d, sizeof(d), key + 2);
}

static void message_text(const json_t *c, struct tf_buf *out)
{
	if (json_is_string(c)) {
		tf_buf_append(out, json_string_value(c), json_string_length(c));
		return;
	}
	size_t i;
	const json_t *p;
	json_array_foreach(c, i, p) {
		const json_t *t = json_object_get(p, "text");
		if (json_is_string(t))
			tf_buf_append(out, json_string_value(t), json_string_length(t));
	}
}

size_t tf_memo_restore(struct tf_memo *m, json_t *chat)
{
	size_t restored = 0, i;
	json_t *msg;
	json_array_foreach(json_object_get(chat, "messages"), i, msg) {
		const char *role = json_string_value(json_object_get(msg, "role"));
		if (!role || strcmp(role, "assistant") || json_object_get(msg, "reasoning_content") ||
		    json_object_get(msg, "reasoning"))
			continue;
		char *val = NULL;
		size_t k;
		const json_t *c;
		json_array_foreach(json_object_get(msg, "tool_calls"), k, c) {
			const char *id = json_string_value(json_object_get(c, "id"));
			if (id && (val = memo_get(m, id)))
				break;
		}
		if (!val) {
			struct tf_buf t = TF_BUF_INIT;
			message_text(json_object_get(msg, "content"), &t);
			if (t.len) {
				char key[2 + 2 * TF_SHA256_LEN + 1];
				content_key(t.data, t.len, key);
				val = memo_get(m, key);
			}
			tf_buf_release(&t);
		}
		if (val) {
			json_object_set_new(msg, "reasoning_content", json_string(val));
			restored++;
			free(val);
		}
	}
	return restored;
}

static void remember(struct tf_gen *g)
{
	struct tf_memo *m = g->env->memo;
	if (!m || !g->reasoning.len || g->req.api == TF_API_COMPLETIONS || failed(g))
		return;
	for (size_t i = 0; i < g->ncalls; i++)
		memo_put(m, g->calls[i].id, g->reasoning.data, g->reasoning.len);
	if (g->content.len) {
		char key[2 + 2 * TF_SHA256_LEN + 1];
		content_key(g->content.data, g->content.len, key);
		memo_put(m, key, g->reasoning.data, g->reasoning.len);
	}
}

/* Start. */
static uint64_t default_seed(const int32_t *ids, size_t n, const char *salt)
{
	struct tf_buf b = TF_BUF_INIT;
	for (size_t i = 0; i < n; i++)
		tf_buf_printf(&b, i ? ",%d" : "%d", ids[i]);
	tf_buf_printf(&b, "|%s", salt ? salt : "0");
	uint8_t d[TF_SHA256_LEN] = {0};
	tf_sha256(b.data ? b.data : "", b.len, d);
	tf_buf_release(&b);
	uint64_t s = 0;
	for (int i = 7; i >= 0; i--)
		s = s << 8 | d[i];
	return s & 0x7fffffffffffffffull;
}

tf_status tf_gen_count(const struct tf_gen_env *env, const json_t *chat, int32_t **ids,
		       size_t *n)
{
	const struct tf_family *f = env->family;
	struct tf_buf text = TF_BUF_INIT;
	bool thinking;
	tf_status rc = f->render(f->ctx, chat, &text, &thinking);
	if (!rc)
		rc = f->encode(f->ctx, text.data ? text.data : "", text.len, ids, n);
	tf_buf_release(&text);
	return rc;
}

/* The fixed start of every chunk of an OpenAI stream:
 * {"id":..,"object":..,"created":..,"model":..,"choices":[{"index":0,"delta": (or "text":) */
static void chunk_head(struct tf_gen *g)
{
	bool chat = g->req.api == TF_API_CHAT;
	tf_buf_puts(&g->head, "{\"id\":");
	tf_json_quote(&g->head, g->id, strlen(g->id));
	tf_buf_printf(&g->head, ",\"object\":\"%s\",\"created\":%lld,\"model\":",
		      chat ? "chat.completion.chunk" : "text_completion", g->created);
	tf_buf_reset(&g->fixed);
	tf_utf8_fix(g->env->model, strlen(g->env->model), &g->fixed);
	tf_json_quote(&g->head, g->fixed.data, g->fixed.len);
	tf_buf_puts(&g->head, chat ? ",\"choices\":[{\"index\":0,\"delta\":"
		    : ",\"choices\":[{\"index\":0,\"text\":");
}

/* The prompt's ids: a completion's ids or text, or a chat rendered through
 * the family (reasoning dropped from history restored first). */
static tf_status prompt_ids(struct tf_gen *g, int32_t **ids, size_t *n)
{
	const struct tf_family *f = g->env->family;
	if (g->req.api == TF_API_COMPLETIONS && g->req.ids) {
		*ids = g->req.ids;
		*n = g->req.nids;
		g->req.ids = NULL;
		return TF_OK;
	}
	if (g->req.api == TF_API_COMPLETIONS)
		return f->encode(f->ctx, g->req.prompt, g->req.prompt_len, ids, n);
	if (g->env->memo)
		tf_memo_restore(g->env->memo, g->req.chat);
	struct tf_buf text = TF_BUF_INIT;
	tf_status rc = f->render(f->ctx, g->req.chat, &text, &g->thinking);
	if (!rc)
		rc = f->encode(f->ctx, text.data ? text.data : "", text.len, ids, n);
	tf_buf_release(&text);
	return rc;
}

/* The completion limit for an n-token prompt; a refusal goes to err. */
static tf_status completion_limit(struct tf_gen *g, size_t n, struct tf_reply *err)
{
	const struct tf_gen_env *env = g->env;
	const char *where = g->req.api == TF_API_COMPLETIONS ? "prompt"
		: g->req.api == TF_API_RESPONSES ? "input" : "messages";
	uint64_t want = (uint64_t)g->req.max_tokens;
	if (n == 0) {
		tf_reply_error(err, g->anthropic, 400, "invalid_request_error", NULL, where,
			       "the prompt is empty");
		return TF_ERR_FORMAT;
	}
	if (g->req.max_tokens < 0) {
		want = n < env->context ? env->context - n : 1;
		if (want > env->max_tokens)
			want = env->max_tokens;
	}
	if (n + want > env->context) {
		tf_reply_error(err, g->anthropic, 400, "invalid_request_error", "context_length_exceeded",
			       where,
			       "This model's maximum context length is %u tokens. However, you requested "
			       "%llu tokens (%zu in the %s, %llu in the completion). Please reduce the "
			       "length of the %s or completion. (This tf-serve was started with "
			       "--context %u.)",
			       env->context, (unsigned long long)(n + want), n, where,
			       (unsigned long long)want, where, env->context);
		return TF_ERR_RANGE;
	}
	g->nprompt = (uint32_t)n;
	g->max_tokens = (uint32_t)want;
	return TF_OK;
}

/* What the engine gets: the request's sampling over the server's defaults. */
static struct tf_engine_params engine_params(const struct tf_gen *g, const int32_t *ids, size_t n)
{
	const struct tf_gen_env *env = g->env;
	const struct tf_req *q = &g->req;
	return (struct tf_engine_params){
		.max_tokens = g->max_tokens,
		.stop_eos = !q->ignore_eos,
		.background = q->background,
		.temperature = (float)(q->has_temperature ? q->temperature : env->temperature),
		.top_p = (float)(q->has_top_p ? q->top_p : env->top_p),
		.min_p = (float)(q->has_min_p ? q->min_p : env->min_p),
		.top_k = q->has_top_k ? (int32_t)q->top_k : env->top_k,
		.seed = q->has_seed ? q->seed : default_seed(ids, n, env->seed_salt),
		.logprobs = q->logprobs && q->api != TF_API_MESSAGES,
		.top_logprobs = (uint8_t)q->top_logprobs,
		.grammar_after = -1,
		.no_draft = q->no_draft,
	};
}

/* The request's constraint into p (reasoning runs free when the reply
 * starts in it); a refusal goes to err. */
static tf_status constrain(struct tf_gen *g, struct tf_engine_params *p, struct tf_reply *err)
{
	const struct tf_family *f = g->env->family;
	struct tf_grammar *gram = NULL;
	tf_status rc = tf_constrain_compile(f, &g->req, &gram);
	if (!rc && gram && g->thinking && f->think_end < 0)
		rc = tf_err(TF_ERR_UNSUPPORTED, "%s: the %s family cannot constrain output after reasoning "
			    "(turn thinking off)", g->req.guide_param, f->name);
	if (rc) {
		bool client = rc == TF_ERR_UNSUPPORTED || rc == TF_ERR_FORMAT || rc == TF_ERR_ARG;
		tf_reply_error(err, g->anthropic, client ? 400 : 500,
			       client ? "invalid_request_error" : "server_error", NULL, g->req.guide_param,
			       "%s", tf_errmsg(rc));
		tf_grammar_free(gram);
		return rc;
	}
	p->grammar = gram;
	p->grammar_after = gram && g->thinking ? f->think_end : -1;
	return TF_OK;
}

tf_status tf_gen_start(const struct tf_gen_env *env, struct tf_req *req, struct tf_gen **out,
		       struct tf_reply *err)
{
	*out = NULL;
	const struct tf_family *f = env->family;
	bool anthropic = req->api == TF_API_MESSAGES;
	struct tf_gen *g = tf_calloc(1, sizeof(*g));
	int32_t *ids = NULL;
	size_t n = 0;
	tf_status rc;
	if (!g) {
		tf_req_release(req);
		tf_reply_error(err, anthropic, 500, "server_error", NULL, NULL, "out of memory");
		return TF_ERR_NOMEM;
	}
	g->env = env;
	g->req = *req;
	memset(req, 0, sizeof(*req));
	g->anthropic = anthropic;
	g->stream = g->req.stream;
	g->block = -1;
	g->t_start = tf_gen_now();
	g->created = (long long)time(NULL);
	strcpy(g->id, anthropic ? "msg_" : g->req.api == TF_API_CHAT ? "chatcmpl-"
	       : g->req.api == TF_API_RESPONSES ? "resp_" : "cmpl-");
	tf_gen_hex(g->id + strlen(g->id), 12);
	if (!anthropic)
		chunk_head(g);
	if (g->req.api == TF_API_RESPONSES && (rc = tf_resp_start(g, err)))
		goto fail;
	if ((rc = prompt_ids(g, &ids, &n))) {
		bool bad = rc == TF_ERR_FORMAT;
		tf_reply_error(err, anthropic, bad ? 400 : 500, bad ? "invalid_request_error" : "server_error",
			       NULL, NULL, "%s", tf_errmsg(rc));
		goto fail;
	}
	if ((rc = completion_limit(g, n, err)))
		goto fail;
	struct tf_engine_params p = engine_params(g, ids, n);
	g->lp = p.logprobs;
	tf_lpout_init(&g->lpo, g->req.api == TF_API_CHAT, f, p.top_logprobs);
	if (g->lp && !(g->lpv = tf_alloc_array(256, sizeof(*g->lpv)))) {
		rc = TF_ERR_NOMEM;
		tf_reply_error(err, anthropic, 500, "server_error", NULL, NULL, "out of memory");
		goto fail;
	}
	if (g->req.api != TF_API_COMPLETIONS &&
	    (rc = f->reader_new(f->ctx, g->thinking, g->req.tools, &g->reader))) {
		tf_reply_error(err, anthropic, 500, "server_error", NULL, NULL, "%s", tf_errmsg(rc));
		goto fail;
	}
	if ((rc = constrain(g, &p, err)))
		goto fail;
	if ((rc = tf_engine_submit(env->engine, ids, n, &p, &g->job))) {
		tf_grammar_free(p.grammar);
		tf_reply_error(err, anthropic, 500, "server_error", NULL, NULL, "%s", tf_errmsg(rc));
		goto fail;
	}
	free(ids);
	*out = g;
	return TF_OK;
fail:
	free(ids);
	tf_gen_free(g);
	return rc;
}

void tf_gen_timing(struct tf_gen *g, bool on)
{
	g->timing = on;
}

bool tf_gen_streaming(const struct tf_gen *g)
{
	return g->stream;
}

tf_status tf_gen_pump(struct tf_gen *g, int wait_ms, struct tf_buf *out, bool *done)
{
	struct tf_buf sink = TF_BUF_INIT;
	g->out = out ? out : &sink;
	tf_status rc = TF_OK;
	if (!g->started) {
		g->started = true;
		if (g->stream)
			stream_open(g);
	}
	if (g->done) {
		*done = true;
		goto out;
	}
	int32_t t[256];
	double made[256];
	bool jdone = false;
	size_t n = tf_engine_job_read_timed(g->job, t, made, 256, wait_ms, &jdone);
	g->nread += (uint32_t)n;
	rc = tokens_in(g, t, made, n);
	if (rc) {
		tf_engine_job_cancel(g->job);
		goto out;
	}
	if (jdone) {
		/* The end: a cut character becomes U+FFFD, held text is let go,
		 * the reader flushes (exactly once). */
		if (g->raw.len && !g->stop_hit)
			rc = text_in(g, "\xef\xbf\xbd", 3, false);
		g->raw.len = 0;
		if (!rc)
			rc = text_in(g, "", 0, true);
		if (!rc && g->reader && !g->reader_final)
			rc = g->env->family->reader_feed(g->reader, "", 0, true, on_delta, g);
		tf_engine_job_result(g->job, &g->res);
		if (g->stop_hit && (g->res.end == TF_ENGINE_CANCELLED ||
				    (g->res.end == TF_ENGINE_LENGTH && g->nused < g->max_tokens)))
			g->res.end = TF_ENGINE_EOS;
		/* A stop string ends the reply at the token that made it, however
		 * many the engine delivered past it before the cancel took (a
		 * drafted row delivers several at once): the count is the same
		 * drafted or not. */
		if (g->stop_hit && g->res.completion > g->nused)
			g->res.completion = g->nused;
		g->t_end = tf_gen_now();
		if (g->stream)
			stream_close(g);
		remember(g);
		if (g->req.api == TF_API_RESPONSES)
			tf_resp_keep(g);
		g->done = true;
		*done = true;
		goto out;
	}
	*done = false;
	if (g->stream && g->env->keepalive_s > 0 && tf_gen_now() - g->t_last_write >= g->env->keepalive_s) {
		if (g->anthropic)
			tf_buf_puts(g->out, "event: ping\ndata: {\"type\": \"ping\"}\n\n");
		else
			tf_buf_puts(g->out, ": keepalive\n\n");
		g->t_last_write = tf_gen_now();
	}
out:
	tf_buf_release(&sink);
	g->out = NULL;
	return rc;
}

static json_t *calls_openai(struct tf_gen *g)
{
	json_t *a = json_array();
	for (size_t i = 0; i < g->ncalls; i++)
		json_array_append_new(a, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", g->calls[i].id, "type",
						   "function", "function", "name", g->calls[i].name,
						   "arguments", g->calls[i].args.data ? g->calls[i].args.data : "{}"));
	return a;
}

void tf_gen_reply(struct tf_gen *g, struct tf_reply *r)
{
	tf_buf_reset(&r->body);
	r->type = "application/json";
	r->status = 200;
	if (failed(g)) {
		int status = g->res.halted ? 503 : 500;
		tf_reply_error(r, g->anthropic, status, "server_error",
			       g->res.halted ? "server_restarting" : NULL, NULL, "%s", fail_message(g));
		if (g->res.halted)
			r->retry_after = 30;
		return;
	}
	if (g->req.api == TF_API_RESPONSES) {
		tf_resp_reply(g, r);
		return;
	}
	const char *seq;
	const char *fr = finish_reason(g, &seq);
	json_t *v;
	if (g->anthropic) {
		json_t *content = json_array();
		if (g->reasoning.len)
			json_array_append_new(content, json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking",
								 g->reasoning.data, g->reasoning.len, "signature", ""));
		if (g->content.len)
			json_array_append_new(content, json_pack("{s:s,s:s%}", "type", "text", "text",
								 g->content.data, g->content.len));
		for (size_t i = 0; i < g->ncalls; i++) {
			json_error_t e;
			const char *a = g->calls[i].args.data ? g->calls[i].args.data : "{}";
			json_t *input = json_loads(a, JSON_DECODE_ANY, &e);
			if (!json_is_object(input)) {
				json_decref(input);
				input = json_pack("{s:s}", "_raw", a);
			}
			json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
								 g->calls[i].id, "name", g->calls[i].name,
								 "input", input));
		}
		v = json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:s?,s:o}", "id", g->id, "type", "message", "role",
			      "assistant", "model", g->env->model, "content", content, "stop_reason", fr,
			      "stop_sequence", seq, "usage", usage_json(g));
	} else if (g->req.api == TF_API_CHAT) {
		json_t *msg = json_pack("{s:s}", "role", "assistant");
		json_object_set_new(msg, "content", g->content.len
				    ? json_stringn(g->content.data, g->content.len) : json_null());
		if (g->reasoning.len) {
			json_object_set_new(msg, "reasoning_content",
					    json_stringn(g->reasoning.data, g->reasoning.len));
			json_object_set_new(msg, "reasoning", json_stringn(g->reasoning.data, g->reasoning.len));
		}
		if (g->ncalls)
			json_object_set_new(msg, "tool_calls", calls_openai(g));
		v = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:o,s:s}],s:o,s:o}", "id", g->id, "object",
			      "chat.completion", "created", (json_int_t)g->created, "model", g->env->model,
			      "choices", "index", 0, "message", msg, "finish_reason", fr,
			      "usage", usage_json(g), "tf", extras_json(g));
	} else {
		v = json_pack("{s:s,s:s,s:I,s:s,s:[{s:i,s:s%,s:s}],s:o,s:o}", "id", g->id, "object",
			      "text_completion", "created", (json_int_t)g->created, "model", g->env->model,
			      "choices", "index", 0, "text", g->content.data ? g->content.data : "",
			      g->content.len, "finish_reason", fr, "usage", usage_json(g), "tf",
			      extras_json(g));
	}
	if (g->lp) /* the choice's log-probabilities, only when asked (as the reference) */
		json_object_set_new(json_array_get(json_object_get(v, "choices"), 0), "logprobs",
				    lp_json(g));
	char *s = tf_gen_dump(v);
	if (!s) {
		tf_reply_error(r, g->anthropic, 500, "server_error", NULL, NULL, "out of memory");
		return;
	}
	tf_buf_puts(&r->body, s);
	free(s);
}

void tf_gen_notify(struct tf_gen *g, void (*fn)(void *ctx), void *ctx, bool end_only)
{
	if (g->job)
		tf_engine_job_notify(g->job, fn, ctx, end_only);
}

bool tf_gen_done(const struct tf_gen *g)
{
	return g->done;
}

uint32_t tf_gen_read(const struct tf_gen *g)
{
	return g->nread;
}

void tf_gen_cancel(struct tf_gen *g)
{
	if (g->job)
		tf_engine_job_cancel(g->job);
}

void tf_gen_outcome(struct tf_gen *g, struct tf_gen_outcome *o)
{
	struct tf_engine_result r = g->res;
	if (!g->done && g->job)
		tf_engine_job_result(g->job, &r);
	*o = (struct tf_gen_outcome){
		.failed = r.end == TF_ENGINE_FAILED,
		.halted = r.halted,
		.cancelled = r.end == TF_ENGINE_CANCELLED,
		.prompt = r.prompt,
		.cached = r.cached,
		.completion = r.completion,
		.delivered = r.completion,
		.reasoning = g->reasoning_tokens,
		.ttft_s = r.ttft_s,
		.e2e_s = (g->t_end ? g->t_end : tf_gen_now()) - g->t_start,
		.queued_s = r.queued_s,
		.prefill_s = r.prefill_s,
		.decode_s = r.decode_s,
		.events = g->events,
		.itl_sum_s = g->itl_sum,
		.itl_max_s = g->itl_max,
		.itl_n = g->itl_n,
	};
}

void tf_gen_free(struct tf_gen *g)
{
	if (!g)
		return;
	tf_engine_job_free(g->job);
	if (g->reader)
		g->env->family->reader_free(g->reader);
	tf_req_release(&g->req);
	tf_buf_release(&g->raw);
	tf_buf_release(&g->fixed);
	tf_buf_release(&g->head);
	tf_buf_release(&g->held);
	tf_buf_release(&g->reasoning);
	tf_buf_release(&g->content);
	free(g->lpv);
	tf_lpout_release(&g->lpo);
	tf_resp_release(&g->resp);
	for (size_t i = 0; i < g->ncalls; i++) {
		free(g->calls[i].name);
		tf_buf_release(&g->calls[i].args);
	}
	free(g->calls);
	free(g);
}
