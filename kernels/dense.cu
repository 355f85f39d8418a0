/* dense.cu: the dense ops of the CUDA backend (libcore/compute/cuda_dense.c
 * launches them; the CPU twins are the ops of the same name in
 * libcore/compute/cpu.c), and the small kernels around the EXL3 launches
 * (libcore/compute/cuda_exl3.c: bias, the experts' tasks).
 *
 * Dtypes travel as enum tf_dt values (0 f32, 1 bf16, 2 f16). Loads widen
 * exactly; stores round to nearest even with the CPU's bits (base/f16.h:
 * NaN stays quiet with its payload's top bits), so a store of the same
 * fp32 value gives the same bits on both backends.
 *
 * tf_dense_convert: y[i] = x[i], any float dtypes. Bit-exact. Grid-stride,
 *   1-D grid of any size, 256 threads.
 * tf_dense_linear_warp_x<X>_w<W>: y[r][n] = x[r][:] . W[n][:] for R <= 16
 *   rows: one warp per output column n (8 a block), the warp's lanes take
 *   k = lane, lane + 32, ... for all R rows at once (W read once), fp32
 *   sums reduced over the warp. Grid (ceil(N / 8)), 256 threads.
 * tf_dense_linear_tile_x<X>_w<W>: the same for any R: 64 x 64 output tiles,
 *   K in steps of 32 through shared memory (fp32), 4 x 4 outputs a thread,
 *   one fp32 sum per output in k order. Grid (ceil(N / 64), ceil(R / 64)),
 *   256 threads, R up to 64 * 65535.
 *   Both linears accumulate in another order than cpu_dot's 8 partials:
 *   they agree with the CPU within fp32 rounding of a K-term sum (about
 *   1e-6 relative of sum |x w|), then y is stored f32 or rounded once.
 * tf_dense_embed: out[r][c][:] = table[ids[r] - vocab_lo] or zeros.
 *   Bit-exact. Grid (R * C), 256 threads.
 * tf_dense_rmsnorm: y = x * (mean(x^2) + eps)^-1/2 * w per row, in exactly
 *   the CPU's order (cpu_rmsnorm: cpu_wide_rms_scale, the wide order of
 *   libcore/compute/cpu_impl.h): 256 partial sums, partial j (thread j)
 *   over the elements i = j mod 256 in increasing i, IEEE products and sums
 *   (no contraction), folded in halves (dtype.cuh wide_fold), then /n,
 *   +eps, sqrt, 1/., and (x * s) * w: bit-exact with the CPU. Rows of n <=
 *   6144 are held in registers (each thread's 24 values of x and w loaded
 *   at once, one round trip); longer rows are read twice, 16 loads ahead.
 *   Grid (R), 256 threads, any n; y may alias x. Before (8 threads running
 *   cpu_dot's 8 chains of n/8 adds) a 5120-wide row took 17.3 us on the
 *   H200; predicted now (not measured) about 3 us at 1 to 64 rows.
 * tf_dense_rope: the last rf.dim dims of each n-wide vector rotated in
 *   GPT-J pairs, angle pos * f_i in fp64, cos/sin in fp64 rounded to fp32
 *   (the CPU takes libm's double cos/sin: equal but for a double result
 *   within an ulp of a float rounding tie), the rotation in IEEE fp32
 *   without contraction: bit-exact with the CPU but for those ties. The
 *   frequency table is a kernel parameter (struct tf_rope_freqs, 520
 *   bytes). Grid (R * H), 128 threads; y may alias x.
 * tf_dense_bias_rows: dst[r][c] = src[r][c] + bias[c] (fp32 add, f16 bias),
 *   dst f32 or bf16 (rounded once); dst may alias src. Grid (ceil(N / 256),
 *   R), R up to 65535.
 * tf_dense_bias_experts: the same with the bias of row r's group's expert
 *   (bias [E][N] f16; the group found by binary search in offsets); rows
 *   outside every valid group are not written. Grid (ceil(N / 256), rows)
 *   over rows r0..r0+rows-1, rows up to 65535.
 * tf_dense_linear_experts: dense experts (test packs): row r of x through
 *   the weights of its group's expert (the group found by binary search in
 *   offsets, the expert's W [N][K] address in table[ids[g]]), one warp per
 *   (row, output column), fp32 sums reduced over the warp; rows outside
 *   every valid group are not written. Grid (ceil(N / 8), rows) over rows
 *   r0..r0+rows-1, rows up to 65535, 256 threads. Agrees with the CPU
 *   within fp32 rounding of a K-term sum, like the linears.
 * tf_dense_experts_tasks: the experts launch's tasks from device (ids,
 *   offsets): group g = rows offsets[g]..offsets[g+1]-1 (clamped to
 *   [0, R)) through expert ids[g] (groups of an expert outside [0, E) are
 *   skipped) cut into ceil(len / rows_max) tasks {expert, first, count, 0};
 *   tasks past the real ones up to ntasks are {0, 0, 0, 0}; xrow[p] = p
 *   for p < R. starts [G + 1] is scratch. One block of 1024 threads. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "kernels/dtype.cuh"

namespace tf_dense {

using namespace tf_dt;

/* ---- linear ---- */

#define LIN_WARP_ROWS 16

template <int X, int W>
__device__ __forceinline__ void linear_warp(const void *x, const void *w, void *y, int R, int K,
					    int N, int y_bf16)
{
	const int lane = threadIdx.x & 31;
	const int n = blockIdx.x * 8 + (threadIdx.x >> 5);
	if (n >= N)
		return;
	float acc[LIN_WARP_ROWS];
#pragma unroll
	for (int r = 0; r < LIN_WARP_ROWS; r++)
		acc[r] = 0.f;
	const int64_t wrow = (int64_t)n * K;
	for (int k = lane; k < K; k += 32) {
		const float wv = load_t<W>(w, wrow + k);
#pragma unroll
		for (int r = 0; r < LIN_WARP_ROWS; r++)
			if (r < R)
				acc[r] += load_t<X>(x, (int64_t)r * K + k) * wv;
	}
#pragma unroll
	for (int r = 0; r < LIN_WARP_ROWS; r++) {
		if (r >= R)
			break;
		float v = acc[r];
#pragma unroll
		for (int m = 16; m > 0; m >>= 1)
			v += __shfl_xor_sync(0xffffffffu, v, m);
		if (lane == 0)
			store(y, y_bf16 ? DT_BF16 : DT_F32, (int64_t)r * N + n, v);
	}
}

#define LIN_TM 64
#define LIN_TN 64
#define LIN_TK 32

template <int X, int W>
__device__ __forceinline__ void linear_tile(const void *x, const void *w, void *y, int R, int K,
					    int N, int y_bf16)
{
	/* [k][row]: a thread's 4 rows (4 columns) are 16 apart, so a warp
	 * reads 2 (16) words of a k at once; +1 keeps the stores of a k
	 * column on distinct banks. */
	__shared__ float xs[LIN_TK][LIN_TM + 1];
	__shared__ float ws[LIN_TK][LIN_TN + 1];
	const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
	const int64_t r0 = (int64_t)blockIdx.y * LIN_TM;
	const int n0 = blockIdx.x * LIN_TN;
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.f;
	for (int k0 = 0; k0 < K; k0 += LIN_TK) {
		for (int e = threadIdx.x; e < LIN_TM * LIN_TK; e += 256) {
			const int row = e / LIN_TK, kk = e % LIN_TK, k = k0 + kk;
			const int64_t r = r0 + row;
			const int n = n0 + row;
			xs[kk][row] = r < R && k < K ? load_t<X>(x, r * K + k) : 0.f;
			ws[kk][row] = n < N && k < K ? load_t<W>(w, (int64_t)n * K + k) : 0.f;
		}
		__syncthreads();
#pragma unroll 8
		for (int kk = 0; kk < LIN_TK; kk++) {
			float a[4], b[4];
#pragma unroll
			for (int i = 0; i < 4; i++) {
				a[i] = xs[kk][ty + 16 * i];
				b[i] = ws[kk][tx + 16 * i];
			}
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] += a[i] * b[j];
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		const int64_t r = r0 + ty + 16 * i;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			const int n = n0 + tx + 16 * j;
			if (r < R && n < N)
				store(y, y_bf16 ? DT_BF16 : DT_F32, r * N + n, acc[i][j]);
		}
	}
}

/* ---- rope ---- */

/* struct tf_rope_freqs, field for field (compute/ops.h). */
struct rope_freqs {
	int dim;
	double f[64];
};
static_assert(sizeof(rope_freqs) == 520, "rope_freqs must match struct tf_rope_freqs");

/* ---- experts ---- */

struct task {
	int expert, first, count, pad;
};

/* Group g's rows [lo, hi) clamped to [0, R) and its task count; 0 tasks
 * for an expert outside [0, E) or an empty (or inverted) range. */
__device__ __forceinline__ int group_tasks(const int32_t *ids, const int32_t *offsets, int g, int E,
					   int R, int rows_max, int *lo, int *hi)
{
	const int id = ids[g];
	*lo = max(offsets[g], 0);
	*hi = min(offsets[g + 1], R);
	if (id < 0 || id >= E || *hi <= *lo)
		return 0;
	return (*hi - *lo + rows_max - 1) / rows_max;
}

/* The last g in [0, n) with a[g] <= v (a ascending), or -1. */
__device__ __forceinline__ int last_le(const int32_t *a, int n, int64_t v)
{
	int lo = 0, hi = n; /* answer in [lo - 1, hi) */
	while (lo < hi) {
		const int mid = (lo + hi) >> 1;
		if (a[mid] <= v)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

} /* namespace tf_dense */

extern "C" __global__ void __launch_bounds__(256)
tf_dense_convert(const void *x, int32_t xdt, void *y, int32_t ydt, int64_t n)
{
	using namespace tf_dense;
	const int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
		store(y, ydt, i, load(x, xdt, i));
}

#define DENSE_LINEAR(XN, X, WN, W) \
	extern "C" __global__ void __launch_bounds__(256) \
	tf_dense_linear_warp_x##XN##_w##WN(const void *x, const void *w, void *y, int32_t R, \
					   int32_t K, int32_t N, int32_t y_bf16) \
	{ \
		using namespace tf_dense; \
		linear_warp<X, W>(x, w, y, R, K, N, y_bf16); \
	} \
	extern "C" __global__ void __launch_bounds__(256) \
	tf_dense_linear_tile_x##XN##_w##WN(const void *x, const void *w, void *y, int32_t R, \
					   int32_t K, int32_t N, int32_t y_bf16) \
	{ \
		using namespace tf_dense; \
		linear_tile<X, W>(x, w, y, R, K, N, y_bf16); \
	}
#define DENSE_LINEAR_X(XN, X) \
	DENSE_LINEAR(XN, X, f32, DT_F32) DENSE_LINEAR(XN, X, bf16, DT_BF16) \
	DENSE_LINEAR(XN, X, f16, DT_F16)
DENSE_LINEAR_X(f32, DT_F32)
DENSE_LINEAR_X(bf16, DT_BF16)
DENSE_LINEAR_X(f16, DT_F16)

extern "C" __global__ void __launch_bounds__(256)
tf_dense_embed(const uint16_t *table, int64_t V, int64_t vocab_lo, const int32_t *ids,
	       uint16_t *out, int64_t C, int64_t D)
{
	using namespace tf_dense;
	const int64_t row = blockIdx.x; /* r * C + c */
	const int64_t id = (int64_t)ids[row / C] - vocab_lo;
	uint16_t *dst = out + row * D;
	if (id >= 0 && id < V) {
		const uint16_t *src = table + id * D;
		for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
			dst[d] = src[d];
	} else {
		for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
			dst[d] = 0;
	}
}

namespace tf_dense {

/* Rows of n <= NORM_REGS * WIDE: a thread holds its values of x and w in
 * registers from the first pass to the stores. */
constexpr int NORM_REGS = 24;

/* Thread t's partial of the wide order over x[base + i], i = t, t + WIDE,
 * ... < n (tf_dt::wide_fold), 16 loads issued ahead of their adds. */
template <int DT>
__device__ __forceinline__ float norm_part(const void *x, int64_t base, int64_t n, int t)
{
	float s = 0.f;
	int64_t i = t;
	for (; i + 15 * WIDE < n; i += 16 * WIDE) {
		float a[16];
#pragma unroll
		for (int u = 0; u < 16; u++)
			a[u] = load_t<DT>(x, base + i + u * WIDE);
#pragma unroll
		for (int u = 0; u < 16; u++)
			s = __fadd_rn(s, __fmul_rn(a[u], a[u]));
	}
	for (; i < n; i += WIDE) {
		const float a = load_t<DT>(x, base + i);
		s = __fadd_rn(s, __fmul_rn(a, a));
	}
	return s;
}

/* 1 / sqrtf(ss / n + eps), the CPU's steps. */
__device__ __forceinline__ float norm_scale(float ss, int64_t n, float eps)
{
	return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)n), eps)));
}

} /* namespace tf_dense */

extern "C" __global__ void __launch_bounds__(tf_dt::WIDE)
tf_dense_rmsnorm(const void *x, int32_t xdt, const void *w, int32_t wdt, float eps, void *y,
		 int32_t ydt, int64_t n)
{
	using namespace tf_dense;
	__shared__ float sh[WIDE + 1];
	const int64_t base = (int64_t)blockIdx.x * n;
	const int t = threadIdx.x;
	if (n <= NORM_REGS * WIDE) {
		/* every load of the row issued at once, x and w held to the end */
		float xv[NORM_REGS], wv[NORM_REGS], s = 0.f;
#pragma unroll
		for (int u = 0; u < NORM_REGS; u++) {
			const int64_t i = t + (int64_t)u * WIDE;
			xv[u] = i < n ? load(x, xdt, base + i) : 0.f;
			wv[u] = i < n ? load(w, wdt, i) : 0.f;
		}
#pragma unroll
		for (int u = 0; u < NORM_REGS; u++)
			if (t + (int64_t)u * WIDE < n)
				s = __fadd_rn(s, __fmul_rn(xv[u], xv[u]));
		const float sc = norm_scale(wide_fold(s, sh), n, eps);
#pragma unroll
		for (int u = 0; u < NORM_REGS; u++) {
			const int64_t i = t + (int64_t)u * WIDE;
			if (i < n)
				store(y, ydt, base + i, __fmul_rn(__fmul_rn(xv[u], sc), wv[u]));
		}
		return;
	}
	const float s = xdt == DT_F32	 ? norm_part<DT_F32>(x, base, n, t)
			: xdt == DT_BF16 ? norm_part<DT_BF16>(x, base, n, t)
					 : norm_part<DT_F16>(x, base, n, t);
	const float sc = norm_scale(wide_fold(s, sh), n, eps);
	/* a thread rewrites only what it read: y may alias x */
	for (int64_t i = t; i < n; i += 4 * WIDE) {
		float a[4], b[4];
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const int64_t k = i + u * WIDE;
			a[u] = k < n ? load(x, xdt, base + k) : 0.f;
			b[u] = k < n ? load(w, wdt, k) : 0.f;
		}
#pragma unroll
		for (int u = 0; u < 4; u++)
			if (i + u * WIDE < n)
				store(y, ydt, base + i + u * WIDE, __fmul_rn(__fmul_rn(a[u], sc), b[u]));
	}
}

extern "C" __global__ void __launch_bounds__(128)
tf_dense_rope(const void *x, int32_t xdt, const int32_t *pos, const tf_dense::rope_freqs rf, int32_t inverse,
	      void *y, int32_t ydt, int64_t H, int64_t n)
{
	using namespace tf_dense;
	const int64_t v = blockIdx.x; /* r * H + h */
	const int64_t off = v * n, plain = n - rf.dim;
	const double t = (double)pos[v / H];
	const int64_t units = plain + rf.dim / 2; /* plain elements, then pairs */
	for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
		if (u < plain) {
			store(y, ydt, off + u, load(x, xdt, off + u));
			continue;
		}
		const int i = (int)(u - plain);
		double sd, cd;
		sincos(t * rf.f[i], &sd, &cd);
		const float cs = (float)cd, sn = inverse ? -(float)sd : (float)sd;
		const int64_t e = off + plain + 2 * i;
		const float a = load(x, xdt, e), b = load(x, xdt, e + 1);
		store(y, ydt, e, __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn)));
		store(y, ydt, e + 1, __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, cs)));
	}
}

extern "C" __global__ void __launch_bounds__(256)
tf_dense_bias_rows(const float *src, void *dst, int32_t dst_bf16, const uint16_t *bias, int32_t N)
{
	using namespace tf_dense;
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	if (c >= N)
		return;
	const int64_t i = (int64_t)blockIdx.y * N + c;
	store(dst, dst_bf16 ? DT_BF16 : DT_F32, i, __fadd_rn(src[i], f16_f32(bias[c])));
}

extern "C" __global__ void __launch_bounds__(256)
tf_dense_bias_experts(const float *src, void *dst, int32_t dst_bf16, const uint16_t *bias,
		      const int32_t *ids, const int32_t *offsets, int32_t G, int32_t E, int32_t N,
		      int32_t r0)
{
	using namespace tf_dense;
	const int c = blockIdx.x * blockDim.x + threadIdx.x;
	const int r = r0 + (int)blockIdx.y;
	if (c >= N)
		return;
	const int g = last_le(offsets, G, r);
	if (g < 0 || r >= offsets[g + 1] || ids[g] < 0 || ids[g] >= E)
		return;
	const int64_t i = (int64_t)r * N + c;
	const float b = f16_f32(bias[(int64_t)ids[g] * N + c]);
	store(dst, dst_bf16 ? DT_BF16 : DT_F32, i, __fadd_rn(src[i], b));
}

extern "C" __global__ void __launch_bounds__(1024)
tf_dense_experts_tasks(const int32_t *ids, const int32_t *offsets, int32_t G, int32_t E, int32_t R,
		       int32_t rows_max, tf_dense::task *tasks, int32_t ntasks, int32_t *xrow, int32_t *starts)
{
	using namespace tf_dense;
	__shared__ int scan[1024];
	__shared__ int carry;
	const int t = threadIdx.x;
	if (t == 0)
		carry = 0;
	__syncthreads();
	/* starts[g]: the first task of group g (an exclusive prefix sum of
	 * the task counts, 1024 groups a pass); starts[G]: the total. */
	for (int g0 = 0; g0 < G; g0 += 1024) {
		const int g = g0 + t;
		int lo = 0, hi = 0;
		const int cnt = g < G ? group_tasks(ids, offsets, g, E, R, rows_max, &lo, &hi) : 0;
		scan[t] = cnt;
		__syncthreads();
		for (int d = 1; d < 1024; d <<= 1) {
			const int v = t >= d ? scan[t - d] : 0;
			__syncthreads();
			scan[t] += v;
			__syncthreads();
		}
		if (g < G)
			starts[g] = carry + scan[t] - cnt;
		__syncthreads();
		if (t == 1023)
			carry += scan[1023];
		__syncthreads();
	}
	if (t == 0)
		starts[G] = carry;
	__syncthreads();
	const int total = carry;
	for (int k = t; k < ntasks; k += blockDim.x) {
		task tk = {0, 0, 0, 0};
		if (k < total) {
			/* the group holding task k: the last with starts[g] <= k
			 * (empty groups share their start with the next) */
			const int g = last_le(starts, G, k);
			int lo, hi;
			group_tasks(ids, offsets, g, E, R, rows_max, &lo, &hi);
			const int first = lo + (k - starts[g]) * rows_max;
			tk.expert = ids[g];
			tk.first = first;
			tk.count = min(rows_max, hi - first);
		}
		tasks[k] = tk;
	}
	for (int p = t; p < R; p += blockDim.x)
		xrow[p] = p;
}

extern "C" __global__ void __launch_bounds__(256)
tf_dense_linear_experts(const void *x, int xdt, const uint64_t *table, int wdt,
			const int32_t *ids, const int32_t *offsets, int32_t G, int32_t E, void *y,
			int ydt, int32_t r0, int32_t R, int32_t K, int32_t N)
{
	using namespace tf_dense;
	const int lane = threadIdx.x & 31;
	const int n = blockIdx.x * 8 + (threadIdx.x >> 5);
	const int r = r0 + blockIdx.y;
	if (n >= N || r >= R)
		return;
	int lo = 0, hi = G; /* the last group g with offsets[g] <= r */
	while (hi - lo > 1) {
		const int mid = (lo + hi) >> 1;
		if (offsets[mid] <= r)
			lo = mid;
		else
			hi = mid;
	}
	if (r < offsets[lo] || r >= offsets[lo + 1] || ids[lo] < 0 || ids[lo] >= E)
		return;
	const void *w = reinterpret_cast<const void *>(table[ids[lo]]);
	float acc = 0.f;
	for (int k = lane; k < K; k += 32)
		acc += load(x, xdt, (int64_t)r * K + k) * load(w, wdt, (int64_t)n * K + k);
	for (int o = 16; o; o >>= 1)
		acc += __shfl_xor_sync(0xffffffffu, acc, o);
	if (!lane)
		store(y, ydt, (int64_t)r * N + n, acc);
}
