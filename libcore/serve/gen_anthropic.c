/* gen_anthropic.c: the Anthropic messages wire shapes of a generation
 * (gen_impl.h): message_start, content blocks (thinking, text, tool_use)
 * opened and closed around the reader's deltas, message_delta and
 * message_stop, and the whole reply's message object. Not the error
 * shape (reply.h). */
#include <string.h>

#include "serve/gen_impl.h"

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

void tf_anthropic_delta(struct tf_gen *g, const struct tf_delta *d, const char *text)
{
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
}

static json_t *usage_json(struct tf_gen *g)
{
	const struct tf_engine_result *r = &g->res;
	return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", (int)(r->prompt - r->cached),
			 "output_tokens", (int)r->completion, "cache_read_input_tokens",
			 (int)r->cached, "cache_creation_input_tokens", 0);
}

void tf_anthropic_open(struct tf_gen *g)
{
	tf_gen_sse(g, json_pack("{s:s,s:{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:{s:i,s:i}}}", "type",
			      "message_start", "message", "id", g->id, "type", "message", "role",
			      "assistant", "model", g->env->model, "content", "stop_reason",
			      "stop_sequence", "usage", "input_tokens", (int)g->nprompt,
			      "output_tokens", 0));
}

void tf_anthropic_close(struct tf_gen *g)
{
	block_close(g);
	if (tf_gen_failed(g)) {
		int status = g->res.halted ? 503 : 500;
		tf_gen_sse(g, tf_reply_error_json(true, status, "server_error", NULL, NULL,
						  tf_gen_fail_message(g)));
		return;
	}
	const char *seq;
	const char *fr = tf_gen_finish(g, &seq);
	tf_gen_sse(g, json_pack("{s:s,s:{s:s,s:s?},s:o}", "type", "message_delta", "delta",
			      "stop_reason", fr, "stop_sequence", seq, "usage", usage_json(g)));
	tf_gen_sse(g, json_pack("{s:s}", "type", "message_stop"));
}

json_t *tf_anthropic_reply(struct tf_gen *g)
{
	const char *seq;
	const char *fr = tf_gen_finish(g, &seq);
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
	return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:s?,s:o}", "id", g->id, "type", "message", "role",
			 "assistant", "model", g->env->model, "content", content, "stop_reason", fr,
			 "stop_sequence", seq, "usage", usage_json(g));
}
