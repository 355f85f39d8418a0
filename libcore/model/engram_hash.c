/* engram_hash.c: the Engram n-gram hash (rules in engram_hash.h). */
#include "model/engram_hash.h"

#include <string.h>

tf_status tf_engram_hasher_init(struct tf_engram_hasher *h, const struct tf_engram_layout *lay,
				const struct tf_engram_host *host, uint32_t pad_id)
{
	memset(h, 0, sizeof(*h));
	if (host->nlayers != lay->nlayers)
		return tf_err(TF_ERR_CONFIG, "engram host has %u layers, the config %u",
			      host->nlayers, lay->nlayers);
	for (uint32_t l = 0; l < lay->nlayers; l++)
		if (host->layer_ids[l] != lay->layer_ids[l])
			return tf_err(TF_ERR_CONFIG,
				      "engram host layer %u is %u, the config's is %u", l,
				      host->layer_ids[l], lay->layer_ids[l]);
	if (host->max_ngram != lay->max_ngram)
		return tf_err(TF_ERR_CONFIG, "engram host max n-gram %u, the config's %u",
			      host->max_ngram, lay->max_ngram);
	if (pad_id >= host->vocab)
		return tf_err(TF_ERR_CONFIG, "engram pad id %u is past the token map (%u ids)",
			      pad_id, host->vocab);
	if (host->map[pad_id] >= host->compressed)
		return tf_err(TF_ERR_CONFIG, "engram pad id %u is not in the token map", pad_id);
	h->nlayers = lay->nlayers;
	h->max_ngram = lay->max_ngram;
	h->heads = lay->heads;
	h->cols = lay->cols;
	h->vocab = host->vocab;
	h->map = host->map;
	h->pad = host->map[pad_id];
	for (uint32_t l = 0; l < lay->nlayers; l++) {
		for (uint32_t s = 0; s < lay->max_ngram; s++)
			h->mult[l][s] = (uint64_t)host->mult[l][s];
		for (uint32_t c = 0; c < lay->cols; c++) {
			struct tf_engram_col *col = &h->col[l][c];
			col->prime = (uint64_t)lay->prime[l][c];
			col->magic = UINT64_MAX / col->prime;
			col->wrap = (uint64_t)(((unsigned __int128)1 << 64) % col->prime);
			col->offset = lay->offset[l][c];
		}
	}
	return TF_OK;
}

void tf_engram_hash(const struct tf_engram_hasher *h, const uint32_t *ids, size_t n,
		    const uint32_t *lookback, size_t nb, uint32_t c0, uint32_t c1, int64_t *rows)
{
	const uint32_t M = h->max_ngram, H = h->heads, L = h->nlayers;
	const size_t w = c1 - c0;
	if (nb > M - 1) {
		lookback += nb - (M - 1);
		nb = M - 1;
	}
	for (size_t t = 0; t < n; t++) {
		/* The compressed ids of t, t-1, ... up to the first blocked one;
		 * from there on the pad (blocking is the same for every layer). */
		uint64_t v[TF_ENGRAM_MAX_NGRAM];
		uint32_t s = 0;
		for (; s < M; s++) {
			uint32_t id;
			if (s <= t)
				id = ids[t - s];
			else if (s - t <= nb)
				id = lookback[nb - (s - t)];
			else
				break;
			if (id >= h->vocab)
				break;
			v[s] = h->map[id];
		}
		for (; s < M; s++)
			v[s] = h->pad;

		for (uint32_t l = 0; l < L; l++) {
			int64_t *out = rows + (t * L + l) * w;
			const struct tf_engram_col *col = h->col[l];
			uint64_t roll = v[0] * h->mult[l][0];
			for (uint32_t k = 1; k < M; k++) {
				roll ^= v[k] * h->mult[l][k];
				uint32_t a = (k - 1) * H, b = a + H;
				if (a < c0)
					a = c0;
				if (b > c1)
					b = c1;
				for (uint32_t c = a; c < b; c++)
					out[c - c0] = tf_engram_col_row(&col[c], roll);
			}
		}
	}
}
