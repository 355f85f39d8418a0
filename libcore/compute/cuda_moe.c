/* cuda_moe.c: the CUDA MoE ops around the expert matmuls: routing, the
 * grouping of routed pairs by expert, the clamped SwiGLU and the combine
 * (dsv41-forward-spec.md §10). Host side only: the arguments are checked
 * as the CPU twins (cpu_moe.c) check them, then kernels/moe.cu's kernels
 * are queued on the backend's stream; nothing waits for the device. The
 * kernels' accuracy against the CPU and their limits are in moe.cu's
 * opening comment; a valid call past those limits is TF_ERR_UNSUPPORTED. */
#include <stdint.h>

#include "compute/cuda_impl.h"
#include "compute/ops_args.h"

/* moe.cu's limits */
#define ROUTE_MAX_E 4096    /* 8E bytes of the 48 KiB of shared memory */
#define ROUTE_THREADS 256
#define GROUP_WARPS 16      /* tf_moe_group's block: 16 warps */
#define SMEM_MAX (48 << 10) /* dynamic shared memory without an opt-in */
#define THREADS 256         /* swiglu, combine */
#define GRID_X_MAX INT32_MAX
#define GRID_Y_MAX 65535
#define SWIGLU_MAX_BLOCKS (1u << 20) /* grid-stride past this */

static struct cuda_fn fn_route = {.name = "tf_moe_route"};
static struct cuda_fn fn_group = {.name = "tf_moe_group"};
static struct cuda_fn fn_swiglu = {.name = "tf_moe_swiglu"};
static struct cuda_fn fn_combine = {.name = "tf_moe_combine"};

tf_status cuda_moe_route(struct tf_be *be, const struct tf_tensor *lg, const struct tf_tensor *bias,
			 int k, float scale, struct tf_tensor *ids, struct tf_tensor *weights)
{
	tf_status st;
	int64_t R, E;
	if ((st = tf_args_moe_route(lg, bias, k, ids, weights, &R, &E)))
		return st;
	if (E > ROUTE_MAX_E || 8 * E + 4 * (int64_t)k > SMEM_MAX - 256 || R > GRID_X_MAX)
		return tf_err(TF_ERR_UNSUPPORTED,
			      "moe_route: %lld rows of %lld experts (the kernel takes %d experts)",
			      (long long)R, (long long)E, ROUTE_MAX_E);
	if (!R)
		return TF_OK;
	/* one block a row: sc [E] and sc + bias [E] f32, the picks int32 [k] */
	tf_cu_ptr lp = cuda_ptr(lg), bp = cuda_ptr(bias), ip = cuda_ptr(ids);
	tf_cu_ptr wp = cuda_ptr(weights);
	int32_t k32 = k;
	void *p[] = {&lp, &bp, &ip, &wp, &E, &k32, &scale};
	return cuda_launch(be, &fn_route, (unsigned)R, 1, ROUTE_THREADS, (unsigned)(8 * E + 4 * k),
			   p);
}

tf_status cuda_moe_group(struct tf_be *be, const struct tf_tensor *ids, int E,
			 struct tf_tensor *offsets, struct tf_tensor *pair, struct tf_tensor *src)
{
	tf_status st;
	int64_t n, k;
	if ((st = tf_args_moe_group(ids, E, offsets, pair, src, &n, &k)))
		return st;
	/* counts [GROUP_WARPS][E] int32, the warps' sums and the total */
	size_t shmem = (size_t)4 * (GROUP_WARPS * (size_t)E + GROUP_WARPS + 1);
	if (shmem > SMEM_MAX || n > INT32_MAX)
		return tf_err(TF_ERR_UNSUPPORTED,
			      "moe_group: %lld pairs over %d experts (the kernel takes %d experts)",
			      (long long)n, E, (int)((SMEM_MAX / 4 - GROUP_WARPS - 1) / GROUP_WARPS));
	/* one block: offsets [E + 1], pair and src [n] are all written, even
	 * when n is 0 */
	tf_cu_ptr ip = cuda_ptr(ids), op = cuda_ptr(offsets), pp = cuda_ptr(pair);
	tf_cu_ptr sp = cuda_ptr(src);
	int32_t k32 = (int32_t)(k > 0 ? k : 1), e32 = E;
	void *p[] = {&ip, &op, &pp, &sp, &n, &k32, &e32};
	return cuda_launch(be, &fn_group, 1, 1, 32 * GROUP_WARPS, (unsigned)shmem, p);
}

tf_status cuda_swiglu(struct tf_be *be, const struct tf_tensor *gate, const struct tf_tensor *up,
		      float limit, struct tf_tensor *a)
{
	tf_status st;
	int64_t n;
	if ((st = tf_args_swiglu(gate, up, a, &n)))
		return st;
	if (!n)
		return TF_OK;
	/* gate, up f32 [n] -> a [n] f32/bf16, elementwise, grid-stride */
	int64_t blocks = (n + THREADS - 1) / THREADS;
	unsigned gx = blocks < SWIGLU_MAX_BLOCKS ? (unsigned)blocks : SWIGLU_MAX_BLOCKS;
	tf_cu_ptr gp = cuda_ptr(gate), up_ = cuda_ptr(up), ap = cuda_ptr(a);
	int32_t dt = a->dt;
	void *p[] = {&gp, &up_, &ap, &dt, &n, &limit};
	return cuda_launch(be, &fn_swiglu, gx, 1, THREADS, 0, p);
}

tf_status cuda_moe_combine(struct tf_be *be, const struct tf_tensor *y, const struct tf_tensor *w,
			   const struct tf_tensor *shared, struct tf_tensor *branch)
{
	tf_status st;
	int64_t R, k, D;
	if ((st = tf_args_moe_combine(y, w, shared, branch, &R, &k, &D)))
		return st;
	int64_t gy = (D + THREADS - 1) / THREADS;
	if (R > GRID_X_MAX || gy > GRID_Y_MAX)
		return tf_err(TF_ERR_UNSUPPORTED, "moe_combine: %lld rows of %lld values",
			      (long long)R, (long long)D);
	if (!R || !D)
		return TF_OK;
	/* y f32 [R, k, D], w f32 [R, k], shared f32 [R, D] or 0 -> branch [R, D] */
	tf_cu_ptr yp = cuda_ptr(y), wp = cuda_ptr(w), sp = shared ? cuda_ptr(shared) : 0;
	tf_cu_ptr bp = cuda_ptr(branch);
	int32_t dt = branch->dt;
	void *p[] = {&yp, &wp, &sp, &bp, &dt, &k, &D};
	return cuda_launch(be, &fn_combine, (unsigned)R, (unsigned)gy, THREADS, 0, p);
}
