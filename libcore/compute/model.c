/* model.c: a pack loaded for the forward on the CPU backend (model.h). */
#include "compute/model.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/f16.h"
#include "compute/dspark.h"
#include "compute/forward.h"
#include "compute/ops.h"
#include "model/engram_hash.h"
#include "model/engram_map.h"
#include "model/exl3.h"
#include "model/names.h"
#include "model/plan.h"
#include "pack/pack.h"
#include "text/tokenizer.h"

struct hist {
	uint32_t *ids; /* token at each position */
	int64_t cap;
};

struct tf_model {
	struct tf_config c;
	struct tf_pack pack;
	bool pack_open;
	struct tf_plan plan;
	bool plan_built;
	struct tf_be *be;
	struct tf_kv *kv;
	struct tf_fwd *fwd;
	struct tf_fwd_weights w;
	struct tf_dspark_weights dw; /* DSpark (spec §13) */
	struct tf_dspark *dspark;    /* NULL: the pack has no DSpark blocks */
	uint16_t *taps;              /* [taps_rows, targets, D] */
	int taps_rows;
	struct tf_exl3_layer *q;   /* [plan.ngroups] */
	void **mem;                /* every buffer the weights use */
	size_t nmem, capmem;
	/* Engram */
	struct tf_engram_layout lay;
	struct tf_engram_host host;
	bool host_init;
	struct tf_engram_hasher hasher;
	const struct tf_pack_tensor *table[TF_CONFIG_MAX_ENGRAM];
	struct hist *hist;         /* [slots] */
	int slots;
};

static void *keep(struct tf_model *m, size_t bytes)
{
	if (m->nmem == m->capmem) {
		size_t cap = m->capmem ? 2 * m->capmem : 256;
		void **p = realloc(m->mem, cap * sizeof *p);
		if (!p)
			return NULL;
		m->mem = p;
		m->capmem = cap;
	}
	void *b = malloc(bytes ? bytes : 1);
	if (b)
		m->mem[m->nmem++] = b;
	return b;
}

static uint64_t tensor_bytes(const struct tf_pack_tensor *t)
{
	return t->t->end - t->t->begin;
}

/* A whole pack tensor into a new buffer. */
static tf_status read_whole(struct tf_model *m, const struct tf_pack_tensor *t, void **out)
{
	uint64_t n = tensor_bytes(t);
	void *b = keep(m, n);
	if (!b)
		return tf_err(TF_ERR_NOMEM, "model: %s: %llu bytes", t->t->name, (unsigned long long)n);
	*out = b;
	return tf_pack_read(&m->pack, t, 0, b, n);
}

static uint64_t numel(const struct tf_pack_tensor *t)
{
	uint64_t n = 1;
	for (int i = 0; i < t->t->ndim; i++)
		n *= t->t->shape[i];
	return n;
}

/* A native as f32 (F32, BF16 or F16 in the pack), shaped [a] or [a, b]. */
static tf_status load_f32(struct tf_model *m, const struct tf_pack_tensor *t, struct tf_tensor *out)
{
	void *raw;
	tf_status st = read_whole(m, t, &raw);
	if (st)
		return st;
	uint64_t n = numel(t);
	float *f = keep(m, n * sizeof(float));
	if (!f)
		return tf_err(TF_ERR_NOMEM, "model: %s", t->t->name);
	for (uint64_t i = 0; i < n; i++) {
		switch (t->t->dtype) {
		case TF_DTYPE_F32: f[i] = ((const float *)raw)[i]; break;
		case TF_DTYPE_BF16: f[i] = tf_bf16_to_f32(((const uint16_t *)raw)[i]); break;
		case TF_DTYPE_F16: f[i] = tf_f16_to_f32(((const uint16_t *)raw)[i]); break;
		default:
			return tf_err(TF_ERR_FORMAT, "model: %s: not a float tensor", t->t->name);
		}
	}
	*out = t->t->ndim == 2 ? tf_tensor_make(f, TF_DT_F32, 2, (int64_t)t->t->shape[0],
						(int64_t)t->t->shape[1])
			       : tf_tensor_make(f, TF_DT_F32, 1, (int64_t)n);
	return TF_OK;
}

/* A half-precision native kept as stored (bf16 or f16; linear takes both
 * exactly), or rounded to bf16 when want_bf16 (the embedding). */
static tf_status load_half(struct tf_model *m, const struct tf_pack_tensor *t, bool want_bf16,
			   struct tf_tensor *out)
{
	void *raw;
	tf_status st = read_whole(m, t, &raw);
	if (st)
		return st;
	enum tf_dt dt;
	if (t->t->dtype == TF_DTYPE_BF16) {
		dt = TF_DT_BF16;
	} else if (t->t->dtype == TF_DTYPE_F16) {
		dt = TF_DT_F16;
		if (want_bf16) {
			uint16_t *h = raw;
			for (uint64_t i = 0; i < numel(t); i++)
				h[i] = tf_f32_to_bf16(tf_f16_to_f32(h[i]));
			dt = TF_DT_BF16;
		}
	} else {
		return tf_err(TF_ERR_FORMAT, "model: %s: want f16 or bf16", t->t->name);
	}
	*out = tf_tensor_make(raw, dt, 2, (int64_t)t->t->shape[0],
			      t->t->ndim == 2 ? (int64_t)t->t->shape[1] : (int64_t)1);
	return TF_OK;
}

/* The tf_lin a group fills, or NULL for groups the forward does not run. */
static struct tf_lin *group_lin(struct tf_model *m, const struct tf_group_spec *g)
{
	if (g->proj == TF_PROJ_HEAD)
		return &m->w.head;
	if (g->proj == TF_PROJ_MAIN_PROJ)
		return &m->dw.main_proj;
	if (g->layer >= tf_config_all_layers(&m->c))
		return NULL;
	struct tf_fwd_layer *l = &m->w.layers[g->layer];
	switch (g->proj) {
	case TF_PROJ_WQ_A: return &l->wq_a;
	case TF_PROJ_WKV: return &l->wkv;
	case TF_PROJ_WQ_B: return &l->wq_b;
	case TF_PROJ_WO_A: return g->index < TF_FWD_MAX_GROUPS ? &l->wo_a[g->index] : NULL;
	case TF_PROJ_WO_B: return &l->wo_b;
	case TF_PROJ_COMP_WKV: return &l->comp_wkv;
	case TF_PROJ_COMP_WGATE: return &l->comp_wgate;
	case TF_PROJ_IX_WQ_B: return &l->ix_wq_b;
	case TF_PROJ_IX_WK: return &l->ix_wk;
	case TF_PROJ_SHARED_W1: return &l->sh_w1;
	case TF_PROJ_SHARED_W2: return &l->sh_w2;
	case TF_PROJ_SHARED_W3: return &l->sh_w3;
	case TF_PROJ_ENGRAM_WKV: return &l->engram_wkv;
	case TF_PROJ_EXPERT_W1: return &l->w1[g->index];
	case TF_PROJ_EXPERT_W2: return &l->w2[g->index];
	case TF_PROJ_EXPERT_W3: return &l->w3[g->index];
	default: return NULL;
	}
}

static tf_status load_groups(struct tf_model *m)
{
	m->q = calloc(m->plan.ngroups ? m->plan.ngroups : 1, sizeof *m->q);
	if (!m->q)
		return tf_err(TF_ERR_NOMEM, "model: groups");
	for (size_t i = 0; i < m->plan.ngroups; i++) {
		const struct tf_plan_group *g = &m->plan.groups[i];
		struct tf_lin *lin = group_lin(m, &g->spec);
		if (!lin)
			continue;
		struct tf_exl3_layer *L = &m->q[i];
		void *tr, *suh, *svh;
		tf_status st;
		if ((st = read_whole(m, g->trellis, &tr)) || (st = read_whole(m, g->suh, &suh)) ||
		    (st = read_whole(m, g->svh, &svh)))
			return st;
		L->g = (struct tf_exl3_geom){
			.k = g->spec.k, .n = g->spec.n, .bits = g->bits,
			.cb = g->codebook == TF_CODEBOOK_MCG	? TF_EXL3_CB_MCG
			      : g->codebook == TF_CODEBOOK_MUL1 ? TF_EXL3_CB_MUL1
								: TF_EXL3_CB_3INST};
		if ((st = tf_exl3_geom_check(&L->g)))
			return st;
		L->trellis = tr;
		L->suh = suh;
		L->svh = svh;
		lin->q = L;
	}
	return TF_OK;
}

static bool ends(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);
	return n >= k && !strcmp(name + n - k, suffix);
}

static tf_status load_native(struct tf_model *m, const struct tf_plan_native *p)
{
	const struct tf_native_spec *s = &p->spec;
	const struct tf_pack_tensor *t = p->t;
	if (!t)
		return TF_OK; /* optional and absent */
	if (s->layer == UINT32_MAX) {
		if (!strcmp(s->name, "embed.weight"))
			return load_half(m, t, true, &m->w.embed);
		if (!strcmp(s->name, "norm.weight"))
			return load_f32(m, t, &m->w.norm);
		return TF_OK;
	}
	if (s->layer >= tf_config_all_layers(&m->c))
		return TF_OK;
	if (s->layer >= m->c.layers) { /* DSpark's own natives (names.h) */
		char b[TF_NAME_MAX];
		tf_names_block(&m->c, s->layer, b);
		const char *n = s->name + strlen(b) + 1;
		if (!strcmp(n, "main_norm.weight"))
			return load_f32(m, t, &m->dw.main_norm);
		if (!strcmp(n, "norm.weight"))
			return load_f32(m, t, &m->w.mtp_norm);
		if (!strcmp(n, "markov_head.embed.weight"))
			return load_half(m, t, false, &m->dw.markov_embed);
		if (!strcmp(n, "markov_head.head.weight"))
			return load_half(m, t, false, &m->dw.markov_head);
		if (!strcmp(n, "confidence_head.proj.weight"))
			return load_f32(m, t, &m->dw.confidence);
	}
	struct tf_fwd_layer *l = &m->w.layers[s->layer];
	static const struct {
		const char *suffix;
		size_t off;
	} f32s[] = {
		{".attn_norm.weight", offsetof(struct tf_fwd_layer, attn_norm)},
		{".ffn_norm.weight", offsetof(struct tf_fwd_layer, ffn_norm)},
		{".attn.q_norm.weight", offsetof(struct tf_fwd_layer, q_norm)},
		{".attn.kv_norm.weight", offsetof(struct tf_fwd_layer, kv_norm)},
		{".hc_attn_fn", offsetof(struct tf_fwd_layer, hc_fn[0])},
		{".hc_ffn_fn", offsetof(struct tf_fwd_layer, hc_fn[1])},
		{".hc_attn_base", offsetof(struct tf_fwd_layer, hc_base[0])},
		{".hc_ffn_base", offsetof(struct tf_fwd_layer, hc_base[1])},
		{".hc_attn_scale", offsetof(struct tf_fwd_layer, hc_scale[0])},
		{".hc_ffn_scale", offsetof(struct tf_fwd_layer, hc_scale[1])},
		{".attn.attn_sink", offsetof(struct tf_fwd_layer, sink)},
		{".attn.compressor.norm.weight", offsetof(struct tf_fwd_layer, comp_norm)},
		{".attn.indexer.k_norm.weight", offsetof(struct tf_fwd_layer, ix_k_norm)},
		{".ffn.gate.bias", offsetof(struct tf_fwd_layer, gate_bias)},
	};
	for (size_t i = 0; i < sizeof f32s / sizeof f32s[0]; i++)
		if (ends(s->name, f32s[i].suffix))
			return load_f32(m, t, (struct tf_tensor *)((char *)l + f32s[i].off));
	if (ends(s->name, ".attn.indexer.weights_proj.weight"))
		return load_half(m, t, false, &l->ix_wp);
	if (ends(s->name, ".ffn.gate.weight"))
		return load_half(m, t, false, &l->gate);
	if (ends(s->name, ".engram.table")) {
		int ei = tf_config_engram_index(&m->c, s->layer);
		if (ei >= 0)
			m->table[ei] = t;
		return TF_OK;
	}
	if (ends(s->name, ".engram.q_weight") || ends(s->name, ".engram.k_weight")) {
		struct tf_tensor v;
		tf_status st = load_f32(m, t, &v);
		if (st)
			return st;
		if (!l->engram_qk.data) {
			l->engram_qk = v;
			return TF_OK;
		}
		/* qk = q_weight ⊙ k_weight in fp32 (spec §11) */
		float *a = l->engram_qk.data;
		const float *b = v.data;
		for (int64_t i = 0; i < tf_tensor_numel(&v); i++)
			a[i] *= b[i];
		return TF_OK;
	}
	return tf_err(TF_ERR_INTERNAL, "model: %s: no place in the forward", s->name);
}

/* ---- Engram rows ---- */

static tf_status engram_init(struct tf_model *m)
{
	tf_status st;
	struct tf_tok *tok = NULL;
	uint32_t *map = NULL, vocab = 0, compressed = 0;
	if ((st = tf_engram_layout_init(&m->lay, &m->c)) ||
	    (st = tf_tok_load(m->pack.tokenizer_path, &tok)) ||
	    (st = tf_engram_map_build(tok, &map, &vocab, &compressed)))
		goto out;
	st = tf_engram_host_init(&m->host, &m->c, map, vocab, compressed);
	map = NULL; /* the host owns it now, also on failure */
	if (st)
		goto out;
	m->host_init = true;
	if ((st = tf_engram_hasher_init(&m->hasher, &m->lay, &m->host, m->c.engram_pad)))
		goto out;
	for (uint32_t i = 0; i < m->c.n_engram; i++)
		if (!m->table[i]) {
			st = tf_err(TF_ERR_FORMAT, "model: Engram layer %u has no table", i);
			goto out;
		}
out:
	free(map);
	tf_tok_free(tok);
	return st;
}

static tf_status hist_put(struct tf_model *m, int seq, int64_t pos, int32_t id)
{
	if (seq < 0 || seq >= m->slots || pos < 0)
		return tf_err(TF_ERR_ARG, "model: sequence %d position %lld", seq, (long long)pos);
	struct hist *h = &m->hist[seq];
	if (pos >= h->cap) {
		int64_t cap = h->cap ? h->cap : 256;
		while (cap <= pos)
			cap *= 2;
		uint32_t *p = realloc(h->ids, (size_t)cap * sizeof *p);
		if (!p)
			return tf_err(TF_ERR_NOMEM, "model: token history");
		h->ids = p;
		h->cap = cap;
	}
	h->ids[pos] = (uint32_t)id;
	return TF_OK;
}

static tf_status engram_rows(void *ctx, uint32_t layer, int R, const int32_t *ids,
			     const int64_t *pos, const int *seq, struct tf_tensor *rows,
			     uint8_t *blocked)
{
	struct tf_model *m = ctx;
	const struct tf_config *c = &m->c;
	int li = tf_config_engram_index(c, layer);
	uint32_t cols = m->hasher.cols, L = m->hasher.nlayers, hd = c->engram_head_dim;
	if (li < 0 || hd > TF_ENGRAM_ROW_VALUES || tf_tensor_cols(rows) != (int64_t)cols * hd)
		return tf_err(TF_ERR_INTERNAL, "model: Engram rows for layer %u", layer);
	int64_t r64[TF_ENGRAM_MAX_LAYERS * TF_ENGRAM_MAX_COLS];
	uint8_t raw[TF_ENGRAM_ROW_BYTES];
	uint16_t vals[TF_ENGRAM_ROW_VALUES];
	uint16_t *out = rows->data;
	for (int r = 0; r < R; r++) {
		const struct hist *h = &m->hist[seq[r]];
		int64_t nb = pos[r] < (int64_t)m->hasher.max_ngram - 1 ? pos[r]
								     : (int64_t)m->hasher.max_ngram - 1;
		uint32_t id = (uint32_t)ids[r];
		tf_engram_hash(&m->hasher, &id, 1, h->ids + pos[r] - nb, (size_t)nb, 0, cols, r64);
		blocked[r] = id >= m->hasher.vocab;
		for (uint32_t col = 0; col < cols; col++) {
			int64_t row = r64[(uint32_t)li * cols + col];
			const struct tf_pack_tensor *t = m->table[li];
			if (row < 0 || (uint64_t)row >= t->t->shape[0])
				return tf_err(TF_ERR_INTERNAL, "model: Engram row %lld of %llu",
					      (long long)row, (unsigned long long)t->t->shape[0]);
			tf_status st = tf_pack_read(&m->pack, t, (uint64_t)row * TF_ENGRAM_ROW_BYTES,
						    raw, sizeof raw);
			if (st)
				return st;
			tf_engram_rows_decode(raw, 1, vals);
			memcpy(out + ((int64_t)r * cols + col) * hd, vals, hd * sizeof *vals);
		}
	}
	(void)L;
	return TF_OK;
}

/* ---- open, run, free ---- */

tf_status tf_model_open(const char *pack_dir, const struct tf_model_opts *opts,
			struct tf_model **out)
{
	*out = NULL;
	struct tf_model_opts o = opts ? *opts : (struct tf_model_opts){0};
	if (!o.slots)
		o.slots = 8;
	if (!o.max_positions)
		o.max_positions = 4096;
	if (!o.pages)
		o.pages = (int64_t)o.slots * ((o.max_positions + 255) / 256 + 1);
	struct tf_model *m = calloc(1, sizeof *m);
	if (!m)
		return tf_err(TF_ERR_NOMEM, "model: out of memory");
	tf_status st;
	if ((st = tf_pack_open(&m->pack, pack_dir)))
		goto fail;
	m->pack_open = true;
	if ((st = tf_config_from_json(&m->c, m->pack.config, "config.json")) ||
	    (st = tf_config_validate(&m->c)))
		goto fail;
	if ((st = tf_plan_build(&m->plan, &m->c, &m->pack, 0, 1)))
		goto fail;
	m->plan_built = true;
	const struct tf_config *c = &m->c;
	uint32_t all = tf_config_all_layers(c); /* the DSpark blocks after the backbone */
	m->w.layers = keep(m, all * sizeof *m->w.layers);
	if (!m->w.layers) {
		st = tf_err(TF_ERR_NOMEM, "model: layers");
		goto fail;
	}
	memset(m->w.layers, 0, all * sizeof *m->w.layers);
	for (uint32_t L = 0; L < all; L++) {
		struct tf_fwd_layer *l = &m->w.layers[L];
		size_t E = tf_config_experts_of(c, L);
		l->w1 = keep(m, E * sizeof *l->w1);
		l->w2 = keep(m, E * sizeof *l->w2);
		l->w3 = keep(m, E * sizeof *l->w3);
		if (!l->w1 || !l->w2 || !l->w3) {
			st = tf_err(TF_ERR_NOMEM, "model: experts");
			goto fail;
		}
		memset(l->w1, 0, E * sizeof *l->w1);
		memset(l->w2, 0, E * sizeof *l->w2);
		memset(l->w3, 0, E * sizeof *l->w3);
	}
	if ((st = load_groups(m)))
		goto fail;
	for (size_t i = 0; i < m->plan.nnatives; i++)
		if ((st = load_native(m, &m->plan.natives[i])))
			goto fail;
	if (c->n_engram && (st = engram_init(m)))
		goto fail;
	m->slots = o.slots;
	m->hist = calloc((size_t)o.slots, sizeof *m->hist);
	if (!m->hist) {
		st = tf_err(TF_ERR_NOMEM, "model: history");
		goto fail;
	}
	struct tf_kv_config kc;
	tf_fwd_kv_config(c, o.pages, o.slots, o.max_positions, &kc);
	kc.window_fmt = o.window_fmt;
	kc.pool_fmt = o.pool_fmt;
	kc.index_fmt = o.index_fmt;
	if ((st = tf_cpu_be_new(o.threads, &m->be)) || (st = tf_kv_new(&kc, &m->kv)) ||
	    (st = tf_fwd_new(m->be, c, &m->w, m->kv, c->n_engram ? engram_rows : NULL, m, &m->fwd)))
		goto fail;
	if (c->mtp_layers &&
	    (st = tf_dspark_new(m->be, c, &m->w, &m->dw, m->kv, m->fwd, &m->dspark)))
		goto fail;
	*out = m;
	return TF_OK;
fail:
	tf_model_free(m);
	return st;
}

void tf_model_free(struct tf_model *m)
{
	if (!m)
		return;
	tf_dspark_free(m->dspark);
	free(m->taps);
	tf_fwd_free(m->fwd);
	tf_kv_free(m->kv);
	tf_be_free(m->be);
	if (m->hist)
		for (int i = 0; i < m->slots; i++)
			free(m->hist[i].ids);
	free(m->hist);
	if (m->host_init)
		tf_engram_host_release(&m->host);
	if (m->plan_built)
		tf_plan_release(&m->plan);
	if (m->pack_open)
		tf_pack_close(&m->pack);
	for (size_t i = 0; i < m->nmem; i++)
		free(m->mem[i]);
	free(m->mem);
	free(m->q);
	free(m);
}

const struct tf_config *tf_model_config(const struct tf_model *m)
{
	return &m->c;
}

tf_status tf_model_seq_new(struct tf_model *m, int *seq)
{
	return tf_kv_open(m->kv, seq);
}

tf_status tf_model_seq_fork(struct tf_model *m, int src, int *dst)
{
	tf_status st = tf_kv_fork(m->kv, src, dst);
	if (st)
		return st;
	int64_t n = tf_kv_len(m->kv, src);
	for (int64_t p = n - 1; p >= 0 && !st; p--) /* the highest first: one allocation */
		st = hist_put(m, *dst, p, (int32_t)m->hist[src].ids[p]);
	if (st) {
		tf_kv_close(m->kv, *dst);
		*dst = -1;
	}
	return st;
}

tf_status tf_model_seq_rollback(struct tf_model *m, int seq, int64_t pos)
{
	return tf_kv_rollback(m->kv, seq, pos);
}

int64_t tf_model_seq_len(const struct tf_model *m, int seq)
{
	return tf_kv_len(m->kv, seq);
}

void tf_model_seq_free(struct tf_model *m, int seq)
{
	tf_kv_close(m->kv, seq);
}

tf_status tf_model_forward(struct tf_model *m, int R, const int32_t *ids, const int64_t *pos,
			   const int *seq, float *logits)
{
	for (int r = 0; r < R; r++) {
		if (ids[r] < 0 || (uint32_t)ids[r] >= m->c.vocab)
			return tf_err(TF_ERR_ARG, "model: token id %d of %u", ids[r], m->c.vocab);
		tf_status st = hist_put(m, seq[r], pos[r], ids[r]);
		if (st)
			return st;
	}
	if (!m->dspark)
		return tf_fwd_run(m->fwd, R, ids, pos, seq, logits);
	/* with DSpark: the taps give the blocks' context rows of these positions */
	if (R > m->taps_rows) {
		uint16_t *t = tf_alloc_array((size_t)R * m->c.n_dspark_targets * m->c.hidden,
					     sizeof *t);
		if (!t)
			return tf_err(TF_ERR_NOMEM, "model: taps of %d rows", R);
		free(m->taps);
		m->taps = t;
		m->taps_rows = R;
	}
	tf_status st = tf_fwd_run_taps(m->fwd, R, ids, pos, seq, logits, m->taps);
	return st ? st : tf_dspark_context(m->dspark, R, m->taps, pos, seq);
}

int tf_model_draft_block(const struct tf_model *m)
{
	return m->dspark ? tf_dspark_block(m->dspark) : 0;
}

tf_status tf_model_draft(struct tf_model *m, int n, const int *seq, const int32_t *anchor,
			 const struct tf_sample_params *params, int32_t *draft, float *confidence)
{
	if (!m->dspark)
		return tf_err(TF_ERR_UNSUPPORTED, "model: the pack has no DSpark blocks");
	return tf_dspark_draft(m->dspark, n, seq, anchor, params, draft, confidence);
}
