/* gen_responses.c: the OpenAI Responses API's wire shapes for a
 * generation (gen.h): output items (reasoning, message, function_call)
 * opened in the order the reader's deltas come, the response object, and
 * the stream's events (response.created, response.in_progress, per item
 * output_item.added, content_part.added, the .delta and .done events,
 * output_item.done, then response.completed, response.incomplete or
 * response.failed), each with its sequence_number; and the store's side
 * of a generation (store, previous_response_id) and of GET / DELETE
 * /v1/responses/{id}, over rstore.h. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/log.h"
#include "serve/gen_impl.h"
#include "serve/rstore.h"

static struct resp_item *last(struct tf_gen *g)
{
	return g->resp.n ? &g->resp.items[g->resp.n - 1] : NULL;
}

/* An event of type t with its sequence number; the caller adds the rest. */
static json_t *event(struct tf_gen *g, const char *t)
{
	return json_pack("{s:s,s:I}", "type", t, "sequence_number", (json_int_t)g->resp.seq++);
}

static json_t *part_json(const struct resp_item *it, bool done)
{
	const char *text = done && it->text.data ? it->text.data : "";
	size_t n = done ? it->text.len : 0;
	if (it->kind == TF_DELTA_REASONING)
		return json_pack("{s:s,s:s%}", "type", "reasoning_text", "text", text, n);
	return json_pack("{s:s,s:s%,s:[],s:[]}", "type", "output_text", "text", text, n, "annotations",
			 "logprobs");
}

/* An output item as the client sees it: whole once done, empty before. */
static json_t *item_json(struct tf_gen *g, const struct resp_item *it, bool done)
{
	bool cut = g->res.end == TF_ENGINE_LENGTH && it == &g->resp.items[g->resp.n - 1];
	const char *status = !done ? "in_progress" : cut ? "incomplete" : "completed";
	if (it->kind == TF_DELTA_CALL) {
		const struct call *c = &g->calls[it->call];
		const char *args = done && c->args.data ? c->args.data : done ? "{}" : "";
		return json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", it->id, "type", "function_call",
				 "status", status, "call_id", c->id, "name", c->name, "arguments", args);
	}
	json_t *content = json_array(); /* a stream's part comes with content_part.added */
	if (done)
		json_array_append_new(content, part_json(it, true));
	if (it->kind == TF_DELTA_REASONING)
		return json_pack("{s:s,s:s,s:s,s:[],s:o}", "id", it->id, "type", "reasoning", "status",
				 status, "summary", "content", content);
	return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", it->id, "type", "message", "status", status,
			 "role", "assistant", "content", content);
}

static json_t *usage_json(struct tf_gen *g)
{
	const struct tf_engine_result *r = &g->res;
	return json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens", (int)r->prompt,
			 "input_tokens_details", "cached_tokens", (int)r->cached, "output_tokens",
			 (int)r->completion, "output_tokens_details", "reasoning_tokens",
			 (int)g->reasoning_tokens, "total_tokens", (int)(r->prompt + r->completion));
}

/* A field of the request echoed back, or dflt (taken over) when absent. */
static json_t *echo(struct tf_gen *g, const char *key, json_t *dflt)
{
	json_t *v = json_object_get(g->req.body, key);
	if (v && !json_is_null(v)) {
		json_decref(dflt);
		return json_deep_copy(v);
	}
	return dflt;
}

/* The response object. status: in_progress (the stream's first events),
 * completed, incomplete or failed; output and usage once finished. */
static json_t *response_json(struct tf_gen *g, const char *status)
{
	bool fin = strcmp(status, "in_progress") != 0;
	json_t *output = json_array();
	for (size_t i = 0; fin && i < g->resp.n; i++)
		json_array_append_new(output, item_json(g, &g->resp.items[i], true));
	const struct tf_req *q = &g->req;
	const struct tf_gen_env *env = g->env;
	json_t *reasoning = json_pack("{s:n,s:n}", "effort", "summary");
	const json_t *eff = json_object_get(json_object_get(q->body, "reasoning"), "effort");
	if (json_is_string(eff))
		json_object_set(reasoning, "effort", (json_t *)eff);
	json_t *v = json_pack("{s:s,s:s,s:I,s:s,s:n,s:n,s:o,s:o,s:s,s:o}", "id", g->id, "object",
			      "response", "created_at", (json_int_t)g->created, "status", status,
			      "error", "incomplete_details", "instructions",
			      echo(g, "instructions", json_null()), "max_output_tokens",
			      echo(g, "max_output_tokens", json_null()), "model", env->model, "output",
			      output);
	json_object_set_new(v, "parallel_tool_calls", echo(g, "parallel_tool_calls", json_true()));
	json_object_set_new(v, "previous_response_id",
			    q->prev_id ? json_string(q->prev_id) : json_null());
	json_object_set_new(v, "reasoning", reasoning);
	json_object_set_new(v, "store", json_boolean(q->store));
	json_object_set_new(v, "temperature",
			    json_real(q->has_temperature ? q->temperature : env->temperature));
	json_object_set_new(v, "text", echo(g, "text", json_pack("{s:{s:s}}", "format", "type", "text")));
	json_object_set_new(v, "tool_choice", echo(g, "tool_choice", json_string("auto")));
	json_object_set_new(v, "tools", echo(g, "tools", json_array()));
	json_object_set_new(v, "top_p", json_real(q->has_top_p ? q->top_p : env->top_p));
	json_object_set_new(v, "truncation", json_string("disabled"));
	json_object_set_new(v, "metadata", echo(g, "metadata", json_object()));
	json_object_set_new(v, "usage", fin ? usage_json(g) : json_null());
	if (!strcmp(status, "incomplete"))
		json_object_set_new(v, "incomplete_details",
				    json_pack("{s:s}", "reason", "max_output_tokens"));
	if (!strcmp(status, "failed"))
		json_object_set_new(v, "error", json_pack("{s:s,s:s}", "code",
							  g->res.halted ? "server_restarting" : "server_error",
							  "message", g->res.halted
							  ? "server restarting: retry shortly" : g->res.why));
	return v;
}

static const char *status_of(struct tf_gen *g)
{
	if (g->res.end == TF_ENGINE_FAILED)
		return "failed";
	return g->res.end == TF_ENGINE_LENGTH ? "incomplete" : "completed";
}

void tf_resp_open(struct tf_gen *g)
{
	json_t *e = event(g, "response.created");
	json_object_set_new(e, "response", response_json(g, "in_progress"));
	tf_gen_sse(g, e);
	e = event(g, "response.in_progress");
	json_object_set_new(e, "response", response_json(g, "in_progress"));
	tf_gen_sse(g, e);
}

/* An event about item i: item_id and output_index (and content_index for
 * text parts) set. */
static json_t *item_event(struct tf_gen *g, const char *t, size_t i)
{
	json_t *e = event(g, t);
	json_object_set_new(e, "item_id", json_string(g->resp.items[i].id));
	json_object_set_new(e, "output_index", json_integer((json_int_t)i));
	if (g->resp.items[i].kind != TF_DELTA_CALL)
		json_object_set_new(e, "content_index", json_integer(0));
	return e;
}

static void item_close(struct tf_gen *g)
{
	struct resp_item *it = last(g);
	if (!it || !g->resp.open)
		return;
	g->resp.open = false;
	if (!g->stream)
		return;
	size_t i = g->resp.n - 1;
	json_t *e;
	if (it->kind == TF_DELTA_CALL) {
		const struct call *c = &g->calls[it->call];
		e = item_event(g, "response.function_call_arguments.done", i);
		json_object_set_new(e, "name", json_string(c->name));
		json_object_set_new(e, "arguments", json_string(c->args.data ? c->args.data : "{}"));
		tf_gen_sse(g, e);
	} else {
		bool th = it->kind == TF_DELTA_REASONING;
		e = item_event(g, th ? "response.reasoning_text.done" : "response.output_text.done", i);
		json_object_set_new(e, "text", json_stringn(it->text.data ? it->text.data : "", it->text.len));
		if (!th)
			json_object_set_new(e, "logprobs", json_array());
		tf_gen_sse(g, e);
		e = item_event(g, "response.content_part.done", i);
		json_object_set_new(e, "part", part_json(it, true));
		tf_gen_sse(g, e);
	}
	e = event(g, "response.output_item.done");
	json_object_set_new(e, "output_index", json_integer((json_int_t)i));
	json_object_set_new(e, "item", item_json(g, it, true));
	tf_gen_sse(g, e);
}

static tf_status item_open(struct tf_gen *g, enum tf_delta_kind kind, int call)
{
	item_close(g);
	if (tf_realloc_array(&g->resp.items, g->resp.n + 1, sizeof(*g->resp.items)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	struct resp_item *it = &g->resp.items[g->resp.n++];
	memset(it, 0, sizeof(*it));
	it->kind = kind;
	it->call = call;
	strcpy(it->id, kind == TF_DELTA_CALL ? "fc_" : kind == TF_DELTA_REASONING ? "rs_" : "msg_");
	tf_gen_hex(it->id + strlen(it->id), 12);
	g->resp.open = true;
	if (!g->stream)
		return TF_OK;
	size_t i = g->resp.n - 1;
	json_t *e = event(g, "response.output_item.added");
	json_object_set_new(e, "output_index", json_integer((json_int_t)i));
	json_object_set_new(e, "item", item_json(g, it, false));
	tf_gen_sse(g, e);
	if (kind != TF_DELTA_CALL) {
		e = item_event(g, "response.content_part.added", i);
		json_object_set_new(e, "part", part_json(it, false));
		tf_gen_sse(g, e);
	}
	return TF_OK;
}

tf_status tf_resp_delta(struct tf_gen *g, const struct tf_delta *d)
{
	struct resp_item *it = last(g);
	tf_status rc = TF_OK;
	switch (d->kind) {
	case TF_DELTA_REASONING:
	case TF_DELTA_CONTENT:
		if (!it || !g->resp.open || it->kind != d->kind) {
			if ((rc = item_open(g, d->kind, 0)))
				return rc;
			it = last(g);
		}
		if (tf_buf_append(&it->text, d->text, d->len))
			return tf_err(TF_ERR_NOMEM, "out of memory");
		break;
	case TF_DELTA_CALL:
		return item_open(g, TF_DELTA_CALL, d->index);
	case TF_DELTA_ARGS:
		if (!it || !g->resp.open || it->kind != TF_DELTA_CALL || it->call != d->index)
			return TF_OK; /* a call's arguments after it closed: kept in calls[], not streamed */
		break;
	}
	if (!g->stream)
		return TF_OK;
	if (g->timing && g->t_made > 0)
		tf_buf_printf(g->out, ": tf-made %lld\n", (long long)(g->t_made * 1e9));
	const char *t = d->kind == TF_DELTA_ARGS ? "response.function_call_arguments.delta"
		: d->kind == TF_DELTA_REASONING ? "response.reasoning_text.delta"
		: "response.output_text.delta";
	json_t *e = item_event(g, t, g->resp.n - 1);
	json_object_set_new(e, "delta", json_stringn(d->text ? d->text : "", d->len));
	if (d->kind == TF_DELTA_CONTENT)
		json_object_set_new(e, "logprobs", json_array());
	tf_gen_sse(g, e);
	tf_gen_note_event(g);
	return rc;
}

void tf_resp_close(struct tf_gen *g)
{
	item_close(g);
	const char *status = status_of(g);
	char t[40];
	snprintf(t, sizeof(t), "response.%s", status);
	json_t *e = event(g, t);
	json_object_set_new(e, "response", response_json(g, status));
	tf_gen_sse(g, e);
}

void tf_resp_reply(struct tf_gen *g, struct tf_reply *r)
{
	item_close(g);
	tf_gen_reply_json(g, r, response_json(g, status_of(g)));
}

/* OpenAI's error shape with every key: {"error": {message, type, param,
 * code: null}}. */
static void openai_error(struct tf_reply *r, int status, const char *param, const char *msg)
{
	tf_buf_reset(&r->body);
	r->status = status;
	r->type = "application/json";
	char *s = tf_reply_dump(json_pack("{s:{s:s,s:s,s:s?,s:n}}", "error", "message", msg, "type",
					"invalid_request_error", "param", param, "code"));
	if (s)
		tf_buf_puts(&r->body, s);
	free(s);
}

tf_status tf_resp_start(struct tf_gen *g, struct tf_reply *err)
{
	struct tf_req *q = &g->req;
	struct tf_rstore *st = g->env->rstore;
	char m[160];
	if (!st) {
		const char *param = q->prev_id ? "previous_response_id"
			: q->has_store && q->store ? "store" : NULL;
		q->store = false;
		if (!param)
			return TF_OK;
		snprintf(m, sizeof(m), "%s is not available: this tf-serve keeps no responses "
			 "(--responses-store 0)", param);
		openai_error(err, 400, param, m);
		return TF_ERR_UNSUPPORTED;
	}
	if (!q->prev_id)
		return TF_OK;
	tf_status rc = tf_rstore_get(st, q->prev_id, NULL, &g->resp.prior);
	if (rc) {
		snprintf(m, sizeof(m), "Previous response with id '%.64s' not found.", q->prev_id);
		if (rc == TF_ERR_NOTFOUND)
			openai_error(err, 404, "previous_response_id", m);
		else
			tf_reply_error(err, false, 500, "server_error", NULL, NULL, "%s", tf_errmsg(rc));
		return rc;
	}
	if ((rc = tf_req_prior(q, g->resp.prior))) {
		openai_error(err, 400, "previous_response_id", tf_errmsg(rc));
		return rc;
	}
	return TF_OK;
}

void tf_resp_keep(struct tf_gen *g)
{
	struct tf_rstore *st = g->env->rstore;
	if (!st || !g->req.store || g->res.end == TF_ENGINE_FAILED ||
	    g->res.end == TF_ENGINE_CANCELLED)
		return;
	/* the conversation: the chain's inputs, this input, this output */
	json_t *items = g->resp.prior ? json_deep_copy(g->resp.prior) : json_array();
	json_array_extend(items, g->req.input_items);
	for (size_t i = 0; i < g->resp.n; i++)
		json_array_append_new(items, item_json(g, &g->resp.items[i], true));
	json_t *v = response_json(g, status_of(g));
	tf_status rc = tf_rstore_put(st, g->id, v, items);
	if (rc)
		tf_log(TF_LOG_WARN, "%s: not stored: %s", g->id, tf_errmsg(rc));
	json_decref(v);
	json_decref(items);
}

void tf_resp_stored(const struct tf_gen_env *env, const char *method, const char *id,
		    struct tf_reply *r)
{
	char m[160];
	tf_buf_reset(&r->body);
	r->status = 200;
	r->type = "application/json";
	if (!env->rstore) {
		openai_error(r, 400, NULL, "this tf-serve keeps no responses (--responses-store 0)");
		return;
	}
	snprintf(m, sizeof(m), "Response with id '%.64s' not found.", id);
	if (!strcmp(method, "DELETE")) {
		if (!tf_rstore_del(env->rstore, id)) {
			openai_error(r, 404, NULL, m);
			return;
		}
		char *s = tf_reply_dump(json_pack("{s:s,s:s,s:b}", "id", id, "object", "response.deleted",
						"deleted", 1));
		if (s)
			tf_buf_puts(&r->body, s);
		free(s);
		return;
	}
	json_t *v;
	tf_status rc = tf_rstore_get(env->rstore, id, &v, NULL);
	if (rc == TF_ERR_NOTFOUND) {
		openai_error(r, 404, NULL, m);
		return;
	}
	char *s = rc ? NULL : tf_reply_dump(v);
	if (!s) {
		tf_reply_error(r, false, 500, "server_error", NULL, NULL, "out of memory");
		return;
	}
	tf_buf_puts(&r->body, s);
	free(s);
}

void tf_resp_release(struct tf_resp *s)
{
	json_decref(s->prior);
	for (size_t i = 0; i < s->n; i++)
		tf_buf_release(&s->items[i].text);
	free(s->items);
	memset(s, 0, sizeof(*s));
}
