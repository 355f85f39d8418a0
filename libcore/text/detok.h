/* detok.h: turning ids back into text: whole decode and a streaming
 * detokenizer, both with Rust's String::from_utf8_lossy semantics (one
 * U+FFFD per maximal invalid subpart), and UTF-8 helpers the encoder uses.
 *
 * A streaming detokenizer holds back at most 3 bytes of a character that may
 * still complete, so the text it emits is always complete UTF-8 and the
 * concatenation of everything it emits (with the flush) equals the whole
 * decode of the same ids, for every way of splitting them. */
#ifndef TF_TEXT_DETOK_H
#define TF_TEXT_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"
#include "text/tokenizer.h"

/* True when n bytes at s are valid UTF-8 (no surrogates, no overlongs). */
bool tf_utf8_valid(const void *s, size_t n);

/* Append s converted like from_utf8_lossy to out. When final is false, a
 * trailing incomplete but so far valid character is not consumed. Returns
 * the number of bytes consumed (n when final). */
size_t tf_utf8_lossy(const void *s, size_t n, bool final, struct tf_buf *out, tf_status *st);

/* Decode n ids into out (appended): each id's bytes (tf_tok_bytes), ids
 * with no token skipped (as Hugging Face does), then from_utf8_lossy.
 * Thread safe. */
tf_status tf_tok_decode(const struct tf_tok *tok, const uint32_t *ids, size_t n,
			struct tf_buf *out);

struct tf_detok {
	const struct tf_tok *tok;
	uint8_t pend[4]; /* bytes of a character still incomplete */
	uint8_t npend;
};

/* Start a stream over tok (borrowed; must outlive d). No allocation. */
void tf_detok_init(struct tf_detok *d, const struct tf_tok *tok);
/* Feed one id; append the text that is now complete to out. */
tf_status tf_detok_push(struct tf_detok *d, uint32_t id, struct tf_buf *out);
/* Feed raw bytes (what an id decodes to). */
tf_status tf_detok_push_bytes(struct tf_detok *d, const void *bytes, size_t n,
			      struct tf_buf *out);
/* End of stream: a held-back partial character becomes one U+FFFD. The
 * stream is reset and may be reused. */
tf_status tf_detok_flush(struct tf_detok *d, struct tf_buf *out);
/* Bytes held back (0..3). */
size_t tf_detok_pending(const struct tf_detok *d);

#endif
