/* forward.h: the DeepSeek-V4.1 forward over the op backend (dsv41-forward-
 * spec.md): embedding, the four streams with their mHC sites, the per-layer
 * CSA2 attention (swa, full with compressor and indexer, reindex over the
 * candidate blocks, reuse), MoE, Engram, the final norm and head.
 *
 * One call runs R rows of one or more sequences: each sequence's rows are
 * consecutive and continue it (the first at its KV length). Rows read and
 * write their sequence's KV cache (kv.h); within a layer every cache write
 * lands before that layer's attention reads, so a row sees the earlier rows
 * of its call.
 *
 * A sequence longer than the window ring (256 - window rows) in one call
 * runs in several passes, which equals one pass (chunked prefill is exact).
 *
 * Tensor parallelism (tf_fwd_new_tp): each of world ranks runs the same
 * call with its plan's slices (model/plan.h) and the forward inserts the
 * collectives (tp.h): the embedding's vocabulary rows are gathered (each
 * row comes from the rank that holds it: exact), Engram rows of each
 * rank's hash columns are gathered, the partial fp32 outputs of the
 * row-split wo_b and of the experts' w2 (with the combine) are summed in
 * rank order and then rounded to bf16 once (spec §3 step 5), and the
 * vocabulary columns of the head's logits are gathered. Everything else
 * (wq_a, wkv, compressor, indexer, router, mHC, norms) is replicated, so
 * every rank's streams and caches hold the same bits. World 1 makes no
 * collective call.
 *
 * The DSpark (MTP) blocks run in their own call, tf_fwd_draft (spec §13):
 * a draft pass over each sequence's block of rows after its last position,
 * reading the blocks' window rings (context rows written by dspark.h) and
 * writing nothing; at world > 1 with the same collectives.
 *
 * Weights are dense tensors or EXL3 handles (struct tf_lin), on the
 * forward's backend. The forward never touches a tensor's memory: host
 * arrays (ids, positions, rows addresses from the KV cache's bookkeeping,
 * Engram rows) go in by upload, logits, taps and hidden rows come out by
 * download, and every move between tensors is an op (ops.h: rows_copy,
 * cache_write, cache_read, page_rows, attn_keys, moe_group). The KV cache
 * lives on the same backend (kv.h), and routed experts run as one ragged
 * op per projection over rows grouped by expert, so a device backend runs
 * a call without the host reading device memory until its logits. */
#ifndef TF_COMPUTE_FORWARD_H
#define TF_COMPUTE_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "compute/kv.h"
#include "compute/ops.h"
#include "model/config.h"

/* A projection y = x W^T: dense W [N, K] (bf16/f16/f32) or EXL3 weights. */
struct tf_lin {
	struct tf_tensor w;
	const struct tf_exl3_layer *q;  /* when set, w is unused */
};

#define TF_FWD_MAX_GROUPS 16

/* One backbone block's weights (borrowed by the forward). Norms and mHC
 * tensors are f32; the router gate and weights_proj dense. Tensors a
 * layer's mode does not use stay empty. Shapes are a rank's: with w ranks,
 * wq_b has H/w heads, sink [H/w], wo_a the rank's G/w output groups (local
 * index 0..G/w-1), wo_b K = G/w·o_lora, the experts' and shared expert's
 * w1/w3 N and w2 K = I/w; the rest is whole. */
struct tf_fwd_layer {
	struct tf_tensor attn_norm, ffn_norm, q_norm, kv_norm;  /* [D], [D], [q_lora], [hd] */
	struct tf_tensor hc_fn[2], hc_base[2], hc_scale[2];     /* [0] hc_attn, [1] hc_ffn */
	struct tf_tensor sink;                                  /* [H] */
	struct tf_lin wq_a, wkv, wq_b, wo_a[TF_FWD_MAX_GROUPS], wo_b;
	struct tf_lin comp_wkv, comp_wgate, ix_wk;              /* KV sources */
	struct tf_tensor comp_norm, ix_k_norm;                  /* [hd], [Di] */
	struct tf_lin ix_wq_b;                                  /* index sources */
	struct tf_tensor ix_wp;                                 /* [Hi, D] */
	struct tf_tensor gate, gate_bias;                       /* [E, D], [E] f32 */
	struct tf_lin *w1, *w2, *w3;                            /* [E] each */
	struct tf_lin sh_w1, sh_w2, sh_w3;
	struct tf_lin engram_wkv;                               /* Engram layers */
	struct tf_tensor engram_qk;                             /* [S, D] f32 */
};

struct tf_fwd_weights {
	struct tf_tensor embed;       /* [V/w, D] bf16: the rank's vocabulary rows */
	struct tf_tensor norm;        /* [D] */
	struct tf_lin head;           /* [V/w, D]: the rank's vocabulary columns */
	struct tf_fwd_layer *layers;  /* [layers], then [mtp_layers] DSpark blocks when
				       * mtp_norm is set */
	struct tf_tensor mtp_norm;    /* [D]: the last DSpark block's norm, or empty
				       * (no draft pass) */
};

/* y = x W^T on be: l's EXL3 weights or its dense tensor (ops.h). */
tf_status tf_fwd_lin(struct tf_be *be, const struct tf_lin *l, const struct tf_tensor *x,
		       struct tf_tensor *y);

/* The Engram rows of R rows for Engram layer `layer` (spec §11), in host
 * memory: row r of rows [R, stride] bf16 bits starts with the width =
 * n_cols * engram_head_dim values of the hash columns [c0, c0+n_cols) the
 * rank owns (tf_engram_rank_cols; all of them at world 1; stride >= width,
 * the rest left as it is), and blocked[R] (1: gate 0). The provider knows
 * each sequence's earlier tokens. The forward uploads them. It may be
 * called more than once for one call with the same arguments (a device
 * backend records a decode step before it runs it: ops->graph) and must
 * give the same rows each time. */
typedef tf_status (*tf_engram_rows_fn)(void *ctx, uint32_t layer, int R, const int32_t *ids,
				       const int64_t *pos, const int *seq, int64_t width,
				       int64_t stride, uint16_t *rows, uint8_t *blocked);

struct tf_fwd;

/* The KV cache shape the forward needs for c (window rings of the backbone
 * layers and the DSpark blocks, one source per KV source layer). */
void tf_fwd_kv_config(const struct tf_config *c, int64_t pages, int slots, int64_t max_positions,
		      struct tf_kv_config *out);
/* A forward over be, c, w and kv (all borrowed; they outlive it). engram
 * may be NULL when c has no Engram layers. */
tf_status tf_fwd_new(struct tf_be *be, const struct tf_config *c, const struct tf_fwd_weights *w,
		     struct tf_kv *kv, tf_engram_rows_fn engram, void *engram_ctx,
		     struct tf_fwd **out);

/* A tensor-parallel rank: comm (borrowed; comm->rank and
 * comm->world give the rank) carries the collectives; w holds the rank's
 * slices. A NULL comm is world 1. TF_ERR_CONFIG when the world does not
 * divide the heads, output groups, expert width and vocabulary;
 * TF_ERR_UNSUPPORTED for a device comm on a host-memory backend. On a
 * CUDA backend the collectives go through pinned host memory with a host
 * comm (and its decode steps are not graphed) or on the backend's stream
 * with a device comm (graphed, the ranks' graph caches voting over the
 * comm: the backend's agree hook is set, and cleared by tf_fwd_free):
 * tp.h. Every rank must run the same calls (rows, positions,
 * sequences). */
struct tf_comm;
tf_status tf_fwd_new_tp(struct tf_be *be, const struct tf_config *c,
			const struct tf_fwd_weights *w, struct tf_kv *kv, tf_engram_rows_fn engram,
			void *engram_ctx, struct tf_comm *comm, struct tf_fwd **out);
void tf_fwd_free(struct tf_fwd *f);

struct tf_phases;
/* Time the call's phases on p (phases.h; NULL: off): "embed", "L<i>.engram",
 * "L<i>.attn", "L<i>.moe" for each block (DSpark blocks included), "head",
 * "out" (the logits downloaded or the tokens drawn).
 * p is borrowed. */
void tf_fwd_set_phases(struct tf_fwd *f, struct tf_phases *p);

/* Run R rows (one call at a time per forward; the backend's threads work
 * inside): ids, positions and sequence slots per row; logits [R, vocab]
 * f32 out (host memory). Reserves the sequences' pages and commits their
 * new lengths. TF_ERR_ARG when rows do not continue their sequences.
 * A decode call (one row a sequence, R sequences) is handed to the
 * backend's graph op under the key "fwd.decode.R<R>" (".taps" added with
 * taps): on CUDA it replays a captured graph of the same work (ops.h,
 * cuda_graph.c), with the same logits bit for bit. Other calls run their
 * ops directly. */
tf_status tf_fwd_run(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
		     const int *seq, float *logits);
/* The same, also writing the DSpark taps when taps is not NULL (spec §13):
 * taps [R, n_dspark_targets, D] bf16 bits (host memory), T_L = bf(mean_s
 * X_s) of the streams entering each target block L. */
tf_status tf_fwd_run_taps(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, float *logits, uint16_t *taps);

/* The same, with the logits of rows out[0..n_out) alone (row indices,
 * increasing): logits [n_out, vocab]. The final norm and the head run on
 * those rows only, so a prompt's rows whose logits nobody reads cost no
 * head matmul and no download; n_out 0 runs none. Every row still writes
 * the cache (and taps). */
tf_status tf_fwd_run_rows(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, int n_out, const int *out, float *logits, uint16_t *taps);
/* Whether out[0..n_out) are rows tf_fwd_run_rows takes of R (TF_ERR_ARG
 * naming the first that is not), and *all when they are every row. */
tf_status tf_fwd_check_out(int R, int n_out, const int *out, const float *logits, bool *all);

/* The same, drawing each row's token on the backend instead of bringing
 * its logits to the host: the backend's sample op (ops.h) with params[r]
 * at draw_pos[r] (the position the token will take), tokens [R] (host).
 * What tf_sample_row draws from the logits tf_fwd_run_taps gives. */
struct tf_sample_params;
tf_status tf_fwd_run_sample(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			    const int *seq, const struct tf_sample_params *params,
			    const int64_t *draw_pos, int32_t *tokens, uint16_t *taps);

/* The DSpark draft pass (spec §13): R rows, each sequence's rows
 * consecutive at positions len .. len + n - 1 of its (unchanged) length
 * len; ids are [anchor, noise...]. The rows run the DSpark blocks from the
 * identity pre; a row at P + i attends to its block's context rows
 * max(0, P + i - window + 1) .. P - 1 and to every draft row of its
 * sequence (non-causal; the draft rows pass through the window format as
 * if stored). logits [R, vocab] f32 = head(RMS(h; mtp_norm)) without the
 * Markov bias, and h [R, D] bf16 bits into hidden when not NULL. Writes no
 * cache state. TF_ERR_UNSUPPORTED when the weights have no DSpark blocks. */
tf_status tf_fwd_draft(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
		       const int *seq, float *logits, uint16_t *hidden);
/* The key lists of a draft pass (exposed for tests): n draft rows at
 * P .. P + n - 1 over a key table of the context rows lo .. P - 1 (lo =
 * max(0, P - window + 1)) then the n draft rows. Row i's keys are the
 * context rows max(lo, P + i - window + 1) .. P - 1, then every draft row,
 * as ops.h's key_off [n + 1] and key_idx (either may be NULL). Returns the
 * keys in all. */
int64_t tf_fwd_draft_keys(int64_t P, int n, int64_t window, int32_t *off, int32_t *idx);

#endif
