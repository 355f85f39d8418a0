/* schema.c: a JSON schema to the pattern tree.
 *
 * Enforced: type (one or a list; nullable), properties (in schema order),
 * required, additionalProperties (false, true, a schema), enum, const,
 * anyOf, oneOf (as anyOf: the branches should not overlap), allOf of one
 * schema, $ref within the document (JSON pointers; recursion unrolled to a
 * depth, deeper branches left out), items, minItems, maxItems, minLength,
 * maxLength, pattern, format (date, time, date-time, uuid, email), minimum,
 * maximum, exclusiveMinimum, exclusiveMaximum (any bound on an integer;
 * whole-number bounds on a number), uniqueItems false, and the annotations
 * (title, description, default, examples, $schema, $id, $comment, $defs,
 * definitions, deprecated, readOnly, writeOnly).
 *
 * The output is compact-ish JSON: whitespace is allowed between tokens up
 * to WS_MAX characters, numbers have at most 16 digits before and after
 * the point, properties come in the schema's order and none beyond the
 * listed ones are produced when properties are given. Everything else is
 * refused with TF_ERR_UNSUPPORTED naming the keyword. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "grammar/grammar_impl.h"

#define WS_MAX 12
#define ANY_DEPTH 5      /* nesting of a value the schema leaves open */
#define REF_DEPTH 6      /* $ref expansions on one path */
#define MAX_LENGTH 10000 /* the largest minLength/maxLength/minItems/maxItems honoured */
#define BIG 999999999999999LL /* 15 digits: the widest bound */

struct sc {
	struct gast *t;
	const json_t *root;
	int refs;
};

static int32_t refuse(struct sc *c, const char *key, const char *why)
{
	return gast_fail(c->t, tf_err(TF_ERR_UNSUPPORTED, "json schema: '%s' %s", key,
				      why ? why : "is not supported"));
}

static int32_t bad(struct sc *c, const char *key, const char *why)
{
	return gast_fail(c->t, tf_err(TF_ERR_FORMAT, "json schema: '%s' %s", key, why));
}

static int32_t ws(struct sc *c)
{
	uint8_t set[32] = {0};
	set[' ' >> 3] |= 1u << (' ' & 7);
	set['\t' >> 3] |= 1u << ('\t' & 7);
	set['\n' >> 3] |= 1u << ('\n' & 7);
	return g_rep(c->t, g_set(c->t, set), 0, WS_MAX);
}

/* "x" with whitespace around: ws x ws */
static int32_t punct(struct sc *c, const char *s)
{
	return g_cat(c->t, g_cat(c->t, ws(c), g_str(c->t, s)), ws(c));
}

/* One character of JSON string text: any codepoint but " \ and controls,
 * or an escape (\u of a surrogate left out, so one escape is one
 * codepoint as JSON Schema counts length). */
static int32_t str_char(struct sc *c)
{
	struct gast *t = c->t;
	int32_t plain = g_alt(t, g_alt(t, g_range(t, 0x20, 0x21), g_range(t, 0x23, 0x5B)),
			      g_cprange(t, 0x5D, 0x10FFFF));
	int32_t hex = g_alt(t, g_alt(t, g_range(t, '0', '9'), g_range(t, 'a', 'f')), g_range(t, 'A', 'F'));
	int32_t nonsur = g_alt(t, g_alt(t, g_range(t, '0', '9'), g_range(t, 'a', 'c')),
			       g_alt(t, g_alt(t, g_range(t, 'e', 'f'), g_range(t, 'A', 'C')), g_range(t, 'E', 'F')));
	int32_t d = g_cat(t, g_alt(t, g_byte(t, 'd'), g_byte(t, 'D')), g_range(t, '0', '7'));
	int32_t u = g_cat(t, g_str(t, "\\u"),
			  g_alt(t, g_cat(t, nonsur, g_rep(t, hex, 3, 3)), g_cat(t, d, g_rep(t, hex, 2, 2))));
	uint8_t set[32] = {0};
	for (const char *e = "\"\\/bfnrt"; *e; e++)
		set[(uint8_t)*e >> 3] |= (uint8_t)(1u << (*e & 7));
	int32_t esc = g_cat(t, g_byte(t, '\\'), g_set(t, set));
	return g_alt(t, plain, g_alt(t, esc, u));
}

static int32_t string_of(struct sc *c, int32_t min, int32_t max)
{
	struct gast *t = c->t;
	return g_cat(t, g_cat(t, g_byte(t, '"'), g_rep(t, str_char(c), min, max)), g_byte(t, '"'));
}

static int32_t digits(struct sc *c, int32_t min, int32_t max)
{
	return g_rep(c->t, g_range(c->t, '0', '9'), min, max);
}

static int32_t integer(struct sc *c)
{
	struct gast *t = c->t;
	int32_t mag = g_alt(t, g_byte(t, '0'), g_cat(t, g_range(t, '1', '9'), digits(c, 0, 15)));
	return g_cat(t, g_opt(t, g_byte(t, '-')), mag);
}

static int32_t fraction(struct sc *c)
{
	return g_cat(c->t, g_byte(c->t, '.'), digits(c, 1, 16));
}

static int32_t number(struct sc *c)
{
	struct gast *t = c->t;
	int32_t sign = g_opt(t, g_alt(t, g_byte(t, '+'), g_byte(t, '-')));
	int32_t exp = g_cat(t, g_cat(t, g_alt(t, g_byte(t, 'e'), g_byte(t, 'E')), sign), digits(c, 1, 2));
	return g_cat(t, g_cat(t, integer(c), g_opt(t, fraction(c))), g_opt(t, exp));
}

/* Decimal numerals a..b of exactly len digits (leading zeros allowed). */
static int32_t same_len(struct sc *c, const char *a, const char *b, size_t len)
{
	struct gast *t = c->t;
	if (!len)
		return g_empty(t);
	if (len == 1)
		return g_range(t, (uint8_t)a[0], (uint8_t)b[0]);
	if (a[0] == b[0])
		return g_cat(t, g_byte(t, (uint8_t)a[0]), same_len(c, a + 1, b + 1, len - 1));
	char zeros[20], nines[20];
	memset(zeros, '0', len - 1);
	memset(nines, '9', len - 1);
	bool lo_full = !memcmp(a + 1, zeros, len - 1), hi_full = !memcmp(b + 1, nines, len - 1);
	char from = a[0], to = b[0];
	int32_t r = g_none(t);
	if (!lo_full) {
		r = g_alt(t, r, g_cat(t, g_byte(t, (uint8_t)from), same_len(c, a + 1, nines, len - 1)));
		from++;
	}
	if (!hi_full) {
		r = g_alt(t, r, g_cat(t, g_byte(t, (uint8_t)to), same_len(c, zeros, b + 1, len - 1)));
		to--;
	}
	if (from <= to)
		r = g_alt(t, r, g_cat(t, g_range(t, (uint8_t)from, (uint8_t)to), digits(c, (int32_t)len - 1,
											  (int32_t)len - 1)));
	return r;
}

/* Numerals of lo..hi (0 <= lo), without leading zeros. */
static int32_t uint_range(struct sc *c, int64_t lo, int64_t hi)
{
	int32_t r = g_none(c->t);
	if (lo < 0)
		lo = 0;
	int64_t p = 1;
	for (int len = 1; len <= 16 && lo <= hi; len++, p *= 10) {
		int64_t top = p * 10 - 1, a = lo, b = hi < top ? hi : top;
		if (a > top)
			continue;
		char sa[24], sb[24];
		snprintf(sa, sizeof(sa), "%0*lld", len, (long long)a);
		snprintf(sb, sizeof(sb), "%0*lld", len, (long long)b);
		r = g_alt(c->t, r, same_len(c, sa, sb, (size_t)len));
		lo = top + 1;
	}
	return r;
}

static int32_t int_range(struct sc *c, int64_t lo, int64_t hi)
{
	struct gast *t = c->t;
	if (lo > hi)
		return g_none(t);
	int32_t r = hi >= 0 ? uint_range(c, lo > 0 ? lo : 0, hi) : g_none(t);
	if (lo < 0)
		r = g_alt(t, r, g_cat(t, g_byte(t, '-'), uint_range(c, hi < 0 ? -hi : 1, -lo)));
	return r;
}

/* A bound: present, its value, exclusive. Draft 4's boolean exclusives
 * and draft 6's numeric ones both read. */
struct bound {
	bool on, excl;
	double v;
};

static bool read_bounds(struct sc *c, const json_t *s, struct bound *lo, struct bound *hi)
{
	const json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
	const json_t *emn = json_object_get(s, "exclusiveMinimum"), *emx = json_object_get(s, "exclusiveMaximum");
	*lo = (struct bound){0};
	*hi = (struct bound){0};
	if (mn && !json_is_number(mn))
		return bad(c, "minimum", "must be a number"), false;
	if (mx && !json_is_number(mx))
		return bad(c, "maximum", "must be a number"), false;
	if (mn)
		*lo = (struct bound){true, json_is_true(emn), json_number_value(mn)};
	if (mx)
		*hi = (struct bound){true, json_is_true(emx), json_number_value(mx)};
	if (emn && json_is_number(emn)) {
		double v = json_number_value(emn);
		if (!lo->on || v >= lo->v)
			*lo = (struct bound){true, true, v};
	}
	if (emx && json_is_number(emx)) {
		double v = json_number_value(emx);
		if (!hi->on || v <= hi->v)
			*hi = (struct bound){true, true, v};
	}
	if ((emn && !json_is_number(emn) && !json_is_boolean(emn)) ||
	    (emx && !json_is_number(emx) && !json_is_boolean(emx)))
		return bad(c, emn ? "exclusiveMinimum" : "exclusiveMaximum", "must be a number"), false;
	if ((lo->on && fabs(lo->v) > (double)BIG) || (hi->on && fabs(hi->v) > (double)BIG))
		return refuse(c, lo->on && fabs(lo->v) > (double)BIG ? "minimum" : "maximum",
			      "beyond 15 digits is not supported"), false;
	return true;
}

static int32_t integer_bounded(struct sc *c, const json_t *s)
{
	struct bound lo, hi;
	if (!read_bounds(c, s, &lo, &hi))
		return -1;
	if (!lo.on && !hi.on)
		return integer(c);
	int64_t a = -BIG, b = BIG;
	if (lo.on)
		a = lo.excl ? (int64_t)floor(lo.v) + 1 : (int64_t)ceil(lo.v);
	if (hi.on)
		b = hi.excl ? (int64_t)ceil(hi.v) - 1 : (int64_t)floor(hi.v);
	return int_range(c, a, b);
}

/* A number within whole-number bounds: integers in range, k.f with k
 * chosen so that every fraction stays inside, and no exponent. */
static int32_t number_bounded(struct sc *c, const json_t *s)
{
	struct gast *t = c->t;
	struct bound lo, hi;
	if (!read_bounds(c, s, &lo, &hi))
		return -1;
	if (!lo.on && !hi.on)
		return number(c);
	if ((lo.on && lo.v != floor(lo.v)) || (hi.on && hi.v != floor(hi.v)))
		return refuse(c, lo.on && lo.v != floor(lo.v) ? (lo.excl ? "exclusiveMinimum" : "minimum")
							  : (hi.excl ? "exclusiveMaximum" : "maximum"),
			      "with a fraction on a number is not supported (whole-number bounds are)");
	int64_t L = lo.on ? (int64_t)lo.v : -BIG, H = hi.on ? (int64_t)hi.v : BIG;
	int64_t Li = lo.on && lo.excl ? L + 1 : L, Hi = hi.on && hi.excl ? H - 1 : H;
	int32_t r = int_range(c, Li, Hi);
	/* k.f >= 0: k >= Li, k + 1 <= H (inclusive) or k + 1 <= H (exclusive: k.f < H) */
	int64_t hk = hi.on ? H - 1 : BIG;
	if (hk >= (Li > 0 ? Li : 0))
		r = g_alt(t, r, g_cat(t, uint_range(c, Li > 0 ? Li : 0, hk), fraction(c)));
	/* -k.f in (-(k+1), -k]: k + 1 <= -L, and -k <= H (inclusive) or < H */
	int64_t nk_hi = lo.on ? -L - 1 : BIG;
	int64_t nk_lo = hi.on ? (hi.excl ? -H + 1 : -H) : 0;
	if (nk_lo < 0)
		nk_lo = 0;
	if (nk_hi >= nk_lo)
		r = g_alt(t, r, g_cat(t, g_cat(t, g_byte(t, '-'), uint_range(c, nk_lo, nk_hi)), fraction(c)));
	return r;
}

static int32_t any_value(struct sc *c, int depth);

static int32_t value(struct sc *c, const json_t *s);

static int32_t list_body(struct sc *c, int32_t item, int32_t again, int32_t min, int32_t max)
{
	struct gast *t = c->t;
	/* item (, item){min-1, max-1}; again is a fresh copy for the repeats */
	if (max < 0 && min <= 1)
		return min == 0 ? g_opt(t, g_list(t, item, punct(c, ","), false)) : g_list(t, item, punct(c, ","), false);
	int32_t more = g_rep(t, g_cat(t, punct(c, ","), again), min > 0 ? min - 1 : 0, max < 0 ? -1 : max - 1);
	int32_t body = g_cat(t, item, more);
	return min == 0 ? g_opt(t, body) : body;
}

static int32_t array_of(struct sc *c, int32_t depth, const json_t *items, int32_t min, int32_t max)
{
	struct gast *t = c->t;
	if (max >= 0 && max < min)
		return g_none(t);
	int32_t item = items ? value(c, items) : any_value(c, depth);
	if (item < 0)
		return -1;
	if (max == 0)
		return g_cat(t, g_cat(t, g_byte(t, '['), ws(c)), g_byte(t, ']'));
	int32_t body = list_body(c, item, item, min, max);
	return g_cat(t, g_cat(t, g_cat(t, g_byte(t, '['), ws(c)), body), g_cat(t, ws(c), g_byte(t, ']')));
}

/* { "key": value, ... } with any string keys. */
static int32_t map_of(struct sc *c, int32_t val)
{
	struct gast *t = c->t;
	int32_t pair = g_cat(t, g_cat(t, string_of(c, 0, -1), punct(c, ":")), val);
	int32_t body = g_opt(t, g_list(t, pair, punct(c, ","), false));
	return g_cat(t, g_cat(t, g_cat(t, g_byte(t, '{'), ws(c)), body), g_cat(t, ws(c), g_byte(t, '}')));
}

static int32_t any_value(struct sc *c, int depth)
{
	struct gast *t = c->t;
	int32_t r = g_alt(t, g_alt(t, string_of(c, 0, -1), number(c)),
			  g_alt(t, g_alt(t, g_str(t, "true"), g_str(t, "false")), g_str(t, "null")));
	if (depth > 0) {
		r = g_alt(t, r, array_of(c, depth - 1, NULL, 0, -1));
		r = g_alt(t, r, map_of(c, any_value(c, depth - 1)));
	}
	return r;
}

static const char *const annotations[] = {
	"title", "description", "default", "examples", "$schema", "$id", "$comment", "$defs",
	"definitions", "deprecated", "readOnly", "writeOnly", NULL,
};
static const char *const handled[] = {
	"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties", "required",
	"additionalProperties", "items", "minItems", "maxItems", "minLength", "maxLength", "pattern",
	"format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "nullable",
	"uniqueItems", NULL,
};

static bool in(const char *const *list, const char *k)
{
	for (; *list; list++)
		if (!strcmp(*list, k))
			return true;
	return false;
}

/* Every keyword is known; combinators and $ref stand alone (with
 * annotations). Returns false after reporting. */
static bool check_keywords(struct sc *c, const json_t *s)
{
	const char *k;
	const json_t *v;
	const char *alone = NULL;
	json_object_foreach((json_t *)s, k, v) {
		if (in(annotations, k))
			continue;
		if (!in(handled, k))
			return refuse(c, k, NULL), false;
		if (!strcmp(k, "uniqueItems") && json_is_true(v))
			return refuse(c, k, "true is not supported"), false;
		if (!strcmp(k, "anyOf") || !strcmp(k, "oneOf") || !strcmp(k, "allOf") || !strcmp(k, "$ref"))
			alone = k;
	}
	if (!alone)
		return true;
	json_object_foreach((json_t *)s, k, v) {
		if (in(annotations, k) || !strcmp(k, alone) || !strcmp(k, "uniqueItems"))
			continue;
		char why[96];
		snprintf(why, sizeof(why), "beside '%s' is not supported (put it inside the branches)", alone);
		return refuse(c, k, why), false;
	}
	return true;
}

/* A JSON pointer within the document ("#", "#/$defs/x"). */
static const json_t *resolve(struct sc *c, const char *ref)
{
	if (ref[0] != '#')
		return NULL;
	const json_t *at = c->root;
	const char *p = ref + 1;
	while (*p == '/' && at) {
		p++;
		char key[256];
		size_t n = 0;
		while (*p && *p != '/' && n + 1 < sizeof(key)) {
			if (p[0] == '~' && p[1] == '0')
				key[n++] = '~', p += 2;
			else if (p[0] == '~' && p[1] == '1')
				key[n++] = '/', p += 2;
			else
				key[n++] = *p++;
		}
		key[n] = 0;
		if (json_is_array(at)) {
			char *end;
			unsigned long i = strtoul(key, &end, 10);
			at = *end ? NULL : json_array_get(at, i);
		} else {
			at = json_object_get(at, key);
		}
	}
	return *p ? NULL : at;
}

static bool type_fits(const char *type, const json_t *v)
{
	if (!strcmp(type, "null"))
		return json_is_null(v);
	if (!strcmp(type, "boolean"))
		return json_is_boolean(v);
	if (!strcmp(type, "string"))
		return json_is_string(v);
	if (!strcmp(type, "integer"))
		return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
	if (!strcmp(type, "number"))
		return json_is_number(v);
	if (!strcmp(type, "array"))
		return json_is_array(v);
	if (!strcmp(type, "object"))
		return json_is_object(v);
	return false;
}

static bool types_fit(const json_t *type, const json_t *v)
{
	if (!type)
		return true;
	if (json_is_string(type))
		return type_fits(json_string_value(type), v);
	size_t i;
	const json_t *x;
	json_array_foreach(type, i, x)
		if (json_is_string(x) && type_fits(json_string_value(x), v))
			return true;
	return false;
}

static int32_t literal_json(struct sc *c, const json_t *v)
{
	char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(17));
	if (!s)
		return gast_fail(c->t, tf_err(TF_ERR_NOMEM, "grammar: out of memory"));
	int32_t r = g_str(c->t, s);
	free(s);
	return r;
}

static int32_t enum_of(struct sc *c, const json_t *s)
{
	const json_t *e = json_object_get(s, "enum"), *k = json_object_get(s, "const");
	const json_t *type = json_object_get(s, "type");
	const char *key;
	const json_t *x;
	json_object_foreach((json_t *)s, key, x) {
		if (in(annotations, key) || !strcmp(key, "enum") || !strcmp(key, "const") ||
		    !strcmp(key, "type"))
			continue;
		char why[64];
		snprintf(why, sizeof(why), "beside '%s' is not supported", k ? "const" : "enum");
		return refuse(c, key, why);
	}
	if (e && (!json_is_array(e) || !json_array_size(e)))
		return bad(c, "enum", "must be a non-empty array");
	int32_t r = g_none(c->t);
	if (k) {
		bool listed = !e;
		size_t i;
		json_array_foreach(e, i, x)
			listed |= json_equal(x, k);
		return listed && types_fit(type, k) ? literal_json(c, k) : r;
	}
	size_t i;
	json_array_foreach(e, i, x)
		if (types_fit(type, x))
			r = g_alt(c->t, r, literal_json(c, x));
	return r;
}

static bool read_count(struct sc *c, const json_t *s, const char *key, int32_t *out)
{
	const json_t *v = json_object_get(s, key);
	if (!v)
		return true;
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return bad(c, key, "must be a non-negative integer"), false;
	if (json_integer_value(v) > MAX_LENGTH)
		return refuse(c, key, "above 10000 is not supported"), false;
	*out = (int32_t)json_integer_value(v);
	return true;
}

static int32_t format_of(struct sc *c, const char *f)
{
	static const char date[] =
		"[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)";
	static const char time[] = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
	static const char uuid[] = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";
	static const char email[] = "[a-z0-9]{1,20}(\\.[a-z0-9]{1,20}){0,2}@[a-z0-9]{1,20}(\\.[a-z]{2,8}){1,2}";
	char re[512];
	if (!strcmp(f, "date"))
		snprintf(re, sizeof(re), "^%s$", date);
	else if (!strcmp(f, "time"))
		snprintf(re, sizeof(re), "^%s$", time);
	else if (!strcmp(f, "date-time"))
		snprintf(re, sizeof(re), "^%sT%s$", date, time);
	else if (!strcmp(f, "uuid"))
		snprintf(re, sizeof(re), "^%s$", uuid);
	else if (!strcmp(f, "email"))
		snprintf(re, sizeof(re), "^%s$", email);
	else {
		char why[96];
		snprintf(why, sizeof(why), "\"%.40s\" is not supported (date, time, date-time, uuid, email are)", f);
		return refuse(c, "format", why);
	}
	return grx_parse(c->t, re, strlen(re), true, "format");
}

static int32_t string_type(struct sc *c, const json_t *s)
{
	struct gast *t = c->t;
	const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
	int32_t min = 0, max = -1;
	if (!read_count(c, s, "minLength", &min) || !read_count(c, s, "maxLength", &max))
		return -1;
	bool lengths = json_object_get(s, "minLength") || json_object_get(s, "maxLength");
	if (pat && fmt)
		return refuse(c, "pattern", "with 'format' is not supported");
	if ((pat || fmt) && lengths)
		return refuse(c, pat ? "pattern" : "format", "with 'minLength' or 'maxLength' is not supported");
	if (pat) {
		if (!json_is_string(pat))
			return bad(c, "pattern", "must be a string");
		int32_t body = grx_parse(t, json_string_value(pat), json_string_length(pat), true, "pattern");
		return g_cat(t, g_cat(t, g_byte(t, '"'), body), g_byte(t, '"'));
	}
	if (fmt) {
		if (!json_is_string(fmt))
			return bad(c, "format", "must be a string");
		return g_cat(t, g_cat(t, g_byte(t, '"'), format_of(c, json_string_value(fmt))), g_byte(t, '"'));
	}
	if (max >= 0 && max < min)
		return g_none(t);
	return string_of(c, min, max);
}

static int32_t key_lit(struct sc *c, const char *k)
{
	json_t *j = json_string(k);
	int32_t r = j ? literal_json(c, j) : gast_fail(c->t, TF_ERR_NOMEM);
	json_decref(j);
	return r;
}

static int32_t object_type(struct sc *c, const json_t *s)
{
	struct gast *t = c->t;
	const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
	const json_t *addl = json_object_get(s, "additionalProperties");
	if (props && !json_is_object(props))
		return bad(c, "properties", "must be an object");
	if (req && !json_is_array(req))
		return bad(c, "required", "must be an array");
	if (addl && !json_is_boolean(addl) && !json_is_object(addl))
		return bad(c, "additionalProperties", "must be a boolean or a schema");
	int32_t open_ = g_cat(t, g_byte(t, '{'), ws(c)), close_ = g_cat(t, ws(c), g_byte(t, '}'));
	size_t np = props ? json_object_size(props) : 0, nr = req ? json_array_size(req) : 0;
	if (!np && !nr) {
		if (json_is_false(addl))
			return g_cat(t, open_, close_);
		return map_of(c, json_is_object(addl) ? value(c, addl) : any_value(c, ANY_DEPTH - 1));
	}
	size_t cap = np + nr;
	int32_t *items = tf_alloc_array(cap, sizeof(*items));
	bool *required = tf_alloc_array(cap, sizeof(*required));
	int32_t r = -1;
	size_t n = 0;
	if (!items || !required) {
		gast_fail(t, tf_err(TF_ERR_NOMEM, "grammar: out of memory"));
		goto out;
	}
	const char *k;
	const json_t *v;
	json_object_foreach((json_t *)props, k, v) {
		bool must = false;
		for (size_t i = 0; i < nr; i++)
			must |= json_is_string(json_array_get(req, i)) &&
				!strcmp(json_string_value(json_array_get(req, i)), k);
		int32_t val = value(c, v);
		if (val < 0)
			goto out;
		required[n] = must;
		items[n++] = g_cat(t, g_cat(t, key_lit(c, k), punct(c, ":")), val);
	}
	for (size_t i = 0; i < nr; i++) {
		const json_t *x = json_array_get(req, i);
		if (!json_is_string(x)) {
			bad(c, "required", "must list strings");
			goto out;
		}
		if (props && json_object_get(props, json_string_value(x)))
			continue;
		if (json_is_false(addl)) { /* required but never allowed: nothing matches */
			r = g_none(t);
			goto out;
		}
		int32_t val = json_is_object(addl) ? value(c, addl) : any_value(c, ANY_DEPTH - 1);
		required[n] = true;
		items[n++] = g_cat(t, g_cat(t, key_lit(c, json_string_value(x)), punct(c, ":")), val);
	}
	r = g_cat(t, g_cat(t, open_, g_seqopt(t, items, required, n, punct(c, ","))), close_);
out:
	free(items);
	free(required);
	return r;
}

static int32_t one_type(struct sc *c, const json_t *s, const char *type)
{
	struct gast *t = c->t;
	if (!strcmp(type, "null"))
		return g_str(t, "null");
	if (!strcmp(type, "boolean"))
		return g_alt(t, g_str(t, "true"), g_str(t, "false"));
	if (!strcmp(type, "integer"))
		return integer_bounded(c, s);
	if (!strcmp(type, "number"))
		return number_bounded(c, s);
	if (!strcmp(type, "string"))
		return string_type(c, s);
	if (!strcmp(type, "object"))
		return object_type(c, s);
	if (!strcmp(type, "array")) {
		int32_t min = 0, max = -1;
		const json_t *items = json_object_get(s, "items");
		if (!read_count(c, s, "minItems", &min) || !read_count(c, s, "maxItems", &max))
			return -1;
		if (items && !json_is_object(items) && !json_is_boolean(items))
			return refuse(c, "items", "as an array (tuples) is not supported");
		return array_of(c, ANY_DEPTH - 1, items, min, max);
	}
	char why[80];
	snprintf(why, sizeof(why), "\"%.32s\" is not a JSON Schema type", type);
	return bad(c, "type", why);
}

/* The type a schema without "type" means, from its keywords; NULL: any. */
static const char *implied_type(const json_t *s)
{
	if (json_object_get(s, "properties") || json_object_get(s, "required") ||
	    json_object_get(s, "additionalProperties"))
		return "object";
	if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
		return "array";
	if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
	    json_object_get(s, "pattern") || json_object_get(s, "format"))
		return "string";
	if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
	    json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
		return "number";
	return NULL;
}

static int32_t branches(struct sc *c, const json_t *list, const char *key)
{
	if (!json_is_array(list) || !json_array_size(list))
		return bad(c, key, "must be a non-empty array");
	if (!strcmp(key, "allOf")) {
		if (json_array_size(list) > 1)
			return refuse(c, "allOf", "with more than one schema is not supported");
		return value(c, json_array_get(list, 0));
	}
	int32_t r = g_none(c->t);
	size_t i;
	const json_t *x;
	json_array_foreach(list, i, x)
		r = g_alt(c->t, r, value(c, x));
	return r;
}

static int32_t value(struct sc *c, const json_t *s)
{
	struct gast *t = c->t;
	if (t->err)
		return -1;
	if (json_is_true(s))
		return any_value(c, ANY_DEPTH);
	if (json_is_false(s))
		return g_none(t);
	if (!json_is_object(s))
		return gast_fail(t, tf_err(TF_ERR_FORMAT, "json schema: a schema must be an object or a boolean"));
	if (!check_keywords(c, s))
		return -1;
	const json_t *ref = json_object_get(s, "$ref");
	if (ref) {
		if (!json_is_string(ref))
			return bad(c, "$ref", "must be a string");
		const json_t *to = resolve(c, json_string_value(ref));
		if (!to) {
			char why[300];
			snprintf(why, sizeof(why), "\"%.200s\" does not point within the schema",
				 json_string_value(ref));
			return refuse(c, "$ref", why);
		}
		if (c->refs >= REF_DEPTH)
			return g_none(t); /* recursion unrolled this far: the branch is left out */
		c->refs++;
		int32_t r = value(c, to);
		c->refs--;
		return r;
	}
	const char *combo[] = {"anyOf", "oneOf", "allOf"};
	for (int i = 0; i < 3; i++)
		if (json_object_get(s, combo[i]))
			return branches(c, json_object_get(s, combo[i]), combo[i]);
	if (json_object_get(s, "enum") || json_object_get(s, "const"))
		return enum_of(c, s);
	const json_t *type = json_object_get(s, "type");
	int32_t r = g_none(t);
	if (!type) {
		const char *it = implied_type(s);
		r = it ? one_type(c, s, it) : any_value(c, ANY_DEPTH);
	} else if (json_is_string(type)) {
		r = one_type(c, s, json_string_value(type));
	} else if (json_is_array(type) && json_array_size(type)) {
		size_t i;
		const json_t *x;
		json_array_foreach(type, i, x) {
			if (!json_is_string(x))
				return bad(c, "type", "must list type names");
			r = g_alt(t, r, one_type(c, s, json_string_value(x)));
		}
	} else {
		return bad(c, "type", "must be a type name or a list of them");
	}
	if (json_is_true(json_object_get(s, "nullable")))
		r = g_alt(t, r, g_str(t, "null"));
	return r;
}

int32_t gschema_value(struct gast *t, const json_t *root, const json_t *s)
{
	struct sc c = {t, root, 0};
	return value(&c, s);
}

tf_status tf_grammar_schema(const struct tf_gvocab *v, const json_t *schema, struct tf_grammar **out)
{
	*out = NULL;
	struct gast t = {0};
	struct sc c = {&t, schema, 0};
	int32_t root = value(&c, schema);
	tf_status st = gauto_new(v, &t, root, out);
	gast_release(&t);
	return st;
}

tf_status tf_grammar_json_object(const struct tf_gvocab *v, struct tf_grammar **out)
{
	*out = NULL;
	struct gast t = {0};
	struct sc c = {&t, NULL, 0};
	int32_t root = map_of(&c, any_value(&c, ANY_DEPTH - 1));
	tf_status st = gauto_new(v, &t, root, out);
	gast_release(&t);
	return st;
}
