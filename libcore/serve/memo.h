/* memo.h: reasoning memory: the reasoning of finished replies, under each
 * tool call id and under "c:" + SHA-256 of the content, so that a client
 * that drops reasoning_content from its history gets it back. At most cap
 * entries, the oldest dropped first. Not the rendering: the family puts
 * restored reasoning where its template wants it. Thread safe (one mutex
 * per memory, held for a lookup or an insert). */
#ifndef TF_SERVE_MEMO_H
#define TF_SERVE_MEMO_H

#include <jansson.h>
#include <stddef.h>

#include "base/status.h"

struct tf_memo;

tf_status tf_memo_new(size_t cap, struct tf_memo **out);
void tf_memo_free(struct tf_memo *m);

/* Remember reasoning (n bytes, copied) under a tool call's id, or under
 * the content of the reply that followed it (clen bytes). */
void tf_memo_put_call(struct tf_memo *m, const char *id, const char *reasoning, size_t n);
void tf_memo_put_content(struct tf_memo *m, const char *content, size_t clen,
			 const char *reasoning, size_t n);

/* Put remembered reasoning back into the assistant messages of an
 * OpenAI-shaped chat request that lack it. Returns how many it restored. */
size_t tf_memo_restore(struct tf_memo *m, json_t *chat);

#endif
