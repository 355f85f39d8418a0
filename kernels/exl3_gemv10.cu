/* exl3_gemv10.cu: the EXL3 GEMV for the MUL1 codebook at 1 to 4 rows on
 * the int8 tensor cores (v10 in kernels/NOTES.md). Kernels
 * tf_exl3_gemv10_b<B>_cb2 (one row), _r2 and _r4, B 1..8, and the experts
 * launch's tf_exl3_experts10_cb2_r1 and _r4; the argument block, work
 * split and end are those of exl3_gemv.cu (one block: 8 warps × 16
 * columns, a slice of K; split-K sums in the workspace; the last block
 * applies Ĥ_N and svh).
 *
 * MUL1 decodes state s as w = fp16(k·(1024 + t) + c), t = the sum of the
 * four unsigned bytes of x = s·0x83DCD12D (exl3-format.md §4). So for a
 * column
 *     Σ_r u_r·w_r = k·Σ_r u_r·t_r + (1024·k + c)·Σ_r u_r
 * up to the fp16 rounding of each w (under 2^-11 of it, unbiased), and
 * Σ_r u_r·t_r = Σ_r Σ_bytes u_r·byte(x_r) is an integer matrix product
 * whose A operand is the hash words x themselves, four unsigned bytes a
 * weight. u is quantised per 128-block to integers q = rint(u·2^e) with
 * |q| < 2^14 (e from the block's largest |u|: 14 bits against fp16's 11
 * for the largest elements), split as q = 128·hi + lo (hi, lo signed
 * bytes); hi and lo are the two live columns of B, each byte repeated four
 * times to meet the four bytes of x. One mma.m16n8k32.u8.s8 sums 8 tile
 * rows of 16 columns for both columns of B, exactly in int32; the chunk's
 * sums go to fp32 once. What is left a weight: its 16-bit state (10 ALU
 * instructions for 8 states at 4 bits from two words, 12 at 2 bits from
 * one) and one IMAD. No dp4a, no pairing, no fp16 affine, no fp16 dot.
 *
 * Fragments (m16n8k32, A row-major: m = tile column, k = 4 bytes of one
 * tile row; lane (g, q) = (lane / 4, lane % 4) holds A[g][4q..4q+3],
 * A[g+8][4q..], A[g][4q+16..], A[g+8][4q+16..]). Lane l decodes states
 * 8l..8l+7 of a tile, which sit at (column, row) (g, 2q), (g, 2q+1),
 * (g, 2q+8), (g, 2q+9), (g+8, 2q), (g+8, 2q+1), (g+8, 2q+8), (g+8, 2q+9)
 * (exl3-format.md §3; the same order the MMA body of exl3_gemv.cu uses).
 * So the first MMA of a tile takes {x0, x4, x1, x5} against u rows 2q and
 * 2q+1, the second {x2, x6, x3, x7} against rows 2q+8 and 2q+9; B lane
 * (n, q) for n = 0 (hi) and 1 (lo) holds those rows' bytes, read as one
 * 16-byte word from shared memory; the lanes past the live ones pass
 * zeros. D lane (g, 0) ends with column g's hi and lo sums and column
 * g+8's. With R rows, row r takes B columns 2r and 2r + 1 (B lanes 8r + q
 * and 8r + 4 + q), and lane (g, q) ends with row q's sums: up to four
 * rows ride the same MMAs.
 *
 * u (the quantised B words, 1 KiB a chunk and row, and per chunk and row
 * 2^-e and Σq) is built for a group of 8 chunks (4 at four rows), one
 * chunk and row a warp at a time, behind one block barrier. At 2 and 4
 * bits a lane loads one word a tile and takes its neighbour's by a
 * shuffle, and two (2 bits) or three (4 bits) chunks are in flight while
 * one is decoded; the block's end counts its slice in with one
 * acquire-release atomic (gemv_tail FENCE 2). */
#include "kernels/exl3_gemv.cuh"

#define MUL1_MUL 0x83DCD12Du
#define Q_MAX 16383

/* Chunks a group of u is built for: 8 at one and two rows, 4 at four
 * (the B words of a chunk grow with the rows: 16 bytes a tile, a row and
 * a half, hi and lo). */
template <int R>
struct group10 {
	static constexpr int chunks = R == 4 ? 4 : 8;
};

template <int R>
struct gemv10_smem {
	/* [group parity][chunk of the group][tile][B lane 0..8R−1, then a
	 * zero word that the lanes past them read] */
	uint4 bq[2][group10<R>::chunks][8][8 * R + 1];
	float2 cs[2][group10<R>::chunks][R]; /* per chunk and row: 2^-e, Σq */
	float part[R][128];
	unsigned last;
};

/* The B words of chunk kb and row r by one warp: u = Ĥ(x[r] ⊙ suh) for
 * the chunk's 128 rows of K, quantised and split as above, into B lanes
 * 8r + q (hi) and 8r + 4 + q (lo) of each tile; zeros for a row past
 * a.rows. */
template <int R>
__device__ __forceinline__ void build_b(const gemv_job &a, int kb, int r, int lane, uint4 (*bq)[8 * R + 1],
                                        float2 *cs)
{
	float v[4];
	u_block(a, kb, r, lane, v);
	float m = 0.f;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		v[i] *= HAD_SCALE;
		m = fmaxf(m, fabsf(v[i]));
	}
	/* 2^e with the largest |u| in [2^13, 2^14) after scaling. */
	const int ex = (int)(__reduce_max_sync(0xffffffffu, __float_as_uint(m)) >> 23) - 127;
	const int e = min(13 - ex, 126);
	const float sc = __uint_as_float((uint32_t)(e + 127) << 23);
	uint32_t *dst = reinterpret_cast<uint32_t *>(bq[lane >> 2]) + 32 * r;
	int qs = 0;
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int q = max(-Q_MAX, min(Q_MAX, __float2int_rn(v[i] * sc)));
		qs += q;
		const int t = 4 * (lane & 3) + i;             /* row in the tile */
		const int slot = ((t & 7) >> 1) * 4 + (t >> 3) * 2 + (t & 1);
		dst[slot] = ((uint32_t)(q >> 7) & 0xffu) * 0x01010101u;   /* hi: B lane 8r + q */
		dst[16 + slot] = ((uint32_t)q & 0x7fu) * 0x01010101u;     /* lo: B lane 8r + 4 + q */
	}
	const int sum = __reduce_add_sync(0xffffffffu, qs);
	if (lane == 0)
		*cs = make_float2(__uint_as_float((uint32_t)(127 - e) << 23), (float)sum);
}

/* Trellis words a lane loads a tile: one at 2 and 4 bits (the neighbour's
 * word comes by a shuffle), three else. */
template <int B>
struct words10 {
	static constexpr int n = (B == 2 || B == 4) ? 1 : 3;
};

/* The lane's 8 states (8l..8l+7, in order) from its words of one tile;
 * src and sh: the lane's shuffle source and shift (word_offsets10). */
template <int B>
__device__ __forceinline__ void states10(const uint32_t *t, int lane, int src, int sh, uint32_t s[8])
{
	if constexpr (B == 4) {
		/* Lane l holds word l; with word l−1 from lane l−1 the 44 bits
		 * start 20 bits into (hi:lo) = (word l−1 : word l): state j is
		 * (hi:lo) >> (28 − 4j), 16 bits. */
		const uint32_t lo = t[0], hi = __shfl_sync(0xffffffffu, lo, src);
		const uint32_t m = hi & 0xfffu;
		const uint32_t v = __funnelshift_r(lo, hi, 4);
		s[0] = __funnelshift_r(lo, m, 28);
		s[1] = __byte_perm(lo, m, 0x7743);
		s[2] = v >> 16;
		s[3] = lo >> 16;
		s[4] = __byte_perm(v, 0u, 0x4421);
		s[5] = __byte_perm(lo, 0u, 0x4421);
		s[6] = v & 0xffffu;
		s[7] = lo & 0xffffu;
	} else if constexpr (B == 2) {
		/* Lane l holds word l/2. The 30 bits fit one word y (first bit at
		 * bit 29): odd lanes start 2 bits into their own word, even lanes
		 * 18 bits into word l/2 − 1 (lane l − 2's). State j is
		 * y >> (14 − 2j), 16 bits. */
		const uint32_t y = __funnelshift_l(t[0], __shfl_sync(0xffffffffu, t[0], src), sh);
		const uint32_t y2 = y >> 2, y4 = y >> 4, y6 = y >> 6;
		s[0] = __byte_perm(y6, 0u, 0x4421);
		s[1] = __byte_perm(y4, 0u, 0x4421);
		s[2] = __byte_perm(y2, 0u, 0x4421);
		s[3] = __byte_perm(y, 0u, 0x4421);
		s[4] = y6 & 0xffffu;
		s[5] = y4 & 0xffffu;
		s[6] = y2 & 0xffffu;
		s[7] = y & 0xffffu;
	} else {
		const int o = lane_window_of<B>(lane).o;
		const uint32_t w2 = __funnelshift_l(t[1], t[0], o);
		const uint32_t w1 = __funnelshift_l(t[2], t[1], o);
		const uint32_t w0 = t[2] << o;
		s[0] = state_at<80 - 0 * B>(w0, w1, w2);
		s[1] = state_at<80 - 1 * B>(w0, w1, w2);
		s[2] = state_at<80 - 2 * B>(w0, w1, w2);
		s[3] = state_at<80 - 3 * B>(w0, w1, w2);
		s[4] = state_at<80 - 4 * B>(w0, w1, w2);
		s[5] = state_at<80 - 5 * B>(w0, w1, w2);
		s[6] = state_at<80 - 6 * B>(w0, w1, w2);
		s[7] = state_at<80 - 7 * B>(w0, w1, w2);
	}
}

/* The word offsets (in a tile) of the lane's words, and for 2 and 4 bits
 * the lane whose word it shuffles in and the shift that joins them. */
template <int B>
__device__ __forceinline__ void word_offsets10(int lane, int off[3], int &src, int &sh)
{
	src = sh = 0;
	if constexpr (B == 4) {
		off[0] = lane;
		src = (lane + 31) & 31;
	} else if constexpr (B == 2) {
		off[0] = lane >> 1;
		src = (lane & 1) ? lane : (lane + 30) & 31;
		sh = (lane & 1) ? 0 : 16;
	} else {
		const lane_window lw = lane_window_of<B>(lane);
		off[0] = lw.wi;
		off[1] = lw.wj;
		off[2] = lw.wk;
	}
}

__device__ __forceinline__ void mma_u8s8(int c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1)
{
	asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 "
	    "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
	    : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <int B>
struct gemv10_state {
	const uint32_t *base; /* the lane's first tile of the warp's tile column */
	size_t kstride;       /* u32 words from one tile row to the next */
	int off[3], src, sh;
	int kb0, kb1;
	float acc[2];         /* columns g and g + 8 of the warp's tile */
};

template <int B>
__device__ __forceinline__ void load10(const gemv10_state<B> &st, int kb, uint32_t w[8][words10<B>::n])
{
	const uint32_t *p = st.base + (size_t)kb * 8 * st.kstride;
#pragma unroll
	for (int i = 0; i < 8; i++)
#pragma unroll
		for (int j = 0; j < words10<B>::n; j++)
			w[i][j] = __ldcs(p + i * st.kstride + st.off[j]);
}

/* One chunk: u of its group if it opens one (warp w builds chunk, row
 * pairs w, w + 8, ...), then 8 tiles, 16 MMAs; lane (g, q) ends the chunk
 * with row q's sums of columns g and g + 8 (rows past R: zeros). */
template <int B, int R>
__device__ __forceinline__ void chunk10(const gemv_job &a, gemv10_smem<R> &sm, gemv10_state<B> &st, int kb,
                                        const uint32_t w[8][words10<B>::n])
{
	constexpr int G = group10<R>::chunks;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int c = kb - st.kb0, par = (c / G) & 1, ci = c % G;
	if (c == 0)
		asm volatile("griddepcontrol.wait;" ::: "memory");
	if (ci == 0) {
#pragma unroll
		for (int task = warp; task < G * R; task += 8) {
			const int cc = task / R, r = task % R;
			if (kb + cc < st.kb1)
				build_b<R>(a, kb + cc, r, lane, sm.bq[par][cc], &sm.cs[par][cc][r]);
		}
		__syncthreads();
	}
	int d0[4] = {0, 0, 0, 0}, d1[4] = {0, 0, 0, 0};
#pragma unroll
	for (int i = 0; i < 8; i++) {
		uint32_t s[8];
		states10<B>(w[i], lane, st.src, st.sh, s);
		uint32_t x[8];
#pragma unroll
		for (int j = 0; j < 8; j++)
			x[j] = s[j] * MUL1_MUL;
		const uint4 b = sm.bq[par][ci][i][min(lane, 8 * R)];
		mma_u8s8(d0, x[0], x[4], x[1], x[5], b.x, b.y);
		mma_u8s8(d1, x[2], x[6], x[3], x[7], b.z, b.w);
	}
	/* k and 1024·k + c of MUL1 (fp16 0x1EEE and 0xC931). */
	const float k1 = __half2float(__ushort_as_half((unsigned short)0x1EEE));
	const float k2 = 1024.f * k1 + __half2float(__ushort_as_half((unsigned short)0xC931));
	const float2 cs = sm.cs[par][ci][min(lane & 3, R - 1)];
	const float base = k2 * cs.y;
	const float f0 = fmaf((float)(d0[0] + d1[0]), 128.f, (float)(d0[1] + d1[1]));
	const float f1 = fmaf((float)(d0[2] + d1[2]), 128.f, (float)(d0[3] + d1[3]));
	st.acc[0] = fmaf(cs.x, fmaf(k1, f0, base), st.acc[0]);
	st.acc[1] = fmaf(cs.x, fmaf(k1, f1, base), st.acc[1]);
}

template <int B, int R>
__device__ __forceinline__ void exl3_gemv10(const gemv_job &a, gemv10_smem<R> &sm)
{
	constexpr int NW = words10<B>::n, G = group10<R>::chunks;
	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int kb_total = a.k >> 7;
	gemv10_state<B> st;
	st.kstride = (size_t)(a.n >> 4) * 8 * B;
	st.base = a.trellis + (size_t)(blockIdx.x * 8 + warp) * 8 * B;
	word_offsets10<B>(lane, st.off, st.src, st.sh);
	st.kb0 = blockIdx.y * a.chunks_per_slice;
	st.kb1 = min(kb_total, st.kb0 + a.chunks_per_slice);
	st.acc[0] = st.acc[1] = 0.f;
	/* The zero words; the first group's barrier orders this. */
	for (int t = threadIdx.x; t < 2 * G * 8; t += GEMV_THREADS)
		sm.bq[t / (G * 8)][(t / 8) % G][t % 8][8 * R] = make_uint4(0u, 0u, 0u, 0u);

	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	/* A ring of D register sets: D − 1 chunks in flight while one is
	 * decoded (4 at 4 bits and 3 at 2 bits, one word a tile; 2 at the
	 * widths with three words a tile, whose registers run out first). */
	constexpr int D = B == 4 ? 4 : NW == 1 ? 3 : 2;
	const int kb0 = st.kb0, kb1 = st.kb1;
	uint32_t w[D][8][NW];
#pragma unroll
	for (int d = 0; d < D - 1; d++)
		if (kb0 + d < kb1)
			load10<B>(st, kb0 + d, w[d]);
	for (int kb = kb0; kb < kb1; kb += D) {
#pragma unroll
		for (int d = 0; d < D; d++) {
			if (kb + d >= kb1)
				break;
			if (kb + d + D - 1 < kb1)
				load10<B>(st, kb + d + D - 1, w[(d + D - 1) % D]);
			chunk10<B, R>(a, sm, st, kb + d, w[d]);
		}
	}
	asm volatile("griddepcontrol.wait;" ::: "memory"); /* a block with no chunk */
	const int q = lane & 3;
	if (q < R) {
		sm.part[q][warp * 16 + (lane >> 2)] = st.acc[0];
		sm.part[q][warp * 16 + (lane >> 2) + 8] = st.acc[1];
	}
	gemv_tail<R, 2>(a, sm.part, sm.last);
}

/* Four blocks an SM where 64 registers hold the body without spills.
 * tf_exl3_gemv10_b<B>_cb2 (one row), _r2 and _r4 (rows ≤ 2, ≤ 4). */
#define EXL3_GEMV10R(B, R, NAME) \
	extern "C" __global__ void __launch_bounds__(GEMV_THREADS, (B == 1 || B == 2 || B == 4) ? 4 : 3) \
	NAME(const exl3_gemv_args a) \
	{ \
		__shared__ __align__(16) gemv10_smem<R> sm; \
		const gemv_job j = {a.trellis, a.suh, a.svh, a.x, nullptr, a.y, a.acc, a.count, \
		                    a.k, a.n, a.rows, a.chunks_per_slice, a.y_bf16}; \
		exl3_gemv10<B, R>(j, sm); \
	}
#define EXL3_GEMV10(B) \
	EXL3_GEMV10R(B, 1, tf_exl3_gemv10_b##B##_cb2) \
	EXL3_GEMV10R(B, 2, tf_exl3_gemv10_b##B##_cb2_r2) \
	EXL3_GEMV10R(B, 4, tf_exl3_gemv10_b##B##_cb2_r4)
EXL3_GEMV10(1)
EXL3_GEMV10(2)
EXL3_GEMV10(3)
EXL3_GEMV10(4)
EXL3_GEMV10(5)
EXL3_GEMV10(6)
EXL3_GEMV10(7)
EXL3_GEMV10(8)

/* Many experts of one shape in one launch (exl3_gemv.cu's experts launch),
 * up to R routed rows a task, MUL1: the v10 body for each expert's width. */
template <int R>
__device__ __forceinline__ void exl3_experts10(const exl3_experts_args &a)
{
	__shared__ __align__(16) gemv10_smem<R> sm;
	gemv_job j;
	switch (experts_job<R>(a, j)) {
	case 1: exl3_gemv10<1, R>(j, sm); break;
	case 2: exl3_gemv10<2, R>(j, sm); break;
	case 3: exl3_gemv10<3, R>(j, sm); break;
	case 4: exl3_gemv10<4, R>(j, sm); break;
	case 5: exl3_gemv10<5, R>(j, sm); break;
	case 6: exl3_gemv10<6, R>(j, sm); break;
	case 7: exl3_gemv10<7, R>(j, sm); break;
	default: exl3_gemv10<8, R>(j, sm); break;
	}
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 3) tf_exl3_experts10_cb2_r1(const exl3_experts_args a)
{
	exl3_experts10<1>(a);
}

extern "C" __global__ void __launch_bounds__(GEMV_THREADS, 3) tf_exl3_experts10_cb2_r4(const exl3_experts_args a)
{
	exl3_experts10<4>(a);
}
