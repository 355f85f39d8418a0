/* forward_moe.c: the forward's MoE (dsv41-forward-spec.md §10: routing,
 * grouping by expert, the ragged experts ops, the shared expert, the
 * combine) and Engram (§11: the host provider's rows, gathered across
 * ranks, and the gate). */
#include <stdlib.h>

#include "base/alloc.h"
#include "compute/forward_impl.h"
#include "compute/tp.h"
#include "fabric/comm.h"
#include "model/engram_layout.h"

/* ---- MoE (§10) ---- */

/* The shared expert's SwiGLU MLP on x [n, D] bf16: y [n, D] f32. */
static tf_status expert(struct tf_fwd *f, const struct tf_lin *w1, const struct tf_lin *w2,
			const struct tf_lin *w3, const struct tf_tensor *x, struct tf_tensor *y)
{
	int64_t n = x->shape[0], I = f->Il;
	int mark = f->ntmp;
	struct tf_tensor *gt, *up, *a;
	tf_status st;
	if (!(st = fwd_tmp(f, &gt, TF_DT_F32, 2, n, I, 1)) && !(st = fwd_lin(f, w1, x, gt)) &&
	    !(st = fwd_tmp(f, &up, TF_DT_F32, 2, n, I, 1)) && !(st = fwd_lin(f, w3, x, up)) &&
	    !(st = fwd_tmp(f, &a, TF_DT_BF16, 2, n, I, 1)) &&
	    !(st = f->be->ops->swiglu(f->be, gt, up, f->c->swiglu_limit, a)))
		st = fwd_lin(f, w2, a, y);
	fwd_release(f, mark);
	return st;
}

/* One projection k (0: w1, 1: w2, 2: w3) of layer L's routed experts over
 * rows grouped by expert (offsets [E + 1]). */
static tf_status experts_lin(struct tf_fwd *f, uint32_t L, int k, const struct tf_tensor *off,
			     const struct tf_tensor *x, struct tf_tensor *y)
{
	struct tf_be *be = f->be;
	int E = (int)tf_config_experts_of(f->c, L);
	struct tf_tensor ids = tf_tensor_rows_of(&f->eids, 0, E);
	if (f->ex[L].q[k])
		return be->ops->exl3_matmul_experts(be, f->ex[L].q[k], E, &ids, off, x, y);
	return be->ops->linear_experts(be, f->ex[L].w[k], E, &ids, off, x, y);
}

tf_status fwd_moe(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x,
		     struct tf_tensor *branch)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	int R = f->R, mark = f->ntmp;
	int64_t E = tf_config_experts_of(c, L), k = tf_config_topk_of(c, L), D = c->hidden, I = f->Il;
	int64_t T = R * k;
	struct tf_tensor *lg, *ids, *wts, *off, *pair, *src, *xe, *gt, *up, *a, *ye, *Y, *sh;
	tf_status st;
	/* route, group the (row, slot) pairs by expert, run each projection's
	 * experts in one op over the grouped rows, put the results back in
	 * route order */
	if ((st = fwd_tmp(f, &lg, TF_DT_F32, 2, R, E, 1)) ||
	    (st = be->ops->linear(be, x, &lw->gate, lg)) ||
	    (st = fwd_tmp(f, &ids, TF_DT_I32, 2, R, k, 1)) ||
	    (st = fwd_tmp(f, &wts, TF_DT_F32, 2, R, k, 1)) ||
	    (st = be->ops->moe_route(be, lg, &lw->gate_bias, (int)k, c->routed_scale, ids, wts)) ||
	    (st = fwd_tmp(f, &off, TF_DT_I32, 1, E + 1, 1, 1)) ||
	    (st = fwd_tmp(f, &pair, TF_DT_I32, 1, T, 1, 1)) ||
	    (st = fwd_tmp(f, &src, TF_DT_I32, 1, T, 1, 1)) ||
	    (st = be->ops->moe_group(be, ids, (int)E, off, pair, src)) ||
	    (st = fwd_tmp(f, &xe, TF_DT_BF16, 2, T, D, 1)) ||
	    (st = be->ops->rows_copy(be, x, src, xe, NULL)) || /* xe [T, D]: pair p's row */
	    (st = fwd_tmp(f, &gt, TF_DT_F32, 2, T, I, 1)) ||
	    (st = experts_lin(f, L, 0, off, xe, gt)) ||
	    (st = fwd_tmp(f, &up, TF_DT_F32, 2, T, I, 1)) ||
	    (st = experts_lin(f, L, 2, off, xe, up)) ||
	    (st = fwd_tmp(f, &a, TF_DT_BF16, 2, T, I, 1)) ||
	    (st = be->ops->swiglu(be, gt, up, c->swiglu_limit, a)) ||
	    (st = fwd_tmp(f, &ye, TF_DT_F32, 2, T, D, 1)) ||
	    (st = experts_lin(f, L, 1, off, a, ye)) ||
	    (st = fwd_tmp(f, &Y, TF_DT_F32, 3, R, k, D)))
		goto out;
	struct tf_tensor Yv = fwd_view2(Y, T, D); /* Y [R, k, D]: pair p lands at its t */
	if ((st = be->ops->rows_copy(be, ye, NULL, &Yv, pair)) ||
	    (st = fwd_tmp(f, &sh, TF_DT_F32, 2, R, D, 1)) ||
	    (st = expert(f, &lw->sh_w1, &lw->sh_w2, &lw->sh_w3, x, sh)))
		goto out;
	if (!f->comm) {
		st = be->ops->moe_combine(be, Y, wts, sh, branch);
	} else { /* the rank's fp32 partial of w2's sums, summed over ranks, rounded once */
		struct tf_tensor *part;
		if (!(st = fwd_tmp(f, &part, TF_DT_F32, 2, R, D, 1)) &&
		    !(st = be->ops->moe_combine(be, Y, wts, sh, part)) &&
		    !(st = tf_tp_sum_f32(&f->tp, part)))
			st = be->ops->convert(be, part, branch);
	}
out:
	fwd_release(f, mark);
	return st;
}

/* ---- Engram (§11) ---- */

/* The Engram rows of the call for layer L into rows [R, cols * hd] bf16:
 * each rank's hash columns from the host provider, gathered across ranks
 * at world > 1 (every rank's part padded to the widest). */
static tf_status engram_rows(struct tf_fwd *f, uint32_t L, struct tf_tensor *rows,
			     struct tf_tensor *blocked)
{
	const struct tf_config *c = f->c;
	struct tf_be *be = f->be;
	int R = f->R, W = f->world, mark = f->ntmp;
	uint32_t cols = tf_config_hash_cols(c), c0, c1, wide = 0, lo[TF_BOOT_MAX_WORLD];
	int64_t hd = c->engram_head_dim;
	for (int r = 0; r < W; r++) {
		tf_engram_rank_cols(cols, (uint32_t)r, (uint32_t)W, &c0, &c1);
		lo[r] = c0;
		wide = c1 - c0 > wide ? c1 - c0 : wide;
	}
	tf_engram_rank_cols(cols, (uint32_t)f->rank, (uint32_t)W, &c0, &c1);
	int64_t mine = (int64_t)(c1 - c0) * hd, width = W > 1 ? (int64_t)wide * hd : mine;
	uint16_t *host = tf_calloc((size_t)R * (size_t)(width ? width : 1), sizeof *host);
	uint8_t *blk = tf_calloc((size_t)R, 1);
	int32_t *at = NULL;
	struct tf_tensor *part, *all;
	tf_status st = host && blk ? TF_OK : fwd_nomem();
	if (st || (st = f->engram(f->engram_ctx, L, R, f->ids, f->pos, f->seq, mine, width, host, blk)) ||
	    (st = be->ops->upload(be, blocked, blk)))
		goto out;
	if (W == 1) {
		st = be->ops->upload(be, rows, host);
		goto out;
	}
	/* rank r's column c of row i is row (r * R + i) * wide + c - lo[r] of all */
	if ((st = fwd_tmp(f, &part, TF_DT_BF16, 2, R, width ? width : 1, 1)) ||
	    (st = be->ops->upload(be, part, host)) ||
	    (st = fwd_tmp(f, &all, TF_DT_BF16, 3, W, R, width ? width : 1)) ||
	    (st = tf_tp_gather(&f->tp, part, all)))
		goto out;
	if (!(at = fwd_i32s((int64_t)R * cols)))
		st = fwd_nomem();
	for (int i = 0; i < R && !st; i++)
		for (uint32_t col = 0, r = 0; col < cols; col++) {
			while (r + 1 < (uint32_t)W && col >= lo[r + 1])
				r++;
			at[(int64_t)i * cols + col] = (int32_t)(((int64_t)r * R + i) * wide + col - lo[r]);
		}
	struct tf_tensor av = fwd_view2(all, (int64_t)W * R * wide, hd), rv = fwd_view2(rows, (int64_t)R * cols, hd);
	if (!st)
		st = fwd_move(f, &av, at, &rv, NULL, (int64_t)R * cols);
out:
	fwd_release(f, mark);
	free(host);
	free(blk);
	free(at);
	return st;
}

tf_status fwd_engram(struct tf_fwd *f, uint32_t L, struct tf_tensor *X)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	int R = f->R, mark = f->ntmp;
	int64_t width = (int64_t)tf_config_hash_cols(c) * c->engram_head_dim;
	int64_t S = c->hc_mult, D = c->hidden;
	struct tf_tensor *rows, *blocked, *kv;
	tf_status st;
	if (!(st = fwd_tmp(f, &rows, TF_DT_BF16, 2, R, width, 1)) &&
	    !(st = fwd_tmp(f, &blocked, TF_DT_U8, 1, R, 1, 1)) &&
	    !(st = engram_rows(f, L, rows, blocked)) &&
	    !(st = fwd_tmp(f, &kv, TF_DT_BF16, 2, R, (S + 1) * D, 1)) &&
	    !(st = fwd_lin(f, &lw->engram_wkv, rows, kv)))
		st = f->be->ops->engram_gate(f->be, X, kv, &lw->engram_qk, blocked, c->eps,
					     c->engram_gate_clamp, X);
	fwd_release(f, mark);
	return st;
}

