/* dspark.h: DSpark speculative drafting of DeepSeek-V4.1 (dsv41-forward-
 * spec.md §13, dsv41-model-facts.md §2 "DSpark MTP").
 *
 * Two halves, both over the op backend:
 *  - context: after each target call, the taps of its rows (the bf16 means
 *    of the streams entering the target layers, tf_fwd_run_taps) give
 *    main_x = RMS(main_proj(taps); main_norm), and each DSpark block i
 *    stores bf(RoPE(RMS(wkv_i(main_x); kv_norm_i), t)) as its window row of
 *    position t. The rows live in the sequence's window rings (kv.h), so
 *    fork and rollback keep them with the rest of the sequence;
 *  - draft: the block [anchor, noise x (block - 1)] at positions P ..
 *    P + block - 1 (P the sequence's length, the anchor the token the
 *    target chose for P) runs the DSpark blocks (tf_fwd_draft), giving base
 *    logits per row; then, one row after another, the Markov bias
 *    head_M . embed_M[prev] is added (prev: the anchor, then each draft)
 *    and the row's token drawn (sample.h's keyed rule at the position the
 *    token will occupy, P + 1 + j; greedy at temperature <= 0). Row j's
 *    confidence is sigmoid(proj . [h_j || embed_M[prev_j]]).
 *
 * A draft reads the sequence and changes nothing. UNCONFIRMED in the spec,
 * resolved here as noted in dspark.c: the confidence's sigmoid and the
 * Markov embedding row's precision. */
#ifndef TF_COMPUTE_DSPARK_H
#define TF_COMPUTE_DSPARK_H

#include <stdint.h>

#include "base/status.h"
#include "compute/forward.h"
#include "compute/kv.h"
#include "compute/ops.h"
#include "compute/sample.h"
#include "model/config.h"

/* The DSpark tensors outside the blocks (the blocks' own are the forward's
 * layers[layers ..]). */
struct tf_dspark_weights {
	struct tf_lin main_proj;       /* [D, n_dspark_targets * D] (mtp.0.main_proj) */
	struct tf_tensor main_norm;    /* [D] f32 (mtp.0.main_norm) */
	struct tf_tensor markov_embed; /* [V, rank] bf16 or f16 */
	struct tf_tensor markov_head;  /* [V, rank] bf16 or f16 */
	struct tf_tensor confidence;   /* [D + rank] f32, or empty (no confidence head) */
};

struct tf_dspark;

/* A drafter over be, c, the forward's weights fw (with its DSpark blocks),
 * w, the cache and the forward (all borrowed). TF_ERR_CONFIG when c has no
 * DSpark blocks; TF_ERR_ARG naming a tensor of the wrong shape. */
tf_status tf_dspark_new(struct tf_be *be, const struct tf_config *c,
			const struct tf_fwd_weights *fw, const struct tf_dspark_weights *w,
			struct tf_kv *kv, struct tf_fwd *f, struct tf_dspark **out);
void tf_dspark_free(struct tf_dspark *d);

/* Tokens a draft gives (the config's dspark_block). */
int tf_dspark_block(const struct tf_dspark *d);

/* Write the context rows of R target rows: taps [R, n_dspark_targets, D]
 * bf16 bits as tf_fwd_run_taps wrote them, each row's position and
 * sequence. A sequence's rows are written in order, so a call longer than
 * the ring keeps the latest. */
tf_status tf_dspark_context(struct tf_dspark *d, int R, const uint16_t *taps,
			    const int64_t *pos, const int *seq);

/* Draft for n sequences (distinct) at once: sequence seq[s] with anchor
 * anchor[s] at its length P. params[s] sets the draws (NULL: greedy for
 * all). draft [n, block] the tokens for P + 1 .. P + block; confidence
 * [n, block] or NULL (NaN when the pack has no confidence head). */
tf_status tf_dspark_draft(struct tf_dspark *d, int n, const int *seq, const int32_t *anchor,
			  const struct tf_sample_params *params, int32_t *draft,
			  float *confidence);

/* The Markov bias of n previous tokens: bias [n, vocab] f32 =
 * head_M . embed_M[prev] (fp32 sums of the stored values). */
tf_status tf_dspark_markov_bias(struct tf_dspark *d, int n, const int32_t *prev, float *bias);

#endif
