/* model_backend.h: the engine backend over the DeepSeek-V4.1 forward
 * (compute/model.h): one cache sequence per lane, every round's prompt
 * pieces and decode rows in one batched forward, keyed sampling
 * (compute/sample.h) from each row's logits at the position it predicts, so
 * the same request gives the same tokens alone or batched.
 *
 * Prompt cache: with cache_entries > 0 the backend keeps prompt prefixes as
 * forked cache sequences (full pages shared with the lane that made them)
 * under a prefix index (prefix.h). A new lane whose prompt starts with a
 * saved prefix forks it and runs only the rest (lane->cached). Prefixes
 * end on block boundaries (TF_PREFIX_BLOCK); run the planner with align =
 * TF_PREFIX_BLOCK so that every prompt runs in the same pieces from a
 * boundary on, whether it resumed there or not: the resumed request then
 * gives the same tokens as a fresh one. Saved prefixes are evicted least
 * recently used first when a lane needs a sequence slot or the round needs
 * cache pages; the model needs a slot per lane plus one per entry.
 *
 * Log-probabilities (params.logprobs) come from tf_sample_logprobs over
 * the same row of logits the token was drawn from.
 *
 * Drafts (drafts > 0): before each round a proposer (propose.h) drafts
 * for the decode rows, depth per row from measured costs (depth.h),
 * never past the request's max_tokens nor for a request with no_draft.
 * A row's pending token and its k drafts run as 1 + k rows of the same
 * forward as every other row and piece; row j's logits give the draw at
 * the position after it, exactly as a plain row's would (keyed sampling,
 * the undrawable ids and the lane's grammar applied in order, the grammar
 * stepped by each draw), and draft j is accepted when it equals draw j.
 * The row delivers the accepted drafts and the draw after them, and the
 * sequence rolls back past the first rejection (the DSpark context rows
 * with it). A grammar is verified through, not switched off: each draw
 * sees the state the delivered tokens before it left. So a drafted reply
 * is the plain one, token for token, with the same log-probabilities; an
 * end-of-sequence, max_tokens or a row no token may continue inside a run
 * ends it where the plain run would. */
#ifndef TF_ENGINE_MODEL_BACKEND_H
#define TF_ENGINE_MODEL_BACKEND_H

#include <stdint.h>

#include "base/status.h"
#include "compute/model.h"
#include "engine/engine.h"
#include "engine/propose.h"

struct tf_engine_model_opts {
	uint32_t cache_entries; /* prompt prefixes kept at once (0: no prompt cache) */
	/* [vocab] or NULL: ids with drawable[id] == 0 are never drawn (their
	 * logits are -inf before sampling and logprobs): the ids the tokenizer
	 * does not define, which no text can stand for. Copied. */
	const uint8_t *drawable;
	/* The most drafts a decode row verifies (0: no drafting; at most
	 * TF_ENGINE_ROW_MAX - 1). */
	uint32_t drafts;
	/* Every row takes `drafts` drafts (when the proposer has them) instead
	 * of the measured depth (depth.h). */
	bool fixed_depth;
	/* The proposer (handed over, also on a failure), or NULL: prompt
	 * lookup, then the DSpark blocks for the rows lookup leaves empty when
	 * the pack has them. Read only with drafts > 0. */
	const struct tf_proposer *proposer;
};

/* A backend over model (which it takes over: the engine frees both). eos
 * is the end-of-sequence id, or -1; o NULL takes the defaults (no cache). */
tf_status tf_engine_model_new(struct tf_model *model, int32_t eos, const struct tf_engine_model_opts *o,
			    struct tf_engine_backend *out);

#endif
