/* exl3_avx2.c: the EXL3 tile decoder and small-row GEMM with AVX2, FMA and
 * F16C, eight weights at a time (compiled for those features with a target
 * attribute; used only when the CPU has them, see exl3_avx2_ok).
 *
 * Decode, per group of eight stream positions t = 8l .. 8l+7 (exl3-format.md
 * §2): the tile's stream is laid out as big-endian bytes with one wrapped
 * 16-bit word on each side, so the window of state t starts at byte
 * p >> 3, bit p & 7 with p = (t+1)·b; one 16-byte load, a byte shuffle and
 * two shifts give eight states (see group_tables). The codebook arithmetic (§4) then
 * runs in lanes: the 3INST/MCG halves are normal fp16 numbers (exponent
 * field 12..15), widened by bit moves and added exactly in fp32; the MUL1
 * byte sum is maddubs+madd. One vcvtps2ph (round to nearest even) and
 * vcvtph2ps reproduce the device's single fp16 rounding, so the weights are
 * bit-identical to tf_exl3_cb_decode (tested).
 *
 * GEMM (rows ≤ EXL3_AVX2_MAX_ROWS): the weights stay in stream order. For
 * t = 8l + j the tile row is r = 2(l&3) + (j&1) + 8((j>>1)&1), which depends
 * on l only through l&3, so four 8-lane vectors of u per K-tile row cover
 * every l (the caller builds them: up). The column is c = (l>>2) + 8(j>>2):
 * the four groups l = 4c0 .. 4c0+3 share one 8-lane sum whose lanes 0-3
 * belong to column c0 and lanes 4-7 to column c0+8, resolved by a
 * horizontal add at the end of the block: eight sums per tile column. */
#include <cpuid.h>
#include <pthread.h>
#include <immintrin.h>
#include <string.h>

#include "base/f16.h"
#include "model/exl3_int.h"

static void group_tables(void);

/* CPUID: leaf 1 ECX has FMA (bit 12), OSXSAVE (27), AVX (28), F16C (29);
 * leaf 7 EBX has AVX2 (bit 5); XCR0 bits 1-2 say the OS saves the YMM
 * state. (gcc's and clang's __builtin_cpu_supports differ on "f16c".) */
static int cpu_has_avx2_fma_f16c(void)
{
	unsigned a, b, c, d;
	if (!__get_cpuid(1, &a, &b, &c, &d))
		return 0;
	unsigned need = 1u << 12 | 1u << 27 | 1u << 28 | 1u << 29;
	if ((c & need) != need)
		return 0;
	unsigned lo, hi;
	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	if ((lo & 6) != 6)
		return 0;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	return (b >> 5) & 1;
}

static int avx2_ok;
static pthread_once_t avx2_once = PTHREAD_ONCE_INIT;

static void avx2_init(void)
{
	group_tables();
	avx2_ok = cpu_has_avx2_fma_f16c();
}

int exl3_avx2_ok(void)
{
	pthread_once(&avx2_once, avx2_init);
	return avx2_ok;
}

#define TARGET __attribute__((target("avx2,fma,f16c")))

/* ext: 2 bytes of the last stream word, the 32·b stream bytes, 2 bytes of
 * the first stream word, then padding for the 4-byte gathers. Stream word m
 * is tile word m^1, so little-endian u32 j of the tile is stream bits
 * 32j..32j+31 MSB first (§2), and a byte swap of each u32 gives the stream
 * in byte order. */
TARGET static void stream_bytes(const uint16_t *tile, uint32_t bits, uint8_t *ext)
{
	const __m256i bswap = _mm256_setr_epi8(3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12,
					       3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12);
	for (uint32_t i = 0; i < bits; i++) {
		__m256i v = _mm256_loadu_si256((const __m256i *)(tile + 16 * i));
		_mm256_storeu_si256((__m256i *)(ext + 2 + 32 * i), _mm256_shuffle_epi8(v, bswap));
	}
	size_t n = 32 * (size_t)bits;
	ext[0] = ext[n];
	ext[1] = ext[n + 1];
	ext[n + 2] = ext[2];
	ext[n + 3] = ext[3];
	memset(ext + n + 4, 0, 16); /* never selected; kept defined */
}

TARGET static inline __m256 half_pair_sum(__m256i x)
{
	const __m256i sign = _mm256_set1_epi32((int)0x80000000u), bias = _mm256_set1_epi32(0x38000000);
	x = _mm256_xor_si256(_mm256_and_si256(x, _mm256_set1_epi32((int)0x8FFF8FFFu)),
			     _mm256_set1_epi32(0x3B603B60));
	__m256i lo = _mm256_or_si256(
		_mm256_and_si256(_mm256_slli_epi32(x, 16), sign),
		_mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fff)), 13), bias));
	__m256i hi = _mm256_or_si256(
		_mm256_and_si256(x, sign),
		_mm256_add_epi32(_mm256_and_si256(_mm256_srli_epi32(x, 3), _mm256_set1_epi32(0x0FFFE000)), bias));
	return _mm256_add_ps(_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi));
}

TARGET static inline __attribute__((always_inline)) __m256 codebook(__m256i s, enum tf_exl3_cb cb)
{
	__m256 v;
	if (cb == TF_EXL3_CB_MUL1) {
		__m256i x = _mm256_mullo_epi32(s, _mm256_set1_epi32((int)0x83DCD12Du));
		__m256i t = _mm256_madd_epi16(_mm256_maddubs_epi16(x, _mm256_set1_epi8(1)),
					      _mm256_set1_epi16(1));
		__m256 h = _mm256_cvtepi32_ps(_mm256_add_epi32(t, _mm256_set1_epi32(1024)));
		/* h·k + c is exact in fp32 (§4), so fused or not is the same. */
		v = _mm256_fmadd_ps(h, _mm256_set1_ps(tf_f16_to_f32(0x1EEE)),
				    _mm256_set1_ps(tf_f16_to_f32(0xC931)));
	} else if (cb == TF_EXL3_CB_MCG) {
		v = half_pair_sum(_mm256_mullo_epi32(s, _mm256_set1_epi32((int)0xCBAC1FEDu)));
	} else {
		v = half_pair_sum(_mm256_add_epi32(_mm256_mullo_epi32(s, _mm256_set1_epi32(89226354)),
						   _mm256_set1_epi32(64248484)));
	}
	return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* The window of state 8l + j starts at ext bit 8lb + (j+1)b, that is at
 * byte lb + ((j+1)b >> 3), bit ((j+1)b & 7): the byte offsets and shifts
 * within a group depend on b only. One 16-byte load at ext + lb (the group
 * needs at most b + 4 bytes), a byte shuffle into eight big-endian u32s and
 * a variable shift give the group's eight states; no gathers, which are
 * slow on CPUs with the GDS microcode fix. */
static uint8_t group_shuf[9][32] __attribute__((aligned(32)));
static uint32_t group_shift[9][8] __attribute__((aligned(32)));

static void group_tables(void)
{
	for (unsigned b = 1; b <= 8; b++)
		for (unsigned j = 0; j < 8; j++) {
			unsigned bit = (j + 1) * b, o = bit >> 3;
			for (unsigned k = 0; k < 4; k++) /* u32 byte k (LSB first) = stream byte o+3−k */
				group_shuf[b][4 * j + k] = (uint8_t)(o + 3 - k);
			group_shift[b][j] = bit & 7;
		}
}

/* The eight states of group l of a tile whose stream bytes are ext. */
TARGET static inline __m256i group_states(const uint8_t *ext, unsigned l, uint32_t bits,
					  __m256i shuf, __m256i shift)
{
	__m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(ext + l * bits)));
	return _mm256_srli_epi32(_mm256_sllv_epi32(_mm256_shuffle_epi8(v, shuf), shift), 16);
}

/* The 256 weights of a laid-out stream, in stream order. */
TARGET static void decode_ext(const uint8_t *ext, uint32_t bits, enum tf_exl3_cb cb, float *w)
{
	const __m256i shuf = _mm256_load_si256((const __m256i *)group_shuf[bits]);
	const __m256i shift = _mm256_load_si256((const __m256i *)group_shift[bits]);
	for (unsigned l = 0; l < 32; l++)
		_mm256_store_ps(w + 8 * l, codebook(group_states(ext, l, bits, shuf, shift), cb));
}

TARGET void exl3_avx2_tile_stream(const uint16_t *tile, uint32_t bits, enum tf_exl3_cb cb, float *w)
{
	uint8_t ext[32 * 8 + 32];
	stream_bytes(tile, bits, ext);
	decode_ext(ext, bits, cb, w);
}

/* acc[c0] += Σ_{m<4} u[m] · w(group 4c0+m), decoding the tile on the way:
 * the one-row inner loop, with nothing stored but the eight sums. */
TARGET static inline __attribute__((always_inline)) void
tile_fma1_cb(const uint8_t *ext, uint32_t bits, enum tf_exl3_cb cb, const __m256 u[4], __m256 *acc)
{
	const __m256i shuf = _mm256_load_si256((const __m256i *)group_shuf[bits]);
	const __m256i shift = _mm256_load_si256((const __m256i *)group_shift[bits]);
	for (unsigned c0 = 0; c0 < 8; c0++) {
		__m256 a = acc[c0];
		for (unsigned m = 0; m < 4; m++)
			a = _mm256_fmadd_ps(u[m], codebook(group_states(ext, 4 * c0 + m, bits, shuf, shift), cb), a);
		acc[c0] = a;
	}
}

/* tile_fma1_cb with the codebook a constant in each copy. */
TARGET static void tile_fma1(const uint8_t *ext, uint32_t bits, enum tf_exl3_cb cb,
			     const __m256 u[4], __m256 *acc)
{
	switch (cb) {
	case TF_EXL3_CB_MCG: tile_fma1_cb(ext, bits, TF_EXL3_CB_MCG, u, acc); break;
	case TF_EXL3_CB_MUL1: tile_fma1_cb(ext, bits, TF_EXL3_CB_MUL1, u, acc); break;
	default: tile_fma1_cb(ext, bits, TF_EXL3_CB_3INST, u, acc); break;
	}
}

/* Sum lanes 0-3 and lanes 4-7 of v into *a and *b. */
TARGET static inline void halves_sum(__m256 v, float *a, float *b)
{
	__m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
	__m128 s = _mm_hadd_ps(lo, hi);      /* l0+l1 l2+l3 h0+h1 h2+h3 */
	s = _mm_hadd_ps(s, s);               /* lo hi lo hi */
	*a = _mm_cvtss_f32(s);
	*b = _mm_cvtss_f32(_mm_shuffle_ps(s, s, 1));
}

TARGET void exl3_avx2_blocks(const struct tf_exl3_layer *L, const float *up, size_t rows, float *acc,
			     float *y, size_t begin, size_t end)
{
	size_t K = L->g.k, N = L->g.n, kt = K / 16, nt = N / 16;
	size_t tw = tf_exl3_tile_words(L->g.bits);
	uint32_t bits = L->g.bits;
	enum tf_exl3_cb cb = L->g.cb;
	float w[256] __attribute__((aligned(32)));
	/* acc: a [rows][128] f32, then the sums [rows][8][8] __m256 */
	float *a = acc;
	__m256 *sums = (__m256 *)(acc + rows * 128);

	uint8_t ext8[8][32 * 8 + 32];
	for (size_t nb = begin; nb < end; nb++) {
		/* Walk K in order (the block's 8 tiles of a K row are contiguous,
		 * so memory streams), keeping eight sums per tile column and row:
		 * sums[r][jj][c0], 2 KiB a row, in L1. */
		for (size_t r = 0; r < rows * 64; r++)
			sums[r] = _mm256_setzero_ps();
		for (size_t i = 0; i < kt; i++) {
			const uint16_t *tile = L->trellis + (i * nt + nb * 8) * tw;
			/* lay out all eight streams first: the 16-byte loads of a
			 * stream then come long after its stores */
			for (size_t jj = 0; jj < 8; jj++)
				stream_bytes(tile + jj * tw, bits, ext8[jj]);
			if (rows == 1) {
				const float *u = up + i * 32;
				__m256 uv[4] = {_mm256_loadu_ps(u), _mm256_loadu_ps(u + 8),
						_mm256_loadu_ps(u + 16), _mm256_loadu_ps(u + 24)};
				for (size_t jj = 0; jj < 8; jj++)
					tile_fma1(ext8[jj], bits, cb, uv, sums + jj * 8);
				continue;
			}
			for (size_t jj = 0; jj < 8; jj++) {
				decode_ext(ext8[jj], bits, cb, w);
				for (size_t r = 0; r < rows; r++) {
					const float *u = up + (r * kt + i) * 32;
					__m256 u0 = _mm256_loadu_ps(u), u1 = _mm256_loadu_ps(u + 8);
					__m256 u2 = _mm256_loadu_ps(u + 16), u3 = _mm256_loadu_ps(u + 24);
					__m256 *sr = sums + r * 64 + jj * 8;
					for (unsigned c0 = 0; c0 < 8; c0++) {
						const float *wl = w + 32 * c0;
						__m256 v = _mm256_fmadd_ps(u0, _mm256_load_ps(wl), sr[c0]);
						v = _mm256_fmadd_ps(u1, _mm256_load_ps(wl + 8), v);
						v = _mm256_fmadd_ps(u2, _mm256_load_ps(wl + 16), v);
						sr[c0] = _mm256_fmadd_ps(u3, _mm256_load_ps(wl + 24), v);
					}
				}
			}
		}
		for (size_t r = 0; r < rows; r++)
			for (size_t jj = 0; jj < 8; jj++)
				for (unsigned c0 = 0; c0 < 8; c0++)
					halves_sum(sums[r * 64 + jj * 8 + c0], &a[r * 128 + jj * 16 + c0],
						   &a[r * 128 + jj * 16 + c0 + 8]);
		for (size_t r = 0; r < rows; r++) {
			float *ar = a + r * 128, *yr = y + r * N + nb * 128;
			tf_exl3_had128(ar);
			for (size_t c = 0; c < 128; c++) {
				float v = ar[c] * tf_f16_to_f32(L->svh[nb * 128 + c]);
				if (L->bias)
					v += tf_f16_to_f32(L->bias[nb * 128 + c]);
				yr[c] = v;
			}
		}
	}
}

/* acc[row][0..16) += Σ_r u[row][r] · w[r][0..16) for rows rows (≤ 4),
 * w row-major 16×16, u rows ustride apart, acc rows 128 apart. */
TARGET static inline void tile_madd4(float *acc, const float *u, size_t ustride, const float *w,
				     size_t rows)
{
	__m256 a[4][2];
	for (size_t q = 0; q < rows; q++) {
		a[q][0] = _mm256_loadu_ps(acc + q * 128);
		a[q][1] = _mm256_loadu_ps(acc + q * 128 + 8);
	}
	for (unsigned r = 0; r < 16; r++) {
		__m256 w0 = _mm256_load_ps(w + 16 * r), w1 = _mm256_load_ps(w + 16 * r + 8);
		for (size_t q = 0; q < rows; q++) {
			__m256 b = _mm256_broadcast_ss(u + q * ustride + r);
			a[q][0] = _mm256_fmadd_ps(b, w0, a[q][0]);
			a[q][1] = _mm256_fmadd_ps(b, w1, a[q][1]);
		}
	}
	for (size_t q = 0; q < rows; q++) {
		_mm256_storeu_ps(acc + q * 128, a[q][0]);
		_mm256_storeu_ps(acc + q * 128 + 8, a[q][1]);
	}
}

TARGET void exl3_avx2_blocks_rows(const struct tf_exl3_layer *L, const float *u, size_t rows,
				  float *acc, float *y, size_t begin, size_t end)
{
	size_t K = L->g.k, N = L->g.n, kt = K / 16, nt = N / 16;
	size_t tw = tf_exl3_tile_words(L->g.bits);
	float ws[256] __attribute__((aligned(32))), w[256] __attribute__((aligned(32)));
	uint8_t ext8[8][32 * 8 + 32];

	for (size_t nb = begin; nb < end; nb++) {
		memset(acc, 0, sizeof(float) * rows * 128);
		for (size_t i = 0; i < kt; i++) {
			const uint16_t *tile = L->trellis + (i * nt + nb * 8) * tw;
			for (size_t jj = 0; jj < 8; jj++) /* as in exl3_avx2_blocks */
				stream_bytes(tile + jj * tw, L->g.bits, ext8[jj]);
			for (size_t jj = 0; jj < 8; jj++) {
				/* decode once, to row-major, then every row */
				decode_ext(ext8[jj], L->g.bits, L->g.cb, ws);
				for (unsigned t = 0; t < 256; t++)
					w[tf_exl3_tile_pos(t)] = ws[t];
				for (size_t r = 0; r < rows; r += 4)
					tile_madd4(acc + r * 128 + jj * 16, u + r * K + i * 16, K, w,
						   rows - r < 4 ? rows - r : 4);
			}
		}
		for (size_t r = 0; r < rows; r++) {
			float *ar = acc + r * 128, *yr = y + r * N + nb * 128;
			tf_exl3_had128(ar);
			for (size_t c = 0; c < 128; c++) {
				float v = ar[c] * tf_f16_to_f32(L->svh[nb * 128 + c]);
				if (L->bias)
					v += tf_f16_to_f32(L->bias[nb * 128 + c]);
				yr[c] = v;
			}
		}
	}
}
