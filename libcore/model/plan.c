/* plan.c: a rank's weight plan and the pack's full check. */
#include "model/plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hmap.h"

struct builder {
	struct tf_plan *p;
	const struct tf_config *c;
	const struct tf_pack *pack;
	struct tf_hmap used; /* names of pack tensors some rank plans */
	size_t gcap, ncap;
	char **owned;        /* name strings kept for the used map */
	size_t nowned, ownedcap;
};

static tf_status mark(struct builder *b, const char *name)
{
	const struct tf_pack_tensor *t = tf_pack_find(b->pack, name);
	if (!t)
		return TF_OK;
	/* the pack's own name string lives as long as the pack */
	return tf_hmap_put_str(&b->used, t->t->name, strlen(t->t->name), 1);
}

static const struct tf_pack_tensor *need(struct builder *b, const char *group, const char *suffix,
					 tf_status *st)
{
	char name[TF_NAME_MAX + 16];
	snprintf(name, sizeof name, "%s.%s", group, suffix);
	const struct tf_pack_tensor *t = tf_pack_find(b->pack, name);
	if (!t)
		*st = tf_err(TF_ERR_FORMAT, "'%s': missing tensor '%s'", b->pack->dir, name);
	else
		*st = mark(b, name);
	return t;
}

static tf_status shape_is(const struct tf_pack_tensor *t, enum tf_dtype d, int ndim,
			  const uint64_t *shape)
{
	const struct tf_st_tensor *s = t->t;
	bool ok = s->dtype == d && s->ndim == ndim;
	for (int i = 0; ok && i < ndim; i++)
		ok = s->shape[i] == shape[i];
	if (ok)
		return TF_OK;
	char want[96] = "", got[96] = "";
	size_t wn = 0, gn = 0;
	for (int i = 0; i < ndim; i++)
		wn += (size_t)snprintf(want + wn, sizeof want - wn, "%s%llu", i ? "," : "",
				       (unsigned long long)shape[i]);
	for (int i = 0; i < s->ndim && gn < sizeof got; i++)
		gn += (size_t)snprintf(got + gn, sizeof got - gn, "%s%llu", i ? "," : "",
				       (unsigned long long)s->shape[i]);
	return tf_err(TF_ERR_FORMAT, "tensor '%s': %s [%s], expected %s [%s]", s->name,
		      tf_dtype_name(s->dtype), got, tf_dtype_name(d), want);
}

/* The rank's part of a split dimension of size n (checked divisible). */
static tf_status cut(const char *what, uint32_t n, uint32_t rank, uint32_t world, uint32_t *a,
		     uint32_t *z)
{
	if (n % (world * 128u))
		return tf_err(TF_ERR_CONFIG, "'%s': dimension %u is not a multiple of world %u x 128",
			      what, n, world);
	*a = n / world * rank;
	*z = n / world * (rank + 1);
	return TF_OK;
}

static bool rank_holds_wo_a(const struct tf_config *c, uint32_t g, uint32_t rank, uint32_t world)
{
	uint32_t per = c->o_groups / world;
	return g / per == rank;
}

static tf_status add_group(struct builder *b, const struct tf_group_spec *g, bool held)
{
	tf_status st;
	const struct tf_pack_tensor *tr = need(b, g->name, "trellis", &st);
	if (st)
		return st;
	const struct tf_pack_tensor *suh = need(b, g->name, "suh", &st);
	if (st)
		return st;
	const struct tf_pack_tensor *svh = need(b, g->name, "svh", &st);
	if (st)
		return st;
	const struct tf_st_tensor *t = tr->t;
	if (t->dtype != TF_DTYPE_I16 || t->ndim != 3 || t->shape[0] != g->k / 16 ||
	    t->shape[1] != g->n / 16 || t->shape[2] % 16 || t->shape[2] < 16 ||
	    t->shape[2] > 128)
		return tf_err(TF_ERR_FORMAT, "tensor '%s': %s [%llu,%llu,%llu], expected I16 "
			      "[%u,%u,16 x bits] with bits 1..8", t->name, tf_dtype_name(t->dtype),
			      (unsigned long long)t->shape[0], (unsigned long long)(t->ndim > 1 ? t->shape[1] : 0),
			      (unsigned long long)(t->ndim > 2 ? t->shape[2] : 0), g->k / 16, g->n / 16);
	uint64_t k = g->k, n = g->n;
	if ((st = shape_is(suh, TF_DTYPE_F16, 1, &k)) || (st = shape_is(svh, TF_DTYPE_F16, 1, &n)))
		return st;
	char name[TF_NAME_MAX + 16];
	enum tf_codebook cb = TF_CODEBOOK_3INST;
	const struct tf_pack_tensor *marker = NULL;
	snprintf(name, sizeof name, "%s.mcg", g->name);
	if ((marker = tf_pack_find(b->pack, name)))
		cb = TF_CODEBOOK_MCG;
	snprintf(name, sizeof name, "%s.mul1", g->name);
	const struct tf_pack_tensor *m1 = tf_pack_find(b->pack, name);
	if (m1 && marker)
		return tf_err(TF_ERR_FORMAT, "group '%s' has both .mcg and .mul1 markers", g->name);
	if (m1) {
		marker = m1;
		cb = TF_CODEBOOK_MUL1;
	}
	if (marker) {
		if (marker->t->dtype != TF_DTYPE_I32 || tf_st_numel(marker->t) != 1)
			return tf_err(TF_ERR_FORMAT, "tensor '%s': a codebook marker must be one I32",
				      marker->t->name);
		if ((st = mark(b, marker->t->name)))
			return st;
	}
	/* a bf16 copy beside the trellis is skipped */
	snprintf(name, sizeof name, "%s.weight", g->name);
	if ((st = mark(b, name)))
		return st;
	if (!held)
		return TF_OK;

	struct tf_plan *p = b->p;
	if (p->ngroups == b->gcap) {
		b->gcap = b->gcap ? b->gcap * 2 : 256;
		if (tf_realloc_array(&p->groups, b->gcap, sizeof *p->groups))
			return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	struct tf_plan_group *pg = &p->groups[p->ngroups];
	memset(pg, 0, sizeof *pg);
	pg->spec = *g;
	pg->bits = (uint32_t)(t->shape[2] / 16);
	pg->codebook = cb;
	pg->trellis = tr;
	pg->suh = suh;
	pg->svh = svh;
	pg->marker = marker;
	pg->k0 = 0, pg->k1 = g->k, pg->n0 = 0, pg->n1 = g->n;
	if (g->split == TF_SPLIT_ROW && (st = cut(g->name, g->k, p->rank, p->world, &pg->k0, &pg->k1)))
		return st;
	if (g->split == TF_SPLIT_COL && (st = cut(g->name, g->n, p->rank, p->world, &pg->n0, &pg->n1)))
		return st;
	uint64_t tiles = (uint64_t)(pg->k1 - pg->k0) / 16 * ((pg->n1 - pg->n0) / 16);
	pg->trellis_bytes = tiles * tf_tile_bytes(pg->bits);
	pg->scale_bytes = 2ull * ((pg->k1 - pg->k0) + (pg->n1 - pg->n0));
	p->ngroups++;
	p->group_bytes += pg->trellis_bytes + pg->scale_bytes;
	if (g->layer < TF_CONFIG_MAX_LAYERS) {
		struct tf_plan_layer *l = &p->layers[g->layer];
		uint64_t bytes = pg->trellis_bytes + pg->scale_bytes;
		switch (g->proj) {
		case TF_PROJ_EXPERT_W1: case TF_PROJ_EXPERT_W2: case TF_PROJ_EXPERT_W3:
			l->expert_bytes += bytes;
			break;
		case TF_PROJ_SHARED_W1: case TF_PROJ_SHARED_W2: case TF_PROJ_SHARED_W3:
			l->shared_bytes += bytes;
			break;
		case TF_PROJ_ENGRAM_WKV: case TF_PROJ_MAIN_PROJ: case TF_PROJ_HEAD:
			l->other_bytes += bytes;
			break;
		default:
			l->attn_bytes += bytes;
		}
	}
	return TF_OK;
}

static tf_status add_native(struct builder *b, const struct tf_native_spec *s)
{
	const struct tf_pack_tensor *t = tf_pack_find(b->pack, s->name);
	tf_status st;
	if (!t) {
		if (s->optional)
			return TF_OK;
		return tf_err(TF_ERR_FORMAT, "'%s': missing tensor '%s'", b->pack->dir, s->name);
	}
	if ((st = mark(b, s->name)))
		return st;
	if (!tf_store_accepts(s->store, t->t->dtype))
		return tf_err(TF_ERR_FORMAT, "tensor '%s': dtype %s is not accepted here", s->name,
			      tf_dtype_name(t->t->dtype));
	if ((st = shape_is(t, t->t->dtype, s->ndim, s->shape)))
		return st;
	struct tf_plan *p = b->p;
	if (p->nnatives == b->ncap) {
		b->ncap = b->ncap ? b->ncap * 2 : 256;
		if (tf_realloc_array(&p->natives, b->ncap, sizeof *p->natives))
			return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	struct tf_plan_native *pn = &p->natives[p->nnatives++];
	pn->spec = *s;
	pn->t = t;
	pn->r0 = 0;
	pn->r1 = s->shape[0];
	if (s->slice == TF_SLICE_HEADS || s->slice == TF_SLICE_VOCAB_ROWS) {
		if (s->shape[0] % p->world)
			return tf_err(TF_ERR_CONFIG, "tensor '%s': %llu rows do not split over %u ranks",
				      s->name, (unsigned long long)s->shape[0], p->world);
		pn->r0 = s->shape[0] / p->world * p->rank;
		pn->r1 = s->shape[0] / p->world * (p->rank + 1);
	}
	uint64_t row = (t->t->end - t->t->begin) / (s->shape[0] ? s->shape[0] : 1);
	pn->bytes = (pn->r1 - pn->r0) * row;
	if (s->slice == TF_SLICE_ENGRAM) {
		p->engram_bytes += pn->bytes;
	} else {
		p->native_bytes += pn->bytes;
		if (s->layer < TF_CONFIG_MAX_LAYERS)
			p->layers[s->layer].native_bytes += pn->bytes;
	}
	return TF_OK;
}

/* The routed experts of one projection in one layer must share a codebook. */
static tf_status check_expert_codebooks(const struct tf_plan *p)
{
	const struct tf_plan_group *first[TF_CONFIG_MAX_LAYERS][3] = {{NULL}};
	for (size_t i = 0; i < p->ngroups; i++) {
		const struct tf_plan_group *g = &p->groups[i];
		if (g->spec.proj < TF_PROJ_EXPERT_W1 || g->spec.proj > TF_PROJ_EXPERT_W3 ||
		    g->spec.layer >= TF_CONFIG_MAX_LAYERS)
			continue;
		const struct tf_plan_group **f = &first[g->spec.layer][g->spec.proj - TF_PROJ_EXPERT_W1];
		if (!*f)
			*f = g;
		else if ((*f)->codebook != g->codebook)
			return tf_err(TF_ERR_FORMAT, "group '%s' uses %s but '%s' uses %s: a "
				      "projection's experts must agree", g->spec.name,
				      tf_codebook_name(g->codebook), (*f)->spec.name,
				      tf_codebook_name((*f)->codebook));
	}
	return TF_OK;
}

static tf_status check_world(const struct tf_config *c, uint32_t world)
{
	if (world != 1 && world != 2 && world != 4 && world != 8)
		return tf_err(TF_ERR_CONFIG, "world %u: only 1, 2, 4 or 8 ranks", world);
	if (c->heads % world || c->o_groups % world || (c->vocab / 128) % world)
		return tf_err(TF_ERR_CONFIG, "world %u does not divide %u heads, %u output groups "
			      "and %u vocabulary blocks of 128", world, c->heads, c->o_groups,
			      c->vocab / 128);
	return TF_OK;
}

tf_status tf_plan_build(struct tf_plan *p, const struct tf_config *c, const struct tf_pack *pack,
			uint32_t rank, uint32_t world)
{
	memset(p, 0, sizeof *p);
	p->rank = rank;
	p->world = world;
	struct builder b = {.p = p, .c = c, .pack = pack};
	tf_hmap_init(&b.used, TF_HMAP_STR);
	struct tf_group_spec *gs = NULL;
	struct tf_native_spec ns[64];
	tf_status st = check_world(c, world);
	if (st)
		goto out;
	if (rank >= world) {
		st = tf_err(TF_ERR_CONFIG, "rank %u is not below world %u", rank, world);
		goto out;
	}
	int cap = 0;
	for (uint32_t l = 0; l < tf_config_all_layers(c); l++) {
		int ng = tf_names_block_groups(c, l, NULL, 0);
		cap = ng > cap ? ng : cap;
	}
	if (!(gs = tf_alloc_array((size_t)cap + 4, sizeof *gs))) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (uint32_t l = 0; l <= tf_config_all_layers(c); l++) {
		bool top = l == tf_config_all_layers(c);
		int ng = top ? tf_names_top_groups(c, gs, cap) : tf_names_block_groups(c, l, gs, cap);
		int nn = top ? tf_names_top_natives(c, ns, 64) : tf_names_block_natives(c, l, ns, 64);
		for (int i = 0; i < ng; i++) {
			bool held = gs[i].proj != TF_PROJ_WO_A ||
				    rank_holds_wo_a(c, gs[i].index, rank, world);
			if ((st = add_group(&b, &gs[i], held)))
				goto out;
		}
		for (int i = 0; i < nn; i++)
			if ((st = add_native(&b, &ns[i])))
				goto out;
	}
	if ((st = check_expert_codebooks(p)))
		goto out;
	for (size_t i = 0; i < pack->n; i++) {
		const char *name = pack->tensors[i].t->name;
		if (tf_hmap_get_str(&b.used, name, strlen(name), NULL))
			continue;
		if (tf_names_ignored(name)) {
			p->nignored++;
			continue;
		}
		size_t n = strlen(name);
		if (n > 7 && !strcmp(name + n - 7, ".weight")) {
			char sib[TF_NAME_MAX + 16];
			snprintf(sib, sizeof sib, "%.*s.trellis", (int)(n - 7), name);
			if (tf_pack_find(pack, sib)) {
				p->nignored++;
				continue;
			}
		}
		st = tf_err(TF_ERR_FORMAT, "'%s': tensor '%s' is not part of a DeepSeek-V4.1 pack "
			    "for this config", tf_pack_shard(pack, &pack->tensors[i])->path, name);
		goto out;
	}
	p->total_bytes = p->group_bytes + p->native_bytes;
out:
	free(gs);
	tf_hmap_release(&b.used);
	if (st)
		tf_plan_release(p);
	return st;
}

void tf_plan_release(struct tf_plan *p)
{
	free(p->groups);
	free(p->natives);
	memset(p, 0, sizeof *p);
}

static enum tf_exl3_cb exl3_cb(enum tf_codebook cb)
{
	return cb == TF_CODEBOOK_MCG ? TF_EXL3_CB_MCG : cb == TF_CODEBOOK_MUL1 ? TF_EXL3_CB_MUL1 :
									 TF_EXL3_CB_3INST;
}

tf_status tf_plan_exl3_part(const struct tf_plan *plan, const struct tf_plan_group *g,
			    struct tf_exl3_part *part)
{
	struct tf_exl3_geom whole = {g->spec.k, g->spec.n, g->bits, exl3_cb(g->codebook)};
	enum tf_exl3_split sp = g->spec.split == TF_SPLIT_ROW ? TF_EXL3_ROW :
				g->spec.split == TF_SPLIT_COL ? TF_EXL3_COL : TF_EXL3_WHOLE;
	bool whole_split = sp == TF_EXL3_WHOLE;
	tf_status st = tf_exl3_part(&whole, sp, whole_split ? 0 : plan->rank, whole_split ? 1 : plan->world,
				    part);
	if (st)
		return tf_err_wrap(st, "group '%s': ", g->spec.name);
	if (part->k0 != g->k0 || part->k0 + part->g.k != g->k1 || part->n0 != g->n0 ||
	    part->n0 + part->g.n != g->n1 || tf_exl3_trellis_bytes(&part->g) != g->trellis_bytes)
		return tf_err(TF_ERR_INTERNAL, "group '%s': the plan's cut differs from the EXL3 slice",
			      g->spec.name);
	return TF_OK;
}
