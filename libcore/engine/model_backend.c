/* model_backend.c: the engine backend over a model (compute/model.h). */
#include "engine/model_backend.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/log.h"
#include "compute/kv.h"
#include "compute/sample.h"
#include "engine/constrain.h"
#include "engine/depth.h"
#include "engine/prefix.h"
#include "engine/propose.h"

struct cpu {
	struct tf_model *model;
	struct tf_sampler *sampler;
	struct tf_prefix *prefix; /* the prompt cache's index, or NULL */
	uint32_t vocab;
	uint32_t *undrawable, nundrawable; /* ids never drawn */
	int32_t eos;
	/* drafts (model_backend.h) */
	uint32_t drafts;
	struct tf_proposer proposer;
	struct tf_depth depth;
	/* per-round scratch, grown as needed */
	size_t cap;
	int32_t *ids;
	int64_t *pos;
	int *seq;
	int *out;      /* the rows whose logits the round reads */
	float *logits; /* theirs, [cap_out][vocab] */
	size_t cap_out;
	size_t caprows;
	struct tf_propose_req *reqs;
	int *rowreq; /* a decode row's index in reqs, or -1 */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A capacity for n items grown from cap by doubling (from first when 0). */
static size_t cap_for(size_t cap, size_t n, size_t first)
{
	cap = cap ? cap : first;
	while (cap < n)
		cap *= 2;
	return cap;
}

static tf_status grow(struct cpu *c, size_t rows)
{
	if (rows <= c->cap)
		return TF_OK;
	size_t cap = cap_for(c->cap, rows, 64);
	if (tf_realloc_array(&c->ids, cap, sizeof *c->ids) ||
	    tf_realloc_array(&c->pos, cap, sizeof *c->pos) ||
	    tf_realloc_array(&c->seq, cap, sizeof *c->seq) ||
	    tf_realloc_array(&c->out, cap, sizeof *c->out))
		return tf_err(TF_ERR_NOMEM, "cannot hold %zu rows", cap);
	c->cap = cap;
	return TF_OK;
}

/* Room for n rows of logits (a round's decode rows, drafts and finished
 * prompts; not every prompt row). */
static tf_status grow_logits(struct cpu *c, size_t n)
{
	if (n <= c->cap_out)
		return TF_OK;
	size_t cap = cap_for(c->cap_out, n, 16);
	if (tf_realloc_array(&c->logits, cap * c->vocab, sizeof *c->logits))
		return tf_err(TF_ERR_NOMEM, "cannot hold %zu rows of logits", cap);
	c->cap_out = cap;
	return TF_OK;
}

/* A lane's state: its cache sequence, the prompt prefixes to save, and
 * its drafts' record (for the depth rule). */
struct lane_state {
	int seq;
	uint32_t save[TF_PREFIX_SAVES];
	uint64_t accepted, rejects;
	uint32_t idle; /* rows since it last drafted */
};

static int lane_seq(const struct tf_lane *lane)
{
	return ((const struct lane_state *)lane->state)->seq;
}

/* Drop the least recently used saved prefix; false when none is left. */
static bool evict_one(struct cpu *c, int *victim)
{
	int v = c->prefix ? tf_prefix_evict(c->prefix) : -1;
	if (v < 0)
		return false;
	tf_model_seq_free(c->model, v);
	if (victim)
		*victim = v;
	return true;
}

static tf_status begin(void *ctx, struct tf_lane *lane)
{
	struct cpu *c = ctx;
	struct lane_state *ls = tf_calloc(1, sizeof(*ls));
	if (!ls)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	struct tf_prefix_plan plan = {.seq = -1};
	if (c->prefix && tf_prefix_lookup(c->prefix, lane->prompt, lane->nprompt, &plan))
		plan = (struct tf_prefix_plan){.seq = -1}; /* run it without the cache */
	tf_status st;
	int victim;
	/* A sequence slot: resumed from the hit or new; saved prefixes make
	 * way (should the hit itself go, the prompt runs from the start). */
	for (;;) {
		st = plan.seq >= 0 ? tf_model_seq_fork(c->model, plan.seq, &ls->seq)
				   : tf_model_seq_new(c->model, &ls->seq);
		if (st != TF_ERR_UNAVAILABLE || !evict_one(c, &victim))
			break;
		if (victim == plan.seq)
			plan.seq = -1, plan.hit = 0;
	}
	if (st) {
		free(ls);
		return st;
	}
	memcpy(ls->save, plan.save, sizeof(ls->save));
	lane->state = ls;
	lane->cached = plan.seq >= 0 ? plan.hit : 0;
	if (lane->cached) {
		tf_prefix_resumed(c->prefix, lane->cached);
		tf_log(TF_LOG_DEBUG, "cpu: request %llu resumes %u of %u prompt tokens",
		       (unsigned long long)lane->id, lane->cached, lane->nprompt);
	}
	return TF_OK;
}

static void end(void *ctx, struct tf_lane *lane)
{
	struct cpu *c = ctx;
	if (c->proposer.forget)
		c->proposer.forget(c->proposer.ctx, lane);
	if (lane->state)
		tf_model_seq_free(c->model, lane_seq(lane));
	free(lane->state);
	lane->state = NULL;
}

/* Save the lane's first len prompt positions (its whole sequence now) as a
 * prefix: a fork that shares its full pages. Best effort: without room the
 * prefix is not kept. */
static void save(struct cpu *c, const struct tf_lane *lane, uint32_t len)
{
	if (tf_prefix_holds(c->prefix, lane->prompt, len))
		return;
	if (tf_prefix_full(c->prefix) && !evict_one(c, NULL))
		return;
	int snap;
	tf_status st;
	while ((st = tf_model_seq_fork(c->model, lane_seq(lane), &snap)) == TF_ERR_UNAVAILABLE)
		if (!evict_one(c, NULL))
			return;
	if (st)
		return;
	if (tf_prefix_insert(c->prefix, lane->prompt, len, snap))
		tf_model_seq_free(c->model, snap);
}

static int64_t pages(int64_t positions)
{
	return (positions + TF_KV_PAGE - 1) / TF_KV_PAGE;
}

/* Cache pages for the round: saved prefixes make way when the pool is
 * short, so that a round never fails for pages the cache could give. */
static void make_room(struct cpu *c, const struct tf_engine_round *r)
{
	int64_t need = 0;
	for (size_t i = 0; i < r->npieces; i++)
		need += pages(r->pieces[i].end) - pages(r->pieces[i].start);
	for (size_t i = 0; i < r->nrows; i++) {
		int64_t n = tf_model_seq_len(c->model, lane_seq(r->rows[i].lane));
		int k = c->rowreq && c->rowreq[i] >= 0 ? (int)c->reqs[c->rowreq[i]].ndrafts : 0;
		need += pages(n + 1 + k) - pages(n);
	}
	while (tf_model_free_pages(c->model) < need && evict_one(c, NULL))
		;
}

/* The token a row's logits give, drawn at the position it will occupy;
 * ids that are never drawn, and those the lane's grammar does not allow,
 * leave the row first. A row no token may continue fails. */
static tf_status draw(struct cpu *c, float *logits, struct tf_lane *lane, uint64_t position,
		      int32_t *token)
{
	for (uint32_t i = 0; i < c->nundrawable; i++)
		logits[c->undrawable[i]] = -INFINITY;
	tf_status st = tf_lane_constrain(lane, logits, c->vocab, c->eos);
	if (st)
		return st;
	const struct tf_engine_params *p = lane->params;
	struct tf_sample_params sp = {p->seed, p->temperature, p->top_k > 0 ? (uint32_t)p->top_k : 0,
				      p->top_p, p->min_p};
	*token = tf_sample_row(c->sampler, logits, c->vocab, position, &sp);
	tf_lane_constrain_step(lane, *token);
	return TF_OK;
}

/* The log-probabilities of token under the row's own softmax. */
static void logprobs(struct cpu *c, const float *logits, const struct tf_lane *lane, int32_t token,
		     struct tf_engine_logprob *out)
{
	out->ntop = lane->params->top_logprobs;
	tf_sample_logprobs(c->sampler, logits, c->vocab, token, out->ntop, &out->logprob,
			   out->top_ids, out->top_lp);
}

/* Drafts a row may verify: none for no_draft or the last token a request
 * may take, never past max_tokens, the rest from the depth rule. */
static uint32_t draft_budget(struct cpu *c, const struct tf_lane *lane, size_t lanes)
{
	const struct tf_engine_params *p = lane->params;
	if (!c->drafts || p->no_draft || lane->ngen + 1 >= p->max_tokens)
		return 0;
	uint32_t k = p->max_tokens - lane->ngen - 1;
	if (k > c->drafts)
		k = c->drafts;
	const struct lane_state *ls = lane->state;
	return tf_depth_choose(&c->depth, ls->accepted, ls->rejects, ls->idle, (uint32_t)lanes, k);
}

static tf_status grow_rows(struct cpu *c, size_t n)
{
	if (n <= c->caprows)
		return TF_OK;
	size_t cap = cap_for(c->caprows, n, 16);
	if (tf_realloc_array(&c->reqs, cap, sizeof(*c->reqs)) ||
	    tf_realloc_array(&c->rowreq, cap, sizeof(*c->rowreq)))
		return tf_err(TF_ERR_NOMEM, "out of memory for drafts");
	c->caprows = cap;
	return TF_OK;
}

/* The round's drafts: one proposer call for every row that may draft.
 * Returns the rows the drafts add. */
static tf_status propose(struct cpu *c, struct tf_engine_round *r, size_t *extra)
{
	*extra = 0;
	tf_status st = grow_rows(c, r->nrows);
	if (st)
		return st;
	for (size_t i = 0; i < r->nrows; i++)
		c->rowreq[i] = -1;
	if (!c->drafts)
		return TF_OK;
	size_t n = 0;
	for (size_t i = 0; i < r->nrows; i++) {
		struct tf_lane *lane = r->rows[i].lane;
		uint32_t k = draft_budget(c, lane, r->nrows);
		if (!k) {
			((struct lane_state *)lane->state)->idle++;
			continue;
		}
		c->rowreq[i] = (int)n;
		c->reqs[n++] = (struct tf_propose_req){.lane = lane, .seq = lane_seq(lane),
						       .pos = tf_model_seq_len(c->model, lane_seq(lane)),
						       .max = k};
	}
	if (n && (st = c->proposer.propose(c->proposer.ctx, c->reqs, n))) {
		/* drafts are optional: the round runs plain */
		tf_log(TF_LOG_WARN, "cpu: %s drafts failed, the round runs without: %s",
		       c->proposer.name, tf_errmsg(st));
		for (size_t i = 0; i < r->nrows; i++)
			c->rowreq[i] = -1;
		return TF_OK;
	}
	for (size_t i = 0; i < n; i++) {
		struct tf_propose_req *q = &c->reqs[i];
		if (q->ndrafts > q->max)
			q->ndrafts = q->max;
		struct lane_state *ls = q->lane->state;
		ls->idle = q->ndrafts ? 0 : ls->idle + 1;
		*extra += q->ndrafts;
	}
	return TF_OK;
}

/* Verify decode row `row` whose rows begin at `at` (their logits at row
 * lat of c->logits): draw after the pending token and after each accepted
 * draft, in order, as plain rows would. */
static void verify(struct cpu *c, struct tf_engine_row *row, size_t at, size_t lat)
{
	struct tf_lane *lane = row->lane;
	int64_t P = c->pos[at];
	uint32_t k = row->drafted;
	const int32_t *d = c->ids + at + 1; /* the drafts as they went in */
	const struct tf_engine_params *p = lane->params;
	uint32_t a = 0;
	int64_t keep = P + 1 + k; /* the sequence as the forward left it */
	for (uint32_t j = 0;; j++) {
		float *lg = c->logits + (lat + j) * c->vocab;
		tf_status st = draw(c, lg, lane, (uint64_t)(P + j + 1), &row->tokens[j]);
		if (st) {
			if (j == 0) {
				row->st = st; /* as the plain row fails */
				return;
			}
			/* the plain run delivers what came before and fails on
			 * the next round: make the last token pending again */
			a = j - 1;
			keep = P + j;
			break;
		}
		if (row->lp)
			logprobs(c, lg, lane, row->tokens[j], &row->lp[j]);
		row->ntokens = j + 1;
		bool eos = p->stop_eos && c->eos >= 0 && row->tokens[j] == c->eos;
		if (j == k || row->tokens[j] != d[j] || eos) {
			a = j;
			keep = P + 1 + j;
			break;
		}
	}
	row->accepted = a;
	if (keep < P + 1 + k) {
		tf_status st = tf_model_seq_rollback(c->model, lane_seq(lane), keep);
		if (st)
			row->st = st;
	}
}

static tf_status forward(void *ctx, struct tf_engine_round *r)
{
	struct cpu *c = ctx;
	size_t rows = r->nrows, extra = 0;
	for (size_t i = 0; i < r->npieces; i++)
		rows += r->pieces[i].end - r->pieces[i].start;
	if (!rows)
		return TF_OK;
	tf_status st = propose(c, r, &extra);
	if (st)
		return st;
	rows += extra;
	if ((st = grow(c, rows)))
		return st;
	make_room(c, r);
	size_t at = 0, nout = 0;
	for (size_t i = 0; i < r->npieces; i++) {
		const struct tf_engine_piece *pc = &r->pieces[i];
		for (uint32_t t = pc->start; t < pc->end; t++, at++) {
			c->ids[at] = pc->lane->prompt[t];
			c->pos[at] = t;
			c->seq[at] = lane_seq(pc->lane);
		}
		if (pc->end == pc->lane->nprompt) /* the first token's logits */
			c->out[nout++] = (int)at - 1;
	}
	for (size_t i = 0; i < r->nrows; i++) {
		struct tf_engine_row *row = &r->rows[i];
		const struct tf_lane *lane = row->lane;
		const struct tf_propose_req *q = c->rowreq[i] >= 0 ? &c->reqs[c->rowreq[i]] : NULL;
		int64_t P = tf_model_seq_len(c->model, lane_seq(lane));
		row->drafted = q ? q->ndrafts : 0;
		/* ids [last, d_1 .. d_k] at P .. P + k */
		for (uint32_t j = 0; j <= row->drafted; j++, at++) {
			c->ids[at] = j ? q->drafts[j - 1] : lane->last;
			c->pos[at] = P + j;
			c->seq[at] = lane_seq(lane);
			c->out[nout++] = (int)at;
		}
	}
	if ((st = grow_logits(c, nout)))
		return st;
	double t0 = now_s();
	if ((st = tf_model_forward_rows(c->model, (int)rows, c->ids, c->pos, c->seq, (int)nout,
					c->out, c->logits)))
		return st;
	tf_depth_observe(&c->depth, (uint32_t)rows, now_s() - t0);
	at = 0;
	size_t lat = 0; /* the next row of c->logits */
	for (size_t i = 0; i < r->npieces; i++) {
		struct tf_engine_piece *pc = &r->pieces[i];
		at += pc->end - pc->start;
		const struct lane_state *ls = pc->lane->state;
		for (int k = 0; c->prefix && k < TF_PREFIX_SAVES && ls->save[k]; k++)
			if (ls->save[k] == pc->end)
				save(c, pc->lane, pc->end);
		if (pc->end == pc->lane->nprompt) {
			float *lg = c->logits + lat++ * c->vocab;
			if ((pc->st = draw(c, lg, pc->lane, pc->end, &pc->tokens[0])))
				continue;
			pc->ntokens = 1;
			if (pc->lp)
				logprobs(c, lg, pc->lane, pc->tokens[0], &pc->lp[0]);
		}
	}
	for (size_t i = 0; i < r->nrows; i++) {
		struct tf_engine_row *row = &r->rows[i];
		uint32_t k = row->drafted;
		verify(c, row, at, lat);
		at += 1 + k;
		lat += 1 + k;
		if (!k)
			continue;
		struct lane_state *ls = row->lane->state;
		ls->accepted += row->accepted;
		ls->rejects += row->accepted < k;
		if (c->proposer.observe)
			c->proposer.observe(c->proposer.ctx, &c->reqs[c->rowreq[i]], row->accepted);
	}
	return TF_OK;
}

static void cache_stats(void *ctx, struct tf_engine_cache_stats *out)
{
	struct cpu *c = ctx;
	if (!c->prefix)
		return;
	struct tf_prefix_stats s;
	tf_prefix_stats(c->prefix, &s);
	*out = (struct tf_engine_cache_stats){true, s.lookups, s.hits, s.hit_tokens, s.saves,
					      s.evictions, s.entries};
}

static void cpu_free(void *ctx)
{
	struct cpu *c = ctx;
	if (!c)
		return;
	tf_model_free(c->model);
	tf_prefix_free(c->prefix);
	tf_sampler_free(c->sampler);
	tf_proposer_release(&c->proposer);
	free(c->reqs);
	free(c->rowreq);
	free(c->ids);
	free(c->pos);
	free(c->seq);
	free(c->out);
	free(c->logits);
	free(c->undrawable);
	free(c);
}

/* The list of ids never drawn; every id undrawable is refused. */
static tf_status keep_drawable(struct cpu *c, const uint8_t *drawable)
{
	uint32_t n = 0;
	for (uint32_t id = 0; id < c->vocab; id++)
		n += !drawable[id];
	if (n == c->vocab)
		return tf_err(TF_ERR_ARG, "cpu engine: no id of the %u can be drawn", c->vocab);
	if (n && !(c->undrawable = malloc(n * sizeof *c->undrawable)))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	for (uint32_t id = 0; id < c->vocab; id++)
		if (!drawable[id])
			c->undrawable[c->nundrawable++] = id;
	return TF_OK;
}

/* Prompt lookup, then DSpark where the pack has its blocks. */
static tf_status default_proposer(struct tf_model *model, struct tf_proposer *out)
{
	struct tf_proposer look, ds;
	tf_status st = tf_proposer_lookup(NULL, &look);
	if (st || tf_model_draft_block(model) <= 0) {
		*out = st ? (struct tf_proposer){0} : look;
		return st;
	}
	if ((st = tf_proposer_dspark(model, &ds))) {
		tf_proposer_release(&look);
		return st;
	}
	return tf_proposer_pair(&look, &ds, out);
}

tf_status tf_engine_model_new(struct tf_model *model, int32_t eos, const struct tf_engine_model_opts *o,
			    struct tf_engine_backend *out)
{
	struct tf_proposer given = o && o->proposer ? *o->proposer : (struct tf_proposer){0};
	struct cpu *c = calloc(1, sizeof *c);
	if (!c) {
		tf_proposer_release(&given);
		tf_model_free(model);
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	c->model = model;
	c->proposer = given;
	c->eos = eos;
	c->vocab = tf_model_config(model)->vocab;
	tf_status st = tf_sampler_new(c->vocab, &c->sampler);
	if (!st && o && o->drawable)
		st = keep_drawable(c, o->drawable);
	if (!st && o && o->drafts) {
		c->drafts = o->drafts < TF_PROPOSE_MAX ? o->drafts : TF_PROPOSE_MAX;
		tf_depth_init(&c->depth, o->fixed_depth);
		if (!c->proposer.propose)
			st = default_proposer(model, &c->proposer);
	}
	if (!st && o && o->cache_entries) {
		struct tf_prefix_config pc = {.block = TF_PREFIX_BLOCK, .max_entries = o->cache_entries};
		st = tf_prefix_new(&pc, &c->prefix);
	}
	if (st) {
		cpu_free(c);
		return st;
	}
	*out = (struct tf_engine_backend){"cpu", c, eos, begin, forward, end, cpu_free, cache_stats, true};
	return TF_OK;
}
