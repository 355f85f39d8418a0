/* exl3_gemm.cu: the EXL3 matmul for many rows (prefill), in three steps
 * around one dense GEMM (cuBLAS, fp16 in, fp32 accumulation):
 *     u = fp16((x ⊙ suh) · Ĥ_K)          tf_exl3_had_in     [rows][K]
 *     Ŵᵀ = the decoded trellis, fp16     tf_exl3_decode_*   [N][K]
 *     a = u · Ŵ                          cuBLAS             [rows][N] f32
 *     y = (a · Ĥ_N) ⊙ svh                tf_exl3_had_out    [rows][N]
 * The same math as the GEMV (exl3_gemv.cu) and the CPU twin tf_exl3_matmul
 * (exl3-format.md §5): u is rounded to fp16 as in the GEMV, Ŵ is exact in
 * fp16 (bit-exact with tf_exl3_decode), the products sum in fp32.
 *
 * Decode: one warp per 16×16 tile, block 8 warps = 8 tiles along N, grid
 * (N/128, K/16). Lane l decodes states 8l..8l+7 (the GEMV's window), which
 * land at rows 2q, 2q+1, 2q+8, 2q+9 (q = l & 3) of columns l/4 and l/4 + 8
 * (§3): four half2 stores into Ŵᵀ, the four lanes of a column writing 16
 * contiguous bytes. Kernel names tf_exl3_decode_b<B>_cb<CB>.
 *
 * The Hadamard steps: one warp per (row, 128-block), 8 warps a block, grid
 * ⌈rows·blocks/8⌉. */
#include "kernels/exl3_common.cuh"

template <int B, int CB>
__device__ __forceinline__ void exl3_decode(const uint32_t *trellis, __half *wt, int k, int n)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int q = lane & 3, c = lane >> 2;
	const int tj = blockIdx.x * 8 + warp, ti = blockIdx.y;
	const int words = 8 * B;
	const lane_window lw = lane_window_of<B>(lane);
	const uint32_t *tile = trellis + ((size_t)ti * (n >> 4) + tj) * words;
	const uint32_t t0 = __ldcs(tile + lw.wi), t1 = __ldcs(tile + lw.wj), t2 = __ldcs(tile + lw.wk);
	__half2 w[4];
	decode8<B, CB>(t0, t1, t2, lw.o, w);
	const int kk = ti * 16 + 2 * q;
	__half *col0 = wt + (size_t)(tj * 16 + c) * k + kk;
	__half *col8 = col0 + (size_t)8 * k;
	*reinterpret_cast<__half2 *>(col0) = w[0];
	*reinterpret_cast<__half2 *>(col0 + 8) = w[1];
	*reinterpret_cast<__half2 *>(col8) = w[2];
	*reinterpret_cast<__half2 *>(col8 + 8) = w[3];
}

#define EXL3_DECODE(B, CB) \
	extern "C" __global__ void __launch_bounds__(256) \
	tf_exl3_decode_b##B##_cb##CB(const uint32_t *trellis, __half *wt, int k, int n) \
	{ \
		exl3_decode<B, CB>(trellis, wt, k, n); \
	}
#define EXL3_DECODE_CB(B) EXL3_DECODE(B, 0) EXL3_DECODE(B, 1) EXL3_DECODE(B, 2)
EXL3_DECODE_CB(1)
EXL3_DECODE_CB(2)
EXL3_DECODE_CB(3)
EXL3_DECODE_CB(4)
EXL3_DECODE_CB(5)
EXL3_DECODE_CB(6)
EXL3_DECODE_CB(7)
EXL3_DECODE_CB(8)

/* u[r][k] = fp16(Ĥ(x[r] ⊙ suh) per 128-block), x bf16 [rows][K]. */
extern "C" __global__ void __launch_bounds__(256)
tf_exl3_had_in(const __nv_bfloat16 *x, const __half *suh, __half *u, int rows, int k)
{
	const int lane = threadIdx.x & 31;
	const int gw = blockIdx.x * 8 + (threadIdx.x >> 5);
	const int kbs = k >> 7;
	if (gw >= rows * kbs)
		return;
	const int r = gw / kbs, k0 = (gw % kbs) * 128 + 4 * lane;
	float v[4];
	scale_in4(x + (size_t)r * k + k0, suh + k0, v);
	had128_warp(v, lane);
	store_u4(u + (size_t)r * k + k0, v);
}

/* y[r][n] = Ĥ(a[r]) ⊙ svh per 128-block, a f32 [rows][N], y f32 or bf16
 * (y may be a when f32). */
extern "C" __global__ void __launch_bounds__(256)
tf_exl3_had_out(const float *a, const __half *svh, void *y, int rows, int n, int y_bf16)
{
	const int lane = threadIdx.x & 31;
	const int gw = blockIdx.x * 8 + (threadIdx.x >> 5);
	const int nbs = n >> 7;
	if (gw >= rows * nbs)
		return;
	const int r = gw / nbs, n0 = (gw % nbs) * 128 + 4 * lane;
	const float4 av = *reinterpret_cast<const float4 *>(a + (size_t)r * n + n0);
	float v[4] = {av.x, av.y, av.z, av.w};
	had128_warp(v, lane);
	store_y4(y, y_bf16, (size_t)r * n + n0, v, svh + n0);
}
