/* gen_impl.h: what gen.c and the Responses API's wire shapes
 * (gen_responses.c) share: a generation's state and the frame helpers.
 * Not a public interface. */
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


/* CLOCK_MONOTONIC seconds. */
double tf_gen_now(void);
/* 2 * nbytes random hex digits (nbytes <= 32) and a NUL into out. */
void tf_gen_hex(char *out, size_t nbytes);
/* v as compact JSON, reals with 9 digits; takes v over; the caller frees. */
char *tf_gen_dump(json_t *v);
/* An error body of the route's shape (gen.h's tf_reply_error). New reference. */
json_t *tf_gen_error_json(bool anthropic, int status, const char *kind, const char *code,
			  const char *param, const char *msg);
/* Append v (taken over) to the pump's output as an SSE frame; Anthropic
 * and Responses frames get an "event:" line naming their type. */
void tf_gen_sse(struct tf_gen *g, json_t *v);
/* Count a token-bearing frame (inter-token gaps for the metrics). */
void tf_gen_note_event(struct tf_gen *g);

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
