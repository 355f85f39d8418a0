/* forward_model.h: random dense weights of a preset for the forward tests
 * (check_forward.c, check_forward_ref.c): the backbone, then the DSpark
 * blocks and heads (drawn after it, so the backbone's values do not depend
 * on them), and their Engram row source. */
#ifndef TF_TESTS_FORWARD_MODEL_H
#define TF_TESTS_FORWARD_MODEL_H

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/rng.h"
#include "compute/dspark.h"
#include "compute/forward.h"

struct model {
	struct tf_config c;
	struct tf_fwd_weights w;
	struct tf_fwd_layer layers[TF_CONFIG_MAX_LAYERS];
	struct tf_dspark_weights dw;
	void *mem[4096];
	int nmem;
	struct tf_rng rng;
};

static inline void *keep(struct model *m, void *p)
{
	ck_assert_ptr_nonnull(p);
	ck_assert_int_lt(m->nmem, 4096);
	m->mem[m->nmem++] = p;
	return p;
}

/* Uniform values of standard deviation sd around mean. */
static inline struct tf_tensor rnd(struct model *m, enum tf_dt dt, int64_t a, int64_t b, double mean,
			    double sd)
{
	int64_t n = a * b;
	struct tf_tensor t = b > 1 ? tf_tensor_make(NULL, dt, 2, a, b) : tf_tensor_make(NULL, dt, 1, a);
	t.data = keep(m, malloc((size_t)n * tf_dt_size(dt)));
	for (int64_t i = 0; i < n; i++) {
		float v = (float)(mean + (tf_rng_f32(&m->rng) - 0.5) * 3.4641016 * sd);
		if (dt == TF_DT_F32)
			((float *)t.data)[i] = v;
		else if (dt == TF_DT_BF16)
			((uint16_t *)t.data)[i] = tf_f32_to_bf16(v);
		else
			((uint16_t *)t.data)[i] = tf_f32_to_f16(v);
	}
	return t;
}

static inline struct tf_lin dense(struct model *m, int64_t n, int64_t k)
{
	struct tf_lin l = {.w = rnd(m, TF_DT_BF16, n, k, 0, 1 / sqrt((double)k))};
	return l;
}

static inline void build(struct model *m, uint64_t seed)
{
	memset(m, 0, sizeof *m);
	ck_assert_int_eq(tf_config_preset(&m->c, "tiny"), TF_OK);
	tf_rng_seed(&m->rng, seed);
	const struct tf_config *c = &m->c;
	int64_t D = c->hidden, S = c->hc_mult, M = 2 * S + S * S, hd = c->head_dim, H = c->heads;
	int64_t G = c->o_groups, ol = c->o_lora, ql = c->q_lora, Hi = c->index_heads;
	int64_t Di = c->index_dim, I = c->expert_width;
	m->w.embed = rnd(m, TF_DT_BF16, c->vocab, D, 0, 1);
	m->w.norm = rnd(m, TF_DT_F32, D, 1, 1, 0.1);
	m->w.head = dense(m, c->vocab, D);
	m->w.layers = m->layers;
	for (uint32_t L = 0; L < tf_config_all_layers(c); L++) {
		struct tf_fwd_layer *l = &m->layers[L];
		int64_t E = tf_config_experts_of(c, L);
		l->attn_norm = rnd(m, TF_DT_F32, D, 1, 1, 0.1);
		l->ffn_norm = rnd(m, TF_DT_F32, D, 1, 1, 0.1);
		l->q_norm = rnd(m, TF_DT_F32, ql, 1, 1, 0.1);
		l->kv_norm = rnd(m, TF_DT_F32, hd, 1, 1, 0.1);
		for (int i = 0; i < 2; i++) {
			l->hc_fn[i] = rnd(m, TF_DT_F32, M, S * D, 0, 0.02);
			l->hc_base[i] = rnd(m, TF_DT_F32, M, 1, 0, 1);
			l->hc_scale[i] = rnd(m, TF_DT_F32, 3, 1, 0.5, 0.2);
		}
		l->sink = rnd(m, TF_DT_F32, H, 1, 0, 1);
		l->wq_a = dense(m, ql, D);
		l->wkv = dense(m, hd, D);
		l->wq_b = dense(m, H * hd, ql);
		for (int64_t g = 0; g < G; g++)
			l->wo_a[g] = dense(m, ol, H / G * hd);
		l->wo_b = dense(m, D, G * ol);
		if (tf_config_is_kv_source(c, L)) {
			l->comp_wkv = dense(m, hd, D);
			if (tf_config_ratio(c, L) == 2)
				l->comp_wgate = dense(m, hd, D);
			l->comp_norm = rnd(m, TF_DT_F32, hd, 1, 1, 0.1);
			l->ix_wk = dense(m, Di, hd);
			l->ix_k_norm = rnd(m, TF_DT_F32, Di, 1, 1, 0.1);
		}
		if (tf_config_is_index_source(c, L)) {
			l->ix_wq_b = dense(m, Hi * Di, ql);
			l->ix_wp = rnd(m, TF_DT_F16, Hi, D, 0, 1 / sqrt((double)D));
		}
		l->gate = rnd(m, TF_DT_F16, E, D, 0, 3 / sqrt((double)D)); /* decisive routing */
		l->gate_bias = rnd(m, TF_DT_F32, E, 1, 0, 0.1);
		l->w1 = keep(m, calloc((size_t)E, sizeof *l->w1));
		l->w2 = keep(m, calloc((size_t)E, sizeof *l->w2));
		l->w3 = keep(m, calloc((size_t)E, sizeof *l->w3));
		for (int64_t e = 0; e < E; e++) {
			l->w1[e] = dense(m, I, D);
			l->w3[e] = dense(m, I, D);
			l->w2[e] = dense(m, D, I);
		}
		l->sh_w1 = dense(m, I, D);
		l->sh_w3 = dense(m, I, D);
		l->sh_w2 = dense(m, D, I);
		if (tf_config_is_engram(c, L)) {
			int64_t width = (int64_t)tf_config_hash_cols(c) * c->engram_head_dim;
			l->engram_wkv = dense(m, (S + 1) * D, width);
			l->engram_qk = rnd(m, TF_DT_F32, S, D, 0, 1);
		}
	}
	if (c->mtp_layers) {
		int64_t nt = c->n_dspark_targets, V = c->vocab, rank = c->dspark_markov_rank;
		m->w.mtp_norm = rnd(m, TF_DT_F32, D, 1, 1, 0.1);
		m->dw.main_proj = dense(m, D, nt * D);
		m->dw.main_norm = rnd(m, TF_DT_F32, D, 1, 1, 0.1);
		m->dw.markov_embed = rnd(m, TF_DT_BF16, V, rank, 0, 1);
		m->dw.markov_head = rnd(m, TF_DT_BF16, V, rank, 0, 1 / sqrt((double)rank));
		m->dw.confidence = rnd(m, TF_DT_F32, D + rank, 1, 0, 1 / sqrt((double)(D + rank)));
	}
}

static inline void unbuild(struct model *m)
{
	while (m->nmem)
		free(m->mem[--m->nmem]);
}

/* Test Engram rows: a fixed function of the row's token and position;
 * every 7th token is blocked. */
static inline tf_status engram_rows(void *ctx, uint32_t layer, int R, const int32_t *ids,
			     const int64_t *pos, const int *seq, int64_t width, int64_t stride,
			     uint16_t *rows, uint8_t *blocked)
{
	for (int r = 0; r < R; r++) {
		for (int64_t j = 0; j < width; j++)
			rows[r * stride + j] =
				tf_f32_to_bf16((float)sin(ids[r] * 0.37 + j * 0.11 + pos[r] * 0.013 + layer));
		blocked[r] = ids[r] % 7 == 0;
	}
	return TF_OK;
}

#endif
