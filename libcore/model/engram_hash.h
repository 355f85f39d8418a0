/* engram_hash.h: Engram's n-gram hash: token ids to global table rows.
 *
 * For each position t and Engram layer, with rolling = 0 and not blocked,
 * for s = 0 .. max_ngram - 1 the token s back from t is looked at (in the
 * window, else in the lookback): if it is before the sequence start or its
 * id is past the token map (an image position), the n-gram is blocked from
 * there on; the value is the pad's compressed id when blocked, else the
 * token's compressed id; rolling ^= value * mult[layer][s] (wrapping
 * int64); for s >= 1 each head h gives column (s - 1) * heads + h the row
 * floor_mod(rolling, prime[col]) + offset[col].
 *
 * rows: [T][L][c1 - c0] int64, the columns [c0, c1) of every layer (all 24
 * by default; a tensor-parallel rank asks for its own, engram_layout.h's
 * tf_engram_rank_cols). The modulo is a Barrett reduction by a per-column
 * reciprocal, which is exact for every 64-bit rolling value.
 *
 * A tf_engram_hasher is read-only after init: any number of threads may
 * hash with it at once. It borrows the token map of the host it was made
 * from. */
#ifndef TF_MODEL_ENGRAM_HASH_H
#define TF_MODEL_ENGRAM_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "model/engram_host.h"
#include "model/engram_layout.h"

struct tf_engram_col {
	uint64_t prime;
	uint64_t magic;  /* floor((2^64 - 1) / prime) */
	uint64_t wrap;   /* 2^64 mod prime: corrects a negative rolling value */
	int64_t offset;
};

struct tf_engram_hasher {
	uint32_t nlayers, max_ngram, heads, cols;
	uint32_t vocab;           /* map length: ids >= vocab are blocked */
	const uint32_t *map;      /* borrowed from the host */
	uint64_t pad;             /* compressed id of the pad token */
	uint64_t mult[TF_ENGRAM_MAX_LAYERS][TF_ENGRAM_MAX_NGRAM];
	struct tf_engram_col col[TF_ENGRAM_MAX_LAYERS][TF_ENGRAM_MAX_COLS];
};

/* Combine a layout (primes, offsets) with a host (layer ids, multipliers,
 * map). The two must agree on layers and max n-gram, and pad_id must be in
 * the map; TF_ERR_CONFIG otherwise. */
tf_status tf_engram_hasher_init(struct tf_engram_hasher *h, const struct tf_engram_layout *lay,
				const struct tf_engram_host *host, uint32_t pad_id);

/* Hash n ids (after nb lookback ids, oldest first; nb <= max_ngram - 1 is
 * used, more are ignored but the last ones) into rows, see above. c0 <= c1
 * <= cols. Never fails. */
void tf_engram_hash(const struct tf_engram_hasher *h, const uint32_t *ids, size_t n,
		    const uint32_t *lookback, size_t nb, uint32_t c0, uint32_t c1, int64_t *rows);

/* floor_mod(v, p) + offset for one column, the reduction tf_engram_hash
 * uses (exposed for tests). */
static inline int64_t tf_engram_col_row(const struct tf_engram_col *c, uint64_t v)
{
	uint64_t q = (uint64_t)(((unsigned __int128)v * c->magic) >> 64);
	uint64_t m = v - q * c->prime;
	if (m >= c->prime)
		m -= c->prime;
	if ((int64_t)v < 0)
		m = m >= c->wrap ? m - c->wrap : m + c->prime - c->wrap;
	return (int64_t)m + c->offset;
}

#endif
