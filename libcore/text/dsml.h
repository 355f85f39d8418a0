/* dsml.h: reading DeepSeek-V4.1 replies: reasoning, content and DSML tool
 * calls, whole or while they stream (dsv41-text-facts.md §3).
 *
 *   reasoning</think>content
 *
 *   <｜DSML｜ calls>
 *   <｜DSML｜ invoke name="get_weather">
 *   <｜DSML｜ parameter name="city" string="true">Paris</｜DSML｜ parameter>
 *   </｜DSML｜ invoke>
 *   </｜DSML｜ calls>
 *
 * The reader is lenient where models slip, and never fails on text: block
 * names calls / tool_calls / function_calls with or without one space,
 * whitespace inside tags, unclosed invokes and blocks are read; a calls
 * block inside an unclosed think block ends the reasoning there; markup it
 * cannot read stays text. Calls are read only when tools were offered, and
 * only calls of offered tools (matched exactly, then case-insensitively,
 * then by the last `::` part) count; with none, the reply is content.
 * Values: string="true" is the raw text unless the tool's schema excludes
 * strings; string="false" is JSON, closed when it stops a bracket short,
 * else typed by the schema (type, anyOf/oneOf, enum, const), else the raw
 * text. Arguments are compact JSON in parameter order.
 *
 * Streaming (struct tf_dsml_stream) emits deltas as the reply grows: text
 * that may still become `</think>` or a block's opening tag is held back;
 * a call opens once its header is complete and each finished parameter is
 * one arguments fragment (`{"k":v`, `,"k":v`, then `}`), so the fragments
 * of a call concatenate to its final arguments. The deltas equal the
 * reference reader's (the goldens in tests/data/dsv41/dsml.jsonl), and the
 * streamed reasoning, content and calls equal the whole parse for any
 * split, except where the reference's stream itself differs: a calls block
 * that yields no usable call is withheld from the content; without tools
 * a calls tag inside unclosed reasoning stays reasoning; with tools, a
 * single newline just before such a tag is sent as reasoning (the whole
 * parse trims it, and it comes again as content); and only the opening
 * tags `<｜DSML｜ calls>`, `<｜DSML｜calls>`, `<｜DSML｜tool_calls>` and
 * `<｜DSML｜function_calls>` (after an optional blank line) are held back
 * while incomplete, so another spelling (`<｜DSML｜ tool_calls>`) cut by a
 * chunk may reach the content in part. tf_dsml_stream_consistent removes
 * these differences.
 *
 * Input text is UTF-8, as the detokenizer hands it (a stream holds back
 * an incomplete trailing character). Invalid bytes are carried as they
 * are, never a crash, but the consistent stream is promised to equal the
 * whole parse for valid UTF-8 only.
 * A tf_dsml_tools is read-only after creation and may be shared between
 * threads; a stream belongs to one thread. */
#ifndef TF_TEXT_DSML_H
#define TF_TEXT_DSML_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/buf.h"
#include "base/status.h"

/* "call_" + 24 lowercase hex digits. */
#define TF_DSML_ID_LEN 29

/* The offered tools: names and parameter schemas. */
struct tf_dsml_tools;

/* Read the request's tools (an OpenAI "tools" array, or NULL / null for
 * none): {"type": "function", "function": {"name", "parameters"}} or the
 * function object itself; entries without a name are skipped; a later
 * tool of the same name replaces an earlier one's schema. The result keeps
 * references into tools. NULL on allocation failure. */
struct tf_dsml_tools *tf_dsml_tools_new(const json_t *tools);
void tf_dsml_tools_free(struct tf_dsml_tools *t);
/* The number of offered tools (0: calls are never read). */
size_t tf_dsml_tools_count(const struct tf_dsml_tools *t);

/* One argument of a call, in parameter order. */
struct tf_dsml_arg {
	char *key;
	size_t key_len;
	json_t *value;
};

struct tf_dsml_call {
	char id[TF_DSML_ID_LEN + 1];
	char *name;   /* the offered spelling */
	struct tf_dsml_arg *args;
	size_t nargs;
};

/* A whole reply. */
struct tf_dsml_reply {
	struct tf_buf reasoning;
	struct tf_buf content;
	struct tf_dsml_call *calls;
	size_t ncalls;
};

/* Parse a finished reply (end-of-sentence removed). thinking: the prompt
 * ended in <think>. tools may be NULL (none offered). *out is replaced.
 * Fails only for lack of memory. */
tf_status tf_dsml_parse(const char *text, size_t n, bool thinking, const struct tf_dsml_tools *tools,
			struct tf_dsml_reply *out);
void tf_dsml_reply_release(struct tf_dsml_reply *r);

/* Append a call's arguments as compact JSON ("{}" without any). */
tf_status tf_dsml_call_arguments(const struct tf_dsml_call *c, struct tf_buf *out);

enum tf_dsml_delta_kind {
	TF_DSML_REASONING, /* text: more reasoning */
	TF_DSML_CONTENT,   /* text: more content */
	TF_DSML_CALL,      /* a call opens: index, id, name */
	TF_DSML_ARGS,      /* text: more of call index's arguments */
};

struct tf_dsml_delta {
	enum tf_dsml_delta_kind kind;
	size_t index;     /* CALL, ARGS: the call's index in the reply */
	const char *text; /* REASONING, CONTENT, ARGS (not NUL-terminated) */
	size_t len;
	const char *id;   /* CALL */
	const char *name; /* CALL */
};

struct tf_dsml_stream;

/* A reader for one reply. tools is borrowed (may be NULL) and must outlive
 * the stream. NULL on allocation failure. */
struct tf_dsml_stream *tf_dsml_stream_new(bool thinking, const struct tf_dsml_tools *tools);
void tf_dsml_stream_free(struct tf_dsml_stream *s);

/* Make the stream equal to the whole parse for any split (set before the
 * first push): a partial opening tag is held back in every spelling the
 * grammar reads (and, in unclosed reasoning, the newlines before it, and
 * also when no tools were offered), and a block that gave no usable call
 * is sent as content at finish. The deltas then differ from the
 * reference's in exactly those cases. Off by default: the goldens pin the
 * reference's deltas. */
void tf_dsml_stream_consistent(struct tf_dsml_stream *s, bool on);

/* Append the next n bytes of the reply and read what they settle. The
 * deltas (borrowed, valid until the next call on s) go to *deltas and
 * *ndeltas. TF_ERR_ARG after finish. */
tf_status tf_dsml_stream_push(struct tf_dsml_stream *s, const char *chunk, size_t n,
			      const struct tf_dsml_delta **deltas, size_t *ndeltas);
/* The reply ended after n more bytes (n may be 0): release what was held
 * back and close open calls. Later calls add nothing. */
tf_status tf_dsml_stream_finish(struct tf_dsml_stream *s, const char *chunk, size_t n,
				const struct tf_dsml_delta **deltas, size_t *ndeltas);
/* The calls streamed so far (usable ones, as sent). */
const struct tf_dsml_call *tf_dsml_stream_calls(const struct tf_dsml_stream *s, size_t *ncalls);
/* The whole text pushed so far (borrowed). */
const char *tf_dsml_stream_text(const struct tf_dsml_stream *s, size_t *len);

/* OpenAI shapes (new references; NULL on allocation failure):
 * message.tool_calls: [{"id", "type": "function", "function": {"name",
 * "arguments": compact JSON}}] of calls[0..n). */
json_t *tf_dsml_openai_tool_calls(const struct tf_dsml_call *calls, size_t n);
/* Where reasoning goes in OpenAI replies (the reference sends both). */
enum {
	TF_DSML_REASONING_CONTENT = 1, /* "reasoning_content" (DeepSeek, vLLM) */
	TF_DSML_REASONING_FIELD = 2,   /* "reasoning" (OpenRouter, newer clients) */
};

/* A stream delta as a chat.completion.chunk's choices[0].delta:
 * {"reasoning_content": t, "reasoning": t} (as fields says), {"content":
 * t}, {"tool_calls": [{"index", "id", "type", "function": {"name",
 * "arguments": ""}}]} or {"tool_calls": [{"index", "function":
 * {"arguments": t}}]}. */
json_t *tf_dsml_openai_delta(const struct tf_dsml_delta *d, unsigned fields);

/* Anthropic shapes: a message's content blocks for a whole reply:
 * {"type": "thinking", "thinking", "signature": ""} (when there is
 * reasoning), {"type": "text", "text"} (when there is content), then
 * {"type": "tool_use", "id", "name", "input": {arguments}} per call. */
json_t *tf_dsml_anthropic_content(const struct tf_dsml_reply *r);

/* Streaming into Anthropic events: content_block_start / _delta / _stop
 * objects ({"type": ..., "index", ...}) for each delta, in order. Thinking
 * and text blocks open on their first delta and close when another kind
 * starts; a tool_use block opens with {"input": {}} and its arguments
 * come as input_json_delta partial_json; it closes when its arguments
 * parse as a JSON object (text arriving meanwhile is deferred until then),
 * or at finish. */
struct tf_dsml_anthropic;
struct tf_dsml_anthropic *tf_dsml_anthropic_new(void);
void tf_dsml_anthropic_free(struct tf_dsml_anthropic *a);
/* Append the events for deltas[0..n) to events (a JSON array). finished:
 * the reply ended after these deltas (close every open block). */
tf_status tf_dsml_anthropic_events(struct tf_dsml_anthropic *a, const struct tf_dsml_delta *deltas,
				   size_t n, bool finished, json_t *events);

#endif
