/* moe.cu: the MoE ops around the expert matmuls (dsv41-forward-spec.md
 * §10): routing, grouping of the routed pairs by expert, the clamped SwiGLU
 * and the weighted combine. CPU twins: cpu_moe.c (cpu_moe_route,
 * cpu_moe_group, cpu_swiglu, cpu_moe_combine); launchers: cuda_moe.c.
 *
 * This file is compiled with --use_fast_math, which makes expf/logf/sqrtf
 * and '/' approximate, contracts a*b+c into fma and flushes fp32
 * subnormals to zero. Where the CPU's bits are matched, the float steps
 * are written with __fmul_rn/__fadd_rn/__fdiv_rn/__fsqrt_rn (never
 * contracted, IEEE-rounded) in the CPU's order, and exp/log1p run in
 * double (not touched by fast math) and are rounded to float where the CPU
 * rounds: the result is the correctly rounded float, which is what glibc's
 * expf/log1pf return except in rare last-bit cases.
 *
 * tf_moe_route: lg [R, E] f32, bias [E] f32 -> ids int32 [R, k], w f32
 *   [R, k]. sc = sqrtf(softplus(lg)), softplus(x) = x past 20, else
 *   log1pf(expf(x)) (each step rounded to float, subnormals kept by a
 *   double-precision emulation of the rounding); k passes of an argmax of
 *   sc + bias over the untaken experts, ties to the smaller id, a NaN
 *   losing to any number (the CPU's scan picks the same); w_i = (scale *
 *   sc_i) / sum, sum = sc_0 + ... + sc_{k-1} in pick order. One block of
 *   256 threads a row (grid R) computes sc and sc + bias into shared
 *   memory; then warp 0 alone makes the k passes over integer pick keys
 *   (the float's monotone bits, NaN lowest, 0 for taken) with two warp
 *   reductions a pass (__reduce_max_sync of the key, __reduce_min_sync of
 *   the id among the lanes holding it) and no block barrier; the picks in
 *   shared memory (8E + 4k bytes): E <= 4096 (48 KiB), k <= E. Prediction,
 *   not measured: ~3-4 us for 384 experts top 6 (was 11.8 us with two
 *   block barriers and a serial 8-warp scan a pass). Picks are the CPU's
 *   (ties, NaN, the x > 20 branch and
 *   subnormal expf results checked on the H200); weights are the CPU's bits
 *   wherever glibc's expf/log1pf round correctly (glibc 2.39 on x86-64:
 *   about 1% of weights differ, by at most 4 ulps).
 * tf_moe_group: ids int32 [n = R k] -> offsets int32 [E + 1], pair and src
 *   int32 [n] (ops.h moe_group): a counting sort in one block of 16 warps.
 *   Warp w owns the pairs t of segment w (contiguous, in order). Pass 1:
 *   per warp and expert counts (__match_any_sync groups a warp's lanes by
 *   expert). Scan: exclusive prefix over (expert, warp) in that order, so
 *   warp w's pairs of expert e start at base[w][e]. Pass 2: each warp walks
 *   its segment again, a pair's place being base[w][e] plus the pairs of e
 *   before it in the warp's step (lanes below it), then base advances:
 *   stable in t, integer only, deterministic. Shared memory 64E + 68 bytes:
 *   E <= 766; n < 2^31. Bit-exact.
 * tf_moe_swiglu: gate, up f32 [n] -> a [n] f32/bf16: t = g < L ? g : L,
 *   v = clip(u, -L, L), a = (t / (1 + expf(-t))) * v in fp32, rounded
 *   once. One thread an element, grid-stride. Bit-exact where glibc's expf
 *   rounds correctly (on the H200 host: bf16 a identical over 10^6 values,
 *   f32 a off by at most 3 ulps in 0.03% of them).
 * tf_moe_combine: y f32 [R, k, D], w f32 [R, k], shared f32 [R, D] or none
 *   -> branch [R, D] f32/bf16 = bf(((0 + w_0 y_0) + w_1 y_1 ...) + shared),
 *   route order, fp32, unfused. Grid (R, ceil(D/256)), block 256.
 *   Bit-exact.
 *
 * Outputs rounded to bf16 use the CPU's rounding (tf_f32_to_bf16: nearest
 * even, NaN kept quiet with its sign and payload). Subnormal fp32
 * intermediates flush to zero here (fast math) and not on the CPU: only
 * values below 1.2e-38 can differ. */
#include <stdint.h>

#include "kernels/dtype.cuh"

namespace tf_moe {

using namespace tf_dt;

constexpr int GROUP_WARPS = 16;
constexpr int ROUTE_THREADS = 256;

/* The value of (float)d as a double, subnormal results kept (the device's
 * double-to-float conversion flushes them under fast math). */
__device__ __forceinline__ double round_f32(double d)
{
	if (fabs(d) >= 0x1p-126)
		return (double)__double2float_rn(d);
	return rint(d * 0x1p149) * 0x1p-149;
}

/* sqrtf(softplus(x)) with the CPU's float roundings: expf, log1pf, sqrtf.
 * The square root in double rounded once to float is the correctly
 * rounded float square root (53 >= 2*24 + 2 bits). */
__device__ __forceinline__ float sqrt_softplus(float x)
{
	double sp = x > 20.0f ? (double)x : round_f32(log1p(round_f32(exp((double)x))));
	return __double2float_rn(sqrt(sp));
}

} /* namespace tf_moe */

namespace tf_moe {

/* The pick order of a score as an integer (larger first): the monotone
 * bits of the float (-0 as +0, so they tie), NaN below every number, plus
 * one, so that 0 marks a taken expert. Equal keys tie to the smaller id,
 * so a number beats NaN, then the larger value, then the smaller id: the
 * order the CPU's scan picks by. */
__device__ __forceinline__ uint32_t pick_key(float v)
{
	return tf_dt::mono_key(__float_as_uint(v)) + 1; /* +inf: 0xff800001 */
}

} /* namespace tf_moe */

extern "C" __global__ void __launch_bounds__(tf_moe::ROUTE_THREADS)
tf_moe_route(const float *lg, const float *bias, int32_t *ids, float *w, int64_t E, int32_t k,
	     float scale)
{
	using namespace tf_moe;
	extern __shared__ float route_sm[]; /* sc [E], sc + bias [E], picks [k] */
	float *sc = route_sm, *sv = route_sm + E;
	int32_t *pick = (int32_t *)(sv + E);
	const int64_t r = blockIdx.x;
	const float *l = lg + r * E;
	for (int64_t e = threadIdx.x; e < E; e += ROUTE_THREADS) {
		float s = sqrt_softplus(l[e]);
		sc[e] = s;
		sv[e] = __fadd_rn(s, bias[e]);
	}
	__syncthreads();
	/* k passes in warp 0 alone, no block barrier: each lane the best of
	 * its experts lane + 32q by key then id, the warp's best by two
	 * reductions (the largest key, then the smallest id holding it) */
	if (threadIdx.x >= 32)
		return;
	uint32_t *key = (uint32_t *)sv;
	for (int64_t e = threadIdx.x; e < E; e += 32)
		key[e] = pick_key(sv[e]);
	__syncwarp();
	for (int i = 0; i < k; i++) {
		uint32_t bk = 0;
		int be = INT32_MAX;
		for (int64_t e = threadIdx.x; e < E; e += 32) {
			uint32_t ke = key[e];
			if (ke > bk) { /* e rises: the first of equal keys stays */
				bk = ke;
				be = (int)e;
			}
		}
		uint32_t mk = __reduce_max_sync(0xffffffffu, bk);
		int win = (int)__reduce_min_sync(0xffffffffu, (uint32_t)(bk == mk ? be : INT32_MAX));
		if (threadIdx.x == 0) {
			pick[i] = win;
			key[win] = 0; /* taken */
		}
		__syncwarp();
	}
	if (threadIdx.x != 0)
		return;
	float sum = 0.0f;
	for (int i = 0; i < k; i++)
		sum = __fadd_rn(sum, sc[pick[i]]);
	for (int i = 0; i < k; i++) {
		ids[r * k + i] = pick[i];
		w[r * k + i] = __fdiv_rn(__fmul_rn(scale, sc[pick[i]]), sum);
	}
}

namespace tf_moe {

/* The exclusive prefix of each thread's v over the block (blockDim.x =
 * 32 * GROUP_WARPS), and the block's total in *total. */
__device__ int block_scan(int v, int *warp_sums, int *total)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int inc = v;
	for (int o = 1; o < 32; o <<= 1) {
		int u = __shfl_up_sync(0xffffffffu, inc, o);
		if (lane >= o)
			inc += u;
	}
	if (lane == 31)
		warp_sums[warp] = inc;
	__syncthreads();
	if (threadIdx.x == 0) {
		int run = 0;
		for (int i = 0; i < GROUP_WARPS; i++) {
			int c = warp_sums[i];
			warp_sums[i] = run;
			run += c;
		}
		*total = run;
	}
	__syncthreads();
	return warp_sums[warp] + inc - v;
}

/* One pass over warp w's segment [t0, t1) of ids, 32 pairs a step in
 * order. Counting (place == 0): cnt[e] += the step's pairs of e. Placing:
 * each pair goes to cnt[e] + its rank among the step's pairs of e, then
 * cnt[e] advances. cnt is this warp's row. */
__device__ void group_pass(const int32_t *ids, int64_t t0, int64_t t1, int E, int k, int *cnt,
			   int32_t *pair, int32_t *src, bool place)
{
	const int lane = threadIdx.x & 31;
	for (int64_t b = t0; b < t1; b += 32) {
		int64_t t = b + lane;
		int e = -1;
		if (t < t1) {
			int v = ids[t];
			e = v >= 0 && v < E ? v : -1;
		}
		unsigned peers = __match_any_sync(0xffffffffu, e);
		bool lead = lane == __ffs(peers) - 1;
		if (place && e >= 0) {
			int p = cnt[e] + __popc(peers & ((1u << lane) - 1));
			pair[p] = (int32_t)t;
			src[p] = (int32_t)(t / k);
		}
		__syncwarp();
		if (lead && e >= 0)
			cnt[e] += __popc(peers);
		__syncwarp();
	}
}

} /* namespace tf_moe */

extern "C" __global__ void __launch_bounds__(32 * tf_moe::GROUP_WARPS)
tf_moe_group(const int32_t *ids, int32_t *offsets, int32_t *pair, int32_t *src, int64_t n,
	     int32_t k, int32_t E)
{
	using namespace tf_moe;
	extern __shared__ int group_sm[]; /* cnt [GROUP_WARPS][E], warp sums, total */
	int *cnt = group_sm, *warp_sums = group_sm + GROUP_WARPS * E;
	int *total = warp_sums + GROUP_WARPS;
	const int warp = threadIdx.x >> 5, nt = blockDim.x;
	const int F = GROUP_WARPS * E;
	for (int f = threadIdx.x; f < F; f += nt)
		cnt[f] = 0;
	__syncthreads();
	int64_t seg = (n + GROUP_WARPS - 1) / GROUP_WARPS;
	int64_t t0 = warp * seg, t1 = t0 + seg < n ? t0 + seg : n;
	group_pass(ids, t0, t1, E, k, cnt + warp * E, pair, src, false);
	__syncthreads();
	/* exclusive scan over f = e * GROUP_WARPS + w, each thread a run of f */
	int per = (F + nt - 1) / nt, f0 = threadIdx.x * per;
	int f1 = f0 + per < F ? f0 + per : F, mine = 0;
	for (int f = f0; f < f1; f++)
		mine += cnt[(f % GROUP_WARPS) * E + f / GROUP_WARPS];
	int run = block_scan(mine, warp_sums, total);
	for (int f = f0; f < f1; f++) {
		int *c = &cnt[(f % GROUP_WARPS) * E + f / GROUP_WARPS];
		int v = *c;
		*c = run;
		run += v;
	}
	__syncthreads();
	for (int e = threadIdx.x; e < E; e += nt)
		offsets[e] = cnt[e];
	if (threadIdx.x == 0)
		offsets[E] = *total;
	for (int64_t p = *total + threadIdx.x; p < n; p += nt) {
		pair[p] = -1;
		src[p] = -1;
	}
	group_pass(ids, t0, t1, E, k, cnt + warp * E, pair, src, true);
}

extern "C" __global__ void __launch_bounds__(256)
tf_moe_swiglu(const float *gate, const float *up, void *a, int32_t a_dt, int64_t n, float limit)
{
	using namespace tf_moe;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += (int64_t)gridDim.x * blockDim.x) {
		float g = gate[i], u = up[i];
		float t = g < limit ? g : limit;
		float v = u < -limit ? -limit : u > limit ? limit : u;
		float e = __double2float_rn(exp(-(double)t));
		store(a, a_dt, i, __fmul_rn(__fdiv_rn(t, __fadd_rn(1.0f, e)), v));
	}
}

extern "C" __global__ void __launch_bounds__(256)
tf_moe_combine(const float *y, const float *w, const float *shared, void *branch, int32_t dt,
	       int64_t k, int64_t D)
{
	using namespace tf_moe;
	const int64_t r = blockIdx.x, d = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
	if (d >= D)
		return;
	const float *wr = w + r * k;
	float acc = 0.0f;
	for (int64_t i = 0; i < k; i++)
		acc = __fadd_rn(acc, __fmul_rn(wr[i], y[(r * k + i) * D + d]));
	if (shared)
		acc = __fadd_rn(acc, shared[r * D + d]);
	store(branch, dt, r * D + d, acc);
}
