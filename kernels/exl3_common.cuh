/* exl3_common.cuh: device helpers shared by the EXL3 kernels
 * (exl3_gemv.cu, exl3_gemv10.cu, exl3_gemm.cu): the in-warp 128-point
 * Hadamard with the input and output scalings around it, the three codebooks
 * two states at a time, and reading a 16-bit state out of a
 * lane's 96-bit window of the bit stream (shared/reference/exl3-format.md
 * §2–4). */
#ifndef TF_KERNELS_EXL3_COMMON_CUH
#define TF_KERNELS_EXL3_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

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

/* A lane's 4 inputs of the input Hadamard: v[i] = x[i] · suh[i] (both
 * 8-byte aligned). */
__device__ __forceinline__ void scale_in4(const __nv_bfloat16 *x, const __half *suh, float v[4])
{
	const uint2 xb = *reinterpret_cast<const uint2 *>(x);
	const uint2 sb = *reinterpret_cast<const uint2 *>(suh);
	const __nv_bfloat162 x01 = *reinterpret_cast<const __nv_bfloat162 *>(&xb.x);
	const __nv_bfloat162 x23 = *reinterpret_cast<const __nv_bfloat162 *>(&xb.y);
	const __half2 s01 = *reinterpret_cast<const __half2 *>(&sb.x);
	const __half2 s23 = *reinterpret_cast<const __half2 *>(&sb.y);
	v[0] = __low2float(x01) * __low2float(s01);
	v[1] = __high2float(x01) * __high2float(s01);
	v[2] = __low2float(x23) * __low2float(s23);
	v[3] = __high2float(x23) * __high2float(s23);
}

/* A lane's 4 values of u after the Hadamard, normalised, as fp16 at dst. */
__device__ __forceinline__ void store_u4(__half *dst, const float v[4])
{
	__half2 h01 = __floats2half2_rn(v[0] * HAD_SCALE, v[1] * HAD_SCALE);
	__half2 h23 = __floats2half2_rn(v[2] * HAD_SCALE, v[3] * HAD_SCALE);
	uint2 st;
	st.x = *reinterpret_cast<uint32_t *>(&h01);
	st.y = *reinterpret_cast<uint32_t *>(&h23);
	*reinterpret_cast<uint2 *>(dst) = st;
}

/* A lane's 4 outputs after the output Hadamard: y[off + i] = v[i] ·
 * HAD_SCALE · svh[i], bf16 or f32. */
__device__ __forceinline__ void store_y4(void *y, bool y_bf16, size_t off, const float v[4],
					 const __half *svh)
{
	const uint2 sb = *reinterpret_cast<const uint2 *>(svh);
	const __half2 s01 = *reinterpret_cast<const __half2 *>(&sb.x);
	const __half2 s23 = *reinterpret_cast<const __half2 *>(&sb.y);
	const float y0 = v[0] * HAD_SCALE * __low2float(s01);
	const float y1 = v[1] * HAD_SCALE * __high2float(s01);
	const float y2 = v[2] * HAD_SCALE * __low2float(s23);
	const float y3 = v[3] * HAD_SCALE * __high2float(s23);
	if (y_bf16) {
		__nv_bfloat162 b01 = __floats2bfloat162_rn(y0, y1), b23 = __floats2bfloat162_rn(y2, y3);
		uint2 st;
		st.x = *reinterpret_cast<uint32_t *>(&b01);
		st.y = *reinterpret_cast<uint32_t *>(&b23);
		*reinterpret_cast<uint2 *>(static_cast<__nv_bfloat16 *>(y) + off) = st;
	} else {
		*reinterpret_cast<float4 *>(static_cast<float *>(y) + off) = make_float4(y0, y1, y2, y3);
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

/* Lane l of a warp decodes states 8l..8l+7 of a tile: stream bits from
 * (8l+1)·B − 16 on (mod 256·B), 7B+16 of them, inside three u32 words
 * wi, wj, wk; o = the first bit's offset in word wi. */
struct lane_window {
	int wi, wj, wk, o;
};
template <int B>
__device__ __forceinline__ lane_window lane_window_of(int lane)
{
	const int words = 8 * B;
	const int start = ((8 * lane + 1) * B - 16 + 256 * B) % (256 * B);
	lane_window w;
	w.wi = start >> 5;
	w.o = start & 31;
	w.wj = (w.wi + 1) % words;
	w.wk = (w.wi + 2) % words;
	return w;
}

/* The lane's 8 weights (states 8l..8l+7, in order) from its three words
 * t0, t1, t2 (words wi, wj, wk of the tile) as four half2. */
template <int B, int CB>
__device__ __forceinline__ void decode8(uint32_t t0, uint32_t t1, uint32_t t2, int o, __half2 w[4])
{
	/* Move the window so its first bit is bit 95. */
	const uint32_t w2 = __funnelshift_l(t1, t0, o);
	const uint32_t w1 = __funnelshift_l(t2, t1, o);
	const uint32_t w0 = t2 << o;
	/* State j ends at window bit 15 + j·B: SH = 80 − j·B. */
	w[0] = decode2<CB>(state_at<80 - 0 * B>(w0, w1, w2), state_at<80 - 1 * B>(w0, w1, w2));
	w[1] = decode2<CB>(state_at<80 - 2 * B>(w0, w1, w2), state_at<80 - 3 * B>(w0, w1, w2));
	w[2] = decode2<CB>(state_at<80 - 4 * B>(w0, w1, w2), state_at<80 - 5 * B>(w0, w1, w2));
	w[3] = decode2<CB>(state_at<80 - 6 * B>(w0, w1, w2), state_at<80 - 7 * B>(w0, w1, w2));
}

#endif
