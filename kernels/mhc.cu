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
 * hc_mix, two launches:
 *   tf_mhc_mix_dot: part [R, chunks, M + 1] f32, for each row r and chunk
 *     c of MIX_CHUNK flattened values f = X_r (n = S D): the M = 2S + S^2
 *     dot products f . fn_t and the sum of squares f . f over the chunk,
 *     fp32 (fma), each thread a strided part, then warp shuffles and warps
 *     in order. fn [M, n] f32. Grid (ceil(R / MIX_ROWS), ceil(n /
 *     MIX_CHUNK)), block 256: each block reads its chunk of fn once for
 *     MIX_ROWS rows. S <= 4 (M <= MIX_M).
 *   tf_mhc_mix_finish: one warp a row (4 rows a block of 128), lane t
 *   holding value t of [pre | post | comb]: the chunks summed in order, then
 *   the CPU's steps in the CPU's order and roundings (sums of a row or
 *   column of comb gathered by shuffles and added in index order on every
 *   lane): rs = 1 / sqrtf(ss / n + eps), m_t = dot_t rs, pre, post, the
 *   row softmax (+ hc_eps) and the Sinkhorn passes (column pass, then
 *   iters - 1 x row, column). The only difference from the CPU is the
 *   order of the n-long sums (cpu_dot runs 8 interleaved partials, each
 *   sequential over n / 8 values): measured on the H200 at S = 4, D = 5120
 *   against an fp64 reference, comb is within 4e-6 relative here and within
 *   4e-5 on the CPU, so the two differ by up to ~4e-5 relative, pre and
 *   post by ~2e-5; at D = 64 they agree to 1e-6.
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
constexpr int MIX_M = 2 * MAX_S + MAX_S * MAX_S;
constexpr int MIX_ROWS = 4;
constexpr int MIX_CHUNK = 1024;
constexpr int THREADS = 256;
constexpr int WARPS = THREADS / 32;
constexpr int FINISH_ROWS = 4; /* tf_mhc_mix_finish: warps (rows) a block */
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

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

} /* namespace tf_mhc */

extern "C" __global__ void __launch_bounds__(tf_mhc::THREADS)
tf_mhc_mix_dot(const void *x, int32_t x_dt, const float *fn, float *part, int64_t R, int64_t n,
	       int32_t M)
{
	using namespace tf_mhc;
	__shared__ float red[WARPS][MIX_ROWS][MIX_M + 1];
	const int64_t r0 = (int64_t)blockIdx.x * MIX_ROWS, c0 = (int64_t)blockIdx.y * MIX_CHUNK;
	const int64_t c1 = c0 + MIX_CHUNK < n ? c0 + MIX_CHUNK : n;
	const int nr = R - r0 < MIX_ROWS ? (int)(R - r0) : MIX_ROWS;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	float acc[MIX_ROWS][MIX_M + 1] = {}; /* [.][MIX_M]: the sum of squares */
	for (int64_t i = c0 + threadIdx.x; i < c1; i += THREADS) {
		float f[MIX_ROWS];
#pragma unroll
		for (int q = 0; q < MIX_ROWS; q++) {
			f[q] = q < nr ? load(x, x_dt, (r0 + q) * n + i) : 0.0f;
			acc[q][MIX_M] += f[q] * f[q];
		}
#pragma unroll
		for (int t = 0; t < MIX_M; t++)
			if (t < M) {
				float w = __ldg(fn + t * n + i);
#pragma unroll
				for (int q = 0; q < MIX_ROWS; q++)
					acc[q][t] += w * f[q];
			}
	}
#pragma unroll
	for (int q = 0; q < MIX_ROWS; q++)
		if (q < nr)
#pragma unroll
			for (int t = 0; t <= MIX_M; t++)
				if (t < M || t == MIX_M) {
					float v = warp_sum(acc[q][t]);
					if (lane == 0)
						red[warp][q][t] = v;
				}
	__syncthreads();
	const int64_t chunks = gridDim.y;
	for (int j = threadIdx.x; j < nr * (M + 1); j += THREADS) {
		int q = j / (M + 1), o = j % (M + 1), t = o < M ? o : MIX_M;
		float v = 0.0f;
		for (int w = 0; w < WARPS; w++)
			v += red[w][q][t];
		part[((r0 + q) * chunks + blockIdx.y) * (M + 1) + o] = v;
	}
}

namespace tf_mhc {

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

} /* namespace tf_mhc */

extern "C" __global__ void __launch_bounds__(tf_mhc::FINISH_ROWS * 32)
tf_mhc_mix_finish(const float *part, int32_t chunks, const float *base, const float *scale,
		  float *pre, float *post, float *comb, int64_t R, int64_t n, int32_t S, float eps,
		  float hc_eps, int32_t iters, float alpha)
{
	using namespace tf_mhc;
	/* one warp a row; lane t holds value t of [pre S | post S | comb S x S] */
	const int64_t r = (int64_t)blockIdx.x * FINISH_ROWS + (threadIdx.x >> 5);
	if (r >= R)
		return; /* whole warps: the shuffles below see full warps */
	const int t = threadIdx.x & 31, M = 2 * S + S * S;
	const float *p = part + r * chunks * (M + 1);
	float v = 0.0f; /* lanes 0..M: the chunks summed in order, lane M the sum of squares */
	if (t <= M)
		for (int ch = 0; ch < chunks; ch++)
			v = __fadd_rn(v, p[ch * (M + 1) + t]);
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
