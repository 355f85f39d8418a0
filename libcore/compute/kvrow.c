/* kvrow.c: the KV cache's row formats and their codecs (kvrow.h). */
#include "compute/kvrow.h"

#include <math.h>
#include <string.h>

#include "base/f16.h"
#include "model/engram_rows.h"

static const float e2m1_values[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

uint8_t tf_e2m1_encode(float x)
{
	uint8_t s = signbit(x) ? 8 : 0;
	float a = fabsf(x);
	if (!(a < 6.0f))
		return a != a ? 0 : s | 7;
	uint8_t best = 0;
	for (uint8_t c = 1; c < 8; c++) {
		float d = fabsf(a - e2m1_values[c]), bd = fabsf(a - e2m1_values[best]);
		if (d < bd || (d == bd && !(c & 1)))
			best = c; /* ties to the even code */
	}
	return s | best;
}

float tf_e2m1_decode(uint8_t c)
{
	float v = e2m1_values[c & 7];
	return c & 8 ? -v : v;
}

/* The power-of-two exponent e with amax / 2^e <= max_code. */
static int pow2_exponent(float amax, float max_code)
{
	return (int)ceil(log2((double)fmaxf(amax, 1e-4f) / max_code));
}

/* Scale bytes of nope values in groups of g (the last may be partial),
 * padded to 8: 7 scales and a pad for 448. */
static size_t scale_bytes(int nope, int g)
{
	return (size_t)((nope + g - 1) / g + 7) / 8 * 8;
}

size_t tf_kv_row_bytes(enum tf_kv_row_fmt fmt, int dim, int rope)
{
	int nope = dim - rope;
	switch (fmt) {
	case TF_KV_FP8:
		return (size_t)nope + 2 * (size_t)rope + scale_bytes(nope, 64);
	case TF_KV_FP4:
		return (size_t)(nope + 1) / 2 + 2 * (size_t)rope + scale_bytes(nope, 16);
	case TF_KV_BF16:
		return 2 * (size_t)dim;
	}
	return 0;
}

void tf_kv_row_encode(enum tf_kv_row_fmt fmt, const float *x, int dim, int rope, uint8_t *out)
{
	int nope = dim - rope;
	if (fmt == TF_KV_BF16) {
		for (int i = 0; i < dim; i++) {
			uint16_t h = tf_f32_to_bf16(x[i]);
			memcpy(out + 2 * i, &h, 2);
		}
		return;
	}
	int g = fmt == TF_KV_FP8 ? 64 : 16;
	float max_code = fmt == TF_KV_FP8 ? 448.0f : 6.0f;
	size_t vbytes = fmt == TF_KV_FP8 ? (size_t)nope : (size_t)(nope + 1) / 2;
	uint8_t *ropes = out + vbytes, *scales = ropes + 2 * rope;
	memset(scales, 0, scale_bytes(nope, g));
	if (fmt == TF_KV_FP4)
		memset(out, 0, vbytes);
	for (int k = 0; k * g < nope; k++) {
		int end = (k + 1) * g < nope ? (k + 1) * g : nope;
		float amax = 0;
		for (int i = k * g; i < end; i++)
			amax = fmaxf(amax, fabsf(x[i]));
		int e = pow2_exponent(amax, max_code);
		scales[k] = (uint8_t)(e + 127);
		for (int i = k * g; i < end; i++) {
			float v = ldexpf(x[i], -e);
			v = fminf(fmaxf(v, -max_code), max_code);
			if (fmt == TF_KV_FP8)
				out[i] = tf_engram_f32_to_e4m3(v);
			else
				out[i / 2] |= (uint8_t)(tf_e2m1_encode(v) << (i % 2 * 4));
		}
	}
	for (int i = 0; i < rope; i++) {
		uint16_t h = tf_f32_to_bf16(x[nope + i]);
		memcpy(ropes + 2 * i, &h, 2);
	}
}

void tf_kv_row_decode(enum tf_kv_row_fmt fmt, const uint8_t *in, int dim, int rope, float *x)
{
	int nope = dim - rope;
	uint16_t h;
	if (fmt == TF_KV_BF16) {
		for (int i = 0; i < dim; i++) {
			memcpy(&h, in + 2 * i, 2);
			x[i] = tf_bf16_to_f32(h);
		}
		return;
	}
	int g = fmt == TF_KV_FP8 ? 64 : 16;
	size_t vbytes = fmt == TF_KV_FP8 ? (size_t)nope : (size_t)(nope + 1) / 2;
	const uint8_t *ropes = in + vbytes, *scales = ropes + 2 * rope;
	for (int i = 0; i < nope; i++) {
		int e = (int)scales[i / g] - 127;
		float q = fmt == TF_KV_FP8 ? tf_engram_e4m3_to_f32(in[i])
					   : tf_e2m1_decode((uint8_t)(in[i / 2] >> (i % 2 * 4)));
		x[i] = ldexpf(q, e);
	}
	for (int i = 0; i < rope; i++) {
		memcpy(&h, ropes + 2 * i, 2);
		x[nope + i] = tf_bf16_to_f32(h);
	}
}

size_t tf_kv_ik_bytes(enum tf_kv_row_fmt fmt, int dim)
{
	return fmt == TF_KV_BF16 ? 2 * (size_t)dim : (size_t)dim + 4;
}

void tf_kv_ik_encode(enum tf_kv_row_fmt fmt, const float *x, int dim, uint8_t *out)
{
	if (fmt == TF_KV_BF16) {
		tf_kv_row_encode(TF_KV_BF16, x, dim, 0, out);
		return;
	}
	float amax = 0;
	for (int i = 0; i < dim; i++)
		amax = fmaxf(amax, fabsf(x[i]));
	int e = pow2_exponent(amax, 448.0f);
	for (int i = 0; i < dim; i++)
		out[i] = tf_engram_f32_to_e4m3(fminf(fmaxf(ldexpf(x[i], -e), -448.0f), 448.0f));
	uint32_t bits = tf_f32_bits(ldexpf(1.0f, e));
	for (int i = 0; i < 4; i++)
		out[dim + i] = (uint8_t)(bits >> (8 * i));
}

void tf_kv_ik_decode(enum tf_kv_row_fmt fmt, const uint8_t *in, int dim, float *x)
{
	if (fmt == TF_KV_BF16) {
		tf_kv_row_decode(TF_KV_BF16, in, dim, 0, x);
		return;
	}
	uint32_t bits = 0;
	for (int i = 0; i < 4; i++)
		bits |= (uint32_t)in[dim + i] << (8 * i);
	float scale = tf_bits_f32(bits);
	for (int i = 0; i < dim; i++)
		x[i] = tf_engram_e4m3_to_f32(in[i]) * scale;
}


size_t tf_rowfmt_bytes(const struct tf_rowfmt *f)
{
	return f->index_key ? tf_kv_ik_bytes(f->fmt, f->dim) : tf_kv_row_bytes(f->fmt, f->dim, f->rope);
}

void tf_rowfmt_encode(const struct tf_rowfmt *f, const float *x, uint8_t *out)
{
	if (f->index_key)
		tf_kv_ik_encode(f->fmt, x, f->dim, out);
	else
		tf_kv_row_encode(f->fmt, x, f->dim, f->rope, out);
}

void tf_rowfmt_decode(const struct tf_rowfmt *f, const uint8_t *in, float *x)
{
	if (f->index_key)
		tf_kv_ik_decode(f->fmt, in, f->dim, x);
	else
		tf_kv_row_decode(f->fmt, in, f->dim, f->rope, x);
}
