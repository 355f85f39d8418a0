/* check_ranks.c: tensor-parallel ranks as processes (compute/ranks.h) on a
 * tiny synthetic pack, over real TCP on loopback:
 * - rank 0 in the test, rank 1 a forked process following it: every
 *   model call rank 0 makes (sequence new, fork, rollback and free, a
 *   forward with logits, one with sampling) gives logits and tokens equal
 *   to the bit to the in-process group's (compute/group.h) at worlds 2
 *   and 4 (ranks 1..3 each a process), and the stop plan ends the
 *   followers with exit 0;
 * - serving settings that differ are refused on both ranks, naming the
 *   line and rank 0's value;
 * - a replayed sequence call whose result differs from rank 0's is a
 *   mismatch; a malformed plan is refused;
 * - plans round-trip: what tf_ranks_encode writes, tf_ranks_replay runs. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compute/group.h"
#include "compute/model.h"
#include "compute/ranks.h"
#include "compute/sample.h"
#include "fabric/settings.h"
#include "tinypack.h"

static struct tinypack pk;
static char env_world[8] = "2", env_rank[8], env_port[16];

static const char *fake_env(const char *name)
{
	if (!strcmp(name, "TF_TP_WORLD"))
		return env_world;
	if (!strcmp(name, "TF_TP_RANK"))
		return env_rank;
	if (!strcmp(name, "TF_COMM_BACKEND"))
		return "host";
	if (!strcmp(name, "TF_TP_PLAN_PORT"))
		return env_port;
	if (!strcmp(name, "TF_TP_MASTER"))
		return "127.0.0.1";
	if (!strcmp(name, "TF_TP_PLAN_TIMEOUT"))
		return "20";
	if (!strcmp(name, "TF_TP_FAILFAST_GRACE_S"))
		return "0.2";
	return NULL;
}

static struct tf_model_opts model_opts(void)
{
	return (struct tf_model_opts){.threads = 1, .slots = 4, .max_positions = 64,
				      .window_fmt = TF_KV_BF16, .pool_fmt = TF_KV_BF16,
				      .index_fmt = TF_KV_BF16};
}

static struct tf_ranks *new_rank(int rank, int port)
{
	snprintf(env_rank, sizeof env_rank, "%d", rank);
	snprintf(env_port, sizeof env_port, "%d", port);
	struct tf_fabric_settings s;
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_OK);
	struct tf_ranks *r;
	ck_assert_int_eq(tf_ranks_new(&s, &r), TF_OK);
	return r;
}

/* Rank 0 listening on a free port; *port gets it. */
static struct tf_ranks *listen_rank0(int *port)
{
	struct tf_ranks *r = new_rank(0, 0);
	ck_assert_int_eq(tf_ranks_listen(r, port), TF_OK);
	return r;
}

/* A forked follower: connects (agreeing on text), loads, follows; its
 * exit code is the status's (0 after the stop plan). */
static pid_t fork_follower_rank(int rank, int port, const char *text)
{
	pid_t p = fork();
	ck_assert_int_ge(p, 0);
	if (p)
		return p;
	struct tf_ranks *r = new_rank(rank, port);
	tf_status st = tf_ranks_connect(r, text, "serving settings");
	if (st) {
		fprintf(stderr, "follower: %s\n", tf_errmsg(st));
		_exit(st == TF_ERR_CONFIG ? 78 : 70);
	}
	struct tf_model_opts o = model_opts();
	struct tf_model *m;
	if ((st = tf_ranks_model_open(r, pk.pack, &o, &m)))
		tf_ranks_fatal(r, "open", tf_errmsg(st));
	st = tf_ranks_follow(r, m);
	tf_model_free(m);
	tf_ranks_free(r);
	_exit(st ? 70 : 0);
}

static pid_t fork_follower(int port, const char *text)
{
	return fork_follower_rank(1, port, text);
}

static int reap(pid_t p)
{
	int status;
	ck_assert_int_eq(waitpid(p, &status, 0), p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

enum { T = 10, STEPS = 4 };
static const int32_t ids[T] = {1, 17, 300, 42, 42, 7, 99, 511, 3, 250};

/* The calls the engine makes, on a model (ranks: rank 0's) or a group:
 * prefill, a fork, greedy decode on both, a rollback, a sampled batch.
 * out: logits of every forward, tokens of the sampled one. */
struct calls {
	tf_status (*seq_new)(void *m, int *seq);
	tf_status (*fork)(void *m, int src, int *dst);
	tf_status (*rollback)(void *m, int seq, int64_t pos);
	void (*seq_free)(void *m, int seq);
	tf_status (*forward)(void *m, int R, const int32_t *ids, const int64_t *pos, const int *seq,
			     float *logits);
	uint32_t vocab;
};

static int32_t argmax(const float *l, uint32_t V)
{
	int32_t b = 0;
	for (uint32_t i = 1; i < V; i++)
		if (l[i] > l[b])
			b = (int32_t)i;
	return b;
}

static void run(const struct calls *c, void *m, float *out, int32_t *tokens)
{
	uint32_t V = c->vocab;
	int a, b;
	ck_assert_int_eq(c->seq_new(m, &a), TF_OK);
	int64_t pos[T];
	int sq[T];
	for (int i = 0; i < T; i++)
		pos[i] = i, sq[i] = a;
	ck_assert_int_eq(c->forward(m, T, ids, pos, sq, out), TF_OK);
	ck_assert_int_eq(c->fork(m, a, &b), TF_OK);
	int32_t last[2] = {argmax(out + (size_t)(T - 1) * V, V), 5};
	float *at = out + (size_t)T * V;
	for (int s = 0; s < STEPS; s++, at += 2 * (size_t)V) {
		int64_t p[2] = {T + s, T + s};
		int q[2] = {a, b};
		ck_assert_int_eq(c->forward(m, 2, last, p, q, at), TF_OK);
		last[0] = argmax(at, V), last[1] = argmax(at + V, V);
		tokens[s] = last[0];
	}
	ck_assert_int_eq(c->rollback(m, b, T + 1), TF_OK);
	int64_t p1 = T + 1;
	ck_assert_int_eq(c->forward(m, 1, &last[1], &p1, &b, at), TF_OK);
	c->seq_free(m, b);
	c->seq_free(m, a);
}

static tf_status m_new(void *m, int *s) { return tf_model_seq_new(m, s); }
static tf_status m_fork(void *m, int a, int *b) { return tf_model_seq_fork(m, a, b); }
static tf_status m_rb(void *m, int s, int64_t p) { return tf_model_seq_rollback(m, s, p); }
static void m_free(void *m, int s) { tf_model_seq_free(m, s); }
static tf_status m_fwd(void *m, int R, const int32_t *i, const int64_t *p, const int *s, float *l)
{
	return tf_model_forward(m, R, i, p, s, l);
}
static tf_status g_new(void *g, int *s) { return tf_model_group_seq_new(g, s); }
static tf_status g_fork(void *g, int a, int *b) { return tf_model_group_seq_fork(g, a, b); }
static tf_status g_rb(void *g, int s, int64_t p) { return tf_model_group_seq_rollback(g, s, p); }
static void g_free(void *g, int s) { tf_model_group_seq_free(g, s); }
static tf_status g_fwd(void *g, int R, const int32_t *i, const int64_t *p, const int *s, float *l)
{
	return tf_model_group_forward(g, R, i, p, s, l);
}

START_TEST(processes_equal_group)
{
	int world = 2 << _i;
	snprintf(env_world, sizeof env_world, "%d", world);
	tinypack_make(&pk, "ranks", 5);
	int port;
	struct tf_ranks *r0 = listen_rank0(&port);
	pid_t child[4];
	for (int q = 1; q < world; q++)
		child[q] = fork_follower_rank(q, port, "context 64\n");
	ck_assert_int_eq(tf_ranks_connect(r0, "context 64\n", "serving settings"), TF_OK);
	struct tf_model_opts o = model_opts();
	struct tf_model *m;
	ck_assert_int_eq(tf_ranks_model_open(r0, pk.pack, &o, &m), TF_OK);
	uint32_t V = tf_model_config(m)->vocab;
	size_t rows = T + 2 * STEPS + 1;
	float *a = malloc(rows * V * sizeof *a), *b = malloc(rows * V * sizeof *b);
	int32_t ta[STEPS], tb[STEPS];
	struct calls cm = {m_new, m_fork, m_rb, m_free, m_fwd, V};
	run(&cm, m, a, ta);
	/* a sampled forward goes through the plan with its settings */
	int s;
	ck_assert_int_eq(tf_model_seq_new(m, &s), TF_OK);
	int64_t pos[T];
	int sq[T];
	struct tf_sample_params sp[T];
	int64_t draw[T];
	int32_t tok[T];
	for (int i = 0; i < T; i++)
		pos[i] = i, sq[i] = s, draw[i] = i + 1,
		sp[i] = (struct tf_sample_params){7 + (uint64_t)i, 0.8, 20, 0.95, 0};
	ck_assert_int_eq(tf_model_forward_sample(m, T, ids, pos, sq, sp, draw, tok), TF_OK);
	tf_model_seq_free(m, s);
	ck_assert_uint_gt(tf_ranks_plans(r0), 10);
	tf_model_free(m);
	tf_ranks_free(r0);
	for (int q = 1; q < world; q++)
		ck_assert_int_eq(reap(child[q]), 0);

	struct tf_model_group *g;
	ck_assert_int_eq(tf_model_group_open(pk.pack, world, &o, &g), TF_OK);
	struct calls cg = {g_new, g_fork, g_rb, g_free, g_fwd, V};
	run(&cg, g, b, tb);
	size_t diff = 0;
	for (size_t i = 0; i < rows * V; i++)
		diff += memcmp(&a[i], &b[i], sizeof *a) != 0;
	fprintf(stderr, "world %d as processes vs in-process group: %zu of %zu logits differ, "
		"greedy tokens %d %d %d %d vs %d %d %d %d\n", world, diff, rows * V, ta[0], ta[1], ta[2],
		ta[3], tb[0], tb[1], tb[2], tb[3]);
	ck_assert_uint_eq(diff, 0);
	ck_assert(!memcmp(ta, tb, sizeof ta));
	/* the sampled tokens equal tf_sample_row over the group's logits */
	float *lg = malloc((size_t)T * V * sizeof *lg);
	ck_assert_int_eq(tf_model_group_seq_new(g, &s), TF_OK);
	ck_assert_int_eq(tf_model_group_forward(g, T, ids, pos, sq, lg), TF_OK);
	struct tf_sampler *smp;
	ck_assert_int_eq(tf_sampler_new(V, &smp), TF_OK);
	for (int i = 0; i < T; i++)
		ck_assert_int_eq(tf_sample_row(smp, lg + (size_t)i * V, V, (uint64_t)draw[i], &sp[i]),
				 tok[i]);
	tf_sampler_free(smp);
	free(lg);
	tf_model_group_free(g);
	free(a), free(b);
	tinypack_drop(&pk);
	snprintf(env_world, sizeof env_world, "2");
}
END_TEST

START_TEST(settings_refused)
{
	tinypack_make(&pk, "ranks", 5);
	int port;
	struct tf_ranks *r0 = listen_rank0(&port);
	pid_t child = fork_follower(port, "engine cpu\ncontext 2048\n");
	tf_status st = tf_ranks_connect(r0, "engine cpu\ncontext 4096\n", "serving settings");
	ck_assert_int_eq(st, TF_ERR_CONFIG);
	const char *msg = tf_errmsg(st);
	fprintf(stderr, "rank 0: %s\n", msg);
	ck_assert_ptr_nonnull(strstr(msg, "'context 2048' vs rank 0's 'context 4096'"));
	ck_assert_int_eq(reap(child), 78);
	tf_ranks_free(r0);
	tinypack_drop(&pk);
}
END_TEST

START_TEST(replay_checks)
{
	tinypack_make(&pk, "ranks", 5);
	struct tf_model_opts o = model_opts();
	struct tf_model *m;
	ck_assert_int_eq(tf_model_open(pk.pack, &o, &m), TF_OK);
	struct tf_ranks_scratch sc = {0};
	/* a new sequence: slot 0 here; rank 0 said 1 */
	int64_t bad[] = {TF_MODEL_OP_SEQ_NEW, TF_OK, 1};
	ck_assert_int_eq(tf_ranks_replay(m, bad, 3, &sc), TF_ERR_MISMATCH);
	fprintf(stderr, "%s\n", tf_errmsg(TF_ERR_MISMATCH));
	/* encode and replay: a fork of slot 0 into 1, a forward of 2 rows */
	int64_t *w = NULL;
	size_t n = 0, cap = 0;
	struct tf_model_call c = {.op = TF_MODEL_OP_SEQ_FORK, .src = 0, .dst = 1};
	ck_assert_int_eq(tf_ranks_encode(&c, &w, &n, &cap), TF_OK);
	ck_assert_int_eq(tf_ranks_replay(m, w, n, &sc), TF_OK);
	int64_t pos[2] = {0, 1};
	int sq[2] = {1, 1};
	c = (struct tf_model_call){.op = TF_MODEL_OP_FORWARD, .R = 2, .ids = ids, .pos = pos, .seq = sq};
	n = 0;
	ck_assert_int_eq(tf_ranks_encode(&c, &w, &n, &cap), TF_OK);
	ck_assert_uint_eq(n, 2 + 3 * 2);
	ck_assert_int_eq(tf_ranks_replay(m, w, n, &sc), TF_OK);
	ck_assert_int_eq(tf_model_seq_len(m, 1), 2);
	/* short plans and unknown ops */
	ck_assert_int_eq(tf_ranks_replay(m, w, 4, &sc), TF_ERR_FORMAT);
	int64_t odd[] = {99};
	ck_assert_int_eq(tf_ranks_replay(m, odd, 1, &sc), TF_ERR_FORMAT);
	int64_t none[] = {TF_MODEL_OP_SEQ_FORK, 0};
	ck_assert_int_eq(tf_ranks_replay(m, none, 2, &sc), TF_ERR_FORMAT);
	free(w);
	tf_ranks_scratch_release(&sc);
	tf_model_free(m);
	tinypack_drop(&pk);
}
END_TEST

Suite *suite_ranks(void)
{
	Suite *s = suite_create("ranks");
	TCase *tc = tcase_create("tiny");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, processes_equal_group, 0, 2);
	tcase_add_test(tc, settings_refused);
	tcase_add_test(tc, replay_checks);
	suite_add_tcase(s, tc);
	return s;
}
