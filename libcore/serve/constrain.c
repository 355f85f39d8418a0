/* constrain.c: a request's constraint to a grammar (constrain.h). */
#include "serve/constrain.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

struct tf_fgrammar {
	pthread_mutex_t mu;
	struct tf_gvocab *v;
	tf_status st; /* a failed build, kept (with its message) */
	char why[256];
	bool shared; /* the plain family's: one for the process, never freed */
};

static struct tf_fgrammar plain = {.mu = PTHREAD_MUTEX_INITIALIZER, .shared = true};

struct tf_fgrammar *tf_fgrammar_plain(void)
{
	return &plain;
}

struct tf_fgrammar *tf_fgrammar_new(void)
{
	struct tf_fgrammar *g = tf_calloc(1, sizeof(*g));
	if (g)
		pthread_mutex_init(&g->mu, NULL);
	return g;
}

void tf_fgrammar_free(struct tf_fgrammar *g)
{
	if (!g || g->shared)
		return;
	pthread_mutex_destroy(&g->mu);
	tf_gvocab_free(g->v);
	free(g);
}

struct bytes_ctx {
	const struct tf_family *f;
};

static const uint8_t *family_bytes(void *ctx, uint32_t id, size_t *len)
{
	const struct tf_family *f = ((struct bytes_ctx *)ctx)->f;
	return f->text_bytes(f->ctx, id, len);
}

tf_status tf_family_gvocab(const struct tf_family *f, const struct tf_gvocab **out)
{
	*out = NULL;
	if (!f->text_bytes || !f->grammar)
		return tf_err(TF_ERR_UNSUPPORTED, "the %s family cannot constrain output", f->name);
	struct tf_fgrammar *g = f->grammar;
	pthread_mutex_lock(&g->mu);
	if (!g->v && !g->st) {
		struct bytes_ctx c = {f};
		g->st = tf_gvocab_new(f->vocab, family_bytes, &c, &g->v);
		if (g->st)
			snprintf(g->why, sizeof(g->why), "%s", tf_errmsg(g->st));
	}
	tf_status st = g->st;
	*out = g->v;
	pthread_mutex_unlock(&g->mu);
	return st ? tf_err(st, "%s", g->why) : TF_OK;
}

static tf_status choices(const struct tf_gvocab *v, const json_t *list, struct tf_grammar **out)
{
	size_t n = json_array_size(list);
	const char **c = tf_alloc_array(n ? n : 1, sizeof(*c));
	if (!c)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	for (size_t i = 0; i < n; i++)
		c[i] = json_string_value(json_array_get(list, i));
	tf_status st = tf_grammar_choice(v, c, n, out);
	free(c);
	return st;
}

/* The calls block of r's tools (all, or the forced one): strict tools keep
 * their schema or are refused, the others keep it where it compiles. */
static tf_status tools(const struct tf_family *f, const struct tf_gvocab *v, const struct tf_req *r,
		       struct tf_grammar **out)
{
	if (strcmp(f->name, "dsv41"))
		return tf_err(TF_ERR_UNSUPPORTED, "the %s family reads no tool calls (strict and forced "
			      "tool calls need the DeepSeek-V4.1 family)", f->name);
	size_t n = json_array_size(r->tools), k = 0, i;
	struct tf_gdsml_tool *t = tf_alloc_array(n ? n : 1, sizeof(*t));
	if (!t)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	const json_t *x;
	json_array_foreach(r->tools, i, x) {
		const json_t *fn = json_object_get(x, "function");
		const char *name = json_string_value(json_object_get(fn, "name"));
		const json_t *params = json_object_get(fn, "parameters");
		if (r->force && *r->force && strcmp(name, r->force))
			continue;
		bool strict = json_is_true(json_object_get(fn, "strict"));
		if (!json_is_object(params) || (!strict && !tf_grammar_dsml_fits(name, params)))
			params = NULL;
		t[k++] = (struct tf_gdsml_tool){name, params};
	}
	tf_status st = tf_grammar_dsml(v, t, k, r->force != NULL, out);
	free(t);
	return st;
}

tf_status tf_constrain_compile(const struct tf_family *f, const struct tf_req *r,
			       struct tf_grammar **out)
{
	*out = NULL;
	if (r->guide == TF_GUIDE_NONE)
		return TF_OK;
	const struct tf_gvocab *v;
	tf_status st = tf_family_gvocab(f, &v);
	if (st)
		return st;
	switch (r->guide) {
	case TF_GUIDE_NONE:
		return TF_OK;
	case TF_GUIDE_JSON:
		st = tf_grammar_json_object(v, out);
		break;
	case TF_GUIDE_SCHEMA:
		st = tf_grammar_schema(v, r->guide_value, out);
		break;
	case TF_GUIDE_REGEX:
		st = tf_grammar_regex(v, json_string_value(r->guide_value), json_string_length(r->guide_value),
				      out);
		break;
	case TF_GUIDE_CHOICE:
		st = choices(v, r->guide_value, out);
		break;
	case TF_GUIDE_TOOLS:
		st = tools(f, v, r, out);
		break;
	}
	if (st)
		return tf_err_wrap(st, "%s: ", r->guide_param);
	return TF_OK;
}
