/* engram_layout.h: the shape of DeepSeek-V4.1's Engram tables: which
 * layers have them, the prime bucket size and row offset of each of a
 * layer's hash columns, and the per-layer hash multipliers.
 *
 * A layer has (max_ngram - 1) * heads columns (24 in the release): column
 * (n - 2) * heads + h holds head h of n-grams of order n = 2..max_ngram.
 * Each column's bucket count is a prime: walking layers, then orders, then
 * heads, a search restarts at vocab - 1 for every (layer, order) and each
 * head takes the next prime above the last one that no earlier column of
 * any layer took. A column's rows start at the exclusive prefix sum of the
 * primes before it in its layer, so a layer's primes add up to its table's
 * row count (config engram_num_embeddings).
 *
 * Multipliers: 2 r + 1 for r = numpy.random.default_rng(10007 * layer)
 * .integers(0, max(1, (INT64_MAX / compressed) / 2), max_ngram, int64),
 * where compressed is the token map's size (engram_rng.h ports NumPy).
 *
 * Everything here is pure computation on caller storage; thread safe. */
#ifndef TF_MODEL_ENGRAM_LAYOUT_H
#define TF_MODEL_ENGRAM_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "model/config.h"

#define TF_ENGRAM_MAX_LAYERS TF_CONFIG_MAX_ENGRAM
#define TF_ENGRAM_MAX_NGRAM 8   /* orders 2..8 */
#define TF_ENGRAM_MAX_COLS 64   /* (max_ngram - 1) * heads */
#define TF_ENGRAM_MULT_SEED 10007

/* Check what this module needs of a config's Engram settings: 1..8
 * layers, distinct ids, 2 <= max_ngram <= 8, columns <= 64, 2 <= vocab <=
 * 2^40. TF_ERR_CONFIG naming the field. */
tf_status tf_engram_config_check(const struct tf_config *c);

struct tf_engram_layout {
	uint32_t nlayers, max_ngram, heads, cols;
	uint32_t layer_ids[TF_ENGRAM_MAX_LAYERS];
	int64_t prime[TF_ENGRAM_MAX_LAYERS][TF_ENGRAM_MAX_COLS];  /* bucket count */
	int64_t offset[TF_ENGRAM_MAX_LAYERS][TF_ENGRAM_MAX_COLS]; /* first row */
	uint64_t rows[TF_ENGRAM_MAX_LAYERS];                      /* sum of primes */
};

/* Primes and offsets for a config's Engram layers (multipliers are
 * separate: they depend on the token map). When c->engram_rows[l]
 * (engram_num_embeddings) is non-zero it must equal the layer's row count,
 * else TF_ERR_CONFIG naming both. */
tf_status tf_engram_layout_init(struct tf_engram_layout *lay, const struct tf_config *c);

/* The row range [lo, hi) of columns [c0, c1) of layer index l (layer-local
 * rows; c0 == c1 gives an empty range at offset c0). */
void tf_engram_layout_span(const struct tf_engram_layout *lay, uint32_t l, uint32_t c0,
			   uint32_t c1, uint64_t *lo, uint64_t *hi);

/* The columns [c0, c1) a tensor-parallel rank owns: part = ceil(cols /
 * world), c0 = min(rank * part, cols), c1 = min(c0 + part, cols). */
void tf_engram_rank_cols(uint32_t cols, uint32_t rank, uint32_t world, uint32_t *c0, uint32_t *c1);

/* The n multipliers of a layer for a map of `compressed` ids. */
void tf_engram_multipliers(uint32_t layer_id, uint32_t compressed, uint32_t n, int64_t *out);

/* Deterministic primality for every 64-bit n (trial division, then
 * Miller-Rabin with the seven bases known to decide all n < 2^64). */
bool tf_engram_is_prime(uint64_t n);

#endif
