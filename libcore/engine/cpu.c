/* cpu.c: the engine backend over the CPU forward. */
#include "engine/cpu.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/sample.h"

struct cpu {
	struct tf_model *model;
	struct tf_sampler *sampler;
	uint32_t vocab;
	/* per-round scratch, grown as needed */
	size_t cap;
	int32_t *ids;
	int64_t *pos;
	int *seq;
	float *logits;
};

static tf_status grow(struct cpu *c, size_t rows)
{
	if (rows <= c->cap)
		return TF_OK;
	size_t cap = c->cap ? c->cap : 64;
	while (cap < rows)
		cap *= 2;
	if (tf_realloc_array(&c->ids, cap, sizeof *c->ids) ||
	    tf_realloc_array(&c->pos, cap, sizeof *c->pos) ||
	    tf_realloc_array(&c->seq, cap, sizeof *c->seq) ||
	    tf_realloc_array(&c->logits, cap * c->vocab, sizeof *c->logits))
		return tf_err(TF_ERR_NOMEM, "cannot hold %zu rows of logits", cap);
	c->cap = cap;
	return TF_OK;
}

static int lane_seq(const struct tf_lane *lane)
{
	return (int)(intptr_t)lane->state - 1;
}

static tf_status begin(void *ctx, struct tf_lane *lane)
{
	struct cpu *c = ctx;
	int seq;
	tf_status st = tf_model_seq_new(c->model, &seq);
	if (st)
		return st;
	lane->state = (void *)(intptr_t)(seq + 1);
	lane->cached = 0;
	return TF_OK;
}

static void end(void *ctx, struct tf_lane *lane)
{
	struct cpu *c = ctx;
	if (lane->state)
		tf_model_seq_free(c->model, lane_seq(lane));
	lane->state = NULL;
}

/* The token a row's logits give, drawn at the position it will occupy. */
static int32_t draw(struct cpu *c, const float *logits, const struct tf_lane *lane,
		    uint64_t position)
{
	const struct tf_engine_params *p = lane->params;
	struct tf_sample_params sp = {p->seed, p->temperature, p->top_k > 0 ? (uint32_t)p->top_k : 0,
				      p->top_p, p->min_p};
	return tf_sample_row(c->sampler, logits, c->vocab, position, &sp);
}

static tf_status forward(void *ctx, struct tf_engine_round *r)
{
	struct cpu *c = ctx;
	size_t rows = r->nrows;
	for (size_t i = 0; i < r->npieces; i++)
		rows += r->pieces[i].end - r->pieces[i].start;
	if (!rows)
		return TF_OK;
	tf_status st = grow(c, rows);
	if (st)
		return st;
	size_t at = 0;
	for (size_t i = 0; i < r->npieces; i++) {
		const struct tf_engine_piece *pc = &r->pieces[i];
		for (uint32_t t = pc->start; t < pc->end; t++, at++) {
			c->ids[at] = pc->lane->prompt[t];
			c->pos[at] = t;
			c->seq[at] = lane_seq(pc->lane);
		}
	}
	for (size_t i = 0; i < r->nrows; i++, at++) {
		const struct tf_lane *lane = r->rows[i].lane;
		c->ids[at] = lane->last;
		c->pos[at] = tf_model_seq_len(c->model, lane_seq(lane));
		c->seq[at] = lane_seq(lane);
	}
	if ((st = tf_model_forward(c->model, (int)rows, c->ids, c->pos, c->seq, c->logits)))
		return st;
	at = 0;
	for (size_t i = 0; i < r->npieces; i++) {
		struct tf_engine_piece *pc = &r->pieces[i];
		at += pc->end - pc->start;
		if (pc->end == pc->lane->nprompt) {
			pc->tokens[0] = draw(c, c->logits + (at - 1) * c->vocab, pc->lane, pc->end);
			pc->ntokens = 1;
		}
	}
	for (size_t i = 0; i < r->nrows; i++, at++) {
		struct tf_engine_row *row = &r->rows[i];
		row->tokens[0] = draw(c, c->logits + at * c->vocab, row->lane,
				      (uint64_t)c->pos[at] + 1);
		row->ntokens = 1;
	}
	return TF_OK;
}

static void cpu_free(void *ctx)
{
	struct cpu *c = ctx;
	if (!c)
		return;
	tf_model_free(c->model);
	tf_sampler_free(c->sampler);
	free(c->ids);
	free(c->pos);
	free(c->seq);
	free(c->logits);
	free(c);
}

tf_status tf_engine_cpu_new(struct tf_model *model, int32_t eos, struct tf_engine_backend *out)
{
	struct cpu *c = calloc(1, sizeof *c);
	if (!c) {
		tf_model_free(model);
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	c->model = model;
	c->vocab = tf_model_config(model)->vocab;
	tf_status st = tf_sampler_new(c->vocab, &c->sampler);
	if (st) {
		cpu_free(c);
		return st;
	}
	*out = (struct tf_engine_backend){"cpu", c, eos, begin, forward, end, cpu_free};
	return TF_OK;
}
