/* check_ops_dense.c: the CPU backend's dense ops: convert, linear, embed,
 * rmsnorm, rope (with the YaRN frequencies), on hand-checked cases and
 * against straightforward fp64 implementations. */
#include <string.h>

#include "ops_test.h"

START_TEST(convert_rounds_to_nearest_even)
{
	struct tf_be *be = test_be();
	/* bf16 keeps 8 significant bits: 1 + 2^-8 is a tie (to even 1), 1 + 3*2^-8
	 * a tie to 1 + 2^-6... */
	float in[4] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-9f, -2.5f};
	uint16_t out[4];
	struct tf_tensor x = T1(in, TF_DT_F32, 4), y = T1(out, TF_DT_BF16, 4);
	ck_assert_int_eq(be->ops->convert(be, &x, &y), TF_OK);
	ck_assert(tf_bf16_to_f32(out[0]) == 1.0f);
	ck_assert(tf_bf16_to_f32(out[1]) == 1.0f + 0x1p-6f); /* 1.0000011 tie -> ...0100 */
	ck_assert(tf_bf16_to_f32(out[2]) == 1.0f + 0x1p-7f);
	ck_assert(tf_bf16_to_f32(out[3]) == -2.5f);
	struct tf_tensor bad = T1(out, TF_DT_I32, 2);
	ck_assert_int_eq(be->ops->convert(be, &x, &bad), TF_ERR_ARG);
	tf_be_free(be);
}
END_TEST

START_TEST(linear_matches_fp64)
{
	struct tf_be *be = test_be();
	struct tf_rng r;
	tf_rng_seed(&r, 1);
	enum { R = 3, K = 67, N = 41 };
	float *x = test_randn(&r, R * K, 1), *w = test_randn(&r, N * K, 0.2f);
	uint16_t *xb = test_bf16(x, R * K), *wh = malloc(N * K * 2);
	for (int i = 0; i < N * K; i++)
		wh[i] = tf_f32_to_f16(w[i]);
	float y[R * N];
	uint16_t yb[R * N];
	double want[R * N];
	for (int i = 0; i < R; i++)
		for (int n = 0; n < N; n++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				s += (double)tf_bf16_to_f32(xb[i * K + k]) * tf_f16_to_f32(wh[n * K + k]);
			want[i * N + n] = s;
		}
	struct tf_tensor tx = T2(xb, TF_DT_BF16, R, K), tw = T2(wh, TF_DT_F16, N, K);
	struct tf_tensor ty = T2(y, TF_DT_F32, R, N), tyb = T2(yb, TF_DT_BF16, R, N);
	ck_assert_int_eq(be->ops->linear(be, &tx, &tw, &ty), TF_OK);
	ck_assert(test_worst("linear f32", y, want, R * N, 1e-3) < 1e-5);
	ck_assert_int_eq(be->ops->linear(be, &tx, &tw, &tyb), TF_OK);
	for (int i = 0; i < R * N; i++) /* bf16 output = the f32 result rounded once */
		ck_assert_uint_eq(yb[i], tf_f32_to_bf16(y[i]));
	struct tf_tensor short_w = T2(wh, TF_DT_F16, N, K - 1);
	ck_assert_int_eq(be->ops->linear(be, &tx, &short_w, &ty), TF_ERR_ARG);
	free(x);
	free(w);
	free(xb);
	free(wh);
	tf_be_free(be);
}
END_TEST

START_TEST(linear_f32_weights_threads)
{
	/* f32 weights take the direct path; more columns than one chunk per
	 * worker; every thread count gives the same bits */
	struct tf_rng r;
	tf_rng_seed(&r, 2);
	enum { R = 2, K = 33, N = 100 };
	float *x = test_randn(&r, R * K, 1), *w = test_randn(&r, N * K, 1);
	float y1[R * N], y4[R * N];
	double want[R * N];
	for (int i = 0; i < R; i++)
		for (int n = 0; n < N; n++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				s += (double)x[i * K + k] * w[n * K + k];
			want[i * N + n] = s;
		}
	struct tf_tensor tx = T2(x, TF_DT_F32, R, K), tw = T2(w, TF_DT_F32, N, K);
	struct tf_tensor ty1 = T2(y1, TF_DT_F32, R, N), ty4 = T2(y4, TF_DT_F32, R, N);
	struct tf_be *b1, *b4;
	ck_assert_int_eq(tf_cpu_be_new(1, &b1), TF_OK);
	ck_assert_int_eq(tf_cpu_be_new(4, &b4), TF_OK);
	ck_assert_int_eq(b1->ops->linear(b1, &tx, &tw, &ty1), TF_OK);
	ck_assert_int_eq(b4->ops->linear(b4, &tx, &tw, &ty4), TF_OK);
	ck_assert(!memcmp(y1, y4, sizeof y1));
	ck_assert(test_worst("linear f32 weights", y1, want, R * N, 1.0) < 1e-5);
	free(x);
	free(w);
	tf_be_free(b1);
	tf_be_free(b4);
}
END_TEST

START_TEST(embed_slice)
{
	struct tf_be *be = test_be();
	uint16_t tab[3 * 2] = {1, 2, 3, 4, 5, 6}; /* ids 10..12 of a split vocab */
	int32_t ids[3] = {11, 9, 12};
	uint16_t out[3 * 2 * 2];
	struct tf_tensor tt = T2(tab, TF_DT_BF16, 3, 2), ti = T1(ids, TF_DT_I32, 3);
	struct tf_tensor to = T3(out, TF_DT_BF16, 3, 2, 2);
	ck_assert_int_eq(be->ops->embed(be, &tt, 10, &ti, &to), TF_OK);
	uint16_t want[12] = {3, 4, 3, 4, 0, 0, 0, 0, 5, 6, 5, 6};
	ck_assert(!memcmp(out, want, sizeof want));
	tf_be_free(be);
}
END_TEST

START_TEST(rmsnorm_hand)
{
	struct tf_be *be = test_be();
	/* [3, 4]: mean square 12.5, scale 1/sqrt(12.5); w = [1, 2] */
	float x[2] = {3, 4}, w[2] = {1, 2}, y[2];
	uint16_t yb[2];
	struct tf_tensor tx = T2(x, TF_DT_F32, 1, 2), tw = T1(w, TF_DT_F32, 2);
	struct tf_tensor ty = T2(y, TF_DT_F32, 1, 2), tyb = T2(yb, TF_DT_BF16, 1, 2);
	ck_assert_int_eq(be->ops->rmsnorm(be, &tx, &tw, 1e-20f, &ty), TF_OK);
	ck_assert(fabs(y[0] - 3 / sqrt(12.5)) < 1e-6 && fabs(y[1] - 8 / sqrt(12.5)) < 1e-6);
	ck_assert_int_eq(be->ops->rmsnorm(be, &tx, &tw, 1e-20f, &tyb), TF_OK);
	ck_assert_uint_eq(yb[0], tf_f32_to_bf16(y[0]));
	ck_assert_uint_eq(yb[1], tf_f32_to_bf16(y[1]));
	/* all zeros with eps 1e-20: finite zeros, no NaN */
	float z[2] = {0, 0};
	struct tf_tensor tz = T2(z, TF_DT_F32, 1, 2);
	ck_assert_int_eq(be->ops->rmsnorm(be, &tz, &tw, 1e-20f, &ty), TF_OK);
	ck_assert(y[0] == 0 && y[1] == 0);
	tf_be_free(be);
}
END_TEST

START_TEST(rope_freqs)
{
	struct tf_rope_freqs rf;
	tf_rope_freqs_plain(&rf, 64, 10000);
	ck_assert(rf.f[0] == 1.0);
	ck_assert(fabs(rf.f[16] - 0.01) < 1e-15); /* 1e4^(-32/64) */
	/* spec §0: lo = 15, hi = 25 for the release; ramp (i-15)/10 */
	tf_rope_freqs_yarn(&rf, 64, 160000, 16, 65536, 32, 1);
	for (int i = 0; i < 32; i++) {
		double b = pow(160000, -i / 32.0);
		double ramp = i <= 15 ? 0 : i >= 25 ? 1 : (i - 15) / 10.0;
		double want = b * (1 - ramp) + b / 16 * ramp;
		ck_assert_msg(fabs(rf.f[i] - want) <= 1e-15 * want, "f[%d] %.17g want %.17g", i,
			      rf.f[i], want);
	}
}
END_TEST

START_TEST(rope_rotates_tail_pairs)
{
	struct tf_be *be = test_be();
	/* n = 6, 4 rotated dims (pairs (2,3) and (4,5)), f = [1, 0.5], pos 2:
	 * angles 2 and 1 radians; dims 0..1 untouched. */
	struct tf_rope_freqs rf = {.dim = 4, .f = {1.0, 0.5}};
	float x[6] = {7, 8, 1, 0, 0, 1}, y[6], back[6];
	int32_t pos[1] = {2};
	struct tf_tensor tx = T2(x, TF_DT_F32, 1, 6), tp = T1(pos, TF_DT_I32, 1);
	struct tf_tensor ty = T2(y, TF_DT_F32, 1, 6), tb = T2(back, TF_DT_F32, 1, 6);
	ck_assert_int_eq(be->ops->rope(be, &tx, &tp, &rf, 0, &ty), TF_OK);
	ck_assert(y[0] == 7 && y[1] == 8);
	ck_assert(fabs(y[2] - cos(2.0)) < 1e-6 && fabs(y[3] - sin(2.0)) < 1e-6);
	ck_assert(fabs(y[4] + sin(1.0)) < 1e-6 && fabs(y[5] - cos(1.0)) < 1e-6);
	ck_assert_int_eq(be->ops->rope(be, &ty, &tp, &rf, 1, &tb), TF_OK);
	for (int i = 0; i < 6; i++)
		ck_assert(fabs(back[i] - x[i]) < 1e-6);
	/* heads: [R=2, H=3, 6], each row at its own position, bf16 out */
	struct tf_rng r;
	tf_rng_seed(&r, 4);
	float *q = test_randn(&r, 36, 1);
	uint16_t qb[36];
	int32_t pos2[2] = {5, 100000};
	struct tf_tensor tq = T3(q, TF_DT_F32, 2, 3, 6), tp2 = T1(pos2, TF_DT_I32, 2);
	struct tf_tensor tqb = T3(qb, TF_DT_BF16, 2, 3, 6);
	ck_assert_int_eq(be->ops->rope(be, &tq, &tp2, &rf, 0, &tqb), TF_OK);
	for (int row = 0; row < 2; row++)
		for (int h = 0; h < 3; h++)
			for (int i = 0; i < 2; i++) {
				const float *v = q + (row * 3 + h) * 6 + 2 + 2 * i;
				double a = (double)pos2[row] * rf.f[i];
				float c = (float)cos(a), s = (float)sin(a);
				float w0 = v[0] * c - v[1] * s, w1 = v[0] * s + v[1] * c;
				const uint16_t *o = qb + (row * 3 + h) * 6 + 2 + 2 * i;
				ck_assert_uint_eq(o[0], tf_f32_to_bf16(w0));
				ck_assert_uint_eq(o[1], tf_f32_to_bf16(w1));
			}
	/* bf16 in place: the same bits as from the f32 copy of the input */
	uint16_t *ib = test_bf16(q, 36), ob[36];
	float qf[36];
	for (int i = 0; i < 36; i++)
		qf[i] = tf_bf16_to_f32(ib[i]);
	struct tf_tensor tib = T3(ib, TF_DT_BF16, 2, 3, 6), tqf = T3(qf, TF_DT_F32, 2, 3, 6);
	struct tf_tensor tob = T3(ob, TF_DT_BF16, 2, 3, 6);
	ck_assert_int_eq(be->ops->rope(be, &tqf, &tp2, &rf, 0, &tob), TF_OK);
	ck_assert_int_eq(be->ops->rope(be, &tib, &tp2, &rf, 0, &tib), TF_OK);
	ck_assert(!memcmp(ib, ob, sizeof ob));
	free(ib);
	free(q);
	tf_be_free(be);
}
END_TEST

Suite *suite_ops_dense(void)
{
	Suite *s = suite_create("ops_dense");
	TCase *tc = tcase_create("dense");
	tcase_add_test(tc, convert_rounds_to_nearest_even);
	tcase_add_test(tc, linear_matches_fp64);
	tcase_add_test(tc, linear_f32_weights_threads);
	tcase_add_test(tc, embed_slice);
	tcase_add_test(tc, rmsnorm_hand);
	tcase_add_test(tc, rope_freqs);
	tcase_add_test(tc, rope_rotates_tail_pairs);
	suite_add_tcase(s, tc);
	return s;
}
