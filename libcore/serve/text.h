/* text.h: the routes that need the family's text side but not the engine:
 * /v1/messages/count_tokens, /tokenize and /detokenize.
 *
 * A tokenize reply is not built in memory: the answer keeps the ids
 * (4 bytes each) and tf_text_read writes the JSON body from them as it is
 * sent, so a request of n body bytes peaks at the body, its parsed JSON
 * and the ids, freed as soon as the reply went out. */
#ifndef TF_SERVE_TEXT_H
#define TF_SERVE_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "serve/gen.h"

enum tf_text_route {
	TF_TEXT_COUNT,      /* POST /v1/messages/count_tokens (Anthropic errors) */
	TF_TEXT_TOKENIZE,   /* POST /tokenize */
	TF_TEXT_DETOKENIZE, /* POST /detokenize */
};

/* An answer: r (status, type, and the body, except for a tokenize that
 * succeeded, whose body tf_text_read writes from ids). */
struct tf_text_answer {
	struct tf_reply r;
	int32_t *ids;      /* tokenize: owned, or NULL */
	size_t nids;
	uint32_t context;
	size_t size;       /* the body's bytes when ids is set */
	/* tf_text_read's place: the next body byte, the next id, and the
	 * text of the id being written */
	size_t pos, next;
	char cur[24];
	size_t curlen, curoff;
};

/* Answer n bytes of body for route k (U+0000 allowed in strings). own,
 * when not NULL, holds the body and is released once it is parsed. Thread
 * safe; the answer is the caller's (tf_text_release). */
void tf_text_serve(const struct tf_gen_env *env, enum tf_text_route k, const char *body, size_t n,
		   struct tf_buf *own, struct tf_text_answer *a);

/* Copy up to max bytes of the body from pos (reads must go forward from 0
 * without gaps); returns the bytes copied, 0 at the end. */
size_t tf_text_read(struct tf_text_answer *a, size_t pos, char *buf, size_t max);

void tf_text_release(struct tf_text_answer *a);

#endif
