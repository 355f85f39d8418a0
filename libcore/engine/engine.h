/* engine.h: the engine: lanes (one per running request), one engine thread
 * running rounds (take cancels, admit, plan, run prompt pieces and decode
 * rows in one backend forward, deliver tokens), cancel, halt.
 *
 * Requests are submitted from any thread and come back as a job handle: the
 * submitter reads the tokens as they are delivered (tf_engine_job_read
 * blocks up to a deadline) and the result once the job ends. The forward
 * itself is a backend (the CPU forward, the stub of stub.h) and the choice
 * of what runs in a round is a planner (planner.h); the engine owns the
 * loop, the queues, failure isolation and the hand-over to readers.
 *
 * What this is not: sampling, tokenizing and text live in the backend and
 * the server; the engine moves token ids. */
#ifndef TF_ENGINE_ENGINE_H
#define TF_ENGINE_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* The most tokens one decode row may deliver in a round (a drafted row
 * delivers its accepted drafts and the bonus token). */
#define TF_ENGINE_ROW_MAX 8
/* The most top alternatives a token's log-probabilities carry. */
#define TF_ENGINE_TOP_MAX 20

/* What a request asks of the engine. */
struct tf_engine_params {
	uint32_t max_tokens; /* at least 1 */
	bool stop_eos;       /* end at the backend's end-of-sequence token */
	bool background;     /* queued behind foreground work */
	uint64_t seed;       /* keyed sampling: the draw depends on seed, position, id */
	float temperature;   /* <= 0: greedy */
	float top_p, min_p;
	int32_t top_k;       /* 0: all */
	bool logprobs;       /* deliver each token's log-probability */
	uint8_t top_logprobs;/* and this many most likely tokens (<= TF_ENGINE_TOP_MAX) */
	/* Constrained output (grammar/grammar.h), or NULL: only tokens the
	 * grammar allows are drawn, and end-of-sequence only where the output
	 * is whole (it is the only choice once nothing can follow). Handed to
	 * the engine by a successful tf_engine_submit (freed with the job);
	 * the caller keeps it on a failure. The backend must constrain
	 * (tf_engine_backend.constrains), else the job fails at once. */
	struct tf_grammar *grammar;
	/* -1: the constraint starts at the first token; else at the token
	 * after this id (reasoning runs free until its end marker). */
	int32_t grammar_after;
	/* Draft nothing for this request (the request's "draft": false): the
	 * serial reference. Drafted or not, a request gives the same tokens. */
	bool no_draft;
};

/* A delivered token's log-probability under the row's own softmax (no
 * temperature or cuts), and the most likely tokens of that row in order
 * (ties to the lower id). */
struct tf_engine_logprob {
	float logprob;
	uint8_t ntop;
	int32_t top_ids[TF_ENGINE_TOP_MAX];
	float top_lp[TF_ENGINE_TOP_MAX];
};

/* One running request as the backend and the planner see it. Fields are
 * written by the engine thread only; backends and planners read them (and
 * own state) from that thread. */
struct tf_lane {
	uint64_t id;                      /* submission order, from 1 */
	const int32_t *prompt;            /* nprompt ids, owned by the engine */
	uint32_t nprompt;
	uint32_t filled;                  /* prompt ids already in the cache */
	uint32_t cached;                  /* of which the backend found cached at begin */
	uint32_t ngen;                    /* tokens delivered so far */
	int32_t last;                     /* the last delivered token (-1 before the first) */
	uint64_t served;                  /* the round that last ran a piece of it */
	const struct tf_engine_params *params;
	void *state;                      /* the backend's */
	int32_t gstate;                   /* the grammar's state (constrain.h) */
	const int32_t *gen;               /* the ngen delivered tokens (engine thread only;
					   * moves as it grows) */
	uint64_t drafted, accepted;       /* drafts verified and accepted so far */
};

/* A prompt piece: ids [start, end) of lane's prompt go into the cache. When
 * end == nprompt the piece is final and the backend samples the first
 * token(s) from its last position into tokens. */
struct tf_engine_piece {
	struct tf_lane *lane;
	uint32_t start, end;
	tf_status st;    /* set by the backend: a failure fails this request alone */
	uint32_t ntokens;
	int32_t tokens[TF_ENGINE_ROW_MAX];
	struct tf_engine_logprob *lp; /* when the lane asks for logprobs (else NULL):
				       * the backend fills lp[i] for tokens[i] */
};

/* A decode row: the lane's last token goes in, 0..TF_ENGINE_ROW_MAX tokens
 * come out (0: nothing this round, as a stub's silence). A backend that
 * drafts verifies `drafted` drafts after the last token in the same
 * forward and delivers the `accepted` of them that equal its own draws,
 * then the draw after them: ntokens = accepted + 1. */
struct tf_engine_row {
	struct tf_lane *lane;
	tf_status st;
	uint32_t drafted, accepted;
	uint32_t ntokens;
	int32_t tokens[TF_ENGINE_ROW_MAX];
	struct tf_engine_logprob *lp; /* as in a piece */
};

/* One round: pieces and rows share a forward (chunked prefill). */
struct tf_engine_round {
	uint64_t index;
	struct tf_engine_piece *pieces;
	size_t npieces;
	struct tf_engine_row *rows;
	size_t nrows;
};

/* A backend's prompt (prefix) cache counters. */
struct tf_engine_cache_stats {
	bool on;             /* the backend has a prompt cache */
	uint64_t lookups;    /* prompts looked up */
	uint64_t hits;       /* of which resumed a cached prefix */
	uint64_t hit_tokens; /* prompt tokens resumed */
	uint64_t saves, evictions;
	uint32_t entries;    /* prefixes held now */
};

/* A backend. Every call comes from the engine thread. */
struct tf_engine_backend {
	const char *name;
	void *ctx;
	int32_t eos; /* end-of-sequence id, or -1 */
	/* A new stream: set lane->state and lane->cached (prompt ids the backend
	 * already holds; filled starts there). A failure refuses this request
	 * alone, with tf_errmsg as the reason. */
	tf_status (*begin)(void *ctx, struct tf_lane *lane);
	/* Run the round's pieces and rows in one forward. Per-piece and per-row
	 * failures go into their st; a returned failure fails every running
	 * request with its reason. */
	tf_status (*forward)(void *ctx, struct tf_engine_round *r);
	/* The stream is over (finished, cancelled or failed): free lane->state. */
	void (*end)(void *ctx, struct tf_lane *lane);
	void (*free)(void *ctx);
	/* Optional: the backend's prompt cache counters (called after rounds). */
	void (*cache_stats)(void *ctx, struct tf_engine_cache_stats *out);
	/* The backend applies params.grammar (engine/constrain.h) to each draw. */
	bool constrains;
};

struct tf_planner;

/* How a job ended. */
enum tf_engine_end {
	TF_ENGINE_RUNNING = 0,
	TF_ENGINE_EOS,       /* the backend's end-of-sequence token (not delivered) */
	TF_ENGINE_LENGTH,    /* max_tokens delivered */
	TF_ENGINE_CANCELLED, /* tf_engine_job_cancel */
	TF_ENGINE_FAILED,    /* refused, a failed piece or forward, or a halt: see why */
};

struct tf_engine_result {
	enum tf_engine_end end;
	tf_status st;        /* TF_OK unless failed (TF_ERR_CANCELLED after a halt) */
	const char *why;     /* failure reason, borrowed from the job; "" when none */
	bool halted;         /* failed by tf_engine_halt */
	uint32_t prompt, cached, completion;
	uint32_t rounds;     /* rounds in which the job ran */
	uint32_t drafts;     /* decode rows that verified drafts */
	uint32_t drafted;    /* draft tokens verified */
	uint32_t accepted;   /* of which accepted (delivered as drawn) */
	double queued_s;     /* submit to admission */
	double ttft_s;       /* submit to the first token (0 when none) */
	double prefill_s;    /* admission to the end of the prompt */
	double decode_s;     /* end of the prompt to the end */
};

/* Engine-wide counters (for /health and /metrics). */
struct tf_engine_stats {
	uint64_t rounds, pieces, rows, prompt_tokens, generated;
	uint64_t drafts, drafted, accepted; /* rows with drafts, draft tokens, accepted */
	uint32_t running, filling, waiting;
	double forward_s;
	bool halted;
	struct tf_engine_cache_stats cache;
};

struct tf_engine;
struct tf_engine_job;

/* Start an engine over a backend and a planner (both handed over: the
 * engine frees them at close). Starts the engine thread. */
tf_status tf_engine_new(const struct tf_engine_backend *be, const struct tf_planner *pl,
			struct tf_engine **out);

/* Stop the engine between rounds: every queued, filling or running job
 * fails with reason (halted set), and later submissions fail at once with
 * the same reason. Returns at once; the thread does the work. Idempotent:
 * the first reason stays. Thread safe. */
void tf_engine_halt(struct tf_engine *e, const char *reason);

/* Halt (if not yet) with "engine closed", join the thread, free the
 * backend, the planner and the engine. Jobs still held by readers stay
 * valid until tf_engine_job_free. NULL is a no-op. Call once. */
void tf_engine_close(struct tf_engine *e);

/* Submit a request: the prompt is copied. *out is the caller's handle
 * (tf_engine_job_free). A halted engine still returns a job, already
 * failed with the halt's reason. Thread safe. */
tf_status tf_engine_submit(struct tf_engine *e, const int32_t *prompt, size_t n,
			   const struct tf_engine_params *p, struct tf_engine_job **out);

/* Copy up to cap tokens delivered since the last read into buf, waiting up
 * to wait_ms (0: do not wait, <0: forever) for at least one or for the end.
 * *done turns true once the job ended and every token was read. Returns the
 * count copied. One reader per job. */
size_t tf_engine_job_read(struct tf_engine_job *j, int32_t *buf, size_t cap, int wait_ms,
			  bool *done);

/* tf_engine_job_read that also gives, for each token copied, when it was
 * made: the CLOCK_MONOTONIC seconds at which the backend's forward that
 * produced it returned (the start of the token's delivery path, for
 * latency measurements). made has room for cap values. */
size_t tf_engine_job_read_timed(struct tf_engine_job *j, int32_t *buf, double *made, size_t cap,
				int wait_ms, bool *done);

/* Copy the log-probabilities of delivered tokens [from, from + n) into
 * out (a job submitted with params.logprobs; others read zeros). Returns
 * the count copied (fewer when fewer were delivered). Thread safe. */
size_t tf_engine_job_logprobs(struct tf_engine_job *j, size_t from, struct tf_engine_logprob *out,
			      size_t n);

/* Call fn(ctx) from the engine thread after each round that delivered
 * tokens to j and when j ends (end_only: only when it ends). If j has
 * already ended, fn is called at once, from the caller. fn runs under the
 * job's lock: it must be short and must not call tf_engine_job_* on j.
 * Passing fn NULL unregisters; once that returns, fn is not running and
 * will not run again. Thread safe. */
void tf_engine_job_notify(struct tf_engine_job *j, void (*fn)(void *ctx), void *ctx,
			  bool end_only);

/* Ask the engine to stop the job; it takes effect at the next round
 * boundary (end CANCELLED). Thread safe; idempotent. */
void tf_engine_job_cancel(struct tf_engine_job *j);

/* The job's result so far (final once done). */
void tf_engine_job_result(struct tf_engine_job *j, struct tf_engine_result *r);

/* Release the caller's handle; a job still running is cancelled first.
 * NULL is a no-op. */
void tf_engine_job_free(struct tf_engine_job *j);

/* A snapshot of the counters. Thread safe. */
void tf_engine_stats(struct tf_engine *e, struct tf_engine_stats *s);

/* The backend's end-of-sequence id (or -1). */
int32_t tf_engine_eos(const struct tf_engine *e);

/* Short words for an end ("eos", "length", "cancelled", "failed"). */
const char *tf_engine_end_str(enum tf_engine_end end);

#endif
