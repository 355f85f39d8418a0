/* planner.c: the default round planner (see planner.h for the policy). */
#include "engine/planner.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/alloc.h"

struct policy {
	struct tf_planner_config c;
};

static enum tf_plan_verdict admit(void *ctx, const struct tf_lane *cand, size_t running,
				  char *why, size_t whylen)
{
	struct policy *p = ctx;
	uint64_t need = (uint64_t)cand->nprompt + cand->params->max_tokens;
	if (cand->nprompt == 0) {
		snprintf(why, whylen, "the prompt is empty");
		return TF_PLAN_REFUSE;
	}
	if (p->c.context && need > p->c.context) {
		snprintf(why, whylen,
			 "the prompt (%u tokens) and max_tokens (%u) exceed the context of %u tokens",
			 cand->nprompt, cand->params->max_tokens, p->c.context);
		return TF_PLAN_REFUSE;
	}
	if (running >= p->c.max_lanes)
		return TF_PLAN_WAIT;
	return TF_PLAN_ADMIT;
}

static size_t plan(void *ctx, struct tf_lane *const *filling, size_t n, size_t nrows,
		   struct tf_engine_piece *pieces, size_t cap)
{
	struct policy *p = ctx;
	if (n == 0 || cap == 0)
		return 0;
	uint32_t budget = p->c.round_tokens > nrows ? p->c.round_tokens - (uint32_t)nrows : 0;
	if (budget < p->c.min_piece)
		budget = p->c.min_piece;
	/* Serve order: foreground first (the engine's order), and within each
	 * class the least recently served first; ties keep admission order. */
	struct tf_lane **order = tf_alloc_array(n, sizeof(*order));
	if (!order)
		return 0;
	for (size_t i = 0; i < n; i++)
		order[i] = filling[i];
	for (size_t i = 1; i < n; i++) { /* stable insertion sort: n is small */
		struct tf_lane *x = order[i];
		size_t j = i;
		while (j > 0) {
			struct tf_lane *y = order[j - 1];
			int xb = x->params->background, yb = y->params->background;
			if (yb < xb || (yb == xb && y->served <= x->served))
				break;
			order[j] = y;
			j--;
		}
		order[j] = x;
	}
	size_t np = 0;
	for (size_t i = 0; i < n && np < cap && budget > 0; i++) {
		struct tf_lane *l = order[i];
		uint32_t left = l->nprompt - l->filled;
		uint32_t share = budget / (uint32_t)(n - i);
		if (share < p->c.min_piece)
			share = p->c.min_piece < budget ? p->c.min_piece : budget;
		uint32_t take = left < share ? left : share;
		if (p->c.align) {
			uint32_t edge = (l->filled / p->c.align + 1) * p->c.align;
			if (l->filled + take > edge)
				take = edge - l->filled;
		}
		if (take == 0)
			continue;
		pieces[np].lane = l;
		pieces[np].start = l->filled;
		pieces[np].end = l->filled + take;
		np++;
		budget -= take;
	}
	free(order);
	return np;
}

static void after(void *ctx, const struct tf_engine_round *r, double seconds)
{
	(void)ctx, (void)r, (void)seconds;
}

static void policy_free(void *ctx)
{
	free(ctx);
}

tf_status tf_planner_default(const struct tf_planner_config *c, struct tf_planner *out)
{
	struct policy *p = tf_calloc(1, sizeof(*p));
	if (!p)
		return tf_err(TF_ERR_NOMEM, "planner: out of memory");
	if (c)
		p->c = *c;
	if (!p->c.round_tokens)
		p->c.round_tokens = 2048;
	if (!p->c.max_lanes)
		p->c.max_lanes = 64;
	if (!p->c.min_piece)
		p->c.min_piece = 32;
	*out = (struct tf_planner){"default", p, admit, plan, after, policy_free};
	return TF_OK;
}
