/* propose.h: draft proposers: what a decode row verifies after its pending
 * token. An interface (a table of functions over a context) and the
 * proposers the engine brings:
 *
 *   - prompt lookup: the tokens that followed the most recent earlier
 *     occurrence of the longest suffix (n_max down to n_min tokens) of the
 *     lane's prompt and reply, as llama-server's n-gram drafting does; it
 *     helps code and editing, where replies repeat their context. A lane
 *     whose proposals were rejected outright `quiet_after` times in a row
 *     is left silent for `quiet_rounds` rounds;
 *   - DSpark: the model's DSpark blocks (compute/model.h tf_model_draft),
 *     one call for every row of the round, drawn by each lane's own
 *     sampling rule (so a sampled stream drafts what it would sample);
 *   - a pair: the first proposer, then the second for the rows the first
 *     left without drafts (lookup first, DSpark for the rest).
 *
 * A proposer only proposes: the backend verifies drafts against its own
 * draws (model_backend.h), so what a proposer says never changes a reply's
 * tokens, only how many come out of one round.
 *
 * Engine thread only. */
#ifndef TF_ENGINE_PROPOSE_H
#define TF_ENGINE_PROPOSE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/engine.h"

struct tf_model;

/* The most drafts one row verifies (a row delivers drafts plus one). */
#define TF_PROPOSE_MAX (TF_ENGINE_ROW_MAX - 1)

/* One row's ask: lane's pending token (lane->last) goes in at position pos
 * of cache sequence seq; drafts for pos + 1 .. pos + ndrafts come out. */
struct tf_propose_req {
	struct tf_lane *lane;
	int seq;           /* the lane's cache sequence (for proposers over the model) */
	int64_t pos;       /* where the pending token goes */
	uint32_t max;      /* at most this many drafts (1..TF_PROPOSE_MAX) */
	uint32_t ndrafts;  /* out: 0..max */
	uint32_t source;   /* out: which proposer of a pair drafted (0, 1) */
	int32_t drafts[TF_PROPOSE_MAX];
};

struct tf_proposer {
	const char *name;
	void *ctx;
	/* Fill reqs[i].drafts (and ndrafts) for n rows of one round, each of
	 * a distinct lane; rows with ndrafts already set are left alone. A
	 * failure leaves the round plain (the backend logs it). */
	tf_status (*propose)(void *ctx, struct tf_propose_req *reqs, size_t n);
	/* Optional: the row of req (as propose left it, ndrafts > 0) was
	 * verified and `accepted` of its drafts accepted. */
	void (*observe)(void *ctx, const struct tf_propose_req *req, uint32_t accepted);
	/* Optional: the lane is over. */
	void (*forget)(void *ctx, const struct tf_lane *lane);
	void (*free)(void *ctx);
};

struct tf_lookup_config {
	uint32_t n_max, n_min;  /* suffix lengths tried, longest first (default 4, 2) */
	uint32_t window;        /* tokens searched back from the end (default 4096) */
	uint32_t quiet_after;   /* outright rejections in a row before a rest (default 4) */
	uint32_t quiet_rounds;  /* the rest, in the lane's rows (default 16) */
};

/* Prompt lookup; c NULL or zero fields take the defaults. */
tf_status tf_proposer_lookup(const struct tf_lookup_config *c, struct tf_proposer *out);

/* DSpark drafts of model (borrowed; it must outlive the proposer).
 * TF_ERR_UNSUPPORTED when the pack has no DSpark blocks. */
tf_status tf_proposer_dspark(struct tf_model *model, struct tf_proposer *out);

/* first, then second for the rows first left empty (both handed over). */
tf_status tf_proposer_pair(const struct tf_proposer *first, const struct tf_proposer *second,
			   struct tf_proposer *out);

/* Release a proposer (a zeroed one is a no-op). */
void tf_proposer_release(struct tf_proposer *p);

/* The drafts prompt lookup finds in ctx[0..n) (prompt then reply; the
 * last is the pending token): at most max tokens into out, returns the
 * count. n_max, n_min, window as in tf_lookup_config. */
uint32_t tf_lookup_find(const int32_t *ctx, size_t n, uint32_t n_max, uint32_t n_min,
			uint32_t window, uint32_t max, int32_t *out);

#endif
