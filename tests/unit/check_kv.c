/* check_kv.c: the KV cache: e4m3/e2m1 codes by hand and exhaustively, the
 * row formats (584/384/132 bytes), and the paged pool: reserve, fork with
 * shared pages and copy on write, rollback, close. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/rng.h"
#include "compute/kv.h"
#include "model/engram_rows.h"

START_TEST(e4m3_codes)
{
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(1.0f), 0x38);
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(-2.0f), 0xC0);
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(448.0f), 0x7E);
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(1e6f), 0x7E);   /* saturates */
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(0x1p-9f), 0x01); /* smallest subnormal */
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(0x1p-10f), 0x00); /* tie to even zero */
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(1.0625f), 0x38); /* tie between 1 and 1.125: even */
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(1.1875f), 0x3A); /* tie between 1.125 and 1.25: even */
	ck_assert_uint_eq(tf_engram_f32_to_e4m3(0.015625f), 0x08); /* 2^-6, the smallest normal */
	ck_assert(tf_engram_e4m3_to_f32(0x7E) == 448.0f);
	ck_assert(tf_engram_e4m3_to_f32(0x01) == 0x1p-9f);
	ck_assert(isnan(tf_engram_e4m3_to_f32(0x7F)));
	for (int c = 0; c < 256; c++) {
		if ((c & 0x7F) == 0x7F)
			continue;
		float v = tf_engram_e4m3_to_f32((uint8_t)c);
		uint8_t back = tf_engram_f32_to_e4m3(v);
		ck_assert_msg(back == c || (v == 0 && (back & 0x7F) == 0), "code %02x -> %g -> %02x", c,
			      v, back);
		if ((c & 0x7F) < 0x7E) { /* the midpoint to the next code rounds to the even one */
			float next = tf_engram_e4m3_to_f32((uint8_t)(c + 1));
			uint8_t mid = tf_engram_f32_to_e4m3((v + next) / 2);
			ck_assert_uint_eq(mid & 1, 0);
		}
	}
}
END_TEST

START_TEST(e2m1_codes)
{
	float want[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
	for (int c = 0; c < 16; c++) {
		float v = tf_e2m1_decode((uint8_t)c);
		ck_assert(v == (c & 8 ? -want[c & 7] : want[c & 7]));
		if (c != 8)
			ck_assert_uint_eq(tf_e2m1_encode(v), c);
	}
	ck_assert_uint_eq(tf_e2m1_encode(0.25f), 0);
	ck_assert_uint_eq(tf_e2m1_encode(0.75f), 2);
	ck_assert_uint_eq(tf_e2m1_encode(2.5f), 4);
	ck_assert_uint_eq(tf_e2m1_encode(5.0f), 6);
	ck_assert_uint_eq(tf_e2m1_encode(-7.0f), 15);
}
END_TEST

START_TEST(row_formats)
{
	ck_assert_uint_eq(tf_kv_row_bytes(TF_KV_FP8, 512, 64), 584);
	ck_assert_uint_eq(tf_kv_row_bytes(TF_KV_FP4, 512, 64), 384);
	ck_assert_uint_eq(tf_kv_ik_bytes(TF_KV_FP8, 128), 132);
	ck_assert_uint_eq(tf_kv_ik_bytes(TF_KV_BF16, 128), 256);
	struct tf_rng r;
	tf_rng_seed(&r, 3);
	float x[512], y[512];
	for (int i = 0; i < 512; i++)
		x[i] = tf_rng_normal(&r) * (i < 64 ? 100.0f : 1.0f);
	uint8_t row[584];
	tf_kv_row_encode(TF_KV_FP8, x, 512, 64, row);
	/* layout: 448 e4m3, 64 bf16, then 7 UE8M0 scales and a pad */
	for (int k = 0; k < 7; k++) {
		float amax = 0;
		for (int i = 64 * k; i < 64 * k + 64; i++)
			amax = fmaxf(amax, fabsf(x[i]));
		int e = (int)ceil(log2(fmax(amax, 1e-4) / 448.0));
		ck_assert_int_eq(row[448 + 128 + k], e + 127);
	}
	ck_assert_uint_eq(row[583], 0);
	tf_kv_row_decode(TF_KV_FP8, row, 512, 64, y);
	for (int i = 0; i < 448; i++) {
		int e = (int)row[576 + i / 64] - 127;
		/* 3 mantissa bits: half a step of 2^-3 relative, or of the subnormal step */
		ck_assert_msg(fabsf(y[i] - x[i]) <= fmaxf(fabsf(x[i]) * 0x1p-4f, ldexpf(0x1p-10f, e)),
			      "dim %d: %g -> %g", i, x[i], y[i]);
		ck_assert(y[i] == ldexpf(tf_engram_e4m3_to_f32(row[i]), e));
	}
	for (int i = 448; i < 512; i++)
		ck_assert(y[i] == tf_round_bf16(x[i]));
	/* FP4: groups of 16, e2m1 with a power-of-two scale, amax -> at most 6 */
	uint8_t r4[384];
	tf_kv_row_encode(TF_KV_FP4, x, 512, 64, r4);
	tf_kv_row_decode(TF_KV_FP4, r4, 512, 64, y);
	for (int i = 0; i < 448; i++) {
		int e = (int)r4[224 + 128 + i / 16] - 127;
		ck_assert(fabsf(y[i] - x[i]) <= ldexpf(1.0f, e)); /* half the widest step (2) */
	}
	for (int i = 448; i < 512; i++)
		ck_assert(y[i] == tf_round_bf16(x[i]));
	/* the tiny preset's 128 = 96 + 32: groups of 64 and 32, two scales */
	ck_assert_uint_eq(tf_kv_row_bytes(TF_KV_FP8, 128, 32), 96 + 64 + 8);
	ck_assert_uint_eq(tf_kv_row_bytes(TF_KV_FP4, 128, 32), 48 + 64 + 8);
	float t[128], tb[128];
	for (int i = 0; i < 128; i++)
		t[i] = i < 64 ? 1000.0f + i : (float)i / 100;
	uint8_t tr[168];
	tf_kv_row_encode(TF_KV_FP8, t, 128, 32, tr);
	ck_assert_int_eq(tr[160], 127 + 2);  /* ceil(log2(1063 / 448)) = 2 */
	ck_assert_int_eq(tr[161], 127 - 8);  /* ceil(log2(0.95 / 448)) = ceil(-8.88) */
	ck_assert_int_eq(tr[162], 0);
	tf_kv_row_decode(TF_KV_FP8, tr, 128, 32, tb);
	for (int i = 0; i < 96; i++)
		ck_assert(fabsf(tb[i] - t[i]) <= fabsf(t[i]) * 0x1p-4f);
	/* index keys: one fp32 power-of-two scale for the row */
	uint8_t ik[132];
	float k[128], kb[128];
	for (int i = 0; i < 128; i++)
		k[i] = (float)(i - 64) / 8;
	tf_kv_ik_encode(TF_KV_FP8, k, 128, ik);
	float scale;
	memcpy(&scale, ik + 128, 4);
	ck_assert(scale == 0x1p-5f); /* amax 8: ceil(log2(8 / 448)) = ceil(-5.81) = -5 */
	tf_kv_ik_decode(TF_KV_FP8, ik, 128, kb);
	for (int i = 0; i < 128; i++) {
		ck_assert(fabsf(kb[i] - k[i]) <= fabsf(k[i]) * 0x1p-4f);
		ck_assert(kb[i] == tf_engram_e4m3_to_f32(ik[i]) * 0x1p-5f);
	}
}
END_TEST

/* The CPU backend every cache of this suite lives on (a checked fixture:
 * made and freed in each test's process). */
static struct tf_be *kv_be;

static void be_up(void)
{
	ck_assert_int_eq(tf_cpu_be_new(1, &kv_be), TF_OK);
}

static void be_down(void)
{
	tf_be_free(kv_be);
	kv_be = NULL;
}

static struct tf_kv *small_cache(void)
{
	struct tf_kv_config c = {.layers = 2, .dim = 128, .rope = 64, .index_dim = 32,
				 .window = 128, .sources = 2, .ratio = {2, 1},
				 .pool_fmt = TF_KV_FP8, .index_fmt = TF_KV_FP8, .pages = 8,
				 .slots = 3, .max_positions = 2048};
	struct tf_kv *kv;
	ck_assert_int_eq(tf_kv_new(kv_be, &c, &kv), TF_OK);
	return kv;
}

static void fill(float *v, int n, int64_t tag)
{
	for (int i = 0; i < n; i++)
		v[i] = (float)((tag * 131 + i * 7) % 97) / 16 - 3;
}

/* The value a row reads back: its quantised form. */
static void expect_row(const float *got, int64_t tag)
{
	float x[128], q[128];
	uint8_t b[256];
	fill(x, 128, tag);
	tf_kv_row_encode(TF_KV_FP8, x, 128, 64, b);
	tf_kv_row_decode(TF_KV_FP8, b, 128, 64, q);
	ck_assert_msg(!memcmp(got, q, sizeof q), "row %lld differs", (long long)tag);
}

START_TEST(pool_fork_rollback)
{
	struct tf_kv *kv = small_cache();
	int a, b;
	float v[128], got[128];
	ck_assert_int_eq(tf_kv_open(kv, &a), TF_OK);
	ck_assert_int_eq(tf_kv_reserve(kv, a, 600), TF_OK);
	ck_assert_int_eq(tf_kv_free_pages(kv), 5);
	for (int64_t w = 0; w < 300; w++) {
		fill(v, 128, w);
		ck_assert_int_eq(tf_kv_pool_put(kv, a, 0, w, v), TF_OK);
	}
	for (int64_t w = 0; w < 600; w++) {
		fill(v, 128, 1000 + w);
		ck_assert_int_eq(tf_kv_pool_put(kv, a, 1, w, v), TF_OK);
		fill(v, 32, 5000 + w);
		ck_assert_int_eq(tf_kv_ik_put(kv, a, 1, w, v), TF_OK);
	}
	for (int64_t p = 0; p < 600; p++) {
		fill(v, 128, 9000 + p);
		tf_kv_window_put(kv, a, 1, p, v);
	}
	float ug[256], ug_got[256];
	fill(ug, 256, 77);
	ck_assert_int_eq(tf_kv_carry_put(kv, a, 0, 598, ug), TF_OK);
	ck_assert_int_eq(tf_kv_commit(kv, a, 600), TF_OK);
	fill(v, 128, 1);
	ck_assert_int_eq(tf_kv_pool_put(kv, a, 0, 300, v), TF_ERR_RANGE); /* past reserved */

	/* fork: 2 full pages shared, the third copied */
	ck_assert_int_eq(tf_kv_fork(kv, a, &b), TF_OK);
	ck_assert_int_eq(tf_kv_free_pages(kv), 4);
	ck_assert_int_eq(tf_kv_len(kv, b), 600);
	for (int64_t w = 0; w < 300; w += 37) {
		ck_assert_int_eq(tf_kv_pool_get(kv, b, 0, w, got), TF_OK);
		expect_row(got, w);
	}
	ck_assert_int_eq(tf_kv_pool_get(kv, b, 1, 599, got), TF_OK);
	expect_row(got, 1599);
	for (int64_t p = 600 - 128; p < 600; p++) {
		tf_kv_window_get(kv, b, 1, p, got);
		expect_row(got, 9000 + p);
	}
	ck_assert_int_eq(tf_kv_carry_get(kv, b, 0, 598, ug_got), TF_OK);
	ck_assert(!memcmp(ug_got, ug, sizeof ug));
	/* the child writes into a shared page: copied, the parent unchanged */
	fill(v, 128, 4242);
	ck_assert_int_eq(tf_kv_pool_put(kv, b, 1, 10, v), TF_OK);
	ck_assert_int_eq(tf_kv_free_pages(kv), 3);
	ck_assert_int_eq(tf_kv_pool_get(kv, b, 1, 10, got), TF_OK);
	expect_row(got, 4242);
	ck_assert_int_eq(tf_kv_pool_get(kv, a, 1, 10, got), TF_OK);
	expect_row(got, 1010);
	/* the child's copy of the partial page is its own */
	ck_assert_int_eq(tf_kv_pool_put(kv, b, 1, 599, v), TF_OK);
	ck_assert_int_eq(tf_kv_pool_get(kv, a, 1, 599, got), TF_OK);
	expect_row(got, 1599);

	/* rollback: 100 back is within the ring; 300 back is not */
	ck_assert_int_eq(tf_kv_rollback(kv, a, 300), TF_ERR_RANGE);
	ck_assert_int_eq(tf_kv_len(kv, a), 600);
	ck_assert_int_eq(tf_kv_rollback(kv, a, 500), TF_OK);
	ck_assert_int_eq(tf_kv_len(kv, a), 500);
	ck_assert_int_eq(tf_kv_free_pages(kv), 4); /* a's third page went back */
	for (int64_t p = 500 - 128; p < 500; p++) {
		tf_kv_window_get(kv, a, 1, p, got);
		expect_row(got, 9000 + p);
	}
	ck_assert_int_eq(tf_kv_pool_get(kv, a, 1, 499, got), TF_OK);
	expect_row(got, 1499);
	ck_assert_int_eq(tf_kv_pool_get(kv, a, 1, 500, got), TF_ERR_RANGE);
	/* out of pages, out of positions */
	ck_assert_int_eq(tf_kv_reserve(kv, a, 2048), TF_ERR_UNAVAILABLE);
	ck_assert_int_eq(tf_kv_reserve(kv, a, 4096), TF_ERR_RANGE);
	ck_assert_int_eq(tf_kv_rollback(kv, a, 0), TF_OK);
	tf_kv_close(kv, a);
	tf_kv_close(kv, b);
	ck_assert_int_eq(tf_kv_free_pages(kv), 8);
	tf_kv_free(kv);
}
END_TEST

START_TEST(slots_and_config)
{
	struct tf_kv *kv = small_cache();
	int s[3], x;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tf_kv_open(kv, &s[i]), TF_OK);
	ck_assert_int_eq(tf_kv_open(kv, &x), TF_ERR_UNAVAILABLE);
	ck_assert_int_eq(tf_kv_fork(kv, s[0], &x), TF_ERR_UNAVAILABLE);
	tf_kv_close(kv, s[1]);
	ck_assert_int_eq(tf_kv_open(kv, &x), TF_OK);
	ck_assert_int_eq(x, s[1]);
	tf_kv_free(kv);
	struct tf_kv_config bad = {.layers = 1, .dim = 100, .rope = 101, .window = 128,
				   .slots = 1, .max_positions = 16};
	ck_assert_int_eq(tf_kv_new(kv_be, &bad, &kv), TF_ERR_CONFIG);
	bad.dim = 128;
	bad.sources = 1;
	bad.ratio[0] = 4;
	bad.index_dim = 32;
	bad.pages = 1;
	ck_assert_int_eq(tf_kv_new(kv_be, &bad, &kv), TF_ERR_CONFIG);
}
END_TEST

START_TEST(bf16_rows)
{
	struct tf_kv_config c = {.layers = 1, .dim = 128, .rope = 32, .index_dim = 32,
				 .window = 4, .sources = 1, .ratio = {1},
				 .window_fmt = TF_KV_BF16, .pool_fmt = TF_KV_BF16,
				 .index_fmt = TF_KV_BF16, .pages = 2, .slots = 1,
				 .max_positions = 512};
	struct tf_kv *kv;
	int s;
	float v[128], got[128];
	ck_assert_int_eq(tf_kv_new(kv_be, &c, &kv), TF_OK);
	ck_assert_int_eq(tf_kv_open(kv, &s), TF_OK);
	ck_assert_int_eq(tf_kv_reserve(kv, s, 300), TF_OK);
	for (int i = 0; i < 128; i++)
		v[i] = (float)i / 3 - 20;
	tf_kv_window_put(kv, s, 0, 299, v);
	tf_kv_window_get(kv, s, 0, 299, got);
	for (int i = 0; i < 128; i++)
		ck_assert(got[i] == tf_round_bf16(v[i]));
	ck_assert_int_eq(tf_kv_pool_put(kv, s, 0, 299, v), TF_OK);
	ck_assert_int_eq(tf_kv_pool_get(kv, s, 0, 299, got), TF_OK);
	for (int i = 0; i < 128; i++)
		ck_assert(got[i] == tf_round_bf16(v[i]));
	ck_assert_int_eq(tf_kv_ik_put(kv, s, 0, 5, v), TF_OK);
	ck_assert_int_eq(tf_kv_ik_get(kv, s, 0, 5, got), TF_OK);
	for (int i = 0; i < 32; i++)
		ck_assert(got[i] == tf_round_bf16(v[i]));
	tf_kv_free(kv);
}
END_TEST

Suite *suite_kv(void)
{
	Suite *s = suite_create("kv");
	TCase *tc = tcase_create("kv");
	tcase_add_checked_fixture(tc, be_up, be_down);
	tcase_add_test(tc, e4m3_codes);
	tcase_add_test(tc, e2m1_codes);
	tcase_add_test(tc, row_formats);
	tcase_add_test(tc, pool_fork_rollback);
	tcase_add_test(tc, slots_and_config);
	tcase_add_test(tc, bf16_rows);
	suite_add_tcase(s, tc);
	return s;
}
