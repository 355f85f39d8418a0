/* model.h: a DeepSeek-V4.1 model loaded from a pack, ready to run on the
 * CPU backend: every tensor of the rank's plan (model/plan.h; world 1 in
 * this version) in the forward's weights (EXL3 groups as tf_exl3_layer,
 * natives converted as forward.h wants), its KV cache (kv.h), and Engram
 * rows read from the pack's `layers.L.engram.table` tensors through the
 * n-gram hash (model/engram_hash.h) over the tokenizer's token map.
 *
 * The interface is plain: sequences are created, forked, rolled back and
 * freed on the cache; a forward call takes rows of (sequence, position, id)
 * and writes logits [R, vocab] f32. Each sequence's rows in one call are
 * consecutive and continue it (the first at its length). One call at a
 * time per model.
 *
 * Engram rows: a table row holds 256 values (engram_rows.h); each of the
 * hash's columns contributes the first engram_head_dim of them (all 256 in
 * the release), columns concatenated in order. */
#ifndef TF_COMPUTE_MODEL_H
#define TF_COMPUTE_MODEL_H

#include <stdint.h>

#include "base/status.h"
#include "compute/kv.h"
#include "model/config.h"

struct tf_model_opts {
	int threads;               /* backend workers (0: one per CPU) */
	int slots;                 /* sequences at once (0: 8) */
	int64_t max_positions;     /* per sequence (0: 4096) */
	int64_t pages;             /* cache pages of 256 positions (0: enough for
				    * every slot at max_positions) */
	enum tf_kv_row_fmt window_fmt, pool_fmt, index_fmt; /* cache formats (0: FP8) */
};

struct tf_model;

/* Open the pack in pack_dir and load it (opts NULL: defaults). A pack that
 * fails its plan is refused with the plan's status (TF_ERR_FORMAT or
 * TF_ERR_CONFIG, naming the tensor), never a crash. */
tf_status tf_model_open(const char *pack_dir, const struct tf_model_opts *opts,
			struct tf_model **out);
void tf_model_free(struct tf_model *m);
const struct tf_config *tf_model_config(const struct tf_model *m);

/* Sequences on the cache. */
tf_status tf_model_seq_new(struct tf_model *m, int *seq);
tf_status tf_model_seq_fork(struct tf_model *m, int src, int *dst);
/* Keep positions < pos (kv.h's tf_kv_rollback rules). */
tf_status tf_model_seq_rollback(struct tf_model *m, int seq, int64_t pos);
int64_t tf_model_seq_len(const struct tf_model *m, int seq);
void tf_model_seq_free(struct tf_model *m, int seq);
/* Free pages in the cache pool (INT64_MAX when the model keeps no paged
 * pool: nothing runs short). A sequence growing from n to n + k positions
 * takes ceil((n + k) / 256) - ceil(n / 256) pages (TF_KV_PAGE). */
int64_t tf_model_free_pages(const struct tf_model *m);

/* Run R rows: ids, positions and sequences per row; logits [R, vocab] f32. */
tf_status tf_model_forward(struct tf_model *m, int R, const int32_t *ids, const int64_t *pos,
			   const int *seq, float *logits);

#endif
