/* model_load.c: a rank's weights for the CPU forward (model_impl.h), from
 * one of two sources that give the same tensors:
 * - the pack: each planned EXL3 group's part of the rank (exl3_slice.c:
 *   row splits take K-tile rows and the suh slice, column splits a run of
 *   tiles per K-tile row and the svh slice), natives' rows as the plan cuts
 *   them (attention sinks by heads, the embedding by vocabulary rows);
 * - a prepared folder (tf-prepared(5)): the same parts as tf-prepare wrote
 *   them, each image checked against the pack's key, the rank and the
 *   world when opened and each payload against its SHA-256 when read.
 * Engram tables are never loaded: rows are read on demand (model.c), from
 * the pack's tables or from the folder's shards of the rank's columns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/f16.h"
#include "base/file.h"
#include "compute/model_impl.h"
#include "compute/ops.h"
#include "model/engram_shard.h"
#include "model/names.h"
#include "model/prepare.h"
#include "model/prepared.h"

/* ---- where each planned tensor goes ---- */

/* The tf_lin a group fills, or NULL for groups the forward does not run.
 * wo_a groups go to the rank's local index. */
static struct tf_lin *group_lin(struct tf_model *m, const struct tf_group_spec *g)
{
	if (g->proj == TF_PROJ_HEAD)
		return &m->w.head;
	if (g->proj == TF_PROJ_MAIN_PROJ)
		return &m->dw.main_proj;
	if (g->layer >= tf_config_all_layers(&m->c))
		return NULL;
	struct tf_fwd_layer *l = &m->w.layers[g->layer];
	uint32_t per = m->c.o_groups / m->world;
	switch (g->proj) {
	case TF_PROJ_WQ_A: return &l->wq_a;
	case TF_PROJ_WKV: return &l->wkv;
	case TF_PROJ_WQ_B: return &l->wq_b;
	case TF_PROJ_WO_A:
		return g->index / per == m->rank && g->index % per < TF_FWD_MAX_GROUPS
			       ? &l->wo_a[g->index % per] : NULL;
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

static bool ends(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);
	return n >= k && !strcmp(name + n - k, suffix);
}

/* How the forward holds a native: as f32, or half precision as stored. */
enum hold { HOLD_NONE, HOLD_F32, HOLD_HALF, HOLD_EMBED, HOLD_QK, HOLD_TABLE };

/* Where native s goes (*t), and how it is held. */
static enum hold native_place(struct tf_model *m, const struct tf_native_spec *s,
			      struct tf_tensor **t)
{
	*t = NULL;
	if (s->layer == UINT32_MAX) {
		if (!strcmp(s->name, "embed.weight"))
			return *t = &m->w.embed, HOLD_EMBED;
		if (!strcmp(s->name, "norm.weight"))
			return *t = &m->w.norm, HOLD_F32;
		return HOLD_NONE;
	}
	if (s->layer >= tf_config_all_layers(&m->c))
		return HOLD_NONE;
	if (s->layer >= m->c.layers) { /* DSpark's own natives (names.h) */
		char b[TF_NAME_MAX];
		tf_names_block(&m->c, s->layer, b);
		const char *n = s->name + strlen(b) + 1;
		if (!strcmp(n, "main_norm.weight"))
			return *t = &m->dw.main_norm, HOLD_F32;
		if (!strcmp(n, "norm.weight"))
			return *t = &m->w.mtp_norm, HOLD_F32;
		if (!strcmp(n, "markov_head.embed.weight"))
			return *t = &m->dw.markov_embed, HOLD_HALF;
		if (!strcmp(n, "markov_head.head.weight"))
			return *t = &m->dw.markov_head, HOLD_HALF;
		if (!strcmp(n, "confidence_head.proj.weight"))
			return *t = &m->dw.confidence, HOLD_F32;
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
			return *t = (struct tf_tensor *)((char *)l + f32s[i].off), HOLD_F32;
	if (ends(s->name, ".attn.indexer.weights_proj.weight"))
		return *t = &l->ix_wp, HOLD_HALF;
	if (ends(s->name, ".ffn.gate.weight"))
		return *t = &l->gate, HOLD_HALF;
	if (ends(s->name, ".engram.table"))
		return HOLD_TABLE;
	if (ends(s->name, ".engram.q_weight") || ends(s->name, ".engram.k_weight"))
		return *t = &l->engram_qk, HOLD_QK;
	return HOLD_NONE;
}

/* Place an f32 native v of s: engram q/k multiply into qk (spec §11:
 * qk = q_weight ⊙ k_weight in fp32), the rest is v. */
static void place_f32(struct tf_tensor *t, enum hold how, const struct tf_tensor *v)
{
	if (how != HOLD_QK || !t->data) {
		*t = *v;
		return;
	}
	float *a = t->data;
	const float *b = v->data;
	for (int64_t i = 0; i < tf_tensor_numel(v); i++)
		a[i] *= b[i];
}

static struct tf_tensor shaped(void *data, enum tf_dt dt, const struct tf_plan_native *p)
{
	int64_t rows = (int64_t)(p->r1 - p->r0);
	return p->spec.ndim == 2 ? tf_tensor_make(data, dt, 2, rows, (int64_t)p->spec.shape[1])
				 : tf_tensor_make(data, dt, 1, rows);
}

static tf_status alloc_layers(struct tf_model *m)
{
	const struct tf_config *c = &m->c;
	uint32_t all = tf_config_all_layers(c); /* the DSpark blocks after the backbone */
	m->w.layers = tf_model_keep(m, all * sizeof *m->w.layers);
	m->q = calloc(m->plan.ngroups ? m->plan.ngroups : 1, sizeof *m->q);
	if (!m->w.layers || !m->q)
		return tf_err(TF_ERR_NOMEM, "model: layers");
	memset(m->w.layers, 0, all * sizeof *m->w.layers);
	for (uint32_t L = 0; L < all; L++) {
		struct tf_fwd_layer *l = &m->w.layers[L];
		size_t E = tf_config_experts_of(c, L);
		l->w1 = tf_model_keep(m, E * sizeof *l->w1);
		l->w2 = tf_model_keep(m, E * sizeof *l->w2);
		l->w3 = tf_model_keep(m, E * sizeof *l->w3);
		if (!l->w1 || !l->w2 || !l->w3)
			return tf_err(TF_ERR_NOMEM, "model: experts");
		memset(l->w1, 0, E * sizeof *l->w1);
		memset(l->w2, 0, E * sizeof *l->w2);
		memset(l->w3, 0, E * sizeof *l->w3);
	}
	return TF_OK;
}

/* ---- from the pack ---- */

static tf_status pack_bytes(struct tf_model *m, const struct tf_pack_tensor *t, uint64_t off,
			    uint64_t n, void **out)
{
	void *b = tf_model_keep(m, n);
	if (!b)
		return tf_err(TF_ERR_NOMEM, "model: %s: %llu bytes", t->t->name, (unsigned long long)n);
	*out = b;
	return tf_pack_read(&m->pack, t, off, b, n);
}

static tf_status pack_group(struct tf_model *m, const struct tf_plan_group *g,
			    struct tf_exl3_layer *L)
{
	struct tf_exl3_part p;
	tf_status st = tf_plan_exl3_part(&m->plan, g, &p);
	if (st)
		return st;
	unsigned char *tr = tf_model_keep(m, (size_t)p.run_bytes * p.nruns);
	if (!tr)
		return tf_err(TF_ERR_NOMEM, "model: %s", g->spec.name);
	for (uint32_t i = 0; i < p.nruns && !st; i++)
		st = tf_pack_read(&m->pack, g->trellis, p.off + (uint64_t)i * p.stride,
				  tr + (size_t)i * p.run_bytes, p.run_bytes);
	void *suh = NULL, *svh = NULL;
	if (st || (st = pack_bytes(m, g->suh, 2ull * p.k0, 2ull * p.g.k, &suh)) ||
	    (st = pack_bytes(m, g->svh, 2ull * p.n0, 2ull * p.g.n, &svh)))
		return st;
	L->g = p.g;
	L->trellis = (const uint16_t *)tr;
	L->suh = suh;
	L->svh = svh;
	return TF_OK;
}

/* Rows [r0, r1) of a native as the forward holds it: f32 (from F32, BF16
 * or F16), half precision kept as stored (linear takes bf16 and f16
 * exactly), or bf16 (the embedding, rounded once from f16). */
static tf_status pack_native(struct tf_model *m, const struct tf_plan_native *p)
{
	const struct tf_st_tensor *s = p->t ? p->t->t : NULL;
	struct tf_tensor *t;
	enum hold how = native_place(m, &p->spec, &t);
	if (!s || how == HOLD_NONE)
		return TF_OK; /* optional and absent, or not run */
	if (how == HOLD_TABLE) {
		int ei = tf_config_engram_index(&m->c, p->spec.layer);
		if (ei >= 0)
			m->table[ei] = p->t;
		return TF_OK;
	}
	uint64_t rows = p->spec.shape[0] ? p->spec.shape[0] : 1, row = (s->end - s->begin) / rows;
	uint64_t n = (p->r1 - p->r0) * row / (tf_dtype_bits(s->dtype) / 8);
	void *raw = NULL;
	tf_status st = pack_bytes(m, p->t, p->r0 * row, (p->r1 - p->r0) * row, &raw);
	if (st)
		return st;
	if (how == HOLD_HALF || how == HOLD_EMBED) {
		if (s->dtype != TF_DTYPE_BF16 && s->dtype != TF_DTYPE_F16)
			return tf_err(TF_ERR_FORMAT, "model: %s: want f16 or bf16", s->name);
		enum tf_dt dt = s->dtype == TF_DTYPE_BF16 ? TF_DT_BF16 : TF_DT_F16;
		if (how == HOLD_EMBED && dt == TF_DT_F16) {
			uint16_t *h = raw;
			for (uint64_t i = 0; i < n; i++)
				h[i] = tf_f32_to_bf16(tf_f16_to_f32(h[i]));
			dt = TF_DT_BF16;
		}
		*t = shaped(raw, dt, p);
		return TF_OK;
	}
	float *f = tf_model_keep(m, n * sizeof(float));
	if (!f)
		return tf_err(TF_ERR_NOMEM, "model: %s", s->name);
	for (uint64_t i = 0; i < n; i++) {
		switch (s->dtype) {
		case TF_DTYPE_F32: f[i] = ((const float *)raw)[i]; break;
		case TF_DTYPE_BF16: f[i] = tf_bf16_to_f32(((const uint16_t *)raw)[i]); break;
		case TF_DTYPE_F16: f[i] = tf_f16_to_f32(((const uint16_t *)raw)[i]); break;
		default: return tf_err(TF_ERR_FORMAT, "model: %s: not a float tensor", s->name);
		}
	}
	struct tf_tensor v = shaped(f, TF_DT_F32, p);
	place_f32(t, how, &v);
	return TF_OK;
}

tf_status tf_model_load_pack(struct tf_model *m)
{
	tf_status st = alloc_layers(m);
	for (size_t i = 0; i < m->plan.ngroups && !st; i++) {
		const struct tf_plan_group *g = &m->plan.groups[i];
		struct tf_lin *lin = group_lin(m, &g->spec);
		if (lin && !(st = pack_group(m, g, &m->q[i])))
			lin->q = &m->q[i];
	}
	for (size_t i = 0; i < m->plan.nnatives && !st; i++)
		st = pack_native(m, &m->plan.natives[i]);
	return st;
}

/* ---- from a prepared folder ---- */

struct prep {
	struct tf_model *m;
	uint8_t key[TF_PREP_KEY_LEN];
	struct tf_prep_image im;
	uint32_t layer;          /* of the open image, or TF_PREP_TOP; im open when have */
	bool have;
	/* the routed experts of the open image's projections w1, w2, w3 */
	struct experts {
		bool loaded;
		uint32_t E;
		const unsigned char *tr;  /* stack or ragged data */
		uint64_t tr_len;
		const int64_t *off;       /* ragged: byte offsets; NULL for a stack */
		const int32_t *bits;
		const uint16_t *suh, *svh;
		int32_t cb;
	} ex[3];
};

/* The image holding a tensor of block layer (UINT32_MAX: top.bin). */
static tf_status prep_image(struct prep *x, uint32_t layer)
{
	uint32_t want = layer >= TF_CONFIG_MAX_LAYERS ? TF_PREP_TOP : layer;
	if (x->have && x->layer == want)
		return TF_OK;
	if (x->have)
		tf_prep_close(&x->im);
	x->have = false;
	memset(x->ex, 0, sizeof x->ex);
	char name[32];
	tf_prep_file_name(want, name, sizeof name);
	char *path = tf_path_join(x->m->prep_dir, name);
	if (!path)
		return tf_err(TF_ERR_NOMEM, "model: out of memory");
	struct tf_prep_expect ex = {x->key, x->m->rank, x->m->world};
	tf_status st = tf_prep_open(&x->im, path, &ex);
	free(path);
	if (st)
		return st;
	x->have = true;
	x->layer = want;
	return TF_OK;
}

/* Entry name of the open image, checked to hold dt and bytes, read into a
 * kept buffer and checked against its SHA-256. */
static tf_status prep_entry(struct prep *x, const char *name, enum tf_prep_dtype dt,
			    uint64_t bytes, void **out)
{
	const struct tf_prep_entry *e = tf_prep_find(&x->im, name);
	if (!e)
		return tf_err(TF_ERR_FORMAT, "'%s': no entry '%s'", x->im.path, name);
	if (e->dtype != dt || (bytes != UINT64_MAX && e->length != bytes))
		return tf_err(TF_ERR_FORMAT, "'%s': entry '%s' is %s of %llu bytes, expected %s of %llu",
			      x->im.path, name, tf_prep_dtype_name(e->dtype),
			      (unsigned long long)e->length, tf_prep_dtype_name(dt),
			      (unsigned long long)bytes);
	void *b = tf_model_keep(x->m, e->length);
	if (!b)
		return tf_err(TF_ERR_NOMEM, "model: %s", name);
	uint8_t sum[TF_SHA256_LEN];
	tf_status st = tf_prep_read(&x->im, e, 0, b, e->length);
	if (!st && (st = tf_sha256(b, e->length, sum)))
		return st;
	if (!st && memcmp(sum, e->sha256, sizeof sum))
		return tf_err(TF_ERR_FORMAT, "'%s': entry '%s' does not match its SHA-256 (damaged)",
			      x->im.path, name);
	*out = b;
	return st;
}

static tf_status prep_entryf(struct prep *x, enum tf_prep_dtype dt, uint64_t bytes, void **out,
			     const char *prefix, const char *suffix)
{
	char name[TF_NAME_MAX + 64];
	snprintf(name, sizeof name, "%s%s", prefix, suffix);
	return prep_entry(x, name, dt, bytes, out);
}

static tf_status prep_group(struct prep *x, const struct tf_plan_group *g, struct tf_exl3_layer *L)
{
	struct tf_exl3_part p;
	void *tr = NULL, *suh = NULL, *svh = NULL, *cb = NULL;
	tf_status st;
	if ((st = tf_plan_exl3_part(&x->m->plan, g, &p)) || (st = prep_image(x, g->spec.layer)) ||
	    (st = prep_entryf(x, TF_PREP_I16, tf_exl3_trellis_bytes(&p.g), &tr, g->spec.name, ".trellis")) ||
	    (st = prep_entryf(x, TF_PREP_F16, 2ull * p.g.k, &suh, g->spec.name, ".suh")) ||
	    (st = prep_entryf(x, TF_PREP_F16, 2ull * p.g.n, &svh, g->spec.name, ".svh")) ||
	    (st = prep_entryf(x, TF_PREP_I32, 4, &cb, g->spec.name, ".cb")))
		return st;
	if (*(const int32_t *)cb != (int32_t)g->codebook)
		return tf_err(TF_ERR_FORMAT, "'%s': group '%s' has codebook %d, the pack %d", x->im.path,
			      g->spec.name, *(const int32_t *)cb, (int)g->codebook);
	L->g = p.g;
	L->trellis = tr;
	L->suh = suh;
	L->svh = svh;
	return TF_OK;
}

/* A routed projection's entries (prepare.h: a stack or ragged data). */
static tf_status prep_experts(struct prep *x, const struct tf_plan_group *g, struct experts *ex)
{
	char prefix[TF_NAME_MAX + 32], block[TF_NAME_MAX];
	int w = g->spec.proj - TF_PROJ_EXPERT_W1;
	uint32_t E = (uint32_t)tf_config_experts_of(&x->m->c, g->spec.layer);
	struct tf_exl3_part p;
	tf_status st = tf_plan_exl3_part(&x->m->plan, g, &p);
	if (st)
		return st;
	tf_names_block(&x->m->c, g->spec.layer, block);
	snprintf(prefix, sizeof prefix, "%s.ffn.experts.w%d", block, w + 1);
	void *bits = NULL, *suh = NULL, *svh = NULL, *cb = NULL, *tr = NULL, *off = NULL;
	if ((st = prep_entryf(x, TF_PREP_I32, 4ull * E, &bits, prefix, ".bits")) ||
	    (st = prep_entryf(x, TF_PREP_F16, 2ull * E * p.g.k, &suh, prefix, ".suh")) ||
	    (st = prep_entryf(x, TF_PREP_F16, 2ull * E * p.g.n, &svh, prefix, ".svh")) ||
	    (st = prep_entryf(x, TF_PREP_I32, 4, &cb, prefix, ".cb")))
		return st;
	char name[TF_NAME_MAX + 64];
	snprintf(name, sizeof name, "%s.data", prefix);
	bool ragged = tf_prep_find(&x->im, name) != NULL;
	if (ragged && ((st = prep_entryf(x, TF_PREP_I64, 8ull * E, &off, prefix, ".offsets")) ||
		       (st = prep_entryf(x, TF_PREP_I16, UINT64_MAX, &tr, prefix, ".data"))))
		return st;
	if (!ragged && (st = prep_entryf(x, TF_PREP_I16, UINT64_MAX, &tr, prefix, ".trellis")))
		return st;
	snprintf(name, sizeof name, "%s%s", prefix, ragged ? ".data" : ".trellis");
	*ex = (struct experts){.loaded = true, .E = E, .tr = tr,
			       .tr_len = tf_prep_find(&x->im, name)->length, .off = off,
			       .bits = bits, .suh = suh, .svh = svh, .cb = *(const int32_t *)cb};
	return TF_OK;
}

static tf_status prep_expert(struct prep *x, const struct tf_plan_group *g, struct tf_exl3_layer *L)
{
	struct experts *ex = &x->ex[g->spec.proj - TF_PROJ_EXPERT_W1];
	struct tf_exl3_part p;
	tf_status st;
	if ((st = tf_plan_exl3_part(&x->m->plan, g, &p)) || (st = prep_image(x, g->spec.layer)) ||
	    (!ex->loaded && (st = prep_experts(x, g, ex))))
		return st;
	uint32_t e = g->spec.index;
	uint64_t len = tf_exl3_trellis_bytes(&p.g);
	uint64_t at = ex->off ? (uint64_t)ex->off[e] : e * len;
	if (e >= ex->E || (uint32_t)ex->bits[e] != g->bits || ex->cb != (int32_t)g->codebook ||
	    at % 16 || at > ex->tr_len || len > ex->tr_len - at)
		return tf_err(TF_ERR_FORMAT, "'%s': expert %u of '%s' does not match the pack's plan "
			      "(bits %d, codebook %d, at byte %llu)", x->im.path, e, g->spec.name,
			      e < ex->E ? ex->bits[e] : -1, ex->cb, (unsigned long long)at);
	L->g = p.g;
	L->trellis = (const uint16_t *)(ex->tr + at);
	L->suh = ex->suh + (size_t)e * p.g.k;
	L->svh = ex->svh + (size_t)e * p.g.n;
	return TF_OK;
}

static tf_status prep_native(struct prep *x, const struct tf_plan_native *p)
{
	struct tf_tensor *t;
	enum hold how = native_place(x->m, &p->spec, &t);
	if (!p->t || how == HOLD_NONE || how == HOLD_TABLE)
		return TF_OK; /* absent, not run, or Engram (shards, below) */
	uint64_t n = (p->r1 - p->r0) * (p->spec.ndim == 2 ? p->spec.shape[1] : 1);
	bool half = p->spec.store == TF_STORE_HALF;
	void *b = NULL;
	tf_status st;
	if ((st = prep_image(x, p->spec.layer)) ||
	    (st = prep_entry(x, p->spec.name, half ? TF_PREP_BF16 : TF_PREP_F32, n * (half ? 2 : 4), &b)))
		return st;
	if ((how == HOLD_HALF || how == HOLD_EMBED) != half)
		return tf_err(TF_ERR_INTERNAL, "model: %s: stored as %s", p->spec.name, half ? "bf16" : "f32");
	struct tf_tensor v = shaped(b, half ? TF_DT_BF16 : TF_DT_F32, p);
	if (half)
		*t = v;
	else
		place_f32(t, how, &v);
	return TF_OK;
}

/* The rank's Engram shard of each Engram layer, checked against the rows
 * of the rank's columns. */
static tf_status prep_engram(struct tf_model *m)
{
	for (uint32_t ei = 0; ei < m->c.n_engram; ei++) {
		struct tf_engram_expect ex = {.layer = m->c.engram_layers[ei]};
		char name[64];
		tf_status st = tf_prepare_engram_range(&m->c, ei, m->rank, m->world, &ex.lo, &ex.hi,
						       &ex.total);
		if (st)
			return st;
		tf_engram_shard_name(name, sizeof name, m->c.engram_layers[ei], m->rank, m->world);
		char *path = tf_path_join(m->prep_dir, name);
		if (!path)
			return tf_err(TF_ERR_NOMEM, "model: out of memory");
		if (!(st = tf_prepare_engram_check(path, &ex, NULL)))
			st = tf_engram_shard_open(path, &m->shard[ei]);
		free(path);
		if (st)
			return st;
	}
	return TF_OK;
}

tf_status tf_model_load_prepared(struct tf_model *m)
{
	struct prep x = {.m = m};
	tf_status st;
	if ((st = tf_prepare_key(&m->pack, m->rank, m->world, "", x.key)) || (st = alloc_layers(m)))
		return st;
	for (size_t i = 0; i < m->plan.ngroups && !st; i++) {
		const struct tf_plan_group *g = &m->plan.groups[i];
		struct tf_lin *lin = group_lin(m, &g->spec);
		if (!lin)
			continue;
		bool expert = g->spec.proj >= TF_PROJ_EXPERT_W1 && g->spec.proj <= TF_PROJ_EXPERT_W3;
		if (!(st = expert ? prep_expert(&x, g, &m->q[i]) : prep_group(&x, g, &m->q[i])))
			lin->q = &m->q[i];
	}
	for (size_t i = 0; i < m->plan.nnatives && !st; i++)
		st = prep_native(&x, &m->plan.natives[i]);
	if (x.have)
		tf_prep_close(&x.im);
	return st ? st : prep_engram(m);
}
