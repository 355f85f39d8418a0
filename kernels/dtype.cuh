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

/* s + v[i]^2 for i = j, j + 8, ... below lim, in index order, IEEE
 * products and sums: lane j of the CPU's eight-lane sum of squares
 * (cpu_dot). Eight loads are issued ahead of their adds, since a shared
 * load's latency, not the add's, sets the pace of the chain. */
__device__ __forceinline__ float sumsq_lane8(float s, const float *v, int j, int lim)
{
	int i = j;
	for (; i + 56 < lim; i += 64) {
		float a[8];
#pragma unroll
		for (int u = 0; u < 8; u++)
			a[u] = v[i + 8 * u];
#pragma unroll
		for (int u = 0; u < 8; u++)
			s = __fadd_rn(s, __fmul_rn(a[u], a[u]));
	}
	for (; i < lim; i += 8)
		s = __fadd_rn(s, __fmul_rn(v[i], v[i]));
	return s;
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
