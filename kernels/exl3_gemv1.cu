/* exl3_gemv1.cu: the EXL3 matmul for one row (decode), kernels/NOTES.md v5
 * and v6. Opt-in ($TF_CUDA_EXL3_GEMV1=1): on the H200 it measured slower
 * than exl3_gemv.cu's one-row body, which stays the default.
 *
 * Same math as exl3_gemv.cu (shared/reference/exl3-format.md §5): u =
 * fp16(Ĥ(x ⊙ suh)) per 128-block of k, a = u · Ŵ, y = (a · Ĥ_N) ⊙ svh.
 * What differs is who decodes what:
 *
 * - One lane owns whole 16×16 tiles. A warp's tiles of a round are 4 runs
 *   of 8 neighbouring tiles (256·B contiguous bytes each); the warp reads
 *   them with coalesced 16-byte loads (v6; v5 had each lane read its own
 *   tile, 32 lines per load instruction) into a swizzled staging area in
 *   shared memory, each lane takes its tile from there, and the next
 *   round's loads go out before this round's decode (b ≤ 2; after it for
 *   wider codes, for registers). The lane decodes all
 *   256 states from its own registers: every state's word, shift and byte
 *   selector is a compile-time constant. A state is one byte permute out of
 *   a "view" of the stream (the words shifted left by σ bits, one funnel
 *   shift per word and σ, shared by the states that use it), so the decode
 *   needs no cross-lane traffic and no per-state shifts and masks.
 * - The states 8l..8l+7 of a tile are rows 2(l&3), +1, +8, +9 of columns
 *   (l>>2) and (l>>2)+8 (§3), so a pair (t, t+1) meets the half2 pair of u
 *   rows it multiplies: one HFMA2 per two weights, summed in fp16 over the
 *   16 rows of a column (8 products a half), then in fp32.
 * - A cluster of 8 blocks owns 128 columns (8 tile columns, one output
 *   Hadamard) and all of K: block (rank) r takes k-tile rows
 *   r·T/8 + m·T + (0..T/8−1) for m = 0, 1, … (T threads, T/8 rows per
 *   round, lane (ρ, c) = (tid / 8, tid % 8)). u is built once per block for
 *   just those rows (whole 128-blocks, since T/8 is a multiple of 8). The
 *   partial sums meet in shared memory (a reduce-scatter over lanes, then
 *   over warps) and across the cluster through distributed shared memory:
 *   rank 0 sums the 8 blocks' 128 columns, applies Ĥ_N and svh and writes
 *   y. No workspace, no atomics, nothing left to zero.
 * - Programmatic dependent launch: the kernel lets the next launch start
 *   at once (griddepcontrol.launch_dependents) and waits for the previous
 *   one (griddepcontrol.wait) only after issuing its first trellis loads;
 *   the weights are read-only, x and y are touched after the wait. Launched
 *   without the attribute, the wait returns at once.
 *
 * Launch: grid (N/128, 8), cluster (1, 8, 1) (compiled in), T threads
 * (a multiple of 64, at most 512), dynamic shared memory 4·T·ceil(KT/T)
 * bytes for u (KT = K/16) then 32·T·B for the staging areas. Names:
 * tf_exl3_gemv1_b<B>_cb<CB>. */
#include <cooperative_groups.h>

#include "kernels/exl3_common.cuh"

struct exl3_gemv1_args {
	const uint32_t *trellis; /* the tiles, as u32 words */
	const __half *suh;       /* [K] */
	const __half *svh;       /* [N] */
	const __nv_bfloat16 *x;  /* [K] */
	void *y;                 /* [N], f32 or bf16 */
	int k, n;
	int y_bf16;
	int pad;
};

#define GEMV1_RANKS 8
#define GEMV1_THREADS_MAX 512
#ifndef GEMV1_REGS
#define GEMV1_REGS(B) ((B) <= 4 ? 96 : 128)
#endif

/* View σ of stream word A: bits [32A + σ, 32A + σ + 32) (circular). */
template <int B, int A, int S>
__device__ __forceinline__ uint32_t gv1_view(const uint32_t (&w)[8 * B])
{
	if constexpr (S == 0)
		return w[A];
	else
		return (w[A] << S) | (w[(A + 1) % (8 * B)] >> (32 - S));
}

/* State t of the tile: the 16 stream bits from (t+1)·B − 16 (mod 256·B),
 * first bit most significant (§2), zero-extended. Its start o within word
 * A is read from view o mod 8 at byte offset 0, 1 or 2, or, for o ≥ 24,
 * from view (o mod 8) + 8 at byte offset 2. */
template <int B, int T>
__device__ __forceinline__ uint32_t gv1_state(const uint32_t (&w)[8 * B])
{
	constexpr int NBITS = 256 * B;
	constexpr int S0 = ((T + 1) * B - 16 + NBITS) % NBITS;
	constexpr int A = S0 >> 5, O = S0 & 31;
	constexpr int D8 = O & 7, BASE = O - D8;
	constexpr int SIG = BASE <= 16 ? D8 : D8 + 8;
	constexpr int D = BASE <= 16 ? BASE / 8 : 2;
	constexpr unsigned SEL = 0x4400u | ((3u - D) << 4) | (2u - D);
	return __byte_perm(gv1_view<B, A, SIG>(w), 0u, SEL);
}

/* Weights t, t+1 as a half2. */
template <int B, int CB, int T>
__device__ __forceinline__ __half2 gv1_pair(const uint32_t (&w)[8 * B])
{
	return decode2<CB>(gv1_state<B, T>(w), gv1_state<B, T + 1>(w));
}

/* States 8L..8L+7: pairs j = 0, 2 feed column L>>2 (u rows 2(L&3)+{0,1}
 * and +8), pairs j = 4, 6 column (L>>2)+8. */
template <int B, int CB, int L>
__device__ __forceinline__ void gv1_group(const uint32_t (&w)[8 * B], const __half2 (&u)[8], __half2 &h0,
                                          __half2 &h1)
{
	constexpr int T = 8 * L, P = L & 3;
	h0 = __hfma2(gv1_pair<B, CB, T + 0>(w), u[P], h0);
	h0 = __hfma2(gv1_pair<B, CB, T + 2>(w), u[P + 4], h0);
	h1 = __hfma2(gv1_pair<B, CB, T + 4>(w), u[P], h1);
	h1 = __hfma2(gv1_pair<B, CB, T + 6>(w), u[P + 4], h1);
}

/* Columns C and C+8 of the tile: states 32C..32C+31. */
template <int B, int CB, int C>
__device__ __forceinline__ void gv1_cols(const uint32_t (&w)[8 * B], const __half2 (&u)[8], float (&acc)[16])
{
	__half2 h0 = __float2half2_rn(0.f), h1 = __float2half2_rn(0.f);
	gv1_group<B, CB, 4 * C + 0>(w, u, h0, h1);
	gv1_group<B, CB, 4 * C + 1>(w, u, h0, h1);
	gv1_group<B, CB, 4 * C + 2>(w, u, h0, h1);
	gv1_group<B, CB, 4 * C + 3>(w, u, h0, h1);
	const float2 f0 = __half22float2(h0), f1 = __half22float2(h1);
	acc[C] += f0.x + f0.y;
	acc[C + 8] += f1.x + f1.y;
}

template <int B, int CB>
__device__ __forceinline__ void gv1_tile(const uint32_t (&w)[8 * B], const __half2 (&u)[8], float (&acc)[16])
{
	gv1_cols<B, CB, 0>(w, u, acc);
	gv1_cols<B, CB, 1>(w, u, acc);
	gv1_cols<B, CB, 2>(w, u, acc);
	gv1_cols<B, CB, 3>(w, u, acc);
	gv1_cols<B, CB, 4>(w, u, acc);
	gv1_cols<B, CB, 5>(w, u, acc);
	gv1_cols<B, CB, 6>(w, u, acc);
	gv1_cols<B, CB, 7>(w, u, acc);
}

/* 16-byte slot s of a warp's staging area, XOR-swizzled inside each run of
 * 8 slots so that both the coalesced writes (32 consecutive slots) and the
 * per-thread reads (slots L·2B + i) spread over the banks. */
__device__ __forceinline__ int gv1_slot(int s)
{
	return s ^ ((s >> 3) & 7);
}

/* A warp's tiles of one round, coalesced: the warp's 4 tile rows are 4
 * runs of 8 neighbouring tiles (256·B contiguous bytes each); load j of
 * lane l is chunk g = 32j + l, run g / 16B, byte 16·(g mod 16B) of it,
 * and g is also the staging slot of the thread that owns that chunk
 * (thread 8·run + tile, chunk i at slot thread·2B + i). Runs at or past
 * KT are skipped. */
template <int B>
__device__ __forceinline__ void gv1_fetch(const uint32_t *trellis, int row0, int KT, int NT, int col0,
                                          int lane, uint4 (&stg)[2 * B])
{
#pragma unroll
	for (int j = 0; j < 2 * B; j++) {
		const int g = 32 * j + lane, run = g / (16 * B), q = g - run * 16 * B;
		uint4 v = make_uint4(0u, 0u, 0u, 0u);
		if (row0 + run < KT)
			v = __ldcs(reinterpret_cast<const uint4 *>(trellis + ((size_t)(row0 + run) * NT + col0) * 8 * B) + q);
		stg[j] = v;
	}
}

template <int B, int CB>
__device__ __forceinline__ void exl3_gemv1(const exl3_gemv1_args &a)
{
	extern __shared__ __align__(16) unsigned char gv1_dyn[];
	__half *us = reinterpret_cast<__half *>(gv1_dyn); /* [rounds · T/8][16] */
	/* after u: each warp's staging area, 32 · 2B slots of 16 bytes */
	__shared__ __align__(16) float part[GEMV1_THREADS_MAX / 32][128];
	__shared__ __align__(16) float red[128];

	namespace cg = cooperative_groups;
	cg::cluster_group cluster = cg::this_cluster();
	const int tid = threadIdx.x, T = blockDim.x, lane = tid & 31, warp = tid >> 5, nwarps = T >> 5;
	const int rank = (int)cluster.block_rank();
	const int nb = blockIdx.x;
	const int KT = a.k >> 4, NT = a.n >> 4;
	const int rows_per = T >> 3;
	const int rho = tid >> 3, c8 = tid & 7;
	const int row_base = rank * rows_per;
	constexpr int WORDS = 8 * B;

	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

	/* The first round's loads go out before anything else. */
	const int rounds = row_base < KT ? (KT - row_base + T - 1) / T : 0;
	const int wrow0 = row_base + 4 * warp; /* the warp's first tile row */
	uint4 stg[2 * B];
	gv1_fetch<B>(a.trellis, wrow0, KT, NT, nb * 8, lane, stg);
	uint4 *stage = reinterpret_cast<uint4 *>(gv1_dyn + (size_t)rounds * T * 4) + (size_t)warp * 64 * B;

	/* x (and y) belong to the launches before this one. */
	asm volatile("griddepcontrol.wait;" ::: "memory");

	/* u for this block's rows, one 128-block (8 k-tile rows) a warp at a
	 * time: round m, block j covers rows row_base + m·T + 8j .. +7. */
	const int qper = rows_per >> 3;
	for (int q = warp; q < rounds * qper; q += nwarps) {
		const int m = q / qper, j = q - m * qper;
		const int r0 = row_base + m * T + 8 * j;
		if (r0 >= KT)
			continue;
		const int k = r0 * 16 + 4 * lane;
		float v[4];
		scale_in4(a.x + k, a.suh + k, v);
		had128_warp(v, lane);
		store_u4(us + (size_t)(m * rows_per + 8 * j) * 16 + 4 * lane, v);
	}
	__syncthreads();

	float acc[16];
#pragma unroll
	for (int i = 0; i < 16; i++)
		acc[i] = 0.f;
	int row = row_base + rho;
	for (int m = 0; m < rounds; m++) {
		/* Through the staging area to the owners. */
#pragma unroll
		for (int j = 0; j < 2 * B; j++)
			if (wrow0 + m * T + (32 * j + lane) / (16 * B) < KT)
				stage[gv1_slot(32 * j + lane)] = stg[j];
		__syncwarp();
		uint32_t w[WORDS];
#pragma unroll
		for (int i = 0; i < 2 * B; i++) {
			const uint4 v = stage[gv1_slot(lane * 2 * B + i)];
			w[4 * i + 0] = v.x;
			w[4 * i + 1] = v.y;
			w[4 * i + 2] = v.z;
			w[4 * i + 3] = v.w;
		}
		__syncwarp();
		/* The next round's loads: before this round's decode where the
		 * registers allow it (b ≤ 2), else after it. */
		constexpr bool EARLY = B <= 2;
		if (EARLY)
			gv1_fetch<B>(a.trellis, wrow0 + (m + 1) * T, KT, NT, nb * 8, lane, stg);
		if (row < KT) {
			const uint4 *up = reinterpret_cast<const uint4 *>(us + (size_t)(m * rows_per + rho) * 16);
			const uint4 ua = up[0], ub = up[1];
			__half2 u[8];
			u[0] = *reinterpret_cast<const __half2 *>(&ua.x);
			u[1] = *reinterpret_cast<const __half2 *>(&ua.y);
			u[2] = *reinterpret_cast<const __half2 *>(&ua.z);
			u[3] = *reinterpret_cast<const __half2 *>(&ua.w);
			u[4] = *reinterpret_cast<const __half2 *>(&ub.x);
			u[5] = *reinterpret_cast<const __half2 *>(&ub.y);
			u[6] = *reinterpret_cast<const __half2 *>(&ub.z);
			u[7] = *reinterpret_cast<const __half2 *>(&ub.w);
			gv1_tile<B, CB>(w, u, acc);
		}
		row += T;
		if (!EARLY)
			gv1_fetch<B>(a.trellis, wrow0 + (m + 1) * T, KT, NT, nb * 8, lane, stg);
	}

	/* Lanes l, l^8, l^16, l^24 share a column group: a reduce-scatter
	 * leaves lane l with 4 of its 16 columns summed over the four. */
	const bool hi16 = lane & 16, hi8 = lane & 8;
	float r8[8], r4[4];
#pragma unroll
	for (int i = 0; i < 8; i++) {
		const float mine = hi16 ? acc[8 + i] : acc[i], other = hi16 ? acc[i] : acc[8 + i];
		r8[i] = mine + __shfl_xor_sync(0xffffffffu, other, 16);
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const float mine = hi8 ? r8[4 + i] : r8[i], other = hi8 ? r8[i] : r8[4 + i];
		r4[i] = mine + __shfl_xor_sync(0xffffffffu, other, 8);
	}
	const int col = c8 * 16 + (hi16 ? 8 : 0) + (hi8 ? 4 : 0);
	*reinterpret_cast<float4 *>(&part[warp][col]) = make_float4(r4[0], r4[1], r4[2], r4[3]);
	__syncthreads();
	for (int c = tid; c < 128; c += T) {
		float s = 0.f;
		for (int i = 0; i < nwarps; i++)
			s += part[i][c];
		red[c] = s;
	}
	cluster.sync();

	/* Rank 0: the cluster's sum, Ĥ_N, svh, y. */
	if (rank == 0 && warp == 0) {
		float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
		for (int r = 0; r < GEMV1_RANKS; r++) {
			const float4 p = *cluster.map_shared_rank(reinterpret_cast<float4 *>(red) + lane, r);
			v[0] += p.x;
			v[1] += p.y;
			v[2] += p.z;
			v[3] += p.w;
		}
		had128_warp(v, lane);
		const int n0 = nb * 128 + 4 * lane;
		store_y4(a.y, a.y_bf16, n0, v, a.svh + n0);
	}
	/* The other blocks' shared memory must outlive rank 0's reads. */
	cluster.sync();
}

#define EXL3_GEMV1(B, CB) \
	extern "C" __global__ void __cluster_dims__(1, GEMV1_RANKS, 1) \
	__maxnreg__(GEMV1_REGS(B)) \
	tf_exl3_gemv1_b##B##_cb##CB(const exl3_gemv1_args a) \
	{ \
		exl3_gemv1<B, CB>(a); \
	}
#define EXL3_GEMV1_CB(B) EXL3_GEMV1(B, 0) EXL3_GEMV1(B, 1) EXL3_GEMV1(B, 2)

#ifndef GEMV1_NO_INSTANCES
EXL3_GEMV1_CB(1)
EXL3_GEMV1_CB(2)
EXL3_GEMV1_CB(3)
EXL3_GEMV1_CB(4)
EXL3_GEMV1_CB(5)
EXL3_GEMV1_CB(6)
EXL3_GEMV1_CB(7)
EXL3_GEMV1_CB(8)
#endif
