/* check_engine_model.c: the engine over the model backend on a tiny synthetic
 * pack: the prompt cache resumes a saved prefix and gives the same tokens
 * and log-probabilities as a fresh run and as an engine without the cache;
 * eviction under slot or page pressure stays correct; log-probabilities are the
 * row's own softmax (greedy picks the first alternative). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute/model.h"
#include "engine/model_backend.h"
#include "engine/engine.h"
#include "engine/planner.h"
#include "engine/prefix.h"
#include "model/synth.h"
#include "tinypack.h"

static struct tinypack pk;

static void make_pack(void)
{
	tinypack_make(&pk, "enginecpu", 5);
}

static void drop_pack(void)
{
	tinypack_drop(&pk);
}

static struct tf_engine *start_masked(uint32_t entries, int lanes, int64_t pages,
				      const uint8_t *drawable)
{
	struct tf_model_opts mo = {.threads = 2, .slots = lanes + (int)entries, .max_positions = 1024,
				   .pages = pages};
	struct tf_model *m;
	ck_assert_int_eq(tf_model_open(pk.pack, &mo, &m), TF_OK);
	struct tf_engine_model_opts co = {.cache_entries = entries, .drawable = drawable};
	struct tf_engine_backend be;
	ck_assert_int_eq(tf_engine_model_new(m, -1, &co, &be), TF_OK);
	struct tf_planner_config pc = {.max_lanes = (uint32_t)lanes, .align = TF_PREFIX_BLOCK};
	struct tf_planner pl;
	ck_assert_int_eq(tf_planner_default(&pc, &pl), TF_OK);
	struct tf_engine *e;
	ck_assert_int_eq(tf_engine_new(&be, &pl, &e), TF_OK);
	return e;
}

static struct tf_engine *start_pages(uint32_t entries, int lanes, int64_t pages)
{
	return start_masked(entries, lanes, pages, NULL);
}

static struct tf_engine *start(uint32_t entries, int lanes)
{
	return start_pages(entries, lanes, 0);
}

enum { GEN = 6, TOP = 4 };

struct run {
	int32_t tok[GEN];
	struct tf_engine_logprob lp[GEN];
	uint32_t cached;
};

static void run(struct tf_engine *e, const int32_t *ids, size_t n, float temperature,
		struct run *out)
{
	struct tf_engine_params p = {.max_tokens = GEN, .seed = 77, .temperature = temperature,
				     .logprobs = true, .top_logprobs = TOP};
	struct tf_engine_job *j;
	ck_assert_int_eq(tf_engine_submit(e, ids, n, &p, &j), TF_OK);
	size_t got = 0;
	bool done = false;
	while (!done)
		got += tf_engine_job_read(j, out->tok + got, GEN - got, -1, &done);
	ck_assert_uint_eq(got, GEN);
	ck_assert_uint_eq(tf_engine_job_logprobs(j, 0, out->lp, GEN + 3), GEN);
	struct tf_engine_result r;
	tf_engine_job_result(j, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_LENGTH);
	out->cached = r.cached;
	tf_engine_job_free(j);
}

static void same(const struct run *a, const struct run *b)
{
	ck_assert_mem_eq(a->tok, b->tok, sizeof(a->tok));
	for (int i = 0; i < GEN; i++) {
		ck_assert_mem_eq(&a->lp[i].logprob, &b->lp[i].logprob, sizeof(float));
		ck_assert_uint_eq(a->lp[i].ntop, TOP);
		ck_assert_mem_eq(a->lp[i].top_ids, b->lp[i].top_ids, TOP * sizeof(int32_t));
		ck_assert_mem_eq(a->lp[i].top_lp, b->lp[i].top_lp, TOP * sizeof(float));
	}
}

static void ids_of(int32_t *v, size_t n, uint32_t salt)
{
	uint64_t x = 88172645463325252ull ^ salt;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		v[i] = (int32_t)(3 + x % 500);
	}
}

START_TEST(resumed_prompt_gives_the_same_tokens)
{
	make_pack();
	enum { N = 300 };
	int32_t a[N], b[N];
	ids_of(a, N, 1);
	memcpy(b, a, sizeof(a));
	ids_of(b + 270, N - 270, 2); /* b shares a's first 270 ids: one block */
	struct tf_engine *e = start(4, 2), *plain = start(0, 2);
	struct run fresh, again, other, ref;
	run(e, a, N, 1.0f, &fresh);
	ck_assert_uint_eq(fresh.cached, 0);
	run(e, a, N, 1.0f, &again);
	ck_assert_uint_eq(again.cached, TF_PREFIX_BLOCK);
	same(&fresh, &again);
	run(e, b, N, 1.0f, &other);
	ck_assert_uint_eq(other.cached, TF_PREFIX_BLOCK);
	run(plain, b, N, 1.0f, &ref);
	ck_assert_uint_eq(ref.cached, 0);
	same(&other, &ref);
	struct tf_engine_stats s;
	tf_engine_stats(e, &s);
	ck_assert(s.cache.on);
	ck_assert_uint_eq(s.cache.lookups, 3);
	ck_assert_uint_eq(s.cache.hits, 2);
	ck_assert_uint_eq(s.cache.hit_tokens, 2 * TF_PREFIX_BLOCK);
	ck_assert_uint_eq(s.cache.entries, 1);
	tf_engine_stats(plain, &s);
	ck_assert(!s.cache.on);
	tf_engine_close(e);
	tf_engine_close(plain);
	drop_pack();
}
END_TEST

START_TEST(eviction_under_slot_pressure_stays_correct)
{
	make_pack();
	enum { N = 300 };
	int32_t p[3][N];
	for (int k = 0; k < 3; k++)
		ids_of(p[k], N, 10 + (uint32_t)k);
	struct tf_engine *e = start(1, 1), *plain = start(0, 1);
	struct run r1, r2, r3, back, ref;
	run(e, p[0], N, 0.7f, &r1);
	run(e, p[1], N, 0.7f, &r2); /* saves p[1]'s block in place of p[0]'s */
	run(e, p[0], N, 0.7f, &back);
	ck_assert_uint_eq(back.cached, 0);
	same(&r1, &back);
	run(e, p[0], N, 0.7f, &back);
	ck_assert_uint_eq(back.cached, TF_PREFIX_BLOCK);
	same(&r1, &back);
	run(e, p[2], N, 0.7f, &r3);
	run(plain, p[2], N, 0.7f, &ref);
	same(&r3, &ref);
	struct tf_engine_stats s;
	tf_engine_stats(e, &s);
	ck_assert_uint_eq(s.cache.entries, 1);
	ck_assert_uint_ge(s.cache.evictions, 3);
	(void)r2;
	tf_engine_close(e);
	tf_engine_close(plain);
	drop_pack();
}
END_TEST

/* A pool of 3 pages: saved prefixes give their pages back when a round
 * needs them, before any slot runs short. */
START_TEST(eviction_under_page_pressure_stays_correct)
{
	make_pack();
	int32_t p0[300], p1[300], p2[300];
	ids_of(p0, 300, 20);
	ids_of(p1, 300, 21);
	ids_of(p2, 300, 22);
	struct tf_engine *e = start_pages(4, 1, 3), *plain = start(0, 1);
	struct run a, b, c, ref;
	run(e, p0, 300, 1.0f, &a); /* keeps a page for its first block */
	run(e, p1, 300, 1.0f, &b); /* another: 2 of 3 pages held */
	run(e, p2, 300, 1.0f, &c); /* needs 2 pages: p0's block goes */
	run(plain, p2, 300, 1.0f, &ref);
	same(&c, &ref);
	struct tf_engine_stats s;
	tf_engine_stats(e, &s);
	ck_assert_uint_eq(s.cache.evictions, 1);
	ck_assert_uint_eq(s.cache.entries, 2);
	run(e, p1, 300, 1.0f, &ref); /* p1 stayed */
	ck_assert_uint_eq(ref.cached, TF_PREFIX_BLOCK);
	same(&b, &ref);
	run(e, p0, 300, 1.0f, &ref); /* p0 did not */
	ck_assert_uint_eq(ref.cached, 0);
	same(&a, &ref);
	tf_engine_close(e);
	tf_engine_close(plain);
	drop_pack();
}
END_TEST

START_TEST(logprobs_are_the_rows_softmax)
{
	make_pack();
	enum { N = 40 };
	int32_t a[N];
	ids_of(a, N, 3);
	struct tf_engine *e = start(0, 1);
	struct run g;
	run(e, a, N, 0.0f, &g);
	for (int i = 0; i < GEN; i++) {
		const struct tf_engine_logprob *l = &g.lp[i];
		ck_assert_int_eq(l->top_ids[0], g.tok[i]); /* greedy: the most likely */
		ck_assert_float_eq(l->top_lp[0], l->logprob);
		ck_assert(l->logprob <= 0 && isfinite(l->logprob));
		double mass = 0;
		for (int k = 0; k < TOP; k++) {
			if (k)
				ck_assert(l->top_lp[k] <= l->top_lp[k - 1]);
			mass += exp(l->top_lp[k]);
		}
		ck_assert(mass <= 1.0 + 1e-5);
	}
	tf_engine_close(e);
	drop_pack();
}
END_TEST

/* Ids marked undrawable (what tf-serve does for ids its tokenizer lacks)
 * are never drawn, greedy or sampled, nor offered among the alternatives;
 * only the even ids below 64 are drawable here. */
START_TEST(undrawable_ids_are_never_drawn)
{
	make_pack();
	uint32_t vocab;
	{
		struct tf_config c;
		ck_assert_int_eq(tf_config_preset(&c, "tiny"), TF_OK);
		vocab = c.vocab;
	}
	uint8_t *drawable = calloc(vocab, 1);
	for (uint32_t id = 0; id < 64; id += 2)
		drawable[id] = 1;
	struct tf_engine *e = start_masked(0, 1, 0, drawable);
	free(drawable); /* copied */
	int32_t p[40];
	ids_of(p, 40, 9);
	for (int t = 0; t < 2; t++) {
		struct run r;
		run(e, p, 40, t ? 1.5f : 0.0f, &r);
		for (int i = 0; i < GEN; i++) {
			ck_assert(r.tok[i] < 64 && r.tok[i] % 2 == 0);
			for (uint32_t k = 0; k < r.lp[i].ntop; k++) {
				ck_assert(r.lp[i].top_ids[k] < 64 && r.lp[i].top_ids[k] % 2 == 0);
				ck_assert(isfinite(r.lp[i].top_lp[k]));
			}
		}
	}
	tf_engine_close(e);
	drop_pack();
}
END_TEST

Suite *suite_engine_model(void)
{
	Suite *s = suite_create("engine_model");
	TCase *tc = tcase_create("tiny");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, resumed_prompt_gives_the_same_tokens);
	tcase_add_test(tc, eviction_under_slot_pressure_stays_correct);
	tcase_add_test(tc, eviction_under_page_pressure_stays_correct);
	tcase_add_test(tc, logprobs_are_the_rows_softmax);
	tcase_add_test(tc, undrawable_ids_are_never_drawn);
	suite_add_tcase(s, tc);
	return s;
}
