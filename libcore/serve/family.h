/* family.h: the family hook: what the server needs from a model family's
 * text side. It renders a chat request into prompt text, turns text into
 * ids and back, and reads the generated text into deltas (reasoning,
 * content, tool calls) as it streams.
 *
 * Requests reach the hook in the OpenAI chat shape (the Anthropic route
 * converts its messages first), so one renderer serves both protocols.
 *
 * Two families: "plain" (here: a byte-level vocabulary, a simple role:
 * text rendering and a </think> reader; for the stub engine and tests,
 * needing no files) and the DeepSeek-V4.1 family over the text layer
 * (tokenizer.json, chat rendering, the DSML reader). */
#ifndef TF_SERVE_FAMILY_H
#define TF_SERVE_FAMILY_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"

/* One piece of a reply as the reader sees it. */
enum tf_delta_kind {
	TF_DELTA_REASONING, /* text: reasoning */
	TF_DELTA_CONTENT,   /* text: answer */
	TF_DELTA_CALL,      /* a tool call opens: index, name */
	TF_DELTA_ARGS,      /* text: a fragment of call index's JSON arguments */
};

struct tf_delta {
	enum tf_delta_kind kind;
	const char *text; /* borrowed for the callback */
	size_t len;
	int index;        /* tool call index (CALL, ARGS) */
	const char *name; /* tool name (CALL) */
	const char *id;   /* the call's id (CALL), or NULL: the server makes one */
};

typedef tf_status (*tf_delta_fn)(void *ctx, const struct tf_delta *d);

struct tf_reader;

struct tf_family {
	const char *name;
	void *ctx;
	uint32_t vocab;       /* ids are 0..vocab-1 */
	int32_t eos;          /* end-of-sequence id */
	bool default_thinking;
	/* Render an OpenAI-shaped chat request (messages, tools, tool_choice,
	 * thinking and effort fields) into prompt text. *thinking: the reply
	 * starts in reasoning. TF_ERR_FORMAT with the client's 400 message for
	 * a refused request. Thread safe. */
	tf_status (*render)(void *ctx, const json_t *req, struct tf_buf *text, bool *thinking);
	/* Encode text (added tokens recognised, no BOS added); *ids is the
	 * caller's (free). Thread safe. */
	tf_status (*encode)(void *ctx, const char *text, size_t n, int32_t **ids, size_t *nids);
	/* Append the bytes of ids to out (special tokens as their text, unknown
	 * ids skipped). A token may end inside a UTF-8 character: streams keep
	 * the tail (see tf_utf8_complete). Thread safe. */
	tf_status (*decode)(void *ctx, const int32_t *ids, size_t n, struct tf_buf *out);
	/* A reader of one reply: thinking as render said, tools the request
	 * offered (NULL: none, so no calls are read). */
	tf_status (*reader_new)(void *ctx, bool thinking, const json_t *tools, struct tf_reader **out);
	/* Feed reply text (complete UTF-8); deltas go to fn as they become
	 * certain. final flushes what was held back. A failure from fn is
	 * returned. */
	tf_status (*reader_feed)(struct tf_reader *r, const char *text, size_t n, bool final,
				 tf_delta_fn fn, void *fctx);
	void (*reader_free)(struct tf_reader *r);
	void (*free)(void *ctx);
	/* Optional (NULL: no constrained output): the bytes of id when it
	 * stands for plain text, NULL for special and added tokens and unknown
	 * ids; what a grammar may draw (serve/constrain.h). Thread safe. */
	const uint8_t *(*text_bytes)(void *ctx, uint32_t id, size_t *len);
	int32_t think_end;    /* the id that ends reasoning, or -1 (none is one token) */
	struct tf_fgrammar *grammar; /* the grammar vocabulary, built on first use */
};

/* The plain family (byte ids 0-255, 256 begin, 257 end). */
tf_status tf_family_plain(struct tf_family *out);

/* The DeepSeek-V4.1 family over a pack folder's tokenizer.json (the V4.1
 * markers added where a tokenizer lacks them). TF_ERR_NOTFOUND without one,
 * TF_ERR_FORMAT for a bad one. */
tf_status tf_family_dsv41(const char *pack_dir, struct tf_family *out);

/* Which of the ids 0..n-1 stand for some text: (*out)[id] = 1 when the
 * family's decode gives it at least one byte (special tokens count, as
 * their text). *out is the caller's (free). For tf_engine_model_opts's
 * drawable: a model's vocabulary may be larger than its tokenizer's. */
tf_status tf_family_drawable(const struct tf_family *f, uint32_t n, uint8_t **out);

/* Release a family (free(NULL)-safe on a zeroed one). */
void tf_family_release(struct tf_family *f);

/* How many of the first n bytes of s form complete UTF-8 characters (a
 * trailing incomplete but so far valid character is held back; invalid
 * bytes count as complete and are later replaced). */
size_t tf_utf8_complete(const char *s, size_t n);

/* Append n bytes of s to out with every invalid UTF-8 sequence replaced by
 * U+FFFD (one per maximal invalid part), so any bytes become JSON text. */
void tf_utf8_fix(const char *s, size_t n, struct tf_buf *out);

/* Append s (valid UTF-8) as a JSON string literal, quotes included. */
void tf_json_quote(struct tf_buf *out, const char *s, size_t n);

/* The </think> reader over plain text, usable by any family without tool
 * calls. */
tf_status tf_reader_think_new(bool thinking, struct tf_reader **out);
tf_status tf_reader_think_feed(struct tf_reader *r, const char *text, size_t n, bool final,
			       tf_delta_fn fn, void *fctx);
void tf_reader_think_free(struct tf_reader *r);

#endif
