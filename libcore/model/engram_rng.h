/* engram_rng.h: a bit-exact port of NumPy's default_rng(seed) for the one
 * use Engram has for it: the per-layer hash multipliers, drawn in Python as
 * numpy.random.default_rng(10007 * layer).integers(0, B, M, dtype=int64).
 *
 * The chain is NumPy's (1.17 and later, unchanged through 2.x):
 * SeedSequence (O'Neill's seed_seq variant: the integer seed as 32-bit
 * words, mixed into a pool of 4 words, expanded to 4 u64 words) seeds a
 * PCG64 (128-bit LCG, XSL-RR output; the first two words are the state,
 * the last two the stream), and Generator.integers draws with Lemire's
 * multiply-and-reject (not the masked rejection of the legacy RandomState),
 * through the buffered 32-bit output when the range fits 32 bits.
 *
 * Not for anything else: it is a reproduction, not a general generator
 * (base/rng.h is that). Thread safety: a tf_engram_rng is used by one
 * thread at a time. */
#ifndef TF_MODEL_ENGRAM_RNG_H
#define TF_MODEL_ENGRAM_RNG_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* PCG64 state, with NumPy's carried half of a 64-bit draw for 32-bit
 * outputs. */
struct tf_engram_rng {
	unsigned __int128 state;
	unsigned __int128 inc;
	uint32_t half;     /* the upper 32 bits of the last 64-bit draw */
	int has_half;
};

/* SeedSequence(entropy).pool: mix n 32-bit entropy words into 4 words. */
void tf_engram_rng_pool(const uint32_t *entropy, size_t n, uint32_t pool[4]);

/* SeedSequence.generate_state(n, uint32) from a pool: n words. (The u64
 * form is these words paired little-endian.) */
void tf_engram_rng_state_words(const uint32_t pool[4], uint32_t *out, size_t n);

/* default_rng(seed) for a non-negative integer seed: SeedSequence(seed)
 * then PCG64. */
void tf_engram_rng_seed(struct tf_engram_rng *r, uint64_t seed);

/* PCG64.random_raw(): the next 64-bit output. */
uint64_t tf_engram_rng_next64(struct tf_engram_rng *r);

/* The next 32-bit output (NumPy's buffered halves: low half first). */
uint32_t tf_engram_rng_next32(struct tf_engram_rng *r);

/* Generator.integers(low, high, n, dtype=int64): n draws in [low, high)
 * into out. TF_ERR_ARG when high <= low. */
tf_status tf_engram_rng_integers(struct tf_engram_rng *r, int64_t low, int64_t high, size_t n,
				 int64_t *out);

#endif
