/* propose.c: the draft proposers (propose.h): prompt lookup, DSpark, a
 * pair of them. */
#include "engine/propose.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/model.h"
#include "compute/sample.h"

uint32_t tf_lookup_find(const int32_t *ctx, size_t n, uint32_t n_max, uint32_t n_min,
			uint32_t window, uint32_t max, int32_t *out)
{
	if (window && n > window) {
		ctx += n - window;
		n = window;
	}
	if (n_min == 0)
		n_min = 1;
	for (uint32_t k = n_max; k >= n_min && max > 0; k--) {
		if (n < (size_t)k + 1)
			continue;
		const int32_t *suffix = ctx + n - k;
		/* the most recent earlier occurrence: it ends before the suffix does */
		for (size_t i = n - k; i-- > 0;) {
			if (ctx[i] != suffix[0] || memcmp(ctx + i, suffix, k * sizeof(*ctx)))
				continue;
			size_t from = i + k, have = n - from;
			uint32_t m = have < max ? (uint32_t)have : max;
			memcpy(out, ctx + from, m * sizeof(*out));
			return m;
		}
	}
	return 0;
}

/* Prompt lookup. */

struct quiet {
	const struct tf_lane *lane;
	uint32_t rejects, rest;
};

struct lookup {
	struct tf_lookup_config c;
	struct quiet *q;
	size_t nq, capq;
	int32_t *buf;
	size_t capbuf;
};

static struct quiet *quiet_of(struct lookup *l, const struct tf_lane *lane, bool add)
{
	for (size_t i = 0; i < l->nq; i++)
		if (l->q[i].lane == lane)
			return &l->q[i];
	if (!add)
		return NULL;
	if (l->nq == l->capq) {
		size_t cap = l->capq ? l->capq * 2 : 16;
		if (tf_realloc_array(&l->q, cap, sizeof(*l->q)))
			return NULL;
		l->capq = cap;
	}
	l->q[l->nq] = (struct quiet){lane, 0, 0};
	return &l->q[l->nq++];
}

static tf_status lookup_propose(void *ctx, struct tf_propose_req *reqs, size_t n)
{
	struct lookup *l = ctx;
	for (size_t i = 0; i < n; i++) {
		struct tf_propose_req *r = &reqs[i];
		const struct tf_lane *lane = r->lane;
		if (r->ndrafts)
			continue;
		struct quiet *q = quiet_of(l, lane, false);
		if (q && q->rest) {
			q->rest--;
			continue;
		}
		/* the last `window` tokens of prompt + reply, contiguous */
		size_t total = (size_t)lane->nprompt + lane->ngen;
		size_t len = total < l->c.window ? total : l->c.window;
		if (len > l->capbuf) {
			if (tf_realloc_array(&l->buf, len, sizeof(*l->buf)))
				return tf_err(TF_ERR_NOMEM, "prompt lookup: out of memory");
			l->capbuf = len;
		}
		size_t from = total - len, at = 0;
		if (from < lane->nprompt) {
			at = lane->nprompt - from;
			memcpy(l->buf, lane->prompt + from, at * sizeof(*l->buf));
		}
		size_t g0 = from > lane->nprompt ? from - lane->nprompt : 0;
		if (lane->ngen > g0)
			memcpy(l->buf + at, lane->gen + g0, (lane->ngen - g0) * sizeof(*l->buf));
		r->ndrafts = tf_lookup_find(l->buf, len, l->c.n_max, l->c.n_min, 0, r->max, r->drafts);
		r->source = 0;
	}
	return TF_OK;
}

static void lookup_observe(void *ctx, const struct tf_propose_req *req, uint32_t accepted)
{
	struct lookup *l = ctx;
	struct quiet *q = quiet_of(l, req->lane, accepted == 0);
	if (!q)
		return;
	if (accepted) {
		q->rejects = 0;
		return;
	}
	if (++q->rejects >= l->c.quiet_after) {
		q->rejects = 0;
		q->rest = l->c.quiet_rounds;
	}
}

static void lookup_forget(void *ctx, const struct tf_lane *lane)
{
	struct lookup *l = ctx;
	struct quiet *q = quiet_of(l, lane, false);
	if (q)
		*q = l->q[--l->nq];
}

static void lookup_free(void *ctx)
{
	struct lookup *l = ctx;
	if (!l)
		return;
	free(l->q);
	free(l->buf);
	free(l);
}

tf_status tf_proposer_lookup(const struct tf_lookup_config *c, struct tf_proposer *out)
{
	struct lookup *l = tf_calloc(1, sizeof(*l));
	if (!l)
		return tf_err(TF_ERR_NOMEM, "prompt lookup: out of memory");
	if (c)
		l->c = *c;
	if (!l->c.n_max)
		l->c.n_max = 4;
	if (!l->c.n_min)
		l->c.n_min = 2;
	if (l->c.n_min > l->c.n_max)
		l->c.n_min = l->c.n_max;
	if (!l->c.window)
		l->c.window = 4096;
	if (!l->c.quiet_after)
		l->c.quiet_after = 4;
	if (!l->c.quiet_rounds)
		l->c.quiet_rounds = 16;
	*out = (struct tf_proposer){"lookup", l, lookup_propose, lookup_observe, lookup_forget,
				    lookup_free};
	return TF_OK;
}

/* DSpark. */

struct dspark {
	struct tf_model *model;
	int block;
	size_t cap;
	int *seq;
	int32_t *anchor, *draft;
	struct tf_sample_params *sp;
	size_t *which;
};

static tf_status dspark_grow(struct dspark *d, size_t n)
{
	if (n <= d->cap)
		return TF_OK;
	size_t cap = d->cap ? d->cap : 16;
	while (cap < n)
		cap *= 2;
	if (tf_realloc_array(&d->seq, cap, sizeof(*d->seq)) ||
	    tf_realloc_array(&d->anchor, cap, sizeof(*d->anchor)) ||
	    tf_realloc_array(&d->draft, cap * (size_t)d->block, sizeof(*d->draft)) ||
	    tf_realloc_array(&d->sp, cap, sizeof(*d->sp)) ||
	    tf_realloc_array(&d->which, cap, sizeof(*d->which)))
		return tf_err(TF_ERR_NOMEM, "dspark drafts: out of memory");
	d->cap = cap;
	return TF_OK;
}

static tf_status dspark_propose(void *ctx, struct tf_propose_req *reqs, size_t n)
{
	struct dspark *d = ctx;
	tf_status st = dspark_grow(d, n);
	if (st)
		return st;
	size_t m = 0;
	for (size_t i = 0; i < n; i++) {
		if (reqs[i].ndrafts || reqs[i].max == 0)
			continue;
		const struct tf_engine_params *p = reqs[i].lane->params;
		d->seq[m] = reqs[i].seq;
		d->anchor[m] = reqs[i].lane->last;
		d->sp[m] = (struct tf_sample_params){p->seed, p->temperature,
						     p->top_k > 0 ? (uint32_t)p->top_k : 0, p->top_p, p->min_p};
		d->which[m++] = i;
	}
	if (!m)
		return TF_OK;
	/* one call for the round's rows: drafts for P + 1 .. P + block */
	if ((st = tf_model_draft(d->model, (int)m, d->seq, d->anchor, d->sp, d->draft, NULL)))
		return st;
	for (size_t k = 0; k < m; k++) {
		struct tf_propose_req *r = &reqs[d->which[k]];
		uint32_t take = r->max < (uint32_t)d->block ? r->max : (uint32_t)d->block;
		memcpy(r->drafts, d->draft + k * (size_t)d->block, take * sizeof(*r->drafts));
		r->ndrafts = take;
		r->source = 1;
	}
	return TF_OK;
}

static void dspark_free(void *ctx)
{
	struct dspark *d = ctx;
	if (!d)
		return;
	free(d->seq);
	free(d->anchor);
	free(d->draft);
	free(d->sp);
	free(d->which);
	free(d);
}

tf_status tf_proposer_dspark(struct tf_model *model, struct tf_proposer *out)
{
	int block = tf_model_draft_block(model);
	if (block <= 0)
		return tf_err(TF_ERR_UNSUPPORTED, "dspark drafts: the pack has no DSpark blocks");
	struct dspark *d = tf_calloc(1, sizeof(*d));
	if (!d)
		return tf_err(TF_ERR_NOMEM, "dspark drafts: out of memory");
	d->model = model;
	d->block = block;
	*out = (struct tf_proposer){"dspark", d, dspark_propose, NULL, NULL, dspark_free};
	return TF_OK;
}

/* A pair. */

struct pair {
	struct tf_proposer p[2];
};

static tf_status pair_propose(void *ctx, struct tf_propose_req *reqs, size_t n)
{
	struct pair *pr = ctx;
	tf_status st = pr->p[0].propose(pr->p[0].ctx, reqs, n);
	if (st)
		return st;
	for (size_t i = 0; i < n; i++)
		reqs[i].source = reqs[i].ndrafts ? 2 : 1; /* 2: the first's (the second skips them) */
	if ((st = pr->p[1].propose(pr->p[1].ctx, reqs, n)))
		return st;
	for (size_t i = 0; i < n; i++)
		reqs[i].source = reqs[i].source == 2 ? 0 : 1;
	return TF_OK;
}

static void pair_observe(void *ctx, const struct tf_propose_req *req, uint32_t accepted)
{
	struct pair *pr = ctx;
	const struct tf_proposer *p = &pr->p[req->source ? 1 : 0];
	if (p->observe)
		p->observe(p->ctx, req, accepted);
}

static void pair_forget(void *ctx, const struct tf_lane *lane)
{
	struct pair *pr = ctx;
	for (int k = 0; k < 2; k++)
		if (pr->p[k].forget)
			pr->p[k].forget(pr->p[k].ctx, lane);
}

static void pair_free(void *ctx)
{
	struct pair *pr = ctx;
	if (!pr)
		return;
	tf_proposer_release(&pr->p[0]);
	tf_proposer_release(&pr->p[1]);
	free(pr);
}

tf_status tf_proposer_pair(const struct tf_proposer *first, const struct tf_proposer *second,
			   struct tf_proposer *out)
{
	struct pair *pr = tf_calloc(1, sizeof(*pr));
	if (!pr) {
		struct tf_proposer a = *first, b = *second;
		tf_proposer_release(&a);
		tf_proposer_release(&b);
		return tf_err(TF_ERR_NOMEM, "proposers: out of memory");
	}
	pr->p[0] = *first;
	pr->p[1] = *second;
	*out = (struct tf_proposer){"pair", pr, pair_propose, pair_observe, pair_forget, pair_free};
	return TF_OK;
}

void tf_proposer_release(struct tf_proposer *p)
{
	if (p->free)
		p->free(p->ctx);
	*p = (struct tf_proposer){0};
}
