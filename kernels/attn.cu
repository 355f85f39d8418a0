/* attn.cu: the attention ops (dsv41-forward-spec.md §6-§8): sparse MQA with
 * sinks, the compressor's pooling and norm, indexer scores, top-k selection,
 * candidate blocks and the key lists. CPU twins: cpu_attn.c (cpu_attention,
 * cpu_compressor, cpu_index_score, cpu_index_topk, cpu_candidate_blocks,
 * cpu_attn_keys); launchers: cuda_attn.c.
 *
 * This file is compiled with --use_fast_math: expf is __expf, '/' and sqrtf
 * are approximate, a*b+c contracts into fma and fp32 subnormals flush to
 * zero. Where a result is matched closely the steps are written with the
 * IEEE intrinsics (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn); where the
 * CPU calls expf on a value that is not small, exp runs in double (not
 * touched by fast math) and is rounded to float.
 *
 * tf_attn_mqa_<k>_e<E>, tf_attn_mqa4_<k>_e16 (keys f32 or bf16; E = 4, 8,
 *   16 elements a lane: D <= 32E): out [R, H, D] f32 from q [R, H, D]
 *   f32/bf16, keys [NK, D], key_off int32 [R + 1], key_idx int32, sink [H]
 *   f32 (ops.h attention): z = q.k * scale, M = max(z, sink), o = sum
 *   exp(z - M) k / (sum exp(z - M) + exp(sink - M)). A block of HG warps
 *   (HG = 8; 4 for tf_attn_mqa4_*) owns one row and HG heads (MQA: the
 *   heads of a row share its keys, so each key is read once for HG heads)
 *   and one of S splits of the row's key list. Per tile of 32 keys (their
 *   table rows staged in shared memory first):
 *   (1) warp w takes keys w, w + HG, ... two at a time (two keys' loads in
 *   flight): its lanes hold the HG heads' q in registers (element lane +
 *   32e of each, fp32), read the key once (coalesced) and sum the HG dot
 *   products across lanes by a transposing butterfly, which adds the same
 *   pairs of lanes for HG 4 and 8; (2) warp h rescales head h's online
 *   softmax (running max starts at the sink, so M = max(z, sink) as on
 *   the CPU); (3) each thread adds p k into its fp32 accumulators (HG
 *   heads, d = tid + 32 HG i, in key order; the key read again, from L1).
 *   So a head's result has the same bits at HG 4 and 8, and the launcher
 *   may pick HG by the number of blocks (4 when fewer than 4 blocks of 8
 *   an SM: 1-3 rows of the release) without breaking batch invariance.
 *   S = 1 divides by the denominator and writes out; S > 1 writes
 *   (o, m, l) per split and tf_attn_mqa_merge combines them:
 *   M = max m_s, o = sum e^(m_s - M) o_s / (sum e^(m_s - M) l_s + e^(sink -
 *   M)), the splits' (m, l) loaded at once and summed in split order by
 *   one thread. exp is __expf of arguments <= 0 (relative error ~1e-6 for
 *   the weights that matter); dot products and sums are fp32 in another
 *   order than the CPU's: measured on the H200 within 1.3e-6 of the
 *   output's largest magnitude (random q, keys, sinks; D 1..512). Launch:
 *   block 32 HG, grid (R * ceil(H / HG), S), static shared memory 1.3 KiB
 *   (HG 8) or 0.7 KiB (HG 4); ptxas: 227 registers at HG 8, e16 (one
 *   block an SM), 152 at HG 4 (three blocks an SM); D <= 512 (32E), any H
 *   (the last group masked), any number of keys; the merge takes S <= 64
 *   (the launcher: one split per 32 keys of a row's room, at most 32).
 *   Measured before the 4-head blocks and the 32-key splits (64 heads, D
 *   512, 1152 keys a row, f32 keys, 8-head blocks, 16 splits at most): 1
 *   row 32 us, 8 rows 116 us, 256 rows 3.8 ms (10 TFLOP/s: the fp32 SIMT
 *   bound is latency, one block an SM). Prediction, not measured: 1 row of
 *   640 keys (20 splits, 320 blocks of 4 heads, all resident) ~8-10 us plus
 *   ~3 us of merge. Keys whose index is outside [0, NK) are skipped and
 *   key_off is clamped to [0, room] (the device cannot refuse them as the
 *   CPU does).
 * tf_attn_compressor: lat [E, W] f32/bf16 from u, g [E, r, W] f32 and w
 *   [W] f32/bf16/f16 (ops.h compressor): r = 2: m = max(g0, g1), e_i =
 *   expf(g_i - m) (double exp, rounded), v = e0/s u0 + e1/s u1; r = 1: v =
 *   u0; the sum of squares in the CPU's order (8 partials d mod 8, added
 *   pairwise), scale = 1/sqrtf(ms + eps), lat = v scale w: every step IEEE
 *   in the CPU's order, so lat is the CPU's bits but for subnormals and
 *   the rare last-bit misses of glibc's expf (seen on the H200: 0 or 2 of
 *   3584 f32 outputs, 1 ulp; bf16 outputs all equal).
 *   Block 256, grid E, dynamic shared memory 4W bytes: W <= 12288.
 * tf_attn_score_<k>_t<T> (keys f32/bf16; T = 4 for Hi <= 32, else 8):
 *   scores [R, N] f32 from iq [R, Hi, Di] f32/bf16, iw [R, Hi] f32, keys
 *   [N, Di], n_vis int32 [R], blocks u8 [R, nb] or none (ops.h
 *   index_score; nb >= ceil(N/bs) is the blocks' row stride): s_j =
 *   sum_h (iw_h hs) max(0, (iq_h.k_j) ds), -inf where j >= n_vis or block
 *   j/bs unmarked. A block of 256 threads owns one row and TJ = 1024/T
 *   keys: an fp32 SIMT matmul of the row's 8T heads by the keys over
 *   chunks of 32 of Di through shared memory, each thread 8 heads x 4
 *   keys (threads (ty, tx): heads 8ty.., keys tx + 256/T jj), then the
 *   head sum (iw_h hs) max(0, d) with IEEE steps in head order within a
 *   thread and across the T head groups; a tile past n_vis is written
 *   -inf unread. Dot products in another order than the CPU's: measured
 *   within 5e-7 of the row's largest score. 64 rows x 32768 keys x 32
 *   heads: 0.87 ms (20 TFLOP/s). Grid ceil(N/TJ) * R, static
 *   shared memory 38 KiB (T 4) or 25 KiB (T 8); any Hi (passes of 8T
 *   heads), any Di.
 * tf_attn_topk: sel int32 [R, k], n_sel int32 [R] from scores [R, N] f32
 *   and n_vis (ops.h index_topk). n = clamp(n_vis, 0, N) <= k: all j < n;
 *   else the k largest scores > -inf (NaN never taken), ties to the
 *   smaller j, listed ascending; -1 past n_sel. The order key of a score
 *   is its float bits made monotone (-0 as +0); a radix select (4 passes
 *   of 8 bits, histograms in shared memory) finds the k-th key T, then one
 *   ordered pass takes every key > T and the first (k - #>T) keys == T,
 *   placed by a block scan: integer only, the CPU's picks exactly. Block
 *   1024, grid R, static shared memory 1.2 KiB; any N < 2^31, any k.
 *   256 rows x 32768 scores, k 512 or 1024: 0.11 ms.
 * tf_attn_blockmax, tf_attn_blocks: candidate blocks (ops.h
 *   candidate_blocks): the order key of each visible block's max score
 *   (the newest +inf) into scratch u32 [R, ceil(N/bs)], then the same
 *   select per row with k = topb over the vb visible blocks, writing
 *   blocks u8 [R, nb] (1 kept, 0 not, every column). Exact. 256 rows x
 *   32768 scores, bs 8, topb 2048: 35 us.
 * tf_attn_keys_off, tf_attn_keys_fill: the key lists (ops.h attn_keys):
 *   one block of 1024 scans the n rows' counts (n_sel clamped to [0, k],
 *   plus the window count) into key_off int32 [n + 1] from 0 or, appending,
 *   from the key_off[0] an earlier list left (read before the scan); then a
 *   block a row writes its selected keys (pbase + sel[i][t] when direct,
 *   else pbase + i*k + t) and its window rows wbase + pp - wlo, none at or
 *   past room. Exact; any n. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/dtype.cuh"

namespace tf_attn {

using namespace tf_dt;

constexpr unsigned FULL = 0xffffffffu;

__device__ __forceinline__ float ld(const float *p, int64_t i)
{
	return p[i];
}

__device__ __forceinline__ float ld(const __nv_bfloat16 *p, int64_t i)
{
	return __bfloat162float(p[i]);
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(FULL, v, o));
	return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o; o >>= 1)
		v += __shfl_xor_sync(FULL, v, o);
	return v;
}

/* ---- attention ---- */

constexpr int MQA_TK = 32;      /* keys a tile (64 measured 20% slower) */

/* log2 of HG (4 or 8). */
template <int HG>
__host__ __device__ constexpr int mqa_lg()
{
	return HG == 8 ? 3 : 2;
}

/* Sums p[0..HG-1] over the warp: lane l ends with the sum of head
 * l >> (5 - log2 HG) (HG 8: 4 b4 + 2 b3 + b2, b = bits of l). Each step
 * halves the values a lane holds, keeping those of its half and adding the
 * partner's; then plain butterflies. Every level adds the same pairs of
 * lanes' values as a butterfly of one value would (a + b = b + a), so a
 * head's sum has the same bits for HG 4 and 8. */
template <int HG>
__device__ __forceinline__ float sumhg(float (&p)[HG], int lane)
{
#pragma unroll
	for (int o = 16, n = HG; n > 1; o >>= 1, n >>= 1) {
		bool hi = lane & o;
#pragma unroll
		for (int i = 0; i < n / 2; i++) {
			float send = hi ? p[i] : p[i + n / 2], keep = hi ? p[i + n / 2] : p[i];
			p[i] = keep + __shfl_xor_sync(FULL, send, o);
		}
	}
	float v = p[0];
#pragma unroll
	for (int o = 16 >> mqa_lg<HG>(); o; o >>= 1)
		v += __shfl_xor_sync(FULL, v, o);
	return v;
}

struct mqa_args {
	const void *q;          /* [R, H, D] f32/bf16 */
	const void *keys;       /* [NK, D] */
	const int32_t *off;     /* [R + 1] */
	const int32_t *idx;     /* [room] */
	const float *sink;      /* [H] */
	float *out;             /* [R, H, D] */
	float *part;            /* S > 1: [R, H, S, D + 2] (o, then m, l) */
	int64_t nk, room;
	int32_t H, D, S, q_dt;
	float scale;
};

/* Key t's E elements of lane (zeros past D, or for a skipped key). */
template <typename KT, int E>
__device__ __forceinline__ void mqa_key(const mqa_args &a, int ki, int lane, float (&kv)[E])
{
	const KT *k = (const KT *)a.keys + (int64_t)(ki < 0 ? 0 : ki) * a.D;
#pragma unroll
	for (int e = 0; e < E; e++) {
		int d = lane + 32 * e;
		kv[e] = ki >= 0 && d < a.D ? ld(k, d) : 0.0f;
	}
}

/* The HG heads' scores of one key into sc[t] (-inf for a skipped key). */
template <int E, int HG>
__device__ __forceinline__ void mqa_score(const mqa_args &a, const float (&qr)[HG][E],
					  const float (&kv)[E], int ki, int lane, float *sc)
{
	float p[HG];
#pragma unroll
	for (int h = 0; h < HG; h++) {
		float s = 0;
#pragma unroll
		for (int e = 0; e < E; e++)
			s = fmaf(qr[h][e], kv[e], s);
		p[h] = s;
	}
	float z = sumhg<HG>(p, lane);
	constexpr int sh = 5 - mqa_lg<HG>();
	if ((lane & ((1 << sh) - 1)) == 0)
		sc[lane >> sh] = ki >= 0 ? z * a.scale : -INFINITY;
}

/* Phase 1 of a tile: sc[t][h] = q_h.k_t scale for the tile's keys kid[t]
 * (-1: skipped). Warp w takes keys w + HG j, two at a time so that two
 * keys' loads are in flight. */
template <typename KT, int E, int HG>
__device__ __forceinline__ void mqa_scores(const mqa_args &a, const float (&qr)[HG][E],
					   float (*sc)[HG], const int *kid)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	constexpr int W = HG; /* warps a block */
	for (int t = warp; t < MQA_TK; t += 2 * W) {
		int k0 = kid[t], k1 = kid[t + W];
		float kv0[E], kv1[E];
		mqa_key<KT, E>(a, k0, lane, kv0);
		mqa_key<KT, E>(a, k1, lane, kv1);
		mqa_score<E, HG>(a, qr, kv0, k0, lane, sc[t]);
		mqa_score<E, HG>(a, qr, kv1, k1, lane, sc[t + W]);
	}
}

/* q's HG heads of this block into registers, element lane + 32e of each
 * (zeros past D and past the last head); one branch on the dtype, so that
 * every load is issued before the first is used. */
template <typename QT, int E, int HG>
__device__ __forceinline__ void mqa_q(const mqa_args &a, int64_t r, int h0, int hn, int lane,
				      float (&qr)[HG][E])
{
	const QT *q = (const QT *)a.q + (r * a.H + h0) * a.D;
#pragma unroll
	for (int h = 0; h < HG; h++)
#pragma unroll
		for (int e = 0; e < E; e++) {
			int d = lane + 32 * e;
			qr[h][e] = h < hn && d < a.D ? ld(q, (int64_t)h * a.D + d) : 0.0f;
		}
}

template <typename KT, int E, int HG>
__device__ __forceinline__ void mqa_body(const mqa_args &a)
{
	constexpr int THREADS = 32 * HG;
	constexpr int NA = (32 * E + THREADS - 1) / THREADS; /* d's a thread */
	__shared__ __align__(16) float sc[MQA_TK][HG];
	__shared__ int kid[MQA_TK];
	__shared__ float alpha[HG], ml[HG][2];
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
	const int groups = (a.H + HG - 1) / HG;
	const int64_t r = blockIdx.x / groups;
	const int h0 = (int)(blockIdx.x % groups) * HG, s = blockIdx.y;
	const int hn = min(HG, a.H - h0);

	float qr[HG][E];
	if (a.q_dt == DT_F32)
		mqa_q<float, E, HG>(a, r, h0, hn, lane, qr);
	else
		mqa_q<__nv_bfloat16, E, HG>(a, r, h0, hn, lane, qr);
	/* This split's keys: the row's list cut in S near-equal parts. */
	int64_t k0 = min(max((int64_t)a.off[r], (int64_t)0), a.room);
	int64_t k1 = min(max((int64_t)a.off[r + 1], k0), a.room);
	int64_t per = (k1 - k0 + a.S - 1) / a.S;
	int64_t kb = min(k1, k0 + s * per), ke = min(k1, kb + per);

	float m = warp < hn ? a.sink[h0 + warp] : 0.0f, l = 0;
	float acc[NA][HG];
#pragma unroll
	for (int i = 0; i < NA; i++)
#pragma unroll
		for (int h = 0; h < HG; h++)
			acc[i][h] = 0;

	for (int64_t t0 = kb; t0 < ke; t0 += MQA_TK) {
		int tn = (int)min((int64_t)MQA_TK, ke - t0);
		if (tid < MQA_TK) {
			int32_t ki = tid < tn ? a.idx[t0 + tid] : -1;
			kid[tid] = ki >= 0 && ki < a.nk ? ki : -1;
		}
		__syncthreads();
		mqa_scores<KT, E, HG>(a, qr, sc, kid);
		__syncthreads();
		/* (2) warp h: the online softmax of head h over this tile. */
		if (warp < hn) {
			constexpr int V = MQA_TK / 32;
			float v[V], mx = -INFINITY, sum = 0;
#pragma unroll
			for (int j = 0; j < V; j++)
				mx = fmaxf(mx, v[j] = sc[lane + 32 * j][warp]);
			float mn = fmaxf(m, warp_max(mx)), al = __expf(m - mn);
#pragma unroll
			for (int j = 0; j < V; j++) {
				float p = __expf(v[j] - mn);
				sc[lane + 32 * j][warp] = p;
				sum += p;
			}
			l = l * al + warp_sum(sum);
			m = mn;
			if (lane == 0)
				alpha[warp] = al;
		} else {
			for (int t = lane; t < MQA_TK; t += 32)
				sc[t][warp] = 0;
			if (lane == 0)
				alpha[warp] = 0;
		}
		__syncthreads();
		/* (3) acc = acc alpha + sum_t p_t k_t, thread's d = tid + 32 HG i. */
		const KT *keys = (const KT *)a.keys;
#pragma unroll
		for (int i = 0; i < NA; i++)
#pragma unroll
			for (int h = 0; h < HG; h++)
				acc[i][h] *= alpha[h];
#pragma unroll 8
		for (int t = 0; t < tn; t++) {
			int ki = kid[t];
			if (ki < 0)
				continue;
			float pr[HG];
#pragma unroll
			for (int h = 0; h < HG; h += 4) {
				float4 pq = *(const float4 *)&sc[t][h];
				pr[h] = pq.x, pr[h + 1] = pq.y, pr[h + 2] = pq.z, pr[h + 3] = pq.w;
			}
#pragma unroll
			for (int i = 0; i < NA; i++) {
				int d = tid + THREADS * i;
				float kv = d < a.D ? ld(keys, (int64_t)ki * a.D + d) : 0.0f;
#pragma unroll
				for (int h = 0; h < HG; h++)
					acc[i][h] = fmaf(pr[h], kv, acc[i][h]);
			}
		}
		__syncthreads();
	}
	if (warp < hn && lane == 0) {
		ml[warp][0] = m;
		ml[warp][1] = l;
	}
	__syncthreads();
#pragma unroll
	for (int h = 0; h < HG; h++) {
		if (h >= hn)
			break;
		int64_t rh = r * a.H + h0 + h;
		float denom = a.S == 1 ? __fadd_rn(ml[h][1], __expf(a.sink[h0 + h] - ml[h][0])) : 1.0f;
#pragma unroll
		for (int i = 0; i < NA; i++) {
			int d = tid + THREADS * i;
			if (d >= a.D)
				continue;
			if (a.S == 1)
				a.out[rh * a.D + d] = __fdiv_rn(acc[i][h], denom);
			else
				a.part[(rh * a.S + s) * (a.D + 2) + d] = acc[i][h];
		}
		if (a.S > 1 && tid < 2)
			a.part[(rh * a.S + s) * (a.D + 2) + a.D + tid] = ml[h][tid];
	}
}

/* ---- selection: radix select over order keys (0: not a candidate) ---- */

constexpr int SEL_THREADS = 1024;

/* The monotone order key of a float (-0 as +0): a > b as floats iff
 * key(a) > key(b); 0 for NaN and -inf, which are never candidates. */
__device__ __forceinline__ uint32_t order_key(float v)
{
	return mono_key(__float_as_uint(v));
}

constexpr uint32_t KEY_NEG_INF = 0x007fffffu; /* order_key(-inf) were it kept */
constexpr uint32_t KEY_POS_INF = 0xff800000u;

struct sel_smem {
	uint32_t hist[256];
	uint32_t warp_tot[SEL_THREADS / 32];
	/* volatile: each read after a barrier must be a load of that moment
	 * (without it, the compiler was seen to read total of a later pass) */
	volatile uint32_t digit, above, total;
};

/* Top-k of a row's candidates: sets T (the k-th largest key) and need
 * (how many keys equal to T to take, the smallest indices first). With at
 * most k candidates, T = 0 and need = 0: every candidate is taken. */
template <class Src>
__device__ void radix_select(const Src &src, int64_t n, uint32_t k, sel_smem &sm,
			     uint32_t *T, uint32_t *need, uint32_t *found)
{
	const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	uint32_t prefix = 0, mask = 0, krem = k;
	for (int pass = 0; pass < 4; pass++) {
		int shift = 24 - 8 * pass;
		if (tid < 256)
			sm.hist[tid] = 0;
		__syncthreads();
		for (int64_t base = 0; base < n; base += SEL_THREADS) {
			int64_t i = base + tid;
			uint32_t key = i < n ? src.key(i) : 0;
			bool take = key != 0 && (key & mask) == prefix;
			uint32_t dig = take ? (key >> shift) & 255u : 256u;
			uint32_t peers = __match_any_sync(FULL, dig);
			if (take && lane == __ffs(peers) - 1)
				atomicAdd(&sm.hist[dig], (uint32_t)__popc(peers));
		}
		__syncthreads();
		if (warp == 0) {
			/* Lane l holds bins 8l..8l+7; above = the keys in higher lanes. */
			uint32_t c[8], sum = 0;
#pragma unroll
			for (int b = 0; b < 8; b++)
				sum += c[b] = sm.hist[8 * lane + b];
			uint32_t incl = sum;
			for (int o = 1; o < 32; o <<= 1) {
				uint32_t v = __shfl_down_sync(FULL, incl, o);
				if (lane + o < 32)
					incl += v;
			}
			uint32_t above = incl - sum;
			if (lane == 0)
				sm.total = incl;
			if (above < krem && krem <= incl) {
				uint32_t acc = above;
				for (int b = 7; b >= 0; b--) {
					if (acc + c[b] >= krem) {
						sm.digit = 8 * lane + b;
						sm.above = acc;
						break;
					}
					acc += c[b];
				}
			}
		}
		__syncthreads();
		if (pass == 0) {
			uint32_t total = sm.total;
			*found = total;
			if (total <= k) {
				*T = 0;
				*need = 0;
				return;
			}
		}
		uint32_t digit = sm.digit, above = sm.above;
		krem -= above;
		prefix |= digit << shift;
		mask |= 255u << shift;
		__syncthreads(); /* the next pass clears the histogram */
	}
	*T = prefix;
	*need = krem;
}

/* Exclusive block scan of v (SEL_THREADS threads); *tot gets the sum. */
__device__ __forceinline__ uint32_t block_scan(uint32_t v, sel_smem &sm, uint32_t *tot)
{
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	uint32_t x = v;
	for (int o = 1; o < 32; o <<= 1) {
		uint32_t y = __shfl_up_sync(FULL, x, o);
		if (lane >= o)
			x += y;
	}
	if (lane == 31)
		sm.warp_tot[warp] = x;
	__syncthreads();
	if (warp == 0) {
		uint32_t w = sm.warp_tot[lane], s = w;
		for (int o = 1; o < 32; o <<= 1) {
			uint32_t y = __shfl_up_sync(FULL, s, o);
			if (lane >= o)
				s += y;
		}
		sm.warp_tot[lane] = s - w;
		if (lane == 31)
			sm.total = s;
	}
	__syncthreads();
	uint32_t r = sm.warp_tot[warp] + x - v;
	*tot = sm.total;
	__syncthreads(); /* warp_tot and total are reused by the next scan */
	return r;
}

/* The ordered pass: calls put(i, pos) for each taken i (pos = its rank in
 * index order) and skip(i) for the others, for i < n_out. Keys past n are
 * 0. One scan a chunk: gt and eq counts packed in 16 bits each. */
template <class Src, class Put>
__device__ void select_emit(const Src &src, int64_t n, int64_t n_out, uint32_t T, uint32_t need,
			    sel_smem &sm, Put put)
{
	const int tid = threadIdx.x;
	uint32_t gt_before = 0, eq_before = 0;
	for (int64_t base = 0; base < n_out; base += SEL_THREADS) {
		int64_t i = base + tid;
		uint32_t key = i < n ? src.key(i) : 0;
		bool gt = key > T, eq = key != 0 && key == T;
		uint32_t tot, ex = block_scan((gt ? 1u << 16 : 0u) | (eq ? 1u : 0u), sm, &tot);
		uint32_t g = gt_before + (ex >> 16), e = eq_before + (ex & 0xffffu);
		bool taken = gt || (eq && e < need);
		put(i, taken, g + min(e, need));
		gt_before += tot >> 16;
		eq_before += tot & 0xffffu;
	}
}

struct score_src {
	const float *s;
	__device__ uint32_t key(int64_t i) const
	{
		uint32_t k = order_key(s[i]);
		return k > KEY_NEG_INF ? k : 0;
	}
};

struct block_src {
	const uint32_t *m;
	__device__ uint32_t key(int64_t i) const { return m[i]; }
};

/* ---- indexer scores ---- */

constexpr int SCORE_KC = 32;      /* Di a chunk */
constexpr int SCORE_THREADS = 256;

template <int T>
struct score_smem {
	static constexpr int HP = 8 * T;                /* heads a pass */
	static constexpr int TX = SCORE_THREADS / T;    /* key groups */
	static constexpr int TJ = 4 * TX;               /* keys a block */
	float q[SCORE_KC][HP + 4];
	union {
		float k[SCORE_KC][TJ + 1];
		float red[T][TJ];
	};
	float w[HP];
};

struct score_args {
	const void *iq;          /* [R, Hi, Di] f32/bf16 */
	const float *iw;         /* [R, Hi] */
	const void *keys;        /* [N, Di] */
	const int32_t *n_vis;    /* [R] */
	const uint8_t *blocks;   /* [R, nb] or NULL */
	float *scores;           /* [R, N] */
	int64_t N, nb;
	int32_t Hi, Di, bs, iq_dt;
	float hs, ds;
};

/* acc[i][jj] += q_h.k_j over the Di chunks of one head pass. */
template <typename KT, int T>
__device__ __forceinline__ void score_pass(const score_args &a, score_smem<T> &sm, int64_t r,
					   int64_t j0, int hb, float (&acc)[8][4])
{
	using S = score_smem<T>;
	const int tid = threadIdx.x, ty = tid / S::TX, tx = tid % S::TX;
	const KT *keys = (const KT *)a.keys;
	for (int c0 = 0; c0 < a.Di; c0 += SCORE_KC) {
		for (int e = tid; e < S::HP * SCORE_KC; e += SCORE_THREADS) {
			int h = e / SCORE_KC, dd = e % SCORE_KC, d = c0 + dd;
			sm.q[dd][h] = hb + h < a.Hi && d < a.Di
				? load(a.iq, a.iq_dt, (r * a.Hi + hb + h) * a.Di + d) : 0.0f;
		}
		for (int e = tid; e < S::TJ * SCORE_KC; e += SCORE_THREADS) {
			int jj = e / SCORE_KC, dd = e % SCORE_KC, d = c0 + dd;
			int64_t j = j0 + jj;
			sm.k[dd][jj] = j < a.N && d < a.Di ? ld(keys, j * a.Di + d) : 0.0f;
		}
		__syncthreads();
		int dn = min(SCORE_KC, a.Di - c0);
		for (int dd = 0; dd < dn; dd++) {
			float4 qa = *(const float4 *)&sm.q[dd][8 * ty];
			float4 qb = *(const float4 *)&sm.q[dd][8 * ty + 4];
			float qv[8] = {qa.x, qa.y, qa.z, qa.w, qb.x, qb.y, qb.z, qb.w};
#pragma unroll
			for (int jj = 0; jj < 4; jj++) {
				float kv = sm.k[dd][tx + S::TX * jj];
#pragma unroll
				for (int i = 0; i < 8; i++)
					acc[i][jj] = fmaf(qv[i], kv, acc[i][jj]);
			}
		}
		__syncthreads();
	}
}

template <typename KT, int T>
__device__ __forceinline__ void score_body(const score_args &a)
{
	using S = score_smem<T>;
	__shared__ __align__(16) score_smem<T> sm;
	const int tid = threadIdx.x, ty = tid / S::TX, tx = tid % S::TX;
	const int64_t tiles = (a.N + S::TJ - 1) / S::TJ;
	const int64_t r = blockIdx.x / tiles, j0 = blockIdx.x % tiles * S::TJ;
	const int64_t nv = a.n_vis[r];
	float *out = a.scores + r * a.N;
	if (j0 >= nv) { /* no visible key in this tile */
		for (int jj = tid; jj < S::TJ && j0 + jj < a.N; jj += SCORE_THREADS)
			out[j0 + jj] = -INFINITY;
		return;
	}
	float part[4] = {0, 0, 0, 0};
	for (int hb = 0; hb < a.Hi; hb += S::HP) {
		if (tid < S::HP)
			sm.w[tid] = hb + tid < a.Hi ? __fmul_rn(a.iw[r * a.Hi + hb + tid], a.hs) : 0.0f;
		float acc[8][4];
#pragma unroll
		for (int i = 0; i < 8; i++)
#pragma unroll
			for (int jj = 0; jj < 4; jj++)
				acc[i][jj] = 0;
		score_pass<KT, T>(a, sm, r, j0, hb, acc);
		/* The head sum of this thread's 8 heads, in head order. */
#pragma unroll
		for (int jj = 0; jj < 4; jj++)
#pragma unroll
			for (int i = 0; i < 8; i++) {
				float d = __fmul_rn(acc[i][jj], a.ds);
				if (d > 0)
					part[jj] = __fadd_rn(part[jj], __fmul_rn(sm.w[8 * ty + i], d));
			}
		__syncthreads(); /* sm.w is rewritten by the next pass */
	}
#pragma unroll
	for (int jj = 0; jj < 4; jj++)
		sm.red[ty][tx + S::TX * jj] = part[jj];
	__syncthreads();
	for (int jj = tid; jj < S::TJ; jj += SCORE_THREADS) {
		int64_t j = j0 + jj;
		if (j >= a.N)
			break;
		float v = sm.red[0][jj];
		for (int y = 1; y < T; y++)
			v = __fadd_rn(v, sm.red[y][jj]);
		bool vis = j < nv && (!a.blocks || a.blocks[r * a.nb + j / a.bs]);
		out[j] = vis ? v : -INFINITY;
	}
}

} /* namespace tf_attn */

/* ---- entry points ---- */

#define TF_ATTN_MQA(NAME, KT, E, HG)                                                      \
	extern "C" __global__ void __launch_bounds__(32 * HG, HG == 8 ? 1 : 3)           \
	NAME(const void *q, int32_t q_dt, const void *keys, int64_t nk, const int32_t *off,  \
	     const int32_t *idx, int64_t room, const float *sink, float *out, float *part,   \
	     int32_t H, int32_t D, int32_t S, float scale)                                 \
	{                                                                                  \
		tf_attn::mqa_args a = {q, keys, off, idx, sink, out, part, nk, room,       \
				       H, D, S, q_dt, scale};                              \
		tf_attn::mqa_body<KT, E, HG>(a);                                           \
	}
TF_ATTN_MQA(tf_attn_mqa_f32_e4, float, 4, 8)
TF_ATTN_MQA(tf_attn_mqa_f32_e8, float, 8, 8)
TF_ATTN_MQA(tf_attn_mqa_f32_e16, float, 16, 8)
TF_ATTN_MQA(tf_attn_mqa_bf16_e4, __nv_bfloat16, 4, 8)
TF_ATTN_MQA(tf_attn_mqa_bf16_e8, __nv_bfloat16, 8, 8)
TF_ATTN_MQA(tf_attn_mqa_bf16_e16, __nv_bfloat16, 16, 8)
TF_ATTN_MQA(tf_attn_mqa4_f32_e16, float, 16, 4)
TF_ATTN_MQA(tf_attn_mqa4_bf16_e16, __nv_bfloat16, 16, 4)

/* The S splits of (row, head) blockIdx.x into out; block 128. */
extern "C" __global__ void tf_attn_mqa_merge(const float *part, const float *sink, float *out,
					    int32_t H, int32_t D, int32_t S)
{
	__shared__ float c[64], ls[64];
	__shared__ float inv;
	const int64_t rh = blockIdx.x;
	const float *p = part + rh * S * (D + 2);
	/* every split's (m, l) loaded at once, then thread 0 in split order */
	if (threadIdx.x < S) {
		c[threadIdx.x] = p[threadIdx.x * (D + 2) + D];
		ls[threadIdx.x] = p[threadIdx.x * (D + 2) + D + 1];
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		float M = sink[rh % H];
		for (int s = 0; s < S; s++)
			M = fmaxf(M, c[s]);
		float den = 0;
		for (int s = 0; s < S; s++) {
			c[s] = __expf(c[s] - M);
			den = __fadd_rn(den, __fmul_rn(c[s], ls[s]));
		}
		inv = __fadd_rn(den, __expf(sink[rh % H] - M));
	}
	__syncthreads();
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float o = 0;
#pragma unroll 8
		for (int s = 0; s < S; s++)
			o = fmaf(c[s], p[s * (D + 2) + d], o);
		out[rh * D + d] = __fdiv_rn(o, inv);
	}
}

/* One group e a block of 256; dynamic shared memory 4W bytes. */
extern "C" __global__ void tf_attn_compressor(const float *u, const float *g, const void *w,
					     int32_t w_dt, void *lat, int32_t lat_dt, int32_t W,
					     int32_t r, float eps)
{
	extern __shared__ float tf_attn_cmp_v[];
	float *v = tf_attn_cmp_v;
	__shared__ float part[8];
	__shared__ float scale;
	const int64_t e = blockIdx.x;
	const float *u0 = u + e * r * W;
	for (int d = threadIdx.x; d < W; d += blockDim.x) {
		if (r == 1) {
			v[d] = u0[d];
			continue;
		}
		const float *g0 = g + e * 2 * W;
		float a = g0[d], b = g0[W + d], m = a > b ? a : b;
		float e0 = (float)exp((double)__fsub_rn(a, m));
		float e1 = (float)exp((double)__fsub_rn(b, m));
		float s = __fadd_rn(e0, e1);
		v[d] = __fadd_rn(__fmul_rn(__fdiv_rn(e0, s), u0[d]),
				 __fmul_rn(__fdiv_rn(e1, s), u0[W + d]));
	}
	__syncthreads();
	if (threadIdx.x < 8) { /* cpu_dot's partial j: d = j, j + 8, ... in order */
		float s = 0;
		for (int d = threadIdx.x; d < W; d += 8)
			s = __fadd_rn(s, __fmul_rn(v[d], v[d]));
		part[threadIdx.x] = s;
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		float t = __fadd_rn(__fadd_rn(__fadd_rn(part[0], part[1]), __fadd_rn(part[2], part[3])),
				    __fadd_rn(__fadd_rn(part[4], part[5]), __fadd_rn(part[6], part[7])));
		float ms = __fdiv_rn(t, (float)W);
		scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(ms, eps)));
	}
	__syncthreads();
	for (int d = threadIdx.x; d < W; d += blockDim.x) {
		float y = __fmul_rn(__fmul_rn(v[d], scale), tf_attn::load(w, w_dt, d));
		if (lat_dt == tf_attn::DT_BF16)
			((uint16_t *)lat)[e * W + d] = tf_attn::f32_bf16(y);
		else
			((float *)lat)[e * W + d] = y;
	}
}

#define TF_ATTN_SCORE(NAME, KT, T)                                                        \
	extern "C" __global__ void __launch_bounds__(tf_attn::SCORE_THREADS)             \
	NAME(const void *iq, int32_t iq_dt, const float *iw, const void *keys,              \
	     const int32_t *n_vis, const uint8_t *blocks, int64_t nb, int32_t bs,           \
	     float *scores, int64_t N, int32_t Hi, int32_t Di, float hs, float ds)          \
	{                                                                                  \
		tf_attn::score_args a = {iq, iw, keys, n_vis, blocks, scores, N, nb,       \
					 Hi, Di, bs, iq_dt, hs, ds};                       \
		tf_attn::score_body<KT, T>(a);                                             \
	}
TF_ATTN_SCORE(tf_attn_score_f32_t4, float, 4)
TF_ATTN_SCORE(tf_attn_score_f32_t8, float, 8)
TF_ATTN_SCORE(tf_attn_score_bf16_t4, __nv_bfloat16, 4)
TF_ATTN_SCORE(tf_attn_score_bf16_t8, __nv_bfloat16, 8)

/* One row a block of 1024. */
extern "C" __global__ void __launch_bounds__(tf_attn::SEL_THREADS)
tf_attn_topk(const float *scores, const int32_t *n_vis, int64_t N, int32_t k, int32_t *sel,
	     int32_t *n_sel)
{
	__shared__ tf_attn::sel_smem sm;
	const int64_t r = blockIdx.x;
	int64_t n = n_vis[r];
	n = n < 0 ? 0 : n > N ? N : n;
	int32_t *out = sel + r * k;
	if (n <= k) {
		for (int64_t i = threadIdx.x; i < k; i += blockDim.x)
			out[i] = i < n ? (int32_t)i : -1;
		if (threadIdx.x == 0)
			n_sel[r] = (int32_t)n;
		return;
	}
	tf_attn::score_src src = {scores + r * N};
	uint32_t T, need, found;
	tf_attn::radix_select(src, n, (uint32_t)k, sm, &T, &need, &found);
	uint32_t take = found < (uint32_t)k ? found : (uint32_t)k;
	for (int64_t i = take + threadIdx.x; i < k; i += blockDim.x)
		out[i] = -1;
	if (threadIdx.x == 0)
		n_sel[r] = (int32_t)take;
	tf_attn::select_emit(src, n, n, T, need, sm, [&](int64_t i, bool taken, uint32_t pos) {
		if (taken)
			out[pos] = (int32_t)i;
	});
}

/* The order key of each visible block's max into m [R, nbk]; the newest
 * visible block gets +inf. Grid ceil(nbk / 256) * R, block 256. */
extern "C" __global__ void tf_attn_blockmax(const float *scores, const int32_t *n_vis, int64_t N,
					   int32_t bs, int64_t nbk, uint32_t *m)
{
	const int64_t per = (nbk + 255) / 256, r = blockIdx.x / per;
	const int64_t b = blockIdx.x % per * 256 + threadIdx.x;
	int64_t n = n_vis[r];
	n = n < 0 ? 0 : n > N ? N : n;
	int64_t vb = (n + bs - 1) / bs;
	if (b >= vb)
		return;
	const float *s = scores + r * N;
	uint32_t best = tf_attn::KEY_NEG_INF;
	for (int64_t i = b * bs; i < (b + 1) * bs && i < n; i++) {
		uint32_t k = tf_attn::order_key(s[i]);
		if (k > best)
			best = k;
	}
	m[r * nbk + b] = b == vb - 1 ? tf_attn::KEY_POS_INF : best;
}

/* One row a block of 1024: mark the topb best of its vb visible blocks in
 * blocks [R, nb] (every column written). */
extern "C" __global__ void __launch_bounds__(tf_attn::SEL_THREADS)
tf_attn_blocks(const uint32_t *m, const int32_t *n_vis, int64_t N, int32_t bs, int64_t nbk,
	       int32_t topb, uint8_t *blocks, int64_t nb)
{
	__shared__ tf_attn::sel_smem sm;
	const int64_t r = blockIdx.x;
	int64_t n = n_vis[r];
	n = n < 0 ? 0 : n > N ? N : n;
	int64_t vb = (n + bs - 1) / bs;
	tf_attn::block_src src = {m + r * nbk};
	uint32_t T = 0, need = 0, found;
	if (vb > topb)
		tf_attn::radix_select(src, vb, (uint32_t)topb, sm, &T, &need, &found);
	uint8_t *row = blocks + r * nb;
	tf_attn::select_emit(src, vb, nb, T, need, sm, [&](int64_t i, bool taken, uint32_t pos) {
		if (i < nb)
			row[i] = taken ? 1 : 0;
	});
}

/* key_off [n + 1]: one block of 1024 scans the rows' key counts. */
extern "C" __global__ void __launch_bounds__(tf_attn::SEL_THREADS)
tf_attn_keys_off(const int32_t *n_sel, int32_t k, int64_t n, int64_t p0, int32_t window,
		 int32_t append, int32_t *key_off)
{
	__shared__ tf_attn::sel_smem sm;
	__shared__ uint32_t start;
	if (threadIdx.x == 0)
		start = append ? (uint32_t)max(key_off[0], 0) : 0;
	__syncthreads();
	uint32_t carry = start;
	for (int64_t base = 0; base < n; base += tf_attn::SEL_THREADS) {
		int64_t i = base + threadIdx.x;
		uint32_t c = 0;
		if (i < n) {
			int64_t p = p0 + i, lo = p - window + 1 < 0 ? 0 : p - window + 1;
			int32_t ni = n_sel ? min(max(n_sel[i], 0), k) : 0;
			c = (uint32_t)(ni + (p - lo + 1));
		}
		uint32_t tot, ex = tf_attn::block_scan(c, sm, &tot);
		if (i < n)
			key_off[i] = (int32_t)(carry + ex);
		carry += tot;
	}
	if (threadIdx.x == 0)
		key_off[n] = (int32_t)carry;
}

/* Row blockIdx.x's keys at key_off[i]: selections, then its window. */
extern "C" __global__ void tf_attn_keys_fill(const int32_t *sel, const int32_t *n_sel, int32_t k,
					    int32_t direct, int64_t p0, int32_t window,
					    int64_t pbase, int64_t wbase, const int32_t *key_off,
					    int32_t *key_idx, int64_t room)
{
	const int64_t i = blockIdx.x, p = p0 + i;
	const int64_t lo = p - window + 1 < 0 ? 0 : p - window + 1;
	const int64_t wlo = p0 - window + 1 < 0 ? 0 : p0 - window + 1;
	int32_t ni = sel ? min(max(n_sel[i], 0), k) : 0;
	const int64_t at = key_off[i];
	int32_t *dst = key_idx + at;
	for (int t = threadIdx.x; t < ni; t += blockDim.x)
		if (at + t < room)
			dst[t] = (int32_t)(pbase + (direct ? sel[i * k + t] : i * k + t));
	for (int64_t q = threadIdx.x; q <= p - lo; q += blockDim.x)
		if (at + ni + q < room)
			dst[ni + q] = (int32_t)(wbase + lo + q - wlo);
}
