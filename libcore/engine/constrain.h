/* constrain.h: a lane's constrained output (tf_engine_params.grammar)
 * as a backend applies it to each draw: before sampling, every id the
 * grammar does not allow leaves the row (-inf) and end-of-sequence stays
 * only where the output is whole; after sampling, the drawn id moves the
 * lane's grammar state. With grammar_after set, the row is free until that
 * id (the end of reasoning) has been drawn.
 *
 * Engine thread only (a lane's grammar grows as it is used). */
#ifndef TF_ENGINE_CONSTRAIN_H
#define TF_ENGINE_CONSTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/engine.h"

/* Set lane->gstate from lane->params (the engine calls it at submit). */
void tf_lane_constrain_init(struct tf_lane *lane);

/* Mask a row of n logits for lane (a no-op without a grammar or before it
 * starts). eos is the end-of-sequence id or -1. TF_ERR_RANGE with the
 * reason when no token may follow (the reply must end with that error, not
 * with unconstrained text); TF_ERR_NOMEM and the grammar's own limits
 * likewise fail the row. */
tf_status tf_lane_constrain(struct tf_lane *lane, float *logits, size_t n, int32_t eos);

/* True when the grammar applies to lane's next draw (it has one, its
 * grammar_after has been drawn, and the output has not ended). */
bool tf_lane_constrained(const struct tf_lane *lane);

/* Move lane's grammar state past the drawn token. */
void tf_lane_constrain_step(struct tf_lane *lane, int32_t token);

#endif
