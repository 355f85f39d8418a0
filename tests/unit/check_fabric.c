/* check_fabric.c: the fabric's CPU-testable core: settings, the TCP
 * bootstrap (threaded ranks), host collectives against the reference, plan
 * link framing, and fail-fast between real processes over real TCP. */
#include <check.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/f16.h"
#include "fabric/bootstrap.h"
#include "fabric/comm.h"
#include "fabric/fate.h"
#include "fabric/planlink.h"
#include "fabric/settings.h"

static const char *env_kv[16][2];
static const char *fake_env(const char *name)
{
	for (int i = 0; i < 16 && env_kv[i][0]; i++)
		if (!strcmp(env_kv[i][0], name))
			return env_kv[i][1];
	return NULL;
}

START_TEST(settings_defaults_and_ranges)
{
	struct tf_fabric_settings s;
	memset(env_kv, 0, sizeof env_kv);
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), 0);
	ck_assert_int_eq(s.world, 1);
	ck_assert_int_eq(s.port, 29500);
	ck_assert_int_eq(s.plan_port, 29507);
	ck_assert_int_eq(s.backend, TF_FABRIC_NCCL);
	ck_assert_int_eq(s.mailbox_max_kb, 256);
	ck_assert(s.failfast);
	ck_assert(s.mailbox_p2p);
	ck_assert(s.grace_s == 1.0);
	ck_assert(s.beat_s == 0.1 && s.beat_limit_s == 0.4);
	/* the heartbeat's limit: 0 (off) or at least two periods */
	env_kv[0][0] = "TF_TP_HEARTBEAT_LIMIT_S", env_kv[0][1] = "0.15";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_HEARTBEAT_LIMIT_S=0.15"));
	env_kv[0][1] = "0";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), 0);
	ck_assert(s.beat_limit_s == 0);
	env_kv[1][0] = "TF_TP_HEARTBEAT_S", env_kv[1][1] = "0.001";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_HEARTBEAT_S=0.001"));
	env_kv[1][1] = "1", env_kv[0][1] = "2";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), 0);
	ck_assert(s.beat_s == 1 && s.beat_limit_s == 2);
	memset(env_kv, 0, sizeof env_kv);
	env_kv[0][0] = "TF_TP_MAILBOX_P2P", env_kv[0][1] = "maybe";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_MAILBOX_P2P"));
	env_kv[0][1] = "off";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), 0);
	ck_assert(!s.mailbox_p2p);
	env_kv[0][0] = "TF_TP_MAILBOX_MAX_KB", env_kv[0][1] = "3";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_MAILBOX_MAX_KB=3"));
	env_kv[0][0] = "TF_TP_WORLD", env_kv[0][1] = "2";
	env_kv[1][0] = "TF_TP_RANK", env_kv[1][1] = "2";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_RANK"));
	env_kv[1][1] = " 1 ";
	env_kv[2][0] = "TF_COMM_BACKEND", env_kv[2][1] = "rdma";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_COMM_BACKEND=rdma"));
	/* roce: two ranks, a slot of at most 1 MiB (refused, never clamped). */
	env_kv[2][1] = "roce";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), 0);
	ck_assert_int_eq(s.backend, TF_FABRIC_ROCE);
	ck_assert_int_eq(s.roce_hcas, 2);
	ck_assert_int_eq(s.roce_wire, 0);
	ck_assert(!s.roce_fallback_error);
	env_kv[3][0] = "TF_TP_MAILBOX_MAX_KB", env_kv[3][1] = "1028";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_MAILBOX_MAX_KB=1028"));
	env_kv[3][1] = "1024";
	env_kv[4][0] = "TF_TP_ROCE_WIRE", env_kv[4][1] = "shm";
	env_kv[5][0] = "TF_TP_ROCE_FALLBACK", env_kv[5][1] = "error";
	env_kv[6][0] = "TF_TP_ROCE_HCA", env_kv[6][1] = "mlx5_0:3,mlx5_1";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), 0);
	ck_assert_int_eq(s.mailbox_max_kb, 1024);
	ck_assert_int_eq(s.roce_wire, 1);
	ck_assert(s.roce_fallback_error);
	ck_assert_str_eq(s.roce_hca, "mlx5_0:3,mlx5_1");
	env_kv[6][1] = "a,b,c";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_ROCE_HCA"));
	env_kv[4][0] = "TF_TP_ROCE_WIRE", env_kv[4][1] = "fast";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_ROCE_WIRE"));
	for (int k = 3; k < 7; k++)
		env_kv[k][0] = env_kv[k][1] = NULL;
	env_kv[2][1] = "mailbox";
	env_kv[3][0] = "TF_TP_FAILFAST", env_kv[3][1] = "off";
	env_kv[4][0] = "TF_TP_FAILFAST_GRACE_S", env_kv[4][1] = "61";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	env_kv[4][1] = "0.25";
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), 0);
	ck_assert_int_eq(s.rank, 1);
	ck_assert(!s.failfast);
	ck_assert(s.grace_s == 0.25);
	ck_assert_int_eq(s.backend, TF_FABRIC_MAILBOX);
	env_kv[0][1] = "3"; /* mailbox needs two ranks */
	ck_assert_int_eq(tf_fabric_settings_env(&s, fake_env), TF_ERR_CONFIG);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_CONFIG), "TF_TP_WORLD=2"));
}
END_TEST

START_TEST(settings_digest)
{
	struct tf_fabric_settings a, b;
	memset(env_kv, 0, sizeof env_kv);
	ck_assert_int_eq(tf_fabric_settings_env(&a, fake_env), 0);
	b = a;
	b.rank = 5, b.device = 3, b.port = 1234;
	uint8_t da[32], db[32];
	tf_fabric_settings_digest(&a, da);
	tf_fabric_settings_digest(&b, db);
	ck_assert(!memcmp(da, db, 32)); /* rank, device, port are not agreed */
	b.mailbox_max_kb = 128;
	tf_fabric_settings_digest(&b, db);
	ck_assert(memcmp(da, db, 32));
	uint8_t ba[256], bb[256];
	size_t na = tf_fabric_settings_agreed(&a, ba, sizeof ba), nb = tf_fabric_settings_agreed(&b, bb, sizeof bb);
	char msg[200];
	tf_fabric_settings_diff(ba, na, bb, nb, msg, sizeof msg);
	ck_assert_str_eq(msg, "TF_TP_MAILBOX_MAX_KB (256 vs 128)");
	/* The RoCE wire, fallback and chunk bound are agreed; its HCAs and
	 * traffic class are per host. */
	b = a;
	b.roce_hcas = 1, b.roce_tc = 106;
	snprintf(b.roce_hca, sizeof b.roce_hca, "mlx5_1");
	tf_fabric_settings_digest(&b, db);
	ck_assert(!memcmp(da, db, 32));
	b.roce_chunked_kb = 4096;
	nb = tf_fabric_settings_agreed(&b, bb, sizeof bb);
	tf_fabric_settings_diff(ba, na, bb, nb, msg, sizeof msg);
	ck_assert_str_eq(msg, "TF_TP_ROCE_CHUNKED_KB (0 vs 4096)");
	b = a, b.roce_wire = 1;
	nb = tf_fabric_settings_agreed(&b, bb, sizeof bb);
	tf_fabric_settings_diff(ba, na, bb, nb, msg, sizeof msg);
	ck_assert_str_eq(msg, "TF_TP_ROCE_WIRE (0 vs 1)");
	b = a, b.roce_fallback_error = true;
	nb = tf_fabric_settings_agreed(&b, bb, sizeof bb);
	tf_fabric_settings_diff(ba, na, bb, nb, msg, sizeof msg);
	ck_assert_str_eq(msg, "TF_TP_ROCE_FALLBACK (0 vs 1)");
	/* the heartbeat: one rank's limit must not judge another's period */
	b = a, b.beat_limit_s = 2;
	nb = tf_fabric_settings_agreed(&b, bb, sizeof bb);
	tf_fabric_settings_diff(ba, na, bb, nb, msg, sizeof msg);
	ck_assert_str_eq(msg, "TF_TP_HEARTBEAT_LIMIT_S (400000 vs 2000000)");
	b = a, b.beat_s = 0.2;
	nb = tf_fabric_settings_agreed(&b, bb, sizeof bb);
	tf_fabric_settings_diff(ba, na, bb, nb, msg, sizeof msg);
	ck_assert_str_eq(msg, "TF_TP_HEARTBEAT_S (100000 vs 200000)");
}
END_TEST

/* ---- threaded ranks over real sockets ---- */

struct rank_arg {
	struct tf_fabric_settings s;
	struct tf_boot b;
	tf_status st;
	char msg[300];
	uint8_t gathered[8 * 16];
	size_t lens[8];
	int mode; /* 0 gather, 1 host collectives */
};

static void *rank_main(void *p)
{
	struct rank_arg *a = p;
	a->st = tf_boot_open(&a->b, &a->s);
	if (a->st) {
		snprintf(a->msg, sizeof a->msg, "%s", tf_errmsg(a->st));
		return NULL;
	}
	char mine[16];
	int n = snprintf(mine, sizeof mine, "rank-%d", a->s.rank * 11);
	a->st = tf_boot_all_gather(&a->b, mine, (size_t)n, a->gathered, 16, a->lens);
	if (!a->st && a->mode == 1) {
		struct tf_comm *c;
		tf_comm_host_new(&a->b, &c);
		/* An all-reduce, a gather-v and a desynchronised count. */
		float x[3] = {1.5f * (float)a->s.rank, -2.0f, 1e-3f * (float)(a->s.rank + 1)}, y[3];
		a->st = tf_comm_all_reduce(c, x, y, 3, TF_DTYPE_F32, TF_REDOP_SUM, NULL);
		float want = 0;
		for (int r = 0; r < a->s.world; r++)
			want += 1e-3f * (float)(r + 1);
		if (!a->st && y[2] != want)
			a->st = TF_ERR_MISMATCH;
		if (!a->st) {
			tf_status d = tf_comm_all_reduce(c, x, y, a->s.rank == 1 ? 2 : 3, TF_DTYPE_F32,
							 TF_REDOP_SUM, NULL);
			a->st = d == TF_ERR_MISMATCH ? TF_OK : TF_ERR_INTERNAL;
			snprintf(a->msg, sizeof a->msg, "%s", tf_errmsg(d));
		}
		if (!a->st)
			a->st = tf_comm_barrier(c);
		tf_comm_free(c);
	}
	tf_boot_close(&a->b);
	return NULL;
}

static void base_settings(struct tf_fabric_settings *s, int world)
{
	memset(env_kv, 0, sizeof env_kv);
	ck_assert_int_eq(tf_fabric_settings_env(s, fake_env), 0);
	s->world = world, s->plan_port = 0, s->plan_timeout_s = 10, s->backend = TF_FABRIC_HOST;
	snprintf(s->master, sizeof s->master, "127.0.0.1");
}

static void run_ranks(struct rank_arg *a, int world, int mode)
{
	pthread_t t[8];
	base_settings(&a[0].s, world);
	ck_assert_int_eq(tf_boot_listen(&a[0].b, &a[0].s), 0);
	for (int r = 0; r < world; r++) {
		if (r)
			a[r].s = a[0].s, a[r].s.rank = r, a[r].s.plan_port = a[0].b.port;
		a[r].mode = mode;
	}
	for (int r = 0; r < world; r++)
		pthread_create(&t[r], NULL, rank_main, &a[r]);
	for (int r = 0; r < world; r++)
		pthread_join(t[r], NULL);
}

START_TEST(bootstrap_gather_in_order)
{
	for (int world = 2; world <= 3; world++) {
		struct rank_arg a[3];
		memset(a, 0, sizeof a);
		run_ranks(a, world, 0);
		for (int r = 0; r < world; r++) {
			ck_assert_msg(a[r].st == 0, "rank %d: %s", r, a[r].msg);
			for (int q = 0; q < world; q++) {
				char want[16];
				snprintf(want, sizeof want, "rank-%d", q * 11);
				ck_assert_uint_eq(a[r].lens[q], strlen(want));
				ck_assert(!memcmp(a[r].gathered + 16 * q, want, strlen(want)));
			}
		}
	}
}
END_TEST

START_TEST(bootstrap_settings_mismatch_refused_everywhere)
{
	struct rank_arg a[3];
	memset(a, 0, sizeof a);
	pthread_t t[3];
	base_settings(&a[0].s, 3);
	ck_assert_int_eq(tf_boot_listen(&a[0].b, &a[0].s), 0);
	for (int r = 1; r < 3; r++)
		a[r].s = a[0].s, a[r].s.rank = r, a[r].s.plan_port = a[0].b.port;
	a[2].s.mailbox_max_kb = 64;
	for (int r = 0; r < 3; r++)
		pthread_create(&t[r], NULL, rank_main, &a[r]);
	for (int r = 0; r < 3; r++)
		pthread_join(t[r], NULL);
	for (int r = 0; r < 3; r++) {
		ck_assert_int_eq(a[r].st, TF_ERR_CONFIG);
		ck_assert_msg(strstr(a[r].msg, "rank 2's settings differs from rank 0's: TF_TP_MAILBOX_MAX_KB (64 vs 256)"),
			      "rank %d: %s", r, a[r].msg);
	}
}
END_TEST

START_TEST(host_tcp_collectives_and_desync)
{
	for (int world = 2; world <= 3; world++) {
		struct rank_arg a[3];
		memset(a, 0, sizeof a);
		run_ranks(a, world, 1);
		for (int r = 0; r < world; r++) {
			ck_assert_msg(a[r].st == 0, "rank %d: %d", r, a[r].st);
			ck_assert_msg(strstr(a[r].msg, "desynchronised all-reduce: rank 1 has count 2"),
				      "rank %d: %s", r, a[r].msg);
		}
	}
}
END_TEST

/* ---- host collectives between threads, against the reference ---- */

struct th_arg {
	struct tf_comm *c;
	int world, rank;
	int failures;
	tf_status desync;
};

static void gen(uint8_t *p, size_t n, int r, int c)
{
	uint32_t x = 2463534242u ^ (uint32_t)(r * 977 + c * 31337);
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 17, x ^= x << 5;
		p[i] = (uint8_t)x;
	}
	/* Keep floats finite: clear the exponent's top bit of every 16-bit word. */
	for (size_t i = 1; i < n; i += 2)
		p[i] &= 0x3f;
}

static void *th_main(void *p)
{
	struct th_arg *a = p;
	static const enum tf_dtype dts[] = {TF_DTYPE_F32, TF_DTYPE_BF16, TF_DTYPE_F16, TF_DTYPE_I32};
	int c = 0;
	for (size_t n = 6; n <= 70000; n = n * 7 + 3) {
		for (int d = 0; d < 4; d++)
			for (int op = 0; op < 3; op++, c++) {
				size_t es = tf_comm_dtype_size(dts[d]), count = n / es ? n / es : 1;
				uint8_t *in[3], *want = malloc(count * es), *got = malloc(count * es);
				for (int r = 0; r < a->world; r++)
					in[r] = malloc(count * es), gen(in[r], count * es, r, c);
				tf_comm_reduce(want, (const void *const *)in, a->world, count, dts[d], op);
				memcpy(got, in[a->rank], count * es); /* in place */
				if (tf_comm_all_reduce(a->c, got, got, count, dts[d], op, NULL) ||
				    memcmp(got, want, count * es))
					a->failures++;
				for (int r = 0; r < a->world; r++)
					free(in[r]);
				free(want), free(got);
			}
		/* all-gather-v with unequal lengths */
		uint32_t lens[3];
		uint8_t *in = malloc(n), *out = calloc((size_t)a->world, n);
		for (int r = 0; r < a->world; r++)
			lens[r] = (uint32_t)(n - (size_t)r);
		gen(in, n, a->rank, c);
		if (tf_comm_all_gather_v(a->c, in, out, n, lens, NULL))
			a->failures++;
		for (int r = 0; r < a->world; r++) {
			uint8_t *w = malloc(n);
			gen(w, n, r, c);
			if (memcmp(out + (size_t)r * n, w, lens[r]))
				a->failures++;
			free(w);
		}
		free(in), free(out);
	}
	/* votes: the AND over ranks */
	for (int k = 0; k <= a->world; k++) {
		bool all = false;
		if (tf_comm_vote(a->c, a->rank != k, &all) || all != (k == a->world))
			a->failures++;
	}
	int32_t v = a->rank, all[3];
	a->desync = a->rank == a->world - 1 ? tf_comm_all_gather(a->c, &v, all, 1, TF_DTYPE_F32, NULL)
					    : tf_comm_all_gather(a->c, &v, all, 1, TF_DTYPE_I32, NULL);
	return NULL;
}

START_TEST(host_threads_bit_exact)
{
	for (int world = 2; world <= 3; world++) {
		struct tf_host_group *g;
		ck_assert_int_eq(tf_host_group_new(world, 20, &g), 0);
		struct th_arg a[3];
		pthread_t t[3];
		for (int r = 0; r < world; r++) {
			a[r] = (struct th_arg){tf_host_group_comm(g, r), world, r, 0, 0};
			pthread_create(&t[r], NULL, th_main, &a[r]);
		}
		for (int r = 0; r < world; r++) {
			pthread_join(t[r], NULL);
			ck_assert_int_eq(a[r].failures, 0);
			ck_assert_int_eq(a[r].desync, TF_ERR_MISMATCH);
		}
		tf_host_group_free(g);
	}
}
END_TEST

START_TEST(reference_rounding)
{
	/* bf16: 1 + 2^-8 rounds to even (1.0); i32 wraps. */
	uint16_t a = tf_f32_to_bf16(1.0f), b = tf_f32_to_bf16(1.0f / 256), d;
	const void *s[2] = {&a, &b};
	tf_comm_reduce(&d, s, 2, 1, TF_DTYPE_BF16, TF_REDOP_SUM);
	ck_assert_uint_eq(d, a);
	int32_t x = INT32_MAX, y = 1, z;
	const void *t[2] = {&x, &y};
	tf_comm_reduce(&z, t, 2, 1, TF_DTYPE_I32, TF_REDOP_SUM);
	ck_assert_int_eq(z, INT32_MIN);
}
END_TEST

/* ---- plan link over a socket pair ---- */

START_TEST(planlink_framing)
{
	int sv[2];
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	int f0[2] = {-1, sv[0]}, f1[2] = {sv[1], -1};
	struct tf_plan_link tx, rx;
	tf_plan_link_init_fds(&tx, 2, 0, f0);
	tf_plan_link_init_fds(&rx, 2, 1, f1);
	int64_t p1[3] = {1, 10, 11}, p2[1] = {1}, p3[2] = {4, 0}, big[600], buf[700];
	for (int i = 0; i < 600; i++)
		big[i] = i;
	size_t n;
	ck_assert_int_eq(tf_plan_send(&tx, p1, 3, 1), 0);
	ck_assert_int_eq(tf_plan_send(&tx, NULL, 0, 1), 0); /* empty */
	ck_assert_int_eq(tf_plan_hold(&tx, p2, 1, 1), 0);
	ck_assert_int_eq(tf_plan_hold(&tx, big, 600, 1), 0);
	ck_assert_int_eq(tf_plan_send(&tx, p3, 2, 1), 0); /* one batch of three */
	ck_assert_int_eq(tf_plan_hold(&tx, big, 600, 1), 0);
	ck_assert_int_eq(tf_plan_hold(&tx, big, 600, 1), 0); /* flushes the first */
	ck_assert_int_eq(tf_plan_flush(&tx, 1), 0);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), 0);
	ck_assert(n == 3 && buf[0] == 1 && buf[2] == 11);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), 0);
	ck_assert(n == 1 && buf[0] == 1);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), 0);
	ck_assert(n == 600 && buf[599] == 599);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), 0);
	ck_assert(n == 2 && buf[0] == 4);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 10, &n, 1), TF_ERR_RANGE); /* too large: dropped */
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), 0);
	ck_assert(n == 600 && buf[0] == 0);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 0.05), TF_ERR_TIMEOUT);
	int64_t bad[1] = {INT64_MIN};
	ck_assert_int_eq(tf_plan_send(&tx, bad, 1, 1), TF_ERR_ARG);
	/* A malformed batch, then a frame that is not whole words. */
	int64_t mal[4] = {INT64_MIN, 2, 1, 5};
	ck_assert_int_eq(tf_sock_send_frame(sv[0], mal, sizeof mal, 0), 0);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), TF_ERR_IO);
	ck_assert_int_eq(tf_sock_send_frame(sv[0], "abc", 3, 0), 0);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), TF_ERR_IO);
	close(sv[0]);
	ck_assert_int_eq(tf_plan_recv(&rx, buf, 700, &n, 1), TF_ERR_IO);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_IO), "peer closed"));
	tf_plan_link_release(&rx);
	close(sv[1]);
}
END_TEST

/* ---- fail-fast between processes ---- */

enum { ROLE_LOOP, ROLE_FATAL, ROLE_VANISH, ROLE_STOP, ROLE_DRAIN, ROLE_STOPWORD_DIE, ROLE_SIGSTOP,
       ROLE_BUSY, ROLE_STOP_LATE };

/* A child rank: bootstrap, arm fail-fast, then act out its role after
 * 0.2 s. Survivors idle until fate ends them (or 5 s pass: exit 3). */
static void child(struct tf_fabric_settings s, int role, struct tf_boot *pre)
{
	struct tf_boot b;
	if (pre)
		b = *pre;
	else
		memset(&b, 0, sizeof b);
	if (tf_boot_open(&b, &s))
		_exit(2);
	struct tf_fate *f;
	struct tf_fate_opts fo = tf_fate_opts_of(&s);
	if (tf_fate_start(&b, &fo, &f))
		_exit(2);
	struct tf_plan_link l;
	tf_plan_link_init(&l, &b);
	usleep(200000);
	int64_t stop[1] = {4}, buf[4];
	size_t n;
	switch (role) {
	case ROLE_FATAL: tf_fate_fatal(f, "test", "injected");
	case ROLE_VANISH: _exit(0); /* no STOP: a vanished rank */
	case ROLE_STOP:
		tf_fate_stop(f);
		_exit(0);
	case ROLE_STOPWORD_DIE: /* rank 0: send the stop word, then get killed */
		tf_plan_send(&l, stop, 1, 1);
		usleep(100000);
		raise(SIGKILL);
		break;
	case ROLE_SIGSTOP: /* the whole process stops: no heartbeat */
		raise(SIGSTOP);
		_exit(5); /* continued: not by these tests */
	case ROLE_BUSY: { /* the main thread computes (no system call) for 1.5 s, then stops */
		double until = tf_boot_now() + 1.5;
		volatile uint64_t x = 1;
		while (tf_boot_now() < until)
			for (int i = 0; i < 100000; i++)
				x = x * 6364136223846793005ull + 1;
		tf_fate_stop(f);
		_exit(0);
	}
	case ROLE_STOP_LATE:
		usleep(1800000);
		tf_fate_stop(f);
		_exit(0);
	case ROLE_DRAIN: /* follower: get the stop word, drain for a while, stop */
		if (tf_plan_recv(&l, buf, 4, &n, 5) || buf[0] != 4)
			_exit(4);
		usleep(1500000);
		tf_fate_stop(f);
		_exit(0);
	}
	usleep(5000000);
	_exit(3);
}

/* Fork world ranks with the given roles; return each exit code and the time
 * of each rank's exit (of a stopped rank: when it stopped; it is killed
 * once every other rank has exited). */
static void fork_ranks(int world, const int *roles, double grace, int *rc, double *t_exit)
{
	struct tf_fabric_settings s;
	base_settings(&s, world);
	s.grace_s = grace;
	struct tf_boot b0;
	ck_assert_int_eq(tf_boot_listen(&b0, &s), 0);
	pid_t pid[4];
	for (int r = 0; r < world; r++) {
		if (!(pid[r] = fork())) {
			struct tf_fabric_settings t = s;
			t.rank = r;
			t.plan_port = b0.port;
			if (r)
				close(b0.listen_fd);
			child(t, roles[r], r ? NULL : &b0);
		}
	}
	close(b0.listen_fd);
	int stopped = 0;
	bool halted[4] = {0};
	for (int left = world; left;) {
		int status;
		if (left == stopped) /* the rest are stopped: end them */
			for (int r = 0; r < world; r++)
				if (halted[r])
					kill(pid[r], SIGKILL);
		pid_t p = waitpid(-1, &status, WUNTRACED);
		for (int r = 0; r < world; r++) {
			if (p != pid[r])
				continue;
			if (WIFSTOPPED(status)) {
				halted[r] = true, stopped++;
				t_exit[r] = tf_boot_now();
				continue;
			}
			rc[r] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
			if (!halted[r])
				t_exit[r] = tf_boot_now();
			else
				stopped--;
			left--;
		}
	}
}

START_TEST(failfast_fatal_and_vanish)
{
	for (int victim = 0; victim < 3; victim++)
		for (int mode = 0; mode < 2; mode++) {
			int roles[3] = {ROLE_LOOP, ROLE_LOOP, ROLE_LOOP}, rc[3];
			double t[3];
			roles[victim] = mode ? ROLE_VANISH : ROLE_FATAL;
			fork_ranks(3, roles, 0.3, rc, t);
			/* The victim's failure is at its exit (vanish) or grace
			 * before it (fatal). */
			double t0 = t[victim] - (mode ? 0 : 0.3);
			for (int r = 0; r < 3; r++) {
				int want = r == victim && mode ? 0 : 70;
				ck_assert_msg(rc[r] == want, "victim %d mode %d: rank %d exit %d", victim, mode, r, rc[r]);
				ck_assert_msg(t[r] - t0 <= 0.3 + 0.5, "rank %d late: %.3f s", r, t[r] - t0);
			}
		}
}
END_TEST

START_TEST(failfast_clean_stops_exit_nobody)
{
	int roles[2] = {ROLE_STOP, ROLE_STOP}, rc[2];
	double t[2];
	fork_ranks(2, roles, 0.3, rc, t);
	ck_assert_int_eq(rc[0], 0);
	ck_assert_int_eq(rc[1], 0);
	/* Rank 0 sends the stop word; the follower drains and stops cleanly,
	 * rank 0 stops when its idle ends: nobody exits 70. */
	int r2[3] = {ROLE_STOPWORD_DIE, ROLE_DRAIN, ROLE_DRAIN};
	int rc3[3];
	double t3[3];
	fork_ranks(3, r2, 0.3, rc3, t3);
	/* Rank 0 was killed mid-drain: the draining ranks exit 70 (armed). */
	ck_assert_int_eq(rc3[0], 128 + SIGKILL);
	ck_assert_int_eq(rc3[1], 70);
	ck_assert_int_eq(rc3[2], 70);
	ck_assert(t3[1] - t3[0] <= 0.8 && t3[2] - t3[0] <= 0.8);
}
END_TEST

/* A rank whose process stops (SIGSTOP: rank 0 or a follower) sends no
 * heartbeat: every other rank exits 70 within the limit, a period and the
 * grace time (+ 0.5 s) of the stop. A rank whose main thread computes for
 * almost four limits still beats (its watcher is a thread of its own):
 * nobody exits 70. */
START_TEST(failfast_heartbeat)
{
	for (int victim = 0; victim < 2; victim++) {
		int roles[3] = {ROLE_LOOP, ROLE_LOOP, ROLE_LOOP}, rc[3];
		double t[3];
		roles[victim] = ROLE_SIGSTOP;
		fork_ranks(3, roles, 0.3, rc, t);
		ck_assert_int_eq(rc[victim], 128 + SIGKILL);
		for (int r = 0; r < 3; r++) {
			if (r == victim)
				continue;
			double took = t[r] - t[victim];
			fprintf(stderr, "heartbeat: rank %d stopped, rank %d exited %d after %.3f s\n", victim,
				r, rc[r], took);
			ck_assert_msg(rc[r] == 70, "victim %d: rank %d exit %d", victim, r, rc[r]);
			ck_assert_msg(took <= 0.4 + 0.1 + 0.3 + 0.5, "rank %d late: %.3f s", r, took);
			ck_assert_msg(took >= 0.4, "rank %d early: %.3f s", r, took);
		}
	}
	int busy[3] = {ROLE_STOP_LATE, ROLE_BUSY, ROLE_STOP_LATE}, rc[3];
	double t[3];
	fork_ranks(3, busy, 0.3, rc, t);
	for (int r = 0; r < 3; r++)
		ck_assert_msg(rc[r] == 0, "busy: rank %d exit %d", r, rc[r]);
	busy[0] = ROLE_BUSY, busy[1] = ROLE_STOP_LATE;
	fork_ranks(3, busy, 0.3, rc, t);
	for (int r = 0; r < 3; r++)
		ck_assert_msg(rc[r] == 0, "busy rank 0: rank %d exit %d", r, rc[r]);
}
END_TEST

START_TEST(frame_parsers)
{
	uint8_t p[20];
	struct tf_boot_hello h = {TF_BOOT_MAGIC, TF_BOOT_VERSION, 3, 2, 1}, g;
	tf_boot_hello_pack(&h, p);
	ck_assert_int_eq(tf_boot_hello_parse(p, 3, &g), 0);
	ck_assert_int_eq(tf_boot_hello_parse(p, 4, &g), TF_ERR_MISMATCH);
	p[0] ^= 1;
	ck_assert_int_eq(tf_boot_hello_parse(p, 3, &g), TF_ERR_VERSION);
	uint8_t f[16] = {0x31, 0x34, 0x46, 0x46, 2, 0, 0, 0, 0x10, 0x20, 0, 0, 0, 0, 0, 0};
	uint32_t kind;
	int64_t v;
	ck_assert_int_eq(tf_fate_frame_parse(f, &kind, &v), TF_ERR_FORMAT); /* reason too long */
	f[9] = 0;
	ck_assert_int_eq(tf_fate_frame_parse(f, &kind, &v), 0);
	ck_assert(kind == TF_FATE_FAIL && v == 16);
	size_t np;
	int64_t w[5] = {INT64_MIN, 2, 0, 1, 7};
	ck_assert_int_eq(tf_plan_frame_check(w, 5, &np), 0);
	ck_assert_uint_eq(np, 2);
	w[3] = 2;
	ck_assert_int_eq(tf_plan_frame_check(w, 5, &np), TF_ERR_FORMAT);
}
END_TEST

/* The mailbox kernel's grid: a block per 4 KiB chunk (512 lines of 8
 * bytes), at least 1, at most 64, so that a chunk has one owner block at
 * every size. */
START_TEST(mailbox_grid)
{
	ck_assert_uint_eq(tf_comm_mailbox_blocks(1), 1);
	ck_assert_uint_eq(tf_comm_mailbox_blocks(4096), 1);
	ck_assert_uint_eq(tf_comm_mailbox_blocks(4097), 2);
	ck_assert_uint_eq(tf_comm_mailbox_blocks(10240), 3);
	ck_assert_uint_eq(tf_comm_mailbox_blocks(256 * 1024), 64);
	ck_assert_uint_eq(tf_comm_mailbox_blocks(16u << 20), 64);
}
END_TEST

Suite *suite_fabric(void)
{
	Suite *s = suite_create("fabric");
	TCase *t = tcase_create("core");
	tcase_set_timeout(t, 120);
	tcase_add_test(t, settings_defaults_and_ranges);
	tcase_add_test(t, settings_digest);
	tcase_add_test(t, bootstrap_gather_in_order);
	tcase_add_test(t, bootstrap_settings_mismatch_refused_everywhere);
	tcase_add_test(t, host_tcp_collectives_and_desync);
	tcase_add_test(t, host_threads_bit_exact);
	tcase_add_test(t, reference_rounding);
	tcase_add_test(t, planlink_framing);
	tcase_add_test(t, failfast_fatal_and_vanish);
	tcase_add_test(t, failfast_clean_stops_exit_nobody);
	tcase_add_test(t, failfast_heartbeat);
	tcase_add_test(t, frame_parsers);
	tcase_add_test(t, mailbox_grid);
	suite_add_tcase(s, t);
	return s;
}
