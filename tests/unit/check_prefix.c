/* check_prefix.c: the prompt cache's prefix index (engine/prefix.h): hits
 * only on whole saved prefixes that leave the last token to run, the
 * prefixes a prompt saves (its deepest boundary, a shared stem), ids
 * compared in full, LRU eviction of entries, bounded nodes. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "engine/prefix.h"

#define B TF_PREFIX_BLOCK

static struct tf_prefix *make(uint32_t entries, uint32_t nodes)
{
	struct tf_prefix_config c = {.max_entries = entries, .max_nodes = nodes};
	struct tf_prefix *p;
	ck_assert_int_eq(tf_prefix_new(&c, &p), TF_OK);
	return p;
}

/* ids[i] = base + i for the first `shared` ids, then tail + i. */
static int32_t *prompt(uint32_t n, uint32_t shared, int32_t tail)
{
	int32_t *v = malloc(n * sizeof(*v));
	for (uint32_t i = 0; i < n; i++)
		v[i] = i < shared ? (int32_t)(1000 + i) : tail + (int32_t)i;
	return v;
}

static void lookup(struct tf_prefix *p, const int32_t *ids, uint32_t n, struct tf_prefix_plan *pl)
{
	ck_assert_int_eq(tf_prefix_lookup(p, ids, n, pl), TF_OK);
}

START_TEST(fresh_prompt_saves_its_deepest_boundary)
{
	struct tf_prefix *p = make(4, 0);
	struct tf_prefix_plan pl;
	int32_t *a = prompt(600, 600, 0);
	lookup(p, a, 600, &pl);
	ck_assert_uint_eq(pl.hit, 0);
	ck_assert_int_eq(pl.seq, -1);
	ck_assert_uint_eq(pl.save[0], 2 * B);
	ck_assert_uint_eq(pl.save[1], 0);
	/* A boundary at the last token is not saved: its logits are needed. */
	lookup(p, a, 2 * B, &pl);
	ck_assert_uint_eq(pl.save[0], B);
	lookup(p, a, B, &pl); /* no boundary before the last token */
	ck_assert_uint_eq(pl.save[0], 0);
	ck_assert_uint_eq(pl.hit, 0);
	free(a);
	tf_prefix_free(p);
}
END_TEST

START_TEST(saved_prefix_hits_and_leaves_the_last_token)
{
	struct tf_prefix *p = make(4, 0);
	struct tf_prefix_plan pl;
	int32_t *a = prompt(900, 900, 0);
	ck_assert_int_eq(tf_prefix_insert(p, a, 2 * B, 7), TF_OK);
	ck_assert(tf_prefix_holds(p, a, 2 * B));
	ck_assert(!tf_prefix_holds(p, a, B));
	lookup(p, a, 600, &pl);
	ck_assert_uint_eq(pl.hit, 2 * B);
	ck_assert_int_eq(pl.seq, 7);
	ck_assert_uint_eq(pl.save[0], 0); /* 600 has nothing deeper to save */
	tf_prefix_resumed(p, pl.hit);
	lookup(p, a, 900, &pl);            /* a longer prompt: resumes, saves 768 */
	ck_assert_uint_eq(pl.hit, 2 * B);
	ck_assert_uint_eq(pl.save[0], 3 * B);
	ck_assert_uint_eq(pl.save[1], 0);
	lookup(p, a, 2 * B, &pl);          /* exactly the prefix: the last token must run */
	ck_assert_uint_eq(pl.hit, 0);
	lookup(p, a, 2 * B + 1, &pl);
	ck_assert_uint_eq(pl.hit, 2 * B);
	struct tf_prefix_stats s;
	tf_prefix_stats(p, &s);
	ck_assert_uint_eq(s.lookups, 4);
	ck_assert_uint_eq(s.hits, 1); /* lookups find; only a resume counts */
	ck_assert_uint_eq(s.hit_tokens, 2 * B);
	ck_assert_uint_eq(s.entries, 1);
	free(a);
	tf_prefix_free(p);
}
END_TEST

START_TEST(a_different_block_misses)
{
	struct tf_prefix *p = make(4, 0);
	struct tf_prefix_plan pl;
	int32_t *a = prompt(600, 600, 0);
	ck_assert_int_eq(tf_prefix_insert(p, a, 2 * B, 3), TF_OK);
	int32_t *b = prompt(600, 600, 0);
	b[B + 17] = 5; /* the second block differs */
	lookup(p, b, 600, &pl);
	ck_assert_uint_eq(pl.hit, 0);
	ck_assert(!tf_prefix_holds(p, b, 2 * B));
	b[B + 17] = a[B + 17];
	b[3] = 4; /* the first */
	lookup(p, b, 600, &pl);
	ck_assert_uint_eq(pl.hit, 0);
	free(a);
	free(b);
	tf_prefix_free(p);
}
END_TEST

START_TEST(a_shared_stem_is_saved_for_the_third_prompt)
{
	struct tf_prefix *p = make(4, 0);
	struct tf_prefix_plan pl;
	/* Three prompts share 600 ids (two whole blocks) and go on apart. */
	int32_t *a = prompt(1000, 600, 50000), *b = prompt(1000, 600, 60000),
		*c = prompt(1000, 600, 70000);
	lookup(p, a, 1000, &pl);
	ck_assert_uint_eq(pl.save[0], 3 * B);
	ck_assert_int_eq(tf_prefix_insert(p, a, 3 * B, 1), TF_OK);
	lookup(p, b, 1000, &pl);
	ck_assert_uint_eq(pl.hit, 0);
	ck_assert_uint_eq(pl.save[0], 2 * B); /* the stem */
	ck_assert_uint_eq(pl.save[1], 3 * B); /* its own */
	ck_assert_int_eq(tf_prefix_insert(p, b, 2 * B, 2), TF_OK);
	ck_assert_int_eq(tf_prefix_insert(p, b, 3 * B, 3), TF_OK);
	lookup(p, c, 1000, &pl);
	ck_assert_uint_eq(pl.hit, 2 * B);
	ck_assert_int_eq(pl.seq, 2);
	ck_assert_uint_eq(pl.save[0], 3 * B);
	free(a);
	free(b);
	free(c);
	tf_prefix_free(p);
}
END_TEST

START_TEST(entries_are_evicted_least_recently_used_first)
{
	struct tf_prefix *p = make(2, 0);
	struct tf_prefix_plan pl;
	int32_t *a = prompt(600, 0, 10), *b = prompt(600, 0, 20000), *c = prompt(600, 0, 30000);
	ck_assert_int_eq(tf_prefix_insert(p, a, B, 10), TF_OK);
	ck_assert_int_eq(tf_prefix_insert(p, b, B, 20), TF_OK);
	ck_assert(tf_prefix_full(p));
	ck_assert_int_eq(tf_prefix_insert(p, c, B, 30), TF_ERR_RANGE);
	lookup(p, a, 600, &pl); /* a is used: b goes first */
	ck_assert_int_eq(pl.seq, 10);
	ck_assert_int_eq(tf_prefix_evict(p), 20);
	ck_assert(!tf_prefix_full(p));
	ck_assert_int_eq(tf_prefix_insert(p, c, B, 30), TF_OK);
	ck_assert(tf_prefix_holds(p, c, B)); /* c used after a */
	ck_assert_int_eq(tf_prefix_evict(p), 10);
	ck_assert_int_eq(tf_prefix_evict(p), 30);
	ck_assert_int_eq(tf_prefix_evict(p), -1);
	lookup(p, b, 600, &pl);
	ck_assert_uint_eq(pl.hit, 0);
	struct tf_prefix_stats s;
	tf_prefix_stats(p, &s);
	ck_assert_uint_eq(s.evictions, 3);
	ck_assert_uint_eq(s.saves, 3);
	ck_assert_uint_eq(s.entries, 0);
	free(a);
	free(b);
	free(c);
	tf_prefix_free(p);
}
END_TEST

START_TEST(insert_checks_its_arguments)
{
	struct tf_prefix *p = make(2, 0);
	int32_t *a = prompt(600, 600, 0);
	ck_assert_int_eq(tf_prefix_insert(p, a, 0, 1), TF_ERR_ARG);
	ck_assert_int_eq(tf_prefix_insert(p, a, B + 1, 1), TF_ERR_ARG);
	ck_assert_int_eq(tf_prefix_insert(p, a, B, -1), TF_ERR_ARG);
	ck_assert_int_eq(tf_prefix_insert(p, a, B, 1), TF_OK);
	ck_assert_int_eq(tf_prefix_insert(p, a, B, 2), TF_ERR_RANGE); /* held already */
	struct tf_prefix_config bad = {.max_entries = 0};
	struct tf_prefix *q = (struct tf_prefix *)1;
	ck_assert_int_eq(tf_prefix_new(&bad, &q), TF_ERR_ARG);
	ck_assert_ptr_null(q);
	bad = (struct tf_prefix_config){.max_entries = 8, .max_nodes = 8};
	ck_assert_int_eq(tf_prefix_new(&bad, &q), TF_ERR_ARG);
	tf_prefix_free(NULL);
	free(a);
	tf_prefix_free(p);
}
END_TEST

START_TEST(nodes_stay_bounded_and_entries_survive)
{
	struct tf_prefix *p = make(2, 16);
	struct tf_prefix_plan pl;
	int32_t *keep = prompt(4 * B + 5, 4 * B + 5, 0);
	ck_assert_int_eq(tf_prefix_insert(p, keep, 4 * B, 9), TF_OK);
	for (int32_t k = 0; k < 200; k++) { /* 200 prompts of 4 new blocks each */
		int32_t *x = prompt(4 * B + 5, 0, 100000 + 1000 * k);
		lookup(p, x, 4 * B + 5, &pl);
		ck_assert_uint_eq(pl.hit, 0);
		free(x);
		struct tf_prefix_stats s;
		tf_prefix_stats(p, &s);
		ck_assert_uint_le(s.nodes, 16);
	}
	lookup(p, keep, 4 * B + 5, &pl);
	ck_assert_uint_eq(pl.hit, 4 * B);
	ck_assert_int_eq(pl.seq, 9);
	free(keep);
	tf_prefix_free(p);
}
END_TEST

Suite *suite_prefix(void)
{
	Suite *s = suite_create("prefix");
	TCase *tc = tcase_create("index");
	tcase_add_test(tc, fresh_prompt_saves_its_deepest_boundary);
	tcase_add_test(tc, saved_prefix_hits_and_leaves_the_last_token);
	tcase_add_test(tc, a_different_block_misses);
	tcase_add_test(tc, a_shared_stem_is_saved_for_the_third_prompt);
	tcase_add_test(tc, entries_are_evicted_least_recently_used_first);
	tcase_add_test(tc, insert_checks_its_arguments);
	tcase_add_test(tc, nodes_stay_bounded_and_entries_survive);
	suite_add_tcase(s, tc);
	return s;
}
