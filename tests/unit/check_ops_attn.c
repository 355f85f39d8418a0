/* check_ops_attn.c: the CPU attention ops: sparse MQA with sinks, the
 * compressor, indexer scores, top-k selection and candidate blocks, on hand
 * cases and against straightforward fp64 implementations. */
#include <string.h>

#include "ops_test.h"

START_TEST(attention_hand)
{
	struct tf_be *be = test_be();
	/* D = 4, one head. Keys k0 = [2,0,0,0], k1 = [0,2,0,0]; q = [1,0,0,0]:
	 * z = [1, 0] (q.k/sqrt(4)); sink -inf: w = softmax(1, 0). */
	float q[4] = {1, 0, 0, 0}, keys[8] = {2, 0, 0, 0, 0, 2, 0, 0}, out[8];
	int32_t off[3] = {0, 2, 3}, idx[3] = {0, 1, 1};
	float sink[1] = {-INFINITY};
	float q2[8] = {1, 0, 0, 0, 1, 0, 0, 0};
	struct tf_tensor tq = T3(q2, TF_DT_F32, 2, 1, 4), tk = T2(keys, TF_DT_F32, 2, 4);
	struct tf_tensor to = T2(off, TF_DT_I32, 3, 1), ti = T1(idx, TF_DT_I32, 3);
	struct tf_tensor ts = T1(sink, TF_DT_F32, 1), tout = T3(out, TF_DT_F32, 2, 1, 4);
	ck_assert_int_eq(be->ops->attention(be, &tq, &tk, &to, &ti, &ts, &tout), TF_OK);
	double w0 = exp(1) / (exp(1) + 1), w1 = 1 / (exp(1) + 1);
	ck_assert(fabs(out[0] - 2 * w0) < 1e-6 && fabs(out[1] - 2 * w1) < 1e-6);
	ck_assert(out[2] == 0 && out[3] == 0);
	/* row 1 sees only k1: o = k1 */
	ck_assert(fabs(out[5] - 2) < 1e-6 && out[4] == 0);
	/* a sink of 0 beside one key of z = 0 halves it */
	sink[0] = 0;
	ck_assert_int_eq(be->ops->attention(be, &tq, &tk, &to, &ti, &ts, &tout), TF_OK);
	ck_assert(fabs(out[5] - 1) < 1e-6);
	/* a key index outside the table is refused */
	idx[2] = 2;
	ck_assert_int_eq(be->ops->attention(be, &tq, &tk, &to, &ti, &ts, &tout), TF_ERR_ARG);
	(void)q;
	tf_be_free(be);
}
END_TEST

START_TEST(attention_matches_fp64)
{
	struct tf_be *be = test_be();
	struct tf_rng r;
	tf_rng_seed(&r, 9);
	enum { R = 3, H = 4, D = 32, NK = 20 };
	float *q = test_randn(&r, R * H * D, 1), *k = test_randn(&r, NK * D, 1);
	float *sink = test_randn(&r, H, 1), out[R * H * D];
	uint16_t *qb = test_bf16(q, R * H * D), *kb = test_bf16(k, NK * D);
	int32_t off[R + 1] = {0, 5, 5, 17}, idx[17];
	for (int i = 0; i < 17; i++)
		idx[i] = (i * 7) % NK;
	struct tf_tensor tq = T3(qb, TF_DT_BF16, R, H, D), tk = T2(kb, TF_DT_BF16, NK, D);
	struct tf_tensor to = T1(off, TF_DT_I32, R + 1), ti = T1(idx, TF_DT_I32, 17);
	struct tf_tensor ts = T1(sink, TF_DT_F32, H), tout = T3(out, TF_DT_F32, R, H, D);
	ck_assert_int_eq(be->ops->attention(be, &tq, &tk, &to, &ti, &ts, &tout), TF_OK);
	double want[R * H * D];
	memset(want, 0, sizeof want);
	for (int row = 0; row < R; row++)
		for (int h = 0; h < H; h++) {
			double z[NK], m = sink[h], sum = 0;
			int n = off[row + 1] - off[row];
			for (int j = 0; j < n; j++) {
				double d = 0;
				for (int e = 0; e < D; e++)
					d += (double)tf_bf16_to_f32(qb[(row * H + h) * D + e]) *
					     tf_bf16_to_f32(kb[idx[off[row] + j] * D + e]);
				z[j] = d / sqrt(D);
				m = z[j] > m ? z[j] : m;
			}
			for (int j = 0; j < n; j++)
				sum += exp(z[j] - m);
			sum += exp(sink[h] - m);
			for (int j = 0; j < n; j++)
				for (int e = 0; e < D; e++)
					want[(row * H + h) * D + e] +=
						exp(z[j] - m) / sum * tf_bf16_to_f32(kb[idx[off[row] + j] * D + e]);
		}
	ck_assert(test_worst("attention", out, want, R * H * D, 1e-2) < 1e-5);
	for (int i = H * D; i < 2 * H * D; i++) /* row 1 has no keys */
		ck_assert(out[i] == 0);
	free(q);
	free(k);
	free(sink);
	free(qb);
	free(kb);
	tf_be_free(be);
}
END_TEST

START_TEST(compressor_pools)
{
	struct tf_be *be = test_be();
	/* W = 2, r = 2. Group 0: g equal -> the mean of u; group 1: g0 = ln 3
	 * above g1 -> weights 3/4, 1/4. Norm weight 1, eps 1e-20. */
	float u[2 * 2 * 2] = {1, 2, 3, 6, 4, 0, 0, 4};
	float g[2 * 2 * 2] = {0, 0, 0, 0, (float)log(3), (float)log(3), 0, 0};
	float w[2] = {1, 1}, lat[4];
	struct tf_tensor tu = T3(u, TF_DT_F32, 2, 2, 2), tg = T3(g, TF_DT_F32, 2, 2, 2);
	struct tf_tensor tw = T1(w, TF_DT_F32, 2), tl = T2(lat, TF_DT_F32, 2, 2);
	ck_assert_int_eq(be->ops->compressor(be, &tu, &tg, &tw, 1e-20f, &tl), TF_OK);
	/* pooled [2, 4] and [3, 1]; then divided by their rms */
	double r0 = sqrt((4 + 16) / 2.0), r1 = sqrt((9 + 1) / 2.0);
	ck_assert(fabs(lat[0] - 2 / r0) < 1e-6 && fabs(lat[1] - 4 / r0) < 1e-6);
	ck_assert(fabs(lat[2] - 3 / r1) < 1e-6 && fabs(lat[3] - 1 / r1) < 1e-6);
	/* r = 1: pooled = u */
	struct tf_tensor tu1 = T3(u, TF_DT_F32, 2, 1, 2);
	ck_assert_int_eq(be->ops->compressor(be, &tu1, NULL, &tw, 1e-20f, &tl), TF_OK);
	ck_assert(fabs(lat[0] - 1 / sqrt(2.5)) < 1e-6);
	tf_be_free(be);
}
END_TEST

START_TEST(index_score_hand)
{
	struct tf_be *be = test_be();
	/* Hi = 2 heads, Di = 4; keys: 3 rows. iq h0 = [2,0,0,0], h1 = [0,2,0,0];
	 * iw = [1, 4]. Key j0 = [1,1,0,0]: dots 2/2 = 1 and 1 -> 1/sqrt2 + 4/sqrt2;
	 * j1 = [-1,1,0,0]: relu drops h0 -> 4/sqrt2; j2 invisible. */
	float iq[8] = {2, 0, 0, 0, 0, 2, 0, 0}, iw[2] = {1, 4};
	float keys[12] = {1, 1, 0, 0, -1, 1, 0, 0, 5, 5, 5, 5}, s[3];
	int32_t nv[1] = {2};
	struct tf_tensor tq = T3(iq, TF_DT_F32, 1, 2, 4), tw = T2(iw, TF_DT_F32, 1, 2);
	struct tf_tensor tk = T2(keys, TF_DT_F32, 3, 4), tn = T1(nv, TF_DT_I32, 1);
	struct tf_tensor ts = T2(s, TF_DT_F32, 1, 3);
	ck_assert_int_eq(be->ops->index_score(be, &tq, &tw, &tk, &tn, NULL, 0, &ts), TF_OK);
	ck_assert(fabs(s[0] - 5 / sqrt(2)) < 1e-6);
	ck_assert(fabs(s[1] - 4 / sqrt(2)) < 1e-6);
	ck_assert(s[2] == -INFINITY);
	/* a block mask with bs 1 marking only row 1 */
	uint8_t blk[3] = {0, 1, 1};
	struct tf_tensor tb = T2(blk, TF_DT_U8, 1, 3);
	ck_assert_int_eq(be->ops->index_score(be, &tq, &tw, &tk, &tn, &tb, 1, &ts), TF_OK);
	ck_assert(s[0] == -INFINITY && fabs(s[1] - 4 / sqrt(2)) < 1e-6);
	tf_be_free(be);
}
END_TEST

START_TEST(topk_ties_and_small_rows)
{
	struct tf_be *be = test_be();
	/* N = 8, k = 3. Row 0 sees 8: scores with ties -> the 3 largest, ties
	 * to the smaller j, listed ascending. Row 1 sees 2 <= k: all of them. */
	float s[16] = {1, 5, 3, 5, 3, 0, 5, 2, 9, 9, 9, 9, 9, 9, 9, 9};
	int32_t nv[2] = {8, 2}, sel[6], nsel[2];
	struct tf_tensor ts = T2(s, TF_DT_F32, 2, 8), tn = T1(nv, TF_DT_I32, 2);
	struct tf_tensor tsel = T2(sel, TF_DT_I32, 2, 3), tns = T1(nsel, TF_DT_I32, 2);
	ck_assert_int_eq(be->ops->index_topk(be, &ts, &tn, 3, &tsel, &tns), TF_OK);
	ck_assert_int_eq(nsel[0], 3);
	ck_assert_int_eq(sel[0], 1);
	ck_assert_int_eq(sel[1], 3);
	ck_assert_int_eq(sel[2], 6);
	ck_assert_int_eq(nsel[1], 2);
	ck_assert_int_eq(sel[3], 0);
	ck_assert_int_eq(sel[4], 1);
	ck_assert_int_eq(sel[5], -1);
	/* ties among the cut: [5,3,3,3] k 2 -> 0 and the first 3 (j = 1) */
	float t[4] = {5, 3, 3, 3};
	int32_t nv1[1] = {4};
	struct tf_tensor tt = T2(t, TF_DT_F32, 1, 4), tn1 = T1(nv1, TF_DT_I32, 1);
	struct tf_tensor tsel1 = T2(sel, TF_DT_I32, 1, 2), tns1 = T1(nsel, TF_DT_I32, 1);
	ck_assert_int_eq(be->ops->index_topk(be, &tt, &tn1, 2, &tsel1, &tns1), TF_OK);
	ck_assert_int_eq(sel[0], 0);
	ck_assert_int_eq(sel[1], 1);
	tf_be_free(be);
}
END_TEST

START_TEST(candidate_blocks_hand)
{
	struct tf_be *be = test_be();
	/* bs 2, N = 10 (5 blocks), n_vis 9: blocks 0..4 visible, block 4 (row 8
	 * only) is the newest and pinned. Block maxima: b0 = 1, b1 = 7, b2 = 7,
	 * b3 = 2. top 3: b4 (pinned), b1 and b2 (7 ties, smaller first). */
	float s[10] = {1, 0, 7, 3, 7, 6, 2, -1, -5, 100};
	int32_t nv[1] = {9};
	uint8_t blk[5];
	struct tf_tensor ts = T2(s, TF_DT_F32, 1, 10), tn = T1(nv, TF_DT_I32, 1);
	struct tf_tensor tb = T2(blk, TF_DT_U8, 1, 5);
	ck_assert_int_eq(be->ops->candidate_blocks(be, &ts, &tn, 2, 3, &tb), TF_OK);
	uint8_t want[5] = {0, 1, 1, 0, 1};
	ck_assert(!memcmp(blk, want, 5));
	/* top 2: b4 and b1 (the tie with b2 goes to the smaller) */
	ck_assert_int_eq(be->ops->candidate_blocks(be, &ts, &tn, 2, 2, &tb), TF_OK);
	uint8_t want2[5] = {0, 1, 0, 0, 1};
	ck_assert(!memcmp(blk, want2, 5));
	tf_be_free(be);
}
END_TEST

Suite *suite_ops_attn(void)
{
	Suite *s = suite_create("ops_attn");
	TCase *tc = tcase_create("attn");
	tcase_add_test(tc, attention_hand);
	tcase_add_test(tc, attention_matches_fp64);
	tcase_add_test(tc, compressor_pools);
	tcase_add_test(tc, index_score_hand);
	tcase_add_test(tc, topk_ties_and_small_rows);
	tcase_add_test(tc, candidate_blocks_hand);
	suite_add_tcase(s, tc);
	return s;
}
