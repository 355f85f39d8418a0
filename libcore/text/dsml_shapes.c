/* dsml_shapes.c: DSML replies and deltas in the OpenAI and Anthropic wire
 * shapes, so that the server only serialises (see dsml.h). */
#include <stdlib.h>
#include <string.h>

#include "text/dsml.h"
#include "text/pyjson.h"

static json_t *text_value(const char *s, size_t n)
{
	return json_stringn_nocheck(s ? s : "", n);
}

static json_t *arguments_string(const struct tf_dsml_call *c)
{
	struct tf_buf b = TF_BUF_INIT;
	json_t *v = tf_dsml_call_arguments(c, &b) ? NULL : text_value(b.data, b.len);
	tf_buf_release(&b);
	return v;
}

static json_t *arguments_object(const struct tf_dsml_call *c)
{
	json_t *o = json_object();
	for (size_t i = 0; o && i < c->nargs; i++)
		if (json_object_setn_new_nocheck(o, c->args[i].key, c->args[i].key_len,
						 json_incref(c->args[i].value))) {
			json_decref(o);
			return NULL;
		}
	return o;
}

json_t *tf_dsml_openai_tool_calls(const struct tf_dsml_call *calls, size_t n)
{
	json_t *list = json_array();
	for (size_t i = 0; list && i < n; i++) {
		json_t *call = json_pack("{s:s, s:s, s:{s:s, s:o}}", "id", calls[i].id, "type", "function",
					 "function", "name", calls[i].name, "arguments", arguments_string(&calls[i]));
		if (!call || json_array_append_new(list, call)) {
			json_decref(list);
			return NULL;
		}
	}
	return list;
}

json_t *tf_dsml_openai_delta(const struct tf_dsml_delta *d, unsigned fields)
{
	switch (d->kind) {
	case TF_DSML_REASONING: {
		json_t *o = json_object();
		if (o && (fields & TF_DSML_REASONING_CONTENT) &&
		    json_object_set_new(o, "reasoning_content", text_value(d->text, d->len)))
			goto fail;
		if (o && (fields & TF_DSML_REASONING_FIELD) &&
		    json_object_set_new(o, "reasoning", text_value(d->text, d->len)))
			goto fail;
		return o;
	fail:
		json_decref(o);
		return NULL;
	}
	case TF_DSML_CONTENT:
		return json_pack("{s:o}", "content", text_value(d->text, d->len));
	case TF_DSML_CALL:
		return json_pack("{s:[{s:I, s:s, s:s, s:{s:s, s:s}}]}", "tool_calls", "index", (json_int_t)d->index,
				 "id", d->id, "type", "function", "function", "name", d->name, "arguments", "");
	case TF_DSML_ARGS:
		return json_pack("{s:[{s:I, s:{s:o}}]}", "tool_calls", "index", (json_int_t)d->index, "function",
				 "arguments", text_value(d->text, d->len));
	}
	return NULL;
}

json_t *tf_dsml_anthropic_content(const struct tf_dsml_reply *r)
{
	json_t *blocks = json_array();
	if (blocks && r->reasoning.len &&
	    json_array_append_new(blocks, json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
						    text_value(r->reasoning.data, r->reasoning.len), "signature", "")))
		goto fail;
	if (blocks && r->content.len &&
	    json_array_append_new(blocks, json_pack("{s:s, s:o}", "type", "text", "text",
						    text_value(r->content.data, r->content.len))))
		goto fail;
	for (size_t i = 0; blocks && i < r->ncalls; i++)
		if (json_array_append_new(blocks, json_pack("{s:s, s:s, s:s, s:o}", "type", "tool_use", "id",
							    r->calls[i].id, "name", r->calls[i].name, "input",
							    arguments_object(&r->calls[i]))))
			goto fail;
	return blocks;
fail:
	json_decref(blocks);
	return NULL;
}

enum block_kind { B_NONE, B_THINKING, B_TEXT, B_TOOL };

struct tf_dsml_anthropic {
	enum block_kind open;   /* the block now open */
	long index;             /* its index (-1 before the first) */
	size_t call;            /* B_TOOL: which call */
	struct tf_buf args;     /* B_TOOL: its arguments so far */
	struct tf_buf deferred; /* text that came while a tool_use was open */
};

struct tf_dsml_anthropic *tf_dsml_anthropic_new(void)
{
	struct tf_dsml_anthropic *a = calloc(1, sizeof *a);
	if (a)
		a->index = -1;
	return a;
}

void tf_dsml_anthropic_free(struct tf_dsml_anthropic *a)
{
	if (!a)
		return;
	tf_buf_release(&a->args);
	tf_buf_release(&a->deferred);
	free(a);
}

static tf_status add(json_t *events, json_t *e)
{
	return e && !json_array_append_new(events, e) ? TF_OK : tf_err(TF_ERR_NOMEM, "Anthropic events");
}

static tf_status close_block(struct tf_dsml_anthropic *a, json_t *events)
{
	if (a->open == B_NONE)
		return TF_OK;
	a->open = B_NONE;
	return add(events, json_pack("{s:s, s:I}", "type", "content_block_stop", "index", (json_int_t)a->index));
}

static tf_status start_block(struct tf_dsml_anthropic *a, json_t *events, enum block_kind kind, json_t *block)
{
	tf_status st = close_block(a, events);
	if (st) {
		json_decref(block);
		return st;
	}
	a->open = kind;
	a->index++;
	return add(events, json_pack("{s:s, s:I, s:o}", "type", "content_block_start", "index", (json_int_t)a->index,
				     "content_block", block));
}

static tf_status text_delta(struct tf_dsml_anthropic *a, json_t *events, bool thinking, const char *t, size_t n)
{
	enum block_kind kind = thinking ? B_THINKING : B_TEXT;
	tf_status st = TF_OK;
	if (a->open != kind)
		st = start_block(a, events, kind,
				 thinking ? json_pack("{s:s, s:s, s:s}", "type", "thinking", "thinking", "", "signature", "") :
					    json_pack("{s:s, s:s}", "type", "text", "text", ""));
	if (st)
		return st;
	return add(events, json_pack("{s:s, s:I, s:{s:s, s:o}}", "type", "content_block_delta", "index",
				     (json_int_t)a->index, "delta", "type", thinking ? "thinking_delta" : "text_delta",
				     thinking ? "thinking" : "text", text_value(t, n)));
}

/* Close the tool_use block and let the deferred text out. */
static tf_status end_tool(struct tf_dsml_anthropic *a, json_t *events)
{
	tf_status st = close_block(a, events);
	if (!st && a->deferred.len)
		st = text_delta(a, events, false, a->deferred.data, a->deferred.len);
	tf_buf_reset(&a->deferred);
	return st;
}

static bool parses_as_object(const struct tf_buf *b)
{
	json_t *v = tf_pyjson_loads(b->data ? b->data : "", b->len);
	bool ok = json_is_object(v);
	json_decref(v);
	return ok;
}

tf_status tf_dsml_anthropic_events(struct tf_dsml_anthropic *a, const struct tf_dsml_delta *deltas, size_t n,
				   bool finished, json_t *events)
{
	tf_status st = TF_OK;
	for (size_t i = 0; i < n && !st; i++) {
		const struct tf_dsml_delta *d = &deltas[i];
		switch (d->kind) {
		case TF_DSML_REASONING:
		case TF_DSML_CONTENT:
			if (a->open == B_TOOL)
				st = tf_buf_append(&a->deferred, d->text, d->len);
			else
				st = text_delta(a, events, d->kind == TF_DSML_REASONING, d->text, d->len);
			break;
		case TF_DSML_CALL:
			if (a->open == B_TOOL && (st = end_tool(a, events)))
				break;
			st = start_block(a, events, B_TOOL,
					 json_pack("{s:s, s:s, s:s, s:{}}", "type", "tool_use", "id", d->id, "name",
						   d->name, "input"));
			a->call = d->index;
			tf_buf_reset(&a->args);
			break;
		case TF_DSML_ARGS:
			if (a->open != B_TOOL || a->call != d->index)
				break; /* a block already closed: its arguments were whole */
			if ((st = add(events, json_pack("{s:s, s:I, s:{s:s, s:o}}", "type", "content_block_delta",
							"index", (json_int_t)a->index, "delta", "type",
							"input_json_delta", "partial_json", text_value(d->text, d->len)))) ||
			    (st = tf_buf_append(&a->args, d->text, d->len)))
				break;
			if (parses_as_object(&a->args))
				st = end_tool(a, events);
			break;
		}
	}
	if (!st && finished) {
		if (a->open == B_TOOL)
			st = end_tool(a, events);
		if (!st)
			st = close_block(a, events);
	}
	return st;
}
