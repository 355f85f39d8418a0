/* gen_impl.h: what the parts of a generation (gen.h) share: its state
 * and the frame helpers. Not a public interface: only these include it.
 *
 *   gen.c            the lifecycle: pump, whole reply, outcome, free; SSE
 *                    frames, and the dispatch to the wire shapes
 *   gen_start.c      the start: render, limits, sampling, constraint, submit
 *   gen_text.c       tokens to text: detokenizing, UTF-8, stop strings, the
 *                    family's reader and its deltas
 *   gen_openai.c     the OpenAI chat and completion wire shapes
 *   gen_anthropic.c  the Anthropic messages wire shapes
 *   gen_responses.c  the OpenAI Responses wire shapes and its store
 *
 * A generation is driven by one thread at a time (gen.h): its fields have
 * no lock and belong to that thread; its engine job (job) has the engine's
 * own (engine.h). */
#ifndef TF_SERVE_GEN_IMPL_H
#define TF_SERVE_GEN_IMPL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "serve/family.h"
#include "serve/gen.h"
#include "serve/logprobs.h"
#include "serve/metrics.h"
#include "serve/reply.h"

/* One output item of a Responses reply, in the order the items opened. */
struct resp_item {
	enum tf_delta_kind kind; /* REASONING, CONTENT or CALL */
	int call;                /* CALL: the index into tf_gen.calls */
	char id[48];
	struct tf_buf text;      /* REASONING, CONTENT: the item's text */
};

struct tf_resp {
	struct resp_item *items;
	size_t n;
	bool open;               /* items[n - 1] has not been closed (streams: its done events) */
	int64_t seq;             /* the next event's sequence_number */
	json_t *prior;           /* previous_response_id's stored conversation (owned) or NULL */
};

struct call {
	char id[40];
	char *name;
	struct tf_buf args;
};

struct tf_gen {
	const struct tf_gen_env *env;
	struct tf_req req;
	bool stream, thinking, anthropic, started, done, closed;
	struct tf_engine_job *job;
	struct tf_reader *reader;     /* NULL for completions: all text is content */
	uint32_t nprompt, max_tokens;
	char id[48];
	long long created;
	struct tf_buf raw;            /* decoded bytes, a character may be cut */
	struct tf_buf fixed;          /* the complete part, invalid bytes replaced */
	struct tf_buf head;           /* the chunk prefix up to "delta": / "text": */
	struct tf_buf held;           /* text held back where a stop string may start */
	const char *stop_hit;
	struct tf_buf reasoning, content;
	struct call *calls;
	size_t ncalls;
	int block;                    /* Anthropic: the open block's index, -1 none */
	int block_kind;               /* its delta kind; for calls the call index */
	int block_call;
	int nblocks;
	struct tf_buf *out;           /* the pump's output */
	struct tf_engine_result res;
	uint32_t reasoning_tokens;
	bool saw_answer, reader_final;
	bool timing;                  /* stamp token-bearing frames with the token's make time */
	double t_made;                /* when the token being turned into text was made */
	double t_start, t_last_write, t_last_event, t_end;
	uint32_t events;
	uint32_t nread;               /* completion tokens pumped */
	uint32_t nused;               /* of which fed to the text before a stop string hit */
	double itl_sum, itl_max;
	uint32_t itl_n[TF_METRICS_NB + 1];
	/* Log-probabilities (OpenAI routes, when asked): entries not yet
	 * written; a stream sends them with its next chunk, a whole reply all
	 * at the end. */
	bool lp;
	struct tf_lpout lpo;
	size_t lp_read;               /* tokens whose logprobs were taken */
	struct tf_engine_logprob *lpv;/* scratch for one read */
	struct tf_resp resp;          /* the Responses API's output items */
};


/* gen.c. */
/* CLOCK_MONOTONIC seconds. */
double tf_gen_now(void);
/* 2 * nbytes random hex digits (nbytes <= 32) and a NUL into out. */
void tf_gen_hex(char *out, size_t nbytes);
/* Append v (taken over) to the pump's output as an SSE frame; Anthropic
 * and Responses frames get an "event:" line naming their type. */
void tf_gen_sse(struct tf_gen *g, json_t *v);
/* Count a token-bearing frame (inter-token gaps for the metrics). */
void tf_gen_note_event(struct tf_gen *g);
/* A stream's frames for a reader delta (text: its bytes, NUL-terminated):
 * the timing comment when asked, then the route's shape. */
void tf_gen_stream_delta(struct tf_gen *g, const struct tf_delta *d, const char *text);
/* Why the reply ended, in the route's words (OpenAI's finish_reason or
 * Anthropic's stop_reason); *stop_seq: the stop string that ended it, or
 * NULL. */
const char *tf_gen_finish(const struct tf_gen *g, const char **stop_seq);
/* The engine failed the job (or a halt ended it), and what to say. */
bool tf_gen_failed(const struct tf_gen *g);
const char *tf_gen_fail_message(const struct tf_gen *g);
/* v (taken over) as the body of r; out of memory: a 500 instead. */
void tf_gen_reply_json(struct tf_gen *g, struct tf_reply *r, json_t *v);

/* gen_text.c. */
/* n tokens in (made: when each was made): log-probabilities taken, text
 * decoded, cut at stop strings, fed to the reader. */
tf_status tf_gen_text_tokens(struct tf_gen *g, const int32_t *t, const double *made, size_t n);
/* The job ended: a cut character becomes U+FFFD, held text is let go, the
 * reader flushes (exactly once). */
tf_status tf_gen_text_end(struct tf_gen *g);

/* gen_openai.c: chat and completions. */
/* The fixed start of every chunk of a stream (g->head). */
void tf_openai_head(struct tf_gen *g);
/* Streams: the opening chunk (chat: the assistant's role). */
void tf_openai_open(struct tf_gen *g);
void tf_openai_delta(struct tf_gen *g, const struct tf_delta *d, const char *text);
/* Streams: the finish chunk (or the error), usage when asked, [DONE]. */
void tf_openai_close(struct tf_gen *g);
/* The whole reply's object (a failure is answered by gen.c). */
json_t *tf_openai_reply(struct tf_gen *g);

/* gen_anthropic.c: messages. */
/* Streams: message_start. */
void tf_anthropic_open(struct tf_gen *g);
/* Content blocks open and close around the deltas. */
void tf_anthropic_delta(struct tf_gen *g, const struct tf_delta *d, const char *text);
/* Streams: the last block's end, message_delta and message_stop (or the
 * error). */
void tf_anthropic_close(struct tf_gen *g);
/* The whole reply's message object (a failure is answered by gen.c). */
json_t *tf_anthropic_reply(struct tf_gen *g);

/* The Responses API (gen_responses.c). */
/* Before rendering: store and previous_response_id against the store
 * (the stored conversation goes before the input); a refusal (400, or
 * 404 for an unknown id) goes to err. */
tf_status tf_resp_start(struct tf_gen *g, struct tf_reply *err);
/* At the end: keep the finished response and its conversation when the
 * request asked to store it (a failed or cancelled one is not kept). */
void tf_resp_keep(struct tf_gen *g);
/* Streams: response.created and response.in_progress. */
void tf_resp_open(struct tf_gen *g);
/* A reader delta: items open and close around it, and a stream gets its
 * events. */
tf_status tf_resp_delta(struct tf_gen *g, const struct tf_delta *d);
/* Streams: the last item's done events, then response.completed,
 * response.incomplete or response.failed. */
void tf_resp_close(struct tf_gen *g);
/* The whole reply: the response object (a failure is answered by gen.c). */
void tf_resp_reply(struct tf_gen *g, struct tf_reply *r);
void tf_resp_release(struct tf_resp *s);

#endif
