/* chat_settings.c: a chat request's rendering settings: thinking, reasoning
 * effort, tools, response schema, drop_thinking, generation, image text. */
#include <stdlib.h>
#include <string.h>

#include "text/chat.h"
#include "text/pyjson.h"

#define EFFORT_ERR "reasoning_effort must be 1-100 or low / medium / high / max"

void tf_chat_settings_init(struct tf_chat_settings *s)
{
	*s = (struct tf_chat_settings){
		.thinking = true,
		.budget = TF_CHAT_BUDGET_DEFAULT,
		.drop_thinking = true,
		.generation = true,
	};
}

void tf_chat_settings_release(struct tf_chat_settings *s)
{
	json_decref(s->tools);
	json_decref(s->response_format);
	free(s->image_text);
	s->tools = s->response_format = NULL;
	s->image_text = NULL;
}

tf_status tf_chat_effort_text(const char *s, size_t n, bool *thinking, int *budget)
{
	static const struct {
		const char *name;
		int budget; /* 0: thinking off */
	} names[] = {{"none", 0}, {"minimal", 0}, {"low", 50}, {"medium", 75},
		     {"high", 75}, {"xhigh", 100}, {"max", 100}};
	while (n && strchr(" \t\n\r", s[0]) && s[0])
		s++, n--;
	while (n && strchr(" \t\n\r", s[n - 1]) && s[n - 1])
		n--;
	char t[17];
	if (n == 0 || n > 16)
		return tf_err(TF_ERR_FORMAT, EFFORT_ERR);
	for (size_t i = 0; i < n; i++)
		t[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] + 32 : s[i]);
	t[n] = 0;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		if (strcmp(t, names[i].name))
			continue;
		*thinking = names[i].budget > 0;
		if (*thinking)
			*budget = names[i].budget;
		return TF_OK;
	}
	long v = 0;
	for (size_t i = 0; i < n; i++) {
		if (t[i] < '0' || t[i] > '9')
			return tf_err(TF_ERR_FORMAT, EFFORT_ERR);
		v = v * 10 + (t[i] - '0');
	}
	if (v < 1 || v > 100)
		return tf_err(TF_ERR_FORMAT, EFFORT_ERR);
	*thinking = true;
	*budget = (int)v;
	return TF_OK;
}

tf_status tf_chat_effort(const json_t *v, bool *thinking, int *budget)
{
	if (json_is_string(v))
		return tf_chat_effort_text(json_string_value(v), json_string_length(v), thinking, budget);
	if (json_is_integer(v)) {
		char t[32];
		int n = snprintf(t, sizeof t, "%lld", (long long)json_integer_value(v));
		return tf_chat_effort_text(t, (size_t)n, thinking, budget);
	}
	return tf_err(TF_ERR_FORMAT, EFFORT_ERR);
}

static tf_status read_bool(const json_t *obj, const char *what, const char *key, bool *out)
{
	const json_t *v = json_object_get(obj, key);
	if (!v || json_is_null(v))
		return TF_OK;
	if (!json_is_boolean(v))
		return tf_err(TF_ERR_FORMAT, "%s%s must be true or false", what, key);
	*out = json_is_true(v);
	return TF_OK;
}

/* response_format as the prompt shows it, or NULL (a new reference). */
static json_t *schema_of(const json_t *rf)
{
	if (!json_is_object(rf))
		return NULL;
	const json_t *kind = json_object_get(rf, "type");
	if (!json_is_string(kind))
		return NULL;
	const char *k = json_string_value(kind);
	if (!strcmp(k, "text"))
		return NULL;
	if (!strcmp(k, "json_object"))
		return json_pack("{s:s}", "type", "object");
	if (strcmp(k, "json_schema"))
		return json_incref((json_t *)rf); /* the schema itself (fixture form) */
	const json_t *js = json_object_get(rf, "json_schema");
	if (!json_is_object(js) || !json_object_size(js))
		return NULL;
	const json_t *schema = json_object_get(js, "schema");
	if (!schema)
		schema = json_object_get(js, "json_schema");
	if (!schema)
		return NULL;
	if (json_is_string(schema))
		return tf_pyjson_loads(json_string_value(schema), json_string_length(schema));
	return json_incref((json_t *)schema);
}

static tf_status read_thinking(struct tf_chat_settings *s, const json_t *req)
{
	const json_t *t = json_object_get(req, "thinking");
	if (json_is_boolean(t)) {
		s->thinking = json_is_true(t);
	} else if (json_is_object(t)) { /* Anthropic: {"type": "enabled", "budget_tokens": N} */
		const char *k = json_string_value(json_object_get(t, "type"));
		if (!k || (strcmp(k, "enabled") && strcmp(k, "adaptive") && strcmp(k, "disabled")))
			return tf_err(TF_ERR_FORMAT, "thinking.type must be enabled, adaptive or disabled");
		s->thinking = strcmp(k, "disabled") != 0;
	} else if (t && !json_is_null(t)) {
		return tf_err(TF_ERR_FORMAT, "thinking must be true or false");
	}
	tf_status st = read_bool(req, "", "enable_thinking", &s->thinking);
	if (st)
		return st;
	const json_t *b = json_object_get(req, "budget");
	if (b && !json_is_null(b)) { /* an effort for the line only: thinking stays */
		bool on = false;
		int budget = 0;
		if ((st = tf_chat_effort(b, &on, &budget)))
			return st;
		if (!on)
			return tf_err(TF_ERR_FORMAT, EFFORT_ERR);
		s->budget = budget;
	}
	const json_t *kw = json_object_get(req, "chat_template_kwargs");
	if (kw && !json_is_null(kw) && !json_is_object(kw))
		return tf_err(TF_ERR_FORMAT, "chat_template_kwargs must be a JSON object or null");
	const json_t *efforts[] = {json_object_get(req, "reasoning_effort"),
				   kw ? json_object_get(kw, "reasoning_effort") : NULL};
	for (int i = 0; i < 2; i++)
		if (efforts[i] && !json_is_null(efforts[i]) &&
		    (st = tf_chat_effort(efforts[i], &s->thinking, &s->budget)))
			return st;
	if (json_is_object(kw) && ((st = read_bool(kw, "chat_template_kwargs.", "enable_thinking", &s->thinking)) ||
				   (st = read_bool(kw, "chat_template_kwargs.", "thinking", &s->thinking)) ||
				   (st = read_bool(kw, "chat_template_kwargs.", "drop_thinking", &s->drop_thinking))))
		return st;
	return TF_OK;
}

tf_status tf_chat_settings_read(struct tf_chat_settings *s, const json_t *req)
{
	if (!json_is_object(req))
		return tf_err(TF_ERR_FORMAT, "the request body must be a JSON object");
	const json_t *tools = json_object_get(req, "tools");
	if (tools && !json_is_null(tools)) {
		if (!json_is_array(tools))
			return tf_err(TF_ERR_FORMAT, "tools must be a list of objects");
		for (size_t i = 0; i < json_array_size(tools); i++)
			if (!json_is_object(json_array_get(tools, i)))
				return tf_err(TF_ERR_FORMAT, "tools must be a list of objects");
		const char *choice = json_string_value(json_object_get(req, "tool_choice"));
		json_decref(s->tools);
		s->tools = json_array_size(tools) && !(choice && !strcmp(choice, "none")) ?
				   json_incref((json_t *)tools) :
				   NULL;
	}
	const json_t *rf = json_object_get(req, "response_format");
	if (rf) {
		json_decref(s->response_format);
		s->response_format = schema_of(rf);
	}
	tf_status st = read_thinking(s, req);
	if (st)
		return st;
	if ((st = read_bool(req, "", "drop_thinking", &s->drop_thinking)) ||
	    (st = read_bool(req, "", "add_generation_prompt", &s->generation)) ||
	    (st = read_bool(req, "", "generation", &s->generation)))
		return st;
	const json_t *img = json_object_get(req, "image_text");
	if (img && !json_is_null(img)) {
		if (!json_is_string(img))
			return tf_err(TF_ERR_FORMAT, "image_text must be a string");
		free(s->image_text);
		if (!(s->image_text = strdup(json_string_value(img))))
			return tf_err(TF_ERR_NOMEM, "image_text");
	}
	return TF_OK;
}

tf_status tf_chat_render_request(const json_t *req, const struct tf_chat_settings *defaults,
				 struct tf_chat_prompt *p)
{
	struct tf_chat_settings s;
	tf_chat_settings_init(&s);
	if (defaults) {
		s = *defaults;
		json_incref(s.tools);
		json_incref(s.response_format);
		s.image_text = defaults->image_text ? strdup(defaults->image_text) : NULL;
		if (defaults->image_text && !s.image_text)
			return tf_err(TF_ERR_NOMEM, "image_text");
	}
	tf_status st = tf_chat_settings_read(&s, req);
	if (!st)
		st = tf_chat_render(json_object_get(req, "messages"), &s, p);
	tf_chat_settings_release(&s);
	return st;
}
