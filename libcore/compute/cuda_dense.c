/* cuda_dense.c: the CUDA backend's dense ops (convert, linear, embed,
 * rmsnorm, rope) over kernels/dense.cu, with the argument checks of their
 * CPU twins (cpu.c). linear takes cuBLAS when x and W are both bf16 and
 * cuBLAS is there, else tf's kernels (a warp per output column up to 16
 * rows, 64 x 64 tiles past that). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "compute/cuda_be.h"
#include "compute/ops_args.h"

_Static_assert(sizeof(struct tf_rope_freqs) == 520 && offsetof(struct tf_rope_freqs, f) == 8,
	       "kernels/dense.cu's rope_freqs must match struct tf_rope_freqs");

/* The warp kernel's most rows (kernels/dense.cu LIN_WARP_ROWS). */
#define LIN_WARP_ROWS 16
/* The tile kernel's rows a block and the most blocks along y. */
#define LIN_TM 64
#define GRID_Y_MAX 65535

static struct cuda_fn fn_convert = {.name = "tf_dense_convert"};
static struct cuda_fn fn_embed = {.name = "tf_dense_embed"};
static struct cuda_fn fn_rmsnorm = {.name = "tf_dense_rmsnorm"};
static struct cuda_fn fn_rope = {.name = "tf_dense_rope"};

#define LIN_FN(kind, x, w) {.name = "tf_dense_linear_" #kind "_x" #x "_w" #w}
#define LIN_FNS(kind) \
	{{LIN_FN(kind, f32, f32), LIN_FN(kind, f32, bf16), LIN_FN(kind, f32, f16)}, \
	 {LIN_FN(kind, bf16, f32), LIN_FN(kind, bf16, bf16), LIN_FN(kind, bf16, f16)}, \
	 {LIN_FN(kind, f16, f32), LIN_FN(kind, f16, bf16), LIN_FN(kind, f16, f16)}}
/* [x dtype][w dtype], enum tf_dt order (f32, bf16, f16) */
static struct cuda_fn fn_lin_warp[3][3] = LIN_FNS(warp);
static struct cuda_fn fn_lin_tile[3][3] = LIN_FNS(tile);

/* ---- convert ---- */

tf_status cuda_convert_to(struct tf_be *be, tf_cu_ptr x, enum tf_dt xdt, tf_cu_ptr y,
			  enum tf_dt ydt, int64_t n)
{
	if (n <= 0)
		return TF_OK;
	int32_t xd = (int32_t)xdt, yd = (int32_t)ydt;
	int64_t blocks = (n + 255) / 256, most = (int64_t)cuda_sms(be) * 16;
	void *p[] = {&x, &xd, &y, &yd, &n};
	return cuda_launch(be, &fn_convert, (unsigned)(blocks < most ? blocks : most), 1, 256, 0, p);
}

tf_status cuda_convert(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *y)
{
	tf_status st;
	int64_t n;
	if ((st = tf_args_convert(x, y, &n)))
		return st;
	if ((st = cuda_convert_to(be, cuda_ptr(x), x->dt, cuda_ptr(y), y->dt, n)))
		return tf_err_wrap(st, "convert: ");
	return TF_OK;
}

/* ---- linear ---- */

/* tf's kernels: y rows [0, R) = x . W^T; the tile kernel's grid is cut
 * into launches of at most GRID_Y_MAX row blocks. */
static tf_status linear_own(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
			    struct tf_tensor *y, int64_t R, int64_t K, int64_t N)
{
	int32_t k32 = (int32_t)K, n32 = (int32_t)N, yb = y->dt == TF_DT_BF16;
	tf_cu_ptr wp = cuda_ptr(w);
	if (R <= LIN_WARP_ROWS) {
		int32_t r32 = (int32_t)R;
		tf_cu_ptr xp = cuda_ptr(x), yp = cuda_ptr(y);
		void *p[] = {&xp, &wp, &yp, &r32, &k32, &n32, &yb};
		return cuda_launch(be, &fn_lin_warp[x->dt][w->dt], (unsigned)((N + 7) / 8), 1, 256, 0, p);
	}
	const int64_t step = (int64_t)LIN_TM * GRID_Y_MAX;
	for (int64_t r0 = 0; r0 < R; r0 += step) {
		int64_t m = R - r0 < step ? R - r0 : step;
		int32_t r32 = (int32_t)m;
		tf_cu_ptr xp = cuda_ptr(x) + (uint64_t)(r0 * K) * tf_dt_size(x->dt);
		tf_cu_ptr yp = cuda_ptr(y) + (uint64_t)(r0 * N) * tf_dt_size(y->dt);
		void *p[] = {&xp, &wp, &yp, &r32, &k32, &n32, &yb};
		tf_status st = cuda_launch(be, &fn_lin_tile[x->dt][w->dt], (unsigned)((N + 63) / 64),
					   (unsigned)((m + LIN_TM - 1) / LIN_TM), 256, 0, p);
		if (st)
			return st;
	}
	return TF_OK;
}

tf_status cuda_linear(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
		      struct tf_tensor *y)
{
	tf_status st;
	int64_t R, K, N;
	if ((st = tf_args_linear(x, w, y, &R, &K, &N)))
		return st;
	if (R > INT32_MAX || K > INT32_MAX || N > INT32_MAX)
		return tf_err(TF_ERR_ARG, "linear: %lld x %lld x %lld is past 2^31 in a dimension",
			      (long long)R, (long long)K, (long long)N);
	if (!R || !N)
		return TF_OK;
	struct cuda_be *c = cuda_of(be);
	if (c->invariant) {
		/* the warp kernel 16 rows at a time: a row's sums do not depend
		 * on the rows beside it (cuBLAS and the tile kernel pick their
		 * order by the row count) */
		for (int64_t r0 = 0; r0 < R && !st; r0 += LIN_WARP_ROWS) {
			int64_t m = R - r0 < LIN_WARP_ROWS ? R - r0 : LIN_WARP_ROWS;
			struct tf_tensor xs = tf_tensor_rows_of(x, r0, m), ys = tf_tensor_rows_of(y, r0, m);
			st = linear_own(be, &xs, w, &ys, m, K, N);
		}
	} else if (c->blas && K > 0 && x->dt == TF_DT_BF16 && w->dt == TF_DT_BF16) {
		st = tf_cu_blas_linear_bf16(c->blas, cuda_ptr(x), cuda_ptr(w), cuda_ptr(y), (int)R, (int)K,
					    (int)N, y->dt == TF_DT_BF16, cuda_stream(be));
	} else {
		st = linear_own(be, x, w, y, R, K, N);
	}
	if (st)
		return tf_err_wrap(st, "linear %lldx%lld by %lldx%lld: ", (long long)R, (long long)K,
				   (long long)N, (long long)K);
	return TF_OK;
}

/* ---- dense experts ---- */

static struct cuda_fn fn_lin_experts = {.name = "tf_dense_linear_experts"};

tf_status cuda_linear_experts(struct tf_be *be, const struct tf_tensor *w, int n_experts,
			      const struct tf_tensor *expert_ids, const struct tf_tensor *offsets,
			      const struct tf_tensor *x, struct tf_tensor *y)
{
	tf_status st;
	int64_t R, N, G, K = tf_tensor_cols(x);
	if ((st = tf_args_experts("linear_experts", expert_ids, offsets, x, y, &R, &N, &G)))
		return st;
	if (n_experts < 1 || R > INT32_MAX || K > INT32_MAX || N > INT32_MAX || G > INT32_MAX)
		return tf_err(TF_ERR_ARG, "linear_experts: %d experts of %lld x %lld", n_experts,
			      (long long)N, (long long)K);
	/* every expert the same shape and dtype: one table of addresses */
	tf_cu_ptr *addr = malloc((size_t)n_experts * sizeof *addr), table = 0;
	if (!addr)
		return tf_err(TF_ERR_NOMEM, "linear_experts: out of memory");
	for (int e = 0; e < n_experts && !st; e++) {
		if ((st = tf_op_check("linear_experts", "w", &w[e], TF_DTS_FLOAT, N * K)) ||
		    (w[e].dt != w[0].dt &&
		     (st = tf_err(TF_ERR_ARG, "linear_experts: experts of dtypes %s and %s",
				  tf_dt_name(w[0].dt), tf_dt_name(w[e].dt)))))
			break;
		addr[e] = cuda_ptr(&w[e]);
	}
	if (!st && R && N && !(st = cuda_scratch(be, (size_t)n_experts * sizeof *addr, &table)) &&
	    !(st = cuda_put(cuda_of(be), table, addr, (size_t)n_experts * sizeof *addr))) {
		tf_cu_ptr xp = cuda_ptr(x), ip = cuda_ptr(expert_ids), op = cuda_ptr(offsets);
		tf_cu_ptr yp = cuda_ptr(y);
		int32_t xdt = x->dt, wdt = w[0].dt, ydt = y->dt, g32 = (int32_t)G, e32 = n_experts;
		int32_t r32 = (int32_t)R, k32 = (int32_t)K, n32 = (int32_t)N;
		for (int64_t r0 = 0; r0 < R && !st; r0 += GRID_Y_MAX) {
			int32_t r0_32 = (int32_t)r0;
			unsigned rows = (unsigned)(R - r0 < GRID_Y_MAX ? R - r0 : GRID_Y_MAX);
			void *p[] = {&xp, &xdt, &table, &wdt, &ip, &op, &g32, &e32,
				     &yp, &ydt, &r0_32, &r32, &k32, &n32};
			st = cuda_launch(be, &fn_lin_experts, (unsigned)((N + 7) / 8), rows, 256, 0, p);
		}
	}
	if (table)
		cuda_scratch_release(be, table);
	free(addr);
	return st;
}

/* ---- embedding ---- */

tf_status cuda_embed(struct tf_be *be, const struct tf_tensor *table, int64_t vocab_lo,
		     const struct tf_tensor *ids, struct tf_tensor *out)
{
	tf_status st;
	int64_t R, C, D, V;
	if ((st = tf_args_embed(table, ids, out, &R, &C, &D, &V)))
		return st;
	if (R * C > INT32_MAX)
		return tf_err(TF_ERR_ARG, "embed: %lld output rows (at most 2^31 - 1)", (long long)(R * C));
	tf_cu_ptr tp = cuda_ptr(table), ip = cuda_ptr(ids), op = cuda_ptr(out);
	void *p[] = {&tp, &V, &vocab_lo, &ip, &op, &C, &D};
	if ((st = cuda_launch(be, &fn_embed, (unsigned)(R * C), 1, 256, 0, p)))
		return tf_err_wrap(st, "embed: ");
	return TF_OK;
}

/* ---- rmsnorm ---- */

tf_status cuda_rmsnorm(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
		       float eps, struct tf_tensor *y)
{
	tf_status st;
	int64_t R, n;
	if ((st = tf_args_rmsnorm(x, w, y, &R, &n)))
		return st;
	if (R > INT32_MAX)
		return tf_err(TF_ERR_ARG, "rmsnorm: %lld rows (at most 2^31 - 1)", (long long)R);
	tf_cu_ptr xp = cuda_ptr(x), wp = cuda_ptr(w), yp = cuda_ptr(y);
	int32_t xd = (int32_t)x->dt, wd = (int32_t)w->dt, yd = (int32_t)y->dt;
	void *p[] = {&xp, &xd, &wp, &wd, &eps, &yp, &yd, &n};
	if ((st = cuda_launch(be, &fn_rmsnorm, (unsigned)R, 1, 256, 0, p)))
		return tf_err_wrap(st, "rmsnorm: ");
	return TF_OK;
}

/* ---- rope ---- */

tf_status cuda_rope(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pos,
		    const struct tf_rope_freqs *rf, int inverse, struct tf_tensor *y)
{
	tf_status st;
	int64_t R, H, n;
	if ((st = tf_args_rope(x, pos, rf, y, &R, &H, &n)))
		return st;
	if (R * H > INT32_MAX)
		return tf_err(TF_ERR_ARG, "rope: %lld vectors (at most 2^31 - 1)", (long long)(R * H));
	tf_cu_ptr xp = cuda_ptr(x), pp = cuda_ptr(pos), yp = cuda_ptr(y);
	int32_t xd = (int32_t)x->dt, yd = (int32_t)y->dt, inv = inverse != 0;
	struct tf_rope_freqs f = *rf; /* passed by value: 520 bytes of parameters */
	void *p[] = {&xp, &xd, &pp, &f, &inv, &yp, &yd, &H, &n};
	if ((st = cuda_launch(be, &fn_rope, (unsigned)(R * H), 1, 128, 0, p)))
		return tf_err_wrap(st, "rope: ");
	return TF_OK;
}
