/* exl3_tile.c: the EXL3 codebooks and the tail-biting trellis decoder of
 * one 16×16 tile.
 *
 * Facts (exl3-format.md, verified there bit for bit against exllamav3's
 * device code; cross-read with turboderp-org/exllamav3):
 * - §2 bit order: stream word m is tile word m XOR 1, its MSB first
 *   (exllamav3_ext/quant/pack.cu pack_trellis_kernel stores with SWAP16;
 *   exl3_dq.cuh reads the lower-index u32 as the high half).
 * - §2 state t = the 16 stream bits ending at bit (t+1)·b − 1, mod 256·b
 *   (exl3_dq.cuh dq(): start bit t·b + b − 16, wrapping): tail-biting.
 * - §3 stream position → (row, column): tensor_core_perm in
 *   exl3_lib/quantize.py (the mma m16n8k16 B fragment); tf_exl3_tile_pos.
 *   Re-read for this file at turboderp-org/exllamav3 commit 07b8a2e0
 *   (modules/quant/exl3_lib/quantize.py): for lane t in 0..31, r0 =
 *   (t % 4)·2, c0 = t / 4, and entries 8t..8t+7 are (r0,c0) (r0+1,c0)
 *   (r0+8,c0) (r0+9,c0) (r0,c0+8) (r0+1,c0+8) (r0+8,c0+8) (r0+9,c0+8); the
 *   same file gives codebook_scale 1.24371088 and the MCG/MUL1 multipliers.
 * - §4 codebooks: exllamav3_ext/quant/codebook.cuh decode_3inst<cb>.
 *
 * The table form (65536 floats per codebook, 256 KiB, built once) is what
 * the GEMV uses; tf_exl3_cb_decode is the arithmetic it is built from. */
#include <pthread.h>
#include <stdlib.h>

#include "base/f16.h"
#include "model/exl3.h"
#include "model/exl3_int.h"

/* Sum two fp16 halves as the device's __hadd does: round to nearest even
 * once. Both halves have exponent field 12..15 after the mask (|h| in
 * [0.125, 2)), so their float sum is exact and one rounding matches (§4). */
static uint16_t half_sum(uint32_t x)
{
	float lo = tf_f16_to_f32((uint16_t)(x & 0xffff));
	float hi = tf_f16_to_f32((uint16_t)(x >> 16));
	return tf_f32_to_f16(lo + hi);
}

uint16_t tf_exl3_cb_decode(enum tf_exl3_cb cb, uint16_t state)
{
	uint32_t s = state, x;
	switch (cb) {
	case TF_EXL3_CB_MCG:
		x = s * 0xCBAC1FEDu;
		return half_sum((x & 0x8FFF8FFFu) ^ 0x3B603B60u);
	case TF_EXL3_CB_MUL1: {
		/* dp4a byte sum into the fp16 0x6400 + t = 1024 + t, then one
		 * hfma with k = fp16 0x1EEE and c = fp16 0xC931; h·k + c is exact
		 * in float (multiples of 2^-18 below 2^4), so one rounding. */
		x = s * 0x83DCD12Du;
		uint32_t t = (x & 0xff) + ((x >> 8) & 0xff) + ((x >> 16) & 0xff) + (x >> 24);
		float h = (float)(1024 + t);
		return tf_f32_to_f16(h * tf_f16_to_f32(0x1EEE) + tf_f16_to_f32(0xC931));
	}
	case TF_EXL3_CB_3INST:
	default:
		/* lop3 with LUT 0x6A is (a & b) ^ c. */
		x = s * 89226354u + 64248484u;
		return half_sum((x & 0x8FFF8FFFu) ^ 0x3B603B60u);
	}
}

static float *tables[3];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_build(void)
{
	/* One allocation for all three; on failure the tables stay NULL and
	 * tf_exl3_cb_table aborts (there is no way to serve without it). */
	float *t = malloc(sizeof(float) * 3 * 65536);
	if (!t)
		return;
	for (int cb = 0; cb < 3; cb++) {
		for (uint32_t s = 0; s < 65536; s++)
			t[cb * 65536 + s] = tf_f16_to_f32(tf_exl3_cb_decode((enum tf_exl3_cb)cb, (uint16_t)s));
		tables[cb] = t + cb * 65536;
	}
}

const float *tf_exl3_cb_table(enum tf_exl3_cb cb)
{
	pthread_once(&tables_once, tables_build);
	if (!tables[0])
		return NULL; /* out of memory for the 768 KiB: the caller reports it */
	return tables[(unsigned)cb < 3 ? cb : 0];
}

/* The tile's stream in order with one wrapped word on each side:
 * ext[0] = stream word 16b−1, ext[1 + m] = stream word m, ext[16b + 1] =
 * stream word 0. The window of state t (stream bits (t+1)b−16 ..) starts at
 * ext bit (t+1)·b, so it never needs a modulo. */
static void stream_ext(const uint16_t *tile, uint32_t bits, uint16_t *ext)
{
	unsigned n = 16 * bits;
	ext[0] = tile[(n - 1) ^ 1];
	for (unsigned m = 0; m < n; m++)
		ext[1 + m] = tile[m ^ 1];
	ext[n + 1] = tile[1];
}

static inline uint32_t ext_state(const uint16_t *ext, unsigned p)
{
	unsigned q = p >> 4;
	uint32_t w = (uint32_t)ext[q] << 16 | ext[q + 1];
	return (w >> (16 - (p & 15))) & 0xffff;
}

uint16_t tf_exl3_tile_state(const uint16_t *tile, uint32_t bits, unsigned t)
{
	/* bit(p) and state(t) exactly as written in §2. */
	unsigned len = 256 * bits, s = 0;
	for (unsigned j = 0; j < 16; j++) {
		unsigned p = ((t + 1) * bits + len - 16 + j) % len;
		unsigned w = tile[(p >> 4) ^ 1];
		s = (s << 1) | ((w >> (15 - (p & 15))) & 1);
	}
	return (uint16_t)s;
}

uint8_t tf_exl3_tile_code(const uint16_t *tile, uint32_t bits, unsigned t)
{
	return (uint8_t)(tf_exl3_tile_state(tile, bits, t) & ((1u << bits) - 1));
}

void tf_exl3_tile_decode(const uint16_t *tile, uint32_t bits, enum tf_exl3_cb cb,
			 uint16_t out[256])
{
	uint16_t ext[16 * 8 + 2];
	stream_ext(tile, bits, ext);
	for (unsigned t = 0; t < 256; t++)
		out[tf_exl3_tile_pos(t)] = tf_exl3_cb_decode(cb, (uint16_t)ext_state(ext, (t + 1) * bits));
}

void tf_exl3_tile_decode_f32(const uint16_t *tile, uint32_t bits, enum tf_exl3_cb cb,
			     float out[256])
{
	if (exl3_avx2_ok()) {
		float w[256] __attribute__((aligned(32)));
		exl3_avx2_tile_stream(tile, bits, cb, w);
		for (unsigned t = 0; t < 256; t++)
			out[tf_exl3_tile_pos(t)] = w[t];
		return;
	}
	exl3_tile_f32_table(tile, bits, cb, out);
}

void exl3_tile_f32_table(const uint16_t *tile, uint32_t bits, enum tf_exl3_cb cb, float out[256])
{
	const float *tab = tf_exl3_cb_table(cb);
	uint16_t ext[16 * 8 + 2];
	stream_ext(tile, bits, ext);
	/* Eight consecutive t land in rows {0,1,8,9}+2l' and columns
	 * {c, c+8}: walk l and j with the row/column arithmetic unrolled. */
	unsigned p = bits;
	for (unsigned l = 0; l < 32; l++) {
		float *o = out + (2 * (l & 3)) * 16 + (l >> 2);
		o[0] = tab[ext_state(ext, p)];
		o[16] = tab[ext_state(ext, p + bits)];
		o[128] = tab[ext_state(ext, p + 2 * bits)];
		o[144] = tab[ext_state(ext, p + 3 * bits)];
		o[8] = tab[ext_state(ext, p + 4 * bits)];
		o[24] = tab[ext_state(ext, p + 5 * bits)];
		o[136] = tab[ext_state(ext, p + 6 * bits)];
		o[152] = tab[ext_state(ext, p + 7 * bits)];
		p += 8 * bits;
	}
}

void tf_exl3_decode(const struct tf_exl3_geom *g, const uint16_t *trellis, uint16_t *What)
{
	size_t kt = g->k / 16, nt = g->n / 16, tw = tf_exl3_tile_words(g->bits);
	uint16_t tile[256];
	for (size_t i = 0; i < kt; i++)
		for (size_t j = 0; j < nt; j++) {
			tf_exl3_tile_decode(trellis + (i * nt + j) * tw, g->bits, g->cb, tile);
			for (unsigned r = 0; r < 16; r++)
				for (unsigned c = 0; c < 16; c++)
					What[(i * 16 + r) * g->n + j * 16 + c] = tile[r * 16 + c];
		}
}
