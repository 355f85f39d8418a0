/* check_exl3.c: unit tests of libcore/model/exl3: the test vectors of
 * exl3-format.md §2, §4 and §8, tile order, the encoder's round trip, the
 * Hadamard, the GEMV/GEMM against the dense dequantised product, and the
 * tensor-parallel slices for worlds 1, 2 and 4. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/rng.h"
#include "base/thread.h"
#include "model/exl3.h"

static const enum tf_exl3_cb cbs[3] = {TF_EXL3_CB_3INST, TF_EXL3_CB_MCG, TF_EXL3_CB_MUL1};

/* §8 LCG: s ← s·1664525 + 1013904223 from s = 1; each word is the high 16
 * bits of the new s. */
static void lcg_words(uint16_t *w, size_t n)
{
	uint32_t s = 1;
	for (size_t i = 0; i < n; i++) {
		s = s * 1664525u + 1013904223u;
		w[i] = (uint16_t)(s >> 16);
	}
}

/* FNV-1a-32 over fp16 values, low byte first. */
static uint32_t fnv16(const uint16_t *v, size_t n)
{
	uint32_t h = 0x811C9DC5u;
	for (size_t i = 0; i < n; i++) {
		h = (h ^ (v[i] & 0xff)) * 0x01000193u;
		h = (h ^ (v[i] >> 8)) * 0x01000193u;
	}
	return h;
}

START_TEST(codebook_vectors)
{
	static const uint16_t v[][4] = {
		{0x0000, 0x3A25, 0x3F60, 0xC2E8}, {0x0001, 0xBB5B, 0x304E, 0x3921},
		{0x0002, 0x3B74, 0xBA13, 0xB72D}, {0x1234, 0xC066, 0x3E0F, 0xB89E},
		{0x8000, 0xB7F8, 0xB915, 0xBAF2}, {0xABCD, 0xB98E, 0x35E7, 0xBD42},
		{0xFFFF, 0xB110, 0x3ACD, 0xB936},
	};
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		for (int c = 0; c < 3; c++) {
			uint16_t got = tf_exl3_cb_decode(cbs[c], v[i][0]);
			ck_assert_msg(got == v[i][c + 1], "state %04X cb %s: %04X, expected %04X", v[i][0],
				      tf_exl3_cb_name(cbs[c]), got, v[i][c + 1]);
			ck_assert(tf_exl3_cb_table(cbs[c])[v[i][0]] == tf_f16_to_f32(v[i][c + 1]));
		}
	/* §4: RMS / min / max over all 65536 states. */
	static const double stat[3][3] = {{1.243711, -3.957, 3.973}, {1.244112, -3.949, 3.949},
					  {1.000312, -3.453, 3.348}};
	for (int c = 0; c < 3; c++) {
		const float *t = tf_exl3_cb_table(cbs[c]);
		ck_assert_ptr_nonnull(t);
		double ss = 0, lo = 1e9, hi = -1e9;
		for (int s = 0; s < 65536; s++) {
			ss += (double)t[s] * t[s];
			lo = fmin(lo, t[s]);
			hi = fmax(hi, t[s]);
		}
		double rms = sqrt(ss / 65536);
		ck_assert_msg(fabs(rms - stat[c][0]) < 1e-6 && fabs(lo - stat[c][1]) < 1e-3 &&
				      fabs(hi - stat[c][2]) < 1e-3,
			      "cb %s: rms %.6f min %.4f max %.4f", tf_exl3_cb_name(cbs[c]), rms, lo, hi);
	}
}
END_TEST

START_TEST(worked_states)
{
	uint16_t tile[128] = {0};
	tile[0] = 0x1234;
	tile[1] = 0xABCD;
	tile[62] = 0x0F0F;
	static const struct { unsigned t; uint16_t s; } b4[] = {
		{0, 0xF0FA}, {1, 0x0FAB}, {2, 0xFABC}, {3, 0xABCD}, {4, 0xBCD1}, {5, 0xCD12},
		{254, 0x00F0}, {255, 0x0F0F},
	};
	static const uint8_t c4[] = {0xA, 0xB, 0xC, 0xD, 1, 2, 3, 4};
	for (size_t i = 0; i < 8; i++) {
		ck_assert_uint_eq(tf_exl3_tile_state(tile, 4, b4[i].t), b4[i].s);
		ck_assert_uint_eq(tf_exl3_tile_code(tile, 4, (unsigned)i), c4[i]);
	}
	ck_assert_uint_eq(tf_exl3_tile_code(tile, 4, 253), 0xF);
	tile[62] = 0;
	tile[30] = 0x000F;
	static const uint16_t b2[] = {0x003E, 0x00FA, 0x03EA, 0x0FAB};
	static const uint8_t c2[] = {2, 2, 2, 3};
	for (unsigned t = 0; t < 4; t++) {
		ck_assert_uint_eq(tf_exl3_tile_state(tile, 2, t), b2[t]);
		ck_assert_uint_eq(tf_exl3_tile_code(tile, 2, t), c2[t]);
	}
	ck_assert_uint_eq(tf_exl3_tile_code(tile, 2, 254), 3);
	ck_assert_uint_eq(tf_exl3_tile_code(tile, 2, 255), 3);
}
END_TEST

START_TEST(lcg_states)
{
	static const uint16_t want[8][4] = {
		{0x785A, 0xF0B5, 0xE16A, 0xC2D5}, {0xB909, 0xE425, 0x9097, 0x425E},
		{0xF002, 0x8017, 0x00BD, 0x05E8}, {0x5B65, 0xB65E, 0x65E8, 0x5E88},
		{0xDDEB, 0xBD7A, 0xAF44, 0xE883}, {0x9E57, 0x95E8, 0x7A20, 0x883C},
		{0x312F, 0x97A2, 0xD107, 0x83C8}, {0xF55E, 0x5E88, 0x883C, 0x3C88},
	};
	uint16_t w[128];
	lcg_words(w, 128);
	ck_assert_uint_eq(w[0], 0x3C88);
	ck_assert_uint_eq(w[3], 0xB473);
	for (unsigned b = 1; b <= 8; b++)
		for (unsigned t = 0; t < 4; t++)
			ck_assert_msg(tf_exl3_tile_state(w, b, t) == want[b - 1][t], "b=%u t=%u: %04X", b, t,
				      tf_exl3_tile_state(w, b, t));
}
END_TEST

START_TEST(trellis_vectors_small)
{
	static const struct {
		unsigned b;
		enum tf_exl3_cb cb;
		uint16_t row0[4], r1c0, r0c8;
		uint32_t fnv;
	} v[] = {
		{2, TF_EXL3_CB_3INST, {0x3FB2, 0x3F63, 0xB996, 0x3C56}, 0xB0EC, 0x9DE0, 0xBB5E73C9},
		{2, TF_EXL3_CB_MCG, {0x3D55, 0xAF3C, 0x3849, 0xBDE4}, 0xBCDC, 0x33FA, 0x16899B56},
		{2, TF_EXL3_CB_MUL1, {0x3C15, 0xBC26, 0x3D15, 0x3124}, 0xB6DA, 0xB141, 0xE27283C6},
		{3, TF_EXL3_CB_3INST, {0x3C95, 0x3553, 0xBD06, 0x3381}, 0x32FC, 0x3FA5, 0x2F2D6446},
		{3, TF_EXL3_CB_MCG, {0xBCF8, 0x3B9C, 0xB107, 0xC1E7}, 0x3A1C, 0xBC1F, 0x310CC7DA},
		{3, TF_EXL3_CB_MUL1, {0x2D15, 0x28F7, 0x352B, 0x3BBA}, 0xBEC6, 0x3990, 0x0CBBE543},
		{4, TF_EXL3_CB_3INST, {0x3E76, 0x346E, 0x3C8B, 0xB0ED}, 0xBC5D, 0xBD3B, 0x613220C7},
		{4, TF_EXL3_CB_MCG, {0xBD85, 0x3338, 0xBC5E, 0x3D10}, 0x4076, 0x3EAD, 0xF2BB4A39},
		{4, TF_EXL3_CB_MUL1, {0x3771, 0x3CAD, 0xBFC0, 0x393D}, 0x3B30, 0x1D12, 0x08FD1682},
	};
	uint16_t tr[8 * 16 * 8], wh[16 * 128];
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		struct tf_exl3_geom g = {16, 128, v[i].b, v[i].cb};
		lcg_words(tr, 8 * 16 * v[i].b);
		tf_exl3_decode(&g, tr, wh);
		for (int c = 0; c < 4; c++)
			ck_assert_uint_eq(wh[c], v[i].row0[c]);
		ck_assert_uint_eq(wh[128], v[i].r1c0);
		ck_assert_uint_eq(wh[8], v[i].r0c8);
		ck_assert_msg(fnv16(wh, 16 * 128) == v[i].fnv, "b=%u cb=%s: FNV %08X, expected %08X",
			      v[i].b, tf_exl3_cb_name(v[i].cb), fnv16(wh, 16 * 128), v[i].fnv);
	}
}
END_TEST

START_TEST(trellis_vectors_48x256)
{
	static const uint32_t want[8][3] = {
		{0xB2ADD732, 0x65932A4F, 0x663ABCF5}, {0x3534105A, 0xC86B176B, 0x51A60AB8},
		{0xF6C9057F, 0x10E5A155, 0xE675CA71}, {0x4BE9B1A0, 0x779B8E0D, 0x7BB4E5AE},
		{0x46F9189A, 0xAF9709BB, 0x210E2823}, {0x29549A49, 0xDCD77DB9, 0x6DCF5A1E},
		{0x25094D12, 0xD8F23ACD, 0xFC0368D7}, {0x870DD802, 0xE552ADD7, 0x66F45BA5},
	};
	uint16_t *tr = malloc(2 * 3 * 16 * 128), *wh = malloc(2 * 48 * 256);
	for (unsigned b = 1; b <= 8; b++)
		for (int c = 0; c < 3; c++) {
			struct tf_exl3_geom g = {48, 256, b, cbs[c]};
			lcg_words(tr, 3 * 16 * 16 * b);
			tf_exl3_decode(&g, tr, wh);
			uint32_t h = fnv16(wh, 48 * 256);
			ck_assert_msg(h == want[b - 1][c], "b=%u cb=%s: FNV %08X, expected %08X", b,
				      tf_exl3_cb_name(cbs[c]), h, want[b - 1][c]);
		}
	free(tr);
	free(wh);
}
END_TEST

START_TEST(tile_order)
{
	static const unsigned first[9][2] = {{0, 0}, {1, 0}, {8, 0}, {9, 0}, {0, 8},
					     {1, 8}, {8, 8}, {9, 8}, {2, 0}};
	for (unsigned t = 0; t < 9; t++)
		ck_assert_uint_eq(tf_exl3_tile_pos(t), first[t][0] * 16 + first[t][1]);
	int seen[256] = {0};
	for (unsigned t = 0; t < 256; t++)
		seen[tf_exl3_tile_pos(t)]++;
	for (unsigned i = 0; i < 256; i++)
		ck_assert_int_eq(seen[i], 1);
	/* The fast f32 decoder (unrolled order, windowed states) equals the
	 * bit-by-bit reference for random tiles of every b and codebook. */
	struct tf_rng rng;
	tf_rng_seed(&rng, 5);
	uint16_t tile[128], h[256];
	float f[256];
	for (int rep = 0; rep < 20; rep++)
		for (unsigned b = 1; b <= 8; b++)
			for (int c = 0; c < 3; c++) {
				for (unsigned i = 0; i < 16 * b; i++)
					tile[i] = (uint16_t)tf_rng_u64(&rng);
				tf_exl3_tile_decode(tile, b, cbs[c], h);
				tf_exl3_tile_decode_f32(tile, b, cbs[c], f);
				for (unsigned t = 0; t < 256; t++) {
					unsigned p = tf_exl3_tile_pos(t);
					uint16_t s = tf_exl3_tile_state(tile, b, t);
					ck_assert_uint_eq(h[p], tf_exl3_cb_decode(cbs[c], s));
					ck_assert(f[p] == tf_f16_to_f32(h[p]));
				}
			}
}
END_TEST

START_TEST(encode_round_trip)
{
	struct tf_rng rng;
	tf_rng_seed(&rng, 7);
	uint8_t codes[256];
	uint16_t tile[128], again[128];
	for (int rep = 0; rep < 50; rep++)
		for (unsigned b = 1; b <= 8; b++) {
			for (int t = 0; t < 256; t++)
				codes[t] = (uint8_t)tf_rng_u64(&rng); /* high bits must be ignored */
			tf_exl3_tile_encode(codes, b, tile);
			for (unsigned t = 0; t < 256; t++)
				ck_assert_uint_eq(tf_exl3_tile_code(tile, b, t), codes[t] & ((1u << b) - 1));
			/* and codes → tile is onto: re-encoding a decoded tile gives it back */
			for (unsigned t = 0; t < 256; t++)
				codes[t] = tf_exl3_tile_code(tile, b, t);
			tf_exl3_tile_encode(codes, b, again);
			ck_assert(!memcmp(tile, again, 32 * b));
			/* state t is the last 16 bits of codes ..t (tail-biting) */
			for (unsigned t = 0; t < 256; t++) {
				uint32_t s = 0;
				for (int i = 15 / (int)b + 1; i >= 0; i--)
					s = (s << b) | codes[(t + 256 - (unsigned)i) % 256];
				ck_assert_uint_eq(tf_exl3_tile_state(tile, b, t), s & 0xffff);
			}
		}
}
END_TEST

START_TEST(hadamard)
{
	float x[128], y[128];
	double worst = 0;
	for (unsigned i = 0; i < 128; i++) {
		memset(x, 0, sizeof(x));
		x[i] = 1;
		tf_exl3_had128(x);
		/* row i of Ĥ: (−1)^popcount(i&j)/√128 */
		for (unsigned j = 0; j < 128; j++) {
			double want = (__builtin_popcount(i & j) & 1 ? -1 : 1) / sqrt(128.0);
			worst = fmax(worst, fabs(x[j] - want));
		}
		memcpy(y, x, sizeof(x));
		tf_exl3_had128(y); /* Ĥ·Ĥ = I */
		for (unsigned j = 0; j < 128; j++)
			worst = fmax(worst, fabs(y[j] - (i == j)));
	}
	printf("exl3 hadamard: worst |Ĥ - H/√128|, |Ĥ·Ĥ - I| = %.3g (tolerance 1e-6)\n", worst);
	ck_assert(worst < 1e-6);
}
END_TEST

struct layer_mem {
	struct tf_exl3_layer L;
	uint16_t *tr, *suh, *svh, *bias;
};

static void layer_make(struct layer_mem *m, struct tf_exl3_geom g, uint64_t seed, int bias)
{
	struct tf_rng rng;
	tf_rng_seed(&rng, seed);
	m->tr = malloc(tf_exl3_trellis_bytes(&g));
	m->suh = malloc(2 * g.k);
	m->svh = malloc(2 * g.n);
	m->bias = NULL;
	tf_exl3_synth(&g, &rng, m->tr, m->suh, m->svh);
	if (bias) {
		m->bias = malloc(2 * g.n);
		for (size_t i = 0; i < g.n; i++)
			m->bias[i] = tf_f32_to_f16(tf_rng_normal(&rng));
	}
	m->L = (struct tf_exl3_layer){g, m->tr, m->suh, m->svh, m->bias};
}

static void layer_free(struct layer_mem *m)
{
	free(m->tr);
	free(m->suh);
	free(m->svh);
	free(m->bias);
}

static float *randn(size_t n, uint64_t seed)
{
	struct tf_rng rng;
	tf_rng_seed(&rng, seed);
	float *x = malloc(sizeof(float) * n);
	for (size_t i = 0; i < n; i++)
		x[i] = tf_rng_normal(&rng);
	return x;
}

START_TEST(gemm_vs_dense)
{
	/* y from the tile GEMM against x·W with W dequantised in double: the
	 * only differences are fp32 rounding in the sums. Tolerance 2e-5 of
	 * y's RMS (about 1). */
	struct tf_pool *pool;
	ck_assert_int_eq(tf_pool_new(2, &pool), TF_OK);
	double worst = 0;
	for (int c = 0; c < 3; c++)
		for (unsigned b = 1; b <= 8; b++) {
			struct tf_exl3_geom g = {256, 384, b, cbs[c]};
			struct layer_mem m;
			layer_make(&m, g, 100 + b * 3 + (unsigned)c, b & 1);
			float *W = malloc(sizeof(float) * g.k * g.n);
			ck_assert_int_eq(tf_exl3_dequant(&m.L, W), TF_OK);
			size_t rows = b == 4 ? 5 : b == 5 ? 19 : 1; /* 19: the many-row path, a partial group of 4 */
			float *x = randn(rows * g.k, b), *y = malloc(sizeof(float) * rows * g.n);
			for (int impl = 0; impl < 2; impl++) {
			ck_assert_int_eq(tf_exl3_matmul_impl(&m.L, x, rows, y, (b & 2) ? pool : NULL,
							     impl ? TF_EXL3_IMPL_C : TF_EXL3_IMPL_AUTO), TF_OK);
			double ss = 0, dmax = 0;
			for (size_t r = 0; r < rows; r++)
				for (size_t n = 0; n < g.n; n++) {
					double ref = m.bias ? tf_f16_to_f32(m.bias[n]) : 0;
					for (size_t k = 0; k < g.k; k++)
						ref += (double)x[r * g.k + k] * W[k * g.n + n];
					ss += ref * ref;
					dmax = fmax(dmax, fabs(ref - y[r * g.n + n]));
				}
			double rel = dmax / sqrt(ss / (double)(rows * g.n));
			ck_assert_msg(rel < 2e-5, "b=%u cb=%s: worst difference %.3g of RMS", b,
				      tf_exl3_cb_name(cbs[c]), rel);
			worst = fmax(worst, rel);
			}
			free(W);
			free(x);
			free(y);
			layer_free(&m);
		}
	printf("exl3 gemm vs dense: worst |y - x·W| = %.3g of RMS(y) (tolerance 2e-5)\n", worst);
	tf_pool_free(pool);
}
END_TEST

START_TEST(slices)
{
	/* Column parts concatenate, row parts sum, to the whole layer, for
	 * worlds 1, 2, 4; tolerance 1e-5 of RMS (fp32 sums in another order). */
	struct tf_exl3_geom g = {512, 512, 3, TF_EXL3_CB_MCG};
	struct layer_mem m;
	layer_make(&m, g, 9, 1);
	size_t rows = 2;
	float *x = randn(rows * g.k, 3), *y = malloc(4 * rows * g.n), *yp = malloc(4 * rows * g.n);
	float *sum = malloc(4 * rows * g.n), *xr = malloc(4 * rows * g.k);
	uint16_t *buf = malloc(tf_exl3_trellis_bytes(&g));
	ck_assert_int_eq(tf_exl3_matmul(&m.L, x, rows, y, NULL), TF_OK);
	double worst = 0;
	for (uint32_t world = 1; world <= 4; world *= 2) {
		memset(sum, 0, 4 * rows * g.n);
		for (uint32_t r = 0; r < world; r++) {
			struct tf_exl3_part p;
			struct tf_exl3_layer L;
			/* column: the same x, a slice of y */
			ck_assert_int_eq(tf_exl3_part(&g, TF_EXL3_COL, r, world, &p), TF_OK);
			ck_assert_uint_eq(p.g.n, g.n / world);
			uint64_t lo, hi;
			tf_exl3_part_span(&p, &lo, &hi);
			ck_assert_uint_le(hi, tf_exl3_trellis_bytes(&g));
			ck_assert_uint_eq(p.nruns * p.run_bytes, tf_exl3_trellis_bytes(&p.g));
			tf_exl3_part_layer(&m.L, &p, buf, &L);
			ck_assert_int_eq(tf_exl3_matmul(&L, x, rows, yp, NULL), TF_OK);
			for (size_t i = 0; i < rows; i++)
				for (size_t n = 0; n < p.g.n; n++)
					worst = fmax(worst, fabs(yp[i * p.g.n + n] - y[i * g.n + p.n0 + n]));
			/* row: a slice of x, partial sums of all of y */
			ck_assert_int_eq(tf_exl3_part(&g, TF_EXL3_ROW, r, world, &p), TF_OK);
			tf_exl3_part_layer(&m.L, &p, buf, &L);
			for (size_t i = 0; i < rows; i++)
				memcpy(xr + i * p.g.k, x + i * g.k + p.k0, 4 * p.g.k);
			ck_assert_int_eq(tf_exl3_matmul(&L, xr, rows, yp, NULL), TF_OK);
			for (size_t i = 0; i < rows * g.n; i++)
				sum[i] += yp[i];
		}
		for (size_t i = 0; i < rows * g.n; i++)
			worst = fmax(worst, fabs(sum[i] - y[i]));
	}
	printf("exl3 slices: worst |parts - whole| = %.3g (tolerance 1e-5)\n", worst);
	ck_assert(worst < 1e-5);
	struct tf_exl3_part p;
	ck_assert_int_eq(tf_exl3_part(&g, TF_EXL3_COL, 0, 8, &p), TF_ERR_FORMAT); /* 512 % 1024 */
	ck_assert_int_eq(tf_exl3_part(&g, TF_EXL3_ROW, 2, 2, &p), TF_ERR_ARG);
	free(x);
	free(y);
	free(yp);
	free(sum);
	free(xr);
	free(buf);
	layer_free(&m);
}
END_TEST

START_TEST(ragged_experts)
{
	/* Experts of widths 2, 4, 3, 4 bits back to back; each expert's
	 * column part taken from the flat buffer gives that expert's columns. */
	struct tf_exl3_geom g[4];
	static const unsigned bits[4] = {2, 4, 3, 4};
	for (int e = 0; e < 4; e++)
		g[e] = (struct tf_exl3_geom){256, 256, bits[e], TF_EXL3_CB_3INST};
	uint64_t off[4], total;
	int ragged;
	ck_assert_int_eq(tf_exl3_experts_layout(g, 4, off, &total, &ragged), TF_OK);
	ck_assert(ragged);
	struct layer_mem m[4];
	unsigned char *flat = calloc(1, total);
	for (int e = 0; e < 4; e++) {
		ck_assert_uint_eq(off[e] % 16, 0);
		layer_make(&m[e], g[e], 40 + (unsigned)e, 0);
		memcpy(flat + off[e], m[e].tr, tf_exl3_trellis_bytes(&g[e]));
	}
	ck_assert_uint_eq(total, off[3] + tf_exl3_trellis_bytes(&g[3]));
	float *x = randn(256, 1), y[256], yp[128];
	uint16_t buf[256 * 256 / 256 * 16 * 4 / 2];
	for (int e = 0; e < 4; e++) {
		ck_assert_int_eq(tf_exl3_matmul(&m[e].L, x, 1, y, NULL), TF_OK);
		for (uint32_t r = 0; r < 2; r++) {
			struct tf_exl3_part p;
			ck_assert_int_eq(tf_exl3_part(&g[e], TF_EXL3_COL, r, 2, &p), TF_OK);
			tf_exl3_part_gather(&p, flat + off[e], 0, buf);
			struct tf_exl3_layer L = {p.g, buf, m[e].suh, m[e].svh + p.n0, NULL};
			ck_assert_int_eq(tf_exl3_matmul(&L, x, 1, yp, NULL), TF_OK);
			for (int n = 0; n < 128; n++)
				ck_assert(fabsf(yp[n] - y[p.n0 + n]) < 1e-5f);
		}
	}
	g[2].k = 384;
	ck_assert_int_eq(tf_exl3_experts_layout(g, 4, off, &total, &ragged), TF_ERR_FORMAT);
	for (int e = 0; e < 4; e++)
		layer_free(&m[e]);
	free(flat);
	free(x);
}
END_TEST

START_TEST(geometry)
{
	struct tf_exl3_geom g;
	uint64_t s[3] = {8, 16, 64};
	ck_assert_int_eq(tf_exl3_geom_from_shape(s, 0, 1, &g), TF_OK);
	ck_assert_uint_eq(g.k, 128);
	ck_assert_uint_eq(g.n, 256);
	ck_assert_uint_eq(g.bits, 4);
	ck_assert_int_eq(g.cb, TF_EXL3_CB_MUL1);
	ck_assert_uint_eq(tf_exl3_trellis_bytes(&g), 8 * 16 * 128);
	ck_assert_int_eq(tf_exl3_geom_from_shape(s, 1, 1, &g), TF_ERR_FORMAT);
	s[2] = 144; /* 9 bits */
	ck_assert_int_eq(tf_exl3_geom_from_shape(s, 0, 0, &g), TF_ERR_FORMAT);
	s[2] = 20;
	ck_assert_int_eq(tf_exl3_geom_from_shape(s, 0, 0, &g), TF_ERR_FORMAT);
	s[2] = 16;
	s[0] = 1; /* K = 16 */
	ck_assert_int_eq(tf_exl3_geom_from_shape(s, 0, 0, &g), TF_ERR_FORMAT);
}
END_TEST

Suite *suite_exl3(void)
{
	Suite *s = suite_create("exl3");
	TCase *t = tcase_create("exl3");
	tcase_add_test(t, codebook_vectors);
	tcase_add_test(t, worked_states);
	tcase_add_test(t, lcg_states);
	tcase_add_test(t, trellis_vectors_small);
	tcase_add_test(t, trellis_vectors_48x256);
	tcase_add_test(t, tile_order);
	tcase_add_test(t, encode_round_trip);
	tcase_add_test(t, hadamard);
	tcase_add_test(t, gemm_vs_dense);
	tcase_add_test(t, slices);
	tcase_add_test(t, ragged_experts);
	tcase_add_test(t, geometry);
	suite_add_tcase(s, t);
	return s;
}
