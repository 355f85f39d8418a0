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
 * decoded weight is fp16 (bit-exact with the CPU codec); products u·w in
 * fp16 pairs (HFMA2) over two tiles (4 products per half), then fp32.
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
 * written). */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

struct exl3_gemv_args {
	const uint32_t *trellis; /* the tiles, as u32 words */
	const __half *suh;       /* [K] */
	const __half *svh;       /* [N] */
	const __nv_bfloat16 *x;  /* [rows][K] */
	void *y;                 /* [rows][N], f32 or bf16 */
	float *acc;              /* [16][N] zeroed workspace */
	unsigned *count;         /* [N/128] zeroed */
	int k, n, rows;
	int chunks_per_slice;    /* 128-blocks of K per block */
	int y_bf16;
};

#define GEMV_THREADS 256
#define HAD_SCALE 0.08838834764831845f /* 1/√128 */

/* In-warp 128-point Hadamard of v[4] per lane, element index 4·lane + i:
 * two levels inside the thread, five across lanes. Unnormalised. */
__device__ __forceinline__ void had128_warp(float v[4], int lane)
{
	float a0 = v[0] + v[1], a1 = v[0] - v[1], a2 = v[2] + v[3], a3 = v[2] - v[3];
	v[0] = a0 + a2;
	v[1] = a1 + a3;
	v[2] = a0 - a2;
	v[3] = a1 - a3;
#pragma unroll
	for (int m = 1; m < 32; m <<= 1) {
		bool upper = lane & m;
#pragma unroll
		for (int i = 0; i < 4; i++) {
			float p = __shfl_xor_sync(0xffffffffu, v[i], m);
			v[i] = upper ? p - v[i] : v[i] + p;
		}
	}
}

/* Two weights (states s0, s1) as a half2 {w0, w1}. */
template <int CB>
__device__ __forceinline__ __half2 decode2(uint32_t s0, uint32_t s1)
{
	if constexpr (CB == 2) {
		uint32_t x0 = s0 * 0x83DCD12Du, x1 = s1 * 0x83DCD12Du;
		/* Byte sums land on the fp16 bits 0x6400 + t = 1024 + t. */
		uint32_t h0 = __dp4a(x0, 0x01010101u, 0x6400u);
		uint32_t h1 = __dp4a(x1, 0x01010101u, 0x6400u);
		uint32_t h = __byte_perm(h0, h1, 0x5410);
		const __half2 k = __half2half2(__ushort_as_half((unsigned short)0x1EEE));
		const __half2 c = __half2half2(__ushort_as_half((unsigned short)0xC931));
		return __hfma2(*reinterpret_cast<__half2 *>(&h), k, c);
	} else {
		uint32_t x0, x1;
		if (CB == 1) {
			x0 = s0 * 0xCBAC1FEDu;
			x1 = s1 * 0xCBAC1FEDu;
		} else {
			x0 = s0 * 89226354u + 64248484u;
			x1 = s1 * 89226354u + 64248484u;
		}
		x0 = (x0 & 0x8FFF8FFFu) ^ 0x3B603B60u;
		x1 = (x1 & 0x8FFF8FFFu) ^ 0x3B603B60u;
		uint32_t lo = __byte_perm(x0, x1, 0x5410), hi = __byte_perm(x0, x1, 0x7632);
		return __hadd2(*reinterpret_cast<__half2 *>(&lo), *reinterpret_cast<__half2 *>(&hi));
	}
}

/* The 16-bit state whose last bit sits SH bits above the bottom of the
 * 96-bit window {w2 (top), w1, w0}. SH is a compile-time constant: a state
 * on a byte boundary of one word is one byte permute (zero-filled), others
 * a funnel shift and a mask. */
template <int SH>
__device__ __forceinline__ uint32_t state_at(uint32_t w0, uint32_t w1, uint32_t w2)
{
	constexpr int OFF = SH % 32;
	if constexpr (OFF % 8 == 0 && OFF <= 16) {
		const uint32_t w = SH >= 64 ? w2 : SH >= 32 ? w1 : w0;
		return __byte_perm(w, 0u, 0x4400 | ((OFF / 8 + 1) << 4) | (OFF / 8));
	} else if constexpr (SH >= 64) {
		return (w2 >> (SH - 64)) & 0xffffu;
	} else if constexpr (SH >= 32) {
		return __funnelshift_r(w1, w2, SH - 32) & 0xffffu;
	} else {
		return __funnelshift_r(w0, w1, SH) & 0xffffu;
	}
}

template <int B, int CB, int R>
__device__ __forceinline__ void exl3_gemv(const exl3_gemv_args &a)
{
	__shared__ __align__(16) __half us[2][R][128];
	__shared__ float part[R][128];

	const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	const int q = lane & 3, c0 = lane >> 2;
	const int nb = blockIdx.x;
	const int ntiles = a.n >> 4;
	const int tcol = nb * 8 + warp;
	const int kb_total = a.k >> 7;
	const int kb0 = blockIdx.y * a.chunks_per_slice;
	const int kb1 = min(kb_total, kb0 + a.chunks_per_slice);

	/* This lane's window of the tile: stream bits from (8l+1)·B − 16 on
	 * (mod 256·B), 7B+16 of them, inside three u32 words starting at word
	 * wi; o = the first bit's offset in word wi. */
	const int words = 8 * B;
	const int start = ((8 * lane + 1) * B - 16 + 256 * B) % (256 * B);
	const int wi = start >> 5, o = start & 31;
	const int wj = (wi + 1) % words, wk = (wi + 2) % words;

	float acc[R][2];
#pragma unroll
	for (int r = 0; r < R; r++)
		acc[r][0] = acc[r][1] = 0.f;

	for (int kb = kb0; kb < kb1; kb++) {
		/* Issue the loads of this chunk's 8 tiles first. */
		uint32_t t0[8], t1[8], t2[8];
#pragma unroll
		for (int i = 0; i < 8; i++) {
			const uint32_t *tile = a.trellis + ((size_t)(kb * 8 + i) * ntiles + tcol) * words;
			t0[i] = __ldcs(tile + wi);
			t1[i] = __ldcs(tile + wj);
			t2[i] = __ldcs(tile + wk);
		}
		/* u for this chunk: warp w builds rows w and w + 8. */
		const int buf = kb & 1;
#pragma unroll
		for (int rr = 0; rr < (R + 7) / 8; rr++) {
			const int r = warp + 8 * rr;
			if (r < R) {
				float v[4] = {0.f, 0.f, 0.f, 0.f};
				if (r < a.rows) {
					const int k = kb * 128 + 4 * lane;
					const uint2 xb = *reinterpret_cast<const uint2 *>(a.x + (size_t)r * a.k + k);
					const uint2 sb = *reinterpret_cast<const uint2 *>(a.suh + k);
					const __nv_bfloat162 x01 = *reinterpret_cast<const __nv_bfloat162 *>(&xb.x);
					const __nv_bfloat162 x23 = *reinterpret_cast<const __nv_bfloat162 *>(&xb.y);
					const __half2 s01 = *reinterpret_cast<const __half2 *>(&sb.x);
					const __half2 s23 = *reinterpret_cast<const __half2 *>(&sb.y);
					v[0] = __low2float(x01) * __low2float(s01);
					v[1] = __high2float(x01) * __high2float(s01);
					v[2] = __low2float(x23) * __low2float(s23);
					v[3] = __high2float(x23) * __high2float(s23);
					had128_warp(v, lane);
				}
				__half2 h01 = __floats2half2_rn(v[0] * HAD_SCALE, v[1] * HAD_SCALE);
				__half2 h23 = __floats2half2_rn(v[2] * HAD_SCALE, v[3] * HAD_SCALE);
				uint2 st;
				st.x = *reinterpret_cast<uint32_t *>(&h01);
				st.y = *reinterpret_cast<uint32_t *>(&h23);
				*reinterpret_cast<uint2 *>(&us[buf][r][4 * lane]) = st;
			}
		}
		__syncthreads();

#pragma unroll
		for (int i = 0; i < 8; i += 2) {
			__half2 h[R][2];
#pragma unroll
			for (int r = 0; r < R; r++)
				h[r][0] = h[r][1] = __float2half2_rn(0.f);
#pragma unroll
			for (int ii = 0; ii < 2; ii++) {
				/* Move the window so its first bit is bit 95. */
				const uint32_t w2 = __funnelshift_l(t1[i + ii], t0[i + ii], o);
				const uint32_t w1 = __funnelshift_l(t2[i + ii], t1[i + ii], o);
				const uint32_t w0 = t2[i + ii] << o;
				/* State j ends at window bit 15 + j·B: SH = 80 − j·B. */
				const __half2 w01 = decode2<CB>(state_at<80 - 0 * B>(w0, w1, w2),
				                                state_at<80 - 1 * B>(w0, w1, w2));
				const __half2 w23 = decode2<CB>(state_at<80 - 2 * B>(w0, w1, w2),
				                                state_at<80 - 3 * B>(w0, w1, w2));
				const __half2 w45 = decode2<CB>(state_at<80 - 4 * B>(w0, w1, w2),
				                                state_at<80 - 5 * B>(w0, w1, w2));
				const __half2 w67 = decode2<CB>(state_at<80 - 6 * B>(w0, w1, w2),
				                                state_at<80 - 7 * B>(w0, w1, w2));
				const int kk = (i + ii) * 16 + 2 * q;
#pragma unroll
				for (int r = 0; r < R; r++) {
					const __half2 u0 = *reinterpret_cast<const __half2 *>(&us[buf][r][kk]);
					const __half2 u1 = *reinterpret_cast<const __half2 *>(&us[buf][r][kk + 8]);
					h[r][0] = __hfma2(w01, u0, h[r][0]);
					h[r][0] = __hfma2(w23, u1, h[r][0]);
					h[r][1] = __hfma2(w45, u0, h[r][1]);
					h[r][1] = __hfma2(w67, u1, h[r][1]);
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
			part[r][warp * 16 + c0] = acc[r][0];
			part[r][warp * 16 + c0 + 8] = acc[r][1];
		}
	}
	__syncthreads();

	const int slices = gridDim.y;
	if (slices > 1) {
		float *acc_g = a.acc + (size_t)nb * 128;
		for (int e = threadIdx.x; e < R * 128; e += GEMV_THREADS) {
			const int r = e >> 7, c = e & 127;
			if (r < a.rows)
				atomicAdd(acc_g + (size_t)r * a.n + c, part[r][c]);
		}
		__threadfence();
		__syncthreads();
		__shared__ unsigned last;
		if (threadIdx.x == 0)
			last = atomicAdd(a.count + nb, 1u) == (unsigned)slices - 1;
		__syncthreads();
		if (!last)
			return;
		__threadfence();
		for (int e = threadIdx.x; e < R * 128; e += GEMV_THREADS) {
			const int r = e >> 7, c = e & 127;
			if (r < a.rows) {
				float *p = acc_g + (size_t)r * a.n + c;
				part[r][c] = __ldcg(p);
				__stcg(p, 0.f);
			}
		}
		if (threadIdx.x == 0)
			a.count[nb] = 0;
		__syncthreads();
	}

	/* y = (a · Ĥ_N) ⊙ svh for this block's 128 columns: warp w, rows w, w+8. */
#pragma unroll
	for (int rr = 0; rr < (R + 7) / 8; rr++) {
		const int r = warp + 8 * rr;
		if (r < R && r < a.rows) {
			float v[4];
#pragma unroll
			for (int i = 0; i < 4; i++)
				v[i] = part[r][4 * lane + i];
			had128_warp(v, lane);
			const int n0 = nb * 128 + 4 * lane;
			const uint2 sb = *reinterpret_cast<const uint2 *>(a.svh + n0);
			const __half2 s01 = *reinterpret_cast<const __half2 *>(&sb.x);
			const __half2 s23 = *reinterpret_cast<const __half2 *>(&sb.y);
			const float y0 = v[0] * HAD_SCALE * __low2float(s01);
			const float y1 = v[1] * HAD_SCALE * __high2float(s01);
			const float y2 = v[2] * HAD_SCALE * __low2float(s23);
			const float y3 = v[3] * HAD_SCALE * __high2float(s23);
			if (a.y_bf16) {
				__nv_bfloat162 b01 = __floats2bfloat162_rn(y0, y1), b23 = __floats2bfloat162_rn(y2, y3);
				uint2 st;
				st.x = *reinterpret_cast<uint32_t *>(&b01);
				st.y = *reinterpret_cast<uint32_t *>(&b23);
				*reinterpret_cast<uint2 *>(static_cast<__nv_bfloat16 *>(a.y) + (size_t)r * a.n + n0) = st;
			} else {
				*reinterpret_cast<float4 *>(static_cast<float *>(a.y) + (size_t)r * a.n + n0) =
					make_float4(y0, y1, y2, y3);
			}
		}
	}
}

#define EXL3_GEMV(B, CB, R) \
	extern "C" __global__ void __launch_bounds__(GEMV_THREADS) \
	tf_exl3_gemv_b##B##_cb##CB##_r##R(const exl3_gemv_args a) \
	{ \
		exl3_gemv<B, CB, R>(a); \
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
