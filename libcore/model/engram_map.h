/* engram_map.h: Engram's token map: every token id to a compressed id, so
 * that tokens which read the same after normalisation share hash inputs.
 *
 * For each id in order (added tokens included): decode the id alone
 * (special tokens kept). If the text holds U+FFFD (bytes that are not
 * UTF-8 on their own, or a literal U+FFFD) the key is the raw token string.
 * Otherwise the key is the normalised text, or the text itself when
 * normalising leaves nothing. Normalising, as the Hugging Face normalizer
 * sequence the reference uses: NFKC; NFD; drop marks (Mn, Mc, Me); lowercase
 * (per character, full mapping); runs of [ \t\r\n] to one space; a text
 * that is exactly one space to the sentinel U+E000; strip White_Space at
 * both ends; U+E000 to a space. Keys are numbered in order of first
 * appearance; the count is the compressed vocabulary (99,092 for the
 * release tokenizer). Unicode tables are utf8proc's.
 *
 * Reentrant; nothing is shared between calls. */
#ifndef TF_MODEL_ENGRAM_MAP_H
#define TF_MODEL_ENGRAM_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"

struct tf_tok;

/* The key of one token: text (n bytes, what the id decodes to; NULL for an
 * id no token has, read as "") and raw (the token string). The key is
 * written to key (reset first). */
tf_status tf_engram_map_key(const uint8_t *text, size_t n, const char *raw, size_t rawn,
			    struct tf_buf *key);

/* Normalise valid UTF-8 text into out (reset first); TF_ERR_FORMAT for
 * invalid UTF-8. */
tf_status tf_engram_normalize(const char *text, size_t n, struct tf_buf *out);

/* What a map needs of a token: its decoded bytes and raw string. Returns
 * the bytes (NULL when no token has the id: read as ""), *raw may be NULL. */
typedef const uint8_t *(*tf_engram_token_fn)(void *ctx, uint32_t id, size_t *len,
					     const char **raw, size_t *rawn);

/* The map of ids 0 .. vocab-1 through fn. *map (heap, [vocab]) is the
 * caller's; *compressed the number of distinct keys. */
tf_status tf_engram_map_build_fn(uint32_t vocab, tf_engram_token_fn fn, void *ctx,
				 uint32_t **map, uint32_t *compressed);

/* The map of a loaded tokenizer (text/tokenizer.h): every id below
 * tf_tok_vocab_size. */
tf_status tf_engram_map_build(const struct tf_tok *tok, uint32_t **map, uint32_t *vocab,
			      uint32_t *compressed);

#endif
