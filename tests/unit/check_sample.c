/* check_sample.c: keyed sampling: the seed and the keyed uniform against
 * values computed independently (Python's hashlib and integers), hand-
 * checked rows, batched == alone, and every record of the reference's
 * goldens (tests/data/dsv41/sampling.jsonl). */
#include <check.h>

#include "fixtures.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/file.h"
#include "compute/ops.h"
#include "compute/sample.h"

START_TEST(seed_and_uniform)
{
	int32_t ids[] = {1, 2, 3};
	/* sha256("1,2,3|0")[0:8] little-endian, low 63 bits (Python hashlib) */
	ck_assert_uint_eq(tf_sample_seed(ids, 3, 0), UINT64_C(0x218f69c8783b71c8));
	int32_t zero = 0;
	ck_assert_uint_eq(tf_sample_seed(&zero, 1, 7), UINT64_C(0x49471e8adff4ac43));
	/* splitmix64 chain in Python integers */
	ck_assert(tf_sample_uniform(7, 11, 13) == 0.9986076825175214);
	ck_assert(tf_sample_uniform(0, 0, 0) == 0.20310281705476102);
	ck_assert(tf_sample_uniform((UINT64_C(1) << 63) + 5, 123456, 129279) == 0.11663079960443284);
}
END_TEST

START_TEST(pairwise_order)
{
	/* n = 9: eight lanes summed as a tree, then the tail; 1e16 + 1 rounds
	 * back to 1e16, so the tree gives 1 where a running sum gives 2. */
	double a[9] = {1e16, 1, -1e16, 1, 0, 0, 0, 0, 1};
	ck_assert(tf_sample_pairwise_sum(a, 9) == 1.0);
	ck_assert(tf_sample_pairwise_sum(a, 4) == 1.0); /* n < 8: in order: 1e16, 0, 1 */
	/* n = 136 splits at 64: the halves are summed apart */
	double b[136] = {0};
	b[0] = 1e16;
	b[64] = 1;
	b[65] = 1;
	/* left = 1e16, right = 2, total 1e16 + 2 (exact); in order it would be
	 * 1e16 + 1 -> 1e16, + 1 -> 1e16 */
	ck_assert(tf_sample_pairwise_sum(b, 136) == 1e16 + 2);
}
END_TEST

START_TEST(greedy_and_hand_rows)
{
	struct tf_sampler *s;
	ck_assert_int_eq(tf_sampler_new(16, &s), TF_OK);
	float row[5] = {1.0f, 3.0f, -0.0f, 3.0f, 0.0f};
	ck_assert_int_eq(tf_sample_row(s, row, 5, 0, NULL), 1); /* tie to the lower id */
	struct tf_sample_params p = {.seed = 5, .temperature = 0, .top_k = 0, .top_p = 1};
	ck_assert_int_eq(tf_sample_row(s, row, 5, 9, &p), 1);
	/* top_k 1 always takes the best */
	p.temperature = 1.0;
	p.top_k = 1;
	for (uint64_t pos = 0; pos < 50; pos++)
		ck_assert_int_eq(tf_sample_row(s, row, 5, pos, &p), 1);
	/* a dominant logit with top_p 0.5: only it is kept */
	float peak[4] = {0, 10, 0, 0};
	p.top_k = 0;
	p.top_p = 0.5;
	for (uint64_t pos = 0; pos < 50; pos++)
		ck_assert_int_eq(tf_sample_row(s, peak, 4, pos, &p), 1);
	/* min_p 0.5 on logits [ln 1, ln 0.6, ln 0.4]: 0.4 < 0.5 is cut */
	float three[3] = {0.0f, (float)log(0.6), (float)log(0.4)};
	p.top_p = 1;
	p.min_p = 0.5;
	int seen[3] = {0};
	for (uint64_t pos = 0; pos < 400; pos++)
		seen[tf_sample_row(s, three, 3, pos, &p)]++;
	ck_assert_int_eq(seen[2], 0);
	ck_assert(seen[0] > 150 && seen[1] > 100);
	/* without min_p the frequencies follow the softmax (Gumbel max) */
	p.min_p = 0;
	memset(seen, 0, sizeof seen);
	for (uint64_t pos = 0; pos < 4000; pos++)
		seen[tf_sample_row(s, three, 3, pos, &p)]++;
	ck_assert(fabs(seen[0] / 4000.0 - 0.5) < 0.03);
	ck_assert(fabs(seen[1] / 4000.0 - 0.3) < 0.03);
	ck_assert(fabs(seen[2] / 4000.0 - 0.2) < 0.03);
	/* the draw is a function of (seed, position, id): the same again */
	for (uint64_t pos = 0; pos < 100; pos++)
		ck_assert_int_eq(tf_sample_row(s, three, 3, pos, &p),
				 tf_sample_row(s, three, 3, pos, &p));
	/* logprobs: ln(0.5), ln(0.3), ln(0.2) */
	float lp, top_lp[3];
	int32_t top_ids[3];
	float probs[3] = {(float)log(0.5), (float)log(0.3), (float)log(0.2)};
	tf_sample_logprobs(s, probs, 3, 2, 3, &lp, top_ids, top_lp);
	ck_assert(fabs(lp - log(0.2)) < 1e-6);
	ck_assert_int_eq(top_ids[0], 0);
	ck_assert_int_eq(top_ids[1], 1);
	ck_assert_int_eq(top_ids[2], 2);
	ck_assert(fabs(top_lp[1] - log(0.3)) < 1e-6);
	tf_sampler_free(s);
}
END_TEST

START_TEST(batched_equals_alone)
{
	enum { R = 6, V = 3000 };
	float *logits = malloc(sizeof(float) * R * V);
	for (int i = 0; i < R * V; i++)
		logits[i] = (float)(sin(i * 0.731) * 3 + (i % V == 77 ? 4 : 0));
	struct tf_sample_params p[R] = {
		{.seed = 7, .temperature = 0.7, .top_p = 0.9},
		{.seed = 9, .temperature = 1.0, .top_k = 40, .top_p = 0.95, .min_p = 0.05},
		{.seed = 3, .temperature = 1.3, .top_p = 1.0},
		{.seed = UINT64_C(1) << 63 | 5, .temperature = 0.6, .top_p = 0.8},
		{.seed = 1, .temperature = 0},
		{.seed = 2, .temperature = 1.0, .top_k = 1},
	};
	int64_t pos[R] = {100, 101, 102, 103, 104, 105};
	int32_t tok[R];
	struct tf_be *be;
	ck_assert_int_eq(tf_cpu_be_new(3, &be), TF_OK);
	struct tf_tensor t = tf_tensor_make(logits, TF_DT_F32, 2, (int64_t)R, (int64_t)V);
	ck_assert_int_eq(be->ops->sample(be, &t, p, pos, tok), TF_OK);
	struct tf_sampler *s;
	ck_assert_int_eq(tf_sampler_new(V, &s), TF_OK);
	for (int r = 0; r < R; r++)
		ck_assert_int_eq(tok[r], tf_sample_row(s, logits + r * V, V, (uint64_t)pos[r], &p[r]));
	tf_sampler_free(s);
	tf_be_free(be);
	free(logits);
}
END_TEST

/* The nucleus path from candidates and rank statistics picks what the whole
 * row picks whenever it decides (random rows, one and two ranks). */
START_TEST(nucleus_equals_whole_row)
{
	enum { V = 2048, K = 64 };
	struct tf_sampler *s, *one;
	ck_assert_int_eq(tf_sampler_new(V, &s), TF_OK);
	ck_assert_int_eq(tf_sampler_new(V, &one), TF_OK);
	float lg[V], cv[V];
	int32_t ci[V], top[K];
	float tlp[K];
	int decided = 0, fell = 0;
	for (int trial = 0; trial < 200; trial++) {
		double spread = trial % 3 == 0 ? 0.3 : 2.5;
		for (int i = 0; i < V; i++)
			lg[i] = tf_round_bf16((float)(sin(i * 1.7 + trial * 0.31) * spread * 3 +
						      (i % 97 == trial % 97 ? 5 : 0)));
		struct tf_sample_params p = {.seed = (uint64_t)trial * 7919, .temperature = 0.5 + trial % 4 * 0.3,
					     .top_p = trial % 2 ? 0.8 : 0.95,
					     .min_p = trial % 5 == 0 ? 0.05 : 0};
		int world = 1 + trial % 2, part = V / world;
		struct tf_sample_stats st[2];
		size_t n = 0;
		for (int w = 0; w < world; w++) {
			tf_sample_stats(lg + w * part, (size_t)part, p.temperature, &st[w]);
			tf_sample_logprobs(one, lg + w * part, (size_t)part, -1, K, NULL, top, tlp);
			for (int i = 0; i < K; i++) {
				cv[n] = lg[w * part + top[i]];
				ci[n++] = w * part + top[i];
			}
		}
		int32_t tok;
		uint64_t pos = 1000 + (uint64_t)trial;
		if (tf_sample_nucleus(s, cv, ci, n, K, st, world, pos, &p, &tok)) {
			decided++;
			ck_assert_int_eq(tok, tf_sample_row(s, lg, V, pos, &p));
		} else {
			fell++;
		}
	}
	ck_assert_int_gt(decided, 50);
	ck_assert_int_gt(fell, 5);
	tf_sampler_free(s);
	tf_sampler_free(one);
}
END_TEST

/* Rule 1's order for qsort: larger logit first (-0 as +0, NaN last), then
 * the lower id. */
static const float *order_row;
static int by_rule_one(const void *pa, const void *pb)
{
	int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
	float va = order_row[a], vb = order_row[b];
	if (va != va || vb != vb)
		return va != va && vb != vb ? (a > b) - (a < b) : va != va ? 1 : -1;
	if (va != vb)
		return va > vb ? -1 : 1;
	return (a > b) - (a < b);
}

/* Greedy and top_k rows drawn from their best candidates (shuffled) pick
 * what the whole row picks; rows without top_k, or with too few
 * candidates, are left to the whole row. */
START_TEST(top_equals_whole_row)
{
	enum { V = 3000 };
	struct tf_sampler *s;
	ck_assert_int_eq(tf_sampler_new(V, &s), TF_OK);
	static float lg[V], cv[V];
	static int32_t order[V], ci[V];
	const uint32_t ks[] = {0, 1, 5, 40, 300};
	for (int trial = 0; trial < 300; trial++) {
		/* bf16 rounding makes ties; a few NaN and -0 */
		for (int i = 0; i < V; i++)
			lg[i] = tf_round_bf16((float)(sin(i * 0.37 + trial) * (trial % 4 + 1)));
		lg[trial % V] = NAN;
		lg[(trial * 7) % V] = -0.0f;
		for (int i = 0; i < V; i++)
			order[i] = i;
		order_row = lg;
		qsort(order, V, sizeof *order, by_rule_one);
		struct tf_sample_params p = {.seed = (uint64_t)trial * 31, .temperature = trial % 5 * 0.4,
					     .top_k = ks[trial % 5], .top_p = trial % 3 ? 0.9 : 1,
					     .min_p = trial % 7 == 0 ? 0.1 : 0};
		size_t n = tf_sample_candidates(&p, V, 0);
		for (size_t i = 0; i < n; i++) {
			size_t j = (i * 7919 + (size_t)trial) % n; /* a permutation: 7919 is a prime > V */
			cv[j] = lg[order[i]];
			ci[j] = order[i];
		}
		int32_t tok = -1;
		uint64_t pos = 500 + (uint64_t)trial;
		int decided = tf_sample_top(s, cv, ci, n, pos, &p, &tok);
		if (tf_sample_greedy(&p) || p.top_k > 0) {
			ck_assert_int_eq(decided, 1);
			ck_assert_int_eq(tok, tf_sample_row(s, lg, V, pos, &p));
		} else {
			ck_assert_int_eq(decided, 0);
		}
	}
	struct tf_sample_params p = {.seed = 1, .temperature = 1, .top_k = 10};
	int32_t tok;
	ck_assert_int_eq(tf_sample_top(s, cv, ci, 9, 0, &p, &tok), 0); /* 9 < top_k */
	tf_sampler_free(s);
}
END_TEST

static int b64val(int c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

static size_t b64dec(const char *s, uint8_t *out)
{
	size_t n = 0;
	uint32_t acc = 0;
	int bits = 0;
	for (; *s && *s != '='; s++) {
		int v = b64val(*s);
		ck_assert_int_ge(v, 0);
		acc = acc << 6 | (uint32_t)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (uint8_t)(acc >> bits);
		}
	}
	return n;
}

/* Every record: the whole-row rule picks `token`; `count` is the rule's
 * candidate count; for nucleus rows, the ranks' statistics recomputed from
 * the logits equal `stats`, and the candidate path falls back exactly when
 * `full` says so, otherwise picking `token` too. */
START_TEST(reference_goldens)
{
	struct jsonl j;
	jsonl_open(&j, "dsv41/sampling.jsonl");
	struct tf_sampler *s;
	ck_assert_int_eq(tf_sampler_new(1 << 16, &s), TF_OK);
	int records = 0, bad = 0, nucleus = 0, fallbacks = 0;
	for (json_t *r; (r = jsonl_next(&j));) {
		records++;
		const char *b64 = json_string_value(json_object_get(r, "logits"));
		uint8_t *raw = malloc(strlen(b64));
		size_t nb = b64dec(b64, raw);
		size_t V = nb / 4;
		float *lg = malloc(V * sizeof *lg);
		memcpy(lg, raw, V * 4); /* little-endian host */
		int world = (int)json_integer_value(json_object_get(r, "world"));
		uint64_t position = (uint64_t)json_integer_value(json_object_get(r, "position"));
		size_t count = (size_t)json_integer_value(json_object_get(r, "count"));
		int full = json_is_true(json_object_get(r, "full"));
		int32_t want = (int32_t)json_integer_value(json_object_get(r, "token"));
		json_t *sv = json_object_get(r, "sampling");
		struct tf_sample_params p = {0}, *pp = NULL;
		if (json_is_array(sv)) {
			p.seed = (uint64_t)json_integer_value(json_array_get(sv, 0));
			p.temperature = json_number_value(json_array_get(sv, 1));
			p.top_k = (uint32_t)json_integer_value(json_array_get(sv, 2));
			p.top_p = json_number_value(json_array_get(sv, 3));
			p.min_p = json_number_value(json_array_get(sv, 4));
			pp = &p;
		}
		int32_t got = tf_sample_row(s, lg, V, position, pp);
		if (got != want) {
			bad++;
			fprintf(stderr, "sampling record %d: want %d, got %d\n", records, want, got);
		}
		ck_assert_uint_eq(tf_sample_candidates(pp, V, TF_SAMPLE_NUCLEUS), count);
		json_t *stats = json_object_get(r, "stats");
		if (tf_sample_is_nucleus(pp) && json_array_size(stats) > 0) {
			nucleus++;
			ck_assert_int_eq((int)json_array_size(stats), world);
			struct tf_sample_stats st[8];
			size_t part = V / (size_t)world;
			float *cv = malloc(V * sizeof *cv);
			int32_t *ci = malloc(V * sizeof *ci);
			size_t nc = 0;
			for (int w = 0; w < world; w++) {
				tf_sample_stats(lg + w * part, part, p.temperature, &st[w]);
				double m = json_number_value(json_array_get(json_array_get(stats, w), 0));
				double z = json_number_value(json_array_get(json_array_get(stats, w), 1));
				ck_assert_msg(st[w].max == m && fabs(st[w].sum - z) <= 1e-9 * z,
					      "record %d rank %d: stats (%.17g, %.17g), want (%.17g, %.17g)",
					      records, w, st[w].max, st[w].sum, m, z);
				/* this rank's top `count` candidates */
				struct tf_sampler *one;
				ck_assert_int_eq(tf_sampler_new(part, &one), TF_OK);
				int32_t *top = malloc(part * sizeof *top);
				float *tlp = malloc(part * sizeof *tlp);
				size_t k = count < part ? count : part;
				tf_sample_logprobs(one, lg + w * part, part, -1, (int)k, NULL, top, tlp);
				for (size_t i = 0; i < k; i++) {
					cv[nc] = lg[w * part + (size_t)top[i]];
					ci[nc++] = (int32_t)(w * part) + top[i];
				}
				free(top);
				free(tlp);
				tf_sampler_free(one);
			}
			int32_t tok = -1;
			int decided = tf_sample_nucleus(s, cv, ci, nc, count, st, world, position, &p, &tok);
			ck_assert_msg(decided == !full, "record %d: nucleus path %s, golden full=%d",
				      records, decided ? "decided" : "fell back", full);
			if (decided)
				ck_assert_int_eq(tok, want);
			fallbacks += !decided;
			free(cv);
			free(ci);
		}
		free(raw);
		free(lg);
		json_decref(r);
	}
	fprintf(stderr, "sampling goldens: %d/%d records agree (%d nucleus rows, %d fall back)\n",
		records - bad, records, nucleus, fallbacks);
	ck_assert_int_ge(records, 100);
	ck_assert_int_gt(fallbacks, 0);
	ck_assert_int_eq(bad, 0);
	tf_sampler_free(s);
	jsonl_close(&j);
}
END_TEST

Suite *suite_sample(void)
{
	Suite *s = suite_create("sample");
	TCase *tc = tcase_create("sample");
	tcase_add_test(tc, seed_and_uniform);
	tcase_add_test(tc, pairwise_order);
	tcase_add_test(tc, greedy_and_hand_rows);
	tcase_add_test(tc, batched_equals_alone);
	tcase_add_test(tc, nucleus_equals_whole_row);
	tcase_add_test(tc, top_equals_whole_row);
	tcase_add_test(tc, reference_goldens);
	suite_add_tcase(s, tc);
	return s;
}
