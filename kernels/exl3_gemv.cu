/* exl3_gemv.cu: the EXL3 matmul for a few rows (1..16), one fused kernel.
 *
 * Math (shared/reference/exl3-format.md §5): for each row r of x,
 *     u = (x[r] ⊙ suh) · Ĥ_K            per 128-block of k  (rounded to fp16)
 *     a = u · Ŵ                         Ŵ decoded from the trellis on the fly
 *     y[r] = (a · Ĥ_N) ⊙ svh            per 128-block of n
 * Ĥ = the 128-point Sylvester Hadamard / √128; Ŵ[16i+r][16j+c] is the
 * codebook value of state t of tile (i, j), where (r, c) = pos(t) (§3).
 * The CPU twin is tf_exl3_matmul (libcore/model/exl3_gemm.c).
 *
 * Layout: trellis u16 [K/16][N/16][16·B] (tile (i, j) at word (i·N/16+j)·16B;
 * read as little-endian u32 words it is the bit stream MSB first: §2);
 * suh f16 [K], svh f16 [N], x bf16 [rows][K], y f32 or bf16 [rows][N].
 * Accumulation: x⊙suh and both Hadamards in fp32; u rounded to fp16; the
 * decoded weight is fp16 (bit-exact with the CPU codec). Products u·w:
 * for 2..16 rows on the tensor cores, one mma.m16n8k16 (f16 in, f32
 * accumulate) per tile and 8 rows: the trellis order of a tile is the
 * A-fragment order of its transpose (§3), so the decoded pairs go straight
 * into the A registers; for 1 row in fp16 pairs (HFMA2) over two tiles
 * (the lean v7 body: over all 8 tiles of a chunk), then fp32, which
 * measured 3–8% faster than the MMA there (NOTES.md v4, v7).
 *
 * Work split: a block of 8 warps owns 128 columns (warp w: tile column w,
 * 16 columns) and a slice of K (whole 128-blocks, "chunks"). Per chunk it
 * loads the 8 tiles of each warp first (3 u32 words per lane per tile:
 * lane l decodes states 8l..8l+7, whose 16-bit windows lie in 7B+16 bits),
 * then builds u for the chunk in shared memory (one warp per row, a
 * butterfly over lanes), then decodes and multiplies. Slices of K are summed
 * with fp32 atomics in a zeroed workspace acc [16][N]; the last block to
 * finish a column block (a counter per column block) applies Ĥ_N and svh,
 * writes y, and zeroes its part of acc and the counter again, so one launch
 * does it all and the workspace stays zeroed between launches.
 *
 * Launch limits: K, N multiples of 128; 256 threads; grid (N/128, slices);
 * one workspace per stream (launches sharing one must be ordered). Kernel
 * names: tf_exl3_gemv_b<B>_cb<CB>_r<R>, B 1..8, CB 0 (3INST), 1 (MCG),
 * 2 (MUL1), R in 1, 2, 4, 8, 16 (rows ≤ R; extra rows are zero and not
 * written).
 *
 * Experts (tf_exl3_experts_cb<CB>_r<R>): the same body for many layers of
 * one shape in one launch, grid (N/128, slices, tasks). Task t is one
 * expert applied to up to R routed rows: x rows xrow[first..first+count),
 * outputs y rows first..first+count. Each expert has its own bit width
 * (the ragged layout of tf_exl3_experts_layout: trellis at byte offset
 * off[e] of one buffer), suh at [e][K] and svh at [e][N]; the kernel
 * switches on the width once per block. Split-K sums use the workspace
 * rows of the task (acc + t·R·N, count + t·N/128). R is 1 (decode) or 4;
 * prefill groups of many rows per expert take the GEMM path. */
#include "kernels/exl3_gemv.cuh"


/* Shared memory of the body for R rows. */
template <int R>
struct gemv_smem {
	__half us[2][R][128];
	float part[R][128];
	unsigned last;
};

/* u = Ĥ(x[xr] ⊙ suh) for the 128-block kb, rounded to fp16, by one warp:
 * lane l writes dst[4l..4l+3]; zero when the row is past a.rows. */
__device__ __forceinline__ void build_u(const gemv_job &a, int kb, int r, int lane, __half *dst)
{
	float v[4];
	u_block(a, kb, r, lane, v);
	store_u4(dst + 4 * lane, v);
}

/* LEAN (one row only, NOTES.md v7): the fp16 pair sums run over a whole
 * chunk (8 tiles, 16 products a half) before the fp32 flush, and one
 * thread fences before the split-K counter, after the block's barrier. */
template <int B, int CB, int R, bool MMA = (R > 1), bool LEAN = false>
__device__ __forceinline__ void exl3_gemv(const gemv_job &a, gemv_smem<R> &sm)
{
	static_assert(!LEAN || (R == 1 && !MMA), "the lean body is for one row");
	constexpr int FLUSH = LEAN ? 8 : 2; /* tiles per fp32 flush */
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int q = lane & 3, c0 = lane >> 2;
	const int nb = blockIdx.x;
	const int ntiles = a.n >> 4;
	const int tcol = nb * 8 + warp;
	const int kb_total = a.k >> 7;
	const int kb0 = blockIdx.y * a.chunks_per_slice;
	const int kb1 = min(kb_total, kb0 + a.chunks_per_slice);

	const int words = 8 * B;
	const lane_window lw = lane_window_of<B>(lane);

	float acc[R][2];
#pragma unroll
	for (int r = 0; r < R; r++)
		acc[r][0] = acc[r][1] = 0.f;
	constexpr int NB8 = (R + 7) / 8;
	float cm[NB8][4];
#pragma unroll
	for (int i = 0; i < NB8; i++)
		cm[i][0] = cm[i][1] = cm[i][2] = cm[i][3] = 0.f;

	/* A programmatic dependent launch: the next launch may start now; this
	 * one reads x and the workspace only after the previous one is done. */
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	for (int kb = kb0; kb < kb1; kb++) {
		/* Issue the loads of this chunk's 8 tiles first. */
		uint32_t t0[8], t1[8], t2[8];
#pragma unroll
		for (int i = 0; i < 8; i++) {
			const uint32_t *tile = a.trellis + ((size_t)(kb * 8 + i) * ntiles + tcol) * words;
			t0[i] = __ldcs(tile + lw.wi);
			t1[i] = __ldcs(tile + lw.wj);
			t2[i] = __ldcs(tile + lw.wk);
		}
		if (kb == kb0)
			asm volatile("griddepcontrol.wait;" ::: "memory");
		const int buf = kb & 1;
		/* u for this chunk: warp w builds rows w and w + 8. */
#pragma unroll
		for (int rr = 0; rr < (R + 7) / 8; rr++) {
			const int r = warp + 8 * rr;
			if (r < R)
				build_u(a, kb, r, lane, sm.us[buf][r]);
		}
		__syncthreads();
		const __half *ub = sm.us[buf][0];

		if constexpr (MMA) {
			/* One m16n8k16 per tile and 8 rows: A = the tile transposed
			 * (m = column, k = row of the tile), whose fragment order is
			 * the trellis order with bits 1 and 2 of j swapped (§3); B =
			 * u (k × rows), fp32 accumulation. */
#pragma unroll
			for (int i = 0; i < 8; i++) {
				__half2 w[4];
				decode8<B, CB>(t0[i], t1[i], t2[i], lw.o, w);
				const uint32_t a0 = h2u(w[0]), a1 = h2u(w[2]), a2 = h2u(w[1]), a3 = h2u(w[3]);
				const int kk = i * 16 + 2 * q;
#pragma unroll
				for (int nb8 = 0; nb8 < NB8; nb8++) {
					const int r = nb8 * 8 + c0;
					uint32_t b0 = 0, b1 = 0;
					if (R >= 8 || r < R) {
						b0 = *reinterpret_cast<const uint32_t *>(&sm.us[buf][r][kk]);
						b1 = *reinterpret_cast<const uint32_t *>(&sm.us[buf][r][kk + 8]);
					}
					asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
					             "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
					             : "+f"(cm[nb8][0]), "+f"(cm[nb8][1]), "+f"(cm[nb8][2]), "+f"(cm[nb8][3])
					             : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
				}
			}
		} else {
#pragma unroll
			for (int i = 0; i < 8; i += FLUSH) {
				__half2 h[R][2];
#pragma unroll
				for (int r = 0; r < R; r++)
					h[r][0] = h[r][1] = __float2half2_rn(0.f);
#pragma unroll
				for (int ii = 0; ii < FLUSH; ii++) {
					__half2 w[4];
					decode8<B, CB>(t0[i + ii], t1[i + ii], t2[i + ii], lw.o, w);
					const int kk = (i + ii) * 16 + 2 * q;
#pragma unroll
					for (int r = 0; r < R; r++) {
						const __half2 u0 = *reinterpret_cast<const __half2 *>(ub + r * 128 + kk);
						const __half2 u1 = *reinterpret_cast<const __half2 *>(ub + r * 128 + kk + 8);
						h[r][0] = __hfma2(w[0], u0, h[r][0]);
						h[r][0] = __hfma2(w[1], u1, h[r][0]);
						h[r][1] = __hfma2(w[2], u0, h[r][1]);
						h[r][1] = __hfma2(w[3], u1, h[r][1]);
					}
				}
#pragma unroll
				for (int r = 0; r < R; r++) {
					const float2 f0 = __half22float2(h[r][0]), f1 = __half22float2(h[r][1]);
					acc[r][0] += f0.x + f0.y;
					acc[r][1] += f1.x + f1.y;
				}
			}
		}
	}

	asm volatile("griddepcontrol.wait;" ::: "memory"); /* a block with no chunk */
	if constexpr (MMA) {
		/* c0, c1: column c0 of the tile, rows 2q, 2q+1 of the block of 8;
		 * c2, c3: column c0 + 8. */
#pragma unroll
		for (int nb8 = 0; nb8 < NB8; nb8++) {
			const int r = nb8 * 8 + 2 * q;
			if (r < R) {
				sm.part[r][warp * 16 + c0] = cm[nb8][0];
				sm.part[r][warp * 16 + c0 + 8] = cm[nb8][2];
			}
			if (r + 1 < R) {
				sm.part[r + 1][warp * 16 + c0] = cm[nb8][1];
				sm.part[r + 1][warp * 16 + c0 + 8] = cm[nb8][3];
			}
		}
	} else {
		/* Sum the four lanes of each column pair; lane q == 0 holds columns
		 * c0 and c0 + 8 of this warp's tile. */
#pragma unroll
		for (int r = 0; r < R; r++) {
#pragma unroll
			for (int c = 0; c < 2; c++) {
				float v = acc[r][c];
				v += __shfl_xor_sync(0xffffffffu, v, 1);
				v += __shfl_xor_sync(0xffffffffu, v, 2);
				acc[r][c] = v;
			}
			if (q == 0) {
				sm.part[r][warp * 16 + c0] = acc[r][0];
				sm.part[r][warp * 16 + c0 + 8] = acc[r][1];
			}
		}
	}
	gemv_tail<R, LEAN ? 1 : 0>(a, sm.part, sm.last);
}

#define EXL3_GEMV(B, CB, R) \
	extern "C" __global__ void __launch_bounds__(GEMV_THREADS) \
	tf_exl3_gemv_b##B##_cb##CB##_r##R(const exl3_gemv_args a) \
	{ \
		__shared__ __align__(16) gemv_smem<R> sm; \
		const gemv_job j = {a.trellis, a.suh, a.svh, a.x, nullptr, a.y, a.acc, a.count, \
		                    a.k, a.n, a.rows, a.chunks_per_slice, a.y_bf16}; \
		exl3_gemv<B, CB, R>(j, sm); \
	}
#define EXL3_GEMV_R(B, CB) \
	EXL3_GEMV(B, CB, 1) EXL3_GEMV(B, CB, 2) EXL3_GEMV(B, CB, 4) EXL3_GEMV(B, CB, 8) \
	EXL3_GEMV(B, CB, 16)
#define EXL3_GEMV_CB(B) EXL3_GEMV_R(B, 0) EXL3_GEMV_R(B, 1) EXL3_GEMV_R(B, 2)

EXL3_GEMV_CB(1)
EXL3_GEMV_CB(2)
EXL3_GEMV_CB(3)
EXL3_GEMV_CB(4)
EXL3_GEMV_CB(5)
EXL3_GEMV_CB(6)
EXL3_GEMV_CB(7)
EXL3_GEMV_CB(8)

/* v7: the lean one-row body (tf_exl3_gemv7_b<B>_cb<CB>), the default for one
 * row ($TF_CUDA_EXL3_GEMV7=0 takes tf_exl3_gemv_b<B>_cb<CB>_r1 instead). */
#define EXL3_GEMV7(B, CB) \
	extern "C" __global__ void __launch_bounds__(GEMV_THREADS) \
	tf_exl3_gemv7_b##B##_cb##CB(const exl3_gemv_args a) \
	{ \
		__shared__ __align__(16) gemv_smem<1> sm; \
		const gemv_job j = {a.trellis, a.suh, a.svh, a.x, nullptr, a.y, a.acc, a.count, \
		                    a.k, a.n, a.rows, a.chunks_per_slice, a.y_bf16}; \
		exl3_gemv<B, CB, 1, false, true>(j, sm); \
	}
#define EXL3_GEMV7_CB(B) EXL3_GEMV7(B, 0) EXL3_GEMV7(B, 1) EXL3_GEMV7(B, 2)
EXL3_GEMV7_CB(1)
EXL3_GEMV7_CB(2)
EXL3_GEMV7_CB(3)
EXL3_GEMV7_CB(4)
EXL3_GEMV7_CB(5)
EXL3_GEMV7_CB(6)
EXL3_GEMV7_CB(7)
EXL3_GEMV7_CB(8)

/* Many experts, one launch: the block's task picks the expert, whose bit
 * width picks the body. */
template <int CB, int R>
__device__ __forceinline__ void exl3_experts(const exl3_experts_args &a)
{
	__shared__ __align__(16) gemv_smem<R> sm;
	gemv_job j;
	switch (experts_job<R>(a, j)) {
	case 1: exl3_gemv<1, CB, R>(j, sm); break;
	case 2: exl3_gemv<2, CB, R>(j, sm); break;
	case 3: exl3_gemv<3, CB, R>(j, sm); break;
	case 4: exl3_gemv<4, CB, R>(j, sm); break;
	case 5: exl3_gemv<5, CB, R>(j, sm); break;
	case 6: exl3_gemv<6, CB, R>(j, sm); break;
	case 7: exl3_gemv<7, CB, R>(j, sm); break;
	default: exl3_gemv<8, CB, R>(j, sm); break;
	}
}

#define EXL3_EXPERTS(CB, R) \
	extern "C" __global__ void __launch_bounds__(GEMV_THREADS) \
	tf_exl3_experts_cb##CB##_r##R(const exl3_experts_args a) \
	{ \
		exl3_experts<CB, R>(a); \
	}
#define EXL3_EXPERTS_R(CB) EXL3_EXPERTS(CB, 1) EXL3_EXPERTS(CB, 4)
EXL3_EXPERTS_R(0)
EXL3_EXPERTS_R(1)
EXL3_EXPERTS_R(2)
