/* rng.c: xoshiro256** seeded with splitmix64. */
#include "base/rng.h"

#include <math.h>

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void tf_rng_seed(struct tf_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t tf_rng_u64(struct tf_rng *r)
{
	uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

uint64_t tf_rng_below(struct tf_rng *r, uint64_t n)
{
	uint64_t lim = UINT64_MAX - UINT64_MAX % n, v;
	do
		v = tf_rng_u64(r);
	while (v >= lim);
	return v % n;
}

float tf_rng_f32(struct tf_rng *r)
{
	return (float)(tf_rng_u64(r) >> 40) * (1.0f / 16777216.0f);
}

float tf_rng_normal(struct tf_rng *r)
{
	float u = tf_rng_f32(r), v = tf_rng_f32(r);
	if (u < 1e-7f)
		u = 1e-7f;
	return sqrtf(-2.0f * logf(u)) * cosf(6.2831853f * v);
}
