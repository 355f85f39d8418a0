/* forward.c: the DeepSeek-V4.1 forward over the op backend (forward.h);
 * section numbers are dsv41-forward-spec.md's.
 *
 * The forward never reads or writes a tensor's memory: host data (ids,
 * positions, row addresses built from the KV cache's host bookkeeping)
 * goes in through upload, the logits and taps come out through download,
 * and every other move is an op (rows_copy, cache_write, cache_read,
 * page_rows, attn_keys, moe_group), so the same code runs on a device
 * backend without reading device memory inside a call. */
#include "compute/forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/phases.h"
#include "compute/tp.h"
#include "fabric/comm.h"
#include "model/engram_layout.h"
#include "model/exl3.h"

#define MAX_TMP 96

struct segment {
	int seq, row0, n;
	int64_t pos0;
};

/* A layer's routed experts as the experts ops take them: contiguous EXL3
 * layers (copies of the weights' handles), or dense tensors. */
struct experts {
	struct tf_exl3_layer *q[3]; /* w1, w2, w3: [E] each, or NULL (dense) */
	struct tf_tensor *w[3];     /* dense: [E] each */
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
	struct experts *ex;     /* [all layers] */
	struct tf_tensor eids;  /* int32 [most experts]: 0, 1, 2, ... (the groups' experts) */
	struct tf_phases *ph;
	int ph_embed, ph_head, ph_layer[TF_CONFIG_MAX_LAYERS][3]; /* engram, attn, moe */
	/* per call */
	struct tf_tensor tmp[MAX_TMP];
	int ntmp;
	struct segment *segs;
	int nsegs;
	int R;
	uint16_t *taps;         /* [R, n_dspark_targets, D] host, or NULL */
	struct tf_tensor *tapt; /* the taps on the backend */
	int draft;              /* a DSpark draft pass (tf_fwd_draft) */
	uint16_t *hidden;       /* draft: h [R, D] out, or NULL */
	const int32_t *ids;
	const int64_t *pos;
	const int *seq;
	struct tf_tensor *pos32;/* int32 [R]: the rows' positions */
	struct tf_tensor *sel, *n_sel; /* int32 [R, index_topk], [R]: the latest index source's */
	struct tf_tensor *cand; /* u8 [R, cand_nblk]: the candidate source's blocks */
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

/* A scratch tensor holding a host array (int32 [n], or n bytes for u8). */
static tf_status tmp_host(struct tf_fwd *f, struct tf_tensor **out, enum tf_dt dt,
			  const void *src, int64_t n)
{
	tf_status st = tmp_new(f, out, dt, 1, n ? n : 1, 1, 1);
	if (!st && n)
		st = f->be->ops->upload(f->be, *out, src);
	return st;
}

/* An int32 host array, allocated by the caller's helpers below. */
static int32_t *i32s(int64_t n)
{
	return tf_alloc_array((size_t)(n ? n : 1), sizeof(int32_t));
}

/* Row moves: y rows (yi) = x rows (xi), indices from host arrays (NULL:
 * in order). */
static tf_status move(struct tf_fwd *f, const struct tf_tensor *x, const int32_t *xi,
		      struct tf_tensor *y, const int32_t *yi, int64_t n)
{
	int mark = f->ntmp;
	struct tf_tensor *a = NULL, *b = NULL;
	tf_status st = TF_OK;
	if ((xi && (st = tmp_host(f, &a, TF_DT_I32, xi, n))) ||
	    (yi && (st = tmp_host(f, &b, TF_DT_I32, yi, n))))
		goto out;
	if (!xi && !yi && n != tf_tensor_rows(x))
		st = tf_err(TF_ERR_INTERNAL, "forward: a move of %lld rows", (long long)n);
	else
		st = f->be->ops->rows_copy(f->be, x, a, y, b);
out:
	tmp_release_from(f, mark);
	return st;
}

/* Cache rows at host-listed rows idx[n]: write x's rows, or read into out. */
static tf_status cache_put(struct tf_fwd *f, const struct tf_rowfmt *fmt, const struct tf_tensor *x,
			   const int32_t *idx, int64_t n, struct tf_tensor *cache)
{
	int mark = f->ntmp;
	struct tf_tensor *t;
	tf_status st = tmp_host(f, &t, TF_DT_I32, idx, n);
	if (!st)
		st = f->be->ops->cache_write(f->be, fmt, x, t, cache);
	tmp_release_from(f, mark);
	return st;
}

static tf_status cache_get(struct tf_fwd *f, const struct tf_rowfmt *fmt,
			   const struct tf_tensor *cache, const int32_t *idx, int64_t n,
			   struct tf_tensor *out)
{
	int mark = f->ntmp;
	struct tf_tensor *t;
	tf_status st = tmp_host(f, &t, TF_DT_I32, idx, n);
	if (!st)
		st = f->be->ops->cache_read(f->be, fmt, cache, t, out);
	tmp_release_from(f, mark);
	return st;
}

/* t reshaped (same data and numel). */
static struct tf_tensor reshape2(const struct tf_tensor *t, int64_t a, int64_t b)
{
	return tf_tensor_view(t, 2, a, b);
}

static struct tf_tensor reshape3(const struct tf_tensor *t, int64_t a, int64_t b, int64_t c)
{
	return tf_tensor_view(t, 3, a, b, c);
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
 * ranks in rank order (the comm gets the backend's buffer), then rounded
 * once (spec §3 step 5, §9). */
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

/* The routed experts of every layer as the experts ops take them (EXL3:
 * contiguous copies of the handles; dense: the tensors), and the ids
 * 0..E-1 of the experts groups. TF_ERR_ARG when a projection mixes EXL3
 * and dense experts. */
static tf_status experts_init(struct tf_fwd *f)
{
	const struct tf_config *c = f->c;
	uint32_t n = tf_config_all_layers(c), most = 1;
	f->ex = tf_calloc(n, sizeof *f->ex);
	if (!f->ex)
		return tf_err(TF_ERR_NOMEM, "forward: out of memory");
	for (uint32_t L = 0; L < n; L++) {
		const struct tf_fwd_layer *lw = &f->w->layers[L];
		if (L >= c->layers && !f->w->mtp_norm.data)
			break;
		uint32_t E = tf_config_experts_of(c, L);
		most = E > most ? E : most;
		const struct tf_lin *src[3] = {lw->w1, lw->w2, lw->w3};
		for (int k = 0; k < 3; k++) {
			int q = src[k][0].q != NULL;
			if (q)
				f->ex[L].q[k] = tf_alloc_array(E, sizeof *f->ex[L].q[k]);
			else
				f->ex[L].w[k] = tf_alloc_array(E, sizeof *f->ex[L].w[k]);
			if (q ? !f->ex[L].q[k] : !f->ex[L].w[k])
				return tf_err(TF_ERR_NOMEM, "forward: out of memory");
			for (uint32_t e = 0; e < E; e++) {
				if ((src[k][e].q != NULL) != q)
					return tf_err(TF_ERR_ARG, "forward: layer %u mixes EXL3 and "
						      "dense experts", L);
				if (q)
					f->ex[L].q[k][e] = *src[k][e].q;
				else
					f->ex[L].w[k][e] = src[k][e].w;
			}
		}
	}
	int32_t *ids = i32s(most);
	tf_status st = ids ? TF_OK : tf_err(TF_ERR_NOMEM, "forward: out of memory");
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
	if (world > 1 && (int)comm->device != be->ops->device)
		return tf_err(TF_ERR_UNSUPPORTED, "forward: the %s comm holds %s memory, the %s "
			      "backend %s", comm->name, comm->device ? "device" : "host",
			      be->ops->name, be->ops->device ? "device memory" : "host memory");
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
	if ((st = experts_init(f))) {
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
			for (int k = 0; k < 3; k++) {
				free(f->ex[L].q[k]);
				free(f->ex[L].w[k]);
			}
	free(f->ex);
	if (f->eids.data)
		f->be->ops->release(f->be, &f->eids);
	free(f);
}

static const struct tf_rope_freqs *freqs_of(const struct tf_fwd *f, uint32_t layer)
{
	return tf_config_ratio(f->c, layer) ? &f->yarn : &f->plain;
}

/* ---- attention (§5-§9) ---- */

static tf_status nomem(void)
{
	return tf_err(TF_ERR_NOMEM, "forward: out of memory");
}

/* §6: the compressor of KV source L: pool rows and index keys of the groups
 * this call completes; ratio-2 group starts are kept as carries. */
static tf_status compress(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	int R = f->R, src = kv_src_index(c, L), r = (int)tf_config_ratio(c, L), mark = f->ntmp;
	int64_t hd = c->head_dim, Di = c->index_dim;
	struct tf_tensor *u, *g = NULL, *U, *G = NULL, *lat, *P, *k, *kn, *ik, *wp;
	int32_t *cu = i32s(R), *cg = i32s(R), *hx = i32s(R), *hy = i32s(R), *wpos = i32s(R);
	int32_t *prow = i32s(R);
	tf_status st = cu && cg && hx && hy && wpos && prow ? TF_OK : nomem();
	if (st || (st = tmp_new(f, &u, TF_DT_F32, 2, R, hd, 1)) || (st = lin(f, &lw->comp_wkv, x, u)))
		goto out;
	if (r == 2 && ((st = tmp_new(f, &g, TF_DT_F32, 2, R, hd, 1)) ||
		       (st = lin(f, &lw->comp_wgate, x, g))))
		goto out;
	int E = 0;
	for (int i = 0; i < R; i++) { /* a group start keeps [u|g] as the carry of p + 1 */
		int64_t p = f->pos[i];
		int64_t cr = r == 2 && p % 2 == 0 ? tf_kv_carry_row(f->kv, f->seq[i], src, p) : -1;
		cu[i] = (int32_t)cr;
		cg[i] = cr < 0 ? -1 : (int32_t)(cr + 1);
		E += (p + 1) % r == 0;
	}
	if (r == 2 && ((st = move(f, u, NULL, &kvs->carry, cu, R)) ||
		       (st = move(f, g, NULL, &kvs->carry, cg, R))))
		goto out;
	if (!E)
		goto out;
	if ((st = tmp_new(f, &U, TF_DT_F32, 3, E, r, hd)) ||
	    (r == 2 && (st = tmp_new(f, &G, TF_DT_F32, 3, E, r, hd))))
		goto out;
	/* U [E, r, hd], G likewise: the completed groups, oldest position first */
	struct tf_tensor U2 = reshape2(U, (int64_t)E * r, hd), G2 = G ? reshape2(G, (int64_t)E * r, hd) : U2;
	for (int i = 0, e = 0; i < R; i++) {
		int64_t p = f->pos[i];
		if ((p + 1) % r)
			continue;
		hx[e] = i; /* this row's u (and g) land in the group's last slot */
		hy[e] = e * r + r - 1;
		cu[e] = r == 2 ? (int32_t)tf_kv_carry_row(f->kv, f->seq[i], src, p - 1) : -1;
		cg[e] = r == 2 ? cu[e] + 1 : -1;
		wpos[e] = (int32_t)(p / r * r);
		if ((st = tf_kv_pool_row(f->kv, f->seq[i], src, wpos[e] / r, 1, &prow[e])))
			goto out;
		e++;
	}
	if ((st = move(f, u, hx, &U2, hy, E)))
		goto out;
	if (r == 2) {
		for (int e = 0; e < E; e++)
			hy[e] = e * 2; /* the carried group start: slot 0 */
		if ((st = move(f, &kvs->carry, cu, &U2, hy, E)) ||
		    (st = move(f, &kvs->carry, cg, &G2, hy, E)))
			goto out;
		for (int e = 0; e < E; e++)
			hy[e] = e * 2 + 1;
		if ((st = move(f, g, hx, &G2, hy, E)))
			goto out;
	}
	if ((st = tmp_host(f, &wp, TF_DT_I32, wpos, E)) ||
	    (st = tmp_new(f, &lat, TF_DT_BF16, 2, E, hd, 1)) ||
	    (st = be->ops->compressor(be, U, G, &lw->comp_norm, c->eps, lat)) ||
	    (st = tmp_new(f, &P, TF_DT_BF16, 2, E, hd, 1)) ||
	    (st = be->ops->rope(be, lat, wp, freqs_of(f, L), 0, P)) ||
	    (st = tmp_new(f, &k, TF_DT_BF16, 2, E, Di, 1)) || (st = lin(f, &lw->ix_wk, lat, k)) ||
	    (st = tmp_new(f, &kn, TF_DT_BF16, 2, E, Di, 1)) ||
	    (st = be->ops->rmsnorm(be, k, &lw->ix_k_norm, c->eps, kn)) ||
	    (st = tmp_new(f, &ik, TF_DT_BF16, 2, E, Di, 1)) ||
	    (st = be->ops->rope(be, kn, wp, freqs_of(f, L), 0, ik)) ||
	    (st = cache_put(f, &kvs->pool_row, P, prow, E, &kvs->pool[src])))
		goto out;
	st = cache_put(f, &kvs->ik_row, ik, prow, E, &kvs->ik[src]);
out:
	tmp_release_from(f, mark);
	free(cu);
	free(cg);
	free(hx);
	free(hy);
	free(wpos);
	free(prow);
	return st;
}

/* The physical rows of pool rows 0 .. N - 1 of a sequence's source src
 * (host bookkeeping; N int32s the caller frees). */
static tf_status pool_rows(struct tf_fwd *f, int seq, int src, int64_t N, int32_t **out)
{
	int32_t *rows = i32s(N);
	tf_status st = rows ? TF_OK : nomem();
	for (int64_t j = 0; j < N && !st; j++)
		st = tf_kv_pool_row(f->kv, seq, src, j, 0, &rows[j]);
	if (st) {
		free(rows);
		rows = NULL;
	}
	*out = rows;
	return st;
}

/* §7 for one sequence: its rows' index scores over the source's keys, and
 * their selections into f->sel / f->n_sel (and the candidate blocks when
 * L is the candidate source). iqr [R, Hi, Di] and iw [R, Hi] are the call's. */
static tf_status index_segment(struct tf_fwd *f, uint32_t L, const struct segment *s, int src,
			       int r, const struct tf_tensor *iqr, const struct tf_tensor *iw)
{
	const struct tf_config *c = f->c;
	struct tf_be *be = f->be;
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	int k = (int)c->index_topk, mark = f->ntmp;
	int64_t Di = c->index_dim, bs = c->candidate_block_size;
	int reindex = tf_config_mode(c, L) == TF_MODE_REINDEX;
	int64_t N = (s->pos0 + s->n) / r;
	struct tf_tensor sel = tf_tensor_rows_of(f->sel, s->row0, s->n);
	struct tf_tensor ns = tf_tensor_rows_of(f->n_sel, s->row0, s->n);
	struct tf_tensor blk = tf_tensor_rows_of(f->cand, s->row0, s->n);
	int32_t *nvis = i32s(s->n), *rows = NULL;
	struct tf_tensor *nv, *keys, *sc;
	tf_status st = nvis ? TF_OK : nomem();
	for (int i = 0; i < s->n && !st; i++)
		nvis[i] = (int32_t)((s->pos0 + i + 1) / r);
	if (st || N == 0) { /* nothing visible yet: no selections */
		for (int i = 0; i < s->n && !st; i++)
			nvis[i] = 0;
		if (!st)
			st = be->ops->upload(be, &ns, nvis);
		goto out;
	}
	if ((st = tmp_host(f, &nv, TF_DT_I32, nvis, s->n)) ||
	    (st = tmp_new(f, &keys, TF_DT_F32, 2, N, Di, 1)) ||
	    (st = tmp_new(f, &sc, TF_DT_F32, 2, s->n, N, 1)) ||
	    (st = pool_rows(f, s->seq, src, N, &rows)) ||
	    (st = cache_get(f, &kvs->ik_row, &kvs->ik[src], rows, N, keys)))
		goto out;
	struct tf_tensor q_s = tf_tensor_rows_of(iqr, s->row0, s->n);
	struct tf_tensor w_s = tf_tensor_rows_of(iw, s->row0, s->n);
	if ((st = be->ops->index_score(be, &q_s, &w_s, keys, nv, reindex ? &blk : NULL, (int)bs, sc)))
		goto out;
	if ((int64_t)L == c->candidate_source &&
	    (st = be->ops->candidate_blocks(be, sc, nv, (int)bs, (int)c->candidate_blocks, &blk)))
		goto out;
	st = be->ops->index_topk(be, sc, nv, k, &sel, &ns);
out:
	tmp_release_from(f, mark);
	free(nvis);
	free(rows);
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
	int r = (int)tf_config_ratio(c, (uint32_t)kvl);
	int64_t Hi = c->index_heads, Di = c->index_dim;
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
	if (tf_config_mode(c, L) == TF_MODE_REINDEX && !f->have_cand)
		return tf_err(TF_ERR_INTERNAL, "forward: reindex layer %u before the candidate source", L);
	for (int si = 0; si < f->nsegs && !st; si++)
		st = index_segment(f, L, &f->segs[si], src, r, iqr, iw);
	if ((int64_t)L == c->candidate_source)
		f->have_cand = 1;
	return st;
}

/* §8: one sequence's rows attend to their selected pool rows, then their
 * window rows (as vLLM orders them). The key table holds every pool row of
 * the sequence when that is no more than the rows' selections, else each
 * row's selections in rows of their own (looked up through the page table
 * on the backend); then the window rows. */
static tf_status attend(struct tf_fwd *f, uint32_t L, const struct segment *s,
			const struct tf_tensor *q, struct tf_tensor *out)
{
	const struct tf_config *c = f->c;
	struct tf_be *be = f->be;
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	int64_t hd = c->head_dim, win = c->window, k = c->index_topk;
	int64_t plast = s->pos0 + s->n - 1, wlo = s->pos0 - win + 1 < 0 ? 0 : s->pos0 - win + 1;
	int64_t nwin = plast - wlo + 1, N = 0, nJ = 0;
	int src = -1, direct = 1, mark = f->ntmp;
	int pooled = tf_config_mode(c, L) != TF_MODE_SWA;
	int32_t *rows = NULL, *wrows = i32s(nwin);
	struct tf_tensor *tab, *off, *idx, *phys;
	tf_status st = wrows ? TF_OK : nomem();
	if (!st && pooled) {
		int kvl = tf_config_kv_source(c, L);
		src = kv_src_index(c, (uint32_t)kvl);
		N = (plast + 1) / (int)tf_config_ratio(c, (uint32_t)kvl);
		direct = N <= s->n * k;
		nJ = direct ? N : s->n * k;
	}
	for (int64_t p = wlo; p <= plast && !st; p++)
		wrows[p - wlo] = (int32_t)tf_kv_window_row(f->kv, s->seq, (int)L, p);
	if (st || (st = tmp_new(f, &tab, TF_DT_F32, 2, nJ + nwin, hd, 1)) ||
	    (st = tmp_new(f, &off, TF_DT_I32, 1, s->n + 1, 1, 1)) ||
	    (st = tmp_new(f, &idx, TF_DT_I32, 1, (pooled ? s->n * k : 0) + s->n * win, 1, 1)))
		goto out;
	struct tf_tensor sel = tf_tensor_rows_of(f->sel, s->row0, s->n);
	struct tf_tensor ns = tf_tensor_rows_of(f->n_sel, s->row0, s->n);
	struct tf_tensor pool_part = tf_tensor_rows_of(tab, 0, nJ);
	struct tf_tensor win_part = tf_tensor_rows_of(tab, nJ, nwin);
	if (pooled && direct) {
		if ((st = pool_rows(f, s->seq, src, N, &rows)) ||
		    (N && (st = cache_get(f, &kvs->pool_row, &kvs->pool[src], rows, N, &pool_part))))
			goto out;
	} else if (pooled) {
		struct tf_tensor pt = tf_kv_page_table(f->kv, s->seq);
		struct tf_tensor lsel = tf_tensor_view(&sel, 1, s->n * k);
		if ((st = tmp_new(f, &phys, TF_DT_I32, 1, s->n * k, 1, 1)) ||
		    (st = be->ops->page_rows(be, &pt, tf_kv_page_rows(f->kv, src), &lsel, phys)) ||
		    (st = be->ops->cache_read(be, &kvs->pool_row, &kvs->pool[src], phys, &pool_part)))
			goto out;
	}
	if ((st = cache_get(f, &kvs->win, &kvs->ring, wrows, nwin, &win_part)) ||
	    (st = be->ops->attn_keys(be, pooled ? &sel : NULL, &ns, direct, s->pos0, (int)win, nJ,
				     off, idx)))
		goto out;
	struct tf_tensor q_s = tf_tensor_rows_of(q, s->row0, s->n), o_s = tf_tensor_rows_of(out, s->row0, s->n);
	st = be->ops->attention(be, &q_s, tab, off, idx, &f->w->layers[L].sink, &o_s);
out:
	tmp_release_from(f, mark);
	free(rows);
	free(wrows);
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
 * stored rows would (written to a scratch cache and read back). */
static tf_status attend_draft(struct tf_fwd *f, uint32_t L, const struct segment *s,
			      const struct tf_tensor *q, const struct tf_tensor *win,
			      struct tf_tensor *out)
{
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	struct tf_be *be = f->be;
	int64_t hd = f->c->head_dim, W = f->c->window, P = s->pos0, n = s->n;
	int64_t lo = P - W + 1 < 0 ? 0 : P - W + 1, nctx = P - lo;
	int64_t nk = tf_fwd_draft_keys(P, (int)n, W, NULL, NULL);
	int mark = f->ntmp;
	struct tf_tensor *tab, *off, *idx, *enc, *ix;
	int32_t *ctx = i32s(nctx), *ko = i32s(n + 1), *ki = i32s(nk), *self = i32s(n);
	tf_status st = ctx && ko && ki && self ? TF_OK : nomem();
	if (st)
		goto out;
	for (int64_t p = lo; p < P; p++)
		ctx[p - lo] = (int32_t)tf_kv_window_row(f->kv, s->seq, (int)L, p);
	for (int64_t i = 0; i < n; i++)
		self[i] = (int32_t)i;
	tf_fwd_draft_keys(P, (int)n, W, ko, ki);
	struct tf_tensor w_s = tf_tensor_rows_of(win, s->row0, n);
	if ((st = tmp_new(f, &tab, TF_DT_F32, 2, nctx + n, hd, 1)) ||
	    (st = tmp_host(f, &off, TF_DT_I32, ko, n + 1)) ||
	    (st = tmp_host(f, &idx, TF_DT_I32, ki, nk)) ||
	    (st = tmp_new(f, &enc, TF_DT_U8, 2, n, (int64_t)tf_rowfmt_bytes(&kvs->win), 1)) ||
	    (st = tmp_host(f, &ix, TF_DT_I32, self, n)))
		goto out;
	struct tf_tensor ctx_part = tf_tensor_rows_of(tab, 0, nctx), own = tf_tensor_rows_of(tab, nctx, n);
	if ((nctx && (st = cache_get(f, &kvs->win, &kvs->ring, ctx, nctx, &ctx_part))) ||
	    (st = be->ops->cache_write(be, &kvs->win, &w_s, ix, enc)) ||
	    (st = be->ops->cache_read(be, &kvs->win, enc, ix, &own)))
		goto out;
	struct tf_tensor q_s = tf_tensor_rows_of(q, s->row0, n), o_s = tf_tensor_rows_of(out, s->row0, n);
	st = be->ops->attention(be, &q_s, tab, off, idx, &f->w->layers[L].sink, &o_s);
out:
	tmp_release_from(f, mark);
	free(ctx);
	free(ko);
	free(ki);
	free(self);
	return st;
}

/* §9: the output groups of hg heads each through their wo_a, into z
 * [R, G * o_lora]. o [R, H, hd] bf16. */
static tf_status out_groups(struct tf_fwd *f, uint32_t L, const struct tf_tensor *o,
			    struct tf_tensor *z)
{
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	int R = f->R, mark = f->ntmp;
	int64_t G = f->Gl, hg = f->Hl / G, hd = f->c->head_dim, ol = f->c->o_lora;
	struct tf_tensor *og, *zg, *gi;
	int32_t *at = i32s((int64_t)R * G);
	tf_status st = at ? TF_OK : nomem();
	for (int64_t g = 0; g < G && !st; g++) /* group g's rows of the [R * G, ...] views */
		for (int i = 0; i < R; i++)
			at[g * R + i] = (int32_t)(i * G + g);
	if (st || (st = tmp_host(f, &gi, TF_DT_I32, at, (int64_t)R * G)) ||
	    (st = tmp_new(f, &og, TF_DT_BF16, 2, R, hg * hd, 1)) ||
	    (st = tmp_new(f, &zg, TF_DT_BF16, 2, R, ol, 1)))
		goto out;
	struct tf_tensor ov = reshape2(o, (int64_t)R * G, hg * hd), zv = reshape2(z, (int64_t)R * G, ol);
	for (int64_t g = 0; g < G && !st; g++) {
		struct tf_tensor ix = tf_tensor_rows_of(gi, g * R, R);
		if (!(st = f->be->ops->rows_copy(f->be, &ov, &ix, og, NULL)) &&
		    !(st = lin(f, &lw->wo_a[g], og, zg)))
			st = f->be->ops->rows_copy(f->be, zg, NULL, &zv, &ix);
	}
out:
	tmp_release_from(f, mark);
	free(at);
	return st;
}

/* §5-§9 for block L: x [R, D] bf16 in, branch [R, D] bf16 out. */
static tf_status attention(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x,
			   struct tf_tensor *branch)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	int R = f->R, mark = f->ntmp;
	int64_t hd = c->head_dim, H = f->Hl, G = f->Gl, ol = c->o_lora;
	struct tf_tensor *pos = f->pos32, *qa, *qn, *kv, *kvn, *win, *q, *qr, *o32, *o, *z;
	int32_t *wrows = i32s(R);
	tf_status st = wrows ? TF_OK : nomem();
	if (st || (st = tmp_new(f, &qa, TF_DT_BF16, 2, R, c->q_lora, 1)) ||
	    (st = lin(f, &lw->wq_a, x, qa)) ||
	    (st = tmp_new(f, &qn, TF_DT_BF16, 2, R, c->q_lora, 1)) ||
	    (st = be->ops->rmsnorm(be, qa, &lw->q_norm, c->eps, qn)) ||
	    (st = tmp_new(f, &kv, TF_DT_BF16, 2, R, hd, 1)) || (st = lin(f, &lw->wkv, x, kv)) ||
	    (st = tmp_new(f, &kvn, TF_DT_BF16, 2, R, hd, 1)) ||
	    (st = be->ops->rmsnorm(be, kv, &lw->kv_norm, c->eps, kvn)) ||
	    (st = tmp_new(f, &win, TF_DT_BF16, 2, R, hd, 1)) ||
	    (st = be->ops->rope(be, kvn, pos, freqs_of(f, L), 0, win)))
		goto out;
	for (int i = 0; i < R; i++)
		wrows[i] = (int32_t)tf_kv_window_row(f->kv, f->seq[i], (int)L, f->pos[i]);
	/* the window rows, before anything reads them */
	if ((!f->draft && (st = cache_put(f, &kvs->win, win, wrows, R, &kvs->ring))) ||
	    (st = tmp_new(f, &q, TF_DT_BF16, 2, R, H * hd, 1)) || (st = lin(f, &lw->wq_b, qn, q)) ||
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
	    (st = tmp_new(f, &z, TF_DT_BF16, 2, R, G * ol, 1)) || (st = out_groups(f, L, o, z)))
		goto out;
	st = lin_sum(f, &lw->wo_b, z, branch);
out:
	tmp_release_from(f, mark);
	free(wrows);
	return st;
}

/* ---- MoE (§10) ---- */

/* The shared expert's SwiGLU MLP on x [n, D] bf16: y [n, D] f32. */
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

static tf_status moe(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x,
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
	if ((st = tmp_new(f, &lg, TF_DT_F32, 2, R, E, 1)) ||
	    (st = be->ops->linear(be, x, &lw->gate, lg)) ||
	    (st = tmp_new(f, &ids, TF_DT_I32, 2, R, k, 1)) ||
	    (st = tmp_new(f, &wts, TF_DT_F32, 2, R, k, 1)) ||
	    (st = be->ops->moe_route(be, lg, &lw->gate_bias, (int)k, c->routed_scale, ids, wts)) ||
	    (st = tmp_new(f, &off, TF_DT_I32, 1, E + 1, 1, 1)) ||
	    (st = tmp_new(f, &pair, TF_DT_I32, 1, T, 1, 1)) ||
	    (st = tmp_new(f, &src, TF_DT_I32, 1, T, 1, 1)) ||
	    (st = be->ops->moe_group(be, ids, (int)E, off, pair, src)) ||
	    (st = tmp_new(f, &xe, TF_DT_BF16, 2, T, D, 1)) ||
	    (st = be->ops->rows_copy(be, x, src, xe, NULL)) || /* xe [T, D]: pair p's row */
	    (st = tmp_new(f, &gt, TF_DT_F32, 2, T, I, 1)) ||
	    (st = experts_lin(f, L, 0, off, xe, gt)) ||
	    (st = tmp_new(f, &up, TF_DT_F32, 2, T, I, 1)) ||
	    (st = experts_lin(f, L, 2, off, xe, up)) ||
	    (st = tmp_new(f, &a, TF_DT_BF16, 2, T, I, 1)) ||
	    (st = be->ops->swiglu(be, gt, up, c->swiglu_limit, a)) ||
	    (st = tmp_new(f, &ye, TF_DT_F32, 2, T, D, 1)) ||
	    (st = experts_lin(f, L, 1, off, a, ye)) ||
	    (st = tmp_new(f, &Y, TF_DT_F32, 3, R, k, D)))
		goto out;
	struct tf_tensor Yv = reshape2(Y, T, D); /* Y [R, k, D]: pair p lands at its t */
	if ((st = be->ops->rows_copy(be, ye, NULL, &Yv, pair)) ||
	    (st = tmp_new(f, &sh, TF_DT_F32, 2, R, D, 1)) ||
	    (st = expert(f, &lw->sh_w1, &lw->sh_w2, &lw->sh_w3, x, sh)))
		goto out;
	if (!f->comm) {
		st = be->ops->moe_combine(be, Y, wts, sh, branch);
	} else { /* the rank's fp32 partial of w2's sums, summed over ranks, rounded once */
		struct tf_tensor *part;
		if (!(st = tmp_new(f, &part, TF_DT_F32, 2, R, D, 1)) &&
		    !(st = be->ops->moe_combine(be, Y, wts, sh, part)) &&
		    !(st = tf_tp_sum_f32(f->comm, part->data, (size_t)(R * D))))
			st = be->ops->convert(be, part, branch);
	}
out:
	tmp_release_from(f, mark);
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
	tf_status st = host && blk ? TF_OK : nomem();
	if (st || (st = f->engram(f->engram_ctx, L, R, f->ids, f->pos, f->seq, mine, width, host, blk)) ||
	    (st = be->ops->upload(be, blocked, blk)))
		goto out;
	if (W == 1) {
		st = be->ops->upload(be, rows, host);
		goto out;
	}
	/* rank r's column c of row i is row (r * R + i) * wide + c - lo[r] of all */
	if ((st = tmp_new(f, &part, TF_DT_BF16, 2, R, width ? width : 1, 1)) ||
	    (st = be->ops->upload(be, part, host)) ||
	    (st = tmp_new(f, &all, TF_DT_BF16, 3, W, R, width ? width : 1)) ||
	    (st = tf_tp_gather(f->comm, part->data, (size_t)R * (size_t)width * 2, all->data)))
		goto out;
	if (!(at = i32s((int64_t)R * cols)))
		st = nomem();
	for (int i = 0; i < R && !st; i++)
		for (uint32_t col = 0, r = 0; col < cols; col++) {
			while (r + 1 < (uint32_t)W && col >= lo[r + 1])
				r++;
			at[(int64_t)i * cols + col] = (int32_t)(((int64_t)r * R + i) * wide + col - lo[r]);
		}
	struct tf_tensor av = reshape2(all, (int64_t)W * R * wide, hd), rv = reshape2(rows, (int64_t)R * cols, hd);
	if (!st)
		st = move(f, &av, at, &rv, NULL, (int64_t)R * cols);
out:
	tmp_release_from(f, mark);
	free(host);
	free(blk);
	free(at);
	return st;
}

static tf_status engram(struct tf_fwd *f, uint32_t L, struct tf_tensor *X)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	int R = f->R, mark = f->ntmp;
	int64_t width = (int64_t)tf_config_hash_cols(c) * c->engram_head_dim;
	int64_t S = c->hc_mult, D = c->hidden;
	struct tf_tensor *rows, *blocked, *kv;
	tf_status st;
	if (!(st = tmp_new(f, &rows, TF_DT_BF16, 2, R, width, 1)) &&
	    !(st = tmp_new(f, &blocked, TF_DT_U8, 1, R, 1, 1)) &&
	    !(st = engram_rows(f, L, rows, blocked)) &&
	    !(st = tmp_new(f, &kv, TF_DT_BF16, 2, R, (S + 1) * D, 1)) &&
	    !(st = lin(f, &lw->engram_wkv, rows, kv)))
		st = f->be->ops->engram_gate(f->be, X, kv, &lw->engram_qk, blocked, c->eps,
					     c->engram_gate_clamp, X);
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
	struct tf_tensor *part, *all;
	int32_t *at = i32s(R * S);
	tf_status st = at ? TF_OK : nomem();
	for (int i = 0; i < R && !st; i++) /* stream s of row i: row i of its owner's part */
		for (int64_t s = 0; s < S; s++)
			at[i * S + s] = (int32_t)(f->ids[i] / f->Vl * R + i);
	if (!st && !(st = tmp_new(f, &part, TF_DT_BF16, 3, R, 1, D)) &&
	    !(st = tmp_new(f, &all, TF_DT_BF16, 3, f->world, R, D)) &&
	    !(st = be->ops->embed(be, &f->w->embed, f->rank * f->Vl, ids, part)) &&
	    !(st = tf_tp_gather(f->comm, part->data, (size_t)R * (size_t)D * 2, all->data))) {
		struct tf_tensor av = reshape2(all, (int64_t)f->world * R, D), xv = reshape2(X, R * S, D);
		st = move(f, &av, at, &xv, NULL, R * S);
	}
	tmp_release_from(f, mark);
	free(at);
	return st;
}

/* §12: logits [R, V] f32 (on the backend) of the final normed rows. At
 * world > 1 each rank computes its vocabulary columns and the columns are
 * gathered (exact). */
static tf_status head(struct tf_fwd *f, const struct tf_tensor *x, struct tf_tensor *out)
{
	int R = f->R, W = f->world, mark = f->ntmp;
	if (!f->comm)
		return lin(f, &f->w->head, x, out);
	struct tf_tensor *part, *all;
	int32_t *at = i32s((int64_t)R * W);
	tf_status st = at ? TF_OK : nomem();
	for (int i = 0; i < R && !st; i++) /* column block r of row i: row i of rank r's part */
		for (int r = 0; r < W; r++)
			at[i * W + r] = r * R + i;
	if (!st && !(st = tmp_new(f, &part, TF_DT_F32, 2, R, f->Vl, 1)) &&
	    !(st = lin(f, &f->w->head, x, part)) &&
	    !(st = tmp_new(f, &all, TF_DT_F32, 3, W, R, f->Vl)) &&
	    !(st = tf_tp_gather(f->comm, part->data, (size_t)R * (size_t)f->Vl * 4, all->data))) {
		struct tf_tensor av = reshape2(all, (int64_t)W * R, f->Vl);
		struct tf_tensor ov = reshape2(out, (int64_t)R * W, f->Vl);
		st = move(f, &av, at, &ov, NULL, (int64_t)R * W);
	}
	tmp_release_from(f, mark);
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
	int32_t *at = i32s(R);
	tf_status st = at ? TF_OK : nomem();
	for (int i = 0; i < R && !st; i++)
		at[i] = (int32_t)(i * nt + t);
	struct tf_tensor tv = reshape2(f->tapt, R * nt, D);
	if (!st && !(st = tmp_new(f, &m, TF_DT_BF16, 2, R, D, 1)) &&
	    !(st = f->be->ops->stream_mean(f->be, X, m)))
		st = move(f, m, NULL, &tv, at, R);
	tmp_release_from(f, mark);
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
	    !(st = which ? moe(f, L, xin, br) : attention(f, L, xin, br)))
		st = be->ops->hc_post(be, X, br, post[which], comb[which], X);
	return st;
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
	tf_status st = ident ? TF_OK : nomem();
	for (int i = 0; i < R && !st; i++) /* the identity pre: [1, 0, 0, 0] */
		for (int64_t s = 0; s < S; s++)
			ident[i * S + s] = s == 0;
	if (st || (st = tmp_new(f, &X, TF_DT_BF16, 3, R, S, c->hidden)) ||
	    (st = tmp_host(f, &ids, TF_DT_I32, f->ids, R)) ||
	    (st = tmp_new(f, &pre_in, TF_DT_F32, 2, R, S, 1)) ||
	    (st = be->ops->upload(be, pre_in, ident)) ||
	    (st = tmp_new(f, &cl, TF_DT_BF16, 2, R, c->hidden, 1)) ||
	    (st = tmp_new(f, &xin, TF_DT_BF16, 2, R, c->hidden, 1)) ||
	    (st = tmp_new(f, &br, TF_DT_BF16, 2, R, c->hidden, 1)))
		goto out;
	for (int i = 0; i < 2; i++)
		if ((st = tmp_new(f, &pre[i], TF_DT_F32, 2, R, S, 1)) ||
		    (st = tmp_new(f, &post[i], TF_DT_F32, 2, R, S, 1)) ||
		    (st = tmp_new(f, &comb[i], TF_DT_F32, 3, R, S, S)))
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
			st = engram(f, L, X);
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
	if (!(st = be->ops->hc_collapse(be, X, pre_in, cl)) && /* §12 */
	    !(st = be->ops->rmsnorm(be, cl, f->draft ? &w->mtp_norm : &w->norm, c->eps, xin)) &&
	    !(st = head(f, xin, logits)) && f->hidden)
		st = be->ops->download(be, cl, f->hidden);
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

/* The call's backend state: positions, selections, candidate blocks, the
 * taps, and the logits [R, V] f32. */
static tf_status call_state(struct tf_fwd *f, struct tf_tensor **logits)
{
	const struct tf_config *c = f->c;
	int R = f->R;
	int32_t *p32 = i32s(R);
	tf_status st = p32 ? TF_OK : nomem();
	for (int i = 0; i < R && !st; i++)
		p32[i] = (int32_t)f->pos[i];
	if (st || (st = tmp_host(f, &f->pos32, TF_DT_I32, p32, R)) ||
	    (st = tmp_new(f, &f->sel, TF_DT_I32, 2, R, c->index_topk, 1)) ||
	    (st = tmp_new(f, &f->n_sel, TF_DT_I32, 1, R, 1, 1)) ||
	    (st = tmp_new(f, &f->cand, TF_DT_U8, 2, R, f->cand_nblk, 1)) ||
	    (f->taps && (st = tmp_new(f, &f->tapt, TF_DT_BF16, 3, R, c->n_dspark_targets, c->hidden))))
		goto out;
	st = tmp_new(f, logits, TF_DT_F32, 2, R, c->vocab, 1);
out:
	free(p32);
	return st;
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
	f->cand_nblk = (maxpos + c->candidate_block_size - 1) / c->candidate_block_size + 1;
	f->segs = calloc((size_t)R, sizeof *f->segs);
	struct tf_tensor *lg = NULL;
	tf_status st;
	if (!f->segs)
		st = nomem();
	else if (!(st = segments(f)) && (draft || !(st = reserve(f))) &&
		 !(st = call_state(f, &lg)) && !(st = run_blocks(f, lg)) &&
		 !(st = be->ops->download(be, lg, logits)) &&
		 !(taps && (st = be->ops->download(be, f->tapt, taps))) && !draft)
		for (int s = 0; s < f->nsegs && !st; s++)
			st = tf_kv_commit(f->kv, f->segs[s].seq, f->segs[s].pos0 + f->segs[s].n);
	tmp_release_from(f, 0);
	free(f->segs);
	f->segs = NULL;
	f->sel = f->n_sel = f->cand = f->pos32 = f->tapt = NULL;
	return st;
}
