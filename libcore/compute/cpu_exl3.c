/* cpu_exl3.c: the CPU backend's EXL3 ops (exl3_matmul, exl3_matmul_experts)
 * over the codec's GEMM (model/exl3.h, tf_exl3_matmul) on the backend's
 * pool.
 *
 * Rounding: x (bf16, f16 or f32) is widened to fp32; x⊙suh and both
 * Hadamards stay in fp32 and the tile products accumulate in fp32
 * (tf_exl3_matmul). The device kernels round the rotated activations to
 * fp16 on the way (exl3-format.md §5), so the two agree within that
 * tolerance, not to the bit; the spec allows a dequantised W (dsv41-
 * forward-spec.md §0, Lin). y is kept in fp32 or rounded once to bf16. */
#include <stdlib.h>
#include <string.h>

#include "compute/cpu_impl.h"
#include "compute/ops_args.h"
#include "model/exl3.h"

/* Rows a call of tf_exl3_matmul takes: its body for more than
 * EXL3_AVX2_MAX_ROWS (16) rows sums in another order than the few-row
 * body, so a row's y would depend on how many rows share the op, and a
 * request's reply on the requests batched with it (tests/server
 * cpu.test.mjs); 16 at a time, every row is summed the same way. */
#define CPU_EXL3_ROWS 16

/* y rows [r0, r0+n) = x rows [r0, r0+n) · L, with xf/yf scratch of n rows. */
static tf_status exl3_rows(struct tf_be *be, const struct tf_exl3_layer *L,
			   const struct tf_tensor *x, int64_t r0, int64_t n, struct tf_tensor *y,
			   float *xf, float *yf)
{
	int64_t K = L->g.k, N = L->g.n;
	cpu_load(x, r0 * K, n * K, xf);
	float *out = y->dt == TF_DT_F32 ? (float *)y->data + r0 * N : yf;
	tf_status st = TF_OK;
	for (int64_t i = 0; i < n && !st; i += CPU_EXL3_ROWS)
		st = tf_exl3_matmul(L, xf + i * K, (size_t)(n - i < CPU_EXL3_ROWS ? n - i : CPU_EXL3_ROWS),
				    out + i * N, cpu_pool(be));
	if (!st && out == yf)
		cpu_store(y, r0 * N, n * N, yf);
	return st;
}

tf_status cpu_exl3_matmul(struct tf_be *be, const struct tf_exl3_layer *L,
			  const struct tf_tensor *x, struct tf_tensor *y)
{
	tf_status st;
	int64_t R, K, N;
	if ((st = tf_args_exl3_matmul(L, x, y, &R, &K, &N)))
		return st;
	if (!R)
		return TF_OK;
	float *xf = malloc(sizeof(float) * (size_t)(R * K));
	float *yf = y->dt == TF_DT_F32 ? NULL : malloc(sizeof(float) * (size_t)(R * N));
	if (!xf || (y->dt != TF_DT_F32 && !yf))
		st = tf_err(TF_ERR_NOMEM, "exl3_matmul: %lld rows", (long long)R);
	else
		st = exl3_rows(be, L, x, 0, R, y, xf, yf);
	free(xf);
	free(yf);
	return st;
}

tf_status cpu_exl3_matmul_experts(struct tf_be *be, const struct tf_exl3_layer *experts,
				  int n_experts, const struct tf_tensor *expert_ids,
				  const struct tf_tensor *offsets, const struct tf_tensor *x,
				  struct tf_tensor *y)
{
	tf_status st;
	int64_t R, N, G, K = x ? tf_tensor_cols(x) : 0;
	if ((st = tf_args_experts("exl3_matmul_experts", expert_ids, offsets, x, y, &R, &N, &G)))
		return st;
	const int32_t *ids = expert_ids->data, *off = offsets->data;
	if (off[0] != 0 || off[G] != R)
		return tf_err(TF_ERR_ARG, "exl3_matmul_experts: offsets span %d..%d, x has %lld rows",
			      off[0], off[G], (long long)R);
	int64_t most = 0;
	for (int64_t g = 0; g < G; g++) {
		if (off[g + 1] < off[g])
			return tf_err(TF_ERR_ARG, "exl3_matmul_experts: offsets fall at group %lld",
				      (long long)g);
		if (ids[g] < 0 || ids[g] >= n_experts)
			return tf_err(TF_ERR_ARG, "exl3_matmul_experts: expert %d of %d", ids[g],
				      n_experts);
		if ((st = tf_args_exl3_layer("exl3_matmul_experts", &experts[ids[g]], K, N)))
			return st;
		if (off[g + 1] - off[g] > most)
			most = off[g + 1] - off[g];
	}
	if (!most)
		return TF_OK;
	float *xf = malloc(sizeof(float) * (size_t)(most * K));
	float *yf = malloc(sizeof(float) * (size_t)(most * N));
	if (!xf || !yf)
		st = tf_err(TF_ERR_NOMEM, "exl3_matmul_experts: %lld rows", (long long)most);
	for (int64_t g = 0; !st && g < G; g++)
		if (off[g + 1] > off[g])
			st = exl3_rows(be, &experts[ids[g]], x, off[g], off[g + 1] - off[g], y, xf, yf);
	free(xf);
	free(yf);
	return st;
}
