/* logprobs.h: the OpenAI wire shapes of log-probabilities. The entries of
 * generated tokens are gathered as JSON text and written, and cleared, as
 * a choice's "logprobs" value:
 *   chat:        {"content":[{"token","logprob","bytes","top_logprobs":
 *                 [{"token","logprob","bytes"}...]}...],"refusal":null}
 *   completions: {"tokens":[...],"token_logprobs":[...],"top_logprobs":
 *                 [{text: logprob}...],"text_offset":[...]}
 * A token's text is its bytes through the family's decode with invalid
 * UTF-8 as U+FFFD (a token may end inside a character; "bytes" keeps the
 * exact bytes). text_offset counts characters from the completion's start
 * and goes on across flushes, as a stream's chunks need. Numbers are
 * written with 9 significant digits (every float round-trips); a
 * non-finite one as -9999. Where two alternatives of a completion share a
 * text, the first (the more likely) keeps it. */
#ifndef TF_SERVE_LOGPROBS_H
#define TF_SERVE_LOGPROBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/engine.h"
#include "serve/family.h"

struct tf_lpout {
	bool chat;                      /* chat shape, else completions */
	const struct tf_family *family; /* borrowed */
	unsigned ntop;                  /* alternatives asked for */
	size_t count;                   /* entries pending */
	size_t chars;                   /* characters of the tokens so far */
	struct tf_buf chat_entries, lists[4], text, raw;
};

void tf_lpout_init(struct tf_lpout *o, bool chat, const struct tf_family *f, unsigned ntop);
void tf_lpout_release(struct tf_lpout *o);
/* Add the entry of generated token id (at most ntop of l's alternatives). */
void tf_lpout_add(struct tf_lpout *o, int32_t id, const struct tf_engine_logprob *l);
/* Append the pending entries as the "logprobs" value to out and clear
 * them (an empty list when none are pending). */
void tf_lpout_flush(struct tf_lpout *o, struct tf_buf *out);

#endif
