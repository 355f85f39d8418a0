/* toksynth.h: a small synthetic byte-level BPE tokenizer.json of the
 * DeepSeek-V4.1 family, for synthetic packs: the release's pipeline (empty
 * normalizer, the three Split pre-tokenizers and ByteLevel, the ByteLevel
 * decoder), BOS/EOS/pad as special added tokens at ids 0, 1, 2, the 256 byte
 * symbols, merges learned from a seeded built-in corpus, and the V4.1
 * markers as added tokens with the release's flags at the top ids below
 * vocab. It is not a real language tokenizer: it is small and valid. */
#ifndef TF_TEXT_TOKSYNTH_H
#define TF_TEXT_TOKSYNTH_H

#include <jansson.h>
#include <stdint.h>

#include "base/status.h"

/* Build a tokenizer.json object whose ids are all below vocab (at least
 * 512). The caller json_decrefs *out. Deterministic for a seed. */
tf_status tf_toksynth_build(uint32_t vocab, uint64_t seed, json_t **out);

/* The release pre-tokenizer's third Split pattern (DeepSeek-V3/V4.1). */
extern const char tf_toksynth_split3[];

#endif
