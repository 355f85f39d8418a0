/* model_load.c: a rank's weights for the forward on its backend
 * (model_impl.h), from one of the sources that give the same tensors:
 * - the pack: each planned EXL3 group's part of the rank (exl3_slice.c:
 *   row splits take K-tile rows and the suh slice, column splits a run of
 *   tiles per K-tile row and the svh slice), natives' rows as the plan cuts
 *   them (attention sinks by heads, the embedding by vocabulary rows);
 * - a prepared folder (tf-prepared(5)): the same parts as tf-prepare wrote
 *   them, each image checked against the pack's key, the rank and the
 *   world when opened and each payload against its SHA-256 when read.
 * - synthetic (opts.synthetic): the pack's layout, with the data that
 *   tf-pack-synth writes generated instead of read, except the trellises,
 *   which are random bits drawn on the backend (fill_random).
 * Engram tables are never loaded: rows are read on demand (model.c), from
 * the pack's tables or from the folder's shards of the rank's columns.
 *
 * Where the bytes go: on the CPU each tensor is read into a buffer the
 * model keeps, which is the weight. On a device each is read into one of
 * two reused host buffers (hold) and uploaded into a device buffer
 * (m->dev) through the backend's staging, so host memory stays at the
 * largest tensor, not the model. A projection's routed experts lie as one
 * image (tf_exl3_experts_layout: trellises back to back, suh [E][K], svh
 * [E][N]), as the device's experts op takes them, on either backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/digest.h"
#include "base/f16.h"
#include "base/file.h"
#include "base/hmap.h"
#include "base/progress.h"
#include "compute/model_impl.h"
#include "compute/ops.h"
#include "model/engram_shard.h"
#include "model/names.h"
#include "model/prepare.h"
#include "model/prepared.h"
#include "model/synth.h"

/* ---- where the bytes go ---- */

/* A host buffer of n bytes for data on its way to the backend: on the CPU
 * a kept one (it becomes the weight), on a device reused buffer `slot`
 * (0 or 1), valid until that slot's next hold. Slot -1: always kept. */
static void *hold(struct tf_model *m, int slot, size_t n)
{
	if (!m->device || slot < 0)
		return tf_model_keep(m, n);
	if (n > m->hold_cap[slot]) {
		free(m->hold[slot]);
		m->hold_cap[slot] = 0;
		if (!(m->hold[slot] = malloc(n)))
			return NULL;
		m->hold_cap[slot] = n;
	}
	return m->hold[slot];
}

/* n bytes of the backend's memory, kept until tf_model_free, counted in
 * *count: a kept host buffer on the CPU, a device buffer on a device. */
static tf_status be_buf(struct tf_model *m, size_t n, uint64_t *count, void **out)
{
	*out = NULL;
	*count += n;
	if (m->progress)
		tf_progress_add(m->progress, n);
	if (!m->device) {
		*out = tf_model_keep(m, n);
		return *out ? TF_OK : tf_err(TF_ERR_NOMEM, "model: %zu bytes of weights", n);
	}
	if (m->ndev == m->capdev) {
		size_t cap = m->capdev ? 2 * m->capdev : 1024;
		struct tf_tensor *d = realloc(m->dev, cap * sizeof *d);
		if (!d)
			return tf_err(TF_ERR_NOMEM, "model: out of memory");
		m->dev = d;
		m->capdev = cap;
	}
	struct tf_tensor t = tf_tensor_make(NULL, TF_DT_U8, 1, (int64_t)(n ? n : 1));
	tf_status st = m->be->ops->alloc(m->be, &t);
	if (st)
		return tf_err_wrap(st, "model: %zu bytes of weights: ", n);
	m->dev[m->ndev++] = t;
	*out = t.data;
	return TF_OK;
}

/* n bytes at host (a hold buffer) into dst, the backend's memory: an
 * upload on a device, nothing on the CPU (where they are one buffer). */
static tf_status put(struct tf_model *m, void *dst, const void *host, size_t n)
{
	if (!m->device || !n)
		return TF_OK;
	struct tf_tensor t = tf_tensor_make(dst, TF_DT_U8, 1, (int64_t)n);
	return m->be->ops->upload(m->be, &t, host);
}

/* The weight held at host (n bytes from hold) in the backend's memory. */
static tf_status place(struct tf_model *m, void *host, size_t n, uint64_t *count, void **out)
{
	if (!m->device) {
		*count += n;
		if (m->progress)
			tf_progress_add(m->progress, n);
		*out = host;
		return TF_OK;
	}
	tf_status st = be_buf(m, n, count, out);
	return st ? st : put(m, *out, host, n);
}

/* n bytes of pack tensor t from byte off: read, or generated (synthetic). */
static tf_status src_read(struct tf_model *m, const struct tf_pack_tensor *t, uint64_t off,
			  void *buf, uint64_t n)
{
	return m->synth ? tf_synth_src_read(m->synth, t->t->name, off, buf, n)
			: tf_pack_read(&m->pack, t, off, buf, n);
}

/* n bytes of t from off into dst, the backend's memory. */
static tf_status src_to(struct tf_model *m, const struct tf_pack_tensor *t, uint64_t off,
			uint64_t n, void *dst)
{
	void *b = m->device ? hold(m, 0, n) : dst;
	if (!b)
		return tf_err(TF_ERR_NOMEM, "model: %s: %llu bytes", t->t->name, (unsigned long long)n);
	tf_status st = src_read(m, t, off, b, n);
	return st ? st : put(m, dst, b, n);
}

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
	if (m->w.layers)
		return TF_OK; /* made already (tf_model_plan_bytes) */
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

/* ---- from the pack (or its synthetic data) ---- */

/* A projection's routed experts as one image in the backend's memory
 * (tf_exl3_experts_layout), made when its first expert is loaded. */
struct image {
	bool made;
	unsigned char *tr;
	uint16_t *suh, *svh;
	uint64_t *off;  /* [E] trellis starts */
	uint64_t k, n;
};

/* The trellis of g's part p into dst (the backend's memory): read run by
 * run, or random bits of the group's name (synthetic). */
static tf_status group_trellis(struct tf_model *m, const struct tf_plan_group *g,
			       const struct tf_exl3_part *p, void *dst)
{
	size_t n = (size_t)p->run_bytes * p->nruns;
	if (m->synth) {
		struct tf_tensor t = tf_tensor_make(dst, TF_DT_U8, 1, (int64_t)n);
		uint64_t seed = tf_hash_u64(m->synth_seed ^ tf_hash_bytes(g->spec.name, strlen(g->spec.name)));
		return n ? m->be->ops->fill_random(m->be, &t, seed) : TF_OK;
	}
	unsigned char *tr = m->device ? hold(m, 0, n) : dst;
	if (!tr)
		return tf_err(TF_ERR_NOMEM, "model: %s", g->spec.name);
	tf_status st = TF_OK;
	for (uint32_t i = 0; i < p->nruns && !st; i++)
		st = src_read(m, g->trellis, p->off + (uint64_t)i * p->stride,
			      tr + (size_t)i * p->run_bytes, p->run_bytes);
	return st ? st : put(m, dst, tr, n);
}

static tf_status pack_group(struct tf_model *m, const struct tf_plan_group *g,
			    struct tf_exl3_layer *L)
{
	struct tf_exl3_part p;
	void *tr, *suh, *svh;
	tf_status st;
	if ((st = tf_plan_exl3_part(&m->plan, g, &p)) ||
	    (st = be_buf(m, tf_exl3_trellis_bytes(&p.g), &m->bytes.exl3, &tr)) ||
	    (st = be_buf(m, 2ull * p.g.k, &m->bytes.exl3, &suh)) ||
	    (st = be_buf(m, 2ull * p.g.n, &m->bytes.exl3, &svh)) ||
	    (st = group_trellis(m, g, &p, tr)) ||
	    (st = src_to(m, g->suh, 2ull * p.k0, 2ull * p.g.k, suh)) ||
	    (st = src_to(m, g->svh, 2ull * p.n0, 2ull * p.g.n, svh)))
		return st;
	L->g = p.g;
	L->trellis = tr;
	L->suh = suh;
	L->svh = svh;
	return TF_OK;
}

static bool is_expert(const struct tf_group_spec *g)
{
	return g->proj >= TF_PROJ_EXPERT_W1 && g->proj <= TF_PROJ_EXPERT_W3;
}

/* The image of the projection of expert group g: every expert of that
 * layer and projection in the plan gives its geometry. */
static tf_status image_make(struct tf_model *m, const struct tf_plan_group *g, struct image *im)
{
	uint32_t E = (uint32_t)tf_config_experts_of(&m->c, g->spec.layer);
	struct tf_exl3_geom *geo = calloc(E ? E : 1, sizeof *geo);
	uint8_t *seen = calloc(E ? E : 1, 1);
	im->off = calloc(E ? E : 1, sizeof *im->off);
	tf_status st = geo && seen && im->off ? TF_OK : tf_err(TF_ERR_NOMEM, "model: experts");
	for (size_t i = 0; i < m->plan.ngroups && !st; i++) {
		const struct tf_plan_group *h = &m->plan.groups[i];
		struct tf_exl3_part p;
		if (h->spec.layer != g->spec.layer || h->spec.proj != g->spec.proj || h->spec.index >= E)
			continue;
		if (!(st = tf_plan_exl3_part(&m->plan, h, &p))) {
			geo[h->spec.index] = p.g;
			seen[h->spec.index] = 1;
		}
	}
	for (uint32_t e = 0; e < E && !st; e++)
		if (!seen[e])
			st = tf_err(TF_ERR_FORMAT, "model: %s: expert %u of %u is missing", g->spec.name, e, E);
	uint64_t total = 0;
	int ragged = 0;
	void *tr = NULL, *suh = NULL, *svh = NULL;
	if (!st && !(st = tf_exl3_experts_layout(geo, E, im->off, &total, &ragged)) &&
	    !(st = be_buf(m, total, &m->bytes.exl3, &tr)) &&
	    !(st = be_buf(m, 2ull * E * geo[0].k, &m->bytes.exl3, &suh)) &&
	    !(st = be_buf(m, 2ull * E * geo[0].n, &m->bytes.exl3, &svh))) {
		im->tr = tr;
		im->suh = suh;
		im->svh = svh;
		im->k = geo[0].k;
		im->n = geo[0].n;
		im->made = true;
		m->bytes.experts += total + 2ull * E * (geo[0].k + geo[0].n);
	}
	free(geo);
	free(seen);
	return st;
}

static tf_status pack_expert(struct tf_model *m, const struct tf_plan_group *g, struct image *im,
			     struct tf_exl3_layer *L)
{
	struct tf_exl3_part p;
	tf_status st;
	if ((st = tf_plan_exl3_part(&m->plan, g, &p)) || (!im->made && (st = image_make(m, g, im))))
		return st;
	uint32_t e = g->spec.index;
	unsigned char *tr = im->tr + im->off[e];
	uint16_t *suh = im->suh + (size_t)e * im->k, *svh = im->svh + (size_t)e * im->n;
	if ((st = group_trellis(m, g, &p, tr)) ||
	    (st = src_to(m, g->suh, 2ull * p.k0, 2ull * p.g.k, suh)) ||
	    (st = src_to(m, g->svh, 2ull * p.n0, 2ull * p.g.n, svh)))
		return st;
	L->g = p.g;
	L->trellis = (const uint16_t *)tr;
	L->suh = suh;
	L->svh = svh;
	return TF_OK;
}

/* Rows [r0, r1) of a native as the forward holds it: f32 (from F32, BF16
 * or F16), half precision kept as stored (linear takes bf16 and f16
 * exactly), or bf16 (the embedding, rounded once from f16). Engram's q
 * and k weights multiply on the host (slot -1) and go to a device after
 * (qk_place). */
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
	uint64_t bytes = (p->r1 - p->r0) * row, n = bytes / (tf_dtype_bits(s->dtype) / 8);
	void *raw = hold(m, how == HOLD_QK ? -1 : 0, bytes);
	if (!raw)
		return tf_err(TF_ERR_NOMEM, "model: %s: %llu bytes", s->name, (unsigned long long)bytes);
	tf_status st = src_read(m, p->t, p->r0 * row, raw, bytes);
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
		void *d;
		if ((st = place(m, raw, bytes, &m->bytes.native, &d)))
			return st;
		if (how == HOLD_EMBED)
			m->bytes.embed += bytes;
		*t = shaped(d, dt, p);
		return TF_OK;
	}
	float *f = hold(m, how == HOLD_QK ? -1 : 1, n * sizeof(float));
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
	if (how == HOLD_QK) {
		struct tf_tensor v = shaped(f, TF_DT_F32, p);
		place_f32(t, how, &v);
		return TF_OK;
	}
	void *d;
	if ((st = place(m, f, n * sizeof(float), &m->bytes.native, &d)))
		return st;
	*t = shaped(d, TF_DT_F32, p);
	return TF_OK;
}

/* Engram's qk (host, q_weight ⊙ k_weight) into the backend's memory. */
static tf_status qk_place(struct tf_model *m)
{
	for (uint32_t L = 0; L < tf_config_all_layers(&m->c); L++) {
		struct tf_tensor *t = &m->w.layers[L].engram_qk;
		void *d;
		tf_status st;
		if (t->data && (st = place(m, t->data, tf_tensor_bytes(t), &m->bytes.native, &d)))
			return st;
		if (t->data)
			t->data = d;
	}
	return TF_OK;
}

tf_status tf_model_load_pack(struct tf_model *m)
{
	tf_status st = alloc_layers(m);
	uint32_t all = tf_config_all_layers(&m->c);
	struct image *im = calloc((size_t)all * 3 + 1, sizeof *im);
	if (!st && !im)
		st = tf_err(TF_ERR_NOMEM, "model: experts");
	for (size_t i = 0; i < m->plan.ngroups && !st; i++) {
		const struct tf_plan_group *g = &m->plan.groups[i];
		struct tf_lin *lin = group_lin(m, &g->spec);
		if (!lin)
			continue;
		if (is_expert(&g->spec))
			st = pack_expert(m, g, &im[g->spec.layer * 3 + (g->spec.proj - TF_PROJ_EXPERT_W1)],
					 &m->q[i]);
		else
			st = pack_group(m, g, &m->q[i]);
		if (!st)
			lin->q = &m->q[i];
	}
	for (size_t i = 0; im && i < (size_t)all * 3; i++)
		free(im[i].off);
	free(im);
	for (size_t i = 0; i < m->plan.nnatives && !st; i++)
		st = pack_native(m, &m->plan.natives[i]);
	return st ? st : qk_place(m);
}

/* The bytes each planned tensor takes on the backend, as the loaders
 * place them (experts' images: the sum of their parts, and the alignment
 * of each trellis start to 16 bytes at most). */
tf_status tf_model_plan_bytes(struct tf_model *m, uint64_t *exl3, uint64_t *native)
{
	*exl3 = *native = 0;
	tf_status st = alloc_layers(m);
	if (st)
		return st;
	for (size_t i = 0; i < m->plan.ngroups; i++) {
		const struct tf_plan_group *g = &m->plan.groups[i];
		struct tf_exl3_part p;
		if (!group_lin(m, &g->spec))
			continue;
		if ((st = tf_plan_exl3_part(&m->plan, g, &p)))
			return st;
		*exl3 += tf_exl3_trellis_bytes(&p.g) + 2ull * (p.g.k + p.g.n) + (is_expert(&g->spec) ? 16 : 0);
	}
	for (size_t i = 0; i < m->plan.nnatives; i++) {
		const struct tf_plan_native *p = &m->plan.natives[i];
		struct tf_tensor *t;
		enum hold how = native_place(m, &p->spec, &t);
		if (!p->t || how == HOLD_NONE || how == HOLD_TABLE)
			continue;
		uint64_t n = (p->r1 - p->r0) * (p->spec.ndim == 2 ? p->spec.shape[1] : 1);
		*native += n * (how == HOLD_HALF || how == HOLD_EMBED ? 2 : 4);
	}
	return TF_OK;
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

/* Entry name of the open image, checked to hold dt and bytes, read and
 * checked against its SHA-256: into a kept host buffer (count NULL), or
 * into the backend's memory, counted in *count. */
static tf_status prep_entry(struct prep *x, const char *name, enum tf_prep_dtype dt,
			    uint64_t bytes, uint64_t *count, void **out)
{
	const struct tf_prep_entry *e = tf_prep_find(&x->im, name);
	if (!e)
		return tf_err(TF_ERR_FORMAT, "'%s': no entry '%s'", x->im.path, name);
	if (e->dtype != dt || (bytes != UINT64_MAX && e->length != bytes))
		return tf_err(TF_ERR_FORMAT, "'%s': entry '%s' is %s of %llu bytes, expected %s of %llu",
			      x->im.path, name, tf_prep_dtype_name(e->dtype),
			      (unsigned long long)e->length, tf_prep_dtype_name(dt),
			      (unsigned long long)bytes);
	void *b = hold(x->m, count ? 0 : -1, e->length);
	if (!b)
		return tf_err(TF_ERR_NOMEM, "model: %s", name);
	uint8_t sum[TF_SHA256_LEN];
	tf_status st = tf_prep_read(&x->im, e, 0, b, e->length);
	if (!st && (st = tf_sha256(b, e->length, sum)))
		return st;
	if (!st && memcmp(sum, e->sha256, sizeof sum))
		return tf_err(TF_ERR_FORMAT, "'%s': entry '%s' does not match its SHA-256 (damaged)",
			      x->im.path, name);
	if (!st && count)
		st = place(x->m, b, e->length, count, &b);
	*out = b;
	return st;
}

static tf_status prep_entryf(struct prep *x, enum tf_prep_dtype dt, uint64_t bytes,
			     uint64_t *count, void **out, const char *prefix, const char *suffix)
{
	char name[TF_NAME_MAX + 64];
	snprintf(name, sizeof name, "%s%s", prefix, suffix);
	return prep_entry(x, name, dt, bytes, count, out);
}

static tf_status prep_group(struct prep *x, const struct tf_plan_group *g, struct tf_exl3_layer *L)
{
	struct tf_exl3_part p;
	void *tr = NULL, *suh = NULL, *svh = NULL, *cb = NULL;
	tf_status st;
	if ((st = tf_plan_exl3_part(&x->m->plan, g, &p)) || (st = prep_image(x, g->spec.layer)) ||
	    (st = prep_entryf(x, TF_PREP_I16, tf_exl3_trellis_bytes(&p.g), &x->m->bytes.exl3, &tr, g->spec.name,
				     ".trellis")) ||
	    (st = prep_entryf(x, TF_PREP_F16, 2ull * p.g.k, &x->m->bytes.exl3, &suh, g->spec.name, ".suh")) ||
	    (st = prep_entryf(x, TF_PREP_F16, 2ull * p.g.n, &x->m->bytes.exl3, &svh, g->spec.name, ".svh")) ||
	    (st = prep_entryf(x, TF_PREP_I32, 4, NULL, &cb, g->spec.name, ".cb")))
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
	if ((st = prep_entryf(x, TF_PREP_I32, 4ull * E, NULL, &bits, prefix, ".bits")) ||
	    (st = prep_entryf(x, TF_PREP_F16, 2ull * E * p.g.k, &x->m->bytes.exl3, &suh, prefix, ".suh")) ||
	    (st = prep_entryf(x, TF_PREP_F16, 2ull * E * p.g.n, &x->m->bytes.exl3, &svh, prefix, ".svh")) ||
	    (st = prep_entryf(x, TF_PREP_I32, 4, NULL, &cb, prefix, ".cb")))
		return st;
	char name[TF_NAME_MAX + 64];
	snprintf(name, sizeof name, "%s.data", prefix);
	bool ragged = tf_prep_find(&x->im, name) != NULL;
	if (ragged && ((st = prep_entryf(x, TF_PREP_I64, 8ull * E, NULL, &off, prefix, ".offsets")) ||
		       (st = prep_entryf(x, TF_PREP_I16, UINT64_MAX, &x->m->bytes.exl3, &tr, prefix,
						    ".data"))))
		return st;
	if (!ragged && (st = prep_entryf(x, TF_PREP_I16, UINT64_MAX, &x->m->bytes.exl3, &tr, prefix,
					     ".trellis")))
		return st;
	snprintf(name, sizeof name, "%s%s", prefix, ragged ? ".data" : ".trellis");
	x->m->bytes.experts += tf_prep_find(&x->im, name)->length + 2ull * E * (p.g.k + p.g.n);
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
	    (st = prep_entry(x, p->spec.name, half ? TF_PREP_BF16 : TF_PREP_F32, n * (half ? 2 : 4),
			     how == HOLD_QK ? NULL : &x->m->bytes.native, &b)))
		return st;
	if ((how == HOLD_HALF || how == HOLD_EMBED) != half)
		return tf_err(TF_ERR_INTERNAL, "model: %s: stored as %s", p->spec.name, half ? "bf16" : "f32");
	struct tf_tensor v = shaped(b, half ? TF_DT_BF16 : TF_DT_F32, p);
	if (how == HOLD_EMBED)
		x->m->bytes.embed += tf_tensor_bytes(&v);
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
	if (!st)
		st = qk_place(m);
	return st ? st : prep_engram(m);
}
