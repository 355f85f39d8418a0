/* engram_rows.c: E4M3 + UE8M0 rows to bf16 (rules in engram_rows.h). */
#include "model/engram_rows.h"

#include <math.h>
#include <pthread.h>

#include "base/f16.h"

static uint16_t lut[65536];
static pthread_once_t lut_once = PTHREAD_ONCE_INIT;

float tf_engram_e4m3_to_f32(uint8_t b)
{
	int e = (b >> 3) & 15, m = b & 7;
	float v;
	if (e == 15 && m == 7)
		v = NAN;
	else if (e)
		v = ldexpf((float)(8 + m), e - 10);
	else
		v = ldexpf((float)m, -9);
	return b & 0x80 ? -v : v;
}

uint8_t tf_engram_f32_to_e4m3(float f)
{
	if (isnan(f))
		return 0x7f;
	uint8_t sign = signbit(f) ? 0x80 : 0;
	float a = fabsf(f);
	if (a >= 464.0f) /* halfway between 448 and the (absent) 480 */
		return sign | 0x7e;
	if (a < 0.015625f) /* below 2^-6: subnormal steps of 2^-9 */
		return sign | (uint8_t)nearbyintf(a * 512.0f); /* 8 becomes 0x08 = 2^-6 */
	int e;
	frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1): exponent e - 1 */
	int biased = e - 1 + 7;
	int mant = (int)nearbyintf((ldexpf(a, 1 - e) - 1.0f) * 8.0f);
	if (mant == 8) {
		mant = 0;
		biased++;
	}
	if (biased > 15 || (biased == 15 && mant == 7))
		return sign | 0x7e;
	return (uint8_t)(sign | biased << 3 | mant);
}

static void lut_build(void)
{
	for (int s = 0; s < 256; s++)
		for (int b = 0; b < 256; b++) {
			uint16_t v = 0;
			if (s) {
				/* exact in float: 4 significant bits, exponents >= -135 */
				float f = (float)ldexp((double)tf_engram_e4m3_to_f32((uint8_t)b), s - 127);
				v = tf_f32_to_bf16(f);
			}
			lut[s << 8 | b] = v;
		}
}

const uint16_t *tf_engram_lut(void)
{
	pthread_once(&lut_once, lut_build);
	return lut;
}

void tf_engram_rows_decode(const uint8_t *raw, size_t n, uint16_t *out)
{
	const uint16_t *t = tf_engram_lut();
	for (size_t r = 0; r < n; r++) {
		const uint8_t *row = raw + r * TF_ENGRAM_ROW_BYTES;
		const uint8_t *scale = row + TF_ENGRAM_ROW_VALUES;
		uint16_t *o = out + r * TF_ENGRAM_ROW_VALUES;
		for (int b = 0; b < TF_ENGRAM_ROW_VALUES / TF_ENGRAM_ROW_BLOCK; b++) {
			const uint16_t *ts = t + ((size_t)scale[b] << 8);
			for (int i = 0; i < TF_ENGRAM_ROW_BLOCK; i++)
				o[b * TF_ENGRAM_ROW_BLOCK + i] = ts[row[b * TF_ENGRAM_ROW_BLOCK + i]];
		}
	}
}

void tf_engram_row_encode(const float *v, uint8_t *row)
{
	for (int b = 0; b < TF_ENGRAM_ROW_VALUES / TF_ENGRAM_ROW_BLOCK; b++) {
		const float *x = v + b * TF_ENGRAM_ROW_BLOCK;
		float amax = 0;
		for (int i = 0; i < TF_ENGRAM_ROW_BLOCK; i++)
			if (fabsf(x[i]) > amax)
				amax = fabsf(x[i]);
		int s = 0;
		if (amax > 0 && isfinite(amax)) {
			int e = (int)ceil(log2((double)amax / 448.0));
			s = e + 127;
			while (s < 254 && ldexp((double)amax, 127 - s) > 448.0)
				s++;
			if (s < 1)
				s = 1;
			if (s > 254)
				s = 254;
		}
		row[TF_ENGRAM_ROW_VALUES + b] = (uint8_t)s;
		for (int i = 0; i < TF_ENGRAM_ROW_BLOCK; i++)
			row[b * TF_ENGRAM_ROW_BLOCK + i] =
				s ? tf_engram_f32_to_e4m3((float)ldexp((double)x[i], 127 - s)) : 0;
	}
}
