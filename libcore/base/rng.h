/* rng.h: a small, seeded, deterministic generator (xoshiro256**, seeded by
 * splitmix64) for synthetic data and tests. Not for secrets. */
#ifndef TF_BASE_RNG_H
#define TF_BASE_RNG_H

#include <stdint.h>

struct tf_rng {
	uint64_t s[4];
};

void tf_rng_seed(struct tf_rng *r, uint64_t seed);
uint64_t tf_rng_u64(struct tf_rng *r);
/* Uniform in [0, n) without modulo bias (n > 0). */
uint64_t tf_rng_below(struct tf_rng *r, uint64_t n);
/* Uniform float in [0, 1). */
float tf_rng_f32(struct tf_rng *r);
/* Standard normal (Box-Muller). */
float tf_rng_normal(struct tf_rng *r);

#endif
