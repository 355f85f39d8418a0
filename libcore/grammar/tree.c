/* tree.c: the pattern tree the compilers build (grammar_impl.h): byte
 * sets, concatenation, alternation, repetition, optional sequences, and
 * codepoint sets as UTF-8 byte sequences. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "grammar/grammar_impl.h"

void gast_release(struct gast *t)
{
	free(t->v);
	free(t->sets);
	free(t->list);
	memset(t, 0, sizeof(*t));
}

int32_t gast_fail(struct gast *t, tf_status st)
{
	if (!t->err)
		t->err = st;
	return -1;
}

static int32_t node(struct gast *t, uint8_t kind, int32_t a, int32_t b, int32_t min, int32_t max)
{
	if (t->err)
		return -1;
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 256;
		if (cap > INT32_MAX || tf_realloc_array(&t->v, cap, sizeof(*t->v)))
			return gast_fail(t, tf_err(TF_ERR_NOMEM, "grammar: out of memory"));
		t->cap = cap;
	}
	t->v[t->n] = (struct gnode){kind, a, b, min, max};
	return (int32_t)t->n++;
}

int32_t g_set(struct gast *t, const uint8_t set[32])
{
	if (t->err)
		return -1;
	bool any = false;
	for (int i = 0; i < 32; i++)
		any |= set[i] != 0;
	if (!any)
		return g_none(t);
	if (t->nsets == t->capsets) {
		size_t cap = t->capsets ? t->capsets * 2 : 64;
		if (tf_realloc_array(&t->sets, cap, sizeof(*t->sets)))
			return gast_fail(t, tf_err(TF_ERR_NOMEM, "grammar: out of memory"));
		t->capsets = cap;
	}
	memcpy(t->sets[t->nsets], set, 32);
	return node(t, G_SET, (int32_t)t->nsets++, 0, 0, 0);
}

int32_t g_range(struct gast *t, uint8_t lo, uint8_t hi)
{
	uint8_t set[32] = {0};
	for (unsigned c = lo; c <= hi; c++)
		set[c >> 3] |= (uint8_t)(1u << (c & 7));
	return g_set(t, set);
}

int32_t g_byte(struct gast *t, uint8_t c)
{
	return g_range(t, c, c);
}

int32_t g_empty(struct gast *t)
{
	return node(t, G_EMPTY, 0, 0, 0, 0);
}

int32_t g_none(struct gast *t)
{
	return node(t, G_NONE, 0, 0, 0, 0);
}

int32_t g_cat(struct gast *t, int32_t a, int32_t b)
{
	if (a < 0 || b < 0)
		return gast_fail(t, TF_ERR_INTERNAL);
	if (t->v[a].kind == G_EMPTY)
		return b;
	if (t->v[b].kind == G_EMPTY)
		return a;
	return node(t, G_CAT, a, b, 0, 0);
}

int32_t g_alt(struct gast *t, int32_t a, int32_t b)
{
	if (a < 0 || b < 0)
		return gast_fail(t, TF_ERR_INTERNAL);
	if (t->v[a].kind == G_NONE)
		return b;
	if (t->v[b].kind == G_NONE)
		return a;
	return node(t, G_ALT, a, b, 0, 0);
}

int32_t g_rep(struct gast *t, int32_t a, int32_t min, int32_t max)
{
	if (a < 0)
		return gast_fail(t, TF_ERR_INTERNAL);
	if (min == 1 && max == 1)
		return a;
	if (max == 0)
		return g_empty(t);
	return node(t, G_REP, a, 0, min, max);
}

int32_t g_opt(struct gast *t, int32_t a)
{
	return g_rep(t, a, 0, 1);
}

int32_t g_lit(struct gast *t, const char *s, size_t n)
{
	int32_t r = g_empty(t);
	for (size_t i = 0; i < n; i++)
		r = g_cat(t, r, g_byte(t, (uint8_t)s[i]));
	return r;
}

int32_t g_str(struct gast *t, const char *s)
{
	return g_lit(t, s, strlen(s));
}

int32_t g_list(struct gast *t, int32_t item, int32_t sep, bool may_be_empty)
{
	if (item < 0 || sep < 0)
		return gast_fail(t, TF_ERR_INTERNAL);
	return node(t, G_LIST, item, sep, may_be_empty ? 0 : 1, 0);
}

int32_t g_seqopt(struct gast *t, const int32_t *items, const bool *required, size_t n, int32_t sep)
{
	if (t->err || sep < 0)
		return gast_fail(t, TF_ERR_INTERNAL);
	if (t->nlist + 2 * n > t->caplist) {
		size_t cap = t->caplist ? t->caplist : 256;
		while (cap < t->nlist + 2 * n)
			cap *= 2;
		if (tf_realloc_array(&t->list, cap, sizeof(*t->list)))
			return gast_fail(t, tf_err(TF_ERR_NOMEM, "grammar: out of memory"));
		t->caplist = cap;
	}
	size_t at = t->nlist;
	for (size_t i = 0; i < n; i++) {
		if (items[i] < 0)
			return gast_fail(t, TF_ERR_INTERNAL);
		t->list[at + 2 * i] = items[i];
		t->list[at + 2 * i + 1] = required[i];
	}
	t->nlist += 2 * n;
	return node(t, G_SEQOPT, (int32_t)at, (int32_t)n, sep, 0);
}

/* UTF-8: lo..hi of one encoded length, split until every byte position is
 * a plain range (Russ Cox's utf8 ranges). */
static int enc(uint32_t c, uint8_t *b)
{
	if (c < 0x80) {
		b[0] = (uint8_t)c;
		return 1;
	}
	if (c < 0x800) {
		b[0] = (uint8_t)(0xC0 | (c >> 6));
		b[1] = (uint8_t)(0x80 | (c & 0x3F));
		return 2;
	}
	if (c < 0x10000) {
		b[0] = (uint8_t)(0xE0 | (c >> 12));
		b[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
		b[2] = (uint8_t)(0x80 | (c & 0x3F));
		return 3;
	}
	b[0] = (uint8_t)(0xF0 | (c >> 18));
	b[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
	b[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
	b[3] = (uint8_t)(0x80 | (c & 0x3F));
	return 4;
}

static int32_t utf8_range(struct gast *t, uint32_t lo, uint32_t hi)
{
	static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
	if (lo > hi)
		return g_none(t);
	for (int i = 0; i < 3; i++)
		if (lo <= bounds[i] && hi > bounds[i])
			return g_alt(t, utf8_range(t, lo, bounds[i]), utf8_range(t, bounds[i] + 1, hi));
	if (hi < 0x80)
		return g_range(t, (uint8_t)lo, (uint8_t)hi);
	uint8_t a[4], b[4];
	int n = enc(lo, a);
	for (int i = 1; i < n; i++) {
		uint32_t m = (1u << (6 * i)) - 1;
		if ((lo & ~m) != (hi & ~m)) {
			if ((lo & m) != 0)
				return g_alt(t, utf8_range(t, lo, lo | m), utf8_range(t, (lo | m) + 1, hi));
			if ((hi & m) != m)
				return g_alt(t, utf8_range(t, lo, (hi & ~m) - 1), utf8_range(t, hi & ~m, hi));
		}
	}
	enc(hi, b);
	int32_t r = g_empty(t);
	for (int i = 0; i < n; i++)
		r = g_cat(t, r, g_range(t, a[i], b[i]));
	return r;
}

int32_t g_cprange(struct gast *t, uint32_t lo, uint32_t hi)
{
	if (hi > 0x10FFFF)
		hi = 0x10FFFF;
	if (lo <= 0xDFFF && hi >= 0xD800)
		return g_alt(t, lo < 0xD800 ? utf8_range(t, lo, 0xD7FF) : g_none(t),
			     hi > 0xDFFF ? utf8_range(t, 0xE000, hi) : g_none(t));
	return utf8_range(t, lo, hi);
}

void cpset_release(struct cpset *s)
{
	free(s->r);
	memset(s, 0, sizeof(*s));
}

tf_status cpset_add(struct cpset *s, uint32_t lo, uint32_t hi)
{
	if (lo > hi)
		return TF_OK;
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		if (tf_realloc_array(&s->r, cap, sizeof(*s->r)))
			return tf_err(TF_ERR_NOMEM, "grammar: out of memory");
		s->cap = cap;
	}
	s->r[s->n][0] = lo;
	s->r[s->n][1] = hi;
	s->n++;
	return TF_OK;
}

static int cmp_range(const void *a, const void *b)
{
	const uint32_t *x = a, *y = b;
	return x[0] < y[0] ? -1 : x[0] > y[0];
}

void cpset_norm(struct cpset *s)
{
	if (!s->n)
		return;
	qsort(s->r, s->n, sizeof(*s->r), cmp_range);
	size_t w = 0;
	for (size_t i = 1; i < s->n; i++) {
		if (s->r[i][0] <= s->r[w][1] + 1) {
			if (s->r[i][1] > s->r[w][1])
				s->r[w][1] = s->r[i][1];
		} else {
			w++;
			s->r[w][0] = s->r[i][0];
			s->r[w][1] = s->r[i][1];
		}
	}
	s->n = w + 1;
}

tf_status cpset_negate(struct cpset *s)
{
	cpset_norm(s);
	struct cpset o = {0};
	uint32_t at = 0;
	tf_status st = TF_OK;
	for (size_t i = 0; i < s->n && !st; i++) {
		if (s->r[i][0] > at)
			st = cpset_add(&o, at, s->r[i][0] - 1);
		at = s->r[i][1] + 1;
	}
	if (!st && at <= 0x10FFFF)
		st = cpset_add(&o, at, 0x10FFFF);
	cpset_release(s);
	*s = o;
	return st;
}

tf_status cpset_remove(struct cpset *s, uint32_t lo, uint32_t hi)
{
	size_t n = s->n;
	for (size_t i = 0; i < n; i++) {
		uint32_t a = s->r[i][0], b = s->r[i][1];
		if (b < lo || a > hi)
			continue;
		/* keep a..lo-1 here and hi+1..b at the end */
		if (a < lo)
			s->r[i][1] = lo - 1;
		else
			s->r[i][0] = 1, s->r[i][1] = 0; /* empty: dropped by g_cpset */
		if (b > hi) {
			tf_status st = cpset_add(s, hi + 1, b);
			if (st)
				return st;
		}
	}
	return TF_OK;
}

int32_t g_cpset(struct gast *t, struct cpset *s)
{
	uint8_t ascii[32] = {0};
	int32_t r = g_none(t);
	for (size_t i = 0; i < s->n; i++) {
		uint32_t lo = s->r[i][0], hi = s->r[i][1];
		if (lo > hi)
			continue;
		for (uint32_t c = lo; c <= hi && c < 0x80; c++)
			ascii[c >> 3] |= (uint8_t)(1u << (c & 7));
		if (hi >= 0x80)
			r = g_alt(t, r, g_cprange(t, lo < 0x80 ? 0x80 : lo, hi));
	}
	return g_alt(t, g_set(t, ascii), r);
}
