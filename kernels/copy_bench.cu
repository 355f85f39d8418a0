/* copy_bench.cu: device-to-device copy, the yardstick of memory bandwidth.
 *
 * Math: dst[i] = src[i] for i < n, n counted in 16-byte words (uint4).
 * Layout: both buffers 16-byte aligned, contiguous.
 * Access: each thread moves UNROLL words per step, all loads issued before
 * the stores (independent work in flight), 16-byte loads with the streaming
 * hint (.cs: the data is not reused), coalesced across the warp; grid-stride
 * over the whole buffer, so any grid size covers any n.
 * Launch: 1-D, 256 threads per block, a few blocks per SM (tf-bench uses
 * 4 × SMs); no shared memory.
 * Bytes moved: 32·n (read + write), which is what bandwidth is quoted on.
 * CPU twin: memcpy (nothing to round).
 *
 * tf_empty does nothing: tf-bench times it with a GEMV's grid to measure
 * the launch floor (launch, block scheduling and the kernel boundary of
 * back-to-back launches in a graph).
 *
 * tf_fill_u32 writes a hash of each index and a seed: test data that is
 * never zero-like and never the same twice (the host twin is
 * tf_fill_u32_host in tests/gpu/gpu_util.h). */
#include <stdint.h>

#define COPY_UNROLL 4

extern "C" __global__ void __launch_bounds__(256)
tf_copy_u128(uint4 *__restrict__ dst, const uint4 *__restrict__ src, unsigned long long n)
{
	const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
	unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
	for (; i + (COPY_UNROLL - 1) * stride < n; i += COPY_UNROLL * stride) {
		uint4 v[COPY_UNROLL];
#pragma unroll
		for (int u = 0; u < COPY_UNROLL; u++)
			v[u] = __ldcs(src + i + u * stride);
#pragma unroll
		for (int u = 0; u < COPY_UNROLL; u++)
			__stcs(dst + i + u * stride, v[u]);
	}
	for (; i < n; i += stride)
		__stcs(dst + i, __ldcs(src + i));
}

extern "C" __global__ void __launch_bounds__(256)
tf_fill_u32(uint32_t *__restrict__ dst, unsigned long long n, uint32_t seed)
{
	const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
	for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
	     i += stride) {
		uint32_t x = (uint32_t)i * 0x9E3779B1u ^ seed;
		x ^= x >> 16;
		x *= 0x85EBCA6Bu;
		x ^= x >> 13;
		dst[i] = x;
	}
}

extern "C" __global__ void __launch_bounds__(256) tf_empty(int unused)
{
	(void)unused;
}
