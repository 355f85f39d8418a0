/* sample.cu: the device half of the keyed sampler (ops.h `sample`; the
 * rule is libcore/compute/sample.h, the CPU twin cpu_sample.c). For each
 * listed row of logits f32 [R, V] it finds the row's C best logits under
 * rule 1 (larger first, -0 as +0, NaN last, ties to the lower id) and, for
 * a nucleus row, the statistics tf_sample_nucleus takes; the host finishes
 * the draw with sample.c's own functions (cuda_sample.c), so the tokens are
 * the CPU's.
 *
 * Math: key(v) = the order-preserving u32 of v (NaN 0, -0 as +0: sample.c's
 * key_of without the id). A row is cut into S = ceil(V / 8192) chunks of
 * 8192 logits, one block a chunk (grid (Rd, S)); the row's C best are among
 * the union of each chunk's min(C, chunk) best under the same order, so:
 *   1. each chunk block holds its logits in registers (8 a thread, in id
 *      order), radix-selects its Cc = min(C, len) best (8 bits a pass from
 *      the top, 4 passes, warp-aggregated shared histograms: the threshold T
 *      and `need` such that the keys > T number Cc - need and at least need
 *      keys equal T), writes them in id order (one block scan of packed
 *      counts) to the row's scratch list at chunk c * min(C, 8192), and for
 *      a nucleus row its statistics (below);
 *   2. the last chunk block of the row to finish (an integer counter a row,
 *      after a fence) selects the row's C best from that list, which is in
 *      id order, the same way (from registers when the list holds at most
 *      8192, else in passes over it from L2) and writes them in id order as
 *      values f32 [C] and ids int32 [C].
 * Which block comes last changes nothing: it only reads the full list.
 * Statistics when t > 0 (t: the temperature clamped at 1e-6 by the host),
 * one pair a chunk: max = the chunk's largest non-NaN logit (-inf if none),
 * sum = the sum of exp(v/t - max/t) over the chunk in fp64 (0 for a chunk
 * of -inf only; NaN when the chunk holds a NaN); tf_sample_nucleus combines
 * the S pairs (sum_c sum_c exp(max_c/t - max/t)), as it does ranks'.
 * Exactness: the selection is integer work on the float bits, so the
 * candidate set is exactly the row's C best; ties at T resolve by id as the
 * CPU's sort does; values are the logits' own bits. The sums run in fp64
 * with IEEE division and the device's exp (within 1 ulp) in another order
 * than tf_sample_stats and rescaled per chunk: they differ from the CPU's
 * by far less than the 1e-9 guard of tf_sample_nucleus, which leaves any
 * row whose cut comes that close to the whole-row path (float to double
 * conversions go through the bits, as fast math would flush subnormals).
 * Determinism and batch invariance: the chunking is a function of V only,
 * every reduction runs in a fixed order, and a row's blocks touch only its
 * own scratch; the integer counter only elects the block that merges.
 *
 * Layout: logits f32 [R, V] (row-major, any alignment); rows int32 [Rd]
 * (the logits row of grid row b), temps f64 [Rd], count u32 [Rd] (zero at
 * launch); out values f32 [Rd, C], ids int32 [Rd, C], stats f64 [Rd, S, 2]
 * (max, sum; unwritten when t <= 0); scratch list bits u32 [Rd, S * Cc0]
 * and ids int32 [Rd, S * Cc0], Cc0 = min(C, 8192).
 * Launch limits: 1024 threads, grid (Rd, S) with Rd <= 2^31 - 1 and
 * S = ceil(V / 8192) <= 65535, 1 <= C <= V < 2^31; about 1.3 KiB of static
 * shared memory. Prediction, not measured: ~6-8 us for one row of 129,280
 * with C = 512 (16 blocks: a 32 KiB read each, 4 register passes, then one
 * merge block over 8192 candidates), ~10 us for 16 rows, ~20 us for 64
 * (then bound by reading 33 MB of logits). The merge of a list over 8192
 * (C > 512 at this V) runs as the earlier one-block design did, over the
 * list instead of the row. */
#include <stdint.h>

#include "kernels/dtype.cuh"

namespace tf_sample {

constexpr int THREADS = 1024;
constexpr int WARPS = THREADS / 32;
constexpr int PER = 8; /* consecutive logits a thread */
constexpr int CHUNK = THREADS * PER; /* logits a chunk block */
constexpr unsigned FULL = 0xffffffffu;

/* The order key of a logit's bits: larger = earlier; NaN 0, -0 as +0. */
__device__ __forceinline__ uint32_t key_of(uint32_t b)
{
	return tf_dt::mono_key(b);
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

/* Sum of v over the block (fp64, a fixed order), valid in thread 0. */
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
	uint32_t digit, above, kmax, last;
};

/* Count one key into the pass's histogram when it matches the prefix. */
__device__ __forceinline__ void hist_add(select_smem *sm, bool valid, uint32_t k, uint32_t pmask,
					 uint32_t prefix, int shift)
{
	bool in = valid && (k & pmask) == prefix;
	uint32_t d = (k >> shift) & 255;
	unsigned peers = __match_any_sync(FULL, in ? d : 256u);
	if (in && (int)(threadIdx.x % 32) == __ffs(peers) - 1)
		atomicAdd(&sm->hist[d], (uint32_t)__popc(peers));
}

/* After a pass's histogram: the digit where the need-th key from the top
 * falls (sm->digit) and the keys above it (sm->above). Ends synced. */
__device__ __forceinline__ void pick_digit(select_smem *sm, uint32_t need)
{
	__syncthreads();
	int lane = threadIdx.x % 32;
	if (threadIdx.x < 32) {
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
}

/* The radix select of the C best keys that src adds to the histogram
 * (src.add(sm, pmask, prefix, shift), every thread): T and need. */
template <class Src>
__device__ void select_keys(const Src &src, uint32_t C, select_smem *sm, uint32_t *T,
			    uint32_t *need_out)
{
	int tid = threadIdx.x;
	uint32_t prefix = 0, pmask = 0, need = C;
	for (int shift = 24; shift >= 0; shift -= 8) {
		if (tid < 256)
			sm->hist[tid] = 0;
		__syncthreads();
		src.add(sm, pmask, prefix, shift);
		pick_digit(sm, need);
		prefix |= sm->digit << shift;
		pmask |= 255u << shift;
		need -= sm->above;
		__syncthreads();
	}
	*T = prefix;
	*need_out = need;
}

/* Keys held in registers, PER a thread (k[j] valid where bit j of valid is
 * set; C <= the valid keys). */
struct reg_keys {
	const uint32_t *k;
	uint32_t valid;
	__device__ void add(select_smem *sm, uint32_t pmask, uint32_t prefix, int shift) const
	{
#pragma unroll
		for (int j = 0; j < PER; j++)
			hist_add(sm, valid >> j & 1, k[j], pmask, prefix, shift);
	}
};

/* n keys of bits in memory (a list larger than a block holds), read from
 * L2 each pass. */
struct mem_keys {
	const uint32_t *bits;
	int64_t n;
	__device__ void add(select_smem *sm, uint32_t pmask, uint32_t prefix, int shift) const
	{
		for (int64_t b = 0; b < n; b += THREADS) {
			int64_t i = b + threadIdx.x;
			hist_add(sm, i < n, i < n ? key_of(__ldcg(bits + i)) : 0, pmask, prefix, shift);
		}
	}
};

__device__ void select_regs(const uint32_t *k, uint32_t valid, uint32_t C, select_smem *sm,
			    uint32_t *T, uint32_t *need_out)
{
	select_keys(reg_keys{k, valid}, C, sm, T, need_out);
}

__device__ void select_mem(const uint32_t *bits, int64_t n, uint32_t C, select_smem *sm,
			   uint32_t *T, uint32_t *need_out)
{
	select_keys(mem_keys{bits, n}, C, sm, T, need_out);
}

/* One tile of the ordered write: this thread's PER keys k (bits b, ids
 * id0 + j or idv[j]) at tile positions tid * PER + j; *gt_run and *eq_run
 * carry the counts of earlier tiles. slot = keys > T before + min(keys ==
 * T before, need). */
__device__ __forceinline__ void write_tile(const uint32_t *k, const uint32_t *b, const int32_t *idv,
					   uint32_t valid, uint32_t T, uint32_t need,
					   uint32_t *gt_run, uint32_t *eq_run, uint32_t *ob,
					   int32_t *oi, select_smem *sm)
{
	uint32_t g = 0, e = 0;
#pragma unroll
	for (int j = 0; j < PER; j++) {
		bool v = valid >> j & 1;
		g += v && k[j] > T;
		e += v && k[j] == T;
	}
	uint32_t total, before = block_scan(e << 16 | g, &total, sm->part);
	uint32_t gb = *gt_run + (before & 0xffff), eb = *eq_run + (before >> 16);
#pragma unroll
	for (int j = 0; j < PER; j++) {
		if (!(valid >> j & 1))
			break;
		bool take = k[j] > T || (k[j] == T && eb < need);
		if (take) {
			uint32_t slot = gb + min(eb, need);
			ob[slot] = b[j];
			oi[slot] = idv[j];
		}
		gb += k[j] > T;
		eb += k[j] == T;
	}
	*gt_run += total & 0xffff;
	*eq_run += total >> 16;
}

/* A thread's PER entries of the list from i0 (bits b, ids idv, keys k;
 * bit j of the result: entry j is in the list). */
__device__ __forceinline__ uint32_t load_tile(const uint32_t *lb, const int32_t *li, int64_t n,
					      int64_t i0, uint32_t *k, uint32_t *b, int32_t *idv)
{
	uint32_t valid = 0;
#pragma unroll
	for (int j = 0; j < PER; j++) {
		bool v = i0 + j < n;
		b[j] = v ? __ldcg(lb + i0 + j) : 0;
		idv[j] = v ? __ldcg(li + i0 + j) : 0;
		k[j] = key_of(b[j]);
		valid |= (uint32_t)v << j;
	}
	return valid;
}

/* The merge in the row's last block: the C best of the row's list (n bits
 * and ids, in id order) to values and ids, in id order. */
__device__ void merge(const uint32_t *lb, const int32_t *li, int64_t n, uint32_t C,
		      float *values, int32_t *ids, select_smem *sm)
{
	int tid = threadIdx.x;
	uint32_t *ob = (uint32_t *)values, gt_run = 0, eq_run = 0, T, need;
	uint32_t k[PER], b[PER];
	int32_t idv[PER];
	if (n <= CHUNK) {
		uint32_t valid = load_tile(lb, li, n, (int64_t)tid * PER, k, b, idv);
		select_regs(k, valid, C, sm, &T, &need);
		write_tile(k, b, idv, valid, T, need, &gt_run, &eq_run, ob, ids, sm);
		return;
	}
	select_mem(lb, n, C, sm, &T, &need);
	for (int64_t base = 0; base < n; base += CHUNK) {
		uint32_t valid = load_tile(lb, li, n, base + (int64_t)tid * PER, k, b, idv);
		write_tile(k, b, idv, valid, T, need, &gt_run, &eq_run, ob, ids, sm);
	}
}

} // namespace tf_sample

extern "C" __global__ void __launch_bounds__(1024)
tf_sample_select(const float *logits, int64_t V, int32_t C, const int32_t *rows, const double *temps,
		 uint32_t *count, float *values, int32_t *ids, double *stats, uint32_t *list_bits,
		 int32_t *list_ids)
{
	using namespace tf_sample;
	__shared__ select_smem sm;
	int tid = threadIdx.x, lane = tid % 32;
	int64_t r = blockIdx.x, c = blockIdx.y, S = gridDim.y;
	int64_t base = c * CHUNK, len = V - base < CHUNK ? V - base : CHUNK;
	int64_t cc0 = C < CHUNK ? C : CHUNK, ccn = C < len ? C : len;
	const uint32_t *row = (const uint32_t *)logits + (int64_t)rows[r] * V;

	/* this chunk: logits base + tid * PER + j in registers */
	uint32_t b[PER], k[PER], valid = 0, km = 0;
	int32_t idv[PER];
	int64_t i0 = base + (int64_t)tid * PER;
#pragma unroll
	for (int j = 0; j < PER; j++) {
		bool v = i0 + j < base + len;
		b[j] = v ? row[i0 + j] : 0;
		k[j] = key_of(b[j]);
		idv[j] = (int32_t)(i0 + j);
		valid |= (uint32_t)v << j;
		km = v ? max(km, k[j]) : km;
	}

	double t = temps[r];
	if (t > 0) {
		if (tid == 0)
			sm.kmax = 0;
		__syncthreads();
		km = __reduce_max_sync(FULL, km);
		if (lane == 0)
			atomicMax(&sm.kmax, km);
		__syncthreads();
		uint32_t kmax = sm.kmax;
		double inf = __longlong_as_double(0x7ff0000000000000ll);
		double max = kmax ? f64_of(bits_of_key(kmax)) : -inf, mt = max / t, acc = 0;
#pragma unroll
		for (int j = 0; j < PER; j++) {
			if (!(valid >> j & 1))
				continue;
			if (max == -inf) /* -inf and NaN only: 0, or NaN */
				acc += k[j] ? 0.0 : __longlong_as_double(0x7ff8000000000000ll);
			else
				acc += exp(f64_of(b[j]) / t - mt);
		}
		double sum = block_sum(acc, sm.dpart);
		if (tid == 0) {
			stats[2 * (r * S + c)] = max;
			stats[2 * (r * S + c) + 1] = sum;
		}
	}

	/* the chunk's ccn best to the list, in id order (all of them when
	 * ccn = len: T 0 and need len take every key) */
	uint32_t T = 0, need = (uint32_t)len, gt_run = 0, eq_run = 0;
	if (ccn < len)
		select_regs(k, valid, (uint32_t)ccn, &sm, &T, &need);
	uint32_t *lb = list_bits + r * S * cc0;
	int32_t *li = list_ids + r * S * cc0;
	write_tile(k, b, idv, valid, T, need, &gt_run, &eq_run, lb + c * cc0, li + c * cc0, &sm);

	/* the last block of the row merges */
	__threadfence();
	__syncthreads();
	if (tid == 0)
		sm.last = atomicAdd(&count[r], 1u) == (uint32_t)(S - 1);
	__syncthreads();
	if (!sm.last)
		return;
	__threadfence();
	int64_t n = (S - 1) * cc0 + (C < V - (S - 1) * CHUNK ? C : V - (S - 1) * CHUNK);
	merge(lb, li, n, (uint32_t)C, values + r * C, ids + r * C, &sm);
}
