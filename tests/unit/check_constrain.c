/* check_constrain.c: a lane's grammar applied to rows (engine/constrain.h):
 * disallowed ids leave the row, end-of-sequence stays only at a whole
 * output (and is all that is left once nothing may follow), the state
 * moves with each drawn id, reasoning runs free until grammar_after, and a
 * state no token continues fails the row. */
#include <check.h>

#include <math.h>
#include <string.h>

#include "engine/constrain.h"
#include "grammar/grammar.h"

#define N 260 /* 256 bytes, 256 end-of-sequence, 257 </think>, 2 holes */
#define EOS 256
#define THINK_END 257

static const uint8_t *bytes(void *ctx, uint32_t id, size_t *len)
{
	static uint8_t b[256];
	if (id >= 256)
		return NULL;
	b[id] = (uint8_t)id;
	*len = 1;
	return &b[id];
}

static void row(float *lg)
{
	for (int i = 0; i < N; i++)
		lg[i] = (float)(i % 7);
}

static int finite_ids(const float *lg, int32_t *first)
{
	int n = 0;
	*first = -1;
	for (int i = 0; i < N; i++)
		if (isfinite(lg[i])) {
			if (*first < 0)
				*first = i;
			n++;
		}
	return n;
}

START_TEST(masks_and_moves)
{
	struct tf_gvocab *v;
	ck_assert_int_eq(tf_gvocab_new(N, bytes, NULL, &v), TF_OK);
	const char *choices[] = {"ab", "abc"};
	struct tf_grammar *g;
	ck_assert_int_eq(tf_grammar_choice(v, choices, 2, &g), TF_OK);
	struct tf_engine_params p = {.max_tokens = 8, .grammar = g, .grammar_after = -1};
	struct tf_lane lane = {.params = &p};
	tf_lane_constrain_init(&lane);
	float lg[N];
	int32_t first;
	row(lg);
	ck_assert_int_eq(tf_lane_constrain(&lane, lg, N, EOS), TF_OK);
	ck_assert_int_eq(finite_ids(lg, &first), 1);
	ck_assert_int_eq(first, 'a');
	tf_lane_constrain_step(&lane, 'a');
	tf_lane_constrain_step(&lane, 'b');
	row(lg);
	ck_assert_int_eq(tf_lane_constrain(&lane, lg, N, EOS), TF_OK);
	ck_assert_int_eq(finite_ids(lg, &first), 2); /* 'c' or the end */
	ck_assert(isfinite(lg['c']) && isfinite(lg[EOS]));
	ck_assert_float_eq(lg[EOS], (float)(EOS % 7)); /* the model's own logit */
	tf_lane_constrain_step(&lane, 'c');
	row(lg);
	ck_assert_int_eq(tf_lane_constrain(&lane, lg, N, EOS), TF_OK);
	ck_assert_int_eq(finite_ids(lg, &first), 1);
	ck_assert_int_eq(first, EOS);
	/* without an end-of-sequence id a whole output that nothing may follow fails */
	row(lg);
	ck_assert_int_eq(tf_lane_constrain(&lane, lg, N, -1), TF_ERR_RANGE);
	tf_grammar_free(g);
	tf_gvocab_free(v);
}
END_TEST

START_TEST(reasoning_first)
{
	struct tf_gvocab *v;
	ck_assert_int_eq(tf_gvocab_new(N, bytes, NULL, &v), TF_OK);
	struct tf_grammar *g;
	ck_assert_int_eq(tf_grammar_regex(v, "[0-9]", 5, &g), TF_OK);
	struct tf_engine_params p = {.max_tokens = 8, .grammar = g, .grammar_after = THINK_END};
	struct tf_lane lane = {.params = &p};
	tf_lane_constrain_init(&lane);
	float lg[N];
	int32_t first;
	row(lg);
	ck_assert_int_eq(tf_lane_constrain(&lane, lg, N, EOS), TF_OK);
	ck_assert_int_eq(finite_ids(lg, &first), N); /* free */
	tf_lane_constrain_step(&lane, 'x');
	tf_lane_constrain_step(&lane, THINK_END);
	row(lg);
	ck_assert_int_eq(tf_lane_constrain(&lane, lg, N, EOS), TF_OK);
	ck_assert_int_eq(finite_ids(lg, &first), 10);
	ck_assert_int_eq(first, '0');
	tf_grammar_free(g);
	tf_gvocab_free(v);
}
END_TEST

Suite *suite_constrain(void)
{
	Suite *s = suite_create("constrain");
	TCase *tc = tcase_create("constrain");
	tcase_add_test(tc, masks_and_moves);
	tcase_add_test(tc, reasoning_first);
	suite_add_tcase(s, tc);
	return s;
}
