/* check_engram.c: unit tests of libcore/model/engram_*: the NumPy port, the
 * table layout's published check values, the hash (against a plain
 * reimplementation here and the Python reference fixture), host files. */
#include <check.h>

#include "fixtures.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/rng.h"
#include "model/engram_hash.h"
#include "model/engram_host.h"
#include "model/engram_layout.h"
#include "model/engram_map.h"
#include "model/engram_rng.h"
#include "model/engram_rows.h"
#include "model/engram_shard.h"
#include "base/f16.h"
#include <math.h>
#include <sys/stat.h>

/* A scratch path under /tmp, unique per process. */
static void scratch(char *buf, size_t n, const char *name)
{
	snprintf(buf, n, "/tmp/tf-check-engram-%d-%s", (int)getpid(), name);
}

START_TEST(rng_seedsequence)
{
	/* NumPy 1.24: SeedSequence(10007).pool and the first PCG64 draws. */
	uint32_t e = 10007, pool[4];
	tf_engram_rng_pool(&e, 1, pool);
	ck_assert_uint_eq(pool[0], 4053860749u);
	ck_assert_uint_eq(pool[1], 2814774274u);
	ck_assert_uint_eq(pool[2], 4246066442u);
	ck_assert_uint_eq(pool[3], 62394930u);
	struct tf_engram_rng r;
	tf_engram_rng_seed(&r, 10007);
	ck_assert_uint_eq(tf_engram_rng_next64(&r), 15187255322829266483ull);
	ck_assert_uint_eq(tf_engram_rng_next64(&r), 959186003677246517ull);
	ck_assert_uint_eq(tf_engram_rng_next64(&r), 7126631698937927467ull);
	/* A two-word seed: SeedSequence(2**40 + 5).pool. */
	uint32_t e2[2] = {5, 256};
	tf_engram_rng_pool(e2, 2, pool);
	ck_assert_uint_eq(pool[0], 2635101428u);
	ck_assert_uint_eq(pool[3], 3153711952u);
}
END_TEST

START_TEST(rng_integers)
{
	/* default_rng(s).integers(lo, hi, n, dtype=np.int64) from NumPy 1.24,
	 * through each of its paths: 32-bit Lemire, exactly 2^32 values,
	 * 64-bit Lemire. */
	struct tf_engram_rng r;
	int64_t o[8];
	static const int64_t a[] = {670, 805, 22, 807, 468, 515, 630};
	tf_engram_rng_seed(&r, 5);
	ck_assert_int_eq(tf_engram_rng_integers(&r, 0, 1000, 7, o), TF_OK);
	for (int i = 0; i < 7; i++)
		ck_assert_int_eq(o[i], a[i]);
	static const int64_t b[] = {2881021349, 3457461227, 97294834};
	tf_engram_rng_seed(&r, 5);
	tf_engram_rng_integers(&r, -3, (1LL << 32) - 3, 3, o);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(o[i], b[i]);
	static const int64_t c[] = {21856898532244405, 1936723733723074584, 4546736062569329156};
	tf_engram_rng_seed(&r, (1ULL << 40) + 5);
	tf_engram_rng_integers(&r, 0, (1LL << 62) + 12345, 3, o);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(o[i], c[i]);
	static const int64_t d[] = {2, 1, 2, 2, 1};
	tf_engram_rng_seed(&r, 7);
	tf_engram_rng_integers(&r, 0, 3, 5, o);
	for (int i = 0; i < 5; i++)
		ck_assert_int_eq(o[i], d[i]);
	ck_assert_int_eq(tf_engram_rng_integers(&r, 3, 3, 1, o), TF_ERR_ARG);
}
END_TEST

START_TEST(multipliers_published)
{
	/* The release's published multipliers (compressed vocab 99,092). */
	static const int64_t l1[] = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
	static const int64_t l14[] = {67716810739261, 51510806800915, 30921347202721,
				      82619226485591};
	int64_t m[4];
	tf_engram_multipliers(1, 99092, 4, m);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(m[i], l1[i]);
	tf_engram_multipliers(14, 99092, 4, m);
	for (int i = 0; i < 4; i++)
		ck_assert_int_eq(m[i], l14[i]);
}
END_TEST

START_TEST(primes)
{
	static const uint64_t prime[] = {2, 3, 37, 41, 1693, 16000057, 4294967291ull,
					 18446744073709551557ull};
	static const uint64_t comp[] = {0, 1, 4, 1681, 3215031751ull, 4759123141ull,
					1122004669633ull, 18446744073709551555ull,
					/* strong pseudoprimes to bases 2, 7, 61 */
					3825123056546413051ull};
	for (size_t i = 0; i < sizeof(prime) / sizeof(prime[0]); i++)
		ck_assert_msg(tf_engram_is_prime(prime[i]), "%llu is prime",
			      (unsigned long long)prime[i]);
	for (size_t i = 0; i < sizeof(comp) / sizeof(comp[0]); i++)
		ck_assert_msg(!tf_engram_is_prime(comp[i]), "%llu is composite",
			      (unsigned long long)comp[i]);
	/* Against trial division for every n below 20,000. */
	for (uint64_t n = 0; n < 20000; n++) {
		bool p = n >= 2;
		for (uint64_t f = 2; f * f <= n && p; f++)
			p = n % f != 0;
		ck_assert_msg(tf_engram_is_prime(n) == p, "n = %llu", (unsigned long long)n);
	}
}
END_TEST

START_TEST(layout_release)
{
	struct tf_config p;
	struct tf_engram_layout lay;
	ck_assert_int_eq(tf_config_preset(&p, "release"), TF_OK);
	ck_assert_int_eq(tf_engram_layout_init(&lay, &p), TF_OK);
	ck_assert_uint_eq(lay.cols, 24);
	ck_assert_int_eq(lay.prime[0][0], 16000057);
	ck_assert_int_eq(lay.prime[1][23], 16000889);
	ck_assert_int_eq(lay.offset[0][23], 368005705);
	ck_assert_uint_eq(lay.rows[0], 384006168);
	ck_assert_uint_eq(lay.rows[1], 384016682);
	/* No prime twice, anywhere; each order's heads ascend. */
	for (int a = 0; a < 48; a++)
		for (int b = 0; b < a; b++)
			ck_assert_int_ne(lay.prime[a / 24][a % 24], lay.prime[b / 24][b % 24]);
	for (int l = 0; l < 2; l++)
		for (int c = 1; c < 24; c++)
			if (c % 8)
				ck_assert_int_gt(lay.prime[l][c], lay.prime[l][c - 1]);
	/* A wrong row count in the config is refused. */
	p.engram_rows[1]++;
	ck_assert_int_eq(tf_engram_layout_init(&lay, &p), TF_ERR_CONFIG);
	/* Spans and the TP split. */
	uint32_t c0, c1;
	tf_engram_rank_cols(24, 1, 2, &c0, &c1);
	ck_assert_uint_eq(c0, 12);
	ck_assert_uint_eq(c1, 24);
	tf_engram_rank_cols(24, 6, 7, &c0, &c1);
	ck_assert_uint_eq(c0, 24);
	ck_assert_uint_eq(c1, 24);
	tf_engram_rank_cols(24, 2, 5, &c0, &c1);
	ck_assert_uint_eq(c0, 10);
	ck_assert_uint_eq(c1, 15);
	uint64_t lo, hi;
	p.engram_rows[1]--;
	tf_engram_layout_init(&lay, &p);
	tf_engram_layout_span(&lay, 0, 12, 24, &lo, &hi);
	ck_assert_uint_eq(lo, (uint64_t)lay.offset[0][12]);
	ck_assert_uint_eq(hi, 384006168);
	/* The smaller presets' row counts (worked out by hand in config.c). */
	ck_assert_int_eq(tf_config_preset(&p, "tiny"), TF_OK);
	ck_assert_int_eq(tf_engram_layout_init(&lay, &p), TF_OK);
	ck_assert_int_eq(lay.prime[0][0], 1009);
	ck_assert_int_eq(lay.prime[0][2], 1019);
	ck_assert_int_eq(tf_config_preset(&p, "small"), TF_OK);
	ck_assert_int_eq(tf_engram_layout_init(&lay, &p), TF_OK);
	p.n_engram = 0;
	ck_assert_int_eq(tf_engram_layout_init(&lay, &p), TF_ERR_CONFIG);
}
END_TEST

START_TEST(reduction_exact)
{
	/* The Barrett floor-mod against C's % on extremes and random values. */
	static const uint64_t ps[] = {2, 3, 31, 16000057, 4294967291ull, (1ull << 61) - 1};
	struct tf_rng r;
	tf_rng_seed(&r, 99);
	for (size_t i = 0; i < sizeof(ps) / sizeof(ps[0]); i++) {
		struct tf_engram_col c = {ps[i], UINT64_MAX / ps[i],
					  (uint64_t)(((unsigned __int128)1 << 64) % ps[i]), 7};
		for (int k = 0; k < 20000; k++) {
			uint64_t v = k < 8 ? (uint64_t[]){0, 1, INT64_MAX, (uint64_t)INT64_MIN,
							  UINT64_MAX, UINT64_MAX - 1, ps[i],
							  ps[i] - 1}[k]
					   : tf_rng_u64(&r);
			int64_t s = (int64_t)v, m = s % (int64_t)ps[i];
			if (m < 0)
				m += (int64_t)ps[i];
			ck_assert_int_eq(tf_engram_col_row(&c, v), m + 7);
		}
	}
}
END_TEST

/* The rules of engram_hash.h written the slow, obvious way. */
static void slow_hash(const struct tf_engram_layout *lay, const struct tf_engram_host *h,
		      uint32_t pad_id, const uint32_t *ids, size_t n, const uint32_t *lb, size_t nb,
		      int64_t *rows)
{
	for (size_t t = 0; t < n; t++)
		for (uint32_t l = 0; l < lay->nlayers; l++) {
			int64_t roll = 0;
			bool blocked = false;
			for (uint32_t s = 0; s < lay->max_ngram; s++) {
				long j = (long)t - (long)s;
				uint32_t id = 0;
				if (j >= 0)
					id = ids[j];
				else if (-j <= (long)nb)
					id = lb[(long)nb + j];
				else
					blocked = true;
				if (!blocked && id >= h->vocab)
					blocked = true;
				int64_t v = blocked ? h->map[pad_id] : h->map[id];
				roll ^= (int64_t)((uint64_t)v * (uint64_t)h->mult[l][s]);
				if (s == 0)
					continue;
				for (uint32_t k = 0; k < lay->heads; k++) {
					uint32_t c = (s - 1) * lay->heads + k;
					int64_t m = roll % lay->prime[l][c];
					if (m < 0)
						m += lay->prime[l][c];
					rows[(t * lay->nlayers + l) * lay->cols + c] = m + lay->offset[l][c];
				}
			}
		}
}

START_TEST(hash_fixture)
{
	/* tests/data/engram-hash-ref.bin, from tools/engram-ref.py (NumPy
	 * multipliers, Python integers). */
	const char *path = data_path("engram-hash-ref.bin");
	struct tf_engram_fixture f;
	tf_status st = tf_engram_fixture_read(path, 24, &f);
	ck_assert_msg(st == TF_OK, "%s", tf_errmsg(st));
	ck_assert_uint_eq(f.ncases, 4);
	struct tf_config p;
	struct tf_engram_layout lay;
	struct tf_engram_hasher h;
	ck_assert_int_eq(tf_config_preset(&p, "release"), TF_OK);
	ck_assert_int_eq(tf_engram_layout_init(&lay, &p), TF_OK);
	/* The fixture's multipliers are NumPy's, so equal to ours. */
	for (uint32_t l = 0; l < 2; l++) {
		int64_t m[4];
		tf_engram_multipliers(f.host.layer_ids[l], f.host.compressed, 4, m);
		for (int s = 0; s < 4; s++)
			ck_assert_int_eq(m[s], f.host.mult[l][s]);
	}
	ck_assert_int_eq(tf_engram_hasher_init(&h, &lay, &f.host, 2), TF_OK);
	for (uint32_t i = 0; i < f.ncases; i++) {
		struct tf_engram_case *k = &f.cases[i];
		size_t nrows = (size_t)k->n * 2 * 24;
		int64_t *got = malloc(nrows * 8 + 8), *slow = malloc(nrows * 8 + 8);
		tf_engram_hash(&h, k->ids, k->n, k->lookback, k->nb, 0, 24, got);
		slow_hash(&lay, &f.host, 2, k->ids, k->n, k->lookback, k->nb, slow);
		for (size_t j = 0; j < nrows; j++) {
			ck_assert_msg(got[j] == k->rows[j], "case %u row %zu: %lld, reference %lld", i,
				      j, (long long)got[j], (long long)k->rows[j]);
			ck_assert_int_eq(slow[j], k->rows[j]);
		}
		/* Rank 1 of 2 gets columns 12..23 of the same rows. */
		int64_t *half = malloc(nrows * 4 + 8);
		tf_engram_hash(&h, k->ids, k->n, k->lookback, k->nb, 12, 24, half);
		for (size_t t = 0; t < (size_t)k->n * 2; t++)
			for (int c = 0; c < 12; c++)
				ck_assert_int_eq(half[t * 12 + c], k->rows[t * 24 + 12 + c]);
		free(got);
		free(slow);
		free(half);
	}
	/* A window hashed in two pieces, the second with a lookback, equals
	 * the whole window hashed at once. */
	struct tf_engram_case *w = &f.cases[0];
	int64_t *whole = malloc((size_t)w->n * 48 * 8), *part = malloc((size_t)w->n * 48 * 8);
	tf_engram_hash(&h, w->ids, w->n, w->lookback, w->nb, 0, 24, whole);
	tf_engram_hash(&h, w->ids, 10, w->lookback, w->nb, 0, 24, part);
	tf_engram_hash(&h, w->ids + 10, w->n - 10, w->ids + 5, 5, 0, 24, part + 10 * 48);
	ck_assert_mem_eq(whole, part, (size_t)w->n * 48 * 8);
	free(whole);
	free(part);
	tf_engram_fixture_release(&f);
}
END_TEST

/* A small valid map: id i -> (i * 7) % 13 renumbered by first appearance. */
static uint32_t *small_map(uint32_t vocab, uint32_t *compressed)
{
	uint32_t *map = malloc(vocab * 4), seen[13];
	uint32_t next = 0;
	memset(seen, 0xff, sizeof(seen));
	for (uint32_t i = 0; i < vocab; i++) {
		uint32_t k = i * 7 % 13;
		if (seen[k] == UINT32_MAX)
			seen[k] = next++;
		map[i] = seen[k];
	}
	*compressed = next;
	return map;
}

START_TEST(host_roundtrip)
{
	struct tf_config p;
	ck_assert_int_eq(tf_config_preset(&p, "release"), TF_OK);
	uint32_t comp, *map = small_map(100, &comp);
	struct tf_engram_host h, r;
	ck_assert_int_eq(tf_engram_host_init(&h, &p, map, 100, comp), TF_OK);
	char path[256];
	scratch(path, sizeof(path), "host.bin");
	ck_assert_int_eq(tf_engram_host_write(&h, path), TF_OK);
	tf_status st = tf_engram_host_read(path, &r);
	ck_assert_msg(st == TF_OK, "%s", tf_errmsg(st));
	ck_assert_uint_eq(r.vocab, 100);
	ck_assert_uint_eq(r.compressed, 13);
	ck_assert_mem_eq(r.mult, h.mult, sizeof(h.mult));
	ck_assert_mem_eq(r.map, h.map, 400);
	tf_engram_host_release(&r);

	/* Every truncation is refused, and so is a byte more. */
	FILE *fp = fopen(path, "rb");
	unsigned char buf[1024];
	size_t n = fread(buf, 1, sizeof(buf), fp);
	fclose(fp);
	unlink(path);
	ck_assert_uint_eq(n, 8 + 16 + 8 + 64 + 400);
	for (size_t k = 0; k < n; k++) {
		st = tf_engram_host_parse(buf, k, "t", &r);
		ck_assert_int_eq(st, TF_ERR_FORMAT);
	}
	ck_assert_int_eq(tf_engram_host_parse(buf, n + 1, "t", &r), TF_ERR_FORMAT);
	/* Magic, version, an even multiplier, a map out of order. */
	buf[0] = 'X';
	ck_assert_int_eq(tf_engram_host_parse(buf, n, "t", &r), TF_ERR_FORMAT);
	ck_assert_ptr_nonnull(strstr(tf_errmsg(TF_ERR_FORMAT), "magic"));
	buf[0] = 'D';
	buf[7] = '2';
	ck_assert_int_eq(tf_engram_host_parse(buf, n, "t", &r), TF_ERR_VERSION);
	buf[7] = '1';
	buf[8 + 16 + 8] ^= 1;
	ck_assert_int_eq(tf_engram_host_parse(buf, n, "t", &r), TF_ERR_FORMAT);
	buf[8 + 16 + 8] ^= 1;
	buf[n - 400] = 5; /* map[0] = 5 before 0..4 were seen */
	ck_assert_int_eq(tf_engram_host_parse(buf, n, "t", &r), TF_ERR_FORMAT);
	buf[n - 400] = 0;
	ck_assert_int_eq(tf_engram_host_parse(buf, n, "t", &r), TF_OK);
	tf_engram_host_release(&r);
	tf_engram_host_release(&h);
}
END_TEST

START_TEST(hash_blocked)
{
	/* Image ids (past the map) and the sequence start block, the pad
	 * stands in, and a blocked step blocks every larger order. */
	struct tf_config p;
	struct tf_engram_layout lay;
	struct tf_engram_host host;
	struct tf_engram_hasher h;
	ck_assert_int_eq(tf_config_preset(&p, "release"), TF_OK);
	ck_assert_int_eq(tf_engram_layout_init(&lay, &p), TF_OK);
	uint32_t comp, *map = small_map(50, &comp);
	ck_assert_int_eq(tf_engram_host_init(&host, &p, map, 50, comp), TF_OK);
	ck_assert_int_eq(tf_engram_hasher_init(&h, &lay, &host, 2), TF_OK);
	/* position 1's tokens: 9, then an image id: equal to 9 after pad x3. */
	uint32_t a[] = {1000, 9}, b[] = {2, 9};
	int64_t ra[2 * 48], rb[2 * 48];
	tf_engram_hash(&h, a, 2, NULL, 0, 0, 24, ra);
	tf_engram_hash(&h, b, 2, NULL, 0, 0, 24, rb);
	ck_assert_mem_eq(ra + 48, rb + 48, 48 * 8);
	/* At position 0 the lookback decides; no lookback = all pad. */
	uint32_t lb[] = {2, 2, 2};
	tf_engram_hash(&h, b + 1, 1, lb, 3, 0, 24, ra);
	ck_assert_mem_eq(ra, rb + 48, 48 * 8);
	int64_t slow[48];
	tf_engram_hash(&h, b + 1, 1, lb, 3, 0, 24, ra);
	slow_hash(&lay, &host, 2, b + 1, 1, lb, 3, slow);
	ck_assert_mem_eq(ra, slow, sizeof(slow));
	/* Pad out of the map is a config error. */
	ck_assert_int_eq(tf_engram_hasher_init(&h, &lay, &host, 50), TF_ERR_CONFIG);
	tf_engram_host_release(&host);
}
END_TEST

START_TEST(e4m3_codec)
{
	ck_assert(tf_engram_e4m3_to_f32(0x38) == 1.0f);
	ck_assert(tf_engram_e4m3_to_f32(0xb8) == -1.0f);
	ck_assert(tf_engram_e4m3_to_f32(0x7e) == 448.0f);
	ck_assert(tf_engram_e4m3_to_f32(0x08) == 0.015625f);
	ck_assert(tf_engram_e4m3_to_f32(0x01) == 0.001953125f);
	ck_assert(isnan(tf_engram_e4m3_to_f32(0x7f)) && isnan(tf_engram_e4m3_to_f32(0xff)));
	/* Every byte but NaN encodes back to itself. */
	for (int b = 0; b < 256; b++)
		if ((b & 0x7f) != 0x7f)
			ck_assert_int_eq(tf_engram_f32_to_e4m3(tf_engram_e4m3_to_f32((uint8_t)b)), b);
	/* Ties go to even, large values saturate, NaN stays NaN. */
	ck_assert_int_eq(tf_engram_f32_to_e4m3(1.0625f), 0x38);
	ck_assert_int_eq(tf_engram_f32_to_e4m3(1.1875f), 0x3a);
	ck_assert_int_eq(tf_engram_f32_to_e4m3(0.0029296875f), 0x02); /* 1.5 * 2^-9 */
	ck_assert_int_eq(tf_engram_f32_to_e4m3(1e9f), 0x7e);
	ck_assert_int_eq(tf_engram_f32_to_e4m3(-460.0f), 0xfe);
	ck_assert_int_eq(tf_engram_f32_to_e4m3(NAN), 0x7f);
}
END_TEST

START_TEST(lut_values)
{
	const uint16_t *t = tf_engram_lut();
	ck_assert_uint_eq(t[127 << 8 | 0x38], 0x3f80);        /* 1.0 */
	ck_assert_uint_eq(t[127 << 8 | 0xb8], 0xbf80);        /* -1.0 */
	ck_assert_uint_eq(t[128 << 8 | 0x7e], 0x4460);        /* 896 */
	ck_assert_uint_eq(t[120 << 8 | 0x01], tf_f32_to_bf16(ldexpf(1, -16)));
	ck_assert_uint_eq(t[1 << 8 | 0x01], 0);               /* 2^-135 rounds to 0 */
	ck_assert_uint_eq(t[255 << 8 | 0x38], 0x7f80);        /* 2^128 overflows */
	for (int b = 0; b < 256; b++)
		ck_assert_uint_eq(t[b], 0);                   /* scale 0 gives 0 */
	/* Every finite entry is the exact product rounded once to bf16. */
	for (int s = 1; s < 255; s++)
		for (int b = 0; b < 256; b++) {
			float x = tf_engram_e4m3_to_f32((uint8_t)b);
			if (isnan(x)) {
				ck_assert(isnan(tf_bf16_to_f32(t[s << 8 | b])));
				continue;
			}
			double want = ldexp((double)x, s - 127);
			float got = tf_bf16_to_f32(t[s << 8 | b]);
			if (isinf(got) || want == 0)
				continue;
			double ulp = fmax(ldexp(fabs(want), -8), ldexp(1, -133));
			ck_assert_msg(fabs(got - want) <= ulp / 2 * 1.0000001, "s %d b %d", s, b);
		}
}
END_TEST

START_TEST(row_roundtrip)
{
	struct tf_rng r;
	tf_rng_seed(&r, 5);
	float v[256];
	uint8_t row[264];
	uint16_t out[256];
	for (int trial = 0; trial < 50; trial++) {
		float mag = ldexpf(1, (int)tf_rng_below(&r, 40) - 20);
		for (int i = 0; i < 256; i++)
			v[i] = tf_rng_normal(&r) * mag;
		if (trial == 0)
			memset(v + 32, 0, 32 * sizeof(float)); /* an all-zero block */
		tf_engram_row_encode(v, row);
		tf_engram_rows_decode(row, 1, out);
		if (trial == 0)
			ck_assert_uint_eq(row[256 + 1], 0);
		for (int b = 0; b < 8; b++) {
			float amax = 0;
			for (int i = 0; i < 32; i++)
				amax = fmaxf(amax, fabsf(v[b * 32 + i]));
			for (int i = 0; i < 32; i++) {
				float got = tf_bf16_to_f32(out[b * 32 + i]), want = v[b * 32 + i];
				/* e4m3 keeps 3 mantissa bits; the block's scale puts its
				 * largest value near 448, so the smallest lose more */
				float tol = fmaxf(fabsf(want) / 16, amax / 448 / 512 * 2) * 1.01f;
				ck_assert_msg(fabsf(got - want) <= tol, "%g vs %g", got, want);
			}
		}
	}
}
END_TEST

static void shard_roundtrip(int uring)
{
	if (!uring)
		setenv("TF_ENGRAM_URING", "0", 1);
	setenv("TF_ENGRAM_QD", "8", 1);
	char path[256];
	scratch(path, sizeof(path), uring ? "shard-u.bin" : "shard-t.bin");
	struct tf_engram_shard_header h = {14, 1000, 1500, 9000, 264};
	struct tf_engram_shard_writer w;
	ck_assert_int_eq(tf_engram_shard_create(&w, path, &h), TF_OK);
	uint8_t row[264];
	for (uint64_t i = h.lo; i < h.hi; i++) {
		for (int k = 0; k < 264; k++)
			row[k] = (uint8_t)(i * 31 + (uint64_t)k * 7);
		ck_assert_int_eq(tf_engram_shard_append(&w, row, 1), TF_OK);
	}
	ck_assert_int_eq(tf_engram_shard_commit(&w), TF_OK);
	struct tf_engram_shard *s;
	tf_status st = tf_engram_shard_open(path, &s);
	ck_assert_msg(st == TF_OK, "%s", tf_errmsg(st));
	/* the case must run the path it names: io_uring where it was asked
	 * for (make check installs liburing), the threads otherwise */
	ck_assert_str_eq(tf_engram_shard_backend(s), uring ? "io_uring" : "threads");
	ck_assert_uint_eq(tf_engram_shard_info(s)->layer, 14);
	uint64_t rows[200];
	struct tf_rng r;
	tf_rng_seed(&r, 8);
	for (int i = 0; i < 200; i++)
		rows[i] = 1000 + tf_rng_below(&r, 500);
	rows[0] = 1000;
	rows[1] = 1499;
	uint8_t *out = malloc(200 * 264);
	ck_assert_int_eq(tf_engram_shard_fetch(s, rows, 200, out), TF_OK);
	for (int i = 0; i < 200; i++)
		for (int k = 0; k < 264; k++)
			ck_assert_uint_eq(out[i * 264 + k], (uint8_t)(rows[i] * 31 + (uint64_t)k * 7));
	rows[5] = 1500;
	ck_assert_int_eq(tf_engram_shard_fetch(s, rows, 200, out), TF_ERR_RANGE);
	rows[5] = 999;
	ck_assert_int_eq(tf_engram_shard_fetch(s, rows, 200, out), TF_ERR_RANGE);
	free(out);
	tf_engram_shard_close(s);

	/* A short file, a wrong magic, a foreign version. */
	ck_assert_int_eq(truncate(path, 4096 + 499 * 264), 0);
	ck_assert_int_eq(tf_engram_shard_open(path, &s), TF_ERR_FORMAT);
	ck_assert_int_eq(truncate(path, 20), 0);
	ck_assert_int_eq(tf_engram_shard_open(path, &s), TF_ERR_FORMAT);
	unlink(path);
	unsigned char hdr[48] = "DSV41EN2";
	ck_assert_int_eq(tf_engram_shard_header_parse(hdr, 48, 4096, "x", &h), TF_ERR_VERSION);
	hdr[6] = 'X';
	ck_assert_int_eq(tf_engram_shard_header_parse(hdr, 48, 4096, "x", &h), TF_ERR_FORMAT);
	ck_assert_int_eq(tf_engram_shard_open("/nonexistent/x.bin", &s), TF_ERR_NOTFOUND);
}

START_TEST(shard_uring)
{
	shard_roundtrip(1);
}
END_TEST

START_TEST(shard_threads)
{
	shard_roundtrip(0);
}
END_TEST

START_TEST(map_normalize)
{
	static const char *const cases[][2] = {
		{"  Hello\tWorld \n", "hello world"},
		{" ", " "},                 /* a lone space survives as a space */
		{"\t", " "},                /* ... and so does any lone run */
		{"  ", " "},
		{"a \t\r\n b", "a b"},
		{"\xef\xbc\xa8\xef\xbd\x85\xef\xbd\x8c\xef\xbd\x8c\xef\xbd\x8f", "hello"}, /* fullwidth */
		{"caf\xc3\xa9", "cafe"},      /* é: NFD, mark dropped */
		{"\xc4\xb0stanbul", "istanbul"}, /* İ */
		{"\xef\xac\x81", "fi"},       /* ﬁ ligature */
		{"\xce\xa3\xce\xa3", "\xcf\x83\xcf\x83"}, /* ΣΣ -> σσ, per character */
		{"\xc2\xa0x\xc2\xa0", "x"},   /* NBSP is a space after NFKC */
		{"x\xe2\x80\xa8", "x"},       /* U+2028 is White_Space: stripped */
		{"\xe0\xa4\x95\xe0\xa4\xbe", "\xe0\xa4\x95"}, /* Devanagari vowel sign (Mc) dropped */
		{"", ""},
	};
	struct tf_buf b = TF_BUF_INIT;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ck_assert_int_eq(tf_engram_normalize(cases[i][0], strlen(cases[i][0]), &b), TF_OK);
		ck_assert_msg(b.len == strlen(cases[i][1]) && !memcmp(b.data ? b.data : "", cases[i][1], b.len),
			      "case %zu: got '%.*s'", i, (int)b.len, b.data ? b.data : "");
	}
	ck_assert_int_eq(tf_engram_normalize("\xff", 1, &b), TF_ERR_FORMAT);
	/* keys: bytes that are not UTF-8 alone, or U+FFFD, give the raw token;
	 * text that normalises to nothing keeps the text */
	ck_assert_int_eq(tf_engram_map_key((const uint8_t *)"\xe2\x80", 2, "\xc3\xa2\xc4\xa2", 4, &b), TF_OK);
	ck_assert_mem_eq(b.data, "\xc3\xa2\xc4\xa2", 4);
	ck_assert_int_eq(tf_engram_map_key((const uint8_t *)"\xef\xbf\xbd", 3, "raw", 3, &b), TF_OK);
	ck_assert_str_eq(b.data, "raw");
	ck_assert_int_eq(tf_engram_map_key((const uint8_t *)"\xcc\x81", 2, "r", 1, &b), TF_OK);
	ck_assert_str_eq(b.data, "\xcc\x81");
	ck_assert_int_eq(tf_engram_map_key(NULL, 0, NULL, 0, &b), TF_OK);
	ck_assert_uint_eq(b.len, 0);
	tf_buf_release(&b);
}
END_TEST

static const char *const fake_vocab[] = {"<s>", "Hello", "hello", " Hello", "HELLO", "\t",
					 " ", "\xe2\x80", NULL, "h\xc3\xa9llo"};

static const uint8_t *fake_token(void *ctx, uint32_t id, size_t *len, const char **raw,
				 size_t *rawn)
{
	const char *s = fake_vocab[id];
	*raw = s ? "RAW" : NULL;
	*rawn = s ? 3 : 0;
	*len = s ? strlen(s) : 0;
	return (const uint8_t *)s;
}

START_TEST(map_build)
{
	uint32_t *map, comp;
	ck_assert_int_eq(tf_engram_map_build_fn(10, fake_token, NULL, &map, &comp), TF_OK);
	/* <s>, hello x4, (\t and " " share " "), RAW, "" (a hole), then héllo = hello */
	static const uint32_t want[] = {0, 1, 1, 1, 1, 2, 2, 3, 4, 1};
	for (int i = 0; i < 10; i++)
		ck_assert_uint_eq(map[i], want[i]);
	ck_assert_uint_eq(comp, 5);
	ck_assert_int_eq(tf_engram_map_check(map, 10, comp), TF_OK);
	free(map);
}
END_TEST

Suite *suite_engram(void)
{
	Suite *s = suite_create("engram");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, rng_seedsequence);
	tcase_add_test(tc, rng_integers);
	tcase_add_test(tc, multipliers_published);
	tcase_add_test(tc, primes);
	tcase_add_test(tc, layout_release);
	tcase_add_test(tc, reduction_exact);
	tcase_add_test(tc, hash_fixture);
	tcase_add_test(tc, host_roundtrip);
	tcase_add_test(tc, hash_blocked);
	tcase_add_test(tc, e4m3_codec);
	tcase_add_test(tc, lut_values);
	tcase_add_test(tc, row_roundtrip);
	tcase_add_test(tc, shard_uring);
	tcase_add_test(tc, shard_threads);
	tcase_add_test(tc, map_normalize);
	tcase_add_test(tc, map_build);
	suite_add_tcase(s, tc);
	return s;
}
