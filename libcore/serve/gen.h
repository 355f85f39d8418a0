/* gen.h: one generation in flight: a validated request (request.h) is
 * rendered through the family hook, checked against the context, submitted
 * to the engine, and its tokens are turned into text, cut at stop strings,
 * read into deltas and written in the route's protocol: OpenAI chat or
 * completion chunks, Anthropic message events, or one whole JSON reply.
 *
 * The caller drives it: tf_gen_pump waits up to a deadline for tokens and
 * appends what is ready (SSE frames for streams, keepalives after silence,
 * the closing frames at the end); a whole reply comes from tf_gen_reply
 * once pumping says done. The HTTP layer pumps from its connection thread;
 * tf-serve --once pumps to stdout. One thread per generation. The parts
 * are listed in gen_impl.h. */
#ifndef TF_SERVE_GEN_H
#define TF_SERVE_GEN_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/status.h"
#include "engine/engine.h"
#include "serve/family.h"
#include "serve/memo.h"
#include "serve/reply.h"
#include "serve/request.h"

struct tf_rstore;

/* What generations share: the engine, the family, the limits and
 * defaults. Read-only while the server runs. */
struct tf_gen_env {
	struct tf_engine *engine;
	const struct tf_family *family;
	const char *model;         /* the served name */
	uint32_t context;          /* prompt + completion limit */
	uint32_t max_tokens;       /* default completion limit */
	double temperature, top_p, min_p; /* defaults */
	int32_t top_k;
	const char *seed_salt;     /* default seed: SHA-256 of "ids|salt" */
	double keepalive_s;        /* SSE silence before a keepalive (0: off) */
	struct tf_memo *memo;      /* reasoning memory, or NULL */
	struct tf_rstore *rstore;  /* the Responses store (rstore.h), or NULL: store is off */
};

struct tf_gen;

/* Start a generation: takes req over (released on every path). On a
 * refusal (bad request, context too long) returns non-zero and fills err
 * (status, JSON body); otherwise *out is running. */
tf_status tf_gen_start(const struct tf_gen_env *env, struct tf_req *req, struct tf_gen **out,
		       struct tf_reply *err);

bool tf_gen_streaming(const struct tf_gen *g);

/* Stamp each token-bearing stream frame with an SSE comment line
 * ": tf-made NS" before it: NS is CLOCK_MONOTONIC nanoseconds at which the
 * engine's forward that made the frame's last token returned (the request
 * header X-TF-Timing: 1 asks for it; tf-bench serve reads it to measure
 * the latency the delivery path adds). Comments are ignored by SSE clients. */
void tf_gen_timing(struct tf_gen *g, bool on);

/* Wait up to wait_ms for tokens and append what is ready to out (streams:
 * SSE bytes, including the opening frame on the first call, keepalives,
 * the closing frames; whole replies: nothing). *done once finished. */
tf_status tf_gen_pump(struct tf_gen *g, int wait_ms, struct tf_buf *out, bool *done);

/* The whole reply of a non-streamed generation (after done). */
void tf_gen_reply(struct tf_gen *g, struct tf_reply *r);

/* Have fn(ctx) called (from the engine thread, briefly) when tokens reach
 * the generation or it ends (end_only: when it ends); NULL stops it. See
 * tf_engine_job_notify. */
void tf_gen_notify(struct tf_gen *g, void (*fn)(void *ctx), void *ctx, bool end_only);

/* Completion tokens pumped so far (their text is in what the pumps
 * appended). */
uint32_t tf_gen_read(const struct tf_gen *g);

/* True once pumping said done. */
bool tf_gen_done(const struct tf_gen *g);

/* The client left: cancel at the next round boundary. */
void tf_gen_cancel(struct tf_gen *g);

/* How it went, for metrics and logs. */
struct tf_gen_outcome {
	bool failed, halted, cancelled;
	uint32_t prompt, cached, completion, reasoning;
	uint32_t delivered;        /* of completion, those the client got: all, unless the caller says */
	double ttft_s, e2e_s, queued_s, prefill_s, decode_s;
	uint32_t events;           /* token-bearing frames written */
	double itl_sum_s, itl_max_s; /* gaps between those frames */
	const uint32_t *itl_n;     /* the gaps by metrics.h bucket (TF_METRICS_NB + 1), borrowed */
};
void tf_gen_outcome(struct tf_gen *g, struct tf_gen_outcome *o);

void tf_gen_free(struct tf_gen *g);

/* Count the prompt tokens of a chat-shaped request (count_tokens,
 * /tokenize): renders and encodes; TF_ERR_FORMAT for a refused request. */
tf_status tf_gen_count(const struct tf_gen_env *env, const json_t *chat, int32_t **ids,
		       size_t *n);

/* GET or DELETE of /v1/responses/{id} (method "GET" or "DELETE"): the
 * stored response object, or {"id", "object": "response.deleted",
 * "deleted": true}; 404 in OpenAI's shape for an unknown id, 400 when
 * the store is off. Fills r. Thread safe. */
void tf_resp_stored(const struct tf_gen_env *env, const char *method, const char *id,
		    struct tf_reply *r);

#endif
