/* check_engine.c: unit tests of libcore/engine: rounds, chunked prefill,
 * cancel, failure isolation, halt, admission order, concurrent == solo, and
 * the stub backend (its markers and its constrained draws). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "engine/engine.h"
#include "engine/planner.h"
#include "engine/stub.h"
#include "grammar/grammar.h"

/* A test backend. prompt[0] says what to do: 0 plain, 666 the last piece
 * fails, 777 the forward fails once it decodes this lane, 888 begin
 * refuses; prompt[1] > 0 ends with EOS after that many tokens. Tokens depend
 * only on the prompt, the seed and the position. It records the order of
 * begins and whether a round mixed pieces with rows. */
#define EOS 1
struct tb {
	pthread_mutex_t mu;
	int begun[64];
	int nbegun;
	int mixed_rounds, piece_rounds;
	useconds_t delay_us;
};

static int32_t tb_token(const struct tf_lane *l, uint32_t k)
{
	uint64_t h = l->params->seed;
	for (uint32_t i = 0; i < l->nprompt; i++)
		h = h * 1000003u + (uint32_t)l->prompt[i];
	if (l->nprompt > 1 && l->prompt[1] > 0 && k == (uint32_t)l->prompt[1])
		return EOS;
	return (int32_t)(10 + (h + k * 7919u) % 5000u);
}

static tf_status tb_begin(void *ctx, struct tf_lane *l)
{
	struct tb *b = ctx;
	if (l->prompt[0] == 888)
		return tf_err(TF_ERR_ARG, "test backend refuses 888");
	pthread_mutex_lock(&b->mu);
	if (b->nbegun < 64)
		b->begun[b->nbegun++] = l->prompt[l->nprompt - 1];
	pthread_mutex_unlock(&b->mu);
	l->state = tf_calloc(1, sizeof(uint32_t)); /* tokens made */
	return TF_OK;
}

static tf_status tb_forward(void *ctx, struct tf_engine_round *r)
{
	struct tb *b = ctx;
	if (b->delay_us)
		usleep(b->delay_us);
	pthread_mutex_lock(&b->mu);
	b->piece_rounds += r->npieces > 0;
	b->mixed_rounds += r->npieces > 0 && r->nrows > 0;
	pthread_mutex_unlock(&b->mu);
	for (size_t i = 0; i < r->npieces; i++) {
		struct tf_engine_piece *p = &r->pieces[i];
		ck_assert_uint_eq(p->start, p->lane->filled);
		ck_assert_uint_le(p->end, p->lane->nprompt);
		if (p->end < p->lane->nprompt)
			continue;
		if (p->lane->prompt[0] == 666) {
			p->st = tf_err(TF_ERR_INTERNAL, "piece failed");
			continue;
		}
		uint32_t *made = p->lane->state;
		p->tokens[0] = tb_token(p->lane, (*made)++);
		p->ntokens = 1;
	}
	for (size_t i = 0; i < r->nrows; i++) {
		struct tf_lane *l = r->rows[i].lane;
		if (l->prompt[0] == 777)
			return tf_err(TF_ERR_INTERNAL, "forward failed");
		uint32_t *made = l->state;
		r->rows[i].tokens[0] = tb_token(l, (*made)++);
		r->rows[i].ntokens = 1;
	}
	return TF_OK;
}

static void tb_end(void *ctx, struct tf_lane *l)
{
	free(l->state);
	l->state = NULL;
}

static struct tb *tb_now;

static struct tf_engine *start(struct tf_planner_config pc, useconds_t delay)
{
	static struct tb b;
	memset(&b, 0, sizeof(b));
	pthread_mutex_init(&b.mu, NULL);
	b.delay_us = delay;
	tb_now = &b;
	struct tf_engine_backend be = {"test", &b, EOS, tb_begin, tb_forward, tb_end, NULL, NULL, false};
	struct tf_planner pl;
	ck_assert_int_eq(tf_planner_default(&pc, &pl), TF_OK);
	struct tf_engine *e;
	ck_assert_int_eq(tf_engine_new(&be, &pl, &e), TF_OK);
	return e;
}

static struct tf_engine_params params(uint32_t max, uint64_t seed)
{
	return (struct tf_engine_params){.max_tokens = max, .stop_eos = true, .seed = seed};
}

/* Read a job to its end; returns the token count. */
static size_t drain(struct tf_engine_job *j, int32_t *out, size_t cap)
{
	size_t n = 0;
	bool done = false;
	while (!done) {
		int32_t t[64];
		size_t k = tf_engine_job_read(j, t, 64, 1000, &done);
		for (size_t i = 0; i < k; i++) {
			if (n < cap)
				out[n] = t[i];
			n++;
		}
	}
	return n;
}

static int32_t *prompt_of(size_t n, int32_t first, int32_t eos_after, int32_t tag)
{
	int32_t *p = tf_calloc(n, sizeof(*p));
	for (size_t i = 0; i < n; i++)
		p[i] = (int32_t)(100 + i);
	p[0] = first;
	if (n > 1)
		p[1] = eos_after;
	p[n - 1] = tag;
	return p;
}

START_TEST(tokens_in_order_and_ends)
{
	struct tf_engine *e = start((struct tf_planner_config){0}, 0);
	int32_t *p = prompt_of(10, 0, 0, 1);
	struct tf_engine_params q = params(20, 5);
	struct tf_engine_job *j;
	ck_assert_int_eq(tf_engine_submit(e, p, 10, &q, &j), TF_OK);
	int32_t out[64];
	ck_assert_uint_eq(drain(j, out, 64), 20);
	struct tf_engine_result r;
	tf_engine_job_result(j, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_LENGTH);
	ck_assert_uint_eq(r.completion, 20);
	ck_assert_uint_eq(r.prompt, 10);
	/* In order: the same as the backend's sequence. */
	struct tf_lane l = {.prompt = p, .nprompt = 10, .params = &q};
	for (uint32_t k = 0; k < 20; k++)
		ck_assert_int_eq(out[k], tb_token(&l, k));
	tf_engine_job_free(j);
	/* EOS ends it and is not delivered. */
	free(p);
	p = prompt_of(10, 0, 5, 2);
	ck_assert_int_eq(tf_engine_submit(e, p, 10, &q, &j), TF_OK);
	ck_assert_uint_eq(drain(j, out, 64), 5);
	tf_engine_job_result(j, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_EOS);
	tf_engine_job_free(j);
	free(p);
	tf_engine_close(e);
}
END_TEST

START_TEST(chunked_prefill_shares_rounds)
{
	struct tf_engine *e = start((struct tf_planner_config){.round_tokens = 64, .min_piece = 16}, 200);
	int32_t *a = prompt_of(8, 0, 0, 1), *b = prompt_of(2000, 0, 0, 2);
	struct tf_engine_params qa = params(1000000, 1), qb = params(3, 1);
	struct tf_engine_job *ja, *jb;
	ck_assert_int_eq(tf_engine_submit(e, a, 8, &qa, &ja), TF_OK);
	/* a is decoding (its first token is out) when b arrives, and goes on
	 * until cancelled after b ends, however slow the machine. */
	int32_t out[128];
	bool done = false;
	size_t got = 0;
	while (!got && !done)
		got = tf_engine_job_read(ja, out, 1, 1000, &done);
	ck_assert(!done);
	ck_assert_int_eq(tf_engine_submit(e, b, 2000, &qb, &jb), TF_OK);
	ck_assert_uint_eq(drain(jb, out, 128), 3);
	tf_engine_job_cancel(ja);
	drain(ja, out, 128);
	struct tf_engine_result r;
	tf_engine_job_result(jb, &r);
	/* 2000 prompt tokens at <= 64 a round: many rounds, every one shared
	 * with a's decode row. */
	ck_assert_uint_ge(r.rounds, 2000 / 64);
	pthread_mutex_lock(&tb_now->mu);
	ck_assert_int_ge(tb_now->piece_rounds, 2000 / 64);
	ck_assert_int_eq(tb_now->mixed_rounds, tb_now->piece_rounds - 1);
	pthread_mutex_unlock(&tb_now->mu);
	tf_engine_job_free(ja);
	tf_engine_job_free(jb);
	free(a);
	free(b);
	tf_engine_close(e);
}
END_TEST

START_TEST(cancel_mid_prefill_and_decode)
{
	struct tf_engine *e = start((struct tf_planner_config){.round_tokens = 32, .min_piece = 32}, 1000);
	int32_t *a = prompt_of(4000, 0, 0, 1), *b = prompt_of(4, 0, 0, 2);
	struct tf_engine_params q = params(100000, 1);
	struct tf_engine_job *ja, *jb;
	ck_assert_int_eq(tf_engine_submit(e, a, 4000, &q, &ja), TF_OK);
	ck_assert_int_eq(tf_engine_submit(e, b, 4, &q, &jb), TF_OK);
	usleep(30000);
	tf_engine_job_cancel(ja); /* mid-prefill: 4000 tokens need 125 rounds */
	int32_t t[16];
	bool done = false;
	while (tf_engine_job_read(jb, t, 16, 1000, &done) == 0 && !done)
		;
	tf_engine_job_cancel(jb); /* decoding */
	int32_t out[8];
	drain(ja, out, 8);
	drain(jb, out, 8);
	struct tf_engine_result r;
	tf_engine_job_result(ja, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_CANCELLED);
	ck_assert_uint_eq(r.completion, 0);
	tf_engine_job_result(jb, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_CANCELLED);
	ck_assert_uint_lt(r.completion, 100000);
	tf_engine_job_free(ja);
	tf_engine_job_free(jb);
	free(a);
	free(b);
	tf_engine_close(e);
}
END_TEST

START_TEST(failures_are_isolated)
{
	struct tf_engine *e = start((struct tf_planner_config){.context = 1000}, 100);
	int32_t *ok = prompt_of(10, 0, 0, 1), *bad = prompt_of(10, 666, 0, 2),
		*big = prompt_of(990, 0, 0, 3), *no = prompt_of(10, 888, 0, 4);
	struct tf_engine_params q = params(50, 1);
	struct tf_engine_job *j1, *j2, *j3, *j4;
	ck_assert_int_eq(tf_engine_submit(e, ok, 10, &q, &j1), TF_OK);
	ck_assert_int_eq(tf_engine_submit(e, bad, 10, &q, &j2), TF_OK);
	ck_assert_int_eq(tf_engine_submit(e, big, 990, &q, &j3), TF_OK);
	ck_assert_int_eq(tf_engine_submit(e, no, 10, &q, &j4), TF_OK);
	int32_t out[64];
	ck_assert_uint_eq(drain(j1, out, 64), 50);
	drain(j2, out, 64);
	drain(j3, out, 64);
	drain(j4, out, 64);
	struct tf_engine_result r;
	tf_engine_job_result(j1, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_LENGTH);
	tf_engine_job_result(j2, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_FAILED);
	ck_assert_str_eq(r.why, "piece failed");
	tf_engine_job_result(j3, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_FAILED);
	ck_assert_ptr_nonnull(strstr(r.why, "exceed the context of 1000"));
	tf_engine_job_result(j4, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_FAILED);
	ck_assert_str_eq(r.why, "test backend refuses 888");
	tf_engine_job_free(j1);
	tf_engine_job_free(j2);
	tf_engine_job_free(j3);
	tf_engine_job_free(j4);
	/* A failed forward fails every running request. */
	int32_t *boom = prompt_of(10, 777, 0, 5), *other = prompt_of(10, 0, 0, 6);
	struct tf_engine_params qq = params(900, 1);
	ck_assert_int_eq(tf_engine_submit(e, other, 10, &qq, &j1), TF_OK);
	usleep(20000);
	ck_assert_int_eq(tf_engine_submit(e, boom, 10, &q, &j2), TF_OK);
	drain(j1, out, 0);
	drain(j2, out, 0);
	tf_engine_job_result(j1, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_FAILED);
	ck_assert_str_eq(r.why, "forward failed");
	tf_engine_job_result(j2, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_FAILED);
	tf_engine_job_free(j1);
	tf_engine_job_free(j2);
	free(ok), free(bad), free(big), free(no), free(boom), free(other);
	tf_engine_close(e);
}
END_TEST

START_TEST(halt_fails_everything)
{
	struct tf_engine *e = start((struct tf_planner_config){.max_lanes = 2}, 1000);
	struct tf_engine_params q = params(1000000, 1);
	struct tf_engine_job *j[4];
	int32_t *p[4];
	for (int i = 0; i < 4; i++) {
		p[i] = prompt_of(i == 3 ? 100000 : 5, 0, 0, i);
		ck_assert_int_eq(tf_engine_submit(e, p[i], i == 3 ? 100000 : 5, &q, &j[i]), TF_OK);
	}
	usleep(50000);
	tf_engine_halt(e, "server restarting: retry shortly");
	int32_t out[1];
	for (int i = 0; i < 4; i++) {
		drain(j[i], out, 0);
		struct tf_engine_result r;
		tf_engine_job_result(j[i], &r);
		ck_assert_int_eq(r.end, TF_ENGINE_FAILED);
		ck_assert(r.halted);
		ck_assert_str_eq(r.why, "server restarting: retry shortly");
		tf_engine_job_free(j[i]);
	}
	struct tf_engine_job *late;
	ck_assert_int_eq(tf_engine_submit(e, p[0], 5, &q, &late), TF_OK);
	drain(late, out, 0);
	struct tf_engine_result r;
	tf_engine_job_result(late, &r);
	ck_assert(r.halted);
	tf_engine_job_free(late);
	for (int i = 0; i < 4; i++)
		free(p[i]);
	tf_engine_close(e);
}
END_TEST

START_TEST(foreground_before_background)
{
	struct tf_engine *e = start((struct tf_planner_config){.max_lanes = 1}, 500);
	struct tf_engine_params q = params(20, 1), bg = q;
	bg.background = true;
	int32_t *a = prompt_of(5, 0, 0, 1), *b = prompt_of(5, 0, 0, 2), *c = prompt_of(5, 0, 0, 3);
	struct tf_engine_job *ja, *jb, *jc;
	ck_assert_int_eq(tf_engine_submit(e, a, 5, &q, &ja), TF_OK);
	usleep(5000);
	ck_assert_int_eq(tf_engine_submit(e, b, 5, &bg, &jb), TF_OK);
	ck_assert_int_eq(tf_engine_submit(e, c, 5, &q, &jc), TF_OK);
	int32_t out[32];
	drain(ja, out, 32);
	drain(jb, out, 32);
	drain(jc, out, 32);
	ck_assert_int_eq(tb_now->nbegun, 3);
	ck_assert_int_eq(tb_now->begun[0], 1);
	ck_assert_int_eq(tb_now->begun[1], 3); /* the foreground one first */
	ck_assert_int_eq(tb_now->begun[2], 2);
	tf_engine_job_free(ja), tf_engine_job_free(jb), tf_engine_job_free(jc);
	free(a), free(b), free(c);
	tf_engine_close(e);
}
END_TEST

START_TEST(concurrent_equals_solo)
{
	struct tf_engine *e = start((struct tf_planner_config){.round_tokens = 48}, 100);
	int32_t *p = prompt_of(300, 0, 0, 9);
	struct tf_engine_params q = params(64, 42);
	struct tf_engine_job *solo, *many[8];
	int32_t ref[64], got[64];
	ck_assert_int_eq(tf_engine_submit(e, p, 300, &q, &solo), TF_OK);
	ck_assert_uint_eq(drain(solo, ref, 64), 64);
	tf_engine_job_free(solo);
	for (int i = 0; i < 8; i++) {
		int32_t *o = prompt_of(50 + 37 * i, 0, 0, 20 + i);
		struct tf_engine_params oq = params(30, (uint64_t)i);
		ck_assert_int_eq(tf_engine_submit(e, i == 4 ? p : o, i == 4 ? 300 : 50 + 37 * (size_t)i,
						  i == 4 ? &q : &oq, &many[i]), TF_OK);
		free(o);
	}
	for (int i = 0; i < 8; i++) {
		size_t n = drain(many[i], got, 64);
		if (i == 4) {
			ck_assert_uint_eq(n, 64);
			ck_assert(!memcmp(got, ref, sizeof(ref)));
		}
		tf_engine_job_free(many[i]);
	}
	free(p);
	tf_engine_close(e);
}
END_TEST

/* The stub under a byte tokenizer. */
static tf_status bytes_decode(void *ctx, const int32_t *ids, size_t n, struct tf_buf *out)
{
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= 0 && ids[i] < 256 && tf_buf_putc(out, (char)ids[i]))
			return TF_ERR_NOMEM;
	return TF_OK;
}

static tf_status bytes_encode(void *ctx, const char *t, size_t n, int32_t **ids, size_t *nids)
{
	*ids = tf_alloc_array(n ? n : 1, sizeof(**ids));
	for (size_t i = 0; i < n; i++)
		(*ids)[i] = (unsigned char)t[i];
	*nids = n;
	return TF_OK;
}

static struct tf_engine *stub_engine(void)
{
	struct tf_stub_config c = {.text = {NULL, bytes_decode, bytes_encode, 256}, .token_ms = 1,
				   .wait_ms = 100};
	struct tf_engine_backend be;
	struct tf_planner pl;
	ck_assert_int_eq(tf_stub_new(&c, &be), TF_OK);
	ck_assert_int_eq(tf_planner_default(NULL, &pl), TF_OK);
	struct tf_engine *e;
	ck_assert_int_eq(tf_engine_new(&be, &pl, &e), TF_OK);
	return e;
}

static char *stub_reply(struct tf_engine *e, const char *prompt, uint32_t max,
			struct tf_engine_result *r)
{
	int32_t ids[256];
	size_t n = strlen(prompt);
	for (size_t i = 0; i < n; i++)
		ids[i] = (unsigned char)prompt[i];
	struct tf_engine_params q = params(max, 3);
	struct tf_engine_job *j;
	ck_assert_int_eq(tf_engine_submit(e, ids, n, &q, &j), TF_OK);
	int32_t out[4096];
	size_t k = drain(j, out, 4096);
	char *s = tf_calloc(k + 1, 1);
	for (size_t i = 0; i < k; i++)
		s[i] = (char)out[i];
	tf_engine_job_result(j, r);
	static char why[256]; /* r->why is the job's: keep a copy past the free */
	snprintf(why, sizeof(why), "%s", r->why);
	r->why = why;
	tf_engine_job_free(j);
	return s;
}

START_TEST(stub_markers)
{
	struct tf_engine *e = stub_engine();
	struct tf_engine_result r;
	char *s = stub_reply(e, "user: hi @short\nassistant:", 100, &r);
	ck_assert_str_eq(s, "Short reply.");
	ck_assert_int_eq(r.end, TF_ENGINE_EOS);
	free(s);
	s = stub_reply(e, "user: hi @think\nassistant:<think>", 100, &r);
	ck_assert_str_eq(s, "Let me think about the greeting.</think>Hello there!");
	free(s);
	s = stub_reply(e, "@long", 30, &r);
	ck_assert_uint_eq(strlen(s), 30);
	ck_assert_int_eq(r.end, TF_ENGINE_LENGTH);
	free(s);
	s = stub_reply(e, "@wait", 100, &r);
	ck_assert_str_eq(s, "Short reply.");
	ck_assert_double_ge(r.ttft_s, 0.1);
	free(s);
	s = stub_reply(e, "@fail", 100, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_FAILED);
	ck_assert_ptr_nonnull(strstr(r.why, "@fail"));
	free(s);
	tf_engine_close(e);
}
END_TEST

static const uint8_t *byte_of(void *ctx, uint32_t id, size_t *len)
{
	static uint8_t b[256];
	if (id >= 256)
		return NULL; /* end-of-sequence */
	b[id] = (uint8_t)id;
	*len = 1;
	return &b[id];
}

/* A constrained stub reply: prompt, seed and the thinking prompt's
 * grammar_after ('<' ends the reasoning here, or -1). */
static char *stub_constrained(struct tf_engine *e, const struct tf_gvocab *v, const char *prompt,
			      uint64_t seed, int32_t after, struct tf_engine_result *r)
{
	struct tf_grammar *g;
	ck_assert_int_eq(tf_grammar_regex(v, "[A-Z]{2}-[0-9]{3}( ok| no)?", 27, &g), TF_OK);
	int32_t ids[256];
	size_t n = strlen(prompt);
	for (size_t i = 0; i < n; i++)
		ids[i] = (unsigned char)prompt[i];
	struct tf_engine_params q = params(100, seed);
	q.grammar = g; /* the engine's now */
	q.grammar_after = after;
	struct tf_engine_job *j;
	ck_assert_int_eq(tf_engine_submit(e, ids, n, &q, &j), TF_OK);
	int32_t out[256];
	size_t k = drain(j, out, 256);
	char *s = tf_calloc(k + 1, 1);
	for (size_t i = 0; i < k; i++)
		s[i] = (char)out[i];
	tf_engine_job_result(j, r);
	tf_engine_job_free(j);
	return s;
}

START_TEST(stub_constrained_draws)
{
	struct tf_engine *e = stub_engine();
	struct tf_gvocab *v;
	ck_assert_int_eq(tf_gvocab_new(257, byte_of, NULL, &v), TF_OK);
	struct tf_engine_result r;
	char *a = stub_constrained(e, v, "hi", 1, -1, &r);
	ck_assert_int_eq(r.end, TF_ENGINE_EOS);
	ck_assert_uint_eq(strlen(a), 6); /* the end as soon as the grammar allows it */
	ck_assert(a[0] >= 'A' && a[0] <= 'Z' && a[1] >= 'A' && a[1] <= 'Z' && a[2] == '-');
	for (int i = 3; i < 6; i++)
		ck_assert(a[i] >= '0' && a[i] <= '9');
	char *b = stub_constrained(e, v, "hi", 1, -1, &r);
	ck_assert_str_eq(a, b); /* the seed decides */
	int differ = 0;
	for (uint64_t seed = 2; seed < 6; seed++) {
		char *c = stub_constrained(e, v, "hi", seed, -1, &r);
		differ += strcmp(a, c) != 0;
		free(c);
	}
	ck_assert_int_gt(differ, 0);
	/* thinking: the script's reasoning runs free up to grammar_after */
	char *t = stub_constrained(e, v, "@think<think>", 1, '<', &r);
	const char *lead = "Let me think about the greeting.<";
	ck_assert_int_eq(strncmp(t, lead, strlen(lead)), 0);
	ck_assert_uint_eq(strlen(t), strlen(lead) + 6);
	ck_assert_int_eq(r.end, TF_ENGINE_EOS);
	free(a);
	free(b);
	free(t);
	tf_engine_close(e);
	tf_gvocab_free(v);
}
END_TEST

START_TEST(planner_default_policy)
{
	struct tf_planner pl;
	struct tf_planner_config c = {.round_tokens = 100, .max_lanes = 2, .min_piece = 10, .context = 50};
	ck_assert_int_eq(tf_planner_default(&c, &pl), TF_OK);
	struct tf_engine_params fg = params(10, 1), bg = fg;
	bg.background = true;
	int32_t ids[64] = {0};
	struct tf_lane a = {.id = 1, .prompt = ids, .nprompt = 60, .params = &fg};
	struct tf_lane b = {.id = 2, .prompt = ids, .nprompt = 30, .params = &bg};
	struct tf_lane d = {.id = 3, .prompt = ids, .nprompt = 30, .params = &fg};
	char why[128] = "";
	/* Admission: too long for the context is refused with words; full waits. */
	ck_assert_int_eq(pl.admit(pl.ctx, &a, 0, why, sizeof(why)), TF_PLAN_REFUSE);
	ck_assert_ptr_nonnull(strstr(why, "exceed the context of 50"));
	ck_assert_int_eq(pl.admit(pl.ctx, &b, 1, why, sizeof(why)), TF_PLAN_ADMIT);
	ck_assert_int_eq(pl.admit(pl.ctx, &b, 2, why, sizeof(why)), TF_PLAN_WAIT);
	/* Decode rows first: 70 rows leave 30 of the 100 tokens, shared evenly,
	 * foreground before background whatever the order given. */
	struct tf_lane *filling[] = {&b, &d};
	struct tf_engine_piece pc[2];
	size_t n = pl.plan(pl.ctx, filling, 2, 70, pc, 2);
	ck_assert_uint_eq(n, 2);
	ck_assert_ptr_eq(pc[0].lane, &d);
	ck_assert_uint_eq(pc[0].end - pc[0].start, 15);
	ck_assert_ptr_eq(pc[1].lane, &b);
	ck_assert_uint_eq(pc[1].end - pc[1].start, 15);
	/* Rows over the budget still leave min_piece for prompts. */
	n = pl.plan(pl.ctx, filling, 2, 500, pc, 2);
	ck_assert_uint_eq(n, 1);
	ck_assert_uint_eq(pc[0].end - pc[0].start, 10);
	/* Fairness: of two foreground prompts, the least recently served goes first. */
	struct tf_lane e = d, f = d;
	e.id = 4, e.served = 9;
	f.id = 5, f.served = 3;
	struct tf_lane *two[] = {&e, &f};
	n = pl.plan(pl.ctx, two, 2, 95, pc, 2);
	ck_assert_uint_eq(n, 1);
	ck_assert_ptr_eq(pc[0].lane, &f);
	/* A piece never runs past the prompt, and starts where it is filled. */
	f.filled = 25;
	n = pl.plan(pl.ctx, two, 2, 0, pc, 2);
	ck_assert_uint_eq(n, 2);
	ck_assert_ptr_eq(pc[0].lane, &f);
	ck_assert_uint_eq(pc[0].start, 25);
	ck_assert_uint_eq(pc[0].end, 30);
	pl.free(pl.ctx);
}
END_TEST

/* With align, a piece stops at the next multiple of it, so a prompt runs in
 * the same pieces from any multiple on. */
START_TEST(planner_aligned_pieces)
{
	struct tf_planner pl;
	struct tf_planner_config c = {.round_tokens = 2048, .align = 256};
	ck_assert_int_eq(tf_planner_default(&c, &pl), TF_OK);
	struct tf_engine_params fg = params(10, 1);
	int32_t ids[8] = {0};
	struct tf_lane a = {.id = 1, .prompt = ids, .nprompt = 1000, .params = &fg};
	struct tf_lane *one[] = {&a};
	struct tf_engine_piece pc[1];
	uint32_t ends[] = {256, 512, 768, 1000}, at = 0;
	for (int k = 0; k < 4; k++) {
		ck_assert_uint_eq(pl.plan(pl.ctx, one, 1, 0, pc, 1), 1);
		ck_assert_uint_eq(pc[0].start, at);
		ck_assert_uint_eq(pc[0].end, ends[k]);
		a.filled = at = pc[0].end;
	}
	a.filled = 100; /* from anywhere: up to the next multiple */
	ck_assert_uint_eq(pl.plan(pl.ctx, one, 1, 0, pc, 1), 1);
	ck_assert_uint_eq(pc[0].end, 256);
	a.filled = 250; /* a small share still stops there */
	ck_assert_uint_eq(pl.plan(pl.ctx, one, 1, 2040, pc, 1), 1);
	ck_assert_uint_eq(pc[0].end, 256);
	pl.free(pl.ctx);
}
END_TEST

Suite *suite_engine(void)
{
	Suite *s = suite_create("engine");
	TCase *tc = tcase_create("engine");
	tcase_add_test(tc, tokens_in_order_and_ends);
	tcase_add_test(tc, chunked_prefill_shares_rounds);
	tcase_add_test(tc, cancel_mid_prefill_and_decode);
	tcase_add_test(tc, failures_are_isolated);
	tcase_add_test(tc, halt_fails_everything);
	tcase_add_test(tc, foreground_before_background);
	tcase_add_test(tc, concurrent_equals_solo);
	tcase_add_test(tc, stub_markers);
	tcase_add_test(tc, stub_constrained_draws);
	tcase_add_test(tc, planner_default_policy);
	tcase_add_test(tc, planner_aligned_pieces);
	suite_add_tcase(s, tc);
	return s;
}
