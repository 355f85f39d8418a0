/* f16.h: IEEE half (fp16) and bfloat16 conversions, round-to-nearest-even,
 * NaN kept quiet. Header-only: these sit in inner loops. */
#ifndef TF_BASE_F16_H
#define TF_BASE_F16_H

#include <stdint.h>
#include <string.h>

static inline float tf_bits_f32(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

static inline uint32_t tf_f32_bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

static inline float tf_bf16_to_f32(uint16_t h)
{
	return tf_bits_f32((uint32_t)h << 16);
}

static inline uint16_t tf_f32_to_bf16(float f)
{
	uint32_t u = tf_f32_bits(f);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40);
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* Round a float to bf16 precision and back. */
static inline float tf_round_bf16(float f)
{
	return tf_bf16_to_f32(tf_f32_to_bf16(f));
}

static inline float tf_f16_to_f32(uint16_t h)
{
	uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
	if (e == 0x1f)
		return tf_bits_f32(s | 0x7f800000u | (m << 13));
	if (e == 0) {
		if (!m)
			return tf_bits_f32(s);
		/* subnormal: m * 2^-24 */
		float v = (float)m * 5.9604644775390625e-8f;
		return s ? -v : v;
	}
	return tf_bits_f32(s | ((e + 112) << 23) | (m << 13));
}

static inline uint16_t tf_f32_to_f16(float f)
{
	uint32_t u = tf_f32_bits(f), s = (u >> 16) & 0x8000;
	uint32_t a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00 | ((a >> 13) & 0x3ff));
	if (a >= 0x477ff000u) /* rounds to >= 65520: infinity */
		return (uint16_t)(s | 0x7c00);
	if (a < 0x38800000u) { /* below the smallest normal: subnormal or zero */
		float v = tf_bits_f32(a) * 16777216.0f; /* in units of 2^-24 */
		uint32_t m = (uint32_t)v;
		float r = v - (float)m;
		if (r > 0.5f || (r == 0.5f && (m & 1)))
			m++;
		return (uint16_t)(s | m);
	}
	uint32_t e = (a >> 23) - 112, m = a & 0x7fffff;
	uint32_t h = (e << 10) | (m >> 13), rest = m & 0x1fff;
	if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
		h++;
	return (uint16_t)(s | h);
}

static inline float tf_round_f16(float f)
{
	return tf_f16_to_f32(tf_f32_to_f16(f));
}

#endif
