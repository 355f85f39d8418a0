/* rows.cu: the row moves of the op table (ops.h): rows_copy, cache_write,
 * cache_read and page_rows. The CPU twins are the codecs of
 * libcore/compute/kvrow.c (tf_kv_row_encode/decode, tf_kv_ik_encode/decode)
 * and the CPU backend's ops of the same names.
 *
 * rows_copy: y row (yi ? yi[m] : m) = x row (xi ? xi[m] : m), bytes moved
 * in units of 16, 8, 4, 2 or 1 bytes (the largest that divides the row and
 * both base addresses); `tpr` threads (a power of two, 1..1024: one unit
 * each up to rows of 1024 units, so a row of 5120 bf16 is 640 threads in
 * 4 blocks, not one warp looping 20 times) share a row, so short rows pack
 * several to a warp. A move with an index < 0 or past its tensor's rows is
 * skipped.
 *
 * cache_write / cache_read: x [n, dim] f32 or bf16 (read as f32 bits),
 * cache u8 [rows, row_bytes], out [n, dim] f32 or bf16. cache_write runs
 * warp tasks: fp8 rows one warp a group of 64 values (codes and scale
 * byte), FP4 rows one warp a 32 bytes of codes (four groups), then one
 * warp for the row's bf16 tail and the scales' padding; index keys and
 * bf16 rows one warp a row. cache_read runs a block of 128 threads a row
 * and 512 values (grid (rows, ceil(dim / 512))), 4 values a thread, every
 * load issued before the first store.
 * Formats (kind): 0 fp8_ds_mla rows (e4m3 codes of the dim - rope "nope"
 * values in groups of 64, the bf16 rope tail, one UE8M0 byte e + 127 per
 * group padded to 8 bytes), 1 FP4 rows (e2m1 pairs low nibble first, groups
 * of 16), 2 bf16 values (rows and index keys), 3 e4m3 index keys (dim codes
 * and the fp32 scale 2^e little-endian). The group exponent is
 * e = ceil(log2(max(amax, 1e-4) / max_code)) (max_code 448 or 6).
 *
 * Exactness: every step runs in integer arithmetic on float bits, so that
 * --use_fast_math (flushed subnormals, approximate division) cannot touch
 * it, and the bytes written and floats read are the CPU's bit for bit:
 * amax is the largest |x| bit pattern (NaN skipped, as fmaxf does, and
 * only the values after a group's last signalling NaN, which glibc's
 * fmaxf turns into a quiet NaN that the next fmaxf drops); e
 * compares significands (a float quotient is a power of two only when the
 * significands are equal, and otherwise lies at least 2^-24 from one, so
 * the CPU's double log2 and ceil give this e); the scaled value x 2^-e is
 * exact and rounds straight to e4m3 or e2m1 (round to nearest even,
 * saturating: clamping first changes no code, and NaN clamps to -max_code
 * as fmaxf makes it); decoding builds the float q 2^e (or the product
 * q scale of an index key) and rounds it to nearest even, subnormals and
 * overflow included, NaN as the CPU's NAN (0x7fc00000, sign kept; x86's
 * rules for a product with a NaN or 0 inf); bf16 rounding is
 * tf_f32_to_bf16's. A group holding an infinity makes the CPU's (int) of
 * ceil(+inf), undefined in C, which x86 gives as INT_MIN: the scale byte
 * 127 (index keys: scale bits 0) and every finite value scaled to a signed
 * zero; that is reproduced.
 *
 * page_rows: out[m] = pt[l / rpp] * rpp + l % rpp (l = logical[m]) in
 * int64 stored as int32, -1 when l < 0 or l / rpp >= P; a thread each.
 *
 * Launch limits: rows_copy and page_rows 256 threads, cache_write and
 * cache_read 128 threads; grids stride over any count (the host caps them
 * at 65536 blocks, cache_read's y at 65535); dim, rope and row bytes any
 * positive int32. No shared memory. Prediction, not measured (H200): one
 * row of 5120 bf16 copied ~2-2.5 us (was 3.3-6.8); one fp8 row of 512
 * written ~2.5-3 us (8 warps, was 13-15 with one warp looping over 7
 * groups); 640 fp8 rows of 512 read ~3-4 us (640 blocks, was 8.5-11 with a
 * warp a row looping 16 times). */
#include <stdint.h>

namespace tf_rows {

constexpr int WARP = 32;
constexpr uint32_t F32_1E_4 = 0x38d1b717u; /* 1e-4f */
constexpr uint32_t F32_448 = 0x43e00000u;  /* 448.0f */
constexpr uint32_t F32_6 = 0x40c00000u;    /* 6.0f */
constexpr uint32_t F32_INF = 0x7f800000u;
constexpr uint32_t F32_QNAN = 0x7fc00000u; /* the CPU's NAN */
enum { KIND_FP8 = 0, KIND_FP4 = 1, KIND_BF16 = 2, KIND_IK_FP8 = 3 };

/* tf_f32_to_bf16 on bits. */
__host__ __device__ __forceinline__ uint16_t bf16_of(uint32_t u)
{
	if ((u & 0x7fffffffu) > F32_INF)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

__host__ __device__ __forceinline__ int msb32(uint32_t v) /* v != 0 */
{
#ifdef __CUDA_ARCH__
	return 31 - __clz((int)v);
#else
	int b = 0;
	while (v >> 1) {
		v >>= 1;
		b++;
	}
	return b;
#endif
}

__host__ __device__ __forceinline__ int msb64(uint64_t v) /* v != 0 */
{
	return v >> 32 ? 32 + msb32((uint32_t)(v >> 32)) : msb32((uint32_t)v);
}

/* m >> s rounded to nearest even (s >= 1). */
__host__ __device__ __forceinline__ uint64_t shr_rne(uint64_t m, int s)
{
	if (s > 62)
		return 0; /* m < 2^61 here: below half of 2^s */
	uint64_t q = m >> s, rem = m & ((UINT64_C(1) << s) - 1), half = UINT64_C(1) << (s - 1);
	return q + (rem > half || (rem == half && (q & 1)));
}

/* The f32 bits of sign * m * 2^p (m < 2^40), rounded to nearest even, to
 * a subnormal or to infinity as IEEE arithmetic rounds. */
__host__ __device__ __forceinline__ uint32_t f32_make(uint32_t sign, uint64_t m, int p)
{
	if (m == 0)
		return sign;
	int top = msb64(m), E = top + p; /* value in [2^E, 2^(E+1)) */
	if (E > 127)
		return sign | F32_INF;
	/* the quantum: 2^(E-23) for normal results, 2^-149 below 2^-126 */
	int s = E >= -126 ? top - 23 : -149 - p;
	uint64_t q = s <= 0 ? m << -s : shr_rne(m, s);
	/* q counts quanta: normal ones carry the implicit bit (2^23..2^24) */
	uint64_t bits = (E >= -126 ? (uint64_t)(E + 126) << 23 : 0) + q;
	return bits >= F32_INF ? sign | F32_INF : sign | (uint32_t)bits;
}

/* An f32 as (sign, integer significand m, exponent p): |x| = m 2^p. */
__host__ __device__ __forceinline__ void f32_split(uint32_t b, uint32_t *m, int *p)
{
	uint32_t E = (b >> 23) & 0xff, f = b & 0x7fffffu;
	*m = E ? f | 0x800000u : f;
	*p = E ? (int)E - 150 : -149;
}

/* |x| as comparable bits, 0 for NaN (fmaxf skips it). */
__host__ __device__ __forceinline__ uint32_t abs_bits(uint32_t b)
{
	uint32_t a = b & 0x7fffffffu;
	return a > F32_INF ? 0 : a;
}

/* A signalling NaN: glibc's fmaxf returns a quiet NaN for one, so the
 * CPU's running amax restarts after it (the next fmaxf drops that NaN). */
__host__ __device__ __forceinline__ bool is_snan(uint32_t b)
{
	return (b & 0x7fffffffu) > F32_INF && !(b & 0x400000u);
}

/* The group exponent e = ceil(log2(max(amax, 1e-4) / mc)) for a finite
 * amax (both as bits): the exponent difference, plus one when amax's
 * significand exceeds mc's. */
__host__ __device__ __forceinline__ int pow2_exponent(uint32_t amax, uint32_t mc)
{
	uint32_t a = amax > F32_1E_4 ? amax : F32_1E_4;
	return (int)(a >> 23) - (int)(mc >> 23) + ((a & 0x7fffffu) > (mc & 0x7fffffu));
}

/* The e4m3 code of clamp(x 2^sh, -448, 448) as tf_engram_f32_to_e4m3
 * makes it: steps of 2^(k-3) in [2^k, 2^(k+1)) for k >= -6, of 2^-9 below
 * (code = q there), round to nearest even, 0x7e and up saturating. */
__host__ __device__ __forceinline__ uint8_t e4m3_scaled(uint32_t xb, int sh)
{
	uint32_t sign = (xb >> 24) & 0x80, a = xb & 0x7fffffffu;
	if (a > F32_INF)
		return 0xfe; /* NaN clamps to -448 */
	if (a == F32_INF)
		return (uint8_t)(sign | 0x7e);
	uint32_t m;
	int p;
	f32_split(xb, &m, &p);
	if (m == 0)
		return (uint8_t)sign;
	p += sh;
	int k = msb32(m) + p;
	if (k >= 9)
		return (uint8_t)(sign | 0x7e);
	int se = k - 3 > -9 ? k - 3 : -9, s = se - p;
	uint64_t q = s <= 0 ? (uint64_t)m << -s : shr_rne(m, s);
	uint64_t code = k >= -6 ? (uint64_t)(k + 6) * 8 + q : q;
	return (uint8_t)(sign | (code > 0x7e ? 0x7e : code));
}

/* m 2^r against t (a small positive integer): -1, 0 or 1. */
__host__ __device__ __forceinline__ int cmp_scaled(uint32_t m, int r, uint32_t t)
{
	if (r >= 0) {
		if (r > 8)
			return 1; /* m >= 1, t < 256 */
		uint64_t v = (uint64_t)m << r;
		return v > t ? 1 : v < t ? -1 : 0;
	}
	if (-r > 32)
		return -1; /* m < 2^24 */
	uint64_t w = (uint64_t)t << -r;
	return m > w ? 1 : m < w ? -1 : 0;
}

/* The e2m1 code of clamp(x 2^sh, -6, 6) as tf_e2m1_encode makes it: the
 * nearest of 0, .5, 1, 1.5, 2, 3, 4, 6, ties to the even code. The
 * midpoints in quarters: .25 .75 1.25 1.75 2.5 3.5 5. */
__host__ __device__ __forceinline__ uint8_t e2m1_scaled(uint32_t xb, int sh)
{
	const uint32_t mid[7] = {1, 3, 5, 7, 10, 14, 20};
	uint32_t sign = (xb >> 28) & 8, a = xb & 0x7fffffffu;
	if (a > F32_INF)
		return 0xf; /* NaN clamps to -6 */
	if (a == F32_INF)
		return (uint8_t)(sign | 7);
	uint32_t m;
	int p;
	f32_split(xb, &m, &p);
	uint32_t c = 0;
	if (m)
		for (; c < 7; c++) {
			int d = cmp_scaled(m, p + sh + 2, mid[c]);
			if (d < 0)
				break;
			if (d == 0) {
				c += c & 1; /* the even code of c, c + 1 */
				break;
			}
		}
	return (uint8_t)(sign | c);
}

/* x[i] of the row as f32 bits. */
__device__ __forceinline__ uint32_t load_bits(const void *x, int bf16, int64_t i)
{
	if (bf16)
		return (uint32_t)((const uint16_t *)x)[i] << 16;
	return ((const uint32_t *)x)[i];
}

__device__ __forceinline__ uint32_t warp_max(uint32_t v, unsigned width)
{
	for (unsigned o = width / 2; o; o /= 2)
		v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* A group's scale byte and shift from its amax bits (the x86 reading of
 * an infinite amax: e = INT_MIN, values scaled to signed zeros). */
__device__ __forceinline__ void group_scale(uint32_t amax, uint32_t mc, int *sh, uint8_t *byte)
{
	if (amax == F32_INF) {
		*sh = -400;
		*byte = 127;
		return;
	}
	int e = pow2_exponent(amax, mc);
	*sh = -e;
	*byte = (uint8_t)(e + 127);
}

__device__ __forceinline__ void put_bf16(uint8_t *p, uint32_t bits)
{
	uint16_t h = bf16_of(bits);
	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

/* The bf16 tail and the scale bytes' padding of a row (its last task). */
__device__ void write_tail(const void *x, int bf16, int64_t base, int nope, int rope, int groups,
			   uint8_t *ropes, int lane)
{
	uint8_t *scales = ropes + 2 * rope;
	for (int k = groups + lane; k < (groups + 7) / 8 * 8; k += WARP)
		scales[k] = 0;
	for (int i = lane; i < rope; i += WARP)
		put_bf16(ropes + 2 * i, load_bits(x, bf16, base + nope + i));
}

/* fp8_ds_mla: codes, then the bf16 tail, then the scales. Task k < groups
 * is group k (its codes and scale byte), task groups the tail. */
__device__ void write_fp8(const void *x, int bf16, int64_t base, int dim, int rope, uint8_t *out,
			  int lane, int k)
{
	int nope = dim - rope, groups = (nope + 63) / 64;
	uint8_t *ropes = out + nope, *scales = ropes + 2 * rope;
	if (k == groups) {
		write_tail(x, bf16, base, nope, rope, groups, ropes, lane);
		return;
	}
	{
		int end = min(k * 64 + 64, nope), i0 = k * 64 + lane, i1 = i0 + WARP;
		uint32_t b0 = i0 < end ? load_bits(x, bf16, base + i0) : 0;
		uint32_t b1 = i1 < end ? load_bits(x, bf16, base + i1) : 0;
		/* amax over the values after the group's last signalling NaN */
		uint32_t from = warp_max(max(is_snan(b0) ? i0 + 1 : 0, is_snan(b1) ? i1 + 1 : 0), WARP);
		uint32_t amax = warp_max(max((uint32_t)i0 >= from ? abs_bits(b0) : 0,
					     (uint32_t)i1 >= from ? abs_bits(b1) : 0), WARP);
		int sh;
		uint8_t byte;
		group_scale(amax, F32_448, &sh, &byte);
		if (i0 < end)
			out[i0] = e4m3_scaled(b0, sh);
		if (i1 < end)
			out[i1] = e4m3_scaled(b1, sh);
		if (lane == 0)
			scales[k] = byte;
	}
}

/* FP4: byte j holds values 2j (low nibble) and 2j + 1; eight bytes make a
 * group of 16, so the lanes of a warp cover four groups a step. Task k <
 * steps is step k (bytes 32k ..), task steps the tail. */
__device__ void write_fp4(const void *x, int bf16, int64_t base, int dim, int rope, uint8_t *out,
			  int lane, int k)
{
	int nope = dim - rope, groups = (nope + 15) / 16, vbytes = (nope + 1) / 2;
	uint8_t *ropes = out + vbytes, *scales = ropes + 2 * rope;
	if (k == (vbytes + WARP - 1) / WARP) {
		write_tail(x, bf16, base, nope, rope, groups, ropes, lane);
		return;
	}
	{
		int j = k * WARP + lane, g = j / 8;
		uint32_t b0 = 2 * j < nope ? load_bits(x, bf16, base + 2 * j) : 0;
		uint32_t b1 = 2 * j + 1 < nope ? load_bits(x, bf16, base + 2 * j + 1) : 0;
		uint32_t from = warp_max(max(is_snan(b0) ? 2 * j + 1 : 0, is_snan(b1) ? 2 * j + 2 : 0), 8);
		uint32_t amax = warp_max(max((uint32_t)(2 * j) >= from ? abs_bits(b0) : 0,
					     (uint32_t)(2 * j + 1) >= from ? abs_bits(b1) : 0), 8);
		int sh;
		uint8_t byte;
		group_scale(amax, F32_6, &sh, &byte);
		if (j < vbytes) {
			uint8_t lo = e2m1_scaled(b0, sh);
			uint8_t hi = 2 * j + 1 < nope ? e2m1_scaled(b1, sh) : 0;
			out[j] = (uint8_t)(lo | hi << 4);
		}
		if (lane % 8 == 0 && g < groups)
			scales[g] = byte;
	}
}

/* Warp tasks a row of kind takes in cache_write: fp8 a group each, FP4 32
 * bytes each, then the tail; index keys and bf16 rows one. */
__device__ __forceinline__ int write_tasks(int kind, int dim, int rope)
{
	if (kind == KIND_FP8)
		return (dim - rope + 63) / 64 + 1;
	if (kind == KIND_FP4)
		return ((dim - rope + 1) / 2 + WARP - 1) / WARP + 1;
	return 1;
}

/* e4m3 index key: one group over the row, then the scale 2^e as fp32. */
__device__ void write_ik(const void *x, int bf16, int64_t base, int dim, uint8_t *out, int lane)
{
	uint32_t from = 0, amax = 0;
	for (int i = lane; i < dim; i += WARP)
		from = is_snan(load_bits(x, bf16, base + i)) ? i + 1 : from;
	from = warp_max(from, WARP);
	for (int i = lane; i < dim; i += WARP)
		amax = (uint32_t)i >= from ? max(amax, abs_bits(load_bits(x, bf16, base + i))) : amax;
	amax = warp_max(amax, WARP);
	int sh;
	uint8_t byte;
	group_scale(amax, F32_448, &sh, &byte);
	for (int i = lane; i < dim; i += WARP)
		out[i] = e4m3_scaled(load_bits(x, bf16, base + i), sh);
	uint32_t bits = amax == F32_INF ? 0 : (uint32_t)byte << 23; /* ldexpf(1, e) */
	if (lane < 4)
		out[dim + lane] = (uint8_t)(bits >> (8 * lane));
}

/* The f32 bits of e4m3 code c times 2^e (ldexpf of the decoded value). */
__host__ __device__ __forceinline__ uint32_t e4m3_times_pow2(uint8_t c, int e)
{
	uint32_t sign = (uint32_t)(c & 0x80) << 24;
	int E = (c >> 3) & 15, m = c & 7;
	if (E == 15 && m == 7)
		return sign | F32_QNAN;
	return E ? f32_make(sign, (uint64_t)(8 + m), E - 10 + e) : f32_make(sign, (uint64_t)m, e - 9);
}

/* The f32 bits of e4m3 code c times the float s, one rounding (x86 NaN
 * rules: a NaN operand is returned quiet, 0 times infinity is 0xffc00000). */
__host__ __device__ __forceinline__ uint32_t e4m3_times(uint8_t c, uint32_t s)
{
	uint32_t sign = ((uint32_t)(c & 0x80) << 24) ^ (s & 0x80000000u);
	int E = (c >> 3) & 15, m = c & 7;
	if (E == 15 && m == 7)
		return ((uint32_t)(c & 0x80) << 24) | F32_QNAN;
	uint32_t sa = s & 0x7fffffffu;
	if (sa > F32_INF)
		return s | 0x400000u;
	uint64_t qm = E ? (uint64_t)(8 + m) : (uint64_t)m;
	int qp = E ? E - 10 : -9;
	if (sa == F32_INF)
		return qm ? sign | F32_INF : 0xffc00000u;
	uint32_t sm;
	int sp;
	f32_split(s, &sm, &sp);
	return f32_make(sign, qm * sm, qp + sp);
}

/* Value i of a stored row as f32 bits. */
__device__ __forceinline__ uint32_t read_value(const uint8_t *in, int kind, int dim, int rope,
					       int i)
{
	int nope = dim - rope;
	switch (kind) {
	case KIND_FP8:
		if (i < nope)
			return e4m3_times_pow2(in[i], (int)in[nope + 2 * rope + i / 64] - 127);
		in += nope;
		break;
	case KIND_FP4:
		if (i < nope) {
			const uint32_t q[8] = {0, 1, 2, 3, 4, 6, 8, 12}; /* e2m1 values in halves */
			int vbytes = (nope + 1) / 2;
			uint8_t c = (uint8_t)(in[i / 2] >> (i % 2 * 4));
			int e = (int)in[vbytes + 2 * rope + i / 16] - 127;
			return f32_make((uint32_t)(c & 8) << 28, q[c & 7], e - 1);
		}
		in += (nope + 1) / 2;
		break;
	case KIND_IK_FP8: {
		uint32_t s = (uint32_t)in[dim] | (uint32_t)in[dim + 1] << 8 |
			     (uint32_t)in[dim + 2] << 16 | (uint32_t)in[dim + 3] << 24;
		return e4m3_times(in[i], s);
	}
	default: /* bf16 values */
		nope = 0;
		break;
	}
	int t = i - nope;
	return ((uint32_t)in[2 * t] | (uint32_t)in[2 * t + 1] << 8) << 16;
}

} // namespace tf_rows

extern "C" __global__ void __launch_bounds__(256)
tf_rows_copy(const uint8_t *x, int64_t x_rows, const int32_t *xi, uint8_t *y, int64_t y_rows,
	     const int32_t *yi, int64_t n, int64_t row_bytes, int32_t unit, int32_t tpr)
{
	int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
	int64_t stride = (int64_t)gridDim.x * blockDim.x / tpr;
	int part = (int)(t % tpr);
	int64_t units = row_bytes / unit;
	for (int64_t m = t / tpr; m < n; m += stride) {
		int64_t src = xi ? xi[m] : m, dst = yi ? yi[m] : m;
		if (src < 0 || src >= x_rows || dst < 0 || dst >= y_rows)
			continue;
		const uint8_t *s = x + src * row_bytes;
		uint8_t *d = y + dst * row_bytes;
		for (int64_t u = part; u < units; u += tpr)
			switch (unit) {
			case 16:
				((uint4 *)d)[u] = ((const uint4 *)s)[u];
				break;
			case 8:
				((uint2 *)d)[u] = ((const uint2 *)s)[u];
				break;
			case 4:
				((uint32_t *)d)[u] = ((const uint32_t *)s)[u];
				break;
			case 2:
				((uint16_t *)d)[u] = ((const uint16_t *)s)[u];
				break;
			default:
				d[u] = s[u];
			}
	}
}

extern "C" __global__ void __launch_bounds__(128)
tf_rows_cache_write(const void *x, int32_t x_bf16, const int32_t *idx, int64_t n, uint8_t *cache,
		    int64_t cache_rows, int64_t row_bytes, int32_t kind, int32_t dim, int32_t rope)
{
	using namespace tf_rows;
	int lane = threadIdx.x % WARP, tasks = write_tasks(kind, dim, rope);
	int64_t warps = (int64_t)gridDim.x * blockDim.x / WARP;
	for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / WARP; w < n * tasks;
	     w += warps) {
		int64_t m = w / tasks;
		int k = (int)(w % tasks);
		int64_t r = idx[m];
		if (r < 0 || r >= cache_rows)
			continue;
		uint8_t *out = cache + r * row_bytes;
		int64_t base = m * dim;
		if (kind == KIND_FP8) {
			write_fp8(x, x_bf16, base, dim, rope, out, lane, k);
		} else if (kind == KIND_FP4) {
			write_fp4(x, x_bf16, base, dim, rope, out, lane, k);
		} else if (kind == KIND_IK_FP8) {
			write_ik(x, x_bf16, base, dim, out, lane);
		} else {
			for (int i = lane; i < dim; i += WARP)
				put_bf16(out + 2 * i, load_bits(x, x_bf16, base + i));
		}
	}
}

extern "C" __global__ void __launch_bounds__(128)
tf_rows_cache_read(const uint8_t *cache, int64_t cache_rows, int64_t row_bytes,
		   const int32_t *idx, int64_t n, int32_t kind, int32_t dim, int32_t rope,
		   void *out, int32_t out_bf16)
{
	using namespace tf_rows;
	constexpr int PER = 4; /* values a thread: i = c 512 + tid + 128 j */
	for (int64_t m = blockIdx.x; m < n; m += gridDim.x) {
		int64_t r = idx[m];
		bool valid = r >= 0 && r < cache_rows;
		const uint8_t *in = cache + (valid ? r : 0) * row_bytes;
		for (int64_t c = blockIdx.y; c * 128 * PER < dim; c += gridDim.y) {
			uint32_t v[PER];
#pragma unroll
			for (int j = 0; j < PER; j++) {
				int i = (int)(c * 128 * PER) + (int)threadIdx.x + 128 * j;
				v[j] = valid && i < dim ? read_value(in, kind, dim, rope, i) : 0;
			}
#pragma unroll
			for (int j = 0; j < PER; j++) {
				int i = (int)(c * 128 * PER) + (int)threadIdx.x + 128 * j;
				if (i >= dim)
					break;
				if (out_bf16)
					((uint16_t *)out)[m * dim + i] = bf16_of(v[j]);
				else
					((uint32_t *)out)[m * dim + i] = v[j];
			}
		}
	}
}

/* fill_random: word i of ops.h's tf_random_word at bytes 8i .. 8i + 7,
 * little-endian; an aligned whole word is one store, the rest bytewise. */
extern "C" __global__ void __launch_bounds__(256)
tf_rows_random(unsigned char *t, uint64_t n, uint64_t seed)
{
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; 8 * i < n; i += stride) {
		uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
		z ^= z >> 31;
		unsigned char *b = t + 8 * i;
		if (8 * i + 8 <= n && !((uintptr_t)b & 7)) {
			*(uint64_t *)b = z;
		} else {
			for (uint64_t j = 0; j < 8 && 8 * i + j < n; j++)
				b[j] = (unsigned char)(z >> (8 * j));
		}
	}
}

extern "C" __global__ void __launch_bounds__(256)
tf_rows_page(const int32_t *pt, int64_t P, int32_t rpp, const int32_t *logical, int64_t n,
	     int32_t *out)
{
	int64_t stride = (int64_t)gridDim.x * blockDim.x;
	for (int64_t m = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; m < n; m += stride) {
		int64_t l = logical[m], page = l / rpp;
		out[m] = l < 0 || page >= P ? -1 : (int32_t)((int64_t)pt[page] * rpp + l % rpp);
	}
}
