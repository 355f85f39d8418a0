/* check_ops_rows.c: the CPU backend's row moves (ops.h): rows_copy,
 * cache_write and cache_read (bytes equal to kvrow.c's codecs), page_rows,
 * attn_keys, moe_group, stream_mean and linear_experts. Expected values are
 * written out here (small cases by hand, larger ones by a direct loop over
 * the contract), never taken from the op under test. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "compute/kvrow.h"
#include "ops_test.h"

START_TEST(rows_copy_moves)
{
	struct tf_be *be = test_be();
	float x[4 * 3], y[5 * 3];
	for (int i = 0; i < 12; i++)
		x[i] = (float)(i + 1);
	for (int i = 0; i < 15; i++)
		y[i] = -1;
	int32_t xi[4] = {3, 0, -1, 9}, yi[4] = {4, 1, 2, 0};
	struct tf_tensor X = T2(x, TF_DT_F32, 4, 3), Y = T2(y, TF_DT_F32, 5, 3);
	struct tf_tensor XI = T1(xi, TF_DT_I32, 4), YI = T1(yi, TF_DT_I32, 4);
	ck_assert_int_eq(be->ops->rows_copy(be, &X, &XI, &Y, &YI), TF_OK);
	/* x row 3 -> y row 4, x row 0 -> y row 1; -1 and 9 are skipped */
	const float want[15] = {-1, -1, -1, 1, 2, 3, -1, -1, -1, -1, -1, -1, 10, 11, 12};
	ck_assert(!memcmp(y, want, sizeof want));
	/* a gather (no yi) and a plain copy */
	float g[2 * 3];
	struct tf_tensor G = T2(g, TF_DT_F32, 2, 3), GI = T1(xi, TF_DT_I32, 2);
	ck_assert_int_eq(be->ops->rows_copy(be, &X, &GI, &G, NULL), TF_OK);
	const float wg[6] = {10, 11, 12, 1, 2, 3};
	ck_assert(!memcmp(g, wg, sizeof wg));
	struct tf_tensor Xh = T2(x, TF_DT_F32, 2, 3);
	ck_assert_int_eq(be->ops->rows_copy(be, &Xh, NULL, &G, NULL), TF_OK);
	ck_assert(!memcmp(g, x, sizeof g));
	/* rows of different widths or dtypes are refused */
	struct tf_tensor Yw = T2(y, TF_DT_F32, 3, 5), Yb = T2(y, TF_DT_BF16, 5, 3);
	ck_assert_int_eq(be->ops->rows_copy(be, &X, NULL, &Yw, NULL), TF_ERR_ARG);
	ck_assert_int_eq(be->ops->rows_copy(be, &X, NULL, &Yb, NULL), TF_ERR_ARG);
	tf_be_free(be);
}
END_TEST

/* Each format: cache_write's bytes are the codec's, cache_read's values
 * its decode; skipped rows stay, unknown rows read as zeros. */
START_TEST(cache_rows_are_the_codecs)
{
	struct tf_be *be = test_be();
	struct tf_rng r;
	tf_rng_seed(&r, 31);
	const struct tf_rowfmt fmts[] = {
		{TF_KV_FP8, 512, 64, 0}, {TF_KV_FP8, 96, 32, 0}, {TF_KV_FP4, 512, 64, 0},
		{TF_KV_BF16, 96, 32, 0}, {TF_KV_FP8, 128, 0, 1}, {TF_KV_BF16, 128, 0, 1},
	};
	for (size_t k = 0; k < sizeof fmts / sizeof *fmts; k++) {
		const struct tf_rowfmt *f = &fmts[k];
		int n = 5, rows = 8;
		size_t b = tf_rowfmt_bytes(f);
		float *x = test_randn(&r, (size_t)n * f->dim, 3.0f);
		uint8_t *cache = malloc(rows * b), *want = malloc(rows * b);
		memset(cache, 0xAB, rows * b);
		memset(want, 0xAB, rows * b);
		int32_t idx[5] = {6, 0, -1, 3, 8};
		for (int m = 0; m < n; m++)
			if (idx[m] >= 0 && idx[m] < rows)
				tf_rowfmt_encode(f, x + m * f->dim, want + idx[m] * b);
		struct tf_tensor X = T2(x, TF_DT_F32, n, f->dim), I = T1(idx, TF_DT_I32, n);
		struct tf_tensor C = T2(cache, TF_DT_U8, rows, b);
		ck_assert_int_eq(be->ops->cache_write(be, f, &X, &I, &C), TF_OK);
		ck_assert(!memcmp(cache, want, rows * b));
		float *got = malloc(sizeof(float) * n * f->dim), *dec = malloc(sizeof(float) * f->dim);
		struct tf_tensor O = T2(got, TF_DT_F32, n, f->dim);
		ck_assert_int_eq(be->ops->cache_read(be, f, &C, &I, &O), TF_OK);
		for (int m = 0; m < n; m++) {
			int known = idx[m] >= 0 && idx[m] < rows;
			if (known)
				tf_rowfmt_decode(f, want + idx[m] * b, dec);
			for (int i = 0; i < f->dim; i++)
				ck_assert(got[m * f->dim + i] == (known ? dec[i] : 0.0f));
		}
		struct tf_tensor Cbad = T2(cache, TF_DT_U8, rows * b / (b + 1), b + 1);
		ck_assert_int_eq(be->ops->cache_write(be, f, &X, &I, &Cbad), TF_ERR_ARG);
		free(x);
		free(cache);
		free(want);
		free(got);
		free(dec);
	}
	tf_be_free(be);
}
END_TEST

START_TEST(page_rows_map)
{
	struct tf_be *be = test_be();
	int32_t pt[3] = {7, 2, 5}, l[6] = {0, 127, 128, 300, 384, -4}, o[6];
	struct tf_tensor P = T1(pt, TF_DT_I32, 3), L = T1(l, TF_DT_I32, 6), O = T1(o, TF_DT_I32, 6);
	ck_assert_int_eq(be->ops->page_rows(be, &P, 128, &L, &O), TF_OK);
	const int32_t want[6] = {7 * 128, 7 * 128 + 127, 2 * 128, 5 * 128 + 44, -1, -1};
	ck_assert(!memcmp(o, want, sizeof want));
	tf_be_free(be);
}
END_TEST

START_TEST(attn_keys_lists)
{
	struct tf_be *be = test_be();
	/* 3 rows at positions 5, 6, 7, window 3, k 2: row 1 selected one key */
	int32_t sel[6] = {4, 9, 2, 77, 0, 1}, ns[3] = {2, 1, 0}, off[4], idx[40];
	for (int i = 0; i < 40; i++)
		idx[i] = -7;
	struct tf_tensor S = T2(sel, TF_DT_I32, 3, 2), N = T1(ns, TF_DT_I32, 3);
	struct tf_tensor O = T1(off, TF_DT_I32, 4), I = T1(idx, TF_DT_I32, 16);
	struct tf_tensor Ibig = T1(idx, TF_DT_I32, 40);
	/* direct: keys are sel values; window rows wbase + pp - 3 (wlo = 3) */
	ck_assert_int_eq(be->ops->attn_keys(be, &S, &N, 1, 5, 3, 0, 10, 0, &O, &I), TF_OK);
	const int32_t o1[4] = {0, 5, 9, 12}, i1[12] = {4, 9, 10, 11, 12, 2, 11, 12, 13, 12, 13, 14};
	ck_assert(!memcmp(off, o1, sizeof o1));
	ck_assert(!memcmp(idx, i1, sizeof i1));
	/* per-row tables: row i's t-th key is table row i * 2 + t */
	ck_assert_int_eq(be->ops->attn_keys(be, &S, &N, 0, 5, 3, 0, 6, 0, &O, &I), TF_OK);
	const int32_t i2[12] = {0, 1, 6, 7, 8, 2, 7, 8, 9, 8, 9, 10};
	ck_assert(!memcmp(idx, i2, sizeof i2));
	/* bases and append: the table's pool rows from 20 (window from 26), the
	 * list after an earlier one's 25 keys (key_off[0] = 25 already):
	 * every pool key + 20, key_off from 25, nothing below 25 written */
	off[0] = 25;
	ck_assert_int_eq(be->ops->attn_keys(be, &S, &N, 0, 5, 3, 20, 26, 1, &O, &Ibig), TF_OK);
	const int32_t o4[4] = {25, 30, 34, 37};
	const int32_t i4[12] = {20, 21, 26, 27, 28, 22, 27, 28, 29, 28, 29, 30};
	ck_assert(!memcmp(off, o4, sizeof o4));
	ck_assert(!memcmp(idx + 25, i4, sizeof i4));
	ck_assert_int_eq(idx[24], -7); /* below the start: untouched */
	off[0] = 30; /* 30 + 12 keys do not fit 40 */
	ck_assert_int_eq(be->ops->attn_keys(be, &S, &N, 0, 5, 3, 20, 26, 1, &O, &Ibig), TF_ERR_ARG);
	ck_assert_int_eq(be->ops->attn_keys(be, &S, &N, 0, 5, 3, -1, 26, 0, &O, &Ibig), TF_ERR_ARG);
	/* no selections: window keys only, clamped at position 0 */
	ck_assert_int_eq(be->ops->attn_keys(be, NULL, &N, 1, 0, 3, 0, 0, 0, &O, &I), TF_OK);
	const int32_t o3[4] = {0, 1, 3, 6}, i3[6] = {0, 0, 1, 0, 1, 2};
	ck_assert(!memcmp(off, o3, sizeof o3));
	ck_assert(!memcmp(idx, i3, sizeof i3));
	/* too little room */
	struct tf_tensor Ismall = T1(idx, TF_DT_I32, 8);
	ck_assert_int_eq(be->ops->attn_keys(be, &S, &N, 1, 5, 3, 0, 10, 0, &O, &Ismall), TF_ERR_ARG);
	tf_be_free(be);
}
END_TEST

START_TEST(moe_group_stable)
{
	struct tf_be *be = test_be();
	/* 3 rows, top 2, 4 experts (one id out of range) */
	int32_t ids[6] = {2, 0, 0, 2, 3, 9}, off[5], pair[6], src[6];
	struct tf_tensor I = T2(ids, TF_DT_I32, 3, 2), O = T1(off, TF_DT_I32, 5);
	struct tf_tensor P = T1(pair, TF_DT_I32, 6), S = T1(src, TF_DT_I32, 6);
	ck_assert_int_eq(be->ops->moe_group(be, &I, 4, &O, &P, &S), TF_OK);
	const int32_t wo[5] = {0, 2, 2, 4, 5}, wp[6] = {1, 2, 0, 3, 4, -1}, ws[6] = {0, 1, 0, 1, 2, -1};
	ck_assert(!memcmp(off, wo, sizeof wo));
	ck_assert(!memcmp(pair, wp, sizeof wp));
	ck_assert(!memcmp(src, ws, sizeof ws));
	/* a larger case against a direct loop over experts */
	struct tf_rng r;
	tf_rng_seed(&r, 5);
	enum { R = 200, K = 6, E = 16 };
	int32_t bid[R * K], boff[E + 1], bpair[R * K], bsrc[R * K];
	for (int t = 0; t < R * K; t++)
		bid[t] = (int32_t)(tf_rng_u64(&r) % E);
	struct tf_tensor BI = T2(bid, TF_DT_I32, R, K), BO = T1(boff, TF_DT_I32, E + 1);
	struct tf_tensor BP = T1(bpair, TF_DT_I32, R * K), BS = T1(bsrc, TF_DT_I32, R * K);
	ck_assert_int_eq(be->ops->moe_group(be, &BI, E, &BO, &BP, &BS), TF_OK);
	int p = 0;
	for (int e = 0; e < E; e++) {
		ck_assert_int_eq(boff[e], p);
		for (int t = 0; t < R * K; t++)
			if (bid[t] == e) {
				ck_assert_int_eq(bpair[p], t);
				ck_assert_int_eq(bsrc[p], t / K);
				p++;
			}
	}
	ck_assert_int_eq(boff[E], R * K);
	tf_be_free(be);
}
END_TEST

/* fill_random's words are splitmix64's outputs (the published sequence
 * for state 0), little-endian, the last word cut short. */
START_TEST(fill_random_is_splitmix64)
{
	struct tf_be *be = test_be();
	static const uint64_t want[3] = {0xe220a8397b1dcdafull, 0x6e789e6aa1b965f4ull,
					 0x06c45d188009454full};
	unsigned char b[21];
	memset(b, 0xa5, sizeof b);
	struct tf_tensor t = tf_tensor_make(b, TF_DT_U8, 1, (int64_t)sizeof b);
	ck_assert_int_eq(be->ops->fill_random(be, &t, 0), TF_OK);
	for (size_t j = 0; j < sizeof b; j++)
		ck_assert_uint_eq(b[j], (unsigned)(want[j / 8] >> (8 * (j % 8))) & 0xff);
	tf_be_free(be);
}
END_TEST

START_TEST(stream_mean_rounds_once)
{
	struct tf_be *be = test_be();
	struct tf_rng r;
	tf_rng_seed(&r, 8);
	enum { R = 3, S = 4, D = 40 };
	float *v = test_randn(&r, R * S * D, 2.0f);
	uint16_t *x = test_bf16(v, R * S * D), out[R * D];
	struct tf_tensor X = T3(x, TF_DT_BF16, R, S, D), O = T2(out, TF_DT_BF16, R, D);
	ck_assert_int_eq(be->ops->stream_mean(be, &X, &O), TF_OK);
	for (int i = 0; i < R; i++)
		for (int d = 0; d < D; d++) {
			float s = 0;
			for (int k = 0; k < S; k++)
				s += tf_bf16_to_f32(x[(i * S + k) * D + d]);
			ck_assert_uint_eq(out[i * D + d], tf_f32_to_bf16(s / S));
		}
	free(v);
	free(x);
	tf_be_free(be);
}
END_TEST

START_TEST(linear_experts_groups)
{
	struct tf_be *be = test_be();
	struct tf_rng r;
	tf_rng_seed(&r, 9);
	enum { E = 3, K = 16, N = 8, R = 5 };
	float *wv[E], *x = test_randn(&r, R * K, 1.0f), y[R * N];
	struct tf_tensor w[E];
	for (int e = 0; e < E; e++) {
		wv[e] = test_randn(&r, N * K, 0.5f);
		w[e] = T2(wv[e], TF_DT_F32, N, K);
	}
	int32_t ids[E] = {0, 1, 2}, off[E + 1] = {0, 2, 2, 5};
	struct tf_tensor X = T2(x, TF_DT_F32, R, K), Y = T2(y, TF_DT_F32, R, N);
	struct tf_tensor I = T1(ids, TF_DT_I32, E), O = T1(off, TF_DT_I32, E + 1);
	ck_assert_int_eq(be->ops->linear_experts(be, w, E, &I, &O, &X, &Y), TF_OK);
	double want[R * N];
	for (int i = 0; i < R; i++) { /* rows 0-1 expert 0, rows 2-4 expert 2 */
		int e = i < 2 ? 0 : 2;
		for (int n = 0; n < N; n++) {
			double s = 0;
			for (int k = 0; k < K; k++)
				s += (double)x[i * K + k] * wv[e][n * K + k];
			want[i * N + n] = s;
		}
	}
	ck_assert(test_worst("linear_experts", y, want, R * N, 1e-3) < 1e-5);
	int32_t bad[E + 1] = {0, 2, 2, 4};
	struct tf_tensor OB = T1(bad, TF_DT_I32, E + 1);
	ck_assert_int_eq(be->ops->linear_experts(be, w, E, &I, &OB, &X, &Y), TF_ERR_ARG);
	for (int e = 0; e < E; e++)
		free(wv[e]);
	free(x);
	tf_be_free(be);
}
END_TEST

Suite *suite_ops_rows(void)
{
	Suite *s = suite_create("ops_rows");
	TCase *tc = tcase_create("ops_rows");
	tcase_add_test(tc, rows_copy_moves);
	tcase_add_test(tc, cache_rows_are_the_codecs);
	tcase_add_test(tc, page_rows_map);
	tcase_add_test(tc, attn_keys_lists);
	tcase_add_test(tc, moe_group_stable);
	tcase_add_test(tc, fill_random_is_splitmix64);
	tcase_add_test(tc, stream_mean_rounds_once);
	tcase_add_test(tc, linear_experts_groups);
	suite_add_tcase(s, tc);
	return s;
}
