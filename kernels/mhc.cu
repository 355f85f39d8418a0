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
 *   CPU's sums in the CPU's order: acc = sum_d (h qk) key, one fp32 chain
 *   of D adds (thread 0), and cpu_dot's 8 interleaved partials of h . h and
 *   key . key (lanes 0-7 of warps 1 and 2); all threads stage ENGRAM_CHUNK
 *   values of (h qk) key, h and key in shared memory (24 KiB) for the
 *   chains. Then dot = ((acc rms(h)^-1) rms(key)^-1) / sqrtf(D), mag =
 *   sqrtf(max(|dot|, clamp)), gate = 1 / (1 + expf(-(dot < 0 ? -mag :
 *   mag))), or 0 where blocked; out = bf(h + gate val). Every read of the
 *   row for the gate comes before a barrier and a thread rewrites only what
 *   it read, so out may alias x. Bit-exact wherever expf is: the gate is
 *   sensitive near dot = 0 (a reordered sum was seen 8 bf16 ulps off), so
 *   the sums must be the CPU's; the chain of D dependent adds bounds a call
 *   at about 4 D cycles.
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
constexpr int ENGRAM_CHUNK = 2048; /* values staged in shared memory at a time */

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

/* cpu_dot's pairwise sum of its 8 lanes. */
__device__ __forceinline__ float dot8_sum(const float *s)
{
	return __fadd_rn(__fadd_rn(__fadd_rn(s[0], s[1]), __fadd_rn(s[2], s[3])),
			 __fadd_rn(__fadd_rn(s[4], s[5]), __fadd_rn(s[6], s[7])));
}

/* cpu_dot's lane j of v . v over one staged chunk v [m] at c0 (c0 a
 * multiple of 8): indices c0 + i = j mod 8 below n8 = n - n % 8, then the
 * tail index n8 + j, in index order. */
__device__ __forceinline__ float sumsq8_lane(float s, const float *v, int64_t c0, int m,
					     int64_t n, int j)
{
	const int64_t n8 = n - n % 8;
	const int lim = n8 - c0 < m ? (int)(n8 - c0 > 0 ? n8 - c0 : 0) : m;
	s = sumsq_lane8(s, v, j, lim);
	int64_t t = n8 + j - c0;
	if (n8 + j < n && t >= 0 && t < m)
		s = __fadd_rn(s, __fmul_rn(v[t], v[t]));
	return s;
}

} /* namespace tf_mhc */

extern "C" __global__ void __launch_bounds__(tf_mhc::THREADS)
tf_mhc_engram(const void *x, int32_t x_dt, const void *kv, int32_t kv_dt, const float *qk,
	      const uint8_t *blocked, void *out, int32_t out_dt, int32_t S, int64_t D, float eps,
	      float clamp)
{
	using namespace tf_mhc;
	/* a chunk of (h qk) key, h and key, staged by all threads for the chains */
	__shared__ float sp[ENGRAM_CHUNK], sh[ENGRAM_CHUNK], sk[ENGRAM_CHUNK];
	__shared__ float part[17]; /* acc, then cpu_dot's 8 lanes of h . h and of key . key */
	const int64_t r = blockIdx.x / S, s = blockIdx.x % S;
	const int64_t h0 = (r * S + s) * D, k0 = (r * (S + 1) + s) * D, v0 = (r * (S + 1) + S) * D;
	const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
	const bool on = !blocked || !blocked[r];
	const float *q = qk + s * D;
	float acc = 0.0f; /* thread 0: the chain; warps 1, 2, lanes < 8: cpu_dot lanes */
	for (int64_t c0 = 0; on && c0 < D; c0 += ENGRAM_CHUNK) {
		int m = D - c0 < ENGRAM_CHUNK ? (int)(D - c0) : ENGRAM_CHUNK;
		for (int i = threadIdx.x; i < m; i += THREADS) {
			float h = load(x, x_dt, h0 + c0 + i), key = load(kv, kv_dt, k0 + c0 + i);
			sp[i] = __fmul_rn(__fmul_rn(h, q[c0 + i]), key);
			sh[i] = h;
			sk[i] = key;
		}
		__syncthreads();
		if (threadIdx.x == 0) {
#pragma unroll 8
			for (int i = 0; i < m; i++)
				acc = __fadd_rn(acc, sp[i]);
		} else if (warp == 1 && lane < 8) {
			acc = sumsq8_lane(acc, sh, c0, m, D, lane);
		} else if (warp == 2 && lane < 8) {
			acc = sumsq8_lane(acc, sk, c0, m, D, lane);
		}
		__syncthreads();
	}
	if (threadIdx.x == 0)
		part[0] = acc;
	else if ((warp == 1 || warp == 2) && lane < 8)
		part[1 + 8 * (warp - 1) + lane] = acc;
	__syncthreads();
	float gate = 0.0f;
	if (on) {
		float dot = __fdiv_rn(__fmul_rn(__fmul_rn(part[0], rms_scale(dot8_sum(part + 1), D, eps)),
						rms_scale(dot8_sum(part + 9), D, eps)),
				      __fsqrt_rn((float)D));
		float mag = __fsqrt_rn(fabsf(dot) > clamp ? fabsf(dot) : clamp);
		gate = sigmoid_rn(dot < 0 ? -mag : mag); /* sgn(0) = +1 */
	}
	for (int64_t d = threadIdx.x; d < D; d += THREADS) {
		float h = load(x, x_dt, h0 + d);
		store(out, out_dt, h0 + d, __fadd_rn(h, __fmul_rn(gate, load(kv, kv_dt, v0 + d))));
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
