/* regex.c: a PCRE2-syntax regex to the pattern tree. PCRE2 itself checks
 * the syntax first (so a malformed regex gets PCRE2's message and offset);
 * this parser then takes the subset an automaton can enforce exactly:
 * literals (UTF-8), ., classes with ranges and negation, \d \w \s \D \W \S,
 * \n \r \t \f \v \e \a \xHH \x{H..} \uHHHH, escaped punctuation, groups
 * (plain, non-capturing, named), alternation, * + ? {n} {n,} {n,m} and
 * their lazy forms (the same language for a whole match), ^ first and $
 * last. Anything else (backreferences, lookaround, \b, atomic groups,
 * possessive quantifiers, inline flags, \p) is TF_ERR_UNSUPPORTED naming
 * the construct: never approximated. Matching is on codepoints, emitted as
 * UTF-8 bytes. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "grammar/grammar_impl.h"

/* Repetition counts above this are refused (the automaton copies them). */
#define MAX_COUNT 1000

struct rx {
	struct gast *t;
	const char *s;
	size_t n, i;
	bool in_string;
	const char *what;
};

static int32_t unsupported(struct rx *p, const char *what)
{
	return gast_fail(p->t, tf_err(TF_ERR_UNSUPPORTED, "%s: %s (at offset %zu) is not supported",
				      p->what, what, p->i));
}

static int32_t alt(struct rx *p);

/* One codepoint from the text (UTF-8; a bad byte stands for itself). */
static uint32_t utf8_next(struct rx *p)
{
	const uint8_t *s = (const uint8_t *)p->s;
	uint32_t c = s[p->i];
	int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
	if (p->i + (size_t)more >= p->n)
		more = 0;
	p->i++;
	if (!more)
		return c;
	c &= 0x3Fu >> more;
	for (int k = 0; k < more; k++)
		c = (c << 6) | (s[p->i++] & 0x3F);
	return c;
}

/* A single codepoint as the output shows it: itself, or inside a JSON
 * string its escaped spelling. */
static int32_t cp_lit(struct rx *p, uint32_t c)
{
	struct gast *t = p->t;
	if (p->in_string) {
		if (c == '"')
			return g_str(t, "\\\"");
		if (c == '\\')
			return g_str(t, "\\\\");
		if (c < 0x20) {
			static const char short_esc[] = "btn\0fr";
			if (c >= 8 && c <= 13 && c != 11)
				return g_lit(t, (const char[]){'\\', short_esc[c - 8]}, 2);
			char u[8];
			snprintf(u, sizeof(u), "\\u%04x", c);
			return g_str(t, u);
		}
	}
	return g_cprange(t, c, c);
}

/* A set as the output shows it: inside a JSON string the characters that
 * need an escape leave it (a subset: the set still matches only allowed
 * text). */
static int32_t set_node(struct rx *p, struct cpset *s)
{
	if (p->in_string) {
		if (cpset_remove(s, 0, 0x1F) || cpset_remove(s, '"', '"') || cpset_remove(s, '\\', '\\'))
			return gast_fail(p->t, TF_ERR_NOMEM);
	}
	return g_cpset(p->t, s);
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static tf_status add_class(struct cpset *s, char k)
{
	tf_status st = TF_OK;
	struct cpset x = {0};
	char lower = (char)(k | 0x20);
	if (lower == 'd')
		st = cpset_add(&x, '0', '9');
	else if (lower == 'w')
		st = cpset_add(&x, '0', '9') || cpset_add(&x, 'A', 'Z') || cpset_add(&x, '_', '_') ||
		     cpset_add(&x, 'a', 'z');
	else
		st = cpset_add(&x, '\t', '\r') || cpset_add(&x, ' ', ' ');
	if (!st && k != lower)
		st = cpset_negate(&x);
	for (size_t i = 0; i < x.n && !st; i++)
		st = cpset_add(s, x.r[i][0], x.r[i][1]);
	cpset_release(&x);
	return st ? TF_ERR_NOMEM : TF_OK;
}

/* An escape after '\': a class into *cls (returns 1), or one codepoint
 * into *c (returns 0); -1 refused (reported). */
static int escape(struct rx *p, uint32_t *c, struct cpset *cls, bool in_class)
{
	if (p->i >= p->n) {
		unsupported(p, "a trailing backslash");
		return -1;
	}
	char k = p->s[p->i++];
	switch (k) {
	case 'd': case 'D': case 'w': case 'W': case 's': case 'S':
		if (add_class(cls, k)) {
			gast_fail(p->t, TF_ERR_NOMEM);
			return -1;
		}
		return 1;
	case 'n': *c = '\n'; return 0;
	case 'r': *c = '\r'; return 0;
	case 't': *c = '\t'; return 0;
	case 'f': *c = '\f'; return 0;
	case 'v': *c = '\v'; return 0;
	case 'e': *c = 0x1B; return 0;
	case 'a': *c = 0x07; return 0;
	case 'b':
		if (in_class) {
			*c = '\b';
			return 0;
		}
		unsupported(p, "a word boundary (\\b)");
		return -1;
	case 'x': case 'u': {
		uint32_t v = 0;
		int digits = 0, want = k == 'u' ? 4 : 2;
		bool brace = p->i < p->n && p->s[p->i] == '{';
		if (brace)
			p->i++;
		while (p->i < p->n && hexval(p->s[p->i]) >= 0 && (brace || digits < want) && digits < 8)
			v = v * 16 + (uint32_t)hexval(p->s[p->i++]), digits++;
		if (brace && (p->i >= p->n || p->s[p->i++] != '}'))
			digits = 0;
		if (!digits || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
			unsupported(p, "this \\x or \\u escape");
			return -1;
		}
		*c = v;
		return 0;
	}
	default:
		if ((k >= 'a' && k <= 'z') || (k >= 'A' && k <= 'Z') || (k >= '0' && k <= '9')) {
			char what[48];
			snprintf(what, sizeof(what), "the escape \\%c", k);
			unsupported(p, what);
			return -1;
		}
		p->i--;
		*c = utf8_next(p);
		return 0;
	}
}

static int32_t klass(struct rx *p)
{
	struct cpset s = {0};
	bool neg = p->i < p->n && p->s[p->i] == '^';
	if (neg)
		p->i++;
	bool first = true;
	int32_t r = -1;
	while (p->i < p->n && (p->s[p->i] != ']' || first)) {
		first = false;
		uint32_t lo;
		if (p->s[p->i] == '[' && p->i + 1 < p->n && (p->s[p->i + 1] == ':' || p->s[p->i + 1] == '=' ||
							  p->s[p->i + 1] == '.')) {
			unsupported(p, "a POSIX class");
			goto out;
		}
		if (p->s[p->i] == '\\') {
			p->i++;
			int e = escape(p, &lo, &s, true);
			if (e < 0)
				goto out;
			if (e == 1)
				continue;
		} else {
			lo = utf8_next(p);
		}
		uint32_t hi = lo;
		if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
			p->i++;
			if (p->s[p->i] == '\\') {
				p->i++;
				struct cpset junk = {0};
				int e = escape(p, &hi, &junk, true);
				cpset_release(&junk);
				if (e != 0) {
					if (e > 0)
						unsupported(p, "a range ending in a class");
					goto out;
				}
			} else {
				hi = utf8_next(p);
			}
		}
		if (hi < lo) {
			unsupported(p, "a reversed range");
			goto out;
		}
		if (cpset_add(&s, lo, hi)) {
			gast_fail(p->t, TF_ERR_NOMEM);
			goto out;
		}
	}
	if (p->i >= p->n) {
		unsupported(p, "an unterminated class");
		goto out;
	}
	p->i++; /* ] */
	cpset_norm(&s);
	if (neg && cpset_negate(&s)) {
		gast_fail(p->t, TF_ERR_NOMEM);
		goto out;
	}
	r = set_node(p, &s);
out:
	cpset_release(&s);
	return r;
}

static int32_t atom(struct rx *p)
{
	struct gast *t = p->t;
	char c = p->s[p->i];
	if (c == '(') {
		p->i++;
		if (p->i < p->n && p->s[p->i] == '?') {
			const char *q = p->s + p->i + 1;
			size_t left = p->n - p->i - 1;
			if (left && *q == ':') {
				p->i += 2;
			} else if (left > 1 && (q[0] == 'P' || q[0] == '<' || q[0] == '\'') &&
				   !(q[0] == '<' && (q[1] == '=' || q[1] == '!'))) {
				char close = q[0] == '\'' ? '\'' : '>';
				const char *e = memchr(q, close, left);
				if (q[0] == 'P' && (left < 2 || q[1] != '<'))
					return unsupported(p, "this (?P group");
				if (!e)
					return unsupported(p, "a group name");
				p->i = (size_t)(e - p->s) + 1;
			} else if (left && (*q == '=' || *q == '!' || *q == '<')) {
				return unsupported(p, "a lookaround");
			} else if (left && *q == '>') {
				return unsupported(p, "an atomic group");
			} else {
				return unsupported(p, "this (? group (inline flags, conditionals...)");
			}
		} else if (p->i < p->n && p->s[p->i] == '*') {
			return unsupported(p, "a backtracking verb");
		}
		int32_t r = alt(p);
		if (r < 0)
			return r;
		if (p->i >= p->n || p->s[p->i] != ')')
			return unsupported(p, "an unbalanced group");
		p->i++;
		return r;
	}
	if (c == '[') {
		p->i++;
		return klass(p);
	}
	if (c == '.') {
		p->i++;
		struct cpset s = {0};
		if (cpset_add(&s, '\n', '\n') || cpset_negate(&s)) {
			cpset_release(&s);
			return gast_fail(t, TF_ERR_NOMEM);
		}
		int32_t r = set_node(p, &s);
		cpset_release(&s);
		return r;
	}
	if (c == '^' || c == '$')
		return unsupported(p, "an anchor inside the pattern");
	if (c == '\\') {
		p->i++;
		uint32_t cp;
		struct cpset s = {0};
		int e = escape(p, &cp, &s, false);
		int32_t r = e < 0 ? -1 : e == 1 ? (cpset_norm(&s), set_node(p, &s)) : cp_lit(p, cp);
		cpset_release(&s);
		return r;
	}
	return cp_lit(p, utf8_next(p));
}

/* {n}, {n,}, {n,m} at p->i (after '{'): 1 with the counts, 0 when it is
 * not a quantifier (then '{' is a literal, as PCRE2 reads it). */
static int counts(struct rx *p, int32_t *min, int32_t *max)
{
	size_t i = p->i + 1;
	long a = -1, b = -1;
	size_t d = 0;
	for (a = 0; i < p->n && p->s[i] >= '0' && p->s[i] <= '9' && d < 8; i++, d++)
		a = a * 10 + (p->s[i] - '0');
	if (!d)
		return 0;
	if (i < p->n && p->s[i] == '}') {
		b = a;
	} else if (i < p->n && p->s[i] == ',') {
		i++;
		size_t e = 0;
		for (b = 0; i < p->n && p->s[i] >= '0' && p->s[i] <= '9' && e < 8; i++, e++)
			b = b * 10 + (p->s[i] - '0');
		if (!e)
			b = -1;
		if (i >= p->n || p->s[i] != '}')
			return 0;
	} else {
		return 0;
	}
	p->i = i + 1;
	*min = (int32_t)a;
	*max = (int32_t)b;
	return 1;
}

static int32_t repeat(struct rx *p)
{
	int32_t r = atom(p);
	while (r >= 0 && p->i < p->n) {
		char c = p->s[p->i];
		int32_t min, max;
		if (c == '*')
			min = 0, max = -1, p->i++;
		else if (c == '+')
			min = 1, max = -1, p->i++;
		else if (c == '?')
			min = 0, max = 1, p->i++;
		else if (c == '{' && counts(p, &min, &max))
			;
		else
			break;
		if (min > MAX_COUNT || max > MAX_COUNT)
			return unsupported(p, "a repetition count above 1000");
		if (max >= 0 && max < min)
			return unsupported(p, "a repetition {n,m} with m < n");
		if (p->i < p->n && p->s[p->i] == '+')
			return unsupported(p, "a possessive quantifier");
		if (p->i < p->n && p->s[p->i] == '?')
			p->i++; /* lazy: the same whole matches */
		r = g_rep(p->t, r, min, max);
	}
	return r;
}

static int32_t cat(struct rx *p)
{
	int32_t r = g_empty(p->t);
	while (r >= 0 && p->i < p->n && p->s[p->i] != '|' && p->s[p->i] != ')')
		r = g_cat(p->t, r, repeat(p));
	return r;
}

static int32_t alt(struct rx *p)
{
	int32_t r = cat(p);
	while (r >= 0 && p->i < p->n && p->s[p->i] == '|') {
		p->i++;
		r = g_alt(p->t, r, cat(p));
	}
	return r;
}

/* PCRE2's own verdict on the syntax (UTF, JavaScript's \u). */
static tf_status syntax(const char *re, size_t n, const char *what)
{
	int err;
	PCRE2_SIZE off;
	pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, n, PCRE2_UTF | PCRE2_ALT_BSUX, &err, &off, NULL);
	if (c) {
		pcre2_code_free(c);
		return TF_OK;
	}
	PCRE2_UCHAR msg[160];
	pcre2_get_error_message(err, msg, sizeof(msg));
	return tf_err(TF_ERR_FORMAT, "%s: %s at offset %zu", what, (const char *)msg, (size_t)off);
}

static bool escaped_at(const char *s, size_t i)
{
	size_t k = 0;
	while (i > k && s[i - k - 1] == '\\')
		k++;
	return k & 1;
}

int32_t grx_parse(struct gast *t, const char *re, size_t n, bool in_string, const char *what)
{
	tf_status st = syntax(re, n, what);
	if (st)
		return gast_fail(t, st);
	bool head = n && re[0] == '^';
	bool tail = n > (size_t)head && re[n - 1] == '$' && !escaped_at(re, n - 1);
	struct rx p = {t, re, n - (size_t)tail, (size_t)head, in_string, what};
	int32_t r = alt(&p);
	if (r >= 0 && p.i < p.n)
		return unsupported(&p, "an unbalanced ')'");
	if (r < 0 || !in_string)
		return r;
	/* a schema pattern searches: an open end takes any string content */
	int32_t any = -1;
	if (!head || !tail) {
		struct cpset s = {0};
		if (cpset_add(&s, 0, 0x10FFFF)) {
			cpset_release(&s);
			return gast_fail(t, TF_ERR_NOMEM);
		}
		struct rx q = {t, re, n, 0, true, what};
		any = g_rep(t, set_node(&q, &s), 0, -1);
		cpset_release(&s);
	}
	if (!head)
		r = g_cat(t, any, r);
	if (!tail)
		r = g_cat(t, r, any);
	return r;
}

tf_status tf_grammar_regex(const struct tf_gvocab *v, const char *re, size_t n, struct tf_grammar **out)
{
	struct gast t = {0};
	int32_t root = grx_parse(&t, re, n, false, "regex");
	tf_status st = gauto_new(v, &t, root, out);
	gast_release(&t);
	return st;
}

tf_status tf_grammar_choice(const struct tf_gvocab *v, const char *const *choices, size_t n,
			    struct tf_grammar **out)
{
	*out = NULL;
	if (!n)
		return tf_err(TF_ERR_ARG, "guided_choice: an empty list");
	struct gast t = {0};
	int32_t root = g_none(&t);
	for (size_t i = 0; i < n; i++)
		root = g_alt(&t, root, g_str(&t, choices[i]));
	tf_status st = gauto_new(v, &t, root, out);
	gast_release(&t);
	return st;
}
