/* sample.cu: the device half of the keyed sampler (ops.h `sample`; the
 * rule is libcore/compute/sample.h, the CPU twin cpu_sample.c). For each
 * listed row of logits f32 [R, V] it finds the row's C best logits under
 * rule 1 (larger first, -0 as +0, NaN last, ties to the lower id) and, for
 * a nucleus row, the statistics tf_sample_nucleus takes; the host finishes
 * the draw with sample.c's own functions (cuda_sample.c), so the tokens are
 * the CPU's.
 *
 * Math, one block per listed row:
 *   key(v) = the order-preserving u32 of v (NaN 0, -0 as +0: sample.c's
 *   key_of without the id);
 *   radix select, 8 bits a pass from the top (4 passes, warp-aggregated
 *   shared histograms): the threshold T and `need` such that the keys > T
 *   number C - need and at least need keys equal T;
 *   candidates: every key > T and the need lowest ids with key T, written
 *   in id order (an ordered pass over the row in chunks of 8192, one block
 *   scan of packed counts a chunk) as values f32 [C] and ids int32 [C];
 *   statistics when t > 0 (t: the temperature clamped at 1e-6 by the host):
 *   max = the largest non-NaN logit (-inf if none), sum = sum of
 *   exp(v/t - max/t) in fp64.
 * Exactness: the selection is integer work on the float bits, so the
 * candidate set is exactly the row's C best; ties at T resolve by id as the
 * CPU's sort does. The sum runs in fp64 with IEEE division and the
 * device's exp (within 1 ulp) in another order than tf_sample_stats: it
 * differs from the CPU's by far less than the 1e-9 guard of
 * tf_sample_nucleus, which leaves any row whose cut comes that close to
 * the whole-row path (float to double conversions go through the bits, as
 * fast math would flush subnormals).
 *
 * Layout: logits f32 [R, V] (row-major, any alignment); rows int32 [Rd]
 * (the logits row of block b), temps f64 [Rd]; out values f32 [Rd, C], ids
 * int32 [Rd, C], stats f64 [Rd, 2] (max, sum; unwritten when t <= 0).
 * Launch limits: 1024 threads, grid Rd (<= 2^31 - 1), 1 <= C <= V <
 * 2^31; about 1.2 KiB of static shared memory. On the H200 a launch over
 * rows of 129,280 with C = 512 and statistics takes ~0.28 ms for 1 to 32
 * rows and ~0.33 ms for 96 (a row is one block's six passes over it, from
 * L2: latency-bound on one SM; splitting a row over blocks would cut it). */
#include <stdint.h>

namespace tf_sample {

constexpr int THREADS = 1024;
constexpr int WARPS = THREADS / 32;
constexpr int PER = 8; /* consecutive logits a thread in the ordered pass */
constexpr unsigned FULL = 0xffffffffu;

/* The order key of a logit's bits: larger = earlier; NaN 0, -0 as +0. */
__device__ __forceinline__ uint32_t key_of(uint32_t b)
{
	if ((b & 0x7fffffffu) > 0x7f800000u)
		return 0;
	if (b == 0x80000000u)
		b = 0;
	return b & 0x80000000u ? ~b : b | 0x80000000u;
}

/* The float bits of a key (not NaN). */
__device__ __forceinline__ uint32_t bits_of_key(uint32_t k)
{
	return k & 0x80000000u ? k & 0x7fffffffu : ~k;
}

/* f32 bits as an f64, exactly, subnormals included. */
__device__ __forceinline__ double f64_of(uint32_t b)
{
	uint64_t sign = (uint64_t)(b >> 31) << 63, f = b & 0x7fffffu;
	int E = (int)((b >> 23) & 0xff);
	if (E == 0xff)
		return __longlong_as_double((long long)(sign | 0x7ff0000000000000ull | f << 29));
	if (E == 0) {
		if (f == 0)
			return __longlong_as_double((long long)sign);
		int sh = __clz((int)f) - 8; /* the leading one to bit 23 */
		f = (f << sh) & 0x7fffffu;
		E = 1 - sh;
	}
	return __longlong_as_double((long long)(sign | (uint64_t)(E + 896) << 52 | f << 29));
}

/* Exclusive scan of v over the block; *total gets the sum. part holds
 * WARPS + 1 words. */
__device__ __forceinline__ uint32_t block_scan(uint32_t v, uint32_t *total, uint32_t *part)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	uint32_t inc = v;
	for (int o = 1; o < 32; o *= 2) {
		uint32_t t = __shfl_up_sync(FULL, inc, o);
		if (lane >= o)
			inc += t;
	}
	if (lane == 31)
		part[warp] = inc;
	__syncthreads();
	if (warp == 0) {
		uint32_t w = lane < WARPS ? part[lane] : 0, winc = w;
		for (int o = 1; o < 32; o *= 2) {
			uint32_t t = __shfl_up_sync(FULL, winc, o);
			if (lane >= o)
				winc += t;
		}
		if (lane < WARPS)
			part[lane] = winc - w;
		if (lane == 31)
			part[WARPS] = winc;
	}
	__syncthreads();
	uint32_t res = part[warp] + inc - v;
	*total = part[WARPS];
	__syncthreads();
	return res;
}

/* Sum of v over the block (fp64), valid in thread 0. */
__device__ __forceinline__ double block_sum(double v, double *part)
{
	int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
	for (int o = 16; o; o /= 2)
		v += __shfl_down_sync(FULL, v, o);
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	double s = 0;
	if (warp == 0) {
		s = lane < WARPS ? part[lane] : 0;
		for (int o = 16; o; o /= 2)
			s += __shfl_down_sync(FULL, s, o);
	}
	return s;
}

struct select_smem {
	uint32_t hist[256];
	uint32_t part[WARPS + 1];
	double dpart[WARPS];
	uint32_t digit, above, kmax;
};

/* The radix select: T and need (see the opening comment); *kmax gets the
 * row's largest key. */
__device__ void radix_select(const uint32_t *row, int64_t V, uint32_t C, select_smem *sm,
			     uint32_t *T, uint32_t *need_out, uint32_t *kmax)
{
	int tid = threadIdx.x, lane = tid % 32;
	uint32_t prefix = 0, pmask = 0, need = C, km = 0;
	if (tid == 0)
		sm->kmax = 0;
	for (int shift = 24; shift >= 0; shift -= 8) {
		if (tid < 256)
			sm->hist[tid] = 0;
		__syncthreads();
		for (int64_t b = 0; b < V; b += THREADS) {
			int64_t i = b + tid;
			uint32_t k = i < V ? key_of(row[i]) : 0;
			bool in = i < V && (k & pmask) == prefix;
			uint32_t d = (k >> shift) & 255;
			km = i < V ? max(km, k) : km;
			unsigned peers = __match_any_sync(FULL, in ? d : 256u);
			if (in && lane == __ffs(peers) - 1)
				atomicAdd(&sm->hist[d], (uint32_t)__popc(peers));
		}
		if (shift == 24) {
			km = __reduce_max_sync(FULL, km);
			if (lane == 0)
				atomicMax(&sm->kmax, km);
		}
		__syncthreads();
		if (tid < 32) {
			/* lane l holds digits 255 - 8l .. 248 - 8l, from the top */
			uint32_t c[8], s = 0;
			for (int j = 0; j < 8; j++) {
				c[j] = sm->hist[255 - 8 * lane - j];
				s += c[j];
			}
			uint32_t inc = s;
			for (int o = 1; o < 32; o *= 2) {
				uint32_t t = __shfl_up_sync(FULL, inc, o);
				if (lane >= o)
					inc += t;
			}
			uint32_t acc = inc - s;
			if (acc < need && need <= inc)
				for (int j = 0; j < 8; j++) {
					if (acc + c[j] >= need) {
						sm->digit = (uint32_t)(255 - 8 * lane - j);
						sm->above = acc;
						break;
					}
					acc += c[j];
				}
		}
		__syncthreads();
		prefix |= sm->digit << shift;
		pmask |= 255u << shift;
		need -= sm->above;
		__syncthreads();
	}
	*T = prefix;
	*need_out = need;
	*kmax = sm->kmax;
}

/* sum of exp(v/t - max/t) over the row (fp64), valid in thread 0. */
__device__ double row_sum(const uint32_t *row, int64_t V, double max, double t, double *part)
{
	double mt = max / t, acc = 0;
	for (int64_t i = threadIdx.x; i < V; i += THREADS)
		acc += exp(f64_of(row[i]) / t - mt);
	return block_sum(acc, part);
}

} // namespace tf_sample

extern "C" __global__ void __launch_bounds__(1024)
tf_sample_select(const float *logits, int64_t V, int32_t C, const int32_t *rows, const double *temps,
	      float *values, int32_t *ids, double *stats)
{
	using namespace tf_sample;
	__shared__ select_smem sm;
	int tid = threadIdx.x;
	int64_t b = blockIdx.x;
	const uint32_t *row = (const uint32_t *)logits + (int64_t)rows[b] * V;
	uint32_t T, need, kmax;
	radix_select(row, V, (uint32_t)C, &sm, &T, &need, &kmax);

	double t = temps[b];
	if (t > 0) {
		double max = kmax ? f64_of(bits_of_key(kmax)) : -__longlong_as_double(0x7ff0000000000000ll);
		double sum = row_sum(row, V, max, t, sm.dpart);
		if (tid == 0) {
			stats[2 * b] = max;
			stats[2 * b + 1] = sum;
		}
	}

	/* candidates in id order: slot = keys > T before + min(keys == T before, need) */
	float *vo = values + b * C;
	int32_t *io = ids + b * C;
	uint32_t gt_run = 0, eq_run = 0;
	for (int64_t base = 0; base < V; base += (int64_t)THREADS * PER) {
		int64_t i0 = base + (int64_t)tid * PER;
		uint32_t k[PER], g = 0, e = 0;
		for (int j = 0; j < PER; j++) {
			k[j] = i0 + j < V ? key_of(row[i0 + j]) : 0;
			g += i0 + j < V && k[j] > T;
			e += i0 + j < V && k[j] == T;
		}
		uint32_t total, before = block_scan(e << 16 | g, &total, sm.part);
		uint32_t gb = gt_run + (before & 0xffff), eb = eq_run + (before >> 16);
		for (int j = 0; j < PER; j++) {
			if (i0 + j >= V)
				break;
			bool take = k[j] > T || (k[j] == T && eb < need);
			if (take) {
				uint32_t slot = gb + min(eb, need);
				vo[slot] = __uint_as_float(row[i0 + j]);
				io[slot] = (int32_t)(i0 + j);
			}
			gb += k[j] > T;
			eb += k[j] == T;
		}
		gt_run += total & 0xffff;
		eq_run += total >> 16;
	}
}
