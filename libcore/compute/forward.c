/* forward.c: the DeepSeek-V4.1 forward over the op backend (forward.h);
 * section numbers are dsv41-forward-spec.md's. */
#include "compute/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/f16.h"
#include "compute/phases.h"
#include "compute/tp.h"
#include "fabric/comm.h"
#include "model/engram_layout.h"

#define MAX_TMP 64

struct segment {
	int seq, row0, n;
	int64_t pos0;
};

struct tf_fwd {
	struct tf_be *be;
	const struct tf_config *c;
	const struct tf_fwd_weights *w;
	struct tf_kv *kv;
	tf_engram_rows_fn engram;
	void *engram_ctx;
	struct tf_rope_freqs plain, yarn;
	struct tf_comm *comm;   /* NULL at world 1 */
	int rank, world;
	int64_t Hl, Gl, Il, Vl; /* the rank's heads, output groups, expert width, vocabulary */
	struct tf_phases *ph;
	int ph_embed, ph_head, ph_layer[TF_CONFIG_MAX_LAYERS][3]; /* engram, attn, moe */
	/* per call */
	struct tf_tensor tmp[MAX_TMP];
	int ntmp;
	struct segment *segs;
	int nsegs;
	int R;
	uint16_t *taps;         /* [R, n_dspark_targets, D] or NULL */
	int draft;              /* a DSpark draft pass (tf_fwd_draft) */
	uint16_t *hidden;       /* draft: h [R, D] out, or NULL */
	const int32_t *ids;
	const int64_t *pos;
	const int *seq;
	int32_t *sel, *n_sel;   /* [R, index_topk], [R]: the latest index source's */
	uint8_t *cand;          /* [R, cand_blocks]: the candidate source's blocks */
	int64_t cand_nblk;
	int have_cand;
};

/* ---- scratch tensors, released at the end of a call ---- */

static tf_status tmp_new(struct tf_fwd *f, struct tf_tensor **out, enum tf_dt dt, int ndim,
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

static void tmp_release_from(struct tf_fwd *f, int mark)
{
	while (f->ntmp > mark)
		f->be->ops->release(f->be, &f->tmp[--f->ntmp]);
}

/* A view of rows [r0, r0+n) of t's first dimension (CPU: host pointers). */
static struct tf_tensor rows_of(const struct tf_tensor *t, int64_t r0, int64_t n)
{
	struct tf_tensor v = *t;
	int64_t per = tf_tensor_numel(t) / t->shape[0];
	v.data = (char *)t->data + (size_t)(r0 * per) * tf_dt_size(t->dt);
	v.shape[0] = n;
	return v;
}

/* t reshaped (same data and numel). */
static struct tf_tensor reshape3(const struct tf_tensor *t, int64_t a, int64_t b, int64_t c)
{
	return tf_tensor_make(t->data, t->dt, 3, a, b, c);
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

static tf_status lin(struct tf_fwd *f, const struct tf_lin *l, const struct tf_tensor *x,
		     struct tf_tensor *y)
{
	return tf_fwd_lin(f->be, l, x, y);
}

/* A row-split projection's output y [R, N] bf16 (wo_b): at world 1 lin
 * rounds once; at world > 1 each rank's fp32 partial is summed over the
 * ranks in rank order, then rounded once (spec §3 step 5, §9). */
static tf_status lin_sum(struct tf_fwd *f, const struct tf_lin *l, const struct tf_tensor *x,
			 struct tf_tensor *y)
{
	if (!f->comm)
		return lin(f, l, x, y);
	int mark = f->ntmp;
	struct tf_tensor *p;
	tf_status st;
	if (!(st = tmp_new(f, &p, TF_DT_F32, 2, tf_tensor_rows(y), tf_tensor_cols(y), 1)) &&
	    !(st = lin(f, l, x, p)) &&
	    !(st = tf_tp_sum_f32(f->comm, p->data, (size_t)tf_tensor_numel(p))))
		st = f->be->ops->convert(f->be, p, y);
	tmp_release_from(f, mark);
	return st;
}

/* ---- set-up ---- */

static int kv_src_index(const struct tf_config *c, uint32_t layer)
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
	if (comm && comm->device)
		return tf_err(TF_ERR_UNSUPPORTED, "forward: the %s comm holds device memory", comm->name);
	struct tf_fwd dims = {.c = c, .Hl = c->heads / world, .Gl = c->o_groups / world,
			      .Il = c->expert_width / world, .Vl = c->vocab / world};
	const struct tf_kv_config *kc = tf_kv_config(kv);
	if (kc->layers < (int)c->layers || kc->dim != (int)c->head_dim ||
	    kc->rope != (int)c->rope_dim || kc->sources != (int)c->n_kv_sources)
		return tf_err(TF_ERR_CONFIG, "forward: the KV cache was made for another config");
	if (c->o_groups > TF_FWD_MAX_GROUPS || c->heads % c->o_groups || c->rope_dim > 128)
		return tf_err(TF_ERR_CONFIG, "forward: %u output groups of %u heads", c->o_groups,
			      c->heads);
	if (c->n_engram && !engram)
		return tf_err(TF_ERR_ARG, "forward: the config has Engram layers and no row source");
	tf_status st;
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
	f->rank = rank;
	f->world = world;
	f->be = be;
	f->c = c;
	f->w = w;
	f->kv = kv;
	f->engram = engram;
	f->engram_ctx = engram_ctx;
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
	for (uint32_t L = 0; L < tf_config_all_layers(f->c) && L < TF_CONFIG_MAX_LAYERS; L++)
		for (int i = 0; i < 3; i++) {
			snprintf(name, sizeof name, "L%u.%s", L, part[i]);
			f->ph_layer[L][i] = tf_phases_id(p, name);
		}
}

void tf_fwd_free(struct tf_fwd *f)
{
	free(f);
}

static const struct tf_rope_freqs *freqs_of(const struct tf_fwd *f, uint32_t layer)
{
	return tf_config_ratio(f->c, layer) ? &f->yarn : &f->plain;
}

/* ---- attention (§5-§9) ---- */

static tf_status pos_tensor(struct tf_fwd *f, const int32_t *p, int n, struct tf_tensor **out)
{
	tf_status st = tmp_new(f, out, TF_DT_I32, 1, n, 1, 1);
	if (!st)
		memcpy((*out)->data, p, (size_t)n * sizeof *p);
	return st;
}

static void bf16_row(const struct tf_tensor *t, int64_t r, int64_t n, float *out)
{
	const uint16_t *s = (const uint16_t *)t->data + r * n;
	for (int64_t i = 0; i < n; i++)
		out[i] = tf_bf16_to_f32(s[i]);
}

/* §6: the compressor of KV source L: pool rows and index keys of the groups
 * this call completes; ratio-2 group starts are kept as carries. */
static tf_status compress(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	int R = f->R, src = kv_src_index(c, L), r = (int)tf_config_ratio(c, L);
	int64_t hd = c->head_dim, Di = c->index_dim;
	struct tf_tensor *u, *g = NULL, *U, *G = NULL, *lat, *P, *k, *kn, *ik, *wp;
	tf_status st;
	if ((st = tmp_new(f, &u, TF_DT_F32, 2, R, hd, 1)) || (st = lin(f, &lw->comp_wkv, x, u)))
		return st;
	if (r == 2 && ((st = tmp_new(f, &g, TF_DT_F32, 2, R, hd, 1)) ||
		       (st = lin(f, &lw->comp_wgate, x, g))))
		return st;
	const float *uf = u->data, *gf = g ? g->data : NULL;
	int E = 0;
	for (int i = 0; i < R; i++) {
		int64_t p = f->pos[i];
		E += (p + 1) % r == 0;
		if (r == 2 && p % 2 == 0) { /* a group start: keep [u|g] for p + 1 */
			float *cr = tf_kv_carry(f->kv, f->seq[i], src, p);
			memcpy(cr, uf + i * hd, (size_t)hd * sizeof(float));
			memcpy(cr + hd, gf + i * hd, (size_t)hd * sizeof(float));
		}
	}
	if (!E)
		return TF_OK;
	int32_t *wpos = malloc((size_t)E * sizeof *wpos);
	int *eseq = malloc((size_t)E * sizeof *eseq);
	if (!wpos || !eseq) {
		free(wpos);
		free(eseq);
		return tf_err(TF_ERR_NOMEM, "forward: out of memory");
	}
	if ((st = tmp_new(f, &U, TF_DT_F32, 3, E, r, hd)) ||
	    (r == 2 && (st = tmp_new(f, &G, TF_DT_F32, 3, E, r, hd))))
		goto out;
	for (int i = 0, e = 0; i < R; i++) { /* the completed groups, oldest position first */
		int64_t p = f->pos[i];
		if ((p + 1) % r)
			continue;
		float *ue = (float *)U->data + (int64_t)e * r * hd;
		if (r == 2) {
			const float *cr = tf_kv_carry(f->kv, f->seq[i], src, p - 1);
			float *ge = (float *)G->data + (int64_t)e * 2 * hd;
			memcpy(ue, cr, (size_t)hd * sizeof(float));
			memcpy(ge, cr + hd, (size_t)hd * sizeof(float));
			memcpy(ge + hd, gf + i * hd, (size_t)hd * sizeof(float));
		}
		memcpy(ue + (r - 1) * hd, uf + i * hd, (size_t)hd * sizeof(float));
		wpos[e] = (int32_t)(p / r * r);
		eseq[e++] = f->seq[i];
	}
	if ((st = pos_tensor(f, wpos, E, &wp)) || (st = tmp_new(f, &lat, TF_DT_BF16, 2, E, hd, 1)) ||
	    (st = be->ops->compressor(be, U, G, &lw->comp_norm, c->eps, lat)) ||
	    (st = tmp_new(f, &P, TF_DT_BF16, 2, E, hd, 1)) ||
	    (st = be->ops->rope(be, lat, wp, freqs_of(f, L), 0, P)) ||
	    (st = tmp_new(f, &k, TF_DT_BF16, 2, E, Di, 1)) || (st = lin(f, &lw->ix_wk, lat, k)) ||
	    (st = tmp_new(f, &kn, TF_DT_BF16, 2, E, Di, 1)) ||
	    (st = be->ops->rmsnorm(be, k, &lw->ix_k_norm, c->eps, kn)) ||
	    (st = tmp_new(f, &ik, TF_DT_BF16, 2, E, Di, 1)) ||
	    (st = be->ops->rope(be, kn, wp, freqs_of(f, L), 0, ik)))
		goto out;
	float *row = malloc((size_t)(hd > Di ? hd : Di) * sizeof *row);
	if (!row) {
		st = tf_err(TF_ERR_NOMEM, "forward: out of memory");
		goto out;
	}
	for (int e = 0; e < E && !st; e++) {
		bf16_row(P, e, hd, row);
		st = tf_kv_pool_put(f->kv, eseq[e], src, wpos[e] / r, row);
		bf16_row(ik, e, Di, row);
		if (!st)
			st = tf_kv_ik_put(f->kv, eseq[e], src, wpos[e] / r, row);
	}
	free(row);
out:
	free(wpos);
	free(eseq);
	return st;
}

/* §7: index scores and selection of index source L (and the candidate
 * blocks when L is the candidate source), into f->sel / f->n_sel. */
static tf_status index_select(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x,
			      const struct tf_tensor *qn, const struct tf_tensor *pos)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	int R = f->R, kvl = tf_config_kv_source(c, L), src = kv_src_index(c, (uint32_t)kvl);
	int r = (int)tf_config_ratio(c, (uint32_t)kvl), k = (int)c->index_topk;
	int64_t Hi = c->index_heads, Di = c->index_dim, bs = c->candidate_block_size;
	int reindex = tf_config_mode(c, L) == TF_MODE_REINDEX;
	int is_cand = (int64_t)L == c->candidate_source;
	struct tf_tensor *iq, *iqr, *iw;
	tf_status st;
	if ((st = tmp_new(f, &iq, TF_DT_BF16, 2, R, Hi * Di, 1)) || (st = lin(f, &lw->ix_wq_b, qn, iq)) ||
	    (st = tmp_new(f, &iqr, TF_DT_BF16, 3, R, Hi, Di)))
		return st;
	struct tf_tensor iq3 = reshape3(iq, R, Hi, Di);
	if ((st = be->ops->rope(be, &iq3, pos, freqs_of(f, L), 0, iqr)) ||
	    (st = tmp_new(f, &iw, TF_DT_F32, 2, R, Hi, 1)) ||
	    (st = be->ops->linear(be, x, &lw->ix_wp, iw)))
		return st;
	if (reindex && !f->have_cand)
		return tf_err(TF_ERR_INTERNAL, "forward: reindex layer %u before the candidate source", L);
	for (int si = 0; si < f->nsegs && !st; si++) {
		const struct segment *s = &f->segs[si];
		int mark = f->ntmp;
		int64_t N = (s->pos0 + s->n) / r, nblk = (N + bs - 1) / bs;
		if (N == 0) {
			for (int i = 0; i < s->n; i++)
				f->n_sel[s->row0 + i] = 0;
			continue;
		}
		struct tf_tensor *nv, *keys, *sc, *sel, *ns, *blk = NULL;
		if ((st = tmp_new(f, &nv, TF_DT_I32, 1, s->n, 1, 1)) ||
		    (st = tmp_new(f, &keys, TF_DT_F32, 2, N, Di, 1)) ||
		    (st = tmp_new(f, &sc, TF_DT_F32, 2, s->n, N, 1)) ||
		    (st = tmp_new(f, &sel, TF_DT_I32, 2, s->n, k, 1)) ||
		    (st = tmp_new(f, &ns, TF_DT_I32, 1, s->n, 1, 1)) ||
		    ((reindex || is_cand) && (st = tmp_new(f, &blk, TF_DT_U8, 2, s->n, nblk, 1))))
			break;
		for (int i = 0; i < s->n; i++)
			((int32_t *)nv->data)[i] = (int32_t)((s->pos0 + i + 1) / r);
		for (int64_t j = 0; j < N && !st; j++)
			st = tf_kv_ik_get(f->kv, s->seq, src, j, (float *)keys->data + j * Di);
		if (st)
			break;
		if (reindex)
			for (int i = 0; i < s->n; i++)
				memcpy((uint8_t *)blk->data + i * nblk,
				       f->cand + (int64_t)(s->row0 + i) * f->cand_nblk, (size_t)nblk);
		struct tf_tensor q_s = rows_of(iqr, s->row0, s->n), w_s = rows_of(iw, s->row0, s->n);
		if ((st = be->ops->index_score(be, &q_s, &w_s, keys, nv, reindex ? blk : NULL, (int)bs,
					       sc)))
			break;
		if (is_cand) {
			if ((st = be->ops->candidate_blocks(be, sc, nv, (int)bs, (int)c->candidate_blocks,
							    blk)))
				break;
			for (int i = 0; i < s->n; i++)
				memcpy(f->cand + (int64_t)(s->row0 + i) * f->cand_nblk,
				       (uint8_t *)blk->data + i * nblk, (size_t)nblk);
		}
		if ((st = be->ops->index_topk(be, sc, nv, k, sel, ns)))
			break;
		memcpy(f->sel + (int64_t)s->row0 * k, sel->data, (size_t)s->n * k * sizeof(int32_t));
		memcpy(f->n_sel + s->row0, ns->data, (size_t)s->n * sizeof(int32_t));
		tmp_release_from(f, mark);
	}
	if (is_cand)
		f->have_cand = 1;
	return st;
}

/* §8: one sequence's rows attend to their window rows and selected pool
 * rows (pool rows first, as vLLM orders them). */
static tf_status attend(struct tf_fwd *f, uint32_t L, const struct segment *s,
			const struct tf_tensor *q, struct tf_tensor *out)
{
	const struct tf_config *c = f->c;
	int64_t hd = c->head_dim, win = c->window, k = c->index_topk;
	int64_t plast = s->pos0 + s->n - 1, wlo = s->pos0 - win + 1 < 0 ? 0 : s->pos0 - win + 1;
	int64_t nwin = plast - wlo + 1, N = 0, nJ = 0;
	int src = -1, r = 1;
	int32_t *map = NULL;
	tf_status st = TF_OK;
	if (tf_config_mode(c, L) != TF_MODE_SWA) {
		int kvl = tf_config_kv_source(c, L);
		src = kv_src_index(c, (uint32_t)kvl);
		r = (int)tf_config_ratio(c, (uint32_t)kvl);
		N = (plast + 1) / r;
		map = malloc((size_t)(N ? N : 1) * sizeof *map);
		if (!map)
			return tf_err(TF_ERR_NOMEM, "forward: out of memory");
		for (int64_t j = 0; j < N; j++)
			map[j] = -1;
		for (int i = 0; i < s->n; i++)
			for (int t = 0; t < f->n_sel[s->row0 + i]; t++)
				map[f->sel[(int64_t)(s->row0 + i) * k + t]] = 0;
		for (int64_t j = 0; j < N; j++)
			if (map[j] == 0)
				map[j] = (int32_t)nJ++;
	}
	int mark = f->ntmp;
	int64_t total = 0;
	for (int i = 0; i < s->n; i++) {
		int64_t p = s->pos0 + i;
		total += (map ? f->n_sel[s->row0 + i] : 0) + (p - (p - win + 1 < 0 ? 0 : p - win + 1) + 1);
	}
	struct tf_tensor *tab, *off, *idx;
	if ((st = tmp_new(f, &tab, TF_DT_F32, 2, nJ + nwin, hd, 1)) ||
	    (st = tmp_new(f, &off, TF_DT_I32, 1, s->n + 1, 1, 1)) ||
	    (st = tmp_new(f, &idx, TF_DT_I32, 1, total, 1, 1)))
		goto out;
	float *tv = tab->data;
	for (int64_t j = 0; j < N && !st; j++)
		if (map[j] >= 0)
			st = tf_kv_pool_get(f->kv, s->seq, src, j, tv + (int64_t)map[j] * hd);
	if (st)
		goto out;
	for (int64_t p = wlo; p <= plast; p++)
		tf_kv_window_get(f->kv, s->seq, (int)L, p, tv + (nJ + p - wlo) * hd);
	int32_t *o = off->data, *ix = idx->data, m = 0;
	for (int i = 0; i < s->n; i++) {
		int64_t p = s->pos0 + i, lo = p - win + 1 < 0 ? 0 : p - win + 1;
		o[i] = m;
		if (map)
			for (int t = 0; t < f->n_sel[s->row0 + i]; t++)
				ix[m++] = map[f->sel[(int64_t)(s->row0 + i) * k + t]];
		for (int64_t pp = lo; pp <= p; pp++)
			ix[m++] = (int32_t)(nJ + pp - wlo);
	}
	o[s->n] = m;
	struct tf_tensor q_s = rows_of(q, s->row0, s->n), o_s = rows_of(out, s->row0, s->n);
	st = f->be->ops->attention(f->be, &q_s, tab, off, idx, &f->w->layers[L].sink, &o_s);
out:
	tmp_release_from(f, mark);
	free(map);
	return st;
}

/* UNCONFIRMED (spec §13; vLLM's mask kernel is not public): the key set is
 * PC's, each row's own window of context rows plus every draft row. MLX
 * gives every row the same context rows P - window .. P - 1 instead. */
int64_t tf_fwd_draft_keys(int64_t P, int n, int64_t window, int32_t *off, int32_t *idx)
{
	int64_t lo = P - window + 1 < 0 ? 0 : P - window + 1, m = 0;
	for (int i = 0; i < n; i++) {
		int64_t li = P + i - window + 1 < lo ? lo : P + i - window + 1;
		if (off)
			off[i] = (int32_t)m;
		for (int64_t p = li; p < P; p++, m++) /* context rows li .. P - 1 */
			if (idx)
				idx[m] = (int32_t)(p - lo);
		for (int j = 0; j < n; j++, m++) /* every draft row */
			if (idx)
				idx[m] = (int32_t)(P - lo + j);
	}
	if (off)
		off[n] = (int32_t)m;
	return m;
}

/* §13: one sequence's draft rows attend to their block's context rows
 * (the ring) and to every draft row of the sequence (tf_fwd_draft_keys).
 * The draft rows win [R, hd] bf16 pass through the window format, as
 * stored rows would. */
static tf_status attend_draft(struct tf_fwd *f, uint32_t L, const struct segment *s,
			      const struct tf_tensor *q, const struct tf_tensor *win,
			      struct tf_tensor *out)
{
	const struct tf_kv_config *kc = tf_kv_config(f->kv);
	int64_t hd = f->c->head_dim, W = f->c->window, P = s->pos0, n = s->n;
	int64_t lo = P - W + 1 < 0 ? 0 : P - W + 1, nctx = P - lo;
	int mark = f->ntmp;
	struct tf_tensor *tab, *off, *idx;
	uint8_t *enc = malloc(tf_kv_row_bytes(kc->window_fmt, (int)hd, kc->rope));
	tf_status st = enc ? TF_OK : tf_err(TF_ERR_NOMEM, "forward: out of memory");
	if (st || (st = tmp_new(f, &tab, TF_DT_F32, 2, nctx + n, hd, 1)) ||
	    (st = tmp_new(f, &off, TF_DT_I32, 1, n + 1, 1, 1)) ||
	    (st = tmp_new(f, &idx, TF_DT_I32, 1, tf_fwd_draft_keys(P, (int)n, W, NULL, NULL), 1, 1)))
		goto out;
	float *tv = tab->data;
	for (int64_t p = lo; p < P; p++)
		tf_kv_window_get(f->kv, s->seq, (int)L, p, tv + (p - lo) * hd);
	for (int64_t i = 0; i < n; i++) {
		float *row = tv + (nctx + i) * hd;
		bf16_row(win, s->row0 + i, hd, row);
		tf_kv_row_encode(kc->window_fmt, row, (int)hd, kc->rope, enc);
		tf_kv_row_decode(kc->window_fmt, enc, (int)hd, kc->rope, row);
	}
	tf_fwd_draft_keys(P, (int)n, W, off->data, idx->data);
	struct tf_tensor q_s = rows_of(q, s->row0, n), o_s = rows_of(out, s->row0, n);
	st = f->be->ops->attention(f->be, &q_s, tab, off, idx, &f->w->layers[L].sink, &o_s);
out:
	tmp_release_from(f, mark);
	free(enc);
	return st;
}

/* §5-§9 for block L: x [R, D] bf16 in, branch [R, D] bf16 out. */
static tf_status attention(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x,
			   struct tf_tensor *branch)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	int R = f->R, mark = f->ntmp;
	int64_t hd = c->head_dim, H = f->Hl, G = f->Gl, hg = H / G, ol = c->o_lora;
	struct tf_tensor *pos, *qa, *qn, *kv, *kvn, *win, *q, *qr, *o32, *o, *og, *zg, *z;
	tf_status st;
	int32_t *p32 = malloc((size_t)R * sizeof *p32);
	float *row = malloc((size_t)hd * sizeof *row);
	if (!p32 || !row) {
		st = tf_err(TF_ERR_NOMEM, "forward: out of memory");
		goto out;
	}
	for (int i = 0; i < R; i++)
		p32[i] = (int32_t)f->pos[i];
	if ((st = pos_tensor(f, p32, R, &pos)) ||
	    (st = tmp_new(f, &qa, TF_DT_BF16, 2, R, c->q_lora, 1)) || (st = lin(f, &lw->wq_a, x, qa)) ||
	    (st = tmp_new(f, &qn, TF_DT_BF16, 2, R, c->q_lora, 1)) ||
	    (st = be->ops->rmsnorm(be, qa, &lw->q_norm, c->eps, qn)) ||
	    (st = tmp_new(f, &kv, TF_DT_BF16, 2, R, hd, 1)) || (st = lin(f, &lw->wkv, x, kv)) ||
	    (st = tmp_new(f, &kvn, TF_DT_BF16, 2, R, hd, 1)) ||
	    (st = be->ops->rmsnorm(be, kv, &lw->kv_norm, c->eps, kvn)) ||
	    (st = tmp_new(f, &win, TF_DT_BF16, 2, R, hd, 1)) ||
	    (st = be->ops->rope(be, kvn, pos, freqs_of(f, L), 0, win)))
		goto out;
	for (int i = 0; i < R && !f->draft; i++) { /* the window rows, before anything reads them */
		bf16_row(win, i, hd, row);
		tf_kv_window_put(f->kv, f->seq[i], (int)L, f->pos[i], row);
	}
	if ((st = tmp_new(f, &q, TF_DT_BF16, 2, R, H * hd, 1)) || (st = lin(f, &lw->wq_b, qn, q)) ||
	    (st = tmp_new(f, &qr, TF_DT_BF16, 3, R, H, hd)))
		goto out;
	struct tf_tensor q3 = reshape3(q, R, H, hd);
	if ((st = be->ops->rope(be, &q3, pos, freqs_of(f, L), 0, qr)))
		goto out;
	if (tf_config_is_kv_source(c, L) && (st = compress(f, L, x)))
		goto out;
	enum tf_layer_mode mode = tf_config_mode(c, L);
	if ((mode == TF_MODE_FULL || mode == TF_MODE_REINDEX) &&
	    (st = index_select(f, L, x, qn, pos)))
		goto out;
	if ((st = tmp_new(f, &o32, TF_DT_F32, 3, R, H, hd)))
		goto out;
	for (int si = 0; si < f->nsegs && !st; si++)
		st = f->draft ? attend_draft(f, L, &f->segs[si], qr, win, o32)
			      : attend(f, L, &f->segs[si], qr, o32);
	if (st || (st = tmp_new(f, &o, TF_DT_BF16, 3, R, H, hd)) ||
	    (st = be->ops->rope(be, o32, pos, freqs_of(f, L), 1, o)) ||
	    (st = tmp_new(f, &og, TF_DT_BF16, 2, R, hg * hd, 1)) ||
	    (st = tmp_new(f, &zg, TF_DT_BF16, 2, R, ol, 1)) ||
	    (st = tmp_new(f, &z, TF_DT_BF16, 2, R, G * ol, 1)))
		goto out;
	for (int64_t g = 0; g < G && !st; g++) { /* §9: output groups of hg heads */
		for (int i = 0; i < R; i++)
			memcpy((uint16_t *)og->data + i * hg * hd,
			       (uint16_t *)o->data + (i * H + g * hg) * hd, (size_t)(hg * hd) * 2);
		if ((st = lin(f, &lw->wo_a[g], og, zg)))
			break;
		for (int i = 0; i < R; i++)
			memcpy((uint16_t *)z->data + (i * G + g) * ol, (uint16_t *)zg->data + i * ol,
			       (size_t)ol * 2);
	}
	if (!st)
		st = lin_sum(f, &lw->wo_b, z, branch);
out:
	tmp_release_from(f, mark);
	free(p32);
	free(row);
	return st;
}

/* ---- MoE (§10) ---- */

/* One expert's SwiGLU MLP on x [n, D] bf16: y [n, D] f32. */
static tf_status expert(struct tf_fwd *f, const struct tf_lin *w1, const struct tf_lin *w2,
			const struct tf_lin *w3, const struct tf_tensor *x, struct tf_tensor *y)
{
	int64_t n = x->shape[0], I = f->Il;
	int mark = f->ntmp;
	struct tf_tensor *gt, *up, *a;
	tf_status st;
	if (!(st = tmp_new(f, &gt, TF_DT_F32, 2, n, I, 1)) && !(st = lin(f, w1, x, gt)) &&
	    !(st = tmp_new(f, &up, TF_DT_F32, 2, n, I, 1)) && !(st = lin(f, w3, x, up)) &&
	    !(st = tmp_new(f, &a, TF_DT_BF16, 2, n, I, 1)) &&
	    !(st = f->be->ops->swiglu(f->be, gt, up, f->c->swiglu_limit, a)))
		st = lin(f, w2, a, y);
	tmp_release_from(f, mark);
	return st;
}

static tf_status moe(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x,
		     struct tf_tensor *branch)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	int R = f->R, mark = f->ntmp;
	int64_t E = tf_config_experts_of(c, L), k = tf_config_topk_of(c, L), D = c->hidden;
	struct tf_tensor *lg, *ids, *wts, *Y, *sh, *xe, *ye;
	int32_t *rows = malloc((size_t)(R * k) * sizeof *rows);
	tf_status st;
	if (!rows)
		return tf_err(TF_ERR_NOMEM, "forward: out of memory");
	if ((st = tmp_new(f, &lg, TF_DT_F32, 2, R, E, 1)) ||
	    (st = be->ops->linear(be, x, &lw->gate, lg)) ||
	    (st = tmp_new(f, &ids, TF_DT_I32, 2, R, k, 1)) ||
	    (st = tmp_new(f, &wts, TF_DT_F32, 2, R, k, 1)) ||
	    (st = be->ops->moe_route(be, lg, &lw->gate_bias, (int)k, c->routed_scale, ids, wts)) ||
	    (st = tmp_new(f, &Y, TF_DT_F32, 3, R, k, D)) ||
	    (st = tmp_new(f, &sh, TF_DT_F32, 2, R, D, 1)) ||
	    (st = tmp_new(f, &xe, TF_DT_BF16, 2, R * k, D, 1)) ||
	    (st = tmp_new(f, &ye, TF_DT_F32, 2, R * k, D, 1)))
		goto out;
	const int32_t *id = ids->data;
	for (int64_t e = 0; e < E && !st; e++) { /* each expert over the (row, slot)s it got */
		int n = 0;
		for (int64_t t = 0; t < R * k; t++)
			if (id[t] == e) {
				memcpy((uint16_t *)xe->data + n * D, (uint16_t *)x->data + (t / k) * D,
				       (size_t)D * 2);
				rows[n++] = (int32_t)t;
			}
		if (!n)
			continue;
		struct tf_tensor xv = rows_of(xe, 0, n), yv = rows_of(ye, 0, n);
		if ((st = expert(f, &lw->w1[e], &lw->w2[e], &lw->w3[e], &xv, &yv)))
			break;
		for (int i = 0; i < n; i++)
			memcpy((float *)Y->data + (int64_t)rows[i] * D, (float *)ye->data + i * D,
			       (size_t)D * sizeof(float));
	}
	if (!st && !(st = expert(f, &lw->sh_w1, &lw->sh_w2, &lw->sh_w3, x, sh))) {
		if (!f->comm) {
			st = be->ops->moe_combine(be, Y, wts, sh, branch);
		} else { /* the rank's fp32 partial of w2's sums, summed over ranks, rounded once */
			struct tf_tensor *part;
			if (!(st = tmp_new(f, &part, TF_DT_F32, 2, R, D, 1)) &&
			    !(st = be->ops->moe_combine(be, Y, wts, sh, part)) &&
			    !(st = tf_tp_sum_f32(f->comm, part->data, (size_t)(R * D))))
				st = be->ops->convert(be, part, branch);
		}
	}
out:
	tmp_release_from(f, mark);
	free(rows);
	return st;
}

/* ---- Engram (§11) ---- */

static tf_status engram(struct tf_fwd *f, uint32_t L, struct tf_tensor *X)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	int R = f->R, mark = f->ntmp;
	uint32_t cols = tf_config_hash_cols(c), c0, c1;
	int64_t hd = c->engram_head_dim, width = (int64_t)cols * hd;
	int64_t S = c->hc_mult, D = c->hidden;
	size_t wb[TF_BOOT_MAX_WORLD]; /* bytes per row of each rank's columns */
	struct tf_tensor *rows, *mine, *blocked, *kv, part;
	tf_status st;
	for (int r = 0; r < f->world; r++) {
		tf_engram_rank_cols(cols, (uint32_t)r, (uint32_t)f->world, &c0, &c1);
		wb[r] = (size_t)((c1 - c0) * hd) * 2;
	}
	tf_engram_rank_cols(cols, (uint32_t)f->rank, (uint32_t)f->world, &c0, &c1);
	if ((st = tmp_new(f, &rows, TF_DT_BF16, 2, R, width, 1)) ||
	    (st = tmp_new(f, &blocked, TF_DT_U8, 1, R, 1, 1)))
		goto out;
	mine = rows; /* at world > 1: the rank's columns, then gathered into rows */
	if (f->comm && (st = tmp_new(f, &mine, TF_DT_BF16, 2, R, (c1 - c0) * hd + 1, 1)))
		goto out; /* (one spare element: a rank may own no column) */
	part = tf_tensor_make(mine->data, TF_DT_BF16, 2, (int64_t)R, (int64_t)(c1 - c0) * hd);
	if ((st = f->engram(f->engram_ctx, L, R, f->ids, f->pos, f->seq, &part, blocked->data)) ||
	    (f->comm && (st = tf_tp_gather_cols(f->comm, mine->data, (size_t)R, wb, rows->data))))
		goto out;
	if (!(st = tmp_new(f, &kv, TF_DT_BF16, 2, R, (S + 1) * D, 1)) &&
	    !(st = lin(f, &lw->engram_wkv, rows, kv)))
		st = f->be->ops->engram_gate(f->be, X, kv, &lw->engram_qk, blocked, c->eps,
					     c->engram_gate_clamp, X);
out:
	tmp_release_from(f, mark);
	return st;
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
	size_t row = (size_t)D * 2;
	struct tf_tensor *part, *all;
	tf_status st;
	if (!(st = tmp_new(f, &part, TF_DT_BF16, 3, R, 1, D)) &&
	    !(st = tmp_new(f, &all, TF_DT_BF16, 3, f->world, R, D)) &&
	    !(st = be->ops->embed(be, &f->w->embed, f->rank * f->Vl, ids, part)) &&
	    !(st = tf_tp_gather(f->comm, part->data, (size_t)R * row, all->data)))
		for (int i = 0; i < R; i++) {
			int64_t owner = f->ids[i] / f->Vl;
			const char *src = (const char *)all->data + ((size_t)owner * R + i) * row;
			for (int64_t s = 0; s < S; s++)
				memcpy((char *)X->data + ((size_t)i * S + s) * row, src, row);
		}
	tmp_release_from(f, mark);
	return st;
}

/* §12: logits [R, V] f32 of the final normed rows. At world > 1 each rank
 * computes its vocabulary columns and the columns are gathered (exact). */
static tf_status head(struct tf_fwd *f, const struct tf_tensor *x, float *logits)
{
	int R = f->R, mark = f->ntmp;
	struct tf_tensor out = tf_tensor_make(logits, TF_DT_F32, 2, (int64_t)R, (int64_t)f->c->vocab);
	if (!f->comm)
		return lin(f, &f->w->head, x, &out);
	size_t wb[TF_BOOT_MAX_WORLD];
	for (int r = 0; r < f->world; r++)
		wb[r] = (size_t)f->Vl * sizeof(float);
	struct tf_tensor *part;
	tf_status st;
	if (!(st = tmp_new(f, &part, TF_DT_F32, 2, R, f->Vl, 1)) && !(st = lin(f, &f->w->head, x, part)))
		st = tf_tp_gather_cols(f->comm, part->data, (size_t)R, wb, logits);
	tmp_release_from(f, mark);
	return st;
}

/* §13 taps: T = bf(mean_s fp32(X_s)) of the streams entering block L,
 * for L the t-th DSpark target. */
static void tap(struct tf_fwd *f, const struct tf_tensor *X, uint32_t t)
{
	const struct tf_config *c = f->c;
	int64_t S = c->hc_mult, D = c->hidden, nt = c->n_dspark_targets;
	const uint16_t *x = X->data;
	for (int i = 0; i < f->R; i++) {
		uint16_t *out = f->taps + ((int64_t)i * nt + t) * D;
		for (int64_t d = 0; d < D; d++) {
			float s = 0;
			for (int64_t k = 0; k < S; k++)
				s += tf_bf16_to_f32(x[(i * S + k) * D + d]);
			out[d] = tf_f32_to_bf16(s / (float)S);
		}
	}
}

static tf_status run_blocks(struct tf_fwd *f, float *logits)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_weights *w = f->w;
	struct tf_be *be = f->be;
	int R = f->R;
	int64_t S = c->hc_mult, D = c->hidden;
	struct tf_tensor *X, *ids, *pre_in, *pre[2], *post[2], *comb[2], *cl, *xin, *br;
	tf_status st;
	if ((st = tmp_new(f, &X, TF_DT_BF16, 3, R, S, D)) || (st = pos_tensor(f, f->ids, R, &ids)) ||
	    (st = tmp_new(f, &pre_in, TF_DT_F32, 2, R, S, 1)) ||
	    (st = tmp_new(f, &cl, TF_DT_BF16, 2, R, D, 1)) ||
	    (st = tmp_new(f, &xin, TF_DT_BF16, 2, R, D, 1)) ||
	    (st = tmp_new(f, &br, TF_DT_BF16, 2, R, D, 1)))
		return st;
	for (int i = 0; i < 2; i++)
		if ((st = tmp_new(f, &pre[i], TF_DT_F32, 2, R, S, 1)) ||
		    (st = tmp_new(f, &post[i], TF_DT_F32, 2, R, S, 1)) ||
		    (st = tmp_new(f, &comb[i], TF_DT_F32, 3, R, S, S)))
			return st;
	tf_phase_begin(f->ph, f->ph_embed);
	st = embed(f, ids, X); /* §2 */
	tf_phase_end(f->ph, f->ph_embed);
	if (st)
		return st;
	for (int i = 0; i < R; i++) /* the identity pre: [1, 0, 0, 0] */
		for (int64_t s = 0; s < S; s++)
			((float *)pre_in->data)[i * S + s] = s == 0;
	const float eps = c->eps;
	/* §4 over the backbone, or §13 over the DSpark blocks of a draft pass */
	uint32_t L0 = f->draft ? c->layers : 0, L1 = f->draft ? tf_config_all_layers(c) : c->layers;
	for (uint32_t L = L0; L < L1 && !st; L++) {
		const struct tf_fwd_layer *lw = &w->layers[L];
		const int *ph = f->ph_layer[L];
		for (uint32_t t = 0; f->taps && t < c->n_dspark_targets; t++)
			if (c->dspark_targets[t] == L)
				tap(f, X, t);
		if (tf_config_is_engram(c, L)) {
			tf_phase_begin(f->ph, ph[0]);
			st = engram(f, L, X);
			tf_phase_end(f->ph, ph[0]);
			if (st)
				break;
		}
		tf_phase_begin(f->ph, ph[1]);
		if (!(st = be->ops->hc_mix(be, X, &lw->hc_fn[0], &lw->hc_base[0], &lw->hc_scale[0],
					   eps, c->hc_eps, (int)c->hc_sinkhorn_iters,
					   c->hc_post_alpha, pre[0], post[0], comb[0])) &&
		    !(st = be->ops->hc_collapse(be, X, pre_in, cl)) &&
		    !(st = be->ops->rmsnorm(be, cl, &lw->attn_norm, eps, xin)) &&
		    !(st = attention(f, L, xin, br)))
			st = be->ops->hc_post(be, X, br, post[0], comb[0], X);
		tf_phase_end(f->ph, ph[1]);
		if (st)
			break;
		tf_phase_begin(f->ph, ph[2]);
		if (!(st = be->ops->hc_mix(be, X, &lw->hc_fn[1], &lw->hc_base[1], &lw->hc_scale[1],
					   eps, c->hc_eps, (int)c->hc_sinkhorn_iters,
					   c->hc_post_alpha, pre[1], post[1], comb[1])) &&
		    !(st = be->ops->hc_collapse(be, X, pre[0], cl)) &&
		    !(st = be->ops->rmsnorm(be, cl, &lw->ffn_norm, eps, xin)) &&
		    !(st = moe(f, L, xin, br)))
			st = be->ops->hc_post(be, X, br, post[1], comb[1], X);
		tf_phase_end(f->ph, ph[2]);
		if (st)
			break;
		memcpy(pre_in->data, pre[1]->data, (size_t)(R * S) * sizeof(float));
	}
	if (st)
		return st;
	tf_phase_begin(f->ph, f->ph_head);
	if (!(st = be->ops->hc_collapse(be, X, pre_in, cl)) && /* §12 */
	    !(st = be->ops->rmsnorm(be, cl, f->draft ? &w->mtp_norm : &w->norm, eps, xin)))
		st = head(f, xin, logits);
	if (!st && f->hidden)
		memcpy(f->hidden, cl->data, (size_t)(R * D) * sizeof(uint16_t));
	tf_phase_end(f->ph, f->ph_head);
	return st;
}

/* Rows of one sequence per pass at most: a pass writes every window row
 * before any row attends, so its positions must not share a ring slot with
 * the window of its first row. */
static int64_t pass_cap(const struct tf_fwd *f)
{
	return TF_KV_RING - (int64_t)f->c->window;
}

/* A call with a sequence longer than pass_cap: one pass per chunk of each
 * sequence in turn (equal to one pass: chunked prefill is exact). */
static tf_status run_split(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			   const int *seq, float *logits, uint16_t *taps)
{
	int64_t cap = pass_cap(f), V = f->c->vocab;
	int64_t tw = (int64_t)f->c->n_dspark_targets * f->c->hidden;
	for (int i = 0; i < R;) {
		int n = 1;
		while (i + n < R && seq[i + n] == seq[i] && n < cap)
			n++;
		tf_status st = tf_fwd_run_taps(f, n, ids + i, pos + i, seq + i, logits + (int64_t)i * V,
					       taps ? taps + (int64_t)i * tw : NULL);
		if (st)
			return st;
		i += n;
	}
	return TF_OK;
}

tf_status tf_fwd_run(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
		     const int *seq, float *logits)
{
	return tf_fwd_run_taps(f, R, ids, pos, seq, logits, NULL);
}

static tf_status run_call(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, float *logits, uint16_t *taps, int draft, uint16_t *hidden);

tf_status tf_fwd_run_taps(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, float *logits, uint16_t *taps)
{
	if (R < 1 || !ids || !pos || !seq || !logits)
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

/* One pass: a target call (its positions reserved and committed) or a
 * draft pass (nothing written). */
static tf_status run_call(struct tf_fwd *f, int R, const int32_t *ids, const int64_t *pos,
			  const int *seq, float *logits, uint16_t *taps, int draft, uint16_t *hidden)
{
	const struct tf_config *c = f->c;
	for (int i = 0; i < R; i++)
		if (ids[i] < 0 || (uint32_t)ids[i] >= c->vocab)
			return tf_err(TF_ERR_ARG, "forward: token %d outside the vocabulary of %u",
				      ids[i], c->vocab);
	f->R = R;
	f->taps = taps;
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
	f->cand_nblk = (maxpos + c->candidate_block_size - 1) / c->candidate_block_size + 1;
	f->segs = calloc((size_t)R, sizeof *f->segs);
	f->sel = calloc((size_t)R * c->index_topk, sizeof *f->sel);
	f->n_sel = calloc((size_t)R, sizeof *f->n_sel);
	f->cand = calloc((size_t)(R * f->cand_nblk), 1);
	tf_status st;
	if (!f->segs || !f->sel || !f->n_sel || !f->cand)
		st = tf_err(TF_ERR_NOMEM, "forward: out of memory");
	else if (!(st = segments(f)) && (draft || !(st = reserve(f))) &&
		 !(st = run_blocks(f, logits)) && !draft)
		for (int s = 0; s < f->nsegs && !st; s++)
			st = tf_kv_commit(f->kv, f->segs[s].seq, f->segs[s].pos0 + f->segs[s].n);
	tmp_release_from(f, 0);
	free(f->segs);
	free(f->sel);
	free(f->n_sel);
	free(f->cand);
	f->segs = NULL;
	f->sel = f->n_sel = NULL;
	f->cand = NULL;
	return st;
}
