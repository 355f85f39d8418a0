/* automaton.c: a pattern tree (grammar_impl.h) to a Thompson NFA, pruned
 * to the states from which a match is still reachable, then a DFA built
 * lazily (a state is the set of live NFA states after a prefix; each of
 * its 256 moves is computed the first time it is taken) and each DFA
 * state's token mask from one walk of the vocabulary trie, cached.
 *
 * Because every NFA state kept can reach a match, every DFA state that is
 * not dead can be completed, and so can every token a mask allows: a
 * byte-level vocabulary has a token for every byte. */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "grammar/grammar_impl.h"

/* Limits: NFA states after compile, DFA states, mask cache bytes. */
#define MAX_NFA (1u << 21)
#define MAX_DFA (1u << 16)
#define MAX_MASK_BYTES ((size_t)512 << 20)

enum { NS_SET, NS_EPS, NS_MATCH, NS_DEAD };

struct nstate {
	uint8_t kind;
	int32_t set;        /* NS_SET: gast set index */
	int32_t out, out2;  /* NS_SET: out; NS_EPS: out and out2 (-1: none) */
};

struct dstate {
	int32_t *set;  /* sorted NFA states (NS_SET and NS_MATCH only) */
	uint32_t nset;
	bool accept, final;
	int32_t next[256]; /* -2: not computed yet, -1: dead */
	uint64_t *mask;
	uint32_t count;
};

struct tf_grammar {
	const struct tf_gvocab *v;
	uint8_t (*sets)[32];
	struct nstate *ns;
	size_t nn, capn;
	struct dstate *ds;
	size_t nd, capd;
	int32_t *table; /* open addressing over ds by set hash */
	size_t tcap;
	uint32_t *mark, gen; /* [nn] closure marks */
	int32_t *stack, *seeds; /* [nn] scratch */
	int32_t *path;          /* [maxdepth + 1] trie walk */
	uint64_t *scratch;      /* a mask that the cache has no room for */
	size_t words, masks, mask_bytes;
	bool overflow;
};

static int32_t add(struct tf_grammar *g, uint8_t kind, int32_t set, int32_t out, int32_t out2)
{
	if (g->nn == g->capn) {
		size_t cap = g->capn ? g->capn * 2 : 1024;
		if (g->nn >= MAX_NFA) {
			tf_err(TF_ERR_UNSUPPORTED, "the grammar is too large (more than %u automaton states)",
			       MAX_NFA);
			return -1;
		}
		if (tf_realloc_array(&g->ns, cap, sizeof(*g->ns))) {
			tf_err(TF_ERR_NOMEM, "grammar: out of memory");
			return -1;
		}
		g->capn = cap;
	}
	g->ns[g->nn] = (struct nstate){kind, set, out, out2};
	return (int32_t)g->nn++;
}

/* A fragment: start, and the NS_EPS state whose out is still open. */
struct frag {
	int32_t s, e;
};

static tf_status compile(struct tf_grammar *g, const struct gast *t, int32_t at, struct frag *f);

static tf_status rep(struct tf_grammar *g, const struct gast *t, const struct gnode *n, struct frag *f)
{
	int32_t e = add(g, NS_EPS, 0, -1, -1);
	if (e < 0)
		return TF_ERR_UNSUPPORTED;
	struct frag head = {e, e}, x;
	tf_status st;
	bool first = true;
	for (int32_t i = 0; i < n->min; i++) {
		if ((st = compile(g, t, n->a, &x)))
			return st;
		if (first)
			head = x, first = false;
		else
			g->ns[head.e].out = x.s, head.e = x.e;
	}
	int32_t tail, te = add(g, NS_EPS, 0, -1, -1);
	if (te < 0)
		return TF_ERR_UNSUPPORTED;
	if (n->max < 0) {
		int32_t s = add(g, NS_EPS, 0, -1, te);
		if (s < 0 || (st = compile(g, t, n->a, &x)))
			return TF_ERR_UNSUPPORTED;
		g->ns[s].out = x.s;
		g->ns[x.e].out = s;
		tail = s;
	} else {
		tail = te;
		for (int32_t i = n->min; i < n->max; i++) {
			if ((st = compile(g, t, n->a, &x)))
				return st;
			int32_t s = add(g, NS_EPS, 0, x.s, te);
			if (s < 0)
				return TF_ERR_UNSUPPORTED;
			g->ns[x.e].out = tail;
			tail = s;
		}
	}
	if (first) {
		g->ns[e].out = tail;
		*f = (struct frag){e, te};
	} else {
		g->ns[head.e].out = tail;
		*f = (struct frag){head.s, te};
	}
	return TF_OK;
}

/* items in order, the optional ones skippable, sep between two present. */
static tf_status seqopt(struct tf_grammar *g, const struct gast *t, const struct gnode *n,
			struct frag *f)
{
	const int32_t *l = t->list + n->a;
	int32_t count = n->b, sep = n->min;
	int32_t e = add(g, NS_EPS, 0, -1, -1);
	if (e < 0)
		return TF_ERR_UNSUPPORTED;
	/* seg[j]: the rest from item j on, after at least one item */
	int32_t next = e;
	int32_t *seg = tf_alloc_array((size_t)count + 1, sizeof(*seg));
	if (!seg)
		return tf_err(TF_ERR_NOMEM, "grammar: out of memory");
	tf_status st = TF_OK;
	seg[count] = e;
	for (int32_t j = count - 1; j >= 0; j--) {
		struct frag s, x;
		if ((st = compile(g, t, sep, &s)) || (st = compile(g, t, l[2 * j], &x)))
			goto out;
		g->ns[s.e].out = x.s;
		g->ns[x.e].out = next;
		if (l[2 * j + 1]) {
			next = s.s;
		} else {
			int32_t sp = add(g, NS_EPS, 0, s.s, next);
			if (sp < 0) {
				st = TF_ERR_UNSUPPORTED;
				goto out;
			}
			next = sp;
		}
		seg[j] = next;
	}
	/* the first present item: any up to the first required one */
	int32_t start = -1;
	bool req_seen = false;
	for (int32_t i = 0; i < count && !req_seen; i++) {
		struct frag x;
		req_seen = l[2 * i + 1];
		if ((st = compile(g, t, l[2 * i], &x)))
			goto out;
		g->ns[x.e].out = seg[i + 1];
		if (start < 0) {
			start = x.s;
		} else {
			int32_t sp = add(g, NS_EPS, 0, x.s, start);
			if (sp < 0) {
				st = TF_ERR_UNSUPPORTED;
				goto out;
			}
			start = sp;
		}
	}
	if (!req_seen) { /* none required: none present is fine */
		int32_t sp = start < 0 ? e : add(g, NS_EPS, 0, start, e);
		if (sp < 0) {
			st = TF_ERR_UNSUPPORTED;
			goto out;
		}
		start = sp;
	}
	*f = (struct frag){start, e};
out:
	free(seg);
	return st;
}

static tf_status compile(struct tf_grammar *g, const struct gast *t, int32_t at, struct frag *f)
{
	const struct gnode *n = &t->v[at];
	struct frag a, b;
	tf_status st;
	int32_t s, e;
	switch (n->kind) {
	case G_SET:
		if ((e = add(g, NS_EPS, 0, -1, -1)) < 0 || (s = add(g, NS_SET, n->a, e, -1)) < 0)
			return TF_ERR_UNSUPPORTED;
		*f = (struct frag){s, e};
		return TF_OK;
	case G_EMPTY:
		if ((e = add(g, NS_EPS, 0, -1, -1)) < 0)
			return TF_ERR_UNSUPPORTED;
		*f = (struct frag){e, e};
		return TF_OK;
	case G_NONE:
		if ((e = add(g, NS_EPS, 0, -1, -1)) < 0 || (s = add(g, NS_DEAD, 0, -1, -1)) < 0)
			return TF_ERR_UNSUPPORTED;
		*f = (struct frag){s, e};
		return TF_OK;
	case G_CAT:
		if ((st = compile(g, t, n->a, &a)) || (st = compile(g, t, n->b, &b)))
			return st;
		g->ns[a.e].out = b.s;
		*f = (struct frag){a.s, b.e};
		return TF_OK;
	case G_ALT:
		if ((st = compile(g, t, n->a, &a)) || (st = compile(g, t, n->b, &b)))
			return st;
		if ((s = add(g, NS_EPS, 0, a.s, b.s)) < 0 || (e = add(g, NS_EPS, 0, -1, -1)) < 0)
			return TF_ERR_UNSUPPORTED;
		g->ns[a.e].out = e;
		g->ns[b.e].out = e;
		*f = (struct frag){s, e};
		return TF_OK;
	case G_REP:
		return rep(g, t, n, f);
	case G_SEQOPT:
		return seqopt(g, t, n, f);
	case G_LIST: /* entry -> item -> split(sep -> item, exit) */
		if ((st = compile(g, t, n->a, &a)) || (st = compile(g, t, n->b, &b)))
			return st;
		if ((e = add(g, NS_EPS, 0, -1, -1)) < 0 || (s = add(g, NS_EPS, 0, b.s, e)) < 0)
			return TF_ERR_UNSUPPORTED;
		g->ns[a.e].out = s;
		g->ns[b.e].out = a.s;
		if (n->min == 0 && (s = add(g, NS_EPS, 0, a.s, e)) < 0)
			return TF_ERR_UNSUPPORTED;
		*f = (struct frag){n->min == 0 ? s : a.s, e};
		return TF_OK;
	}
	return tf_err(TF_ERR_INTERNAL, "grammar: node kind %d", n->kind);
}

/* Keep only states from which the match state is reachable: a dead state's
 * edges are cut so closures never enter it. */
static tf_status prune(struct tf_grammar *g, int32_t match)
{
	size_t n = g->nn;
	uint32_t *cnt = tf_calloc(n + 1, sizeof(*cnt));
	int32_t *pred = NULL, *queue = NULL;
	uint8_t *live = tf_calloc(n, 1);
	tf_status st = TF_OK;
	if (!cnt || !live)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		const struct nstate *s = &g->ns[i];
		if (s->out >= 0)
			cnt[s->out + 1]++;
		if (s->kind == NS_EPS && s->out2 >= 0)
			cnt[s->out2 + 1]++;
	}
	for (size_t i = 0; i < n; i++)
		cnt[i + 1] += cnt[i];
	pred = tf_alloc_array(cnt[n] + 1, sizeof(*pred));
	queue = tf_alloc_array(n, sizeof(*queue));
	if (!pred || !queue)
		goto nomem;
	uint32_t *fill = tf_calloc(n, sizeof(*fill));
	if (!fill)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		const struct nstate *s = &g->ns[i];
		if (s->out >= 0)
			pred[cnt[s->out] + fill[s->out]++] = (int32_t)i;
		if (s->kind == NS_EPS && s->out2 >= 0)
			pred[cnt[s->out2] + fill[s->out2]++] = (int32_t)i;
	}
	free(fill);
	size_t qh = 0, qt = 0;
	live[match] = 1;
	queue[qt++] = match;
	while (qh < qt) {
		int32_t x = queue[qh++];
		for (uint32_t k = cnt[x]; k < cnt[x + 1]; k++)
			if (!live[pred[k]])
				live[pred[k]] = 1, queue[qt++] = pred[k];
	}
	for (size_t i = 0; i < n; i++) {
		struct nstate *s = &g->ns[i];
		if (s->out >= 0 && !live[s->out])
			s->out = -1;
		if (s->kind == NS_EPS && s->out2 >= 0 && !live[s->out2])
			s->out2 = -1;
		if (s->kind == NS_SET && s->out < 0)
			s->kind = NS_DEAD;
	}
	goto out;
nomem:
	st = tf_err(TF_ERR_NOMEM, "grammar: out of memory");
out:
	free(cnt);
	free(pred);
	free(queue);
	free(live);
	return st;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return x < y ? -1 : x > y;
}

static uint64_t hash_set(const int32_t *s, uint32_t n)
{
	uint64_t h = 1469598103934665603ull ^ n;
	for (uint32_t i = 0; i < n; i++)
		h = (h ^ (uint32_t)s[i]) * 1099511628211ull;
	return h ^ (h >> 29);
}

static tf_status table_grow(struct tf_grammar *g)
{
	size_t cap = g->tcap ? g->tcap * 2 : 1024;
	int32_t *t = tf_alloc_array(cap, sizeof(*t));
	if (!t)
		return tf_err(TF_ERR_NOMEM, "grammar: out of memory");
	for (size_t i = 0; i < cap; i++)
		t[i] = -1;
	for (size_t d = 0; d < g->nd; d++) {
		size_t h = hash_set(g->ds[d].set, g->ds[d].nset) & (cap - 1);
		while (t[h] >= 0)
			h = (h + 1) & (cap - 1);
		t[h] = (int32_t)d;
	}
	free(g->table);
	g->table = t;
	g->tcap = cap;
	return TF_OK;
}

/* The DFA state of the closure of the nseeds states in g->seeds: found or
 * added; -1 dead (empty), -3 on failure. */
static int32_t intern(struct tf_grammar *g, size_t nseeds)
{
	if (++g->gen == 0) {
		memset(g->mark, 0, g->nn * sizeof(*g->mark));
		g->gen = 1;
	}
	size_t sp = 0, n = 0;
	for (size_t i = 0; i < nseeds; i++)
		if (g->mark[g->seeds[i]] != g->gen)
			g->mark[g->seeds[i]] = g->gen, g->stack[sp++] = g->seeds[i];
	/* the set goes into seeds, already read */
	while (sp) {
		int32_t x = g->stack[--sp];
		const struct nstate *s = &g->ns[x];
		if (s->kind == NS_EPS) {
			if (s->out2 >= 0 && g->mark[s->out2] != g->gen)
				g->mark[s->out2] = g->gen, g->stack[sp++] = s->out2;
			if (s->out >= 0 && g->mark[s->out] != g->gen)
				g->mark[s->out] = g->gen, g->stack[sp++] = s->out;
		} else if (s->kind == NS_SET || s->kind == NS_MATCH) {
			g->seeds[n++] = x;
		}
	}
	if (!n)
		return -1;
	qsort(g->seeds, n, sizeof(*g->seeds), cmp_i32);
	if (2 * (g->nd + 1) > g->tcap && table_grow(g))
		return -3;
	uint64_t hv = hash_set(g->seeds, (uint32_t)n);
	size_t h = hv & (g->tcap - 1);
	for (; g->table[h] >= 0; h = (h + 1) & (g->tcap - 1)) {
		const struct dstate *d = &g->ds[g->table[h]];
		if (d->nset == n && !memcmp(d->set, g->seeds, n * sizeof(*g->seeds)))
			return g->table[h];
	}
	if (g->nd >= MAX_DFA) {
		g->overflow = true;
		tf_err(TF_ERR_UNSUPPORTED, "the grammar's automaton grew past %u states", MAX_DFA);
		return -3;
	}
	if (g->nd == g->capd) {
		size_t cap = g->capd ? g->capd * 2 : 64;
		if (tf_realloc_array(&g->ds, cap, sizeof(*g->ds)))
			goto nomem;
		g->capd = cap;
	}
	struct dstate *d = &g->ds[g->nd];
	memset(d, 0, sizeof(*d));
	if (!(d->set = tf_alloc_array(n, sizeof(*d->set))))
		goto nomem;
	memcpy(d->set, g->seeds, n * sizeof(*d->set));
	d->nset = (uint32_t)n;
	d->final = true;
	for (size_t i = 0; i < n; i++) {
		if (g->ns[d->set[i]].kind == NS_MATCH)
			d->accept = true;
		else
			d->final = false;
	}
	for (int c = 0; c < 256; c++)
		d->next[c] = -2;
	g->table[h] = (int32_t)g->nd;
	return (int32_t)g->nd++;
nomem:
	tf_err(TF_ERR_NOMEM, "grammar: out of memory");
	return -3;
}

static int32_t step(struct tf_grammar *g, int32_t d, uint8_t c)
{
	int32_t nx = g->ds[d].next[c];
	if (nx != -2)
		return nx;
	const struct dstate *ds = &g->ds[d];
	size_t n = 0;
	for (uint32_t i = 0; i < ds->nset; i++) {
		const struct nstate *s = &g->ns[ds->set[i]];
		if (s->kind == NS_SET && (g->sets[s->set][c >> 3] >> (c & 7) & 1))
			g->seeds[n++] = s->out;
	}
	nx = n ? intern(g, n) : -1;
	if (nx == -3)
		return -1; /* a failure: dead, not cached, the mask says why */
	g->ds[d].next[c] = nx; /* intern may have moved ds */
	return nx;
}

tf_status gauto_new(const struct tf_gvocab *v, struct gast *t, int32_t root, struct tf_grammar **out)
{
	*out = NULL;
	if (t->err || root < 0)
		return t->err ? t->err : tf_err(TF_ERR_INTERNAL, "grammar: no root");
	struct tf_grammar *g = tf_calloc(1, sizeof(*g));
	if (!g)
		return tf_err(TF_ERR_NOMEM, "grammar: out of memory");
	g->v = v;
	g->words = (v->n + 63) / 64;
	tf_status st = TF_OK;
	struct frag f;
	int32_t m;
	if (t->nsets && !(g->sets = tf_alloc_array(t->nsets, sizeof(*g->sets))))
		goto nomem;
	if (t->nsets)
		memcpy(g->sets, t->sets, t->nsets * sizeof(*g->sets));
	/* state 0 is the entry, so the start is always found first */
	int32_t entry = add(g, NS_EPS, 0, -1, -1);
	if (entry < 0 || (st = compile(g, t, root, &f)) || (m = add(g, NS_MATCH, 0, -1, -1)) < 0) {
		st = st ? st : TF_ERR_UNSUPPORTED;
		goto fail;
	}
	g->ns[entry].out = f.s;
	g->ns[f.e].out = m;
	if ((st = prune(g, m)))
		goto fail;
	if (!(g->mark = tf_calloc(g->nn, sizeof(*g->mark))) ||
	    !(g->stack = tf_alloc_array(g->nn, sizeof(*g->stack))) ||
	    !(g->seeds = tf_alloc_array(g->nn, sizeof(*g->seeds))) ||
	    !(g->path = tf_alloc_array(v->maxdepth + 1, sizeof(*g->path))))
		goto nomem;
	g->seeds[0] = entry;
	int32_t s0 = intern(g, 1);
	if (s0 == -3) {
		st = TF_ERR_NOMEM;
		goto fail;
	}
	if (s0 < 0) {
		st = tf_err(TF_ERR_ARG, "the grammar matches nothing (the constraints contradict each other)");
		goto fail;
	}
	*out = g;
	return TF_OK;
nomem:
	st = tf_err(TF_ERR_NOMEM, "grammar: out of memory");
fail:
	tf_grammar_free(g);
	return st;
}

void tf_grammar_free(struct tf_grammar *g)
{
	if (!g)
		return;
	for (size_t d = 0; d < g->nd; d++) {
		free(g->ds[d].set);
		free(g->ds[d].mask);
	}
	free(g->ds);
	free(g->table);
	free(g->ns);
	free(g->sets);
	free(g->mark);
	free(g->stack);
	free(g->seeds);
	free(g->path);
	free(g->scratch);
	free(g);
}

uint32_t tf_grammar_vocab(const struct tf_grammar *g)
{
	return g->v->n;
}

int32_t tf_grammar_start(const struct tf_grammar *g)
{
	return 0;
}

int32_t tf_grammar_next(struct tf_grammar *g, int32_t state, const uint8_t *bytes, size_t n)
{
	for (size_t i = 0; i < n && state >= 0; i++)
		state = step(g, state, bytes[i]);
	return state;
}

int32_t tf_grammar_next_token(struct tf_grammar *g, int32_t state, uint32_t id)
{
	const struct tf_gvocab *v = g->v;
	if (id >= v->n || !v->has[id])
		return -1;
	return tf_grammar_next(g, state, v->blob + v->off[id], v->off[id + 1] - v->off[id]);
}

bool tf_grammar_accepting(struct tf_grammar *g, int32_t state)
{
	return state >= 0 && (size_t)state < g->nd && g->ds[state].accept;
}

bool tf_grammar_final(struct tf_grammar *g, int32_t state)
{
	return state < 0 || (size_t)state >= g->nd || g->ds[state].final;
}

bool tf_grammar_matches(struct tf_grammar *g, const uint8_t *bytes, size_t n)
{
	return tf_grammar_accepting(g, tf_grammar_next(g, 0, bytes, n));
}

/* One walk of the trie in depth-first order: a subtree is skipped as soon
 * as its prefix leads nowhere. */
static uint32_t walk(struct tf_grammar *g, int32_t state, uint64_t *mask)
{
	const struct tf_gvocab *v = g->v;
	uint32_t count = 0;
	memset(mask, 0, g->words * sizeof(*mask));
	g->path[0] = state;
	for (size_t i = 0; i < v->nodes;) {
		int32_t s = step(g, g->path[v->depth[i] - 1], v->byte[i]);
		if (s < 0) {
			i = v->skip[i];
			continue;
		}
		g->path[v->depth[i]] = s;
		for (uint32_t k = 0; k < v->tcount[i]; k++) {
			uint32_t id = v->ids[v->tfirst[i] + k];
			mask[id >> 6] |= 1ull << (id & 63);
		}
		count += v->tcount[i];
		i++;
	}
	return count;
}

const uint64_t *tf_grammar_mask(struct tf_grammar *g, int32_t state, uint32_t *count)
{
	if (state < 0 || (size_t)state >= g->nd) {
		tf_err(TF_ERR_ARG, "grammar: no state %d", state);
		return NULL;
	}
	if (g->ds[state].mask) {
		if (count)
			*count = g->ds[state].count;
		return g->ds[state].mask;
	}
	size_t bytes = g->words * sizeof(uint64_t);
	uint64_t *m = NULL;
	bool cached = g->mask_bytes + bytes <= MAX_MASK_BYTES;
	if (cached && !(m = tf_alloc_array(g->words, sizeof(*m))))
		cached = false;
	if (!cached) {
		if (!g->scratch && !(g->scratch = tf_alloc_array(g->words, sizeof(*g->scratch)))) {
			tf_err(TF_ERR_NOMEM, "grammar: out of memory");
			return NULL;
		}
		m = g->scratch;
	}
	uint32_t n = walk(g, state, m);
	if (g->overflow) {
		if (cached)
			free(m);
		tf_err(TF_ERR_UNSUPPORTED, "the grammar's automaton grew past %u states", MAX_DFA);
		return NULL;
	}
	g->masks++;
	if (cached) {
		g->ds[state].mask = m;
		g->ds[state].count = n;
		g->mask_bytes += bytes;
	}
	if (count)
		*count = n;
	return m;
}

void tf_grammar_stats(const struct tf_grammar *g, struct tf_grammar_stats *out)
{
	*out = (struct tf_grammar_stats){g->nn, g->nd, g->masks, g->mask_bytes};
}
