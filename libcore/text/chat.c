/* chat.c: rendering DeepSeek-V4.1 conversations (see chat.h).
 *
 * Two passes, as the reference encoder: normalize (roles checked, every
 * content as text, tool results merged into user turns and sorted by their
 * call's position), then write the turns with the drop_thinking and
 * generation-suffix rules. */
#include "text/chat.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "text/pyjson.h"

enum role { R_SYSTEM, R_USER, R_ASSISTANT, R_TOOL, R_REMINDER };

#define DSML "｜DSML｜"
#define CALLS_OPEN "<" DSML " calls>"
#define CALLS_CLOSE "</" DSML " calls>"

static const char TOOLS_HEAD[] =
	"## Tools\n\nYou have access to a set of tools to help answer the user's question. You can "
	"invoke tools by writing a \"<" DSML " calls>\" block like the following:\n\n"
	"<" DSML " calls>\n<" DSML " invoke name=\"$TOOL_NAME\">\n<" DSML
	" parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" DSML
	" parameter>\n...\n</" DSML " invoke>\n<" DSML " invoke name=\"$TOOL_NAME2\">\n...\n</" DSML
	" invoke>\n</" DSML " calls>\n\n"
	"String parameters should be specified as is and set `string=\"true\"`. For all other types "
	"(numbers, booleans, arrays, objects), pass the value in JSON format and set "
	"`string=\"false\"`.\n\n"
	"If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
	"inside <think>...</think> BEFORE any tool calls or final response.\n\n"
	"Otherwise, output directly after </think> with tool calls or final response.\n\n"
	"### Available Tool Schemas\n\n";
static const char TOOLS_TAIL[] =
	"\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke "
	"tool calls.\n";
static const char FORMAT_HEAD[] =
	"\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

/* A message after normalize. */
struct msg {
	enum role role;
	size_t index;          /* in the request's messages (errors name it) */
	struct tf_buf content;
	struct tf_buf reasoning; /* "" when absent, as the reference writes it */
	const json_t *calls;   /* a non-empty array, or NULL */
	struct tf_buf tool_id;
};

/* One block of a merged user turn: a user message or a tool result. */
struct block {
	size_t msg;
	size_t rank; /* the result's call position in the calling turn */
	bool tool;
};

/* A turn as written: a user turn holds blocks; others one message. */
struct turn {
	enum role role;
	size_t msg;
	struct block *blocks;
	size_t nblocks, cap;
	bool order_set; /* the calling turn's ids were known when it began */
};

struct render {
	const struct tf_chat_settings *s;
	struct msg *msgs;
	size_t nmsgs;
	struct turn *turns;
	size_t nturns;
	bool sys_extras; /* turn 0 is a system message carrying tools / schema */
	struct tf_buf *out;
	size_t last_user;  /* msgs index of the latest user message, or SIZE_MAX */
	size_t *rewind;    /* set to where its content starts */
};

static tf_status nomem(void)
{
	return tf_err(TF_ERR_NOMEM, "chat rendering");
}

static bool is_image_part(const char *t)
{
	return !strcmp(t, "image_url") || !strcmp(t, "image") || !strcmp(t, "input_image");
}

/* A part that is neither text nor an image, named as Python's repr() writes
 * it (the reference's message: "unsupported content part 1"). */
static tf_status unsupported(const json_t *part, size_t index, const char *where)
{
	struct tf_buf r = TF_BUF_INIT;
	tf_pyjson_repr(&r, part);
	tf_status st = tf_err(TF_ERR_FORMAT, "messages[%zu].%s: unsupported content part %s", index, where,
			      r.data ? r.data : "");
	tf_buf_release(&r);
	return st;
}

/* OpenAI content as text: a string, null, a list of parts joined by blank
 * lines, or other JSON dumped. */
static tf_status content_text(struct tf_buf *b, const json_t *v, size_t index, const char *where,
			      const char *image_text)
{
	if (!v || json_is_null(v))
		return TF_OK;
	if (json_is_string(v))
		return tf_buf_append(b, json_string_value(v), json_string_length(v));
	if (!json_is_array(v))
		return tf_pyjson_dump(b, v, false);
	tf_status st = TF_OK;
	for (size_t i = 0; i < json_array_size(v) && !st; i++) {
		const json_t *part = json_array_get(v, i);
		if (i && (st = tf_buf_puts(b, "\n\n")))
			break;
		if (json_is_string(part)) {
			st = tf_buf_append(b, json_string_value(part), json_string_length(part));
			continue;
		}
		const char *type = json_string_value(json_object_get(part, "type"));
		if (!type)
			type = "";
		if (!json_is_object(part)) {
			st = unsupported(part, index, where);
		} else if (!strcmp(type, "text") || !strcmp(type, "input_text") || !strcmp(type, "output_text")) {
			const json_t *t = json_object_get(part, "text");
			if (tf_pyjson_truthy(t) && !tf_pyjson_scalar_text(b, t, &st))
				st = tf_err(TF_ERR_FORMAT, "messages[%zu].%s: a text part's text must be a string",
					    index, where);
		} else if (is_image_part(type)) {
			if (!image_text)
				st = tf_err(TF_ERR_FORMAT,
					    "messages[%zu].%s: images are not served by this DeepSeek-V4.1 build",
					    index, where);
			else
				st = tf_buf_puts(b, image_text);
		} else {
			st = unsupported(part, index, where);
		}
	}
	return st;
}

/* A name as Python's str() gives it, else its JSON. */
static tf_status name_text(struct tf_buf *b, const json_t *v)
{
	tf_status st;
	if (tf_pyjson_scalar_text(b, v, &st))
		return st;
	return tf_pyjson_dump(b, v, false);
}

/* `namespace::name` from a function object's name and a namespace (a string
 * or {"name": ...}); a name that carries its own namespace keeps it. false
 * when the function has no name. */
static bool qualified_name(struct tf_buf *out, const json_t *fn, const json_t *ns, tf_status *st)
{
	const json_t *raw = json_object_get(fn, "name");
	*st = TF_OK;
	if (!raw)
		return false;
	struct tf_buf name = TF_BUF_INIT, space = TF_BUF_INIT;
	if ((*st = name_text(&name, raw)))
		goto out;
	if (ns && json_is_object(ns)) {
		const json_t *x = json_object_get(ns, "name");
		if (x && !json_is_null(x))
			*st = name_text(&space, x);
	} else if (ns && !json_is_null(ns)) {
		*st = name_text(&space, ns);
	}
	if (*st)
		goto out;
	const char *bare = name.data ? name.data : "";
	size_t bare_len = name.len;
	const char *sep = name.len ? memmem(name.data, name.len, "::", 2) : NULL;
	if (sep) {
		tf_buf_reset(&space);
		if ((*st = tf_buf_append(&space, name.data, (size_t)(sep - name.data))))
			goto out;
		bare = sep + 2;
		bare_len = name.len - (size_t)(bare - name.data);
	}
	if (space.len && ((*st = tf_buf_append(out, space.data, space.len)) || (*st = tf_buf_puts(out, "::"))))
		goto out;
	*st = tf_buf_append(out, bare, bare_len);
out:
	tf_buf_release(&name);
	tf_buf_release(&space);
	return true;
}

/* One offered tool as the system block lists it: its function object in
 * its own key order, the name qualified, the namespace's description
 * prepended to its own. */
static tf_status write_tool(struct tf_buf *out, const json_t *tool)
{
	if (!json_is_object(tool))
		return tf_err(TF_ERR_FORMAT, "tools must be a list of objects");
	const json_t *inner = json_object_get(tool, "function");
	json_t *fn = json_copy((json_t *)(json_is_object(inner) ? inner : tool)), *ns = NULL;
	struct tf_buf name = TF_BUF_INIT, desc = TF_BUF_INIT;
	tf_status st = TF_OK;
	if (!fn)
		return nomem();
	const json_t *tns = json_object_get(tool, "namespace");
	if (tns && !json_is_null(tns) && json_object_set(fn, "namespace", (json_t *)tns))
		goto oom;
	ns = json_incref(json_object_get(fn, "namespace"));
	bool named = qualified_name(&name, fn, ns, &st);
	if (st)
		goto out;
	if (!named) {
		st = tf_err(TF_ERR_FORMAT, "a tool has no name");
		goto out;
	}
	if (json_object_set_new(fn, "name", json_stringn(name.data ? name.data : "", name.len)))
		goto oom;
	json_object_del(fn, "namespace");
	const json_t *nsd = json_is_object(ns) ? json_object_get(ns, "description") : NULL;
	if (tf_pyjson_truthy(nsd)) {
		const json_t *own = json_object_get(fn, "description");
		if ((st = name_text(&desc, nsd)) || (st = tf_buf_putc(&desc, '\n')) ||
		    (tf_pyjson_truthy(own) && (st = name_text(&desc, own))))
			goto out;
		if (json_object_set_new(fn, "description", json_stringn(desc.data, desc.len)))
			goto oom;
	}
	st = tf_pyjson_dump(out, fn, false);
	goto out;
oom:
	st = nomem();
out:
	json_decref(ns);
	json_decref(fn);
	tf_buf_release(&name);
	tf_buf_release(&desc);
	return st;
}

/* A call's arguments as an object: a dict as given, a JSON string (even
 * double-encoded) read, anything else {"arguments": raw}. New reference. */
static json_t *arguments_of(const json_t *raw)
{
	json_t *v = json_incref((json_t *)raw);
	for (int round = 0; round < 2 && json_is_string(v); round++) {
		const char *s = json_string_value(v);
		size_t n = json_string_length(v), a = 0, z = n;
		while (a < z && strchr(" \t\n\r\v\f", s[a]) && s[a])
			a++;
		while (z > a && strchr(" \t\n\r\v\f", s[z - 1]) && s[z - 1])
			z--;
		json_t *next = a == z ? json_object() : tf_pyjson_loads(s, n);
		if (!next)
			break;
		json_decref(v);
		v = next;
	}
	if (json_is_object(v))
		return v;
	json_decref(v);
	return json_pack("{s:O}", "arguments", raw ? (json_t *)raw : json_null());
}

static tf_status write_calls(struct tf_buf *out, const json_t *calls)
{
	tf_status st = tf_buf_puts(out, "\n\n" CALLS_OPEN "\n");
	for (size_t i = 0; i < json_array_size(calls) && !st; i++) {
		const json_t *c = json_array_get(calls, i);
		if (i && (st = tf_buf_putc(out, '\n')))
			break;
		if (!json_is_object(c))
			return tf_err(TF_ERR_FORMAT, "tool_calls entries must be objects");
		const json_t *f = json_object_get(c, "function");
		const json_t *fn = f && !json_is_null(f) ? f : c;
		if (!json_is_object(fn))
			return tf_err(TF_ERR_FORMAT, "a tool call's function must be an object");
		if ((st = tf_buf_puts(out, "<" DSML " invoke name=\"")))
			break;
		bool named = qualified_name(out, fn, json_object_get(fn, "namespace"), &st);
		if (st)
			break;
		if (!named)
			return tf_err(TF_ERR_FORMAT, "a tool call has no name");
		if ((st = tf_buf_puts(out, "\">\n")))
			break;
		json_t *args = arguments_of(json_object_get(fn, "arguments"));
		if (!args)
			return nomem();
		const char *key;
		json_t *v;
		bool first = true;
		json_object_foreach(args, key, v) {
			if ((!first && (st = tf_buf_putc(out, '\n'))) ||
			    (st = tf_buf_printf(out, "<" DSML " parameter name=\"%s\" string=\"%s\">", key,
						json_is_string(v) ? "true" : "false")))
				break;
			first = false;
			st = json_is_string(v) ? tf_buf_append(out, json_string_value(v), json_string_length(v)) :
						 tf_pyjson_dump(out, v, false);
			if (st || (st = tf_buf_puts(out, "</" DSML " parameter>")))
				break;
		}
		json_decref(args);
		if (!st)
			st = tf_buf_puts(out, "\n</" DSML " invoke>");
	}
	return st ? st : tf_buf_puts(out, "\n" CALLS_CLOSE);
}

/* A call's id for ordering tool results: "id", else "function"."id". */
static const char *call_id(const json_t *c)
{
	const json_t *id = json_object_get(c, "id");
	if (tf_pyjson_truthy(id) && json_is_string(id))
		return json_string_value(id);
	const json_t *f = json_object_get(c, "function");
	id = json_is_object(f) ? json_object_get(f, "id") : NULL;
	return json_is_string(id) ? json_string_value(id) : "";
}

static tf_status normalize_one(struct render *r, const json_t *m, size_t i)
{
	struct msg *x = &r->msgs[r->nmsgs];
	const json_t *rv = json_is_object(m) ? json_object_get(m, "role") : NULL;
	if (!rv)
		return tf_err(TF_ERR_FORMAT, "messages[%zu]: an object with a role", i);
	const char *name = json_is_string(rv) ? json_string_value(rv) : "";
	static const struct {
		const char *name;
		enum role role;
	} roles[] = {{"system", R_SYSTEM}, {"developer", R_SYSTEM}, {"user", R_USER},
		     {"assistant", R_ASSISTANT}, {"tool", R_TOOL}, {"latest_reminder", R_REMINDER}};
	size_t k = 0;
	while (k < sizeof roles / sizeof roles[0] && strcmp(roles[k].name, name))
		k++;
	if (k == sizeof roles / sizeof roles[0]) {
		struct tf_buf t = TF_BUF_INIT;
		name_text(&t, rv);
		tf_status st = tf_err(TF_ERR_FORMAT, "messages[%zu]: unknown role %s", i, t.data ? t.data : "");
		tf_buf_release(&t);
		return st;
	}
	*x = (struct msg){.role = roles[k].role, .index = i};
	r->nmsgs++;
	const char *image = r->s->image_text;
	tf_status st = content_text(&x->content, json_object_get(m, "content"), i, "content", image);
	if (st)
		return st;
	if (x->role == R_ASSISTANT) {
		const json_t *rc = json_object_get(m, "reasoning_content");
		if (!rc || json_is_null(rc))
			rc = json_object_get(m, "reasoning");
		if (rc && !json_is_null(rc) && (st = content_text(&x->reasoning, rc, i, "reasoning_content", NULL)))
			return st;
		const json_t *tc = json_object_get(m, "tool_calls");
		if (tf_pyjson_truthy(tc)) {
			if (!json_is_array(tc))
				return tf_err(TF_ERR_FORMAT, "messages[%zu].tool_calls must be a list", i);
			x->calls = tc;
		}
	} else if (x->role == R_TOOL) {
		const json_t *id = json_object_get(m, "tool_call_id");
		if (json_is_string(id))
			st = tf_buf_append(&x->tool_id, json_string_value(id), json_string_length(id));
		else if (tf_pyjson_truthy(id))
			st = tf_pyjson_dump(&x->tool_id, id, false);
	}
	return st;
}

static tf_status add_block(struct turn *t, struct block b)
{
	if (t->nblocks == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 4;
		struct block *nb = realloc(t->blocks, cap * sizeof *nb);
		if (!nb)
			return nomem();
		t->blocks = nb;
		t->cap = cap;
	}
	t->blocks[t->nblocks++] = b;
	return TF_OK;
}

/* The rank of a tool result: its id's position among the calling turn's
 * calls (the last call of that id), else 0. */
static size_t rank_of(const json_t *calls, const struct msg *m)
{
	const char *id = m->tool_id.data ? m->tool_id.data : "";
	for (size_t k = json_array_size(calls); k-- > 0;) {
		const char *c = call_id(json_array_get(calls, k));
		if (*c && !strcmp(c, id))
			return k;
	}
	return 0;
}

/* Tool results into user turns, then each turn's results in call order
 * (stable, as Python's sorted). */
static tf_status merge(struct render *r)
{
	const json_t *order = NULL; /* the latest calling turn's calls */
	bool known = false;
	for (size_t i = 0; i < r->nmsgs; i++) {
		struct msg *m = &r->msgs[i];
		if (m->role == R_ASSISTANT && m->calls) {
			order = m->calls;
			known = false;
			for (size_t k = 0; k < json_array_size(order); k++) {
				const json_t *c = json_array_get(order, k);
				if (!json_is_object(c))
					return tf_err(TF_ERR_FORMAT, "tool_calls entries must be objects");
				known = known || *call_id(c);
			}
		}
		struct turn *last = r->nturns ? &r->turns[r->nturns - 1] : NULL;
		if (m->role == R_USER || m->role == R_TOOL) {
			struct block b = {.msg = i, .tool = m->role == R_TOOL,
					  .rank = m->role == R_TOOL && known ? rank_of(order, m) : 0};
			if (!last || last->role != R_USER) {
				last = &r->turns[r->nturns++];
				*last = (struct turn){.role = R_USER, .order_set = known};
			}
			tf_status st = add_block(last, b);
			if (st)
				return st;
		} else {
			r->turns[r->nturns++] = (struct turn){.role = m->role, .msg = i};
		}
	}
	for (size_t t = 0; t < r->nturns; t++) {
		struct turn *u = &r->turns[t];
		if (u->role != R_USER || !u->order_set)
			continue;
		/* the tool blocks alone, insertion-sorted (stable), then put back
		   into the tool slots in their new order */
		struct block *tools = malloc(u->nblocks * sizeof *tools);
		size_t n = 0;
		if (!tools)
			return nomem();
		for (size_t i = 0; i < u->nblocks; i++) {
			if (!u->blocks[i].tool)
				continue;
			size_t j = n++;
			for (; j > 0 && tools[j - 1].rank > u->blocks[i].rank; j--)
				tools[j] = tools[j - 1];
			tools[j] = u->blocks[i];
		}
		for (size_t i = 0, k = 0; i < u->nblocks; i++)
			if (u->blocks[i].tool)
				u->blocks[i] = tools[k++];
		free(tools);
	}
	return TF_OK;
}

static tf_status put(struct render *r, const char *s)
{
	return tf_buf_puts(r->out, s);
}

static tf_status put_buf(struct render *r, const struct tf_buf *b)
{
	return b->len ? tf_buf_append(r->out, b->data, b->len) : TF_OK;
}

static tf_status write_system(struct render *r, size_t t)
{
	const struct msg *m = &r->msgs[r->turns[t].msg];
	tf_status st;
	if ((t > 0 && (st = put(r, TF_CHAT_SYSTEM))) || (st = put_buf(r, &m->content)))
		return st;
	if (t == 0 && r->sys_extras && r->s->tools) {
		if ((st = put(r, "\n\n")) || (st = put(r, TOOLS_HEAD)))
			return st;
		for (size_t i = 0; i < json_array_size(r->s->tools); i++)
			if ((i && (st = put(r, "\n"))) || (st = write_tool(r->out, json_array_get(r->s->tools, i))))
				return st;
		if ((st = put(r, TOOLS_TAIL)))
			return st;
	}
	if (t == 0 && r->sys_extras && r->s->response_format &&
	    ((st = put(r, FORMAT_HEAD)) || (st = tf_pyjson_dump(r->out, r->s->response_format, false))))
		return st;
	return TF_OK;
}

static tf_status write_user(struct render *r, const struct turn *u)
{
	tf_status st = put(r, TF_CHAT_USER);
	for (size_t k = 0; k < u->nblocks && !st; k++) {
		const struct block *b = &u->blocks[k];
		if ((k && (st = put(r, "\n\n"))) || (b->tool && (st = put(r, "<tool_result>"))))
			break;
		if (b->msg == r->last_user)
			*r->rewind = r->out->len;
		if ((st = put_buf(r, &r->msgs[b->msg].content)) || (b->tool && (st = put(r, "</tool_result>"))))
			break;
	}
	return st;
}

/* Count the escaped image markers that start before off. */
static size_t images_before(const char *s, size_t len, size_t off)
{
	size_t n = 0, k = sizeof TF_CHAT_IMAGE - 1;
	for (const char *p = s; (p = memmem(p, len - (size_t)(p - s), TF_CHAT_IMAGE, k)) && (size_t)(p - s) < off;
	     p += k)
		n++;
	return n;
}

/* Typed image markers as plain text; the offsets move with the text. */
static tf_status escape_images(struct tf_chat_prompt *p)
{
	const size_t k = sizeof TF_CHAT_IMAGE - 1, grow = sizeof TF_CHAT_IMAGE_ESCAPED - 1 - k;
	if (!p->text.len || !memmem(p->text.data, p->text.len, TF_CHAT_IMAGE, k))
		return TF_OK;
	p->history_len += grow * images_before(p->text.data, p->text.len, p->history_len);
	p->rewind += grow * images_before(p->text.data, p->text.len, p->rewind);
	struct tf_buf out = TF_BUF_INIT;
	const char *s = p->text.data, *end = s + p->text.len;
	tf_status st = TF_OK;
	for (const char *q; !st && (q = memmem(s, (size_t)(end - s), TF_CHAT_IMAGE, k)); s = q + k)
		if (!(st = tf_buf_append(&out, s, (size_t)(q - s))))
			st = tf_buf_puts(&out, TF_CHAT_IMAGE_ESCAPED);
	if (!st)
		st = tf_buf_append(&out, s, (size_t)(end - s));
	if (st) {
		tf_buf_release(&out);
		return st;
	}
	tf_buf_release(&p->text);
	p->text = out;
	return TF_OK;
}

static tf_status write_turns(struct render *r, struct tf_chat_prompt *p)
{
	const struct tf_chat_settings *s = r->s;
	bool drop = s->drop_thinking && !(r->sys_extras && s->tools);
	bool has_last = false;
	size_t last = 0; /* the last user turn (or a system message after the first) */
	for (size_t t = 0; t < r->nturns; t++)
		if (r->turns[t].role == R_USER || (r->turns[t].role == R_SYSTEM && t > 0))
			has_last = true, last = t;
	tf_status st = put(r, TF_CHAT_BOS);
	p->history_len = p->rewind = 0;
	for (size_t t = 0; t < r->nturns && !st; t++) {
		const struct turn *u = &r->turns[t];
		const struct msg *m = &r->msgs[u->msg];
		if (t == 0 && (s->thinking || u->role == R_SYSTEM) && (st = put(r, TF_CHAT_SYSTEM)))
			break;
		if (t == 0 && s->thinking &&
		    (st = tf_buf_printf(r->out, "Reasoning Effort: %d (range 1-100, the higher the value, the "
						"more thorough the reasoning)\n\n", s->budget)))
			break;
		bool after_last = !has_last || t > last;
		switch (u->role) {
		case R_SYSTEM:
			st = write_system(r, t);
			break;
		case R_USER:
			st = write_user(r, u);
			break;
		case R_REMINDER:
			if (!(st = put(r, TF_CHAT_REMINDER)))
				st = put_buf(r, &m->content);
			break;
		case R_ASSISTANT:
			if (s->thinking && (!drop || after_last) &&
			    ((st = put_buf(r, &m->reasoning)) || (st = put(r, TF_CHAT_THINK_END))))
				break;
			if ((st = put_buf(r, &m->content)) || (m->calls && (st = write_calls(r->out, m->calls))))
				break;
			st = put(r, TF_CHAT_EOS);
			break;
		case R_TOOL:
			st = tf_err(TF_ERR_INTERNAL, "a tool message outside a user turn");
			break;
		}
		if (st)
			break;
		bool has_next = t + 1 < r->nturns;
		enum role next = has_next ? r->turns[t + 1].role : R_USER;
		p->history_len = r->out->len;
		if (has_next && next != R_ASSISTANT && next != R_REMINDER)
			continue;
		if (!has_next && !s->generation && u->role != R_ASSISTANT)
			continue;
		if (u->role == R_USER || (u->role == R_SYSTEM && t > 0)) {
			bool open = s->thinking && (!drop || !has_last || t >= last);
			if ((st = put(r, TF_CHAT_ASSISTANT)) || (st = put(r, open ? TF_CHAT_THINK : TF_CHAT_THINK_END)))
				break;
		}
	}
	if (r->last_user == SIZE_MAX)
		p->rewind = p->history_len;
	return st;
}

void tf_chat_prompt_init(struct tf_chat_prompt *p)
{
	*p = (struct tf_chat_prompt){.text = TF_BUF_INIT};
}

void tf_chat_prompt_release(struct tf_chat_prompt *p)
{
	tf_buf_release(&p->text);
	tf_chat_prompt_init(p);
}

tf_status tf_chat_render(const json_t *messages, const struct tf_chat_settings *s,
			 struct tf_chat_prompt *p)
{
	tf_buf_reset(&p->text);
	p->history_len = p->rewind = 0;
	p->thinking = s->thinking;
	if (s->budget < 1 || s->budget > 100)
		return tf_err(TF_ERR_FORMAT, "reasoning_effort must be 1-100 or low / medium / high / max");
	if (!json_is_array(messages) || !json_array_size(messages))
		return tf_err(TF_ERR_FORMAT, "messages must be a non-empty list");
	size_t n = json_array_size(messages);
	struct render r = {.s = s, .out = &p->text};
	r.msgs = calloc(n + 1, sizeof *r.msgs);
	r.turns = calloc(n + 1, sizeof *r.turns);
	tf_status st = r.msgs && r.turns ? TF_OK : nomem();
	for (size_t i = 0; i < n && !st; i++)
		st = normalize_one(&r, json_array_get(messages, i), i);
	if (!st && (s->tools || s->response_format)) {
		if (r.msgs[0].role != R_SYSTEM) {
			memmove(r.msgs + 1, r.msgs, r.nmsgs * sizeof *r.msgs);
			r.msgs[0] = (struct msg){.role = R_SYSTEM};
			r.nmsgs++;
		}
		r.sys_extras = true;
	}
	r.last_user = SIZE_MAX;
	r.rewind = &p->rewind;
	for (size_t i = 0; !st && i < r.nmsgs; i++)
		if (r.msgs[i].role == R_USER)
			r.last_user = i;
	if (!st)
		st = merge(&r);
	if (!st)
		st = write_turns(&r, p);
	if (!st)
		st = escape_images(p);
	if (st) {
		tf_buf_reset(&p->text);
		p->history_len = p->rewind = 0;
	}
	for (size_t i = 0; r.msgs && i < r.nmsgs; i++) {
		tf_buf_release(&r.msgs[i].content);
		tf_buf_release(&r.msgs[i].reasoning);
		tf_buf_release(&r.msgs[i].tool_id);
	}
	for (size_t i = 0; r.turns && i < r.nturns; i++)
		free(r.turns[i].blocks);
	free(r.msgs);
	free(r.turns);
	return st;
}
