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

#define TF_ENGRAM_MAX_LAYERS 8
#define TF_ENGRAM_MAX_NGRAM 8   /* orders 2..8 */
#define TF_ENGRAM_MAX_COLS 64   /* (max_ngram - 1) * heads */
#define TF_ENGRAM_MULT_SEED 10007

/* The Engram settings of a model config (text_config keys in comments). */
struct tf_engram_params {
	uint32_t nlayers;                                 /* len(engram_layer_ids) */
	uint32_t layer_ids[TF_ENGRAM_MAX_LAYERS];         /* engram_layer_ids */
	uint64_t num_embeddings[TF_ENGRAM_MAX_LAYERS];    /* engram_num_embeddings; 0: unchecked */
	uint32_t max_ngram;                               /* engram_max_ngram_size (4) */
	uint32_t heads;                                   /* engram_n_heads (8) */
	uint64_t vocab;                                   /* engram_vocab_size (16e6): prime base */
	uint32_t head_dim;                                /* engram_head_dim (256) */
	uint32_t pad_id;                                  /* engram_pad_token_id (2) */
	uint32_t compressed_vocab;                        /* engram_compressed_vocab_size */
};

/* The release values (DeepSeek-V4.1-Flash). */
void tf_engram_params_release(struct tf_engram_params *p);

/* Check ranges and caps: 1..8 layers, distinct ids, 2 <= max_ngram <= 8,
 * columns <= 64, vocab >= 2. TF_ERR_CONFIG with the field named. */
tf_status tf_engram_params_check(const struct tf_engram_params *p);

struct tf_engram_layout {
	uint32_t nlayers, max_ngram, heads, cols;
	uint32_t layer_ids[TF_ENGRAM_MAX_LAYERS];
	int64_t prime[TF_ENGRAM_MAX_LAYERS][TF_ENGRAM_MAX_COLS];  /* bucket count */
	int64_t offset[TF_ENGRAM_MAX_LAYERS][TF_ENGRAM_MAX_COLS]; /* first row */
	uint64_t rows[TF_ENGRAM_MAX_LAYERS];                      /* sum of primes */
};

/* Primes and offsets for p (multipliers are separate: they depend on the
 * token map). When p->num_embeddings[l] is non-zero it must equal the
 * layer's row count, else TF_ERR_CONFIG naming both. */
tf_status tf_engram_layout_init(struct tf_engram_layout *lay, const struct tf_engram_params *p);

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
