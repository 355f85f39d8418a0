/* ops_args.h: the argument checks every backend makes before an op runs:
 * dtypes and shapes from the tensor headers, never the values of index
 * tensors (a device backend cannot read them without waiting). Each
 * returns TF_OK or TF_ERR_ARG naming the op, and the dimensions the op
 * runs over. Shared by cpu_*.c and cuda_*.c so that both refuse exactly
 * the same calls. Thread safe (pure). */
#ifndef TF_COMPUTE_OPS_ARGS_H
#define TF_COMPUTE_OPS_ARGS_H

#include <stdint.h>

#include "compute/ops.h"

/* convert: n values. */
tf_status tf_args_convert(const struct tf_tensor *x, const struct tf_tensor *y, int64_t *n);
/* linear: R rows of K through N outputs. */
tf_status tf_args_linear(const struct tf_tensor *x, const struct tf_tensor *w,
			 const struct tf_tensor *y, int64_t *R, int64_t *K, int64_t *N);
/* The ragged experts ops (exl3_matmul_experts, linear_experts; op names
 * the one checked): R rows of x, N outputs, G groups. */
tf_status tf_args_experts(const char *op, const struct tf_tensor *expert_ids,
			  const struct tf_tensor *offsets, const struct tf_tensor *x,
			  const struct tf_tensor *y, int64_t *R, int64_t *N, int64_t *G);
/* exl3_matmul: R rows of K through N (the layer's geometry). The layer
 * alone, for the experts ops (op names the one checked). */
struct tf_exl3_layer;
tf_status tf_args_exl3_matmul(const struct tf_exl3_layer *L, const struct tf_tensor *x,
			      const struct tf_tensor *y, int64_t *R, int64_t *K, int64_t *N);
tf_status tf_args_exl3_layer(const char *op, const struct tf_exl3_layer *L, int64_t K, int64_t N);
/* sample: R rows of V logits. */
tf_status tf_args_sample(const struct tf_tensor *logits, int64_t *R, int64_t *V);
/* embed: R ids, C copies, D wide, V table rows. */
tf_status tf_args_embed(const struct tf_tensor *table, const struct tf_tensor *ids,
			const struct tf_tensor *out, int64_t *R, int64_t *C, int64_t *D, int64_t *V);
/* rmsnorm: R rows of n. */
tf_status tf_args_rmsnorm(const struct tf_tensor *x, const struct tf_tensor *w,
			  const struct tf_tensor *y, int64_t *R, int64_t *n);
/* rope: R rows of H vectors of n. */
tf_status tf_args_rope(const struct tf_tensor *x, const struct tf_tensor *pos,
		       const struct tf_rope_freqs *rf, const struct tf_tensor *y, int64_t *R,
		       int64_t *H, int64_t *n);
/* attention: R rows of H heads of D; NK keys; room of key_idx. */
tf_status tf_args_attention(const struct tf_tensor *q, const struct tf_tensor *keys,
			    const struct tf_tensor *key_off, const struct tf_tensor *key_idx,
			    const struct tf_tensor *sink, const struct tf_tensor *out, int64_t *R,
			    int64_t *H, int64_t *D);
/* compressor: E groups of r (1 or 2) positions of width W. */
tf_status tf_args_compressor(const struct tf_tensor *u, const struct tf_tensor *g,
			     const struct tf_tensor *w, const struct tf_tensor *lat, int64_t *E,
			     int64_t *r, int64_t *W);
/* index_score: R rows, Hi heads of Di, N keys, nblk block columns (0
 * without blocks). */
tf_status tf_args_index_score(const struct tf_tensor *iq, const struct tf_tensor *iw,
			      const struct tf_tensor *keys, const struct tf_tensor *n_vis,
			      const struct tf_tensor *blocks, int bs, const struct tf_tensor *scores,
			      int64_t *R, int64_t *Hi, int64_t *Di, int64_t *N, int64_t *nblk);
/* index_topk: R rows of N scores. */
tf_status tf_args_index_topk(const struct tf_tensor *scores, const struct tf_tensor *n_vis, int k,
			     const struct tf_tensor *sel, const struct tf_tensor *n_sel, int64_t *R,
			     int64_t *N);
/* candidate_blocks: R rows of N scores, nblk block columns, need =
 * ceil(N / bs) of them used. */
tf_status tf_args_candidate_blocks(const struct tf_tensor *scores, const struct tf_tensor *n_vis,
				   int bs, int topb, const struct tf_tensor *blocks, int64_t *R,
				   int64_t *N, int64_t *nblk, int64_t *need);
/* attn_keys: n rows, k selections a row (0 without sel); the table bases
 * in [0, INT32_MAX]. */
tf_status tf_args_attn_keys(const struct tf_tensor *sel, const struct tf_tensor *n_sel, int64_t p0,
			    int window, int64_t pbase, int64_t wbase,
			    const struct tf_tensor *key_off, const struct tf_tensor *key_idx, int64_t *n,
			    int64_t *k);

/* moe_route: R rows of E experts. */
tf_status tf_args_moe_route(const struct tf_tensor *lg, const struct tf_tensor *bias, int k,
			    const struct tf_tensor *ids, const struct tf_tensor *weights, int64_t *R,
			    int64_t *E);
/* moe_group: T pairs, k a row. */
tf_status tf_args_moe_group(const struct tf_tensor *ids, int E, const struct tf_tensor *offsets,
			    const struct tf_tensor *pair, const struct tf_tensor *src, int64_t *T,
			    int64_t *k);
/* swiglu: n values. */
tf_status tf_args_swiglu(const struct tf_tensor *gate, const struct tf_tensor *up,
			 const struct tf_tensor *a, int64_t *n);
/* moe_combine: R rows of k routes of D. */
tf_status tf_args_moe_combine(const struct tf_tensor *y, const struct tf_tensor *w,
			      const struct tf_tensor *shared, const struct tf_tensor *branch,
			      int64_t *R, int64_t *k, int64_t *D);
/* hc_mix: R rows of S streams, n = S * D values a row, M = 2S + S^2. */
tf_status tf_args_hc_mix(const struct tf_tensor *x, const struct tf_tensor *fn,
			 const struct tf_tensor *base, const struct tf_tensor *scale, int iters,
			 const struct tf_tensor *pre, const struct tf_tensor *post,
			 const struct tf_tensor *comb, int64_t *R, int64_t *S, int64_t *n, int64_t *M);
/* hc_collapse, hc_post, engram_gate, stream_mean: R rows of S streams of D. */
tf_status tf_args_hc_collapse(const struct tf_tensor *x, const struct tf_tensor *pre,
			      const struct tf_tensor *c, int64_t *R, int64_t *S, int64_t *D);
tf_status tf_args_hc_post(const struct tf_tensor *x, const struct tf_tensor *b,
			  const struct tf_tensor *post, const struct tf_tensor *comb,
			  const struct tf_tensor *out, int64_t *R, int64_t *S, int64_t *D);
tf_status tf_args_engram_gate(const struct tf_tensor *x, const struct tf_tensor *kv,
			      const struct tf_tensor *qk, const struct tf_tensor *blocked,
			      const struct tf_tensor *out, int64_t *R, int64_t *S, int64_t *D);
tf_status tf_args_stream_mean(const struct tf_tensor *x, const struct tf_tensor *out, int64_t *R,
			      int64_t *S, int64_t *D);

#endif
