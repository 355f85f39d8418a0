/* exl3_enc.c: writing EXL3 tiles from codes, and synthetic layers.
 *
 * Facts (exl3-format.md §7): code t goes MSB first at stream bit t·b and
 * stream word m is stored at tile index m XOR 1, the inverse of §2; this is
 * what exllamav3_ext/quant/pack.cu pack_trellis_kernel does with the low b
 * bits of each state it is given. Every bit pattern is a valid tail-biting
 * path (tests/test_reconstruct_had.py fills the trellis with randint), so
 * random words make a valid layer. Scales for unit-RMS output: suh =
 * ±1/(rms_cb·√K), svh = ±1 (§7). Not a quantiser. */
#include <math.h>
#include <string.h>

#include "base/f16.h"
#include "model/exl3.h"

void tf_exl3_tile_encode(const uint8_t codes[256], uint32_t bits, uint16_t *tile)
{
	uint16_t s[16 * 8];
	unsigned n = 16 * bits;
	memset(s, 0, sizeof(s));
	for (unsigned t = 0; t < 256; t++)
		for (unsigned i = 0; i < bits; i++) {
			unsigned p = t * bits + i, bit = (codes[t] >> (bits - 1 - i)) & 1;
			s[p >> 4] |= (uint16_t)(bit << (15 - (p & 15)));
		}
	for (unsigned m = 0; m < n; m++)
		tile[m ^ 1] = s[m];
}

void tf_exl3_synth(const struct tf_exl3_geom *g, struct tf_rng *rng, uint16_t *trellis,
		   uint16_t *suh, uint16_t *svh)
{
	size_t words = tf_exl3_trellis_bytes(g) / 2;
	for (size_t i = 0; i < words; i += 4) {
		uint64_t r = tf_rng_u64(rng);
		for (size_t j = 0; j < 4 && i + j < words; j++)
			trellis[i + j] = (uint16_t)(r >> (16 * j));
	}
	/* Measured RMS over all 65536 states (§4): 1.2437 for 3INST and MCG,
	 * 1.0003 for MUL1. */
	float rms = g->cb == TF_EXL3_CB_MUL1 ? 1.000312f : TF_EXL3_CB_RMS;
	uint16_t pos = tf_f32_to_f16(1.0f / (rms * sqrtf((float)g->k)));
	uint64_t r = 0;
	for (size_t k = 0; k < g->k; k++) {
		if (k % 64 == 0)
			r = tf_rng_u64(rng);
		suh[k] = (uint16_t)(pos | ((r >> (k % 64)) & 1) << 15);
	}
	for (size_t n = 0; n < g->n; n++) {
		if (n % 64 == 0)
			r = tf_rng_u64(rng);
		svh[n] = (uint16_t)(0x3C00 | ((r >> (n % 64)) & 1) << 15);
	}
}
