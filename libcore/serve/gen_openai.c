/* gen_openai.c: the OpenAI chat and completion wire shapes of a
 * generation (gen_impl.h): stream chunks (the frequent content and
 * reasoning deltas written straight as bytes, the rest through jansson),
 * the finish chunk with usage and tf's extras, and the whole reply's
 * object. Not the Responses API (gen_responses.c) nor the error shapes
 * (reply.h). */
#include <string.h>

#include "serve/gen_impl.h"

static json_t *chunk(struct tf_gen *g, json_t *choice)
{
	bool chat = g->req.api == TF_API_CHAT;
	return json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", g->id, "object",
			 chat ? "chat.completion.chunk" : "text_completion", "created",
			 (json_int_t)g->created, "model", g->env->model, "choices", choice);
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

/* The fixed start of every chunk of an OpenAI stream:
 * {"id":..,"object":..,"created":..,"model":..,"choices":[{"index":0,"delta": (or "text":) */
void tf_openai_head(struct tf_gen *g)
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

void tf_openai_open(struct tf_gen *g)
{
	if (g->req.api == TF_API_CHAT)
		tf_gen_sse(g, chunk(g, json_pack("{s:i,s:{s:s},s:n}", "index", 0, "delta", "role",
					       "assistant", "finish_reason")));
}

void tf_openai_delta(struct tf_gen *g, const struct tf_delta *d, const char *text)
{
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

static json_t *usage_json(struct tf_gen *g)
{
	const struct tf_engine_result *r = &g->res;
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

void tf_openai_close(struct tf_gen *g)
{
	if (tf_gen_failed(g)) {
		tf_gen_sse(g, tf_reply_error_json(false, 500, "server_error",
						  g->res.halted ? "server_restarting" : NULL, NULL,
						  tf_gen_fail_message(g)));
	} else {
		const char *seq;
		const char *fr = tf_gen_finish(g, &seq);
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

static json_t *calls_openai(struct tf_gen *g)
{
	json_t *a = json_array();
	for (size_t i = 0; i < g->ncalls; i++)
		json_array_append_new(a, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", g->calls[i].id, "type",
						   "function", "function", "name", g->calls[i].name,
						   "arguments", g->calls[i].args.data ? g->calls[i].args.data : "{}"));
	return a;
}

json_t *tf_openai_reply(struct tf_gen *g)
{
	const char *seq;
	const char *fr = tf_gen_finish(g, &seq);
	json_t *v;
	if (g->req.api == TF_API_CHAT) {
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
	return v;
}
