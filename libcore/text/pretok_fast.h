/* pretok_fast.h: the built-in DeepSeek pre-tokenizer (see pretok_fast.c).
 * Internal to libcore/text. */
#ifndef TF_TEXT_PRETOK_FAST_H
#define TF_TEXT_PRETOK_FAST_H

#include <stddef.h>

#include "base/status.h"

/* Receives each piece in order; a non-zero status stops the split. */
typedef tf_status (*tok_piece_fn)(void *ctx, const char *s, size_t n);

/* The three Split steps of the DeepSeek pre-tokenizer over n bytes of valid
 * UTF-8, calling fn for each piece (never empty). Thread safe. */
tf_status tok_fast_split(const char *s, size_t n, tok_piece_fn fn, void *ctx);

/* The pre-tokenizer regexes it stands for, as tokenizer.json spells them. */
extern const char *const tok_fast_patterns[3];

#endif
