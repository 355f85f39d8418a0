/* planner.h: the round planner: which queued requests the engine admits,
 * which prompt pieces share the next round with the decode rows, and what
 * it learns from the round's timing. An interface (a table of functions
 * over a context) with one default policy:
 *
 *   - a token budget per round; every decoding lane gets its row first (one
 *     token of budget each), prompt pieces fill the rest, with at least
 *     min_piece prompt tokens a round so prompts never starve;
 *   - fairness between filling prompts: the budget is shared evenly, least
 *     recently served first, so a long prompt does not hold back short ones;
 *   - foreground before background (the engine's queue order; the planner
 *     also serves foreground prompts first within a round);
 *   - admission: refuse a prompt longer than the context, wait while every
 *     lane is taken;
 *   - optionally, pieces cut at multiples of `align` prompt tokens.
 *
 * Every call comes from the engine thread. */
#ifndef TF_ENGINE_PLANNER_H
#define TF_ENGINE_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/engine.h"

enum tf_plan_verdict {
	TF_PLAN_ADMIT,  /* start it now */
	TF_PLAN_WAIT,   /* stop admitting this round; it keeps its place */
	TF_PLAN_SKIP,   /* not now, but look at the ones behind it */
	TF_PLAN_REFUSE, /* never: fail it with the words written to why */
};

struct tf_planner {
	const char *name;
	void *ctx;
	/* cand is a queued request (state NULL, filled 0); running counts the
	 * lanes that hold a stream. */
	enum tf_plan_verdict (*admit)(void *ctx, const struct tf_lane *cand, size_t running,
				      char *why, size_t whylen);
	/* Choose pieces for the lanes still filling their prompt (filling[0..n),
	 * foreground first, in admission order) given nrows decode rows in the
	 * round. Writes at most cap pieces (lane, start, end) and returns the
	 * count. A lane gets at most one piece a round; start must be filled. */
	size_t (*plan)(void *ctx, struct tf_lane *const *filling, size_t n, size_t nrows,
		       struct tf_engine_piece *pieces, size_t cap);
	/* After each round: what ran and how long the forward took. */
	void (*after)(void *ctx, const struct tf_engine_round *r, double seconds);
	void (*free)(void *ctx);
};

struct tf_planner_config {
	uint32_t round_tokens; /* token budget per round (default 2048) */
	uint32_t max_lanes;    /* running requests at once (default 64) */
	uint32_t min_piece;    /* prompt tokens a round at least (default 32) */
	uint32_t context;      /* longest prompt + completion (0: no limit) */
	uint32_t align;        /* pieces never cross a multiple of align prompt
				* tokens (0: no such cut). With the prefix
				* cache's block here, a prompt resumed at a
				* block runs the same pieces as a fresh one,
				* so it gives the same tokens. */
};

/* The default policy; zero fields take the defaults above. */
tf_status tf_planner_default(const struct tf_planner_config *c, struct tf_planner *out);

#endif
