/* check_ops_moe.c: the CPU MoE ops: routing, clamped SwiGLU and the
 * combine, on hand-checked cases. */
#include <string.h>

#include "ops_test.h"

static double sqsp(double x)
{
	return sqrt(log1p(exp(x)));
}

START_TEST(route_bias_selects_only)
{
	struct tf_be *be = test_be();
	/* E = 5, k = 2. Logits favour 0 and 1, but the bias lifts 3 past 1;
	 * the weights use the unbiased scores. Experts 2 and 4 tie with bias:
	 * row 1 checks ties go to the smaller id. */
	float lg[10] = {3, 2, 0, 1, 0, 0, 0, 1, 0, 1};
	float bias[5] = {0, 0, 0, 1, 0}, w[4];
	int32_t ids[4];
	struct tf_tensor tl = T2(lg, TF_DT_F32, 2, 5), tb = T1(bias, TF_DT_F32, 5);
	struct tf_tensor ti = T2(ids, TF_DT_I32, 2, 2), tw = T2(w, TF_DT_F32, 2, 2);
	ck_assert_int_eq(be->ops->moe_route(be, &tl, &tb, 2, 1.5f, &ti, &tw), TF_OK);
	ck_assert_int_eq(ids[0], 3); /* sqsp(1) + 1 = 2.13 > sqsp(3) = 1.75 */
	ck_assert_int_eq(ids[1], 0);
	double s3 = sqsp(1), s0 = sqsp(3);
	ck_assert(fabs(w[0] - 1.5 * s3 / (s3 + s0)) < 1e-6);
	ck_assert(fabs(w[1] - 1.5 * s0 / (s3 + s0)) < 1e-6);
	/* row 1: 3 has bias 1 (first), then 2 and 4 tie at sqsp(1): 2 wins */
	ck_assert_int_eq(ids[2], 3);
	ck_assert_int_eq(ids[3], 2);
	/* large logits stay finite (softplus(x) = x past 20) */
	float big[5] = {100, 90, 0, 0, 0};
	struct tf_tensor tbig = T2(big, TF_DT_F32, 1, 5);
	struct tf_tensor ti1 = T2(ids, TF_DT_I32, 1, 2), tw1 = T2(w, TF_DT_F32, 1, 2);
	ck_assert_int_eq(be->ops->moe_route(be, &tbig, &tb, 2, 1.0f, &ti1, &tw1), TF_OK);
	ck_assert_int_eq(ids[0], 0);
	ck_assert(fabs(w[0] - 10 / (10 + sqrt(90))) < 1e-6);
	tf_be_free(be);
}
END_TEST

START_TEST(swiglu_clamps)
{
	struct tf_be *be = test_be();
	float g[4] = {0, 2, 30, -3}, u[4] = {5, 1, 20, -50}, a[4];
	struct tf_tensor tg = T1(g, TF_DT_F32, 4), tu = T1(u, TF_DT_F32, 4), ta = T1(a, TF_DT_F32, 4);
	ck_assert_int_eq(be->ops->swiglu(be, &tg, &tu, 10, &ta), TF_OK);
	ck_assert(a[0] == 0);
	ck_assert(fabs(a[1] - 2 / (1 + exp(-2))) < 1e-6);
	ck_assert(fabs(a[2] - 10 / (1 + exp(-10)) * 10) < 1e-4); /* both clamped */
	ck_assert(fabs(a[3] - (-3 / (1 + exp(3))) * -10) < 1e-5); /* gate below: not clamped */
	tf_be_free(be);
}
END_TEST

START_TEST(combine_route_order)
{
	struct tf_be *be = test_be();
	/* R = 1, k = 2, D = 2: 0.5*[2,4] + 0.25*[4,8] + shared [1, -1] */
	float y[4] = {2, 4, 4, 8}, w[2] = {0.5f, 0.25f}, sh[2] = {1, -1};
	uint16_t br[2];
	struct tf_tensor ty = T3(y, TF_DT_F32, 1, 2, 2), tw = T2(w, TF_DT_F32, 1, 2);
	struct tf_tensor ts = T2(sh, TF_DT_F32, 1, 2), tb = T2(br, TF_DT_BF16, 1, 2);
	ck_assert_int_eq(be->ops->moe_combine(be, &ty, &tw, &ts, &tb), TF_OK);
	ck_assert(tf_bf16_to_f32(br[0]) == 3 && tf_bf16_to_f32(br[1]) == 3);
	ck_assert_int_eq(be->ops->moe_combine(be, &ty, &tw, NULL, &tb), TF_OK);
	ck_assert(tf_bf16_to_f32(br[0]) == 2 && tf_bf16_to_f32(br[1]) == 4);
	tf_be_free(be);
}
END_TEST

Suite *suite_ops_moe(void)
{
	Suite *s = suite_create("ops_moe");
	TCase *tc = tcase_create("moe");
	tcase_add_test(tc, route_bias_selects_only);
	tcase_add_test(tc, swiglu_clamps);
	tcase_add_test(tc, combine_route_order);
	suite_add_tcase(s, tc);
	return s;
}
