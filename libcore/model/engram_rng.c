/* engram_rng.c: NumPy's SeedSequence, PCG64 and bounded int64 draws,
 * reproduced bit for bit (see engram_rng.h for why and what). */
#include "model/engram_rng.h"

/* SeedSequence constants (NumPy bit_generator.pyx). */
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_L 0xca01f9ddu
#define SS_MIX_R 0x4973f715u
#define SS_XSHIFT 16
#define SS_POOL 4

/* PCG64's 128-bit LCG multiplier. */
#define PCG_MULT_HI 2549297995355413924ULL
#define PCG_MULT_LO 4865540595714422341ULL

static uint32_t hashmix(uint32_t v, uint32_t *k)
{
	v ^= *k;
	*k *= SS_MULT_A;
	v *= *k;
	return v ^ (v >> SS_XSHIFT);
}

static uint32_t mix(uint32_t x, uint32_t y)
{
	uint32_t r = SS_MIX_L * x - SS_MIX_R * y;
	return r ^ (r >> SS_XSHIFT);
}

void tf_engram_rng_pool(const uint32_t *entropy, size_t n, uint32_t pool[4])
{
	uint32_t k = SS_INIT_A;
	for (size_t i = 0; i < SS_POOL; i++)
		pool[i] = hashmix(i < n ? entropy[i] : 0, &k);
	for (size_t src = 0; src < SS_POOL; src++)
		for (size_t dst = 0; dst < SS_POOL; dst++)
			if (src != dst)
				pool[dst] = mix(pool[dst], hashmix(pool[src], &k));
	for (size_t src = SS_POOL; src < n; src++)
		for (size_t dst = 0; dst < SS_POOL; dst++)
			pool[dst] = mix(pool[dst], hashmix(entropy[src], &k));
}

void tf_engram_rng_state_words(const uint32_t pool[4], uint32_t *out, size_t n)
{
	uint32_t k = SS_INIT_B;
	for (size_t i = 0; i < n; i++) {
		uint32_t v = pool[i % SS_POOL] ^ k;
		k *= SS_MULT_B;
		v *= k;
		out[i] = v ^ (v >> SS_XSHIFT);
	}
}

static void pcg_step(struct tf_engram_rng *r)
{
	const unsigned __int128 mult = ((unsigned __int128)PCG_MULT_HI << 64) | PCG_MULT_LO;
	r->state = r->state * mult + r->inc;
}

void tf_engram_rng_seed(struct tf_engram_rng *r, uint64_t seed)
{
	/* The seed as little-endian 32-bit words, as many as it needs (one for
	 * zero). */
	uint32_t ent[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
	uint32_t pool[SS_POOL], w[8];
	tf_engram_rng_pool(ent, seed >> 32 ? 2 : 1, pool);
	tf_engram_rng_state_words(pool, w, 8);
	uint64_t v[4];
	for (int i = 0; i < 4; i++)
		v[i] = (uint64_t)w[2 * i] | (uint64_t)w[2 * i + 1] << 32;
	/* PCG64: v[0]:v[1] (high:low) is the initial state, v[2]:v[3] the
	 * stream; pcg's srandom: inc = stream<<1|1, step, add state, step. */
	unsigned __int128 init = (unsigned __int128)v[0] << 64 | v[1];
	unsigned __int128 seq = (unsigned __int128)v[2] << 64 | v[3];
	r->state = 0;
	r->inc = seq << 1 | 1;
	pcg_step(r);
	r->state += init;
	pcg_step(r);
	r->has_half = 0;
	r->half = 0;
}

uint64_t tf_engram_rng_next64(struct tf_engram_rng *r)
{
	/* NumPy steps first, then outputs the new state (XSL-RR). */
	pcg_step(r);
	uint64_t hi = (uint64_t)(r->state >> 64), lo = (uint64_t)r->state;
	unsigned rot = (unsigned)(hi >> 58);
	uint64_t x = hi ^ lo;
	return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t tf_engram_rng_next32(struct tf_engram_rng *r)
{
	if (r->has_half) {
		r->has_half = 0;
		return r->half;
	}
	uint64_t v = tf_engram_rng_next64(r);
	r->has_half = 1;
	r->half = (uint32_t)(v >> 32);
	return (uint32_t)v;
}

/* Lemire's nearly-divisionless draw in [0, rng] for rng < 2^32 - 1. */
static uint32_t lemire32(struct tf_engram_rng *r, uint32_t rng)
{
	uint32_t excl = rng + 1;
	uint64_t m = (uint64_t)tf_engram_rng_next32(r) * excl;
	uint32_t left = (uint32_t)m;
	if (left < excl) {
		uint32_t threshold = (UINT32_MAX - rng) % excl;
		while (left < threshold) {
			m = (uint64_t)tf_engram_rng_next32(r) * excl;
			left = (uint32_t)m;
		}
	}
	return (uint32_t)(m >> 32);
}

/* The same in [0, rng] for 2^32 <= rng < 2^64 - 1. */
static uint64_t lemire64(struct tf_engram_rng *r, uint64_t rng)
{
	uint64_t excl = rng + 1;
	unsigned __int128 m = (unsigned __int128)tf_engram_rng_next64(r) * excl;
	uint64_t left = (uint64_t)m;
	if (left < excl) {
		uint64_t threshold = (UINT64_MAX - rng) % excl;
		while (left < threshold) {
			m = (unsigned __int128)tf_engram_rng_next64(r) * excl;
			left = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}

tf_status tf_engram_rng_integers(struct tf_engram_rng *r, int64_t low, int64_t high, size_t n,
				 int64_t *out)
{
	if (high <= low)
		return tf_err(TF_ERR_ARG, "integers: high %lld <= low %lld", (long long)high,
			      (long long)low);
	/* NumPy works on the closed range [low, high-1] as off + [0, rng]. */
	uint64_t off = (uint64_t)low, rng = (uint64_t)(high - 1) - (uint64_t)low;
	for (size_t i = 0; i < n; i++) {
		uint64_t v;
		if (rng == 0)
			v = 0;
		else if (rng < UINT32_MAX)
			v = lemire32(r, (uint32_t)rng);
		else if (rng == UINT32_MAX)
			v = tf_engram_rng_next32(r);
		else if (rng == UINT64_MAX)
			v = tf_engram_rng_next64(r);
		else
			v = lemire64(r, rng);
		out[i] = (int64_t)(off + v);
	}
	return TF_OK;
}
