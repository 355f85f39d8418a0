/* engram_layout.c: Engram prime buckets, row offsets and multipliers (see
 * engram_layout.h for the rules). */
#include "model/engram_layout.h"

#include <string.h>

#include "model/engram_rng.h"

tf_status tf_engram_config_check(const struct tf_config *c)
{
	if (c->n_engram < 1 || c->n_engram > TF_ENGRAM_MAX_LAYERS)
		return tf_err(TF_ERR_CONFIG, "engram_layer_ids: %u layers (1..%d allowed)",
			      c->n_engram, TF_ENGRAM_MAX_LAYERS);
	for (uint32_t i = 0; i < c->n_engram; i++)
		for (uint32_t j = 0; j < i; j++)
			if (c->engram_layers[i] == c->engram_layers[j])
				return tf_err(TF_ERR_CONFIG, "engram_layer_ids: layer %u twice",
					      c->engram_layers[i]);
	if (c->engram_max_ngram < 2 || c->engram_max_ngram > TF_ENGRAM_MAX_NGRAM)
		return tf_err(TF_ERR_CONFIG, "engram_max_ngram_size %u: not in 2..%d",
			      c->engram_max_ngram, TF_ENGRAM_MAX_NGRAM);
	if (c->engram_heads < 1 ||
	    (uint64_t)(c->engram_max_ngram - 1) * c->engram_heads > TF_ENGRAM_MAX_COLS)
		return tf_err(TF_ERR_CONFIG, "engram_n_heads %u: more than %d columns",
			      c->engram_heads, TF_ENGRAM_MAX_COLS);
	if (c->engram_vocab < 2 || c->engram_vocab > (1ULL << 40))
		return tf_err(TF_ERR_CONFIG, "engram_vocab_size %llu: not in 2..2^40",
			      (unsigned long long)c->engram_vocab);
	return TF_OK;
}

static uint64_t mulmod(uint64_t a, uint64_t b, uint64_t m)
{
	return (uint64_t)((unsigned __int128)a * b % m);
}

static uint64_t powmod(uint64_t b, uint64_t e, uint64_t m)
{
	uint64_t r = 1;
	b %= m;
	while (e) {
		if (e & 1)
			r = mulmod(r, b, m);
		b = mulmod(b, b, m);
		e >>= 1;
	}
	return r;
}

bool tf_engram_is_prime(uint64_t n)
{
	static const uint64_t small[] = {2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37};
	if (n < 2)
		return false;
	for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
		if (n == small[i])
			return true;
		if (n % small[i] == 0)
			return false;
	}
	if (n < 41 * 41)
		return true;
	uint64_t d = n - 1;
	int s = 0;
	while (!(d & 1)) {
		d >>= 1;
		s++;
	}
	/* Jim Sinclair's bases: a strong-probable-prime test to all seven
	 * decides primality for every n < 2^64. */
	static const uint64_t bases[] = {2, 325, 9375, 28178, 450775, 9780504, 1795265022};
	for (size_t i = 0; i < sizeof(bases) / sizeof(bases[0]); i++) {
		uint64_t a = bases[i] % n;
		if (a == 0)
			continue;
		uint64_t x = powmod(a, d, n);
		if (x == 1 || x == n - 1)
			continue;
		int r;
		for (r = 1; r < s; r++) {
			x = mulmod(x, x, n);
			if (x == n - 1)
				break;
		}
		if (r == s)
			return false;
	}
	return true;
}

tf_status tf_engram_layout_init(struct tf_engram_layout *lay, const struct tf_config *c)
{
	tf_status st = tf_engram_config_check(c);
	if (st)
		return st;
	memset(lay, 0, sizeof(*lay));
	lay->nlayers = c->n_engram;
	lay->max_ngram = c->engram_max_ngram;
	lay->heads = c->engram_heads;
	lay->cols = (c->engram_max_ngram - 1) * c->engram_heads;
	memcpy(lay->layer_ids, c->engram_layers, sizeof(lay->layer_ids));

	/* Every prime taken so far, by any layer: at most 8 * 64. */
	uint64_t used[TF_ENGRAM_MAX_LAYERS * TF_ENGRAM_MAX_COLS];
	size_t nused = 0;
	for (uint32_t l = 0; l < c->n_engram; l++) {
		for (uint32_t n = 2; n <= c->engram_max_ngram; n++) {
			uint64_t cur = c->engram_vocab - 1;
			for (uint32_t h = 0; h < c->engram_heads; h++) {
				uint64_t q = cur + 1;
				for (;; q++) {
					if (!tf_engram_is_prime(q))
						continue;
					size_t i = 0;
					while (i < nused && used[i] != q)
						i++;
					if (i == nused)
						break;
				}
				used[nused++] = q;
				cur = q;
				lay->prime[l][(n - 2) * c->engram_heads + h] = (int64_t)q;
			}
		}
		uint64_t sum = 0;
		for (uint32_t k = 0; k < lay->cols; k++) {
			lay->offset[l][k] = (int64_t)sum;
			sum += (uint64_t)lay->prime[l][k];
		}
		lay->rows[l] = sum;
		if (c->engram_rows[l] && c->engram_rows[l] != sum)
			return tf_err(TF_ERR_CONFIG,
				      "engram layer %u: primes sum to %llu rows, config "
				      "engram_num_embeddings says %llu",
				      c->engram_layers[l], (unsigned long long)sum,
				      (unsigned long long)c->engram_rows[l]);
	}
	return TF_OK;
}

void tf_engram_layout_span(const struct tf_engram_layout *lay, uint32_t l, uint32_t c0,
			   uint32_t c1, uint64_t *lo, uint64_t *hi)
{
	*lo = c0 < lay->cols ? (uint64_t)lay->offset[l][c0] : lay->rows[l];
	*hi = c1 < lay->cols ? (uint64_t)lay->offset[l][c1] : lay->rows[l];
	if (c1 <= c0)
		*hi = *lo;
}

void tf_engram_rank_cols(uint32_t cols, uint32_t rank, uint32_t world, uint32_t *c0, uint32_t *c1)
{
	if (world < 1)
		world = 1;
	uint32_t part = (cols + world - 1) / world;
	uint64_t a = (uint64_t)rank * part, b = a + part;
	*c0 = (uint32_t)(a < cols ? a : cols);
	*c1 = (uint32_t)(b < cols ? b : cols);
}

void tf_engram_multipliers(uint32_t layer_id, uint32_t compressed, uint32_t n, int64_t *out)
{
	int64_t bound = compressed ? (INT64_MAX / compressed) / 2 : INT64_MAX / 2;
	if (bound < 1)
		bound = 1;
	struct tf_engram_rng r;
	tf_engram_rng_seed(&r, (uint64_t)TF_ENGRAM_MULT_SEED * layer_id);
	tf_engram_rng_integers(&r, 0, bound, n, out);
	for (uint32_t i = 0; i < n; i++)
		out[i] = (int64_t)((uint64_t)out[i] * 2 + 1);
}
