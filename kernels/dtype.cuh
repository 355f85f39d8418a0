/* dtype.cuh: element loads and stores of the float dtypes for every kernel
 * family (dense.cu, attn.cu, mhc.cu, moe.cu). Dtypes travel as enum tf_dt
 * values (0 f32, 1 bf16, 2 f16). Loads widen exactly; stores round to
 * nearest even with the CPU's bits (base/f16.h: a NaN stays quiet with its
 * sign and payload's top bits), so a store of the same fp32 value gives the
 * same bits on both backends. */
#ifndef TF_KERNELS_DTYPE_CUH
#define TF_KERNELS_DTYPE_CUH

#include <cuda_fp16.h>
#include <stdint.h>

namespace tf_dt {

enum { DT_F32 = 0, DT_BF16 = 1, DT_F16 = 2 };

__device__ __forceinline__ float bf16_f32(uint16_t h)
{
	return __uint_as_float((uint32_t)h << 16);
}

__device__ __forceinline__ float f16_f32(uint16_t h)
{
	return __half2float(__ushort_as_half(h));
}

/* base/f16.h's tf_f32_to_bf16, bit for bit. */
__device__ __forceinline__ uint16_t f32_bf16(float f)
{
	uint32_t u = __float_as_uint(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* base/f16.h's tf_f32_to_f16: the hardware rounding (nearest even,
 * subnormals, overflow to infinity), and its NaN payload rule. */
__device__ __forceinline__ uint16_t f32_f16(float f)
{
	const uint32_t u = __float_as_uint(f), a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(((u >> 16) & 0x8000) | 0x7e00 | ((a >> 13) & 0x3ff));
	return __half_as_ushort(__float2half_rn(f));
}

/* Element i of p (dtype dt) as fp32. */
__device__ __forceinline__ float load(const void *p, int dt, int64_t i)
{
	if (dt == DT_F32)
		return static_cast<const float *>(p)[i];
	const uint16_t h = static_cast<const uint16_t *>(p)[i];
	return dt == DT_BF16 ? bf16_f32(h) : f16_f32(h);
}

template <int DT>
__device__ __forceinline__ float load_t(const void *p, int64_t i)
{
	if (DT == DT_F32)
		return static_cast<const float *>(p)[i];
	const uint16_t h = static_cast<const uint16_t *>(p)[i];
	return DT == DT_BF16 ? bf16_f32(h) : f16_f32(h);
}

/* v into element i of p (dtype dt), rounded once. */
__device__ __forceinline__ void store(void *p, int dt, int64_t i, float v)
{
	if (dt == DT_F32)
		static_cast<float *>(p)[i] = v;
	else
		static_cast<uint16_t *>(p)[i] = dt == DT_BF16 ? f32_bf16(v) : f32_f16(v);
}

/* The wide order of the n-long sums of rmsnorm and the Engram gate
 * (libcore/compute/cpu_impl.h CPU_WIDE): thread t of a block of exactly
 * WIDE threads holds partial t (the elements i = t mod WIDE in increasing
 * i, IEEE products and sums); wide_fold returns to every thread the fold
 * in halves, s[j] = s[j] + s[j + w] for w = 128, ..., 1, bit for bit the
 * CPU's. sh: WIDE + 1 floats of shared memory that no other fold uses
 * while this one runs (the sum passes through sh[WIDE]). */
constexpr int WIDE = 256;

/* The fold of the WIDE partials sh[0 .. WIDE) by one whole warp, the sum
 * on lane 0. */
__device__ __forceinline__ float wide_fold_warp(const float *sh)
{
	const int l = threadIdx.x & 31;
	/* w = 128, 64, 32 over shared memory (lane l: j = l + 32 k) */
	float a0 = __fadd_rn(sh[l], sh[l + 128]), a1 = __fadd_rn(sh[l + 32], sh[l + 160]);
	float a2 = __fadd_rn(sh[l + 64], sh[l + 192]), a3 = __fadd_rn(sh[l + 96], sh[l + 224]);
	float c = __fadd_rn(__fadd_rn(a0, a2), __fadd_rn(a1, a3));
	/* w = 16 .. 1: lane j < w adds lane j ^ w = j + w */
#pragma unroll
	for (int w = 16; w > 0; w >>= 1)
		c = __fadd_rn(c, __shfl_xor_sync(0xffffffffu, c, w));
	return c;
}

__device__ __forceinline__ float wide_fold(float s, float *sh)
{
	const int t = threadIdx.x;
	sh[t] = s;
	__syncthreads();
	if (t < 32) {
		float c = wide_fold_warp(sh);
		if (t == 0)
			sh[WIDE] = c;
	}
	__syncthreads();
	return sh[WIDE];
}

/* The order key of a float's bits: a > b as floats iff mono_key(a) >
 * mono_key(b) (-0 as +0, so they tie); 0 for NaN, below every number. */
__device__ __forceinline__ uint32_t mono_key(uint32_t b)
{
	if ((b & 0x7fffffffu) > 0x7f800000u)
		return 0;
	if (b == 0x80000000u)
		b = 0;
	return b & 0x80000000u ? ~b : b | 0x80000000u;
}

} /* namespace tf_dt */

#endif
