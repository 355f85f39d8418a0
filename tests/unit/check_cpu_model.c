/* check_cpu_model.c: a tiny synthetic pack loaded through compute/model.h
 * and run on the CPU backend: decode token by token equals one prefill,
 * chunked prefill equals whole, a batch equals each alone, fork and
 * rollback equal recomputation, several seeds; bad packs are refused with
 * a status. The caches are BF16 so that quantised rows do not dominate. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "compute/model.h"
#include "compute/sample.h"
#include "model/synth.h"
#include "pack/pack.h"
#include "tinypack.h"

static struct tinypack pk;

static void make_pack(uint64_t seed)
{
	tinypack_make(&pk, "cpumodel", seed);
}

static void drop_pack(void)
{
	tinypack_drop(&pk);
}

static int ring_rows;         /* opts.ring of open_model (0: the default) */
static int64_t positions = 64; /* opts.max_positions of open_model */

static struct tf_model *open_model(void)
{
	struct tf_model_opts o = {.threads = 2, .slots = 4, .max_positions = positions, .ring = ring_rows,
				  .window_fmt = TF_KV_BF16, .pool_fmt = TF_KV_BF16,
				  .index_fmt = TF_KV_BF16};
	struct tf_model *m;
	tf_status st = tf_model_open(pk.pack, &o, &m);
	if (st)
		fprintf(stderr, "open: %s\n", tf_errmsg(st));
	ck_assert_int_eq(st, TF_OK);
	return m;
}

enum { T = 12, LONG = 40 };
static const int32_t ids[LONG] = {1,   17,  300, 42,  42,  7,   99,  511, 3,   250, 128, 64, 5,  6,
				  200, 201, 202, 9,   9,   9,   400, 33,  34,  35,  36,  480, 2,  77,
				  78,  79,  80,  81,  1,   17,  300, 42,  0,   12,  13,  14};

/* Logits of ids[0..n) on a new sequence, in chunks of `chunk` rows. */
static void run_chunks(struct tf_model *m, int n, int chunk, float *logits)
{
	int seq;
	ck_assert_int_eq(tf_model_seq_new(m, &seq), TF_OK);
	uint32_t V = tf_model_config(m)->vocab;
	for (int p = 0; p < n; p += chunk) {
		int R = p + chunk > n ? n - p : chunk;
		int64_t pos[LONG];
		int sq[LONG];
		for (int r = 0; r < R; r++) {
			pos[r] = p + r;
			sq[r] = seq;
		}
		tf_status st = tf_model_forward(m, R, ids + p, pos, sq, logits + (size_t)p * V);
		if (st)
			fprintf(stderr, "forward: %s\n", tf_errmsg(st));
		ck_assert_int_eq(st, TF_OK);
	}
	ck_assert_int_eq(tf_model_seq_len(m, seq), n);
	tf_model_seq_free(m, seq);
}

/* Every call here has at most 16 rows, where the EXL3 GEMM's sums run in
 * one order whatever the row count, and chunked prefill is exact: the
 * logits must agree to the bit. (Past 16 rows the GEMM takes another
 * summation order; compare with a tolerance there.) */
#define BOUND 0

static void properties(uint64_t seed)
{
	make_pack(seed);
	struct tf_model *m = open_model();
	uint32_t V = tf_model_config(m)->vocab;
	float *whole = malloc(sizeof(float) * T * V), *other = malloc(sizeof(float) * T * V);
	run_chunks(m, T, T, whole);
	for (size_t i = 0; i < (size_t)T * V; i++)
		ck_assert(isfinite(whole[i]));
	/* decode token by token, then chunks of 5 */
	run_chunks(m, T, 1, other);
	double d1 = tinypack_rel(other, whole, (size_t)T * V);
	run_chunks(m, T, 5, other);
	double d5 = tinypack_rel(other, whole, (size_t)T * V);
	fprintf(stderr, "seed %llu: decode vs prefill %.3g, chunks of 5 %.3g\n",
		(unsigned long long)seed, d1, d5);
	ck_assert(d1 <= BOUND && d5 <= BOUND);
	ck_assert(tinypack_rel(whole + V, whole, V) > 1e-3); /* positions differ */
	/* a batch of two sequences at different positions equals each alone */
	int a, b;
	ck_assert_int_eq(tf_model_seq_new(m, &a), TF_OK);
	ck_assert_int_eq(tf_model_seq_new(m, &b), TF_OK);
	int64_t pos4[4] = {0, 1, 2, 3};
	int sa[4] = {a, a, a, a};
	float *tmp = malloc(sizeof(float) * 6 * V);
	ck_assert_int_eq(tf_model_forward(m, 4, ids, pos4, sa, tmp), TF_OK);
	/* one call: a's positions 4, 5 and b's 0, 1 */
	int32_t bid[4] = {ids[4], ids[5], ids[0], ids[1]};
	int64_t bpos[4] = {4, 5, 0, 1};
	int bs[4] = {a, a, b, b};
	ck_assert_int_eq(tf_model_forward(m, 4, bid, bpos, bs, tmp), TF_OK);
	double db = fmax(tinypack_rel(tmp, whole + 4 * V, 2 * V), tinypack_rel(tmp + 2 * V, whole, 2 * V));
	/* fork a at 6, roll the fork back to 3 and rerun 3..5 */
	int f;
	ck_assert_int_eq(tf_model_seq_fork(m, a, &f), TF_OK);
	ck_assert_int_eq(tf_model_seq_len(m, f), 6);
	ck_assert_int_eq(tf_model_seq_rollback(m, f, 3), TF_OK);
	int64_t rpos[3] = {3, 4, 5};
	int fs[3] = {f, f, f};
	ck_assert_int_eq(tf_model_forward(m, 3, ids + 3, rpos, fs, tmp), TF_OK);
	double df = tinypack_rel(tmp, whole + 3 * V, 3 * V);
	/* and the fork continues like the original would */
	int64_t p6 = 6;
	ck_assert_int_eq(tf_model_forward(m, 1, ids + 6, &p6, &f, tmp), TF_OK);
	df = fmax(df, tinypack_rel(tmp, whole + 6 * V, V));
	fprintf(stderr, "seed %llu: batch vs alone %.3g, fork/rollback %.3g\n",
		(unsigned long long)seed, db, df);
	ck_assert(db <= BOUND && df <= BOUND);
	/* rows that do not continue their sequence, or a bad id, are refused */
	int64_t p9 = 9;
	ck_assert_int_eq(tf_model_forward(m, 1, ids, &p9, &b, tmp), TF_ERR_ARG);
	int32_t bad = (int32_t)V;
	int64_t p2 = 2;
	ck_assert_int_eq(tf_model_forward(m, 1, &bad, &p2, &b, tmp), TF_ERR_ARG);
	free(tmp);
	free(whole);
	free(other);
	tf_model_free(m);
	drop_pack();
}

START_TEST(tiny_pack_properties)
{
	properties(1 + (uint64_t)_i * 7);
}
END_TEST

/* Past 16 rows the EXL3 GEMM decodes each tile once and sums in another
 * order than the GEMV path of decode: the bound allows float reordering
 * carried through 8 blocks and bf16 roundings, far below a wrong position
 * or token (those move logits by their own scale). */
START_TEST(long_prefill_matches_decode)
{
	make_pack(5);
	struct tf_model *m = open_model();
	uint32_t V = tf_model_config(m)->vocab;
	float *whole = malloc(sizeof(float) * LONG * V), *other = malloc(sizeof(float) * LONG * V);
	run_chunks(m, LONG, LONG, whole);
	run_chunks(m, LONG, 1, other);
	double d1 = tinypack_rel(other, whole, (size_t)LONG * V);
	run_chunks(m, LONG, 17, other);
	double d17 = tinypack_rel(other, whole, (size_t)LONG * V);
	fprintf(stderr, "%d rows: decode vs prefill %.3g, chunks of 17 %.3g\n", LONG, d1, d17);
	ck_assert(d1 < 3e-2 && d17 < 3e-2);
	free(whole);
	free(other);
	tf_model_free(m);
	drop_pack();
}
END_TEST

static struct tf_model *open_synthetic(const char *pack, uint64_t seed)
{
	struct tf_model_opts o = {.threads = 2, .slots = 2, .max_positions = 64,
				  .synthetic = true, .synth_seed = seed};
	struct tf_model *m;
	tf_status st = tf_model_open(pack, &o, &m);
	if (st)
		fprintf(stderr, "open synthetic: %s\n", tf_errmsg(st));
	ck_assert_int_eq(st, TF_OK);
	return m;
}

/* Synthetic weights need only the pack's headers: a sparse pack gives the
 * model a dense one of the same seed gives; the weights are the seed's
 * (the trellises are not the pack's, so the logits differ from its); the
 * bytes placed are the pack's EXL3 tensors'. */
START_TEST(synthetic_weights)
{
	make_pack(4);
	struct tinypack sparse;
	struct tf_config cfg;
	ck_assert_int_eq(tf_config_preset(&cfg, "tiny"), TF_OK);
	struct tf_synth_opts so = {.seed = 4, .sparse = true, .bits = {2, 3, 4}, .nbits = 3,
				   .codebooks = TF_SYNTH_MIXED, .shard_bytes = 4u << 20, .index = true};
	tinypack_make_with(&sparse, "cpumodel-sparse", &cfg, &so);
	struct tf_model *a = open_synthetic(pk.pack, 4), *b = open_synthetic(sparse.pack, 4);
	struct tf_model *c = open_synthetic(pk.pack, 5), *real = open_model();
	uint32_t V = tf_model_config(a)->vocab;
	float *la = malloc(sizeof(float) * T * V), *lb = malloc(sizeof(float) * T * V);
	float *lc = malloc(sizeof(float) * T * V), *lr = malloc(sizeof(float) * T * V);
	run_chunks(a, T, T, la);
	run_chunks(b, T, T, lb);
	run_chunks(c, T, T, lc);
	run_chunks(real, T, T, lr);
	ck_assert(!memcmp(la, lb, sizeof(float) * T * V));
	ck_assert(tinypack_rel(lc, la, (size_t)T * V) > 1e-2);
	ck_assert(tinypack_rel(lr, la, (size_t)T * V) > 1e-2);
	struct tf_model_bytes by;
	tf_model_bytes(a, &by);
	struct tf_pack p;
	ck_assert_int_eq(tf_pack_open(&p, pk.pack), TF_OK);
	uint64_t exl3 = 0;
	for (size_t i = 0; i < p.n; i++) {
		const char *n = p.tensors[i].t->name, *dot = strrchr(n, '.');
		if (!strcmp(dot, ".trellis") || !strcmp(dot, ".suh") || !strcmp(dot, ".svh"))
			exl3 += p.tensors[i].t->end - p.tensors[i].t->begin;
	}
	tf_pack_close(&p);
	fprintf(stderr, "synthetic: EXL3 %llu bytes (the pack's %llu), other %llu, cache %llu\n",
		(unsigned long long)by.exl3, (unsigned long long)exl3, (unsigned long long)by.native,
		(unsigned long long)by.kv);
	ck_assert_uint_eq(by.exl3, exl3);
	ck_assert_uint_gt(by.native, 0);
	ck_assert_uint_gt(by.kv, 0);
	/* synthetic weights do not come from a prepared folder */
	struct tf_model_opts bad = {.synthetic = true, .prepared = pk.dir};
	struct tf_model *m = (struct tf_model *)1;
	ck_assert_int_eq(tf_model_open(pk.pack, &bad, &m), TF_ERR_ARG);
	ck_assert_ptr_null(m);
	free(la);
	free(lb);
	free(lc);
	free(lr);
	tf_model_free(a);
	tf_model_free(b);
	tf_model_free(c);
	tf_model_free(real);
	tinypack_drop(&sparse);
	drop_pack();
}
END_TEST

/* tf_model_forward_sample draws what tf_sample_row draws from
 * tf_model_forward's logits, for greedy, top-k and nucleus rows. */
START_TEST(forward_sample_draws_as_the_host)
{
	make_pack(6);
	struct tf_model *m = open_model();
	uint32_t V = tf_model_config(m)->vocab;
	int a, b;
	ck_assert_int_eq(tf_model_seq_new(m, &a), TF_OK);
	ck_assert_int_eq(tf_model_seq_new(m, &b), TF_OK);
	struct tf_sampler *smp;
	ck_assert_int_eq(tf_sampler_new(V, &smp), TF_OK);
	float *lg = malloc(sizeof(float) * T * V);
	int64_t pos[T], draw[T];
	int sa[T], sb[T];
	struct tf_sample_params sp[T];
	for (int r = 0; r < T; r++) {
		pos[r] = r;
		draw[r] = r + 1;
		sa[r] = a;
		sb[r] = b;
		sp[r] = (struct tf_sample_params){.seed = 11 + (uint64_t)r, .temperature = r % 3 ? 0.8 : 0,
						  .top_k = r % 3 == 1 ? 5 : 0, .top_p = r % 3 == 2 ? 0.9 : 1};
	}
	int32_t tokens[T];
	ck_assert_int_eq(tf_model_forward(m, T, ids, pos, sa, lg), TF_OK);
	ck_assert_int_eq(tf_model_forward_sample(m, T, ids, pos, sb, sp, draw, tokens), TF_OK);
	for (int r = 0; r < T; r++)
		ck_assert_int_eq(tokens[r], tf_sample_row(smp, lg + (size_t)r * V, V, (uint64_t)draw[r], &sp[r]));
	ck_assert_int_eq(tf_model_seq_len(m, b), T);
	ck_assert_int_eq(tf_model_forward_sample(m, 1, ids, pos, sb, NULL, draw, tokens), TF_ERR_ARG);
	tf_sampler_free(smp);
	free(lg);
	tf_model_free(m);
	drop_pack();
}
END_TEST

/* Logits of some rows alone (tf_model_forward_rows): those rows of the
 * whole call's, within the head's rounding (the head's matmul sums fewer
 * rows), in a call of two sequences, in one past the pass cap (run_split:
 * the rows of each pass), and with no rows at all; the cache is written
 * either way (a later row equals the whole call's); bad lists refused. */
START_TEST(forward_rows_are_the_calls)
{
	enum { N = 300 }; /* one sequence of N - T rows past the 252-row pass */
	make_pack(4);
	positions = 512;
	struct tf_model *m = open_model();
	positions = 64;
	uint32_t V = tf_model_config(m)->vocab;
	static int32_t tok[N];
	static int64_t pos[N];
	static int sq[N];
	float *all = malloc(sizeof(float) * N * V), *some = malloc(sizeof(float) * N * V);
	const int out[] = {0, 5, T - 1, T, 100, 251, 252, 253, N - 1};
	const int nout = (int)(sizeof out / sizeof out[0]);
	for (int pass = 0; pass < 2; pass++) {
		int s0, s1;
		ck_assert_int_eq(tf_model_seq_new(m, &s0), TF_OK);
		ck_assert_int_eq(tf_model_seq_new(m, &s1), TF_OK);
		for (int i = 0; i < N; i++) { /* T rows of s0, then s1's */
			tok[i] = (int32_t)((i * 53 + 7) % (int)V);
			sq[i] = i < T ? s0 : s1;
			pos[i] = i < T ? i : i - T;
		}
		ck_assert_int_eq(pass ? tf_model_forward_rows(m, N, tok, pos, sq, nout, out, some)
				      : tf_model_forward(m, N, tok, pos, sq, all), TF_OK);
		if (pass)
			for (int k = 0; k < nout; k++) {
				double d = tinypack_rel(some + (size_t)k * V, all + (size_t)out[k] * V, V);
				ck_assert_msg(d < 1e-5, "row %d: %.3g", out[k], d);
			}
		/* the cache holds every row: the next one continues it */
		int32_t nx = 3;
		int64_t p1 = N - T;
		ck_assert_int_eq(tf_model_forward_rows(m, 1, &nx, &p1, &s1, 0, NULL, NULL), TF_OK);
		ck_assert_int_eq(tf_model_seq_len(m, s1), N - T + 1);
		tf_model_seq_free(m, s0);
		tf_model_seq_free(m, s1);
	}
	int s;
	ck_assert_int_eq(tf_model_seq_new(m, &s), TF_OK);
	const int bad[] = {2, 1};
	for (int i = 0; i < 3; i++) {
		pos[i] = i;
		sq[i] = s;
	}
	ck_assert_int_eq(tf_model_forward_rows(m, 3, tok, pos, sq, 2, bad, some), TF_ERR_ARG);
	ck_assert_int_eq(tf_model_forward_rows(m, 3, tok, pos, sq, 4, out, some), TF_ERR_ARG);
	free(all);
	free(some);
	tf_model_free(m);
	drop_pack();
}
END_TEST

/* A longer window ring runs a prompt in fewer passes (pass_cap = ring -
 * window): the logits equal those of the default ring's passes, and a
 * rollback may go back as far as the ring allows. */
START_TEST(ring_sets_the_pass)
{
	enum { N = 400 }; /* two passes at ring 256 (window 4), one at 512 */
	make_pack(9);
	positions = 512;
	struct tf_model *a = open_model();
	ring_rows = 512;
	struct tf_model *b = open_model();
	ring_rows = 0;
	positions = 64;
	uint32_t V = tf_model_config(a)->vocab;
	float *la = malloc(sizeof(float) * N * V), *lb = malloc(sizeof(float) * N * V);
	static int32_t tok[N];
	static int64_t pos[N];
	static int sq[N];
	int s;
	struct tf_model *m[2] = {a, b};
	for (int k = 0; k < 2; k++) {
		ck_assert_int_eq(tf_model_seq_new(m[k], &s), TF_OK);
		for (int i = 0; i < N; i++) {
			tok[i] = (int32_t)((i * 37 + 11) % (int)V);
			pos[i] = i;
			sq[i] = s;
		}
		ck_assert_int_eq(tf_model_forward(m[k], N, tok, pos, sq, k ? lb : la), TF_OK);
	}
	double d = tinypack_rel(lb, la, (size_t)N * V);
	fprintf(stderr, "%d rows, ring 512 (one pass) against 256 (two): %.3g\n", N, d);
	ck_assert(d < 1e-5);
	/* the rollback depth is the ring's less the window */
	ck_assert_int_eq(tf_model_seq_rollback(a, s, N - 300), TF_ERR_RANGE);
	ck_assert_int_eq(tf_model_seq_rollback(b, s, N - 300), TF_OK);
	free(la);
	free(lb);
	tf_model_free(a);
	tf_model_free(b);
	drop_pack();
}
END_TEST

START_TEST(bad_packs_refused)
{
	struct tf_model *m = (struct tf_model *)1;
	ck_assert_int_ne(tf_model_open("/nonexistent/tf-pack", NULL, &m), TF_OK);
	ck_assert_ptr_null(m);
	make_pack(3);
	/* a config that no longer matches the tensors */
	char path[192];
	snprintf(path, sizeof path, "%s/config.json", pk.pack);
	char *data;
	size_t len;
	ck_assert_int_eq(tf_file_read_all(path, 1 << 20, &data, &len), TF_OK);
	char *s = strstr(data, "\"hidden_size\"");
	ck_assert_ptr_nonnull(s);
	char *digits = strstr(s, "256");
	memcpy(digits, "384", 3);
	ck_assert_int_eq(tf_file_write_atomic(path, data, len), TF_OK);
	free(data);
	m = (struct tf_model *)1;
	tf_status st = tf_model_open(pk.pack, NULL, &m);
	fprintf(stderr, "bad pack: %s\n", tf_errmsg(st));
	ck_assert(st == TF_ERR_FORMAT || st == TF_ERR_CONFIG);
	ck_assert_ptr_null(m);
	drop_pack();
}
END_TEST

Suite *suite_cpu_model(void)
{
	Suite *s = suite_create("cpu_model");
	TCase *tc = tcase_create("tiny");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, tiny_pack_properties, 0, 2);
	tcase_add_test(tc, long_prefill_matches_decode);
	tcase_add_test(tc, synthetic_weights);
	tcase_add_test(tc, forward_sample_draws_as_the_host);
	tcase_add_test(tc, forward_rows_are_the_calls);
	tcase_add_test(tc, ring_sets_the_pass);
	tcase_add_test(tc, bad_packs_refused);
	suite_add_tcase(s, tc);
	return s;
}
