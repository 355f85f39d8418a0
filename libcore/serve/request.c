/* request.c: validation and normalisation of generation request bodies. */
#include "serve/request.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/buf.h"

/* A refusal: the 400 message. The reference names a parameter only for
 * context and vocabulary refusals, so param is recorded by those alone. */
#define BAD(r, p, ...) ((void)(p), tf_err(TF_ERR_FORMAT, __VA_ARGS__))

static tf_status number(struct tf_req *r, const char *key, bool *has, double *out)
{
	const json_t *v = json_object_get(r->body, key);
	if (!v || json_is_null(v))
		return TF_OK;
	if (!json_is_number(v) || !isfinite(json_number_value(v)))
		return BAD(r, key, "%s must be a finite number or null", key);
	*out = json_number_value(v);
	*has = true;
	return TF_OK;
}

static tf_status integer(struct tf_req *r, const char *key, int64_t min, int64_t max,
			 bool *has, int64_t *out)
{
	const json_t *v = json_object_get(r->body, key);
	if (!v || json_is_null(v))
		return TF_OK;
	int64_t x;
	if (json_is_integer(v))
		x = json_integer_value(v);
	else if (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)) &&
		 fabs(json_real_value(v)) < 9e15)
		x = (int64_t)json_real_value(v);
	else
		return BAD(r, key, "%s must be an integer or null", key);
	if (x < min || x > max)
		return BAD(r, key, "%s must be between %lld and %lld", key, (long long)min,
			   (long long)max);
	*out = x;
	if (has)
		*has = true;
	return TF_OK;
}

static tf_status boolean(struct tf_req *r, const char *key, bool *out)
{
	const json_t *v = json_object_get(r->body, key);
	if (!v || json_is_null(v))
		return TF_OK;
	if (!json_is_boolean(v))
		return BAD(r, key, "%s must be true, false or null", key);
	*out = json_is_true(v);
	return TF_OK;
}

static tf_status stops(struct tf_req *r, const char *key)
{
	const json_t *v = json_object_get(r->body, key);
	if (!v || json_is_null(v))
		return TF_OK;
	if (json_is_string(v)) {
		if (json_string_length(v))
			r->stop[r->nstop++] = json_string_value(v);
		return TF_OK;
	}
	if (!json_is_array(v) || json_array_size(v) > TF_REQ_MAX_STOP)
		return BAD(r, key, "%s must be a string or a list of at most %d strings", key,
			   TF_REQ_MAX_STOP);
	size_t i;
	const json_t *s;
	json_array_foreach(v, i, s) {
		if (!json_is_string(s))
			return BAD(r, key, "%s must be a string or a list of at most %d strings", key,
				   TF_REQ_MAX_STOP);
		if (json_string_length(s))
			r->stop[r->nstop++] = json_string_value(s);
	}
	return TF_OK;
}

/* Keys whose strings are text the renderers take whole, by length: there
 * U+0000 is a character like any other. */
static const char *const text_keys[] = {"content", "text", "prompt", "reasoning_content", "thinking",
					"system", "arguments", NULL};
/* Subtrees passed on as JSON text (tool inputs and schemas): any string. */
static const char *const json_keys[] = {"input", "parameters", "input_schema", NULL};

static bool listed(const char *const *keys, const char *k)
{
	for (; *keys; keys++)
		if (!strcmp(*keys, k))
			return true;
	return false;
}

/* Everywhere else (the model, roles, names, ids, stops, choices) a string
 * is read up to its first NUL; the key of one that holds a NUL, refused
 * rather than cut, or NULL. */
static const char *nul_in(const json_t *v, const char *key)
{
	const char *bad = NULL, *k;
	size_t i;
	const json_t *x;
	if (json_is_string(v))
		return strlen(json_string_value(v)) != json_string_length(v) &&
		       !(key && listed(text_keys, key)) ? (key ? key : "the body") : NULL;
	if (json_is_array(v))
		json_array_foreach(v, i, x)
			if ((bad = nul_in(x, key)))
				return bad;
	if (json_is_object(v))
		json_object_foreach((json_t *)v, k, x)
			if (!listed(json_keys, k) && (bad = nul_in(x, k)))
				return bad;
	return NULL;
}

/* Sampling and limits shared by every generation route. */
static tf_status common(struct tf_req *r)
{
	tf_status rc;
	const json_t *m = json_object_get(r->body, "model");
	if (m && !json_is_null(m) && !json_is_string(m))
		return BAD(r, "model", "model must be a string");
	r->model = json_string_value(m);
	if ((rc = boolean(r, "stream", &r->stream)) ||
	    (rc = number(r, "temperature", &r->has_temperature, &r->temperature)) ||
	    (rc = number(r, "top_p", &r->has_top_p, &r->top_p)) ||
	    (rc = number(r, "min_p", &r->has_min_p, &r->min_p)) ||
	    (rc = integer(r, "top_k", -1, 1 << 30, &r->has_top_k, &r->top_k)) ||
	    (rc = boolean(r, "ignore_eos", &r->ignore_eos)))
		return rc;
	if (r->has_temperature && (r->temperature < 0 || r->temperature > 100))
		return BAD(r, "temperature", "temperature must be between 0 and 100");
	if (r->has_top_p && (r->top_p <= 0 || r->top_p > 1))
		return BAD(r, "top_p", "top_p must be in (0, 1]");
	if (r->has_min_p && (r->min_p < 0 || r->min_p > 1))
		return BAD(r, "min_p", "min_p must be in [0, 1]");
	int64_t seed = 0;
	if ((rc = integer(r, "seed", INT64_MIN, INT64_MAX, &r->has_seed, &seed)))
		return rc;
	r->seed = (uint64_t)seed;
	const json_t *d = json_object_get(r->body, "draft");
	if (d && !json_is_null(d) && !json_is_boolean(d))
		return BAD(r, "draft", "draft must be a boolean");
	r->no_draft = json_is_false(d);
	const json_t *p = json_object_get(r->body, "priority");
	if (p && !json_is_null(p)) {
		if (json_is_string(p))
			r->background = !strcmp(json_string_value(p), "background");
		else if (!json_is_integer(p))
			return BAD(r, "priority", "priority must be \"background\", a string or an integer");
	}
	return TF_OK;
}

/* One guide field found: the first wins, a second is refused. */
static tf_status guide_set(struct tf_req *r, const char *key, enum tf_req_guide g, const json_t *v)
{
	if (r->guide != TF_GUIDE_NONE)
		return BAD(r, key, "%s and %s cannot be given together: constrain the output one way",
			   r->guide_param, key);
	r->guide = g;
	r->guide_value = v;
	r->guide_param = key;
	return TF_OK;
}

static tf_status guides_check(struct tf_req *r);

/* response_format and vLLM's guided_json, guided_regex, guided_choice. */
static tf_status guides(struct tf_req *r)
{
	tf_status rc;
	const json_t *rf = json_object_get(r->body, "response_format");
	if (rf && !json_is_null(rf)) {
		const char *t = json_string_value(json_object_get(rf, "type"));
		if (!json_is_object(rf) || !t)
			return BAD(r, "response_format", "response_format must be an object with a type");
		if (!strcmp(t, "json_object")) {
			if ((rc = guide_set(r, "response_format", TF_GUIDE_JSON, NULL)))
				return rc;
		} else if (!strcmp(t, "json_schema")) {
			const json_t *js = json_object_get(rf, "json_schema");
			const json_t *sc = json_object_get(js, "schema");
			if (!json_is_object(js) || !(json_is_object(sc) || json_is_boolean(sc)))
				return BAD(r, "response_format",
					   "response_format json_schema needs json_schema.schema, a JSON schema");
			if ((rc = guide_set(r, "response_format", TF_GUIDE_SCHEMA, sc)))
				return rc;
		} else if (strcmp(t, "text")) {
			return BAD(r, "response_format",
				   "response_format type must be text, json_object or json_schema, not '%s'", t);
		}
	}
	const json_t *gj = json_object_get(r->body, "guided_json");
	if (gj && !json_is_null(gj)) {
		if (json_is_string(gj)) {
			json_error_t e;
			if (!(r->guide_own = json_loads(json_string_value(gj), JSON_DECODE_ANY, &e)))
				return BAD(r, "guided_json", "guided_json is not valid JSON: %s", e.text);
			gj = r->guide_own;
		}
		if (!json_is_object(gj) && !json_is_boolean(gj))
			return BAD(r, "guided_json", "guided_json must be a JSON schema");
		if ((rc = guide_set(r, "guided_json", TF_GUIDE_SCHEMA, gj)))
			return rc;
	}
	const json_t *gr = json_object_get(r->body, "guided_regex");
	if (gr && !json_is_null(gr)) {
		if (!json_is_string(gr))
			return BAD(r, "guided_regex", "guided_regex must be a string");
		if ((rc = guide_set(r, "guided_regex", TF_GUIDE_REGEX, gr)))
			return rc;
	}
	const json_t *gc = json_object_get(r->body, "guided_choice");
	if (gc && !json_is_null(gc)) {
		size_t i;
		const json_t *x;
		if (!json_is_array(gc) || !json_array_size(gc))
			return BAD(r, "guided_choice", "guided_choice must be a non-empty list of strings");
		json_array_foreach(gc, i, x)
			if (!json_is_string(x) || !json_string_length(x))
				return BAD(r, "guided_choice", "guided_choice must be a non-empty list of strings");
		if ((rc = guide_set(r, "guided_choice", TF_GUIDE_CHOICE, gc)))
			return rc;
	}
	return guides_check(r);
}

/* What a constraint cannot go with. */
static tf_status guides_check(struct tf_req *r)
{
	if (r->guide == TF_GUIDE_NONE)
		return TF_OK;
	if (r->ignore_eos)
		return BAD(r, "ignore_eos", "ignore_eos cannot be set with %s: a constrained reply ends "
			   "where the output is whole", r->guide_param);
	if (r->logprobs)
		return BAD(r, "logprobs", "logprobs are not available with %s", r->guide_param);
	return TF_OK;
}

/* Strict tools and forced calls (after the tools and any other guide are
 * read): force is the tool's name, "" for any tool, NULL for the model's
 * choice. The call block's grammar is the guide (serve/constrain.c). */
static tf_status tools_guide(struct tf_req *r, const char *force)
{
	if (!r->tools)
		return TF_OK;
	bool strict = false;
	size_t i;
	const json_t *t;
	json_array_foreach(r->tools, i, t)
		strict |= json_is_true(json_object_get(json_object_get(t, "function"), "strict"));
	if (!strict && !force)
		return TF_OK;
	const char *why = force ? "tool_choice" : "tools";
	if (force && *force) {
		bool found = false;
		json_array_foreach(r->tools, i, t)
			found |= !strcmp(json_string_value(json_object_get(json_object_get(t, "function"),
									  "name")), force);
		if (!found)
			return BAD(r, "tool_choice", "tool_choice names '%s', which is not among the tools", force);
	}
	if (r->guide != TF_GUIDE_NONE)
		return BAD(r, why, "%s and %s cannot be given together: a %s call is constrained to its "
			   "schema", r->guide_param, strict ? "strict tools" : "a forced tool call",
			   strict ? "strict" : "forced");
	r->guide = TF_GUIDE_TOOLS;
	r->guide_value = r->tools;
	r->guide_param = why;
	r->force = force;
	return guides_check(r);
}

/* OpenAI's tool_choice: "required" forces a call, {type: function,
 * function: {name}} (or Responses' {type: function, name}) that one. */
static const char *openai_force(const json_t *choice)
{
	const char *s = json_string_value(choice);
	if (s)
		return !strcmp(s, "required") ? "" : NULL;
	const char *type = json_string_value(json_object_get(choice, "type"));
	const char *name = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
	if (!name)
		name = json_string_value(json_object_get(choice, "name"));
	return type && !strcmp(type, "function") && name ? name : NULL;
}

static tf_status max_tokens(struct tf_req *r, const char *key)
{
	return integer(r, key, 1, INT32_MAX, NULL, &r->max_tokens);
}

static tf_status parse_chat(struct tf_req *r)
{
	tf_status rc;
	const json_t *msgs = json_object_get(r->body, "messages");
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return BAD(r, "messages", "messages must be a non-empty list");
	size_t i;
	const json_t *m;
	json_array_foreach(msgs, i, m) {
		if (!json_is_object(m) || !json_is_string(json_object_get(m, "role")))
			return BAD(r, "messages", "messages[%zu] must be an object with a string role", i);
	}
	if ((rc = max_tokens(r, "max_tokens")) || (rc = max_tokens(r, "max_completion_tokens")) ||
	    (rc = stops(r, "stop")))
		return rc;
	const json_t *kw = json_object_get(r->body, "chat_template_kwargs");
	if (kw && !json_is_null(kw) && !json_is_object(kw))
		return BAD(r, "chat_template_kwargs", "chat_template_kwargs must be a JSON object or null");
	int64_t n = 1;
	if ((rc = integer(r, "n", 1, 1, NULL, &n)))
		return BAD(r, "n", "n must be 1");
	bool has_top = false;
	if ((rc = boolean(r, "logprobs", &r->logprobs)) ||
	    (rc = integer(r, "top_logprobs", 0, TF_REQ_MAX_LOGPROBS, &has_top, &r->top_logprobs)))
		return rc;
	if (has_top && !r->logprobs)
		return BAD(r, "top_logprobs", "top_logprobs needs logprobs set to true");
	const json_t *so = json_object_get(r->body, "stream_options");
	if (so && !json_is_null(so)) {
		if (!json_is_object(so))
			return BAD(r, "stream_options", "stream_options must be an object or null");
		r->include_usage = json_is_true(json_object_get(so, "include_usage"));
	}
	const json_t *tools = json_object_get(r->body, "tools");
	if (tools && !json_is_null(tools) && !json_is_array(tools))
		return BAD(r, "tools", "tools must be a list or null");
	json_array_foreach(tools, i, m) {
		const json_t *f = json_object_get(m, "function");
		if (!json_is_object(f) || !json_is_string(json_object_get(f, "name")))
			return BAD(r, "tools", "tools[%zu] must be a function with a name", i);
	}
	const json_t *choice = json_object_get(r->body, "tool_choice");
	const char *cs = json_string_value(choice);
	if (json_array_size(tools) && !(cs && !strcmp(cs, "none")))
		r->tools = tools;
	if ((rc = guides(r)) || (rc = tools_guide(r, openai_force(choice))))
		return rc;
	r->chat = json_incref(r->body);
	return TF_OK;
}

static tf_status parse_completion(struct tf_req *r, uint32_t vocab)
{
	tf_status rc;
	if ((rc = max_tokens(r, "max_tokens")) || (rc = stops(r, "stop")))
		return rc;
	int64_t n = 1;
	if ((rc = integer(r, "n", 1, 1, NULL, &n)))
		return BAD(r, "n", "n must be 1");
	if ((rc = integer(r, "logprobs", 0, TF_REQ_MAX_LOGPROBS, &r->logprobs, &r->top_logprobs)) ||
	    (rc = guides(r)))
		return rc;
	const json_t *so = json_object_get(r->body, "stream_options");
	if (json_is_object(so))
		r->include_usage = json_is_true(json_object_get(so, "include_usage"));
	const json_t *p = json_object_get(r->body, "prompt");
	if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
		p = json_array_get(p, 0);
	if (json_is_string(p)) {
		r->prompt = json_string_value(p);
		r->prompt_len = json_string_length(p);
		return TF_OK;
	}
	if (!json_is_array(p) || json_array_size(p) == 0)
		return BAD(r, "prompt", "prompt must be a string or a non-empty list of token ids");
	r->nids = json_array_size(p);
	r->ids = tf_alloc_array(r->nids, sizeof(*r->ids));
	if (!r->ids)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	size_t i;
	const json_t *v;
	json_array_foreach(p, i, v) {
		if (!json_is_integer(v))
			return BAD(r, "prompt", "prompt must be a string or a non-empty list of token ids");
		json_int_t id = json_integer_value(v);
		if (id < 0 || (vocab && id >= vocab) || id > INT32_MAX)
			return r->param = "prompt", BAD(r, "prompt", "token id %lld is outside the vocabulary (0 to %u)",
				   (long long)id, vocab ? vocab - 1 : (uint32_t)INT32_MAX);
		r->ids[i] = (int32_t)id;
	}
	return TF_OK;
}

/* Anthropic content (a string or blocks) as text, for system and tool results. */
static tf_status blocks_text(const json_t *c, const char *what, json_t **out)
{
	if (json_is_string(c)) {
		*out = json_incref((json_t *)c);
		return TF_OK;
	}
	if (!json_is_array(c))
		return tf_err(TF_ERR_FORMAT, "%s must be a string or a list of content blocks", what);
	json_t *parts = json_array();
	size_t i;
	const json_t *b;
	json_array_foreach(c, i, b) {
		const char *type = json_string_value(json_object_get(b, "type"));
		if (!type) {
			json_decref(parts);
			return tf_err(TF_ERR_FORMAT, "%s[%zu] must have a type", what, i);
		}
		if (!strcmp(type, "text")) {
			const json_t *t = json_object_get(b, "text");
			if (!json_is_string(t)) {
				json_decref(parts);
				return tf_err(TF_ERR_FORMAT, "%s[%zu].text must be a string", what, i);
			}
			json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", t));
		} else if (!strcmp(type, "image")) {
			json_array_append_new(parts, json_pack("{s:s,s:{s:s}}", "type", "image_url",
								"image_url", "url", "data:image"));
		} else {
			json_decref(parts);
			return tf_err(TF_ERR_FORMAT, "%s[%zu]: content type '%s' is not served here", what,
				      i, type);
		}
	}
	*out = parts;
	return TF_OK;
}

/* One Anthropic message's content blocks into OpenAI-shaped messages
 * appended to out: text and image parts, thinking as reasoning_content and
 * tool_use as tool_calls on the message itself, each tool_result as a tool
 * message of its own (before the message, as the results answer the
 * previous turn). */
static tf_status blocks_to_messages(struct tf_req *r, const char *role, const json_t *c,
				    const char *what, json_t *out)
{
	tf_status rc = TF_OK;
	json_t *msg = json_pack("{s:s}", "role", role), *parts = json_array(), *calls = json_array();
	json_t *reasoning = NULL;
	size_t k;
	const json_t *b;
	json_array_foreach(c, k, b) {
		const char *type = json_string_value(json_object_get(b, "type"));
		if (!type) {
			rc = BAD(r, "messages", "%s[%zu] must have a type", what, k);
			break;
		}
		if (!strcmp(type, "text") || !strcmp(type, "image")) {
			json_t *one = json_array(), *conv;
			json_array_append(one, (json_t *)b);
			rc = blocks_text(one, what, &conv);
			json_decref(one);
			if (rc)
				break;
			json_array_extend(parts, conv);
			json_decref(conv);
		} else if (!strcmp(type, "thinking") && !strcmp(role, "assistant")) {
			const json_t *t = json_object_get(b, "thinking");
			if (json_is_string(t) && !reasoning)
				reasoning = json_incref((json_t *)t);
		} else if (!strcmp(type, "redacted_thinking")) {
			continue;
		} else if (!strcmp(type, "tool_use") && !strcmp(role, "assistant")) {
			const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
			const json_t *input = json_object_get(b, "input");
			if (!json_is_string(id) || !json_is_string(name)) {
				rc = BAD(r, "messages", "%s[%zu]: tool_use needs an id and a name", what, k);
				break;
			}
			char *args = input ? json_dumps(input, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
			json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type",
							       "function", "function", "name", name,
							       "arguments", args ? args : "{}"));
			free(args);
		} else if (!strcmp(type, "tool_result") && !strcmp(role, "user")) {
			const json_t *id = json_object_get(b, "tool_use_id");
			const json_t *tc = json_object_get(b, "content");
			json_t *text;
			if (!json_is_string(id)) {
				rc = BAD(r, "messages", "%s[%zu]: tool_result needs a tool_use_id", what, k);
				break;
			}
			if (!tc || json_is_null(tc))
				text = json_string("");
			else if ((rc = blocks_text(tc, what, &text)))
				break;
			json_array_append_new(out, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id",
							     id, "content", text));
		} else {
			rc = BAD(r, "messages", "%s[%zu]: content type '%s' is not served here", what, k, type);
			break;
		}
	}
	if (!rc && (json_array_size(parts) || !json_array_size(calls)))
		json_object_set(msg, "content", parts);
	if (!rc && json_array_size(calls))
		json_object_set(msg, "tool_calls", calls);
	if (reasoning)
		json_object_set_new(msg, "reasoning_content", reasoning);
	json_decref(parts);
	json_decref(calls);
	if (!rc && (json_array_size(json_object_get(msg, "content")) ||
		    json_object_get(msg, "tool_calls") || json_object_get(msg, "reasoning_content")))
		json_array_append(out, msg);
	json_decref(msg);
	return rc;
}

/* An Anthropic request's system and messages as an OpenAI-shaped chat. */
static tf_status messages_to_chat(struct tf_req *r)
{
	tf_status rc = TF_OK;
	json_t *chat = json_object(), *out = json_array();
	json_object_set_new(chat, "messages", out);
	r->chat = chat;
	const json_t *sys = json_object_get(r->body, "system");
	if (sys && !json_is_null(sys)) {
		json_t *t;
		if ((rc = blocks_text(sys, "system", &t)))
			return BAD(r, "system", "%s", tf_errmsg(rc));
		json_array_append_new(out, json_pack("{s:s,s:o}", "role", "system", "content", t));
	}
	const json_t *msgs = json_object_get(r->body, "messages");
	if (!json_is_array(msgs) || json_array_size(msgs) == 0)
		return BAD(r, "messages", "messages must be a non-empty list");
	size_t i;
	const json_t *m;
	json_array_foreach(msgs, i, m) {
		const char *role = json_string_value(json_object_get(m, "role"));
		const json_t *c = json_object_get(m, "content");
		char what[64];
		snprintf(what, sizeof(what), "messages[%zu].content", i);
		if (!json_is_object(m) || !role || (strcmp(role, "user") && strcmp(role, "assistant")))
			return BAD(r, "messages", "messages[%zu].role must be \"user\" or \"assistant\"", i);
		if (json_is_string(c))
			json_array_append_new(out, json_pack("{s:s,s:O}", "role", role, "content", c));
		else if (!json_is_array(c))
			return BAD(r, "messages", "%s must be a string or a list of content blocks", what);
		else if ((rc = blocks_to_messages(r, role, c, what, out)))
			return rc;
	}
	return TF_OK;
}

static tf_status anthropic_tools(struct tf_req *r)
{
	const json_t *tools = json_object_get(r->body, "tools");
	if (!tools || json_is_null(tools))
		return TF_OK;
	if (!json_is_array(tools))
		return BAD(r, "tools", "tools must be a list");
	json_t *conv = json_array();
	size_t i;
	const json_t *t;
	json_array_foreach(tools, i, t) {
		const json_t *name = json_object_get(t, "name");
		const json_t *schema = json_object_get(t, "input_schema");
		const json_t *desc = json_object_get(t, "description");
		if (!json_is_string(name) || !json_is_object(schema)) {
			json_decref(conv);
			return BAD(r, "tools", "tools[%zu] needs a name and an input_schema object", i);
		}
		json_t *f = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
		if (json_is_string(desc))
			json_object_set(f, "description", (json_t *)desc);
		json_array_append_new(conv, json_pack("{s:s,s:o}", "type", "function", "function", f));
	}
	json_object_set_new(r->chat, "tools", conv);
	const json_t *choice = json_object_get(r->body, "tool_choice");
	const char *ct = json_string_value(json_object_get(choice, "type"));
	if (ct && !strcmp(ct, "none"))
		json_object_set_new(r->chat, "tool_choice", json_string("none"));
	else if (json_array_size(conv))
		r->tools = conv;
	if (ct && strcmp(ct, "none") && strcmp(ct, "auto") && strcmp(ct, "any") && strcmp(ct, "tool"))
		return BAD(r, "tool_choice", "tool_choice type must be auto, any, tool or none");
	const char *name = json_string_value(json_object_get(choice, "name"));
	if (ct && !strcmp(ct, "tool") && !name)
		return BAD(r, "tool_choice", "tool_choice of type tool needs a name");
	return r->api == TF_API_COUNT_TOKENS ? TF_OK
		: tools_guide(r, ct && !strcmp(ct, "any") ? "" : ct && !strcmp(ct, "tool") ? name : NULL);
}

static tf_status parse_messages(struct tf_req *r)
{
	tf_status rc;
	if ((rc = messages_to_chat(r)) || (rc = anthropic_tools(r)))
		return rc;
	/* Anthropic's default is thinking off; an explicit setting passes through. */
	const json_t *th = json_object_get(r->body, "thinking");
	if (th && !json_is_null(th)) {
		const char *t = json_string_value(json_object_get(th, "type"));
		if (!json_is_object(th) || !t ||
		    (strcmp(t, "enabled") && strcmp(t, "disabled") && strcmp(t, "adaptive")))
			return BAD(r, "thinking",
				   "thinking must be {\"type\": \"enabled\"|\"disabled\"|\"adaptive\"}");
		json_object_set_new(r->chat, "thinking", json_boolean(strcmp(t, "disabled") != 0));
	} else {
		json_object_set_new(r->chat, "thinking", json_false());
	}
	if (r->api == TF_API_COUNT_TOKENS)
		return TF_OK;
	const json_t *mt = json_object_get(r->body, "max_tokens");
	if (!mt || json_is_null(mt))
		return BAD(r, "max_tokens", "max_tokens: Field required");
	if ((rc = max_tokens(r, "max_tokens")) || (rc = stops(r, "stop_sequences")))
		return rc;
	return TF_OK;
}

/* The Responses API. */

/* A Responses message's content (a string or input_text / output_text
 * parts) as chat content: the string, or text parts. */
static tf_status resp_content(struct tf_req *r, const json_t *c, const char *what, json_t **out)
{
	if (json_is_string(c)) {
		*out = json_incref((json_t *)c);
		return TF_OK;
	}
	if (!json_is_array(c))
		return BAD(r, "input", "%s.content must be a string or a list of content parts", what);
	json_t *parts = json_array();
	size_t i;
	const json_t *p;
	json_array_foreach(c, i, p) {
		const char *t = json_string_value(json_object_get(p, "type"));
		const json_t *text = json_object_get(p, "text");
		if (t && (!strcmp(t, "input_text") || !strcmp(t, "output_text") || !strcmp(t, "text")) &&
		    json_is_string(text)) {
			json_array_append_new(parts, json_pack("{s:s,s:O}", "type", "text", "text", text));
		} else if (t && !strcmp(t, "input_image")) {
			json_array_append_new(parts, json_pack("{s:s,s:{s:s}}", "type", "image_url",
							       "image_url", "url", "data:image"));
		} else {
			json_decref(parts);
			return BAD(r, "input", "%s.content[%zu]: content type '%s' is not served here", what,
				   i, t ? t : "(none)");
		}
	}
	*out = parts;
	return TF_OK;
}

/* The assistant message at the end of msgs, made when the last one is not
 * an assistant's (function calls and reasoning join it). */
static json_t *resp_assistant(json_t *msgs)
{
	json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
	const char *role = json_string_value(json_object_get(last, "role"));
	if (role && !strcmp(role, "assistant"))
		return last;
	json_t *m = json_pack("{s:s,s:n}", "role", "assistant", "content");
	json_array_append_new(msgs, m);
	return m;
}

/* One input item appended to msgs as chat messages. */
static tf_status resp_item(struct tf_req *r, const json_t *it, size_t i, json_t *msgs)
{
	char what[32];
	snprintf(what, sizeof(what), "input[%zu]", i);
	if (!json_is_object(it))
		return BAD(r, "input", "%s must be an object", what);
	const char *type = json_string_value(json_object_get(it, "type"));
	const char *role = json_string_value(json_object_get(it, "role"));
	tf_status rc;
	if (!type || !strcmp(type, "message")) {
		if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") &&
			      strcmp(role, "developer")))
			return BAD(r, "input", "%s.role must be user, assistant, system or developer", what);
		json_t *c;
		if ((rc = resp_content(r, json_object_get(it, "content"), what, &c)))
			return rc;
		json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
		const char *lr = json_string_value(json_object_get(last, "role"));
		if (!strcmp(role, "assistant") && lr && !strcmp(lr, "assistant") &&
		    json_is_null(json_object_get(last, "content")) && !json_object_get(last, "tool_calls")) {
			json_object_set_new(last, "content", c); /* after its reasoning item */
			return TF_OK;
		}
		json_array_append_new(msgs, json_pack("{s:s,s:o}", "role",
						      !strcmp(role, "developer") ? "system" : role, "content", c));
		return TF_OK;
	}
	if (!strcmp(type, "function_call")) {
		const json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
		const json_t *args = json_object_get(it, "arguments");
		if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
			return BAD(r, "input", "%s: a function_call needs call_id, name and arguments strings",
				   what);
		json_t *m = resp_assistant(msgs);
		json_t *calls = json_object_get(m, "tool_calls");
		if (!calls)
			json_object_set_new(m, "tool_calls", calls = json_array());
		json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type",
						       "function", "function", "name", name,
						       "arguments", args));
		return TF_OK;
	}
	if (!strcmp(type, "function_call_output")) {
		const json_t *id = json_object_get(it, "call_id"), *o = json_object_get(it, "output");
		json_t *c;
		if (!json_is_string(id))
			return BAD(r, "input", "%s: a function_call_output needs a call_id", what);
		if ((rc = resp_content(r, o, what, &c)))
			return rc;
		json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id,
						      "content", c));
		return TF_OK;
	}
	if (!strcmp(type, "reasoning")) {
		/* Its reasoning_text parts (or summary) become the next
		 * assistant turn's reasoning_content. */
		struct tf_buf t = TF_BUF_INIT;
		const json_t *parts = json_object_get(it, "content");
		if (!json_array_size(parts))
			parts = json_object_get(it, "summary");
		size_t k;
		const json_t *p;
		json_array_foreach(parts, k, p) {
			const json_t *x = json_object_get(p, "text");
			if (json_is_string(x))
				tf_buf_append(&t, json_string_value(x), json_string_length(x));
		}
		json_t *m = resp_assistant(msgs);
		json_object_set_new(m, "reasoning_content", json_stringn(t.data ? t.data : "", t.len));
		tf_buf_release(&t);
		return TF_OK;
	}
	if (!strcmp(type, "item_reference"))
		return BAD(r, "input", "%s: item_reference is not served here (send the items themselves, "
			   "or previous_response_id)", what);
	return BAD(r, "input", "%s: item type '%s' is not served here", what, type);
}

/* Responses function tools ({type, name, description, parameters, strict})
 * as chat tools. */
static tf_status resp_tools(struct tf_req *r, json_t **out)
{
	*out = NULL;
	const json_t *tools = json_object_get(r->body, "tools");
	if (!tools || json_is_null(tools))
		return TF_OK;
	if (!json_is_array(tools))
		return BAD(r, "tools", "tools must be a list");
	json_t *conv = json_array();
	size_t i;
	const json_t *t;
	json_array_foreach(tools, i, t) {
		const char *type = json_string_value(json_object_get(t, "type"));
		const json_t *name = json_object_get(t, "name");
		if (!type || strcmp(type, "function")) {
			json_decref(conv);
			return BAD(r, "tools", "tools[%zu]: tool type '%s' is not served here (only function "
				   "tools)", i, type ? type : "(none)");
		}
		if (!json_is_string(name)) {
			json_decref(conv);
			return BAD(r, "tools", "tools[%zu] must be a function with a name", i);
		}
		json_t *f = json_pack("{s:O}", "name", name);
		const char *keys[] = {"description", "parameters", "strict"};
		for (size_t k = 0; k < 3; k++) {
			const json_t *v = json_object_get(t, keys[k]);
			if (v && !json_is_null(v))
				json_object_set(f, keys[k], (json_t *)v);
		}
		json_array_append_new(conv, json_pack("{s:s,s:o}", "type", "function", "function", f));
	}
	*out = conv;
	return TF_OK;
}

/* Responses tool_choice as chat's: "none" / "auto" / "required", or
 * {type: function, name} as {type: function, function: {name}}. */
static tf_status resp_choice(struct tf_req *r, json_t **out)
{
	*out = NULL;
	const json_t *c = json_object_get(r->body, "tool_choice");
	if (!c || json_is_null(c))
		return TF_OK;
	const char *s = json_string_value(c);
	if (s && (!strcmp(s, "none") || !strcmp(s, "auto") || !strcmp(s, "required"))) {
		*out = json_string(s);
		return TF_OK;
	}
	const char *type = json_string_value(json_object_get(c, "type"));
	const json_t *name = json_object_get(c, "name");
	if (type && !strcmp(type, "function") && json_is_string(name)) {
		*out = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name);
		return TF_OK;
	}
	return BAD(r, "tool_choice", "tool_choice must be none, auto, required or "
		   "{\"type\": \"function\", \"name\": ...}");
}

/* text.format: text, json_object or json_schema ({name, schema, strict}). */
static tf_status resp_format(struct tf_req *r)
{
	const json_t *text = json_object_get(r->body, "text");
	if (!text || json_is_null(text))
		return TF_OK;
	const json_t *f = json_object_get(text, "format");
	if (!json_is_object(text) || (f && !json_is_null(f) && !json_is_object(f)))
		return BAD(r, "text", "text must be an object with an optional format object");
	if (!f || json_is_null(f))
		return TF_OK;
	const char *t = json_string_value(json_object_get(f, "type"));
	if (!t)
		return BAD(r, "text", "text.format must have a type");
	if (!strcmp(t, "text"))
		return TF_OK;
	if (!strcmp(t, "json_object"))
		return guide_set(r, "text.format", TF_GUIDE_JSON, NULL);
	if (!strcmp(t, "json_schema")) {
		const json_t *sc = json_object_get(f, "schema");
		if (!json_is_object(sc) && !json_is_boolean(sc))
			return BAD(r, "text", "text.format json_schema needs a schema, a JSON schema");
		return guide_set(r, "text.format", TF_GUIDE_SCHEMA, sc);
	}
	return BAD(r, "text", "text.format type must be text, json_object or json_schema, not '%s'", t);
}

/* Fields tf-serve does not serve on /v1/responses, refused rather than
 * ignored: background mode, conversations, prompt templates; store and
 * previous_response_id are read (the store itself is the server's). */
static tf_status resp_refused(struct tf_req *r)
{
	const json_t *v = json_object_get(r->body, "previous_response_id");
	if (v && !json_is_null(v)) {
		if (!json_is_string(v) || !json_string_length(v))
			return BAD(r, "previous_response_id", "previous_response_id must be a response id");
		r->prev_id = json_string_value(v);
	}
	v = json_object_get(r->body, "store");
	r->store = true; /* as OpenAI's */
	if (v && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return BAD(r, "store", "store must be true or false");
		r->store = json_is_true(v);
		r->has_store = true;
	}
	if (json_is_true(json_object_get(r->body, "background")))
		return BAD(r, "background", "background mode is not supported");
	v = json_object_get(r->body, "conversation");
	if (v && !json_is_null(v))
		return BAD(r, "conversation", "conversation is not supported: tf-serve does not store "
			   "conversations (use previous_response_id)");
	v = json_object_get(r->body, "prompt");
	if (v && !json_is_null(v))
		return BAD(r, "prompt", "prompt templates are not supported");
	return TF_OK;
}

/* r->chat's messages: instructions as the system message, then prior
 * (stored conversation items, or NULL), then this request's input items. */
static tf_status resp_messages(struct tf_req *r, const json_t *prior)
{
	tf_status rc;
	json_t *msgs = json_array();
	json_object_set_new(r->chat, "messages", msgs);
	const json_t *ins = json_object_get(r->body, "instructions");
	if (ins && !json_is_null(ins)) {
		if (!json_is_string(ins))
			return BAD(r, "instructions", "instructions must be a string");
		json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "system", "content", ins));
	}
	size_t i;
	const json_t *it;
	json_array_foreach(prior, i, it)
		if ((rc = resp_item(r, it, i, msgs))) {
			r->param = "previous_response_id";
			return rc;
		}
	json_array_foreach(r->input_items, i, it)
		if ((rc = resp_item(r, it, i, msgs)))
			return rc;
	return TF_OK;
}

tf_status tf_req_prior(struct tf_req *r, const json_t *items)
{
	return resp_messages(r, items);
}

/* A Responses request as a chat request: instructions as the system
 * message, input (a string or items) as messages, tools, tool_choice,
 * reasoning.effort, max_output_tokens and text.format. */
static tf_status parse_responses(struct tf_req *r)
{
	tf_status rc;
	if ((rc = resp_refused(r)))
		return rc;
	r->chat = json_object();
	const json_t *in = json_object_get(r->body, "input");
	if (json_is_string(in))
		r->input_items = json_pack("[{s:s,s:s,s:O}]", "type", "message", "role", "user",
					   "content", in);
	else if (json_is_array(in) && json_array_size(in))
		r->input_items = json_deep_copy(in);
	else
		return BAD(r, "input", "input must be a string or a non-empty list of items");
	if ((rc = resp_messages(r, NULL)))
		return rc;
	if ((rc = integer(r, "max_output_tokens", 1, INT32_MAX, NULL, &r->max_tokens)))
		return rc;
	const json_t *re = json_object_get(r->body, "reasoning");
	if (re && !json_is_null(re)) {
		if (!json_is_object(re))
			return BAD(r, "reasoning", "reasoning must be an object or null");
		const json_t *eff = json_object_get(re, "effort");
		if (eff && !json_is_null(eff))
			json_object_set(r->chat, "reasoning_effort", (json_t *)eff);
	}
	json_t *tools, *choice;
	if ((rc = resp_tools(r, &tools)))
		return rc;
	if (tools)
		json_object_set_new(r->chat, "tools", tools);
	if ((rc = resp_choice(r, &choice)))
		return rc;
	if (choice)
		json_object_set_new(r->chat, "tool_choice", choice);
	const char *cs = json_string_value(choice);
	if (json_array_size(tools) && !(cs && !strcmp(cs, "none")))
		r->tools = tools;
	if ((rc = resp_format(r)) || (rc = guides_check(r)) || (rc = tools_guide(r, openai_force(choice))))
		return rc;
	return TF_OK;
}

tf_status tf_req_parse(enum tf_api api, const char *body, size_t n, uint32_t vocab,
		       struct tf_req *r)
{
	memset(r, 0, sizeof(*r));
	r->api = api;
	r->max_tokens = -1;
	tf_status rc;
	json_error_t e;
	if (n == 0) {
		body = "{}";
		n = 2;
	}
	r->body = json_loadb(body, n, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &e);
	if (!r->body) {
		rc = tf_err(TF_ERR_FORMAT, "the request body is not valid JSON: %s (at byte %d)", e.text,
			    e.position);
		goto out;
	}
	if (!json_is_object(r->body)) {
		rc = tf_err(TF_ERR_FORMAT, "the request body must be a JSON object");
		goto out;
	}
	const char *nul = nul_in(r->body, NULL);
	if (nul) {
		r->param = nul;
		rc = tf_err(TF_ERR_FORMAT, "%s must not contain U+0000 (only text may)", nul);
		goto out;
	}
	if ((rc = common(r)))
		goto out;
	switch (api) {
	case TF_API_CHAT: rc = parse_chat(r); break;
	case TF_API_COMPLETIONS: rc = parse_completion(r, vocab); break;
	case TF_API_MESSAGES:
	case TF_API_COUNT_TOKENS: rc = parse_messages(r); break;
	case TF_API_RESPONSES: rc = parse_responses(r); break;
	}
out:
	if (rc) {
		/* param may be a key of the body: keep a copy past its release */
		char keep[sizeof(r->param_buf)];
		snprintf(keep, sizeof(keep), "%s", r->param ? r->param : "");
		bool named = r->param != NULL;
		tf_req_release(r);
		if (named) {
			memcpy(r->param_buf, keep, sizeof(keep));
			r->param = r->param_buf;
		}
	}
	return rc;
}

void tf_req_release(struct tf_req *r)
{
	json_decref(r->chat);
	json_decref(r->body);
	json_decref(r->guide_own);
	json_decref(r->input_items);
	free(r->ids);
	memset(r, 0, sizeof(*r));
	r->max_tokens = -1;
}
