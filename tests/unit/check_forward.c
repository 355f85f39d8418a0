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
#include "forward_model.h"

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
	ck_assert_int_eq(tf_kv_new(g->be, &kc, &g->kv), TF_OK);
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
	int64_t tw = (int64_t)m->c.n_dspark_targets * m->c.hidden;
	uint16_t *taps = malloc(2 * T * tw), *taps1 = malloc(2 * T * tw);
	struct rig g;
	rig_open(&g, m, 2);
	ck_assert_int_eq(tf_kv_open(g.kv, &s), TF_OK);
	int64_t pos[T];
	int seqs[T];
	for (int i = 0; i < T; i++) {
		pos[i] = i;
		seqs[i] = s;
	}
	ck_assert_int_eq(tf_fwd_run_taps(g.f, T, ids, pos, seqs, whole, taps), TF_OK);
	for (int i = 0; i < T * V; i++)
		ck_assert_msg(isfinite(whole[i]), "logit %d is %g", i, whole[i]);
	tf_kv_close(g.kv, s);
	ck_assert_int_eq(tf_kv_open(g.kv, &s), TF_OK);
	for (int t = 0; t < T; t++) {
		int64_t p = t;
		ck_assert_int_eq(tf_fwd_run_taps(g.f, 1, ids + t, &p, &s, step + t * V, taps1 + t * tw),
				 TF_OK);
	}
	same(whole, step, (size_t)T * V, "token by token vs prefill");
	ck_assert(!memcmp(taps, taps1, 2 * T * tw)); /* DSpark taps too */
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
	free(taps);
	free(taps1);
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

/* A prefill longer than the window ring (256 rows) in one call equals the
 * same tokens in chunks: the call runs in passes that fit the ring. */
START_TEST(long_prefill_in_one_call)
{
	struct model *m = malloc(sizeof *m);
	build(m, 5);
	m->c.layers = 3; /* swa, swa with Engram, a ratio-2 KV source: quick */
	m->w.mtp_norm.data = NULL; /* no DSpark blocks after the cut */
	int V = (int)m->c.vocab;
	enum { N = 300 };
	int32_t *ids = malloc(sizeof(int32_t) * N);
	int64_t *pos = malloc(sizeof(int64_t) * N);
	int *seq = malloc(sizeof(int) * N);
	tokens(ids, N, 9);
	float *one = malloc(sizeof(float) * N * V), *chunks = malloc(sizeof(float) * N * V);
	struct tf_be *be;
	struct tf_kv *kv;
	struct tf_fwd *f;
	struct tf_kv_config kc;
	ck_assert_int_eq(tf_cpu_be_new(2, &be), TF_OK);
	tf_fwd_kv_config(&m->c, 8, 2, 1024, &kc);
	ck_assert_int_eq(tf_kv_new(be, &kc, &kv), TF_OK);
	ck_assert_int_eq(tf_fwd_new(be, &m->c, &m->w, kv, engram_rows, NULL, &f), TF_OK);
	int a, b;
	ck_assert_int_eq(tf_kv_open(kv, &a), TF_OK);
	ck_assert_int_eq(tf_kv_open(kv, &b), TF_OK);
	for (int i = 0; i < N; i++) {
		pos[i] = i;
		seq[i] = a;
	}
	ck_assert_int_eq(tf_fwd_run(f, N, ids, pos, seq, one), TF_OK);
	for (int i = 0; i < N; i++)
		seq[i] = b;
	for (int i = 0; i < N; i += 100)
		ck_assert_int_eq(tf_fwd_run(f, 100, ids + i, pos + i, seq + i, chunks + i * V), TF_OK);
	same(one, chunks, (size_t)N * V, "300 rows in one call vs chunks of 100");
	tf_fwd_free(f);
	tf_kv_free(kv);
	tf_be_free(be);
	free(ids);
	free(pos);
	free(seq);
	free(one);
	free(chunks);
	unbuild(m);
	free(m);
}
END_TEST

/* Missing or misshapen weights are refused with a status naming them. */
START_TEST(bad_weights_refused)
{
	struct model *m = malloc(sizeof *m);
	build(m, 3);
	struct tf_be *be;
	struct tf_kv *kv;
	struct tf_fwd *f;
	struct tf_kv_config kc;
	ck_assert_int_eq(tf_cpu_be_new(1, &be), TF_OK);
	tf_fwd_kv_config(&m->c, 2, 1, 256, &kc);
	ck_assert_int_eq(tf_kv_new(be, &kc, &kv), TF_OK);
	void *save = m->layers[2].comp_wkv.w.data;
	m->layers[2].comp_wkv.w.data = NULL;
	ck_assert_int_eq(tf_fwd_new(be, &m->c, &m->w, kv, engram_rows, NULL, &f), TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_ARG), "layer 2: compressor.wkv is missing"));
	m->layers[2].comp_wkv.w.data = save;
	m->layers[5].wq_a.w.shape[1]--; /* [q_lora, D - 1] */
	ck_assert_int_eq(tf_fwd_new(be, &m->c, &m->w, kv, engram_rows, NULL, &f), TF_ERR_ARG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_ARG), "layer 5: wq_a"));
	m->layers[5].wq_a.w.shape[1]++;
	ck_assert_int_eq(tf_fwd_new(be, &m->c, &m->w, kv, NULL, NULL, &f), TF_ERR_ARG); /* Engram */
	ck_assert_int_eq(tf_fwd_new(be, &m->c, &m->w, kv, engram_rows, NULL, &f), TF_OK);
	int32_t id = 512; /* past the vocabulary */
	int64_t pos = 0;
	int s;
	float lg[512];
	ck_assert_int_eq(tf_kv_open(kv, &s), TF_OK);
	ck_assert_int_eq(tf_fwd_run(f, 1, &id, &pos, &s, lg), TF_ERR_ARG);
	tf_fwd_free(f);
	tf_kv_free(kv);
	tf_be_free(be);
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
	tcase_add_test(tc, long_prefill_in_one_call);
	tcase_add_test(tc, bad_weights_refused);
	suite_add_tcase(s, tc);
	return s;
}
