/* forward.c: the DeepSeek-V4.1 forward over the op backend (forward.h);
 * section numbers are dsv41-forward-spec.md's.
 *
 * The forward never reads or writes a tensor's memory: host data (ids,
 * positions, row addresses built from the KV cache's host bookkeeping)
 * goes in through upload, the logits and taps come out through download,
 * and every other move is an op (rows_copy, cache_write, cache_read,
 * page_rows, attn_keys, moe_group), so the same code runs on a device
 * backend without reading device memory inside a call. */
#include "compute/forward_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/phases.h"
#include "compute/sample.h"
#include "compute/tp.h"
#include "fabric/comm.h"

/* ---- scratch tensors, released at the end of a call ---- */

tf_status fwd_nomem(void)
{
	return tf_err(TF_ERR_NOMEM, "forward: out of memory");
}

tf_status fwd_tmp(struct tf_fwd *f, struct tf_tensor **out, enum tf_dt dt, int ndim,
			 int64_t a, int64_t b, int64_t c)
{
	if (f->ntmp == MAX_TMP)
		return tf_err(TF_ERR_INTERNAL, "forward: more than %d scratch tensors", MAX_TMP);
	struct tf_tensor *t = &f->tmp[f->ntmp];
	*t = ndim == 1 ? tf_tensor_make(NULL, dt, 1, a)
	     : ndim == 2 ? tf_tensor_make(NULL, dt, 2, a, b)
			 : tf_tensor_make(NULL, dt, 3, a, b, c);
	tf_status st = f->be->ops->alloc(f->be, t);
	if (st)
		return st;
	f->ntmp++;
	*out = t;
	return TF_OK;
}

void fwd_release(struct tf_fwd *f, int mark)
{
	while (f->ntmp > mark)
		f->be->ops->release(f->be, &f->tmp[--f->ntmp]);
}

/* A scratch tensor holding a host array (int32 [n], or n bytes for u8). */
tf_status fwd_host(struct tf_fwd *f, struct tf_tensor **out, enum tf_dt dt,
			  const void *src, int64_t n)
{
	tf_status st = fwd_tmp(f, out, dt, 1, n ? n : 1, 1, 1);
	if (!st && n)
		st = f->be->ops->upload(f->be, *out, src);
	return st;
}

/* An int32 host array, allocated by the caller's helpers below. */
int32_t *fwd_i32s(int64_t n)
{
	return tf_alloc_array((size_t)(n ? n : 1), sizeof(int32_t));
}

/* Row moves: y rows (yi) = x rows (xi), indices from host arrays (NULL:
 * in order). */
tf_status fwd_move(struct tf_fwd *f, const struct tf_tensor *x, const int32_t *xi,
		      struct tf_tensor *y, const int32_t *yi, int64_t n)
{
	int mark = f->ntmp;
	struct tf_tensor *a = NULL, *b = NULL;
	tf_status st = TF_OK;
	if ((xi && (st = fwd_host(f, &a, TF_DT_I32, xi, n))) ||
	    (yi && (st = fwd_host(f, &b, TF_DT_I32, yi, n))))
		goto out;
	if (!xi && !yi && n != tf_tensor_rows(x))
		st = tf_err(TF_ERR_INTERNAL, "forward: a move of %lld rows", (long long)n);
	else
		st = f->be->ops->rows_copy(f->be, x, a, y, b);
out:
	fwd_release(f, mark);
	return st;
}

/* Cache rows at host-listed rows idx[n]: write x's rows, or read into out. */
tf_status fwd_cache_put(struct tf_fwd *f, const struct tf_rowfmt *fmt, const struct tf_tensor *x,
			   const int32_t *idx, int64_t n, struct tf_tensor *cache)
{
	int mark = f->ntmp;
	struct tf_tensor *t;
	tf_status st = fwd_host(f, &t, TF_DT_I32, idx, n);
	if (!st)
		st = f->be->ops->cache_write(f->be, fmt, x, t, cache);
	fwd_release(f, mark);
	return st;
}

tf_status fwd_cache_get(struct tf_fwd *f, const struct tf_rowfmt *fmt,
			   const struct tf_tensor *cache, const int32_t *idx, int64_t n,
			   struct tf_tensor *out)
{
	int mark = f->ntmp;
	struct tf_tensor *t;
	tf_status st = fwd_host(f, &t, TF_DT_I32, idx, n);
	if (!st)
		st = f->be->ops->cache_read(f->be, fmt, cache, t, out);
	fwd_release(f, mark);
	return st;
}

tf_status tf_fwd_lin(struct tf_be *be, const struct tf_lin *l, const struct tf_tensor *x,
		       struct tf_tensor *y)
{
	if (l->q) {
		if (!be->ops->exl3_matmul)
			return tf_err(TF_ERR_UNSUPPORTED, "forward: backend %s has no EXL3 matmul",
				      be->ops->name);
		return be->ops->exl3_matmul(be, l->q, x, y);
	}
	if (!l->w.data)
		return tf_err(TF_ERR_ARG, "forward: a projection has no weights");
	return be->ops->linear(be, x, &l->w, y);
}

tf_status fwd_lin(struct tf_fwd *f, const struct tf_lin *l, const struct tf_tensor *x,
		     struct tf_tensor *y)
{
	return tf_fwd_lin(f->be, l, x, y);
}

/* A row-split projection's output y [R, N] bf16 (wo_b): at world 1 lin
 * rounds once; at world > 1 each rank's fp32 partial is summed over the
 * ranks in rank order (the comm gets the backend's buffer), then rounded
 * once (spec §3 step 5, §9). */
tf_status fwd_lin_sum(struct tf_fwd *f, const struct tf_lin *l, const struct tf_tensor *x,
			 struct tf_tensor *y)
{
	if (!f->comm)
		return fwd_lin(f, l, x, y);
	int mark = f->ntmp;
	struct tf_tensor *p;
	tf_status st;
	if (!(st = fwd_tmp(f, &p, TF_DT_F32, 2, tf_tensor_rows(y), tf_tensor_cols(y), 1)) &&
	    !(st = fwd_lin(f, l, x, p)) &&
	    !(st = tf_tp_sum_f32(&f->tp, p)))
		st = f->be->ops->convert(f->be, p, y);
	fwd_release(f, mark);
	return st;
}

/* ---- set-up ---- */

int fwd_src_index(const struct tf_config *c, uint32_t layer)
{
	for (uint32_t i = 0; i < c->n_kv_sources; i++)
		if (c->kv_sources[i] == layer)
			return (int)i;
	return -1;
}

void tf_fwd_kv_config(const struct tf_config *c, int64_t pages, int slots, int64_t max_positions,
		      struct tf_kv_config *out)
{
	memset(out, 0, sizeof *out);
	out->layers = (int)tf_config_all_layers(c);
	out->dim = (int)c->head_dim;
	out->rope = (int)c->rope_dim;
	out->index_dim = (int)c->index_dim;
	out->window = (int)c->window;
	out->sources = (int)c->n_kv_sources;
	for (uint32_t i = 0; i < c->n_kv_sources && i < TF_KV_MAX_SRC; i++)
		out->ratio[i] = (int)tf_config_ratio(c, c->kv_sources[i]);
	out->pool_fmt = TF_KV_FP8;
	out->index_fmt = TF_KV_FP8;
	out->pages = pages;
	out->slots = slots;
	out->max_positions = max_positions;
}

/* A tensor present with n elements (n < 0: any). */
static tf_status need_t(const struct tf_tensor *t, int64_t n, uint32_t L, const char *name)
{
	if (!t->data)
		return tf_err(TF_ERR_ARG, "forward: layer %u: %s is missing", L, name);
	if (n >= 0 && tf_tensor_numel(t) != n)
		return tf_err(TF_ERR_ARG, "forward: layer %u: %s has %lld values, want %lld", L, name,
			      (long long)tf_tensor_numel(t), (long long)n);
	return TF_OK;
}

/* A projection [n, k]: EXL3 weights, or a dense tensor of that shape. */
static tf_status need_l(const struct tf_lin *l, int64_t n, int64_t k, uint32_t L, const char *name)
{
	if (l->q)
		return TF_OK;
	tf_status st = need_t(&l->w, n * k, L, name);
	if (!st && tf_tensor_cols(&l->w) != k)
		st = tf_err(TF_ERR_ARG, "forward: layer %u: %s is not [%lld, %lld]", L, name,
			    (long long)n, (long long)k);
	return st;
}

/* Every tensor a block's mode uses, with the rank's shape (§2-§11). */
static tf_status check_layer(const struct tf_fwd *f, const struct tf_fwd_layer *l, uint32_t L)
{
	const struct tf_config *c = f->c;
	int64_t D = c->hidden, S = c->hc_mult, M = 2 * S + S * S, hd = c->head_dim, H = f->Hl;
	int64_t ql = c->q_lora, G = f->Gl, ol = c->o_lora, Hi = c->index_heads;
	int64_t Di = c->index_dim, I = f->Il, E = tf_config_experts_of(c, L);
	tf_status st;
	if ((st = need_t(&l->attn_norm, D, L, "attn_norm")) || (st = need_t(&l->ffn_norm, D, L, "ffn_norm")) ||
	    (st = need_t(&l->q_norm, ql, L, "q_norm")) || (st = need_t(&l->kv_norm, hd, L, "kv_norm")) ||
	    (st = need_t(&l->sink, H, L, "attn_sink")) || (st = need_l(&l->wq_a, ql, D, L, "wq_a")) ||
	    (st = need_l(&l->wkv, hd, D, L, "wkv")) || (st = need_l(&l->wq_b, H * hd, ql, L, "wq_b")) ||
	    (st = need_l(&l->wo_b, D, G * ol, L, "wo_b")) ||
	    (st = need_t(&l->gate, E * D, L, "gate")) || (st = need_t(&l->gate_bias, E, L, "gate.bias")) ||
	    (st = need_l(&l->sh_w1, I, D, L, "shared w1")) || (st = need_l(&l->sh_w3, I, D, L, "shared w3")) ||
	    (st = need_l(&l->sh_w2, D, I, L, "shared w2")))
		return st;
	for (int i = 0; i < 2; i++)
		if ((st = need_t(&l->hc_fn[i], M * S * D, L, "hc fn")) ||
		    (st = need_t(&l->hc_base[i], M, L, "hc base")) ||
		    (st = need_t(&l->hc_scale[i], 3, L, "hc scale")))
			return st;
	for (int64_t g = 0; g < G; g++)
		if ((st = need_l(&l->wo_a[g], ol, c->heads / c->o_groups * hd, L, "wo_a")))
			return st;
	if (!l->w1 || !l->w2 || !l->w3)
		return tf_err(TF_ERR_ARG, "forward: layer %u: routed experts are missing", L);
	for (int64_t e = 0; e < E; e++)
		if ((st = need_l(&l->w1[e], I, D, L, "expert w1")) ||
		    (st = need_l(&l->w3[e], I, D, L, "expert w3")) ||
		    (st = need_l(&l->w2[e], D, I, L, "expert w2")))
			return st;
	if (tf_config_is_kv_source(c, L) &&
	    ((st = need_l(&l->comp_wkv, hd, D, L, "compressor.wkv")) ||
	     (tf_config_ratio(c, L) == 2 && (st = need_l(&l->comp_wgate, hd, D, L, "compressor.wgate"))) ||
	     (st = need_t(&l->comp_norm, hd, L, "compressor.norm")) ||
	     (st = need_l(&l->ix_wk, Di, hd, L, "indexer.wk")) ||
	     (st = need_t(&l->ix_k_norm, Di, L, "indexer.k_norm"))))
		return st;
	if (tf_config_is_index_source(c, L) &&
	    ((st = need_l(&l->ix_wq_b, Hi * Di, ql, L, "indexer.wq_b")) ||
	     (st = need_t(&l->ix_wp, Hi * D, L, "indexer.weights_proj"))))
		return st;
	if (tf_config_is_engram(c, L) &&
	    ((st = need_l(&l->engram_wkv, (S + 1) * D,
			  (int64_t)tf_config_hash_cols(c) * c->engram_head_dim, L, "engram.wkv")) ||
	     (st = need_t(&l->engram_qk, S * D, L, "engram qk"))))
		return st;
	return TF_OK;
}

/* src[0..n) into f->ex[L]'s slot k (EXL3: contiguous copies of the
 * handles; dense: the tensors); TF_ERR_ARG when they mix the two. */
static tf_status group_init(struct tf_fwd *f, uint32_t L, int k, const struct tf_lin *src,
			    uint32_t n, const char *what)
{
	int q = src[0].q != NULL;
	if (q)
		f->ex[L].q[k] = tf_alloc_array(n, sizeof *f->ex[L].q[k]);
	else
		f->ex[L].w[k] = tf_alloc_array(n, sizeof *f->ex[L].w[k]);
	if (q ? !f->ex[L].q[k] : !f->ex[L].w[k])
		return tf_err(TF_ERR_NOMEM, "forward: out of memory");
	for (uint32_t e = 0; e < n; e++) {
		if ((src[e].q != NULL) != q)
			return tf_err(TF_ERR_ARG, "forward: layer %u mixes EXL3 and dense %s", L, what);
		if (q)
			f->ex[L].q[k][e] = *src[e].q;
		else
			f->ex[L].w[k][e] = src[e].w;
	}
	return TF_OK;
}

/* Whether l[0..n) are dense or EXL3 of one codebook (an experts op takes
 * them as one projection's experts). */
static bool one_codebook(const struct tf_lin *l, uint32_t n)
{
	for (uint32_t i = 1; i < n; i++)
		if (l[i].q && l[0].q && l[i].q->g.cb != l[0].q->g.cb)
			return false;
	return true;
}

/* The routed experts and the output groups of every layer as the experts
 * ops take them (group_init; output groups of mixed codebooks stay apart),
 * and the ids 0..n-1 of the groups' experts. */
static tf_status experts_init(struct tf_fwd *f)
{
	const struct tf_config *c = f->c;
	uint32_t n = tf_config_all_layers(c), G = (uint32_t)f->Gl, most = G > 1 ? G : 1;
	tf_status st = TF_OK;
	f->ex = tf_calloc(n, sizeof *f->ex);
	if (!f->ex)
		return tf_err(TF_ERR_NOMEM, "forward: out of memory");
	for (uint32_t L = 0; L < n && !st; L++) {
		const struct tf_fwd_layer *lw = &f->w->layers[L];
		if (L >= c->layers && !f->w->mtp_norm.data)
			break;
		uint32_t E = tf_config_experts_of(c, L);
		most = E > most ? E : most;
		for (int k = 0; k < 3 && E && !st; k++)
			st = group_init(f, L, k, k == 0 ? lw->w1 : k == 1 ? lw->w2 : lw->w3, E, "experts");
		if (!st && G && one_codebook(lw->wo_a, G))
			st = group_init(f, L, FWD_EX_WO_A, lw->wo_a, G, "output groups");
	}
	if (st)
		return st;
	int32_t *ids = fwd_i32s(most);
	st = ids ? TF_OK : tf_err(TF_ERR_NOMEM, "forward: out of memory");
	for (uint32_t e = 0; e < most && !st; e++)
		ids[e] = (int32_t)e;
	if (!st && !(st = tf_be_tensor(f->be, &f->eids, TF_DT_I32, 1, (int64_t)most)))
		st = f->be->ops->upload(f->be, &f->eids, ids);
	free(ids);
	return st;
}

tf_status tf_fwd_new(struct tf_be *be, const struct tf_config *c, const struct tf_fwd_weights *w,
		     struct tf_kv *kv, tf_engram_rows_fn engram, void *engram_ctx,
		     struct tf_fwd **out)
{
	return tf_fwd_new_tp(be, c, w, kv, engram, engram_ctx, NULL, out);
}

tf_status tf_fwd_new_tp(struct tf_be *be, const struct tf_config *c,
			const struct tf_fwd_weights *w, struct tf_kv *kv, tf_engram_rows_fn engram,
			void *engram_ctx, struct tf_comm *comm, struct tf_fwd **out)
{
	*out = NULL;
	int world = comm ? comm->world : 1, rank = comm ? comm->rank : 0;
	uint32_t nw = (uint32_t)world;
	if (world < 1 || world > TF_BOOT_MAX_WORLD || rank < 0 || rank >= world || c->heads % nw ||
	    c->o_groups % nw || c->expert_width % nw || c->vocab % nw)
		return tf_err(TF_ERR_CONFIG, "forward: rank %d of %d does not divide %u heads, %u "
			      "output groups, expert width %u and vocabulary %u", rank, world,
			      c->heads, c->o_groups, c->expert_width, c->vocab);
	struct tf_tp tp = {0};
	tf_status st = TF_OK;
	if (world > 1 && (st = tf_tp_init(&tp, be, comm)))
		return st;
	struct tf_fwd dims = {.c = c, .Hl = c->heads / world, .Gl = c->o_groups / world,
			      .Il = c->expert_width / world, .Vl = c->vocab / world};
	const struct tf_kv_config *kc = tf_kv_config(kv);
	if (kc->layers < (int)c->layers || kc->dim != (int)c->head_dim ||
	    kc->rope != (int)c->rope_dim || kc->sources != (int)c->n_kv_sources)
		return tf_err(TF_ERR_CONFIG, "forward: the KV cache was made for another config");
	if (c->o_groups > TF_FWD_MAX_GROUPS || c->heads % c->o_groups || c->rope_dim > 128)
		return tf_err(TF_ERR_CONFIG, "forward: %u output groups of %u heads", c->o_groups,
			      c->heads);
	if (tf_kv_backend(kv) != be)
		return tf_err(TF_ERR_ARG, "forward: the KV cache lives on another backend");
	if (c->n_engram && !engram)
		return tf_err(TF_ERR_ARG, "forward: the config has Engram layers and no row source");
	if (!w->layers || (st = need_t(&w->embed, dims.Vl * c->hidden, 0, "embed")) ||
	    (st = need_t(&w->norm, c->hidden, 0, "norm")) ||
	    (st = need_l(&w->head, dims.Vl, c->hidden, 0, "head")))
		return w->layers ? st : tf_err(TF_ERR_ARG, "forward: no layers");
	for (uint32_t L = 0; L < c->layers; L++)
		if ((st = check_layer(&dims, &w->layers[L], L)))
			return st;
	if (w->mtp_norm.data) { /* the DSpark blocks */
		if (!c->mtp_layers || kc->layers < (int)tf_config_all_layers(c))
			return tf_err(TF_ERR_CONFIG, "forward: DSpark weights without DSpark blocks "
				      "or their window rings");
		if ((st = need_t(&w->mtp_norm, c->hidden, c->layers, "norm")))
			return st;
		for (uint32_t L = c->layers; L < tf_config_all_layers(c); L++)
			if ((st = check_layer(&dims, &w->layers[L], L)))
				return st;
	}
	struct tf_fwd *f = calloc(1, sizeof *f);
	if (!f)
		return tf_err(TF_ERR_NOMEM, "forward: out of memory");
	*f = dims;
	f->comm = world > 1 ? comm : NULL;
	f->tp = tp;
	f->rank = rank;
	f->world = world;
	f->be = be;
	f->c = c;
	f->w = w;
	f->kv = kv;
	f->engram = engram;
	f->engram_ctx = engram_ctx;
	if ((st = experts_init(f))) {
		tf_fwd_free(f);
		return st;
	}
	/* A device comm's collectives are in the graphed calls: the ranks'
	 * graph caches vote over the comm (cuda_graph.c). */
	if (f->comm && f->tp.path == TF_TP_DEVICE &&
	    (st = tf_cuda_be_set_agree(be, tf_tp_vote, &f->tp))) {
		tf_fwd_free(f);
		return st;
	}
	tf_rope_freqs_plain(&f->plain, (int)c->rope_dim, c->rope_theta);
	if (c->yarn)
		tf_rope_freqs_yarn(&f->yarn, (int)c->rope_dim, c->compress_rope_theta, c->rope_factor,
				   (double)c->rope_original_max, c->rope_beta_fast, c->rope_beta_slow);
	else
		tf_rope_freqs_plain(&f->yarn, (int)c->rope_dim, c->compress_rope_theta);
	*out = f;
	return TF_OK;
}

void tf_fwd_set_phases(struct tf_fwd *f, struct tf_phases *p)
{
	char name[32];
	static const char *const part[3] = {"engram", "attn", "moe"};
	f->ph = p;
	f->ph_embed = tf_phases_id(p, "embed");
	f->ph_head = tf_phases_id(p, "head");
	f->ph_out = tf_phases_id(p, "out");
	for (uint32_t L = 0; L < tf_config_all_layers(f->c) && L < TF_CONFIG_MAX_LAYERS; L++)
		for (int i = 0; i < 3; i++) {
			snprintf(name, sizeof name, "L%u.%s", L, part[i]);
			f->ph_layer[L][i] = tf_phases_id(p, name);
		}
}

void tf_fwd_free(struct tf_fwd *f)
{
	if (!f)
		return;
	if (f->ex)
		for (uint32_t L = 0; L < tf_config_all_layers(f->c); L++)
			for (int k = 0; k < FWD_EX_N; k++) {
				free(f->ex[L].q[k]);
				free(f->ex[L].w[k]);
			}
	free(f->ex);
	if (f->eids.data)
		f->be->ops->release(f->be, &f->eids);
	if (f->comm && f->tp.path == TF_TP_DEVICE)
		(void)tf_cuda_be_set_agree(f->be, NULL, NULL);
	tf_tp_release(&f->tp);
	free(f);
}

const struct tf_rope_freqs *fwd_freqs(const struct tf_fwd *f, uint32_t layer)
{
	return tf_config_ratio(f->c, layer) ? &f->yarn : &f->plain;
}

/* ---- the call ---- */

static tf_status segments(struct tf_fwd *f)
{
	f->nsegs = 0;
	for (int i = 0; i < f->R; i++) {
		if (i == 0 || f->seq[i] != f->seq[i - 1]) {
			for (int s = 0; s < f->nsegs; s++)
				if (f->segs[s].seq == f->seq[i])
					return tf_err(TF_ERR_ARG, "forward: rows of sequence %d are not consecutive",
						      f->seq[i]);
			int64_t len = tf_kv_len(f->kv, f->seq[i]);
			if (f->pos[i] != len)
				return tf_err(TF_ERR_ARG,
					      "forward: sequence %d continues at %lld, the row says %lld",
					      f->seq[i], (long long)len, (long long)f->pos[i]);
			f->segs[f->nsegs++] = (struct segment){f->seq[i], i, 0, f->pos[i]};
		} else if (f->pos[i] != f->pos[i - 1] + 1) {
			return tf_err(TF_ERR_ARG, "forward: row %d of sequence %d skips a position", i,
				      f->seq[i]);
		}
		f->segs[f->nsegs - 1].n++;
	}
	return TF_OK;
}

/* Room in the cache for the call's positions. */
static tf_status reserve(struct tf_fwd *f)
{
	for (int s = 0; s < f->nsegs; s++) {
		tf_status st = tf_kv_reserve(f->kv, f->segs[s].seq, f->segs[s].pos0 + f->segs[s].n);
		if (st)
			return st;
	}
	return TF_OK;
}

/* §2: the streams X [R, S, D] of the ids. At world > 1 each rank embeds
 * its vocabulary rows (zeros elsewhere), the parts are gathered and each
 * row is taken from the rank that holds its id: the same bits as world 1
 * (a sum of the parts would turn a -0 into +0). */
static tf_status embed(struct tf_fwd *f, const struct tf_tensor *ids, struct tf_tensor *X)
{
	struct tf_be *be = f->be;
	if (!f->comm)
		return be->ops->embed(be, &f->w->embed, 0, ids, X);
	int R = f->R, mark = f->ntmp;
	int64_t S = f->c->hc_mult, D = f->c->hidden;
	struct tf_tensor *part, *all;
	int32_t *at = fwd_i32s(R * S);
	tf_status st = at ? TF_OK : fwd_nomem();
	for (int i = 0; i < R && !st; i++) /* stream s of row i: row i of its owner's part */
		for (int64_t s = 0; s < S; s++)
			at[i * S + s] = (int32_t)(f->ids[i] / f->Vl * R + i);
	if (!st && !(st = fwd_tmp(f, &part, TF_DT_BF16, 3, R, 1, D)) &&
	    !(st = fwd_tmp(f, &all, TF_DT_BF16, 3, f->world, R, D)) &&
	    !(st = be->ops->embed(be, &f->w->embed, f->rank * f->Vl, ids, part)) &&
	    !(st = tf_tp_gather(&f->tp, part, all))) {
		struct tf_tensor av = fwd_view2(all, (int64_t)f->world * R, D), xv = fwd_view2(X, R * S, D);
		st = fwd_move(f, &av, at, &xv, NULL, R * S);
	}
	fwd_release(f, mark);
	free(at);
	return st;
}

/* §12: logits [R, V] f32 (on the backend) of the final normed rows. At
 * world > 1 each rank computes its vocabulary columns and the columns are
 * gathered (exact). */
static tf_status head(struct tf_fwd *f, const struct tf_tensor *x, struct tf_tensor *out)
{
	int R = (int)tf_tensor_rows(x), W = f->world, mark = f->ntmp;
	if (!f->comm)
		return fwd_lin(f, &f->w->head, x, out);
	struct tf_tensor *part, *all;
	int32_t *at = fwd_i32s((int64_t)R * W);
	tf_status st = at ? TF_OK : fwd_nomem();
	for (int i = 0; i < R && !st; i++) /* column block r of row i: row i of rank r's part */
		for (int r = 0; r < W; r++)
			at[i * W + r] = r * R + i;
	if (!st && !(st = fwd_tmp(f, &part, TF_DT_F32, 2, R, f->Vl, 1)) &&
	    !(st = fwd_lin(f, &f->w->head, x, part)) &&
	    !(st = fwd_tmp(f, &all, TF_DT_F32, 3, W, R, f->Vl)) &&
	    !(st = tf_tp_gather(&f->tp, part, all))) {
		struct tf_tensor av = fwd_view2(all, (int64_t)W * R, f->Vl);
		struct tf_tensor ov = fwd_view2(out, (int64_t)R * W, f->Vl);
		st = fwd_move(f, &av, at, &ov, NULL, (int64_t)R * W);
	}
	fwd_release(f, mark);
	free(at);
	return st;
}

/* §13 taps: T = bf(mean_s fp32(X_s)) of the streams entering block L, for
 * L the t-th DSpark target, into row t of each row's taps. */
static tf_status tap(struct tf_fwd *f, const struct tf_tensor *X, uint32_t t)
{
	int R = f->R, mark = f->ntmp;
	int64_t D = f->c->hidden, nt = f->c->n_dspark_targets;
	struct tf_tensor *m;
	int32_t *at = fwd_i32s(R);
	tf_status st = at ? TF_OK : fwd_nomem();
	for (int i = 0; i < R && !st; i++)
		at[i] = (int32_t)(i * nt + t);
	struct tf_tensor tv = fwd_view2(f->tapt, R * nt, D);
	if (!st && !(st = fwd_tmp(f, &m, TF_DT_BF16, 2, R, D, 1)) &&
	    !(st = f->be->ops->stream_mean(f->be, X, m)))
		st = fwd_move(f, m, NULL, &tv, at, R);
	fwd_release(f, mark);
	free(at);
	return st;
}

/* §3 steps 1-5 of one site: mix, collapse with pre_in, norm, the branch,
 * post. */
static tf_status site(struct tf_fwd *f, uint32_t L, int which, struct tf_tensor *X,
		      const struct tf_tensor *pre_in, struct tf_tensor *const *pre,
		      struct tf_tensor *const *post, struct tf_tensor *const *comb,
		      struct tf_tensor *cl, struct tf_tensor *xin, struct tf_tensor *br)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	tf_status st;
	if (!(st = be->ops->hc_mix(be, X, &lw->hc_fn[which], &lw->hc_base[which],
				   &lw->hc_scale[which], c->eps, c->hc_eps,
				   (int)c->hc_sinkhorn_iters, c->hc_post_alpha, pre[which],
				   post[which], comb[which])) &&
	    !(st = be->ops->hc_collapse(be, X, pre_in, cl)) &&
	    !(st = be->ops->rmsnorm(be, cl, which ? &lw->ffn_norm : &lw->attn_norm, c->eps, xin)) &&
	    !(st = which ? fwd_moe(f, L, xin, br) : fwd_attention(f, L, xin, br)))
		st = be->ops->hc_post(be, X, br, post[which], comb[which], X);
	return st;
}

/* y [n_out, cols] = the out rows of x [R, cols] (seen as rows of cols). */
static tf_status head_rows(struct tf_fwd *f, const struct tf_tensor *x, struct tf_tensor *y,
			   int64_t cols)
{
	struct tf_tensor xv = fwd_view2(x, f->R, cols), yv = fwd_view2(y, f->n_out, cols);
	return fwd_move(f, &xv, f->out, &yv, NULL, f->n_out);
}

static tf_status run_blocks(struct tf_fwd *f, struct tf_tensor *logits)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_weights *w = f->w;
	struct tf_be *be = f->be;
	int R = f->R;
	int64_t S = c->hc_mult;
	struct tf_tensor *X, *ids, *pre_in, *pre[2], *post[2], *comb[2], *cl, *xin, *br;
	float *ident = tf_alloc_array((size_t)(R * S), sizeof *ident);
	tf_status st = ident ? TF_OK : fwd_nomem();
	for (int i = 0; i < R && !st; i++) /* the identity pre: [1, 0, 0, 0] */
		for (int64_t s = 0; s < S; s++)
			ident[i * S + s] = s == 0;
	if (st || (st = fwd_tmp(f, &X, TF_DT_BF16, 3, R, S, c->hidden)) ||
	    (st = fwd_host(f, &ids, TF_DT_I32, f->ids, R)) ||
	    (st = fwd_tmp(f, &pre_in, TF_DT_F32, 2, R, S, 1)) ||
	    (st = be->ops->upload(be, pre_in, ident)) ||
	    (st = fwd_tmp(f, &cl, TF_DT_BF16, 2, R, c->hidden, 1)) ||
	    (st = fwd_tmp(f, &xin, TF_DT_BF16, 2, R, c->hidden, 1)) ||
	    (st = fwd_tmp(f, &br, TF_DT_BF16, 2, R, c->hidden, 1)))
		goto out;
	for (int i = 0; i < 2; i++)
		if ((st = fwd_tmp(f, &pre[i], TF_DT_F32, 2, R, S, 1)) ||
		    (st = fwd_tmp(f, &post[i], TF_DT_F32, 2, R, S, 1)) ||
		    (st = fwd_tmp(f, &comb[i], TF_DT_F32, 3, R, S, S)))
			goto out;
	tf_phase_begin(f->ph, f->ph_embed);
	st = embed(f, ids, X); /* §2 */
	tf_phase_end(f->ph, f->ph_embed);
	/* §4 over the backbone, or §13 over the DSpark blocks of a draft pass */
	uint32_t L0 = f->draft ? c->layers : 0, L1 = f->draft ? tf_config_all_layers(c) : c->layers;
	for (uint32_t L = L0; L < L1 && !st; L++) {
		const int *ph = f->ph_layer[L];
		for (uint32_t t = 0; f->taps && t < c->n_dspark_targets && !st; t++)
			if (c->dspark_targets[t] == L)
				st = tap(f, X, t);
		if (!st && tf_config_is_engram(c, L)) {
			tf_phase_begin(f->ph, ph[0]);
			st = fwd_engram(f, L, X);
			tf_phase_end(f->ph, ph[0]);
		}
		for (int which = 0; which < 2 && !st; which++) { /* attention, then MoE */
			tf_phase_begin(f->ph, ph[1 + which]);
			st = site(f, L, which, X, which ? pre[0] : pre_in, pre, post, comb, cl, xin, br);
			tf_phase_end(f->ph, ph[1 + which]);
		}
		if (!st)
			st = be->ops->rows_copy(be, pre[1], NULL, pre_in, NULL);
	}
	if (st)
		goto out;
	tf_phase_begin(f->ph, f->ph_head);
	/* §12 on every row, or on the rows whose logits are asked for (their
	 * streams and pre weights gathered first) */
	struct tf_tensor *Xh = X, *ph = pre_in, *clh = cl, *xh = xin;
	bool run = !f->some || f->n_out;
	if (f->some && f->n_out &&
	    ((st = fwd_tmp(f, &Xh, TF_DT_BF16, 3, f->n_out, S, c->hidden)) ||
	     (st = fwd_tmp(f, &ph, TF_DT_F32, 2, f->n_out, S, 1)) ||
	     (st = fwd_tmp(f, &clh, TF_DT_BF16, 2, f->n_out, c->hidden, 1)) ||
	     (st = fwd_tmp(f, &xh, TF_DT_BF16, 2, f->n_out, c->hidden, 1)) ||
	     (st = head_rows(f, X, Xh, S * c->hidden)) || (st = head_rows(f, pre_in, ph, S))))
		run = false;
	if (run && !(st = be->ops->hc_collapse(be, Xh, ph, clh)) &&
	    !(st = be->ops->rmsnorm(be, clh, f->draft ? &w->mtp_norm : &w->norm, c->eps, xh)) &&
	    !(st = head(f, xh, logits)) && f->hidden)
		st = be->ops->download(be, clh, f->hidden);
	tf_phase_end(f->ph, f->ph_head);
out:
	free(ident);
	return st;
}

/* Rows of one sequence per pass at most: a pass writes every window row
 * before any row attends, so its positions must not share a ring slot with
 * the window of its first row. */
static int64_t pass_cap(const struct tf_fwd *f)
{
	return (int64_t)tf_kv_config(f->kv)->ring - (int64_t)f->c->window;
}

/* A call with a sequence longer than pass_cap: one pass per chunk of each
 * sequence in turn (equal to one pass: chunked prefill is exact). */
static tf_status run_split(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			   const int *seq, float *logits, uint16_t *taps)
{
	int64_t cap = pass_cap(f), V = f->c->vocab;
	int64_t tw = (int64_t)f->c->n_dspark_targets * f->c->hidden;
	const struct tf_sample_params *sp = f->sp;
	const int64_t *sp_pos = f->sp_pos;
	int32_t *tokens = f->tokens;
	const int *out = f->out;
	const bool some = f->some;
	int n_out = f->n_out, o = 0; /* out rows before this chunk */
	int *local = some ? malloc(sizeof *local * (size_t)(n_out ? n_out : 1)) : NULL;
	tf_status st = some && !local ? fwd_nomem() : TF_OK;
	for (int i = 0; i < R && !st;) {
		int n = 1;
		while (i + n < R && seq[i + n] == seq[i] && n < cap)
			n++;
		f->sp = sp ? sp + i : NULL;
		f->sp_pos = sp_pos ? sp_pos + i : NULL;
		f->tokens = tokens ? tokens + i : NULL;
		int64_t lrow = i;
		if (some) { /* the chunk's out rows, from its first row */
			int k = 0;
			while (o + k < n_out && out[o + k] < i + n) {
				local[k] = out[o + k] - i;
				k++;
			}
			f->out = local;
			f->n_out = k;
			lrow = o;
			o += k;
		}
		st = tf_fwd_run_taps(f, n, ids + i, pos + i, seq + i,
				     logits ? logits + lrow * V : NULL,
				     taps ? taps + (int64_t)i * tw : NULL);
		i += n;
	}
	f->sp = sp;
	f->sp_pos = sp_pos;
	f->tokens = tokens;
	f->out = out;
	f->n_out = n_out;
	free(local);
	return st;
}

tf_status tf_fwd_run(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
		     const int *seq, float *logits)
{
	return tf_fwd_run_taps(f, R, ids, pos, seq, logits, NULL);
}

tf_status tf_fwd_check_out(int R, int n_out, const int *out, const float *logits, bool *all)
{
	if (n_out < 0 || n_out > R || (n_out && (!out || !logits)))
		return tf_err(TF_ERR_ARG, "forward: %d logit rows of %d", n_out, R);
	*all = n_out == R;
	for (int i = 0; i < n_out; i++) {
		if (out[i] < 0 || out[i] >= R || (i && out[i] <= out[i - 1]))
			return tf_err(TF_ERR_ARG, "forward: logit row %d (%d) is not an increasing "
				      "row of the %d", i, out[i], R);
		*all = *all && out[i] == i;
	}
	return TF_OK;
}

tf_status tf_fwd_run_rows(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, int n_out, const int *out, float *logits, uint16_t *taps)
{
	bool all;
	tf_status st = tf_fwd_check_out(R, n_out, out, logits, &all);
	if (st)
		return st;
	if (all) /* every row's: the plain call (a decode call keeps its graph) */
		return tf_fwd_run_taps(f, R, ids, pos, seq, logits, taps);
	f->some = true;
	f->out = out;
	f->n_out = n_out;
	st = tf_fwd_run_taps(f, R, ids, pos, seq, logits, taps);
	f->some = false;
	f->out = NULL;
	f->n_out = 0;
	return st;
}

static tf_status run_call(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, float *logits, uint16_t *taps, int draft, uint16_t *hidden);

tf_status tf_fwd_run_sample(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			    const int *seq, const struct tf_sample_params *params,
			    const int64_t *draw_pos, int32_t *tokens, uint16_t *taps)
{
	if (!params || !draw_pos || !tokens)
		return tf_err(TF_ERR_ARG, "forward: sampling without params, positions or tokens");
	f->sp = params;
	f->sp_pos = draw_pos;
	f->tokens = tokens;
	tf_status st = tf_fwd_run_taps(f, R, ids, pos, seq, NULL, taps);
	f->sp = NULL;
	f->sp_pos = NULL;
	f->tokens = NULL;
	return st;
}

tf_status tf_fwd_run_taps(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, float *logits, uint16_t *taps)
{
	if (R < 1 || !ids || !pos || !seq || (!logits && !f->tokens && !(f->some && !f->n_out)))
		return tf_err(TF_ERR_ARG, "forward: %d rows, or a missing array", R);
	for (int i = 0, run = 1; i + 1 < R; i++) {
		run = seq[i + 1] == seq[i] ? run + 1 : 1;
		if (run > pass_cap(f))
			return run_split(f, R, ids, pos, seq, logits, taps);
	}
	return run_call(f, R, ids, pos, seq, logits, taps, 0, NULL);
}

tf_status tf_fwd_draft(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
		       const int *seq, float *logits, uint16_t *hidden)
{
	if (R < 1 || !ids || !pos || !seq || !logits)
		return tf_err(TF_ERR_ARG, "forward: %d rows, or a missing array", R);
	if (!f->w->mtp_norm.data)
		return tf_err(TF_ERR_UNSUPPORTED, "forward: the weights have no DSpark blocks");
	return run_call(f, R, ids, pos, seq, logits, NULL, 1, hidden);
}

/* The call's backend state: positions, selections, candidate blocks, the
 * taps, and the logits [R, V] f32. */
static tf_status call_state(struct tf_fwd *f, struct tf_tensor **logits)
{
	const struct tf_config *c = f->c;
	int R = f->R;
	int32_t *p32 = fwd_i32s(R);
	tf_status st = p32 ? TF_OK : fwd_nomem();
	for (int i = 0; i < R && !st; i++)
		p32[i] = (int32_t)f->pos[i];
	if (st || (st = fwd_host(f, &f->pos32, TF_DT_I32, p32, R)) ||
	    (st = fwd_tmp(f, &f->sel, TF_DT_I32, 2, R, c->index_topk, 1)) ||
	    (st = fwd_tmp(f, &f->n_sel, TF_DT_I32, 1, R, 1, 1)) ||
	    (st = fwd_tmp(f, &f->cand, TF_DT_U8, 2, R, f->cand_nblk, 1)) ||
	    (f->taps && (st = fwd_tmp(f, &f->tapt, TF_DT_BF16, 3, R, c->n_dspark_targets, c->hidden))))
		goto out;
	if (!f->some || f->n_out)
		st = fwd_tmp(f, logits, TF_DT_F32, 2, f->some ? f->n_out : R, c->vocab, 1);
out:
	free(p32);
	return st;
}

/* The call's logits to the host, or its tokens drawn on the backend. */
static tf_status call_out(struct tf_fwd *f, const struct tf_tensor *lg, float *logits)
{
	struct tf_be *be = f->be;
	tf_phase_begin(f->ph, f->ph_out);
	tf_status st = f->tokens ? be->ops->sample(be, lg, f->sp, f->sp_pos, f->tokens)
		       : lg	 ? be->ops->download(be, lg, logits)
				 : TF_OK; /* no row's logits asked for */
	tf_phase_end(f->ph, f->ph_out);
	return st;
}

/* The pool rows this call's compressors will write, made private now (a
 * shared page is copied by tf_kv_pool_row with put): the copy is backend
 * work and host state that must not happen inside the call's work, which
 * a device backend may run more than once (ops->graph). */
static tf_status own_pool_rows(struct tf_fwd *f)
{
	const struct tf_config *c = f->c;
	for (uint32_t s = 0; s < c->n_kv_sources; s++) {
		int64_t r = tf_config_ratio(c, c->kv_sources[s]);
		for (int i = 0; i < f->R && r > 0; i++) {
			int32_t row;
			tf_status st = (f->pos[i] + 1) % r ? TF_OK
				       : tf_kv_pool_row(f->kv, f->seq[i], (int)s, f->pos[i] / r, 1, &row);
			if (st)
				return st;
		}
	}
	return TF_OK;
}

/* The call's work for ops->graph: its backend state and blocks, queued;
 * undo releases every scratch tensor. */
struct call_work {
	struct tf_fwd *f;
	struct tf_tensor *lg;
};

static tf_status work_run(void *arg)
{
	struct call_work *w = arg;
	w->f->have_cand = 0;
	w->lg = NULL;
	tf_status st = call_state(w->f, &w->lg);
	return st ? st : run_blocks(w->f, w->lg);
}

static void work_undo(void *arg)
{
	struct tf_fwd *f = ((struct call_work *)arg)->f;
	fwd_release(f, 0);
	f->sel = f->n_sel = f->cand = f->pos32 = f->tapt = NULL;
	f->have_cand = 0;
}

/* The key of a call's shape for ops->graph, or NULL to run it eagerly:
 * decode calls only (one row a sequence, no draft pass, no hidden rows,
 * every row's logits); the backend tells calls of one key apart by their
 * work. A decode call whose collectives go through host memory (tp.h's
 * staged path) is handed to ops->graph with no key: it runs eagerly
 * there, and is counted so. */
static const char *work_key(const struct tf_fwd *f, char *buf, size_t n)
{
	if (f->draft || f->hidden || f->some || f->nsegs != f->R)
		return NULL;
	if (f->comm && f->tp.path == TF_TP_STAGED)
		return "";
	snprintf(buf, n, "fwd.decode.R%d%s", f->R, f->taps ? ".taps" : "");
	return buf;
}

/* One pass: a target call (its positions reserved and committed) or a
 * draft pass (nothing written). */
static tf_status run_call(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, float *logits, uint16_t *taps, int draft, uint16_t *hidden)
{
	const struct tf_config *c = f->c;
	struct tf_be *be = f->be;
	if (R < 1)
		return tf_err(TF_ERR_ARG, "forward: %d rows", R);
	for (int i = 0; i < R; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= c->vocab)
			return tf_err(TF_ERR_ARG, "forward: token %d outside the vocabulary of %u",
				      ids[i], c->vocab);
	f->R = R;
	f->taps = taps;
	f->tapt = NULL;
	f->draft = draft;
	f->hidden = hidden;
	f->ids = ids;
	f->pos = pos;
	f->seq = seq;
	f->ntmp = 0;
	f->have_cand = 0;
	int64_t maxpos = 0;
	for (int i = 0; i < R; i++)
		maxpos = pos[i] + 1 > maxpos ? pos[i] + 1 : maxpos;
	f->cand_nblk = fwd_bucket((maxpos + c->candidate_block_size - 1) / c->candidate_block_size + 1);
	f->segs = calloc((size_t)R, sizeof *f->segs);
	struct call_work cw = {f, NULL};
	char key[64];
	tf_status st;
	if (!f->segs)
		st = fwd_nomem();
	else if ((st = segments(f)) || (!draft && ((st = reserve(f)) || (st = own_pool_rows(f)))))
		;
	else {
		const char *k = work_key(f, key, sizeof key);
		struct tf_be_work w = {k && *k ? k : NULL, work_run, work_undo, &cw};
		st = be->ops->graph && k ? be->ops->graph(be, &w) : work_run(&cw);
	}
	if (!st && !(st = call_out(f, cw.lg, logits)) &&
	    !(taps && (st = be->ops->download(be, f->tapt, taps))) && !draft)
		for (int s = 0; s < f->nsegs && !st; s++)
			st = tf_kv_commit(f->kv, f->segs[s].seq, f->segs[s].pos0 + f->segs[s].n);
	work_undo(&cw);
	free(f->segs);
	f->segs = NULL;
	return st;
}
