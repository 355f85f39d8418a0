/* constrain.c: a lane's grammar applied to its rows (constrain.h). */
#include "engine/constrain.h"

#include <math.h>

#include "grammar/grammar.h"

/* gstate beyond the grammar's states: waiting for grammar_after, or the
 * output ended (end-of-sequence drawn at a whole output). */
#define WAITING (-2)
#define ENDED (-3)

void tf_lane_constrain_init(struct tf_lane *lane)
{
	const struct tf_engine_params *p = lane->params;
	lane->gstate = !p->grammar ? ENDED : p->grammar_after >= 0 ? WAITING : tf_grammar_start(p->grammar);
}

tf_status tf_lane_constrain(struct tf_lane *lane, float *logits, size_t n, int32_t eos)
{
	struct tf_grammar *g = lane->params->grammar;
	if (!g || lane->gstate == WAITING || lane->gstate == ENDED)
		return TF_OK;
	if (lane->gstate < 0)
		return tf_err(TF_ERR_RANGE, "constrained output: no token can continue the output");
	uint32_t count = 0;
	const uint64_t *m = tf_grammar_mask(g, lane->gstate, &count);
	if (!m)
		return tf_err_wrap(TF_ERR_RANGE, "constrained output: ");
	bool whole = tf_grammar_accepting(g, lane->gstate);
	if (!count && !(whole && eos >= 0))
		return tf_err(TF_ERR_RANGE, "constrained output: no token can continue the output "
			      "after %u tokens", lane->ngen);
	size_t words = (n + 63) / 64, have = (tf_grammar_vocab(g) + 63) / 64;
	float keep = eos >= 0 && (size_t)eos < n ? logits[eos] : 0.0f;
	for (size_t w = 0; w < words; w++) {
		uint64_t bits = w < have ? m[w] : 0;
		if (bits == ~0ull)
			continue;
		size_t end = (w + 1) * 64 < n ? (w + 1) * 64 : n;
		for (size_t id = w * 64; id < end; id++)
			if (!(bits >> (id & 63) & 1))
				logits[id] = -INFINITY;
	}
	if (whole && eos >= 0 && (size_t)eos < n)
		logits[eos] = isfinite(keep) ? keep : 0.0f; /* the sampler may end here */
	return TF_OK;
}

bool tf_lane_constrained(const struct tf_lane *lane)
{
	return lane->params->grammar && lane->gstate != WAITING && lane->gstate != ENDED;
}

void tf_lane_constrain_step(struct tf_lane *lane, int32_t token)
{
	const struct tf_engine_params *p = lane->params;
	struct tf_grammar *g = p->grammar;
	if (!g || lane->gstate == ENDED)
		return;
	if (lane->gstate == WAITING) {
		if (token == p->grammar_after)
			lane->gstate = tf_grammar_start(g);
		return;
	}
	if (lane->gstate >= 0 && tf_grammar_accepting(g, lane->gstate) &&
	    tf_grammar_next_token(g, lane->gstate, (uint32_t)token) < 0) {
		lane->gstate = ENDED; /* end-of-sequence at a whole output */
		return;
	}
	lane->gstate = tf_grammar_next_token(g, lane->gstate, (uint32_t)token);
}
