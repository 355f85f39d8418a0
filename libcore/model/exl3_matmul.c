/* exl3_matmul.c: the reference EXL3 GEMV/GEMM on the CPU, and the dense
 * dequantised weight for tests.
 *
 * Math (exl3-format.md §5, from exllamav3_ext/quant/exl3_gemm_kernel.cuh
 * and modules/quant/exl3.py reconstruct_hgemm):
 *     u = (x ⊙ suh) · Ĥ_K        per 128-block of k      u: [rows, K] f32
 *     a = u · Ŵ                                          a: [rows, N] f32
 *     y = (a · Ĥ_N) ⊙ svh + bias per 128-block of n      y: [rows, N] f32
 * Accumulation is fp32 throughout; x⊙suh and the Hadamards are not rounded
 * to fp16 as the device kernels do, so y matches them within a tolerance
 * and the dense product x·W (tf_exl3_dequant) within float rounding.
 *
 * Layout of the work: one task per 128-column block of N (8 tiles wide),
 * spread over the pool. A task keeps a [rows, 128] f32 accumulator, walks
 * the K/16 tile rows, decodes each of its 8 tiles once and adds u·tile for
 * every row, then applies the output Hadamard and svh. Three bodies:
 * - up to EXL3_AVX2_MAX_ROWS rows with AVX2 (exl3_avx2_blocks): weights in
 *   stream order, eight at a time, straight into the sums;
 * - more rows with AVX2 (exl3_avx2_blocks_rows): each tile decoded to a
 *   row-major 16×16 block, then four rows per pass;
 * - the portable C below (block_run): table lookups
 *   (exl3_tile_f32_table) and a 16-wide multiply-add the compiler
 *   vectorises (tree-vectorize is enabled for this file). */
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/thread.h"
#include "model/exl3.h"
#include "model/exl3_int.h"

#pragma GCC optimize("tree-vectorize")

struct job {
	const struct tf_exl3_layer *L;
	const float *u;  /* [rows, K] f32 */
	float *y;        /* [rows, N] f32 */
	float *acc;      /* [workers][rows, 128] f32, or [workers][rows, 640] (AVX2) */
	size_t rows;
	int avx2;
	int c_only; /* the portable table decoder, even where AVX2 is */
};

/* a[0..16) += sum over r of u[r] · w[r][0..16). */
static inline void tile_madd(float *restrict a, const float *restrict u, const float *restrict w)
{
	float s[16];
	for (unsigned c = 0; c < 16; c++)
		s[c] = a[c];
	for (unsigned r = 0; r < 16; r++) {
		float ur = u[r];
		for (unsigned c = 0; c < 16; c++)
			s[c] += ur * w[r * 16 + c];
	}
	for (unsigned c = 0; c < 16; c++)
		a[c] = s[c];
}

static void block_run(void *ctx, size_t begin, size_t end, int worker)
{
	const struct job *J = ctx;
	const struct tf_exl3_layer *L = J->L;
	size_t K = L->g.k, N = L->g.n, kt = K / 16, nt = N / 16;
	size_t tw = tf_exl3_tile_words(L->g.bits), rows = J->rows;
	float w[256] __attribute__((aligned(64)));

	if (J->avx2) {
		exl3_avx2_blocks(L, J->u, rows, J->acc + (size_t)worker * rows * 640, J->y, begin, end);
		return;
	}
	if (!J->c_only && exl3_avx2_ok()) {
		exl3_avx2_blocks_rows(L, J->u, rows, J->acc + (size_t)worker * rows * 128, J->y, begin,
				      end);
		return;
	}
	float *acc = J->acc + (size_t)worker * rows * 128;

	for (size_t nb = begin; nb < end; nb++) {
		memset(acc, 0, sizeof(float) * rows * 128);
		for (size_t i = 0; i < kt; i++) {
			const uint16_t *tile = L->trellis + (i * nt + nb * 8) * tw;
			for (size_t jj = 0; jj < 8; jj++, tile += tw) {
				if (J->c_only)
					exl3_tile_f32_table(tile, L->g.bits, L->g.cb, w);
				else
					tf_exl3_tile_decode_f32(tile, L->g.bits, L->g.cb, w);
				for (size_t r = 0; r < rows; r++)
					tile_madd(acc + r * 128 + jj * 16, J->u + r * K + i * 16, w);
			}
		}
		for (size_t r = 0; r < rows; r++) {
			float *a = acc + r * 128, *y = J->y + r * N + nb * 128;
			tf_exl3_had128(a);
			for (size_t c = 0; c < 128; c++) {
				float v = a[c] * tf_f16_to_f32(L->svh[nb * 128 + c]);
				if (L->bias)
					v += tf_f16_to_f32(L->bias[nb * 128 + c]);
				y[c] = v;
			}
		}
	}
}

tf_status tf_exl3_matmul(const struct tf_exl3_layer *L, const float *x, size_t rows, float *y,
			 struct tf_pool *pool)
{
	return tf_exl3_matmul_impl(L, x, rows, y, pool, TF_EXL3_IMPL_AUTO);
}

/* up[r][i][m][j] = u[r][16i + 2m + (j&1) + 8((j>>1)&1)]: the four input
 * vectors of K-tile row i that the stream-order tiles need (exl3_avx2.c). */
static void permute_input(const float *u, size_t rows, size_t K, float *up)
{
	for (size_t r = 0; r < rows; r++)
		for (size_t i = 0; i < K / 16; i++)
			for (unsigned m = 0; m < 4; m++)
				for (unsigned j = 0; j < 8; j++)
					up[((r * (K / 16) + i) * 4 + m) * 8 + j] =
						u[r * K + 16 * i + 2 * m + (j & 1) + 8 * ((j >> 1) & 1)];
}

tf_status tf_exl3_matmul_impl(const struct tf_exl3_layer *L, const float *x, size_t rows, float *y,
			      struct tf_pool *pool, enum tf_exl3_impl impl)
{
	tf_status st = tf_exl3_geom_check(&L->g);
	if (st)
		return st;
	if (impl == TF_EXL3_IMPL_AVX2 && !exl3_avx2_ok())
		return tf_err(TF_ERR_UNSUPPORTED, "EXL3 matmul: this CPU lacks AVX2, FMA or F16C");
	if (!rows)
		return TF_OK;
	int avx2 = impl != TF_EXL3_IMPL_C && exl3_avx2_ok() && rows <= EXL3_AVX2_MAX_ROWS;
	size_t K = L->g.k, workers = pool ? (size_t)tf_pool_size(pool) : 1;
	float *u = malloc(sizeof(float) * rows * K * (avx2 ? 3 : 1));
	float *acc = aligned_alloc(64, sizeof(float) * workers * rows * (avx2 ? 640 : 128));
	if (!u || !acc) {
		st = tf_err(TF_ERR_NOMEM, "EXL3 matmul: %zu rows of %zu", rows, K);
		goto out;
	}
	for (size_t k = 0; k < K; k++) {
		float s = tf_f16_to_f32(L->suh[k]);
		for (size_t r = 0; r < rows; r++)
			u[r * K + k] = x[r * K + k] * s;
	}
	for (size_t r = 0; r < rows; r++)
		tf_exl3_had_blocks(u + r * K, K);
	if (avx2) { /* u: [rows, K], then up: [rows, K/16, 4, 8] after it */
		permute_input(u, rows, K, u + rows * K);
	}
	struct job J = {.L = L, .u = avx2 ? u + rows * K : u, .y = y, .acc = acc, .rows = rows,
			.avx2 = avx2, .c_only = impl == TF_EXL3_IMPL_C};
	tf_pool_for(pool, L->g.n / 128, 1, block_run, &J);
out:
	free(u);
	free(acc);
	return st;
}

/* x ← x·Ĥ on 128 doubles spaced stride apart. */
static void had128_double(double *x, size_t stride)
{
	double v[128];
	for (unsigned i = 0; i < 128; i++)
		v[i] = x[i * stride];
	for (unsigned h = 1; h < 128; h <<= 1)
		for (unsigned i = 0; i < 128; i += 2 * h)
			for (unsigned j = i; j < i + h; j++) {
				double a = v[j], b = v[j + h];
				v[j] = a + b;
				v[j + h] = a - b;
			}
	for (unsigned i = 0; i < 128; i++)
		x[i * stride] = v[i] / 11.313708498984761; /* √128 */
}

tf_status tf_exl3_dequant(const struct tf_exl3_layer *L, float *W)
{
	tf_status st = tf_exl3_geom_check(&L->g);
	if (st)
		return st;
	size_t K = L->g.k, N = L->g.n;
	uint16_t *wh = malloc(sizeof(uint16_t) * K * N);
	double *a = malloc(sizeof(double) * K * N);
	if (!wh || !a) {
		st = tf_err(TF_ERR_NOMEM, "EXL3 dequant: %zux%zu", K, N);
		goto out;
	}
	tf_exl3_decode(&L->g, L->trellis, wh);
	for (size_t i = 0; i < K * N; i++)
		a[i] = tf_f16_to_f32(wh[i]);
	for (size_t k = 0; k < K; k++) /* Ŵ·Ĥ_N along each row */
		for (size_t nb = 0; nb < N; nb += 128)
			had128_double(a + k * N + nb, 1);
	for (size_t n = 0; n < N; n++) /* Ĥ_K·(...) along each column */
		for (size_t kb = 0; kb < K; kb += 128)
			had128_double(a + kb * N + n, N);
	for (size_t k = 0; k < K; k++)
		for (size_t n = 0; n < N; n++)
			W[k * N + n] = (float)(tf_f16_to_f32(L->suh[k]) * a[k * N + n] *
					       tf_f16_to_f32(L->svh[n]));
out:
	free(wh);
	free(a);
	return st;
}
