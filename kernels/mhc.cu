/* mhc.cu: the mHC ops (the mix with its Sinkhorn passes, collapse, post),
 * the Engram gate and the stream mean (dsv41-forward-spec.md §3, §11,
 * §12, §13). CPU twins: cpu_mhc.c (cpu_hc_mix, cpu_hc_collapse,
 * cpu_hc_post, cpu_engram_gate) and cpu_stream_mean; launchers: cuda_mhc.c.
 * X is [R, S, D] f32/bf16 (S streams of D values a row); outputs f32 or
 * bf16, rounded once as the CPU rounds (tf_f32_to_bf16: nearest even, NaN
 * kept quiet).
 *
 * Fast math is on for this file (fma contraction, approximate expf and
 * '/', fp32 subnormals flushed): float steps that must match the CPU are
 * written with __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn in the CPU's
 * order, and expf(x) is exp((double)x) rounded to float (correctly
 * rounded, as glibc's expf is in all but rare last-bit cases). Subnormal
 * fp32 intermediates (below 1.2e-38) flush to zero here and not on the CPU.
 *
 * hc_mix, one launch, tf_mhc_mix_r<ROWS>o<OPW> (ROWS rows a row group,
 *   OPW outputs a warp; cuda_mhc.c picks r1o1 at 1 row, r4o1 up to 16,
 *   r4o5 up to 64, r8o5 past that). fn [M, n] f32, M = 2S + S^2, S <= 4;
 *   the M + 1 outputs of a row are the M dots f . fn_t and the sum of
 *   squares f . f (output M) of its flattened f = X_r (n = S D).
 *   The sums, in one order for every kernel and row count (so a row's bits
 *   never depend on R, nor on which kernel ran): n is cut into chunks of
 *   MIX_CHUNK = 512; in chunk c lane l of a warp holds the values c0 + 64 j
 *   + 2 l and the next, j = 0..7, and sums their products into one fp32
 *   fma chain in that order; the 32 lanes are added by xor (16, 8, 4, 2,
 *   1); part [R, M + 1, chunks] f32 holds those; a row's output is lane l
 *   summing chunks l, l + 32, ... in order, then the lanes by xor again.
 *   A warp's task is (row group, chunk, outputs og + NG k for k < OPW, NG
 *   = ceil((M + 1) / OPW)), 8 tasks a block of 256, grid (ceil(chunks NG /
 *   8), row groups): at one row of the release (n = 20480) 1000 warps
 *   over 125 blocks, each lane 16 values of fn (8 float2 loads) and of x.
 *   The last block of a row group to count itself (atomicAdd on the
 *   group's counter after a __threadfence; cuda_impl.h
 *   cuda_mix_counters) sums its rows' chunks (reads past L1, __ldcg),
 *   sets the counter back to 0 for the next launch or graph replay, and
 *   runs the rows' mix, one warp a row, lane t holding value t of [pre |
 *   post | comb]: the CPU's steps in the CPU's order and roundings (sums
 *   of a row or column of comb gathered by shuffles and added in index
 *   order on every lane): rs = 1 / sqrtf(ss / n + eps), m_t = dot_t rs,
 *   pre, post, the row softmax (+ hc_eps) and the Sinkhorn passes (column
 *   pass, then iters - 1 x row, column). No float sum depends on arrival
 *   order: the same inputs give the same bits on every run.
 *   Accuracy: the only difference from the CPU is the order of the n-long
 *   sums (cpu_dot runs 8 interleaved partials, each sequential over n / 8
 *   values; here chains of 16 in a three-level tree, closer to exact).
 *   Measured on the H200 with the previous order (chunks of 1024, strided
 *   chains of 4, then 256 threads and 20 chunks in sequence) at S = 4, D
 *   = 5120 against an fp64 reference: comb within 4e-6 relative there and
 *   within 4e-5 on the CPU, so the two differ by up to ~4e-5 relative,
 *   pre and post by ~2e-5; at D = 64 they agree to 1e-6. This order,
 *   measured on the H200 (gpu_ops, 1 to 300 rows at D = 5120): GPU
 *   against CPU within 5.1e-6 of each part's largest value (1 row: pre
 *   1.2e-6, post 1.1e-6, comb 2.1e-6), inside gpu_ops' 1e-5; the CPU's
 *   8-partial order is the larger error, as before.
 *   Before, two launches took 35-37 us + 12.1 us at one row (20 blocks
 *   of 96 KiB of fn, a warp a row summing 20 chunks); predicted now (not
 *   measured): 5-7 us at 1 row, 6-8 at 16, 8-10 at 64, 150-250 at 4096.
 * tf_mhc_collapse: c [R, D] = bf((0 + pre_0 X_0) + pre_1 X_1 ...), stream
 *   order, unfused. Grid (R, ceil(D / 256)), block 256; any S. Bit-exact.
 * tf_mhc_post: X'_t = bf((post_t b + comb[0][t] X_0) + ... comb[S-1][t]
 *   X_{S-1}), b [R, D] f32/bf16, unfused, in the CPU's order. A thread
 *   reads all S streams at its d before it writes, so out may alias x.
 *   Grid (R, ceil(D / 256)), block 256; S <= 4. Bit-exact.
 * tf_mhc_engram: one block (256 threads) a (row, stream), grid R S, the
 *   CPU's sums in the CPU's order: cpu_engram_gate's wide order
 *   (libcore/compute/cpu_impl.h, dtype.cuh wide_fold): thread j holds
 *   partial j of acc = sum_d (h qk) key, of h . h and of key . key over d
 *   = j mod 256 in increasing d, then three folds in halves (warps 0, 1,
 *   2). Then dot = ((acc rms(h)^-1) rms(key)^-1) / sqrtf(D), mag =
 *   sqrtf(max(|dot|, clamp)), gate = 1 / (1 + expf(-(dot < 0 ? -mag :
 *   mag))), or 0 where blocked; out = bf(h + gate val). D <= 6144: every
 *   value a thread needs (24 of h, key, qk, val) is loaded at once and
 *   held in registers; longer rows are read twice. Every read of the row
 *   comes before the folds' barrier and a thread rewrites only what it
 *   read, so out may alias x. Bit-exact wherever expf is (the gate is
 *   sensitive near dot = 0, so the sums must be the CPU's: a reordered sum
 *   was seen 8 bf16 ulps off). Before (one chain of D adds on thread 0)
 *   42.7 us at one row; predicted now (not measured) about 3-4 us.
 * tf_mhc_stream_mean: out [R, D] = bf(((0 + X_0) + X_1 ...) / S), stream
 *   order, one division. Grid (R, ceil(D / 256)), block 256; any S.
 *   Bit-exact. */
#include <stdint.h>

#include "kernels/dtype.cuh"

namespace tf_mhc {

using namespace tf_dt;

constexpr int MAX_S = 4;
constexpr int MIX_CHUNK = 512; /* flattened values a warp's task: 8 pairs a lane */
constexpr int THREADS = 256;
constexpr int MIX_WARPS = THREADS / 32; /* warps (tasks) a block of the mix */
constexpr int ENGRAM_REGS = 24; /* tf_mhc_engram: D <= 24 WIDE held in registers */

/* expf(x), correctly rounded. */
__device__ __forceinline__ float exp_rn(float x)
{
	return __double2float_rn(exp((double)x));
}

/* The CPU's sigmoid: 1.0f / (1.0f + expf(-x)). */
__device__ __forceinline__ float sigmoid_rn(float x)
{
	return __fdiv_rn(1.0f, __fadd_rn(1.0f, exp_rn(-x)));
}

/* The CPU's cpu_rms_scale from a sum of squares: 1.0f / sqrtf(ss / n + eps). */
__device__ __forceinline__ float rms_scale(float ss, int64_t n, float eps)
{
	return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
}

/* The sum of lane src(0), ..., src(S-1)'s v, added in that order (every
 * lane of the warp calls it). */
__device__ __forceinline__ float lanes_sum(float v, int first, int stride, int S)
{
	float s = 0.0f;
	for (int q = 0; q < MAX_S; q++) {
		float o = __shfl_sync(0xffffffffu, v, first + q * stride);
		if (q < S)
			s = __fadd_rn(s, o);
	}
	return s;
}

/* The sum of v over the warp, lanes combined by xor (16, 8, 4, 2, 1): the
 * same bits on every run and for every caller. */
__device__ __forceinline__ float warp_tree(float v)
{
#pragma unroll
	for (int o = 16; o > 0; o >>= 1)
		v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Values i and i + 1 of row `row` of p (dtype dt, rows of n), 0 at and
 * past n; pair: n even and p aligned for the pair (one 4- or 8-byte load). */
__device__ __forceinline__ float2 load2(const void *p, int dt, int64_t row, int64_t i, int64_t n,
					bool pair)
{
	if (i >= n)
		return make_float2(0.0f, 0.0f);
	const int64_t k = row * n + i;
	if (pair) {
		if (dt == DT_F32)
			return *reinterpret_cast<const float2 *>(static_cast<const float *>(p) + k);
		const uint32_t u = *reinterpret_cast<const uint32_t *>(static_cast<const uint16_t *>(p) + k);
		const uint16_t lo = (uint16_t)(u & 0xffffu), hi = (uint16_t)(u >> 16);
		return dt == DT_BF16 ? make_float2(bf16_f32(lo), bf16_f32(hi))
				     : make_float2(f16_f32(lo), f16_f32(hi));
	}
	return make_float2(load(p, dt, k), i + 1 < n ? load(p, dt, k + 1) : 0.0f);
}

/* fn's values i, i + 1 of output o (rows of n f32), 0 at and past n. */
__device__ __forceinline__ float2 load2_fn(const float *fn, int64_t o, int64_t i, int64_t n,
					   bool pair)
{
	if (i >= n)
		return make_float2(0.0f, 0.0f);
	const float *f = fn + o * n + i;
	if (pair)
		return __ldg(reinterpret_cast<const float2 *>(f));
	return make_float2(__ldg(f), i + 1 < n ? __ldg(f + 1) : 0.0f);
}

/* The CPU's steps of a row's mix from its sums (one warp, every lane
 * calls it): lane t holds v = value t of [dot_0 .. dot_M-1 | ss] (lanes
 * past M: 0); lane t's output is value t of [pre S | post S | comb S x
 * S]. */
__device__ __forceinline__ void mix_row(float v, int64_t r, const float *base, const float *scale,
					float *pre, float *post, float *comb, int64_t n, int S,
					float eps, float hc_eps, int iters, float alpha)
{
	const int t = threadIdx.x & 31, M = 2 * S + S * S;
	float rs = rms_scale(__shfl_sync(0xffffffffu, v, M), n, eps);
	float m = __fmul_rn(v, rs);
	int sel = t < S ? 0 : t < 2 * S ? 1 : 2;
	float a = __fadd_rn(__fmul_rn(scale[sel], m), t < M ? base[t] : 0.0f);
	if (t < S)
		pre[r * S + t] = __fadd_rn(sigmoid_rn(a), hc_eps);
	else if (t < 2 * S)
		post[r * S + t - S] = __fmul_rn(alpha, sigmoid_rn(a));
	/* comb element (i, j) on lane 2S + i S + j; other lanes compute unused values */
	int ce = t - 2 * S, i = ce >= 0 && ce < S * S ? ce / S : 0, j = ce >= 0 && ce < S * S ? ce % S : 0;
	int row0 = 2 * S + i * S, col0 = 2 * S + j;
	float mx = -INFINITY;
	for (int q = 0; q < MAX_S; q++) {
		float o = __shfl_sync(0xffffffffu, a, row0 + q);
		if (q < S)
			mx = o > mx ? o : mx;
	}
	float c = exp_rn(__fsub_rn(a, mx));
	c = __fadd_rn(__fdiv_rn(c, lanes_sum(c, row0, 1, S)), hc_eps);
	/* Sinkhorn: a column pass, then iters - 1 x (row pass, column pass) */
	for (int it = 0; it < iters; it++) {
		if (it > 0)
			c = __fdiv_rn(c, __fadd_rn(lanes_sum(c, row0, 1, S), hc_eps));
		c = __fdiv_rn(c, __fadd_rn(lanes_sum(c, col0, S, S), hc_eps));
	}
	if (ce >= 0 && ce < S * S)
		comb[r * S * S + ce] = c;
}

/* tf_mhc_mix_r<ROWS>o<OPW>: see the opening comment. */
template <int ROWS, int OPW>
__device__ __forceinline__ void mix(const void *x, int x_dt, int pair, const float *fn,
				    float *part, unsigned *count, const float *base,
				    const float *scale, float *pre, float *post, float *comb,
				    int64_t R, int64_t n, int S, float eps, float hc_eps, int iters,
				    float alpha)
{
	__shared__ float red[ROWS][32];
	__shared__ int last;
	const int M = 2 * S + S * S, NO = M + 1, NG = (NO + OPW - 1) / OPW;
	const int64_t chunks = (n + MIX_CHUNK - 1) / MIX_CHUNK, rg = blockIdx.y, r0 = rg * ROWS;
	const int nr = R - r0 < ROWS ? (int)(R - r0) : ROWS;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int64_t task = (int64_t)blockIdx.x * MIX_WARPS + warp;
	if (task < chunks * NG) {
		/* the warp's task: chunk c, outputs og + NG k (k < OPW; output M
		 * is the sum of squares), rows r0 .. r0 + nr - 1 */
		const int64_t c = task / NG, c0 = c * MIX_CHUNK;
		const int og = (int)(task % NG);
		float acc[ROWS][OPW];
#pragma unroll
		for (int q = 0; q < ROWS; q++)
#pragma unroll
			for (int k = 0; k < OPW; k++)
				acc[q][k] = 0.0f;
#pragma unroll
		for (int j = 0; j < MIX_CHUNK / 64; j++) {
			/* lane l's pair j: values c0 + 64 j + 2 l and the next */
			const int64_t i = c0 + 64 * j + 2 * lane;
			float2 f[ROWS];
#pragma unroll
			for (int q = 0; q < ROWS; q++)
				f[q] = q < nr ? load2(x, x_dt, r0 + q, i, n, pair) : make_float2(0.0f, 0.0f);
#pragma unroll
			for (int k = 0; k < OPW; k++) {
				const int o = og + NG * k;
				if (o < M) {
					const float2 w = load2_fn(fn, o, i, n, pair);
#pragma unroll
					for (int q = 0; q < ROWS; q++) {
						acc[q][k] = __fmaf_rn(w.x, f[q].x, acc[q][k]);
						acc[q][k] = __fmaf_rn(w.y, f[q].y, acc[q][k]);
					}
				} else if (o == M) {
#pragma unroll
					for (int q = 0; q < ROWS; q++) {
						acc[q][k] = __fmaf_rn(f[q].x, f[q].x, acc[q][k]);
						acc[q][k] = __fmaf_rn(f[q].y, f[q].y, acc[q][k]);
					}
				}
			}
		}
#pragma unroll
		for (int q = 0; q < ROWS; q++)
#pragma unroll
			for (int k = 0; k < OPW; k++) {
				const int o = og + NG * k;
				if (q < nr && o < NO) {
					const float v = warp_tree(acc[q][k]);
					if (lane == 0)
						part[((r0 + q) * NO + o) * chunks + c] = v;
				}
			}
	}
	/* the last block of the row group to finish sums the chunks and runs
	 * the rows' Sinkhorn passes */
	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0)
		last = atomicAdd(count + rg, 1u) == gridDim.x - 1;
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	for (int p = warp; p < nr * NO; p += MIX_WARPS) {
		/* (row q, output o): lane l sums chunks l, l + 32, ... in order,
		 * then the warp's tree; __ldcg: other blocks' sums, past L1 */
		const int q = p / NO, o = p % NO;
		const float *pp = part + ((r0 + q) * NO + o) * chunks;
		float v = 0.0f;
		for (int64_t ch = lane; ch < chunks; ch += 32)
			v = __fadd_rn(v, __ldcg(pp + ch));
		v = warp_tree(v);
		if (lane == 0)
			red[q][o] = v;
	}
	__syncthreads();
	if (threadIdx.x == 0)
		count[rg] = 0; /* every block of the group has counted: ready for the next launch */
	for (int q = warp; q < nr; q += MIX_WARPS)
		mix_row(lane < NO ? red[q][lane] : 0.0f, r0 + q, base, scale, pre, post, comb, n, S, eps,
			hc_eps, iters, alpha);
}

} /* namespace tf_mhc */

#define TF_MHC_MIX(ROWS, OPW) \
	extern "C" __global__ void __launch_bounds__(tf_mhc::THREADS, 2) \
	tf_mhc_mix_r##ROWS##o##OPW(const void *x, int32_t x_dt, int32_t pair, const float *fn, \
				   float *part, unsigned *count, const float *base, \
				   const float *scale, float *pre, float *post, float *comb, int64_t R, \
				   int64_t n, int32_t S, float eps, float hc_eps, int32_t iters, \
				   float alpha) \
	{ \
		tf_mhc::mix<ROWS, OPW>(x, x_dt, pair, fn, part, count, base, scale, pre, post, comb, R, \
				       n, S, eps, hc_eps, iters, alpha); \
	}
TF_MHC_MIX(1, 1)
TF_MHC_MIX(4, 1)
TF_MHC_MIX(4, 5)
TF_MHC_MIX(8, 5)

extern "C" __global__ void __launch_bounds__(tf_mhc::THREADS)
tf_mhc_collapse(const void *x, int32_t x_dt, const float *pre, void *c, int32_t c_dt, int64_t S,
		int64_t D)
{
	using namespace tf_mhc;
	const int64_t r = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
	if (d >= D)
		return;
	float v = 0.0f;
	for (int64_t s = 0; s < S; s++)
		v = __fadd_rn(v, __fmul_rn(pre[r * S + s], load(x, x_dt, (r * S + s) * D + d)));
	store(c, c_dt, r * D + d, v);
}

extern "C" __global__ void __launch_bounds__(tf_mhc::THREADS)
tf_mhc_post(const void *x, int32_t x_dt, const void *b, int32_t b_dt, const float *post,
	    const float *comb, void *out, int32_t out_dt, int32_t S, int64_t D)
{
	using namespace tf_mhc;
	const int64_t r = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
	if (d >= D)
		return;
	const float *p = post + r * S, *c = comb + r * S * S;
	float v[MAX_S], o[MAX_S];
	float bv = load(b, b_dt, r * D + d);
#pragma unroll
	for (int i = 0; i < MAX_S; i++)
		if (i < S)
			v[i] = load(x, x_dt, (r * S + i) * D + d);
#pragma unroll
	for (int t = 0; t < MAX_S; t++)
		if (t < S) {
			o[t] = __fmul_rn(p[t], bv);
#pragma unroll
			for (int i = 0; i < MAX_S; i++)
				if (i < S)
					o[t] = __fadd_rn(o[t], __fmul_rn(c[i * S + t], v[i]));
		}
#pragma unroll
	for (int t = 0; t < MAX_S; t++)
		if (t < S)
			store(out, out_dt, (r * S + t) * D + d, o[t]);
}

namespace tf_mhc {

/* The Engram gate from the three wide sums (cpu_engram_gate's steps):
 * dot = ((acc rms(h)^-1) rms(key)^-1) / sqrtf(D), sgn(dot) sqrt(max(|dot|,
 * clamp)) through the sigmoid. */
__device__ __forceinline__ float engram_gate_of(float acc, float hh, float kk, int64_t D, float eps,
						float clamp)
{
	float dot = __fdiv_rn(__fmul_rn(__fmul_rn(acc, rms_scale(hh, D, eps)), rms_scale(kk, D, eps)),
			      __fsqrt_rn((float)D));
	float mag = __fsqrt_rn(fabsf(dot) > clamp ? fabsf(dot) : clamp);
	return sigmoid_rn(dot < 0 ? -mag : mag); /* sgn(0) = +1 */
}

/* The three folds of the gate at once: warp k folds sh[k] (tf_dt::wide_fold);
 * every thread gets the sums. */
__device__ __forceinline__ void engram_folds(float (*sh)[WIDE + 1], float p, float hh, float kk,
					     float *acc, float *hs, float *ks)
{
	const int t = threadIdx.x, warp = t >> 5;
	sh[0][t] = p;
	sh[1][t] = hh;
	sh[2][t] = kk;
	__syncthreads();
	if (warp < 3) {
		float c = wide_fold_warp(sh[warp]);
		if ((t & 31) == 0)
			sh[warp][WIDE] = c;
	}
	__syncthreads();
	*acc = sh[0][WIDE];
	*hs = sh[1][WIDE];
	*ks = sh[2][WIDE];
}

} /* namespace tf_mhc */

extern "C" __global__ void __launch_bounds__(tf_dt::WIDE)
tf_mhc_engram(const void *x, int32_t x_dt, const void *kv, int32_t kv_dt, const float *qk,
	      const uint8_t *blocked, void *out, int32_t out_dt, int32_t S, int64_t D, float eps,
	      float clamp)
{
	using namespace tf_mhc;
	__shared__ float sh[3][WIDE + 1];
	const int64_t r = blockIdx.x / S, s = blockIdx.x % S;
	const int64_t h0 = (r * S + s) * D, k0 = (r * (S + 1) + s) * D, v0 = (r * (S + 1) + S) * D;
	const int t = threadIdx.x;
	const bool on = !blocked || !blocked[r];
	const float *q = qk + s * D;
	/* thread t: partial t of the wide order of (h qk) key, h h and key key */
	float p = 0.0f, hh = 0.0f, kk = 0.0f, acc, hs, ks;
	if (D <= ENGRAM_REGS * WIDE) {
		/* every load of the (row, stream) issued at once, h and val held to the end */
		float hv[ENGRAM_REGS], vv[ENGRAM_REGS], kev[ENGRAM_REGS], qv[ENGRAM_REGS];
#pragma unroll
		for (int u = 0; u < ENGRAM_REGS; u++) {
			const int64_t i = t + (int64_t)u * WIDE;
			const bool in = i < D;
			hv[u] = in ? load(x, x_dt, h0 + i) : 0.0f;
			vv[u] = in ? load(kv, kv_dt, v0 + i) : 0.0f;
			kev[u] = in && on ? load(kv, kv_dt, k0 + i) : 0.0f;
			qv[u] = in && on ? q[i] : 0.0f;
		}
#pragma unroll
		for (int u = 0; u < ENGRAM_REGS; u++)
			if (t + (int64_t)u * WIDE < D) {
				p = __fadd_rn(p, __fmul_rn(__fmul_rn(hv[u], qv[u]), kev[u]));
				hh = __fadd_rn(hh, __fmul_rn(hv[u], hv[u]));
				kk = __fadd_rn(kk, __fmul_rn(kev[u], kev[u]));
			}
		engram_folds(sh, p, hh, kk, &acc, &hs, &ks);
		const float gate = on ? engram_gate_of(acc, hs, ks, D, eps, clamp) : 0.0f;
		/* every read of the row came before the folds' barrier and a
		 * thread rewrites only what it read: out may alias x */
#pragma unroll
		for (int u = 0; u < ENGRAM_REGS; u++) {
			const int64_t i = t + (int64_t)u * WIDE;
			if (i < D)
				store(out, out_dt, h0 + i, __fadd_rn(hv[u], __fmul_rn(gate, vv[u])));
		}
		return;
	}
	for (int64_t i = t; on && i < D; i += WIDE) {
		const float h = load(x, x_dt, h0 + i), key = load(kv, kv_dt, k0 + i);
		p = __fadd_rn(p, __fmul_rn(__fmul_rn(h, q[i]), key));
		hh = __fadd_rn(hh, __fmul_rn(h, h));
		kk = __fadd_rn(kk, __fmul_rn(key, key));
	}
	engram_folds(sh, p, hh, kk, &acc, &hs, &ks);
	const float gate = on ? engram_gate_of(acc, hs, ks, D, eps, clamp) : 0.0f;
	for (int64_t i = t; i < D; i += WIDE) {
		const float h = load(x, x_dt, h0 + i);
		store(out, out_dt, h0 + i, __fadd_rn(h, __fmul_rn(gate, load(kv, kv_dt, v0 + i))));
	}
}

extern "C" __global__ void __launch_bounds__(tf_mhc::THREADS)
tf_mhc_stream_mean(const void *x, int32_t x_dt, void *out, int32_t out_dt, int32_t S, int64_t D)
{
	using namespace tf_mhc;
	const int64_t r = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
	if (d >= D)
		return;
	float v = 0.0f;
	for (int s = 0; s < S; s++)
		v = __fadd_rn(v, load(x, x_dt, (r * S + s) * D + d));
	store(out, out_dt, r * D + d, __fdiv_rn(v, (float)S));
}
