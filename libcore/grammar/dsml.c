/* dsml.c: the grammar of DeepSeek-V4.1's DSML tool-call markup (grammar.h,
 * tf_grammar_dsml): strict and forced tool calls, whose parameters follow
 * each tool's schema inside the markup the model writes and the DSML
 * reader (text/dsml.c) reads back.
 *
 * The values follow the reader: a property whose schema types include
 * "string" is read as the raw text between the tags, any other as JSON. So
 * a string property is raw text (no '<', so no tag can start inside it),
 * and the rest are the schema compiler's JSON (schema.c). */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

#include "grammar/grammar_impl.h"

#define MARK "<\xef\xbd\x9c" "DSML\xef\xbd\x9c"  /* <｜DSML｜ */
#define CLOSE "</\xef\xbd\x9c" "DSML\xef\xbd\x9c" /* </｜DSML｜ */
#define BAR 0xFF5C                                /* ｜ */

/* Codepoints from 0x20 up (tab and newline too) but the ones in but[]. */
static int32_t chars_but(struct gast *t, const uint32_t *but, size_t nbut)
{
	struct cpset s = {0};
	tf_status st = cpset_add(&s, 0x20, 0x10FFFF);
	if (!st)
		st = cpset_add(&s, '\t', '\n');
	for (size_t i = 0; !st && i < nbut; i++)
		st = cpset_remove(&s, but[i], but[i]);
	if (st) {
		cpset_release(&s);
		return gast_fail(t, tf_err(TF_ERR_NOMEM, "grammar: out of memory"));
	}
	int32_t r = g_cpset(t, &s);
	cpset_release(&s);
	return r;
}

/* Text without "<｜": ([^<] | <+ [^<｜])* <* */
static int32_t free_text(struct gast *t)
{
	const uint32_t lt[] = {'<'}, lt_bar[] = {'<', BAR};
	int32_t lts = g_rep(t, g_byte(t, '<'), 1, -1);
	int32_t unit = g_alt(t, chars_but(t, lt, 1), g_cat(t, lts, chars_but(t, lt_bar, 2)));
	return g_cat(t, g_rep(t, unit, 0, -1), g_rep(t, g_byte(t, '<'), 0, -1));
}

static bool has_string_type(const json_t *s)
{
	const json_t *type = json_object_get(s, "type");
	if (json_is_string(type))
		return !strcmp(json_string_value(type), "string");
	size_t i;
	const json_t *x;
	json_array_foreach(type, i, x)
		if (json_is_string(x) && !strcmp(json_string_value(x), "string"))
			return true;
	const char *unions[] = {"anyOf", "oneOf"};
	for (int u = 0; u < 2; u++)
		json_array_foreach(json_object_get(s, unions[u]), i, x)
			if (has_string_type(x))
				return true;
	return false;
}

static int32_t refuse(struct gast *t, const char *tool, const char *key, const char *why)
{
	return gast_fail(t, tf_err(TF_ERR_UNSUPPORTED, "tool '%s': parameter '%s' %s", tool, key, why));
}

/* A raw string literal s (no '<' in it). */
static int32_t raw_lit(struct gast *t, const char *tool, const char *key, const json_t *s)
{
	const char *v = json_string_value(s);
	if (!v || strchr(v, '<'))
		return refuse(t, tool, key, "has an enum or const value that is not a string without '<'");
	return g_lit(t, v, json_string_length(s));
}

/* A string-typed property's raw text. */
static int32_t raw_string(struct gast *t, const char *tool, const char *key, const json_t *s)
{
	const char *k;
	const json_t *x;
	static const char *const ok[] = {"type", "enum", "const", "minLength", "maxLength", "description",
					 "title", "default", "examples", NULL};
	json_object_foreach((json_t *)s, k, x) {
		bool fine = false;
		for (size_t i = 0; ok[i]; i++)
			fine |= !strcmp(ok[i], k);
		if (!fine)
			return gast_fail(t, tf_err(TF_ERR_UNSUPPORTED, "tool '%s': parameter '%s': '%s' is not "
						   "supported on a string parameter (its raw DSML text keeps only "
						   "enum, const, minLength and maxLength)", tool, key, k));
	}
	if (!json_is_string(json_object_get(s, "type")))
		return refuse(t, tool, key, "mixes string with other types (a DSML value is read as one)");
	if ((x = json_object_get(s, "const")))
		return raw_lit(t, tool, key, x);
	if ((x = json_object_get(s, "enum"))) {
		int32_t r = g_none(t);
		size_t i;
		const json_t *e;
		json_array_foreach(x, i, e)
			r = g_alt(t, r, raw_lit(t, tool, key, e));
		return r;
	}
	const json_t *lo = json_object_get(s, "minLength"), *hi = json_object_get(s, "maxLength");
	int64_t min = json_is_integer(lo) ? json_integer_value(lo) : 0;
	int64_t max = json_is_integer(hi) ? json_integer_value(hi) : -1;
	if (min < 0 || min > 10000 || max > 10000 || (max >= 0 && max < min))
		return refuse(t, tool, key, "has string lengths out of range");
	const uint32_t lt[] = {'<'};
	return g_rep(t, chars_but(t, lt, 1), (int32_t)min, (int32_t)max);
}

static int32_t param(struct gast *t, const char *k, bool string, int32_t val)
{
	char head[512];
	int n = snprintf(head, sizeof(head), MARK " parameter name=\"%s\" string=\"%s\">", k,
			 string ? "true" : "false");
	if (n < 0 || (size_t)n >= sizeof(head))
		return gast_fail(t, tf_err(TF_ERR_UNSUPPORTED, "a parameter name is too long: '%.40s...'", k));
	return g_cat(t, g_cat(t, g_lit(t, head, (size_t)n), val), g_str(t, CLOSE " parameter>"));
}

/* Any parameters: names without quotes or tags, values free text. */
static int32_t any_params(struct gast *t)
{
	const uint32_t bad[] = {'"', '<', '>', '\n'};
	int32_t name = g_rep(t, chars_but(t, bad, 4), 1, 256);
	int32_t p = g_cat(t, g_str(t, MARK " parameter name=\""), name);
	p = g_cat(t, p, g_alt(t, g_str(t, "\" string=\"true\">"), g_str(t, "\" string=\"false\">")));
	p = g_cat(t, g_cat(t, p, free_text(t)), g_str(t, CLOSE " parameter>\n"));
	return g_rep(t, p, 0, -1);
}

/* The parameters of a schema: its properties in order, the required ones
 * always, each followed by a newline. */
static int32_t schema_params(struct gast *t, const char *tool, const json_t *schema)
{
	const json_t *props = json_object_get(schema, "properties"), *req = json_object_get(schema, "required");
	const char *k;
	const json_t *x;
	json_object_foreach((json_t *)schema, k, x)
		if (strcmp(k, "type") && strcmp(k, "properties") && strcmp(k, "required") &&
		    strcmp(k, "additionalProperties") && strcmp(k, "description") && strcmp(k, "title") &&
		    strcmp(k, "$defs") && strcmp(k, "definitions") && strcmp(k, "$schema"))
			return gast_fail(t, tf_err(TF_ERR_UNSUPPORTED, "tool '%s': parameters: '%s' is not "
						   "supported (an object schema with properties)", tool, k));
	if (props && !json_is_object(props))
		return gast_fail(t, tf_err(TF_ERR_FORMAT, "tool '%s': parameters.properties must be an "
					   "object", tool));
	size_t n = json_object_size(props), i = 0;
	if (!n)
		return g_empty(t);
	int32_t *items = tf_alloc_array(n, sizeof(*items));
	bool *required = tf_alloc_array(n, sizeof(*required));
	if (!items || !required) {
		free(items);
		free(required);
		return gast_fail(t, tf_err(TF_ERR_NOMEM, "grammar: out of memory"));
	}
	json_object_foreach((json_t *)props, k, x) {
		required[i] = false;
		size_t j;
		const json_t *r;
		json_array_foreach(req, j, r)
			required[i] |= json_is_string(r) && !strcmp(json_string_value(r), k);
		bool str = has_string_type(x);
		int32_t val = str ? raw_string(t, tool, k, x) : gschema_value(t, schema, x);
		items[i++] = g_cat(t, param(t, k, str, val), g_byte(t, '\n'));
	}
	int32_t r = g_seqopt(t, items, required, n, g_empty(t));
	free(items);
	free(required);
	return r;
}

/* Whether a schema's parameters compile (a non-strict tool falls back to
 * any parameters when not). */
static bool compiles(const char *tool, const json_t *schema)
{
	struct gast s = {0};
	int32_t r = schema_params(&s, tool, schema);
	bool ok = r >= 0 && !s.err;
	gast_release(&s);
	return ok;
}

tf_status tf_grammar_dsml(const struct tf_gvocab *v, const struct tf_gdsml_tool *tools, size_t n,
			  bool forced, struct tf_grammar **out)
{
	*out = NULL;
	struct gast t = {0};
	int32_t inv = g_none(&t);
	for (size_t i = 0; i < n; i++) {
		char head[512];
		int hn = snprintf(head, sizeof(head), MARK " invoke name=\"%s\">\n", tools[i].name);
		if (hn < 0 || (size_t)hn >= sizeof(head) || strchr(tools[i].name, '"')) {
			gast_fail(&t, tf_err(TF_ERR_UNSUPPORTED, "tool name '%.40s' cannot be called in DSML",
					     tools[i].name));
			break;
		}
		int32_t ps = tools[i].params ? schema_params(&t, tools[i].name, tools[i].params)
			: any_params(&t);
		inv = g_alt(&t, inv, g_cat(&t, g_cat(&t, g_lit(&t, head, (size_t)hn), ps),
					    g_str(&t, CLOSE " invoke>")));
	}
	int32_t block = g_cat(&t, g_str(&t, MARK " calls>\n"), g_list(&t, inv, g_byte(&t, '\n'), false));
	block = g_cat(&t, block, g_str(&t, "\n" CLOSE " calls>"));
	int32_t root = forced ? block
		: g_cat(&t, free_text(&t), g_opt(&t, g_cat(&t, g_str(&t, "\n\n"), block)));
	tf_status st = gauto_new(v, &t, root, out);
	gast_release(&t);
	return st;
}

bool tf_grammar_dsml_fits(const char *name, const json_t *params)
{
	return compiles(name, params);
}
