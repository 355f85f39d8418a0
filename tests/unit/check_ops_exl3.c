/* check_ops_exl3.c: the CPU backend's EXL3 ops against the dense product
 * with tf_exl3_dequant's W (computed in fp64), for bf16 and f32 inputs and
 * outputs, the ragged experts op, and refused shapes. */
#include <string.h>

#include "model/exl3.h"
#include "ops_test.h"

struct layer {
	struct tf_exl3_layer L;
	uint16_t *trellis, *suh, *svh;
	float *W; /* [K][N] */
};

static void layer_make(struct layer *l, uint32_t k, uint32_t n, uint32_t bits, enum tf_exl3_cb cb,
		       uint64_t seed)
{
	struct tf_rng r;
	tf_rng_seed(&r, seed);
	memset(l, 0, sizeof *l);
	l->L.g = (struct tf_exl3_geom){.k = k, .n = n, .bits = bits, .cb = cb};
	l->trellis = malloc(tf_exl3_trellis_bytes(&l->L.g));
	l->suh = malloc(2 * k);
	l->svh = malloc(2 * n);
	tf_exl3_synth(&l->L.g, &r, l->trellis, l->suh, l->svh);
	l->L.trellis = l->trellis;
	l->L.suh = l->suh;
	l->L.svh = l->svh;
	l->W = malloc(sizeof(float) * k * n);
	ck_assert_int_eq(tf_exl3_dequant(&l->L, l->W), TF_OK);
}

static void layer_free(struct layer *l)
{
	free(l->trellis);
	free(l->suh);
	free(l->svh);
	free(l->W);
}

/* want[r][n] = sum_k x[r][k] W[k][n] in fp64 over rows [r0, r1). */
static void dense(const struct layer *l, const uint16_t *xb, int r0, int r1, double *want)
{
	int K = (int)l->L.g.k, N = (int)l->L.g.n;
	for (int r = r0; r < r1; r++)
		for (int n = 0; n < N; n++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				s += (double)tf_bf16_to_f32(xb[r * K + k]) * l->W[k * N + n];
			want[r * N + n] = s;
		}
}

START_TEST(exl3_matmul_matches_dequant)
{
	struct tf_be *be = test_be();
	static const uint32_t bits[] = {2, 3, 4};
	static const enum tf_exl3_cb cbs[] = {TF_EXL3_CB_3INST, TF_EXL3_CB_MCG, TF_EXL3_CB_MUL1};
	for (int t = 0; t < 3; t++) {
		enum { R = 5, K = 256, N = 384 };
		struct layer l;
		layer_make(&l, K, N, bits[t], cbs[t], 10 + t);
		struct tf_rng r;
		tf_rng_seed(&r, 3);
		float *x = test_randn(&r, R * K, 1);
		uint16_t *xb = test_bf16(x, R * K);
		float *y = malloc(sizeof(float) * R * N), *xf = malloc(sizeof(float) * R * K);
		uint16_t *yb = malloc(2 * R * N);
		double *want = malloc(sizeof(double) * R * N);
		dense(&l, xb, 0, R, want);
		struct tf_tensor tx = T2(xb, TF_DT_BF16, R, K), ty = T2(y, TF_DT_F32, R, N);
		struct tf_tensor tyb = T2(yb, TF_DT_BF16, R, N);
		ck_assert_int_eq(be->ops->exl3_matmul(be, &l.L, &tx, &ty), TF_OK);
		/* fp32 rotations and sums against fp64: float rounding only */
		ck_assert(test_worst("exl3_matmul f32", y, want, R * N, 1e-2) < 1e-4);
		ck_assert_int_eq(be->ops->exl3_matmul(be, &l.L, &tx, &tyb), TF_OK);
		for (int i = 0; i < R * N; i++) /* bf16 y = the f32 result rounded once */
			ck_assert_uint_eq(yb[i], tf_f32_to_bf16(y[i]));
		/* f32 x of the same values gives the same y */
		for (int i = 0; i < R * K; i++)
			xf[i] = tf_bf16_to_f32(xb[i]);
		float *y2 = malloc(sizeof(float) * R * N);
		struct tf_tensor txf = T2(xf, TF_DT_F32, R, K), ty2 = T2(y2, TF_DT_F32, R, N);
		ck_assert_int_eq(be->ops->exl3_matmul(be, &l.L, &txf, &ty2), TF_OK);
		ck_assert_int_eq(memcmp(y, y2, sizeof(float) * R * N), 0);
		free(y2);
		free(x);
		free(xb);
		free(xf);
		free(y);
		free(yb);
		free(want);
		layer_free(&l);
	}
	tf_be_free(be);
}
END_TEST

START_TEST(exl3_matmul_refuses_bad_shapes)
{
	struct tf_be *be = test_be();
	struct layer l;
	layer_make(&l, 128, 256, 2, TF_EXL3_CB_3INST, 1);
	uint16_t xb[2 * 256] = {0};
	float y[2 * 256];
	struct tf_tensor tx = T2(xb, TF_DT_BF16, 2, 256), ty = T2(y, TF_DT_F32, 2, 256);
	ck_assert_int_eq(be->ops->exl3_matmul(be, &l.L, &tx, &ty), TF_ERR_ARG); /* K 256 != 128 */
	struct tf_tensor tx2 = T2(xb, TF_DT_BF16, 2, 128), ty2 = T2(y, TF_DT_F32, 2, 128);
	ck_assert_int_eq(be->ops->exl3_matmul(be, &l.L, &tx2, &ty2), TF_ERR_ARG); /* N */
	struct tf_tensor ti = T2(xb, TF_DT_I32, 1, 128), ty3 = T2(y, TF_DT_F32, 1, 256);
	ck_assert_int_eq(be->ops->exl3_matmul(be, &l.L, &ti, &ty3), TF_ERR_ARG); /* dtype */
	struct tf_exl3_layer empty = l.L;
	empty.trellis = NULL;
	ck_assert_int_eq(be->ops->exl3_matmul(be, &empty, &tx2, &ty3), TF_ERR_ARG);
	layer_free(&l);
	tf_be_free(be);
}
END_TEST

START_TEST(exl3_experts_ragged_groups)
{
	struct tf_be *be = test_be();
	enum { E = 3, R = 7, K = 128, N = 256 };
	struct layer l[E];
	struct tf_exl3_layer Ls[E];
	for (int e = 0; e < E; e++) {
		layer_make(&l[e], K, N, (uint32_t)(2 + e), TF_EXL3_CB_3INST, 40 + (uint64_t)e);
		Ls[e] = l[e].L;
	}
	struct tf_rng r;
	tf_rng_seed(&r, 9);
	float *x = test_randn(&r, R * K, 1);
	uint16_t *xb = test_bf16(x, R * K);
	/* groups: expert 2 rows 0..2, expert 0 rows 3..3, expert 2 again (empty), expert 1 rows 4..6 */
	int32_t ids[4] = {2, 0, 2, 1}, off[5] = {0, 3, 4, 4, 7};
	float *y = malloc(sizeof(float) * R * N);
	uint16_t *yb = malloc(2 * R * N);
	double *want = malloc(sizeof(double) * R * N);
	for (int g = 0; g < 4; g++)
		dense(&l[ids[g]], xb, off[g], off[g + 1], want);
	struct tf_tensor tids = T1(ids, TF_DT_I32, 4), toff = T1(off, TF_DT_I32, 5);
	struct tf_tensor tx = T2(xb, TF_DT_BF16, R, K), ty = T2(y, TF_DT_F32, R, N);
	struct tf_tensor tyb = T2(yb, TF_DT_BF16, R, N);
	ck_assert_int_eq(be->ops->exl3_matmul_experts(be, Ls, E, &tids, &toff, &tx, &ty), TF_OK);
	ck_assert(test_worst("exl3_matmul_experts", y, want, R * N, 1e-2) < 1e-4);
	ck_assert_int_eq(be->ops->exl3_matmul_experts(be, Ls, E, &tids, &toff, &tx, &tyb), TF_OK);
	for (int i = 0; i < R * N; i++)
		ck_assert_uint_eq(yb[i], tf_f32_to_bf16(y[i]));
	/* the same as one exl3_matmul per group */
	float *one = malloc(sizeof(float) * 3 * N);
	struct tf_tensor tx0 = T2(xb, TF_DT_BF16, 3, K), ty0 = T2(one, TF_DT_F32, 3, N);
	ck_assert_int_eq(be->ops->exl3_matmul(be, &Ls[2], &tx0, &ty0), TF_OK);
	ck_assert_int_eq(memcmp(one, y, sizeof(float) * 3 * N), 0);
	/* refused: an expert id out of range, offsets that do not cover x */
	int32_t bad_ids[4] = {2, 0, 3, 1}, bad_off[5] = {0, 3, 4, 4, 6};
	struct tf_tensor tbi = T1(bad_ids, TF_DT_I32, 4), tbo = T1(bad_off, TF_DT_I32, 5);
	ck_assert_int_eq(be->ops->exl3_matmul_experts(be, Ls, E, &tbi, &toff, &tx, &ty), TF_ERR_ARG);
	ck_assert_int_eq(be->ops->exl3_matmul_experts(be, Ls, E, &tids, &tbo, &tx, &ty), TF_ERR_ARG);
	free(one);
	free(x);
	free(xb);
	free(y);
	free(yb);
	free(want);
	for (int e = 0; e < E; e++)
		layer_free(&l[e]);
	tf_be_free(be);
}
END_TEST

Suite *suite_ops_exl3(void)
{
	Suite *s = suite_create("ops_exl3");
	TCase *tc = tcase_create("exl3");
	tcase_add_test(tc, exl3_matmul_matches_dequant);
	tcase_add_test(tc, exl3_matmul_refuses_bad_shapes);
	tcase_add_test(tc, exl3_experts_ragged_groups);
	suite_add_tcase(s, tc);
	return s;
}
