/* model.h: a DeepSeek-V4.1 model of one tensor-parallel rank, ready to run
 * on the CPU or the CUDA backend (compute/ops.h): every tensor of the rank's plan (model/plan.h) in the
 * forward's weights (EXL3 groups as tf_exl3_layer, natives converted as
 * forward.h wants), sliced from the pack or read from the rank's prepared
 * images (tf-prepared(5)), its KV cache (kv.h), and Engram rows of the
 * rank's hash columns read from the pack's `layers.L.engram.table` tensors
 * (or the prepared folder's shards) through the n-gram hash
 * (model/engram_hash.h) over the tokenizer's token map.
 *
 * At world > 1 every rank is a tf_model of its own with a comm
 * (fabric/comm.h: a host backend, or NCCL or the mailbox for a cuda model;
 * compute/tp.h), and every rank must make the same calls in the same order
 * (forward runs collectives; sequence calls do not): compute/group.h runs
 * world ranks on threads of one process, compute/ranks.h as processes.
 *
 * The interface is plain: sequences are created, forked, rolled back and
 * freed on the cache; a forward call takes rows of (sequence, position, id)
 * and writes logits [R, vocab] f32. Each sequence's rows in one call are
 * consecutive and continue it (the first at its length). One call at a
 * time per model.
 *
 * DSpark (when the pack has its blocks): every forward call also writes
 * the blocks' context rows, and tf_model_draft drafts the next tokens.
 *
 * Engram rows: a table row holds 256 values (engram_rows.h); each of the
 * hash's columns contributes the first engram_head_dim of them (all 256 in
 * the release), columns concatenated in order. */
#ifndef TF_COMPUTE_MODEL_H
#define TF_COMPUTE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compute/kv.h"
#include "model/config.h"

struct tf_progress;

/* Where a rank's model runs. */
enum tf_model_backend { TF_MODEL_CPU = 0, TF_MODEL_CUDA = 1 };

struct tf_model_opts {
	enum tf_model_backend backend; /* cpu (the default) or cuda */
	int device;                /* cuda: the device ordinal (0: the first) */
	int threads;               /* cpu backend workers (0: one per CPU) */
	int slots;                 /* sequences at once (0: 8) */
	int64_t max_positions;     /* per sequence (0: 4096) */
	int64_t pages;             /* cache pages of 256 positions (0: enough for
				    * every slot at max_positions) */
	enum tf_kv_row_fmt window_fmt, pool_fmt, index_fmt; /* cache formats (0: FP8) */
	int ring;                  /* window ring rows per layer (kv.h; 0: 256 on the
				    * CPU, 1024 on cuda, where a longer pass of a
				    * prompt reads the experts' weights fewer times) */
	int rank, world;           /* tensor-parallel rank of world (0, 0: rank 0 of 1) */
	struct tf_comm *comm;      /* world > 1: the rank's collectives (host memory,
				    * or device memory for a cuda model; borrowed,
				    * outlives the model) */
	const char *prepared;      /* NULL: slice the pack; else load the rank's images
				    * from this folder: tf-prepare's -o DIR, or a rank
				    * folder DIR/<key>/rank<r>of<w> itself */
	bool synthetic;            /* read no tensor data: EXL3 trellises are random
				    * bits drawn on the backend from synth_seed, the
				    * other tensors (suh, svh, natives, Engram rows)
				    * what tf-pack-synth writes for synth_seed
				    * (model/synth.h); for benchmarks over a sparse
				    * pack (tf-pack-synth --sparse), which has the
				    * headers. Not with prepared. */
	uint64_t synth_seed;
	bool batch_invariant;      /* cuda: a row's logits do not depend on the rows
				    * sharing its forward calls, nor on their count
				    * (tf_cuda_be_set_invariant); slower. The cpu
				    * backend refuses it (TF_ERR_UNSUPPORTED). */
	struct tf_progress *progress; /* weight bytes placed, or NULL (borrowed) */
};

struct tf_comm;

struct tf_model;

/* Open the pack in pack_dir and load the rank's weights (opts NULL:
 * defaults, rank 0 of 1). A pack that fails its plan is refused with the
 * plan's status (TF_ERR_FORMAT or TF_ERR_CONFIG, naming the tensor), never
 * a crash. With opts->prepared the pack gives the config, tokenizer and
 * key (headers only) and the weights come from the images, which equal
 * the pack's slices: a folder for another pack, rank or world is refused
 * with TF_ERR_MISMATCH (or TF_ERR_NOTFOUND when tf-prepare's DIR has no
 * folder for this rank), a damaged one (header, bounds, any payload byte,
 * a missing entry) with TF_ERR_FORMAT or TF_ERR_VERSION naming the file.
 * Natives a pack stores as f16 are rounded to bf16 in the images
 * (tf-prepared(5)), so equality holds for packs that store them as bf16,
 * as tf-pack-synth does.
 *
 * On cuda (opts->backend) every tensor lives in device memory: each is
 * read (or generated) into bounded host memory and uploaded through the
 * backend's pinned staging, so host memory stays flat in the model's size,
 * and a projection's routed experts lie as one image (ops.h). A rank whose
 * weights and cache do not fit the device's free memory is refused with
 * TF_ERR_NOMEM before any upload, naming both sizes; no device or driver
 * is TF_ERR_UNAVAILABLE (tf_cuda_be_new). */
tf_status tf_model_open(const char *pack_dir, const struct tf_model_opts *opts,
			struct tf_model **out);
void tf_model_free(struct tf_model *m);
const struct tf_config *tf_model_config(const struct tf_model *m);
/* The op backend the rank runs on (borrowed: tf_model_free frees it). */
struct tf_be *tf_model_be(struct tf_model *m);

/* What one rank holds on its backend, in bytes: EXL3 groups (trellis,
 * suh, svh; the routed experts' share of them in experts), the other
 * weights (the embedding's share in embed), and the KV cache. */
struct tf_model_bytes {
	uint64_t exl3, experts, native, embed, kv;
};
void tf_model_bytes(const struct tf_model *m, struct tf_model_bytes *out);

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

/* Whether R rows are ones tf_model_forward takes: ids in the vocabulary,
 * open sequences whose rows are consecutive and continue them, positions
 * below max_positions. TF_ERR_ARG saying which row is wrong. */
tf_status tf_model_check_rows(const struct tf_model *m, int R, const int32_t *ids,
			      const int64_t *pos, const int *seq);

/* Run R rows: ids, positions and sequences per row; logits [R, vocab] f32.
 * With DSpark blocks, also writes their context rows of these positions. */
tf_status tf_model_forward(struct tf_model *m, int R, const int32_t *ids, const int64_t *pos,
			   const int *seq, float *logits);

/* The same call with the logits of rows out[0..n_out) alone (indices
 * into the R rows, increasing): logits [n_out, vocab], equal to those
 * rows of tf_model_forward's. On one rank the final norm and the head run
 * on those rows only, so a prompt's rows that need no logits cost neither
 * the head nor the download; through a mirror (ranks) the whole call runs
 * and the rows are picked from it. n_out 0: no logits (logits may be
 * NULL). TF_ERR_ARG for rows out of order or range. */
tf_status tf_model_forward_rows(struct tf_model *m, int R, const int32_t *ids, const int64_t *pos,
				const int *seq, int n_out, const int *out, float *logits);

/* The same call, each row's token drawn on the backend from its logits
 * (sample.h's keyed rule with params[r] at draw_pos[r], the position the
 * token will take) without the logits leaving it: tokens [R]. Draws what
 * tf_sample_row draws from tf_model_forward's logits. */
tf_status tf_model_forward_sample(struct tf_model *m, int R, const int32_t *ids,
				  const int64_t *pos, const int *seq,
				  const struct tf_sample_params *params, const int64_t *draw_pos,
				  int32_t *tokens);

/* The phase totals of the model's forward calls so far (TF_PHASES,
 * compute/phases.h: JSON, malloc'd, the caller frees), or NULL when
 * TF_PHASES is off. */
char *tf_model_phases(const struct tf_model *m);

/* The collectives the rank's calls have made so far (its comm's count; 0
 * at world 1): per decode step, the difference over steps. */
uint64_t tf_model_collectives(const struct tf_model *m);

/* DSpark drafting (compute/dspark.h): tokens one draft gives (the config's
 * dspark_block), 0 when the pack has none. */
int tf_model_draft_block(const struct tf_model *m);
/* Draft for n distinct sequences: anchor[s] is the token the target chose
 * for position P = tf_model_seq_len(seq[s]) (not yet run). draft [n, block]
 * gets the tokens for P + 1 .. P + block, drawn by params[s] (NULL:
 * greedy; sample.h's keyed rule at the position each token will occupy);
 * confidence [n, block] in (0, 1), or NULL (NaN without a confidence
 * head). Changes no sequence. TF_ERR_UNSUPPORTED without DSpark blocks. */
struct tf_sample_params;
tf_status tf_model_draft(struct tf_model *m, int n, const int *seq, const int32_t *anchor,
			 const struct tf_sample_params *params, int32_t *draft, float *confidence);

/* A mirror of a rank's calls (compute/ranks.h keeps the followers of a
 * process-level group in step with rank 0 through one). The calls that
 * run collectives (forward, forward_sample, draft) go to before() first: a
 * non-zero status refuses the call. Every call that changes the cache or
 * runs collectives then goes to after() with its status and result
 * (sequence calls: the slot in call->dst). Called on the thread that makes
 * the call; the pointers are the call's, borrowed for its duration. */
enum tf_model_op {
	TF_MODEL_OP_SEQ_NEW = 1,
	TF_MODEL_OP_SEQ_FORK = 2,
	TF_MODEL_OP_SEQ_ROLLBACK = 3,
	TF_MODEL_OP_SEQ_FREE = 4,
	TF_MODEL_OP_FORWARD = 5,
	TF_MODEL_OP_FORWARD_SAMPLE = 6,
	TF_MODEL_OP_DRAFT = 7,
};

struct tf_model_call {
	enum tf_model_op op;
	int R;                     /* rows (draft: sequences) */
	const int32_t *ids;        /* [R] (draft: the anchors) */
	const int64_t *pos;        /* [R] */
	const int *seq;            /* [R] */
	const struct tf_sample_params *params; /* forward_sample, draft: [R] or NULL */
	const int64_t *draw_pos;   /* forward_sample: [R] */
	int src, dst;              /* sequence calls: the source (fork, rollback, free), the result */
	int64_t at;                /* rollback: the position kept below */
	tf_status st;              /* after(): the call's status */
};

struct tf_model_mirror {
	tf_status (*before)(void *ctx, const struct tf_model_call *call);
	void (*after)(void *ctx, const struct tf_model_call *call);
	void *ctx;
};

/* Install a mirror (NULL removes it; copied). Not while a call runs. */
void tf_model_set_mirror(struct tf_model *m, const struct tf_model_mirror *mirror);

#endif
