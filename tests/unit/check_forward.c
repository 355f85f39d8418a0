/* check_forward.c: the forward on random dense weights of the tiny preset
 * (every CSA2 mode, both Engram layers, selections past index_topk and
 * candidate blocks past their budget). Properties, bit for bit: decoding
 * token by token equals one whole prefill at every position; prefill in
 * chunks equals whole; a batch of sequences equals each alone; a fork and a
 * rollback equal recomputation. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/rng.h"
#include "compute/forward.h"
#include "compute/phases.h"

struct model {
	struct tf_config c;
	struct tf_fwd_weights w;
	struct tf_fwd_layer layers[TF_CONFIG_MAX_LAYERS];
	void *mem[4096];
	int nmem;
	struct tf_rng rng;
};

static void *keep(struct model *m, void *p)
{
	ck_assert_ptr_nonnull(p);
	ck_assert_int_lt(m->nmem, 4096);
	m->mem[m->nmem++] = p;
	return p;
}

/* Uniform values of standard deviation sd around mean. */
static struct tf_tensor rnd(struct model *m, enum tf_dt dt, int64_t a, int64_t b, double mean,
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

static struct tf_lin dense(struct model *m, int64_t n, int64_t k)
{
	struct tf_lin l = {.w = rnd(m, TF_DT_BF16, n, k, 0, 1 / sqrt((double)k))};
	return l;
}

static void build(struct model *m, uint64_t seed)
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
	for (uint32_t L = 0; L < c->layers; L++) {
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
		l->gate = rnd(m, TF_DT_F16, E, D, 0, 1 / sqrt((double)D));
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
}

static void unbuild(struct model *m)
{
	while (m->nmem)
		free(m->mem[--m->nmem]);
}

/* Test Engram rows: a fixed function of the row's token and position;
 * every 7th token is blocked. */
static tf_status engram_rows(void *ctx, uint32_t layer, int R, const int32_t *ids,
			     const int64_t *pos, const int *seq, struct tf_tensor *rows,
			     uint8_t *blocked)
{
	int64_t width = tf_tensor_cols(rows);
	for (int r = 0; r < R; r++) {
		for (int64_t j = 0; j < width; j++)
			((uint16_t *)rows->data)[r * width + j] =
				tf_f32_to_bf16((float)sin(ids[r] * 0.37 + j * 0.11 + pos[r] * 0.013 + layer));
		blocked[r] = ids[r] % 7 == 0;
	}
	return TF_OK;
}

struct rig {
	struct tf_be *be;
	struct tf_kv *kv;
	struct tf_fwd *f;
};

static void rig_open(struct rig *g, struct model *m, int slots)
{
	struct tf_kv_config kc;
	ck_assert_int_eq(tf_cpu_be_new(2, &g->be), TF_OK);
	tf_fwd_kv_config(&m->c, 16, slots, 512, &kc);
	ck_assert_int_eq(tf_kv_new(&kc, &g->kv), TF_OK);
	ck_assert_int_eq(tf_fwd_new(g->be, &m->c, &m->w, g->kv, engram_rows, NULL, &g->f), TF_OK);
}

static void rig_close(struct rig *g)
{
	tf_fwd_free(g->f);
	tf_kv_free(g->kv);
	tf_be_free(g->be);
}

enum { T = 24 };

static void tokens(int32_t *ids, int n, int salt)
{
	for (int i = 0; i < n; i++)
		ids[i] = (int32_t)((i * 37 + salt * 101 + 11) % 512);
}

/* Run ids[0..n) of a sequence from its current length, one call. */
static void run(struct rig *g, int s, const int32_t *ids, int n, float *logits)
{
	int64_t pos[T * 2];
	int seq[T * 2];
	int64_t p0 = tf_kv_len(g->kv, s);
	for (int i = 0; i < n; i++) {
		pos[i] = p0 + i;
		seq[i] = s;
	}
	tf_status st = tf_fwd_run(g->f, n, ids, pos, seq, logits);
	ck_assert_msg(st == TF_OK, "forward: %s", tf_errmsg(st));
}

static void same(const float *a, const float *b, size_t n, const char *what)
{
	size_t bad = 0;
	double worst = 0;
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], 4)) {
			bad++;
			worst = fmax(worst, fabs(a[i] - b[i]));
		}
	ck_assert_msg(bad == 0, "%s: %zu of %zu logits differ (worst %g)", what, bad, n, worst);
}

START_TEST(decode_equals_prefill)
{
	struct model *m = malloc(sizeof *m);
	build(m, 100 + (uint64_t)_i);
	int V = (int)m->c.vocab, s;
	int32_t ids[T];
	tokens(ids, T, _i);
	float *whole = malloc(sizeof(float) * T * V), *step = malloc(sizeof(float) * T * V);
	struct rig g;
	rig_open(&g, m, 2);
	ck_assert_int_eq(tf_kv_open(g.kv, &s), TF_OK);
	run(&g, s, ids, T, whole);
	for (int i = 0; i < T * V; i++)
		ck_assert_msg(isfinite(whole[i]), "logit %d is %g", i, whole[i]);
	tf_kv_close(g.kv, s);
	ck_assert_int_eq(tf_kv_open(g.kv, &s), TF_OK);
	for (int t = 0; t < T; t++)
		run(&g, s, ids + t, 1, step + t * V);
	same(whole, step, (size_t)T * V, "token by token vs prefill");
	/* chunks of 5: 5, 5, 5, 5, 4 */
	tf_kv_close(g.kv, s);
	ck_assert_int_eq(tf_kv_open(g.kv, &s), TF_OK);
	for (int t = 0; t < T; t += 5)
		run(&g, s, ids + t, t + 5 <= T ? 5 : T - t, step + t * V);
	same(whole, step, (size_t)T * V, "chunks of 5 vs prefill");
	/* different logits for different tokens: the model is not constant */
	int differ = 0;
	for (int i = 0; i < V; i++)
		differ += whole[i] != whole[V + i];
	ck_assert_int_gt(differ, V / 2);
	rig_close(&g);
	free(whole);
	free(step);
	unbuild(m);
	free(m);
}
END_TEST

START_TEST(batch_equals_alone)
{
	struct model *m = malloc(sizeof *m);
	build(m, 7);
	int V = (int)m->c.vocab;
	enum { A = 9, B = 15 };
	int32_t ia[A + 6], ib[B], both[A + B];
	tokens(ia, A + 6, 1);
	tokens(ib, B, 2);
	float *alone = malloc(sizeof(float) * (A + B) * V), *batch = malloc(sizeof(float) * (A + B) * V);
	struct rig g;
	rig_open(&g, m, 4);
	int sa, sb;
	/* alone: a runs 9 then 6 more; b runs 15 */
	ck_assert_int_eq(tf_kv_open(g.kv, &sa), TF_OK);
	run(&g, sa, ia, A, alone);
	ck_assert_int_eq(tf_kv_open(g.kv, &sb), TF_OK);
	run(&g, sb, ib, B, alone + A * V);
	float *tail_alone = malloc(sizeof(float) * 6 * V), *tail_batch = malloc(sizeof(float) * 6 * V);
	run(&g, sa, ia + A, 6, tail_alone);
	tf_kv_close(g.kv, sa);
	tf_kv_close(g.kv, sb);
	/* batched: a's 9 and b's 15 in one call, then a's 6 with b's next... */
	ck_assert_int_eq(tf_kv_open(g.kv, &sa), TF_OK);
	ck_assert_int_eq(tf_kv_open(g.kv, &sb), TF_OK);
	memcpy(both, ia, sizeof(int32_t) * A);
	memcpy(both + A, ib, sizeof(int32_t) * B);
	int64_t pos[A + B];
	int seq[A + B];
	for (int i = 0; i < A + B; i++) {
		pos[i] = i < A ? i : i - A;
		seq[i] = i < A ? sa : sb;
	}
	ck_assert_int_eq(tf_fwd_run(g.f, A + B, both, pos, seq, batch), TF_OK);
	same(alone, batch, (size_t)(A + B) * V, "batch vs alone");
	run(&g, sa, ia + A, 6, tail_batch);
	same(tail_alone, tail_batch, (size_t)6 * V, "continuation after a batch");
	/* phases: each block's parts and the head are timed per call */
	struct tf_phases *ph;
	ck_assert_int_eq(tf_phases_new(TF_PHASES_HOST, NULL, &ph), TF_OK);
	tf_fwd_set_phases(g.f, ph);
	run(&g, sb, ib, 2, tail_batch);
	char *js = tf_phases_json(ph);
	ck_assert_ptr_nonnull(strstr(js, "\"L1.engram\":{\"ms\":"));
	ck_assert_ptr_nonnull(strstr(js, "\"L7.moe\":{\"ms\":"));
	ck_assert_ptr_nonnull(strstr(js, "\"head\":{\"ms\":"));
	ck_assert_ptr_null(strstr(js, "\"L0.engram\":{\"ms\":0.000,\"n\":1"));
	free(js);
	tf_fwd_set_phases(g.f, NULL);
	tf_phases_free(ph);
	/* rows that do not continue their sequence are refused */
	pos[0] = 3;
	ck_assert_int_eq(tf_fwd_run(g.f, 1, both, pos, seq, batch), TF_ERR_ARG);
	rig_close(&g);
	free(alone);
	free(batch);
	free(tail_alone);
	free(tail_batch);
	unbuild(m);
	free(m);
}
END_TEST

START_TEST(fork_and_rollback_equal_recompute)
{
	struct model *m = malloc(sizeof *m);
	build(m, 99);
	int V = (int)m->c.vocab;
	int32_t ids[T], alt[T];
	tokens(ids, T, 3);
	tokens(alt, T, 4);
	float *ref = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * T * V);
	struct rig g;
	rig_open(&g, m, 3);
	int a, b, r;
	/* reference: prefix ids[0..13) then alt[13..24) */
	ck_assert_int_eq(tf_kv_open(g.kv, &r), TF_OK);
	run(&g, r, ids, 13, ref);
	run(&g, r, alt + 13, T - 13, ref + 13 * V);
	tf_kv_close(g.kv, r);
	/* fork after 13 tokens of ids, the fork continues with alt */
	ck_assert_int_eq(tf_kv_open(g.kv, &a), TF_OK);
	run(&g, a, ids, 13, got);
	ck_assert_int_eq(tf_kv_fork(g.kv, a, &b), TF_OK);
	run(&g, a, ids + 13, T - 13, got + 13 * V); /* the parent goes on its own way */
	run(&g, b, alt + 13, T - 13, got + 13 * V);
	same(ref + 13 * V, got + 13 * V, (size_t)(T - 13) * V, "fork vs recompute");
	/* roll the parent back to 13 and take alt: the same again */
	ck_assert_int_eq(tf_kv_rollback(g.kv, a, 13), TF_OK);
	run(&g, a, alt + 13, T - 13, got + 13 * V);
	same(ref + 13 * V, got + 13 * V, (size_t)(T - 13) * V, "rollback vs recompute");
	rig_close(&g);
	free(ref);
	free(got);
	unbuild(m);
	free(m);
}
END_TEST

Suite *suite_forward(void)
{
	Suite *s = suite_create("forward");
	TCase *tc = tcase_create("forward");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, decode_equals_prefill, 0, 2);
	tcase_add_test(tc, batch_equals_alone);
	tcase_add_test(tc, fork_and_rollback_equal_recompute);
	suite_add_tcase(s, tc);
	return s;
}
