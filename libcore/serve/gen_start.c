/* gen_start.c: the start of a generation (gen.h): the prompt (a
 * completion's ids or text, or a chat rendered through the family, with
 * remembered reasoning restored), its completion limit against the
 * context, the engine's sampling parameters over the server's defaults,
 * the output constraint, and the submit. A refusal fills the route's
 * error reply. Not the running (gen.c). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/digest.h"
#include "serve/constrain.h"
#include "serve/gen_impl.h"

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
		tf_openai_head(g);
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
