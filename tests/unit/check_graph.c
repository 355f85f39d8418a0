/* check_graph.c: every rule of the graph cache, over a fake CPU backend whose
 * "graphs" remember the body and run it when launched. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/rng.h"
#include "cuda/graph.h"

struct fake {
	int live;      /* executables alive now: 0 at the end means no leak */
	int captures, launches, destroys;
	bool room;
	bool fail_capture;
	bool decline;  /* capture returns TF_ERR_MISMATCH */
};

struct exec {
	tf_graph_body_fn body;
	void *arg;
};

static char capturing; /* the stream a body sees while being captured */

static tf_status fake_capture(void *ctx, void *stream, tf_graph_body_fn body, void *arg, void **out)
{
	struct fake *f = ctx;
	(void)stream;
	if (f->fail_capture)
		return tf_err(TF_ERR_INTERNAL, "fake capture failure");
	if (f->decline)
		return tf_err(TF_ERR_MISMATCH, "fake capture declined");
	tf_status st = body(arg, &capturing);
	if (st)
		return st;
	struct exec *e = malloc(sizeof(*e));
	ck_assert_ptr_nonnull(e);
	*e = (struct exec){body, arg};
	f->live++;
	f->captures++;
	*out = e;
	return TF_OK;
}

static tf_status fake_launch(void *ctx, void *exec, void *stream)
{
	struct fake *f = ctx;
	struct exec *e = exec;
	f->launches++;
	return e->body(e->arg, stream);
}

static void fake_destroy(void *ctx, void *exec)
{
	struct fake *f = ctx;
	if (!exec)
		return;
	f->live--;
	f->destroys++;
	free(exec);
}

static bool fake_room(void *ctx)
{
	return ((struct fake *)ctx)->room;
}

/* The work: count how often it really ran (not captured). */
static tf_status body(void *arg, void *stream)
{
	if (stream != &capturing)
		++*(int *)arg;
	return TF_OK;
}

/* A vote hook that counts calls and can say no on a chosen call. */
struct voter {
	int calls;
	int no_on;      /* 1-based call that answers false; 0: never */
	int no_also;    /* another such call */
	int error_on;   /* 1-based call that fails */
};

static tf_status vote(void *ctx, bool mine, bool *all)
{
	struct voter *v = ctx;
	v->calls++;
	if (v->calls == v->error_on)
		return tf_err(TF_ERR_TIMEOUT, "peer gone");
	*all = mine && v->calls != v->no_on && v->calls != v->no_also;
	return TF_OK;
}

static struct tf_graph_cache *new_cache(struct fake *f, struct voter *v, int max, int min_keep, bool hold)
{
	struct tf_graph_backend be = {
		.ctx = f, .capture = fake_capture, .launch = fake_launch, .destroy = fake_destroy,
		.room = fake_room,
	};
	struct tf_graph_opts o = {.max = max, .min_keep = min_keep, .hold = hold,
	                          .agree = v ? vote : NULL, .agree_ctx = v};
	struct tf_graph_cache *c = NULL;
	tf_log_set_level(TF_LOG_ERROR); /* the failure tests warn by design */
	ck_assert_int_eq(tf_graph_cache_new(&be, &o, &c), TF_OK);
	return c;
}

static void run(struct tf_graph_cache *c, const char *key, uint64_t fp, int *ran)
{
	int before = *ran;
	tf_status st = tf_graph_run(c, key, fp, (void *)1, body, ran);
	ck_assert_msg(st == TF_OK, "%s", tf_errmsg(st));
	ck_assert_int_eq(*ran, before + 1); /* the work ran exactly once */
}

START_TEST(hits_and_lru)
{
	struct fake f = {.room = true};
	struct voter v = {0};
	struct tf_graph_cache *c = new_cache(&f, &v, 3, 1, false);
	int ran = 0;
	run(c, "a", 7, &ran);
	run(c, "b", 7, &ran);
	run(c, "c", 7, &ran);
	ck_assert_int_eq(f.captures, 3);
	int votes = v.calls;
	run(c, "a", 7, &ran); /* hit: no vote, no capture */
	ck_assert_int_eq(v.calls, votes);
	ck_assert_int_eq(f.captures, 3);
	run(c, "d", 7, &ran); /* full: evicts b, the least recently used */
	struct tf_graph_stats s;
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.count, 3);
	ck_assert_uint_eq(s.evicted, 1);
	votes = v.calls;
	run(c, "a", 7, &ran);
	run(c, "c", 7, &ran);
	run(c, "d", 7, &ran);
	ck_assert_int_eq(v.calls, votes); /* all hits */
	run(c, "b", 7, &ran);             /* b was the one evicted */
	ck_assert_int_eq(v.calls, votes + 2); /* room vote + capture vote */
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.hits, 4);
	ck_assert_uint_eq(s.misses, 5);
	ck_assert_uint_eq(s.captures, 5);
	ck_assert_uint_eq(s.eager, 0);
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);
}
END_TEST

START_TEST(max_zero_and_off)
{
	struct fake f = {.room = true};
	struct voter v = {0};
	struct tf_graph_cache *c = new_cache(&f, &v, 0, 5, false);
	int ran = 0;
	for (int i = 0; i < 5; i++)
		run(c, "a", 1, &ran);
	struct tf_graph_stats s;
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.eager, 5);
	ck_assert_int_eq(s.min_keep, 0); /* clamped to max */
	ck_assert_int_eq(f.captures, 0);
	ck_assert_int_eq(v.calls, 0);
	tf_graph_cache_free(c);

	struct tf_graph_backend be = {.ctx = &f, .capture = fake_capture, .launch = fake_launch,
	                              .destroy = fake_destroy};
	struct tf_graph_opts o = {.off = true, .max = 10};
	ck_assert_int_eq(tf_graph_cache_new(&be, &o, &c), TF_OK);
	run(c, "a", 1, &ran);
	run(c, "a", 1, &ran);
	ck_assert_int_eq(f.captures, 0);
	tf_graph_cache_free(c);

	/* Clamps: min_keep to max, negative max to 0; defaults without opts. */
	c = new_cache(&f, NULL, 3, 10, false);
	tf_graph_stats(c, &s);
	ck_assert_int_eq(s.min_keep, 3);
	tf_graph_cache_free(c);
	c = new_cache(&f, NULL, -4, -1, false);
	tf_graph_stats(c, &s);
	ck_assert_int_eq(s.max, 0);
	ck_assert_int_eq(s.min_keep, 0);
	tf_graph_cache_free(c);
	ck_assert_int_eq(tf_graph_cache_new(&be, NULL, &c), TF_OK);
	tf_graph_stats(c, &s);
	ck_assert_int_eq(s.max, TF_GRAPH_MAX_DEFAULT);
	ck_assert_int_eq(s.min_keep, TF_GRAPH_MIN_KEEP_DEFAULT);
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);
}
END_TEST

START_TEST(fingerprint_drops_all)
{
	struct fake f = {.room = true};
	struct tf_graph_cache *c = new_cache(&f, NULL, 8, 2, false);
	int ran = 0;
	run(c, "a", 1, &ran);
	run(c, "b", 1, &ran);
	run(c, "a", 1, &ran);
	ck_assert_int_eq(f.live, 2);
	run(c, "a", 2, &ran); /* new fingerprint: both dropped, a captured again */
	struct tf_graph_stats s;
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.dropped, 2);
	ck_assert_uint_eq(s.count, 1);
	ck_assert_int_eq(f.live, 1);
	ck_assert_int_eq(f.captures, 3);
	run(c, "a", 2, &ran);
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.hits, 2);
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);

	const uint64_t w[2] = {0x0123456789abcdefull, 42};
	ck_assert_uint_eq(tf_graph_fingerprint(w, 2), 0x4096061ceb07625full);
	ck_assert_uint_eq(tf_graph_fingerprint(NULL, 0), 0xcbf29ce484222325ull);
}
END_TEST

START_TEST(floor_sheds_then_recovers)
{
	struct fake f = {.room = true};
	struct tf_graph_cache *c = new_cache(&f, NULL, 16, 2, false);
	int ran = 0;
	char key[16];
	for (int i = 0; i < 8; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		run(c, key, 1, &ran);
	}
	f.room = false;
	struct tf_graph_stats s;
	size_t expect[] = {6, 5, 4, 3, 2, 2, 2};
	for (int i = 0; i < 7; i++) {
		run(c, "new", 1, &ran); /* a miss: eager, sheds a quarter (at least one) */
		tf_graph_stats(c, &s);
		ck_assert_uint_eq(s.count, expect[i]);
	}
	ck_assert_uint_eq(s.eager, 7);
	ck_assert_int_eq(f.live, 2);
	/* The survivors are the most recently used: k6 and k7 still hit. */
	run(c, "k7", 1, &ran);
	run(c, "k6", 1, &ran);
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.hits, 2);
	f.room = true;
	run(c, "new", 1, &ran); /* room again: captured */
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.count, 3);
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);
}
END_TEST

START_TEST(floor_hold_keeps)
{
	struct fake f = {.room = true};
	struct tf_graph_cache *c = new_cache(&f, NULL, 16, 0, true);
	int ran = 0;
	run(c, "a", 1, &ran);
	run(c, "b", 1, &ran);
	f.room = false;
	run(c, "c", 1, &ran);
	run(c, "c", 1, &ran);
	struct tf_graph_stats s;
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.count, 2);
	ck_assert_uint_eq(s.eager, 2);
	ck_assert_uint_eq(s.evicted, 0);
	run(c, "a", 1, &ran); /* hits still replay */
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.hits, 1);
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);
}
END_TEST

START_TEST(local_capture_failure)
{
	struct fake f = {.room = true};
	struct voter v = {0};
	struct tf_graph_cache *c = new_cache(&f, &v, 4, 1, false);
	int ran = 0;
	run(c, "a", 1, &ran);
	f.fail_capture = true;
	run(c, "b", 1, &ran); /* fails, votes no, everyone eager for good */
	struct tf_graph_stats s;
	tf_graph_stats(c, &s);
	ck_assert(s.failed);
	ck_assert_uint_eq(s.count, 0);
	ck_assert_int_eq(f.live, 0);
	f.fail_capture = false;
	int votes = v.calls;
	run(c, "a", 1, &ran);
	run(c, "c", 1, &ran);
	ck_assert_int_eq(v.calls, votes); /* no more votes */
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.eager, 3);
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);
}
END_TEST

START_TEST(peer_capture_failure_frees_exec)
{
	struct fake f = {.room = true};
	struct voter v = {.no_on = 2, .no_also = 3}; /* the first miss's capture votes: a peer failed */
	struct tf_graph_cache *c = new_cache(&f, &v, 4, 1, false);
	int ran = 0;
	run(c, "a", 1, &ran);
	ck_assert_int_eq(f.captures, 1); /* captured here ... */
	ck_assert_int_eq(f.destroys, 1); /* ... and freed on the peer's no */
	ck_assert_int_eq(f.live, 0);
	struct tf_graph_stats s;
	tf_graph_stats(c, &s);
	ck_assert(s.failed);
	ck_assert_uint_eq(s.eager, 1);
	tf_graph_cache_free(c);
}
END_TEST

/* A declined capture (here or on a peer) runs eagerly once, stores
 * nothing and leaves graphs on; a real failure elsewhere still ends them. */
START_TEST(declined_capture_stays_on)
{
	struct fake f = {.room = true, .decline = true};
	struct voter v = {0};
	struct tf_graph_cache *c = new_cache(&f, &v, 4, 1, false);
	int ran = 0;
	run(c, "a", 1, &ran); /* declined here: three votes, eager */
	struct tf_graph_stats s;
	tf_graph_stats(c, &s);
	ck_assert(!s.failed);
	ck_assert_uint_eq(s.declined, 1);
	ck_assert_uint_eq(s.eager, 1);
	ck_assert_uint_eq(s.count, 0);
	ck_assert_int_eq(v.calls, 3);
	f.decline = false;
	run(c, "a", 1, &ran); /* captured and launched now */
	run(c, "a", 1, &ran); /* a hit */
	tf_graph_stats(c, &s);
	ck_assert_uint_eq(s.captures, 1);
	ck_assert_uint_eq(s.hits, 1);
	ck_assert_int_eq(f.live, 1);
	/* a peer declines "b" (says no on the capture vote, yes on the
	 * failure vote): nothing stored, still on */
	v.no_on = v.calls + 2;
	run(c, "b", 1, &ran);
	tf_graph_stats(c, &s);
	ck_assert(!s.failed);
	ck_assert_uint_eq(s.declined, 2);
	ck_assert_uint_eq(s.count, 1);
	ck_assert_int_eq(f.live, 1); /* b's executable was freed */
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);
}
END_TEST

START_TEST(vote_error_frees_exec)
{
	struct fake f = {.room = true};
	struct voter v = {.error_on = 2};
	struct tf_graph_cache *c = new_cache(&f, &v, 4, 1, false);
	int ran = 0;
	tf_status st = tf_graph_run(c, "a", 1, (void *)1, body, &ran);
	ck_assert_int_eq(st, TF_ERR_TIMEOUT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(st), "peer gone"));
	ck_assert_int_eq(f.live, 0);
	ck_assert_int_eq(ran, 0);
	/* An error in the room vote: nothing captured at all. */
	v = (struct voter){.error_on = 1};
	ck_assert_int_eq(tf_graph_run(c, "b", 1, (void *)1, body, &ran), TF_ERR_TIMEOUT);
	ck_assert_int_eq(f.captures, 1);
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);
}
END_TEST

/* Three ranks in threads, voting through a barrier; rank 1 runs short of
 * memory now and then. Every rank must take the same decisions. */
struct rank_vote {
	pthread_barrier_t bar;
	bool vals[3];
};

struct rank {
	struct rank_vote *rv;
	int id;
	struct fake f;
	struct tf_graph_stats s;
	int ran;
};

static tf_status rank_vote(void *ctx, bool mine, bool *all)
{
	struct rank *r = ctx;
	r->rv->vals[r->id] = mine;
	pthread_barrier_wait(&r->rv->bar);
	*all = r->rv->vals[0] && r->rv->vals[1] && r->rv->vals[2];
	pthread_barrier_wait(&r->rv->bar);
	return TF_OK;
}

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	r->f.room = true;
	struct tf_graph_backend be = {.ctx = &r->f, .capture = fake_capture, .launch = fake_launch,
	                              .destroy = fake_destroy, .room = fake_room};
	struct tf_graph_opts o = {.max = 6, .min_keep = 2, .agree = rank_vote, .agree_ctx = r};
	struct tf_graph_cache *c;
	if (tf_graph_cache_new(&be, &o, &c))
		return NULL;
	struct tf_rng rng;
	tf_rng_seed(&rng, 99); /* the same key sequence on every rank */
	for (int i = 0; i < 400; i++) {
		char key[16];
		snprintf(key, sizeof(key), "k%u", (unsigned)tf_rng_below(&rng, 10));
		uint64_t fp = i < 300 ? 1 : 2;
		if (r->id == 1)
			r->f.room = (i / 37) % 2 == 0;
		if (tf_graph_run(c, key, fp, (void *)1, body, &r->ran))
			break;
	}
	tf_graph_stats(c, &r->s);
	tf_graph_cache_free(c);
	return NULL;
}

START_TEST(ranks_agree)
{
	struct rank_vote rv;
	pthread_barrier_init(&rv.bar, NULL, 3);
	struct rank r[3];
	pthread_t t[3];
	for (int i = 0; i < 3; i++) {
		memset(&r[i], 0, sizeof(r[i]));
		r[i].rv = &rv;
		r[i].id = i;
		ck_assert_int_eq(pthread_create(&t[i], NULL, rank_main, &r[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&rv.bar);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(r[i].ran, 400);
		ck_assert_int_eq(r[i].f.live, 0);
		ck_assert_uint_eq(r[i].s.hits, r[0].s.hits);
		ck_assert_uint_eq(r[i].s.captures, r[0].s.captures);
		ck_assert_uint_eq(r[i].s.eager, r[0].s.eager);
		ck_assert_uint_eq(r[i].s.evicted, r[0].s.evicted);
		ck_assert_uint_eq(r[i].s.votes, r[0].s.votes);
	}
	ck_assert_uint_gt(r[0].s.hits, 100);
	ck_assert_uint_gt(r[0].s.eager, 0);      /* rank 1's shortage made everyone eager */
	ck_assert_uint_gt(r[0].s.shed_rounds, 0);
}
END_TEST

/* has/forget/set_agree (for callers that vote on hits themselves): has
 * says what run would do, without running; a changed fingerprint is a
 * miss; forget makes the next run of that key capture again (no leak);
 * the hook set later is the one run's miss path votes with. */
START_TEST(has_forget_set_agree)
{
	struct fake f = {.room = true};
	struct tf_graph_cache *c = new_cache(&f, NULL, 4, 1, false);
	int ran = 0;
	ck_assert(!tf_graph_has(c, "a", 7));
	run(c, "a", 7, &ran);
	run(c, "b", 7, &ran);
	ck_assert(tf_graph_has(c, "a", 7) && tf_graph_has(c, "b", 7));
	ck_assert(!tf_graph_has(c, "a", 8)); /* the next run would drop every graph */
	ck_assert(!tf_graph_has(c, "z", 7));
	tf_graph_forget(c, "a");
	tf_graph_forget(c, "z"); /* not held: nothing */
	ck_assert(!tf_graph_has(c, "a", 7) && tf_graph_has(c, "b", 7));
	ck_assert_int_eq(f.live, 1);
	struct voter v = {0};
	tf_graph_set_agree(c, vote, &v);
	run(c, "a", 7, &ran); /* captured again, voted */
	ck_assert_int_eq(f.captures, 3);
	ck_assert_int_gt(v.calls, 0);
	ck_assert(tf_graph_has(c, "a", 7));
	tf_graph_set_agree(c, NULL, NULL);
	int calls = v.calls;
	run(c, "c", 7, &ran);
	ck_assert_int_eq(v.calls, calls);
	tf_graph_cache_free(c);
	ck_assert_int_eq(f.live, 0);
}
END_TEST

Suite *suite_graph(void)
{
	Suite *s = suite_create("graph");
	TCase *tc = tcase_create("fake");
	tcase_add_test(tc, hits_and_lru);
	tcase_add_test(tc, max_zero_and_off);
	tcase_add_test(tc, fingerprint_drops_all);
	tcase_add_test(tc, floor_sheds_then_recovers);
	tcase_add_test(tc, floor_hold_keeps);
	tcase_add_test(tc, local_capture_failure);
	tcase_add_test(tc, peer_capture_failure_frees_exec);
	tcase_add_test(tc, declined_capture_stays_on);
	tcase_add_test(tc, vote_error_frees_exec);
	tcase_add_test(tc, ranks_agree);
	tcase_add_test(tc, has_forget_set_agree);
	suite_add_tcase(s, tc);
	return s;
}
