/* exl3_gemm.c: the reference EXL3 GEMV/GEMM on the CPU, and the dense
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
 * the K/16 tile rows, decodes each of its 8 tiles once into a 16×16 f32
 * buffer (table lookups, tf_exl3_tile_decode_f32) and adds u·tile for
 * every row, then applies the output Hadamard and svh. The inner loop is a
 * 16-wide multiply-add the compiler vectorises at -O2 -ftree-vectorize
 * (enabled below for this file). */
#include <stdlib.h>
#include <string.h>

#include "base/f16.h"
#include "base/thread.h"
#include "model/exl3.h"

#pragma GCC optimize("tree-vectorize")

struct job {
	const struct tf_exl3_layer *L;
	const float *u;  /* [rows, K] f32 */
	float *y;        /* [rows, N] f32 */
	float *acc;      /* [workers][rows, 128] f32 */
	size_t rows;
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
	float *acc = J->acc + (size_t)worker * rows * 128;
	float w[256] __attribute__((aligned(64)));

	for (size_t nb = begin; nb < end; nb++) {
		memset(acc, 0, sizeof(float) * rows * 128);
		for (size_t i = 0; i < kt; i++) {
			const uint16_t *tile = L->trellis + (i * nt + nb * 8) * tw;
			for (size_t jj = 0; jj < 8; jj++, tile += tw) {
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
	tf_status st = tf_exl3_geom_check(&L->g);
	if (st)
		return st;
	if (!rows)
		return TF_OK;
	size_t K = L->g.k, workers = pool ? (size_t)tf_pool_size(pool) : 1;
	float *u = malloc(sizeof(float) * rows * K);
	float *acc = malloc(sizeof(float) * workers * rows * 128);
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
	struct job J = {.L = L, .u = u, .y = y, .acc = acc, .rows = rows};
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
