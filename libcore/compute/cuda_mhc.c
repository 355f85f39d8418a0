/* cuda_mhc.c: the CUDA mHC ops (the mix with its Sinkhorn passes,
 * collapse, post), the Engram gate and the stream mean
 * (dsv41-forward-spec.md §3, §11, §12, §13). Host side only: the arguments
 * are checked as the CPU twins (cpu_mhc.c) check them, then
 * kernels/mhc.cu's kernels are queued on the backend's stream; nothing
 * waits for the device. The kernels' accuracy against the CPU and their
 * limits are in mhc.cu's opening comment; a valid call past those limits
 * (more than 4 streams where a kernel holds the streams in registers, grids
 * too large) is TF_ERR_UNSUPPORTED. */
#include <math.h>
#include <stdint.h>

#include "compute/cuda_impl.h"
#include "compute/ops_args.h"

/* mhc.cu's limits */
#define MAX_S 4         /* streams held in registers (mix, post) */
#define MIX_CHUNK 512   /* flattened values a warp's task of tf_mhc_mix_* */
#define MIX_WARPS 8     /* tasks a block of tf_mhc_mix_* */
#define THREADS 256
#define GRID_X_MAX INT32_MAX
#define GRID_Y_MAX 65535

/* The mix's kernels by rows a block (ROWS) and outputs a warp (OPW), and
 * the most rows each is picked for (hc_mix_pick). */
static struct {
	struct cuda_fn fn;
	int rows, opw;
	int64_t up_to;
} mix_fns[] = {
	{{.name = "tf_mhc_mix_r1o1"}, 1, 1, 1},
	{{.name = "tf_mhc_mix_r4o1"}, 4, 1, 16},
	{{.name = "tf_mhc_mix_r4o5"}, 4, 5, 64},
	{{.name = "tf_mhc_mix_r8o5"}, 8, 5, INT64_MAX},
};
static struct cuda_fn fn_collapse = {.name = "tf_mhc_collapse"};
static struct cuda_fn fn_post = {.name = "tf_mhc_post"};
static struct cuda_fn fn_engram = {.name = "tf_mhc_engram"};
static struct cuda_fn fn_stream_mean = {.name = "tf_mhc_stream_mean"};

/* The grid (R, ceil(D / THREADS)) of the per-value row kernels, or
 * TF_ERR_UNSUPPORTED past the grid's limits. */
static tf_status row_grid(const char *op, int64_t R, int64_t D, unsigned *gx, unsigned *gy)
{
	int64_t y = (D + THREADS - 1) / THREADS;
	if (R > GRID_X_MAX || y > GRID_Y_MAX)
		return tf_err(TF_ERR_UNSUPPORTED, "%s: %lld rows of %lld values", op, (long long)R,
			      (long long)D);
	*gx = (unsigned)R;
	*gy = (unsigned)y;
	return TF_OK;
}

/* hc_mix's scalars, as the kernels take them. */
struct mix_args {
	int64_t R, n;
	int32_t S, iters;
	float eps, hc_eps, alpha;
};

/* pre, post and comb of X [R, n] through fn [M, n], one launch a slice of
 * rows (as many row groups as there are completion counters): the sums
 * of each (row, output, chunk) into part [R, M + 1, chunks] f32, and the
 * last block of each row group to finish runs its rows' Sinkhorn. */
static tf_status mix_launch(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *fn,
			    const struct tf_tensor *base, const struct tf_tensor *scale,
			    struct mix_args a, struct tf_tensor *pre, struct tf_tensor *post,
			    struct tf_tensor *comb)
{
	tf_status st;
	int64_t R = a.R, n = a.n;
	int32_t S = a.S, M = 2 * S + S * S;
	size_t k = 0;
	while (R > mix_fns[k].up_to)
		k++;
	int rows = mix_fns[k].rows, opw = mix_fns[k].opw, ng = (M + 1 + opw - 1) / opw;
	int64_t chunks = (n + MIX_CHUNK - 1) / MIX_CHUNK;
	int64_t bx = (chunks * ng + MIX_WARPS - 1) / MIX_WARPS;
	int64_t step = (int64_t)rows * CUDA_MIX_COUNTERS; /* rows a launch */
	if (bx > GRID_X_MAX)
		return tf_err(TF_ERR_UNSUPPORTED, "hc_mix: %lld rows of %lld values", (long long)R,
			      (long long)n);
	tf_cu_ptr part;
	int64_t most = R < step ? R : step;
	if ((st = cuda_scratch(be, (size_t)(most * (M + 1) * chunks) * sizeof(float), &part)))
		return st;
	/* paired loads of x and fn where n is even and both are aligned for them */
	tf_cu_ptr xp = cuda_ptr(x), fp = cuda_ptr(fn), bp = cuda_ptr(base), scp = cuda_ptr(scale);
	size_t xe = tf_dt_size(x->dt);
	int32_t xdt = x->dt, pair = n % 2 == 0 && xp % (2 * xe) == 0 && fp % 8 == 0;
	tf_cu_ptr cnt = cuda_mix_counters(be);
	for (int64_t r0 = 0; r0 < R && !st; r0 += step) {
		int64_t m = R - r0 < step ? R - r0 : step;
		tf_cu_ptr xs = xp + (uint64_t)(r0 * n) * xe;
		tf_cu_ptr prp = cuda_ptr(pre) + (uint64_t)(r0 * S) * 4;
		tf_cu_ptr pop = cuda_ptr(post) + (uint64_t)(r0 * S) * 4;
		tf_cu_ptr cp = cuda_ptr(comb) + (uint64_t)(r0 * S * S) * 4;
		void *p[] = {&xs, &xdt, &pair, &fp, &part, &cnt, &bp, &scp, &prp, &pop,
			     &cp, &m, &n, &S, &a.eps, &a.hc_eps, &a.iters, &a.alpha};
		st = cuda_launch(be, &mix_fns[k].fn, (unsigned)bx, (unsigned)((m + rows - 1) / rows),
				 THREADS, 0, p);
	}
	cuda_scratch_release(be, part);
	return st;
}

tf_status cuda_hc_mix(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *fn,
		      const struct tf_tensor *base, const struct tf_tensor *scale, float eps,
		      float hc_eps, int iters, float post_alpha, struct tf_tensor *pre,
		      struct tf_tensor *post, struct tf_tensor *comb)
{
	tf_status st;
	int64_t R, S, n, M;
	if ((st = tf_args_hc_mix(x, fn, base, scale, iters, pre, post, comb, &R, &S, &n, &M)))
		return st;
	if (S > MAX_S)
		return tf_err(TF_ERR_UNSUPPORTED, "hc_mix: %lld streams (the kernel takes %d)",
			      (long long)S, MAX_S);
	if (!R)
		return TF_OK;
	struct mix_args a = {.R = R, .n = n, .S = (int32_t)S, .iters = iters, .eps = eps,
			     .hc_eps = hc_eps, .alpha = post_alpha};
	return mix_launch(be, x, fn, base, scale, a, pre, post, comb);
}

tf_status cuda_hc_collapse(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pre,
			   struct tf_tensor *c)
{
	tf_status st;
	int64_t R, S, D;
	if ((st = tf_args_hc_collapse(x, pre, c, &R, &S, &D)))
		return st;
	unsigned gx = 0, gy = 0;
	if ((st = row_grid("hc_collapse", R, D, &gx, &gy)) || !R || !D)
		return st;
	/* x [R, S, D], pre f32 [R, S] -> c [R, D] */
	tf_cu_ptr xp = cuda_ptr(x), pp = cuda_ptr(pre), cp = cuda_ptr(c);
	int32_t xdt = x->dt, cdt = c->dt;
	void *p[] = {&xp, &xdt, &pp, &cp, &cdt, &S, &D};
	return cuda_launch(be, &fn_collapse, gx, gy, THREADS, 0, p);
}

tf_status cuda_hc_post(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *b,
		       const struct tf_tensor *post, const struct tf_tensor *comb,
		       struct tf_tensor *out)
{
	tf_status st;
	int64_t R, S, D;
	if ((st = tf_args_hc_post(x, b, post, comb, out, &R, &S, &D)))
		return st;
	if (S > MAX_S)
		return tf_err(TF_ERR_UNSUPPORTED, "hc_post: %lld streams (the kernel takes %d)",
			      (long long)S, MAX_S);
	unsigned gx = 0, gy = 0;
	if ((st = row_grid("hc_post", R, D, &gx, &gy)) || !R || !D || !S)
		return st;
	/* x [R, S, D], b [R, D], post f32 [R, S], comb f32 [R, S, S] -> out [R, S, D] */
	tf_cu_ptr xp = cuda_ptr(x), bp = cuda_ptr(b), pp = cuda_ptr(post), cp = cuda_ptr(comb);
	tf_cu_ptr op = cuda_ptr(out);
	int32_t xdt = x->dt, bdt = b->dt, odt = out->dt, s32 = (int32_t)S;
	void *p[] = {&xp, &xdt, &bp, &bdt, &pp, &cp, &op, &odt, &s32, &D};
	return cuda_launch(be, &fn_post, gx, gy, THREADS, 0, p);
}

tf_status cuda_engram_gate(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *kv,
			   const struct tf_tensor *qk, const struct tf_tensor *blocked, float eps,
			   float clamp, struct tf_tensor *out)
{
	tf_status st;
	int64_t R, S, D;
	if ((st = tf_args_engram_gate(x, kv, qk, blocked, out, &R, &S, &D)))
		return st;
	if (R * S > GRID_X_MAX)
		return tf_err(TF_ERR_UNSUPPORTED, "engram_gate: %lld rows of %lld streams",
			      (long long)R, (long long)S);
	if (!R || !S || !D)
		return TF_OK;
	/* one block a (row, stream): x [R, S, D], kv [R, S + 1, D], qk f32 [S, D],
	 * blocked u8 [R] or 0 -> out [R, S, D] */
	tf_cu_ptr xp = cuda_ptr(x), kp = cuda_ptr(kv), qp = cuda_ptr(qk), op = cuda_ptr(out);
	tf_cu_ptr bp = blocked ? cuda_ptr(blocked) : 0;
	int32_t xdt = x->dt, kdt = kv->dt, odt = out->dt, s32 = (int32_t)S;
	void *p[] = {&xp, &xdt, &kp, &kdt, &qp, &bp, &op, &odt, &s32, &D, &eps, &clamp};
	return cuda_launch(be, &fn_engram, (unsigned)(R * S), 1, THREADS, 0, p);
}

tf_status cuda_stream_mean(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *out)
{
	tf_status st;
	int64_t R, S, D;
	if ((st = tf_args_stream_mean(x, out, &R, &S, &D)))
		return st;
	unsigned gx = 0, gy = 0;
	if ((st = row_grid("stream_mean", R, D, &gx, &gy)) || !D)
		return st;
	/* x bf16 [R, S, D] -> out bf16 [R, D] */
	tf_cu_ptr xp = cuda_ptr(x), op = cuda_ptr(out);
	int32_t xdt = x->dt, odt = out->dt, s32 = (int32_t)S;
	void *p[] = {&xp, &xdt, &op, &odt, &s32, &D};
	return cuda_launch(be, &fn_stream_mean, gx, gy, THREADS, 0, p);
}
