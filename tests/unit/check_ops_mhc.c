/* check_ops_mhc.c: the CPU mHC ops (mix with Sinkhorn, collapse, post) and
 * the Engram gate: hand cases and an fp64 implementation of the mix written
 * from the spec. */
#include <string.h>

#include "ops_test.h"

/* The mix in fp64 (spec §3 steps 1-3) for S streams of D values. */
static void mix_ref(const float *x, const float *fn, const float *base, const float *scale,
		    int S, int D, int iters, double *pre, double *post, double *comb)
{
	int n = S * D, M = 2 * S + S * S;
	double ms = 0, m[64];
	for (int i = 0; i < n; i++)
		ms += (double)x[i] * x[i];
	ms = 1 / sqrt(ms / n + 1e-20);
	for (int t = 0; t < M; t++) {
		double d = 0;
		for (int i = 0; i < n; i++)
			d += (double)x[i] * fn[t * n + i];
		m[t] = d * ms;
	}
	for (int k = 0; k < S; k++) {
		pre[k] = 1 / (1 + exp(-(scale[0] * m[k] + base[k]))) + 1e-6;
		post[k] = 2 / (1 + exp(-(scale[1] * m[S + k] + base[S + k])));
	}
	for (int i = 0; i < S; i++) {
		double mx = -INFINITY, s = 0;
		for (int j = 0; j < S; j++) {
			comb[i * S + j] = scale[2] * m[2 * S + i * S + j] + base[2 * S + i * S + j];
			mx = fmax(mx, comb[i * S + j]);
		}
		for (int j = 0; j < S; j++)
			s += exp(comb[i * S + j] - mx);
		for (int j = 0; j < S; j++)
			comb[i * S + j] = exp(comb[i * S + j] - mx) / s + 1e-6;
	}
	for (int it = 0; it < iters; it++) {
		for (int pass = it ? 0 : 1; pass < 2; pass++)
			for (int a = 0; a < S; a++) {
				double s = 0;
				for (int b = 0; b < S; b++)
					s += pass ? comb[b * S + a] : comb[a * S + b];
				for (int b = 0; b < S; b++)
					*(pass ? &comb[b * S + a] : &comb[a * S + b]) /= s + 1e-6;
			}
	}
}

START_TEST(mix_matches_fp64)
{
	struct tf_be *be = test_be();
	struct tf_rng r;
	tf_rng_seed(&r, 17);
	enum { R = 2, S = 4, D = 16, M = 24 };
	float *x = test_randn(&r, R * S * D, 1), *fn = test_randn(&r, M * S * D, 0.1f);
	float *base = test_randn(&r, M, 1), scale[3] = {0.5f, 0.7f, 1.3f};
	uint16_t *xb = test_bf16(x, R * S * D);
	for (int i = 0; i < R * S * D; i++)
		x[i] = tf_bf16_to_f32(xb[i]);
	float pre[R * S], post[R * S], comb[R * S * S];
	struct tf_tensor tx = T3(xb, TF_DT_BF16, R, S, D), tfn = T2(fn, TF_DT_F32, M, S * D);
	struct tf_tensor tbase = T1(base, TF_DT_F32, M), tsc = T1(scale, TF_DT_F32, 3);
	struct tf_tensor tpre = T2(pre, TF_DT_F32, R, S), tpost = T2(post, TF_DT_F32, R, S);
	struct tf_tensor tc = T3(comb, TF_DT_F32, R, S, S);
	ck_assert_int_eq(be->ops->hc_mix(be, &tx, &tfn, &tbase, &tsc, 1e-20f, 1e-6f, 20, 2.0f,
					 &tpre, &tpost, &tc), TF_OK);
	double wpre[R * S], wpost[R * S], wc[R * S * S];
	for (int row = 0; row < R; row++)
		mix_ref(x + row * S * D, fn, base, scale, S, D, 20, wpre + row * S, wpost + row * S,
			wc + row * S * S);
	ck_assert(test_worst("hc pre", pre, wpre, R * S, 1e-3) < 1e-5);
	ck_assert(test_worst("hc post", post, wpost, R * S, 1e-3) < 1e-5);
	ck_assert(test_worst("hc comb", comb, wc, R * S * S, 1e-3) < 1e-4);
	/* after the last column pass every column sums to ~1 */
	for (int j = 0; j < S; j++) {
		double s = 0;
		for (int i = 0; i < S; i++)
			s += comb[i * S + j];
		ck_assert(fabs(s - 1) < 1e-4);
	}
	free(x);
	free(fn);
	free(base);
	free(xb);
	tf_be_free(be);
}
END_TEST

START_TEST(mix_hand)
{
	struct tf_be *be = test_be();
	/* fn = 0: m = 0, so pre = sigmoid(base) + 1e-6, post = 2 sigmoid(base);
	 * comb base all equal: the uniform 1/4 matrix (up to the 1e-6 terms). */
	enum { S = 4, D = 2, M = 24 };
	uint16_t xb[S * D];
	for (int i = 0; i < S * D; i++)
		xb[i] = tf_f32_to_bf16((float)i);
	float fn[M * S * D] = {0}, base[M] = {0, 1, -1, 2, 0, 0, 0, 3}, scale[3] = {1, 1, 1};
	float pre[S], post[S], comb[S * S];
	struct tf_tensor tx = T3(xb, TF_DT_BF16, 1, S, D), tfn = T2(fn, TF_DT_F32, M, S * D);
	struct tf_tensor tbase = T1(base, TF_DT_F32, M), tsc = T1(scale, TF_DT_F32, 3);
	struct tf_tensor tpre = T2(pre, TF_DT_F32, 1, S), tpost = T2(post, TF_DT_F32, 1, S);
	struct tf_tensor tc = T3(comb, TF_DT_F32, 1, S, S);
	ck_assert_int_eq(be->ops->hc_mix(be, &tx, &tfn, &tbase, &tsc, 1e-20f, 1e-6f, 20, 2.0f,
					 &tpre, &tpost, &tc), TF_OK);
	ck_assert(fabs(pre[0] - 0.5 - 1e-6) < 1e-7);
	ck_assert(fabs(pre[3] - 1 / (1 + exp(-2))) < 1e-6);
	ck_assert(fabs(post[0] - 1) < 1e-6 && fabs(post[3] - 2 / (1 + exp(-3))) < 1e-6);
	for (int i = 0; i < S * S; i++)
		ck_assert(fabs(comb[i] - 0.25) < 1e-5);
	tf_be_free(be);
}
END_TEST

START_TEST(collapse_and_post)
{
	struct tf_be *be = test_be();
	enum { S = 2, D = 3 };
	/* X0 = [1,2,3], X1 = [10,20,30]; pre [0.5, 0.1] -> c = [1.5, 3, 4.5] */
	uint16_t xb[S * D], c[D];
	float xv[S * D] = {1, 2, 3, 10, 20, 30}, pre[S] = {0.5f, 0.1f};
	for (int i = 0; i < S * D; i++)
		xb[i] = tf_f32_to_bf16(xv[i]);
	struct tf_tensor tx = T3(xb, TF_DT_BF16, 1, S, D), tp = T2(pre, TF_DT_F32, 1, S);
	struct tf_tensor tcl = T2(c, TF_DT_BF16, 1, D);
	ck_assert_int_eq(be->ops->hc_collapse(be, &tx, &tp, &tcl), TF_OK);
	ck_assert(tf_bf16_to_f32(c[0]) == 1.5f && tf_bf16_to_f32(c[1]) == 3.0f &&
		  tf_bf16_to_f32(c[2]) == 4.5f);
	/* post: b = [1,1,1], post = [2, 0], comb [[0,1],[1,0]] swaps streams:
	 * X'0 = 2 b + X1, X'1 = X0 (in place) */
	uint16_t b[D];
	for (int i = 0; i < D; i++)
		b[i] = tf_f32_to_bf16(1);
	float post[S] = {2, 0}, comb[S * S] = {0, 1, 1, 0};
	struct tf_tensor tb = T2(b, TF_DT_BF16, 1, D), tpo = T2(post, TF_DT_F32, 1, S);
	struct tf_tensor tc = T3(comb, TF_DT_F32, 1, S, S);
	ck_assert_int_eq(be->ops->hc_post(be, &tx, &tb, &tpo, &tc, &tx), TF_OK);
	float want[S * D] = {12, 22, 32, 1, 2, 3};
	for (int i = 0; i < S * D; i++)
		ck_assert(tf_bf16_to_f32(xb[i]) == want[i]);
	tf_be_free(be);
}
END_TEST

START_TEST(engram_gate_hand)
{
	struct tf_be *be = test_be();
	/* S = 1, D = 4. h = [1,1,1,1], key = [2,2,2,2], qk = [1,1,1,1]:
	 * dot = 8 * 1 * (1/2) / 2 = 2; gate = sigmoid(sqrt 2); out = h + gate val.
	 * Row 1 is blocked: unchanged. Row 2: key = -key -> sigmoid(-sqrt 2). */
	enum { R = 3, S = 1, D = 4 };
	float xv[R * D], kvv[R * 2 * D], qk[D] = {1, 1, 1, 1};
	for (int i = 0; i < R * D; i++)
		xv[i] = 1;
	for (int row = 0; row < R; row++)
		for (int d = 0; d < D; d++) {
			kvv[row * 2 * D + d] = row == 2 ? -2 : 2;
			kvv[row * 2 * D + D + d] = 0.5f;
		}
	uint16_t *xb = test_bf16(xv, R * D), *kvb = test_bf16(kvv, R * 2 * D);
	uint8_t blocked[R] = {0, 1, 0};
	struct tf_tensor tx = T3(xb, TF_DT_BF16, R, S, D), tkv = T2(kvb, TF_DT_BF16, R, 2 * D);
	struct tf_tensor tq = T2(qk, TF_DT_F32, S, D), tbl = T1(blocked, TF_DT_U8, R);
	ck_assert_int_eq(be->ops->engram_gate(be, &tx, &tkv, &tq, &tbl, 1e-20f, 1e-6f, &tx), TF_OK);
	float g0 = (float)(1 / (1 + exp(-sqrt(2)))), g2 = (float)(1 / (1 + exp(sqrt(2))));
	ck_assert_uint_eq(xb[0], tf_f32_to_bf16(1 + g0 * 0.5f));
	ck_assert(tf_bf16_to_f32(xb[D]) == 1.0f);
	ck_assert_uint_eq(xb[2 * D], tf_f32_to_bf16(1 + g2 * 0.5f));
	free(xb);
	free(kvb);
	tf_be_free(be);
}
END_TEST

Suite *suite_ops_mhc(void)
{
	Suite *s = suite_create("ops_mhc");
	TCase *tc = tcase_create("mhc");
	tcase_add_test(tc, mix_matches_fp64);
	tcase_add_test(tc, mix_hand);
	tcase_add_test(tc, collapse_and_post);
	tcase_add_test(tc, engram_gate_hand);
	suite_add_tcase(s, tc);
	return s;
}
