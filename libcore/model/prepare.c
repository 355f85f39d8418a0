/* prepare.c: the converter from a pack and a rank's weight plan to the
 * rank's prepared images; prepare.h says what an image holds.
 *
 * Slices come from exl3_slice.c (tf_exl3_part: runs of tiles in the whole
 * trellis) and are checked against the plan's cut; reads go through
 * tf_pack_read in chunks of at most TF_PREPARE_CHUNK bytes (one covering
 * read for runs of small tiles, one read per run for large ones), mostly
 * straight into the image writer's window, so memory stays bounded by that
 * window and one chunk buffer whatever the pack's size. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/f16.h"
#include "model/exl3.h"
#include "model/prepare.h"

/* Runs at least this long are read one by one rather than covered. */
#define RUN_ALONE (64u << 10)

enum item_kind { IT_GROUP, IT_EXPERTS, IT_NATIVE };

struct item {
	enum item_kind kind;
	const struct tf_plan_group *g;        /* IT_GROUP */
	const struct tf_plan_group **ex;      /* IT_EXPERTS, by expert id */
	uint32_t nex;
	const struct tf_plan_native *nat;     /* IT_NATIVE */
	char prefix[TF_NAME_MAX + 32];
};

struct items {
	struct item *v;
	size_t n;
	const struct tf_plan_group **pool;    /* storage of every ex array */
};

static void items_free(struct items *it)
{
	free(it->v);
	free(it->pool);
}

static bool is_expert(enum tf_proj p)
{
	return p == TF_PROJ_EXPERT_W1 || p == TF_PROJ_EXPERT_W2 || p == TF_PROJ_EXPERT_W3;
}

static bool in_layer(uint32_t item_layer, uint32_t layer)
{
	return layer == TF_PREP_TOP ? item_layer >= TF_CONFIG_MAX_LAYERS : item_layer == layer;
}

/* The image's items in order: groups as the plan lists them, each routed
 * projection's experts gathered at the place of its first expert, then the
 * natives (Engram tables left out). */
static tf_status items_build(const struct tf_config *c, const struct tf_plan *plan, uint32_t layer,
			     struct items *it)
{
	memset(it, 0, sizeof(*it));
	size_t cap = plan->ngroups + plan->nnatives + 1;
	it->v = tf_alloc_array(cap, sizeof(*it->v));
	it->pool = tf_alloc_array(plan->ngroups + 1, sizeof(*it->pool));
	if (!it->v || !it->pool) {
		items_free(it);
		return tf_err(TF_ERR_NOMEM, "out of memory");
	}
	size_t used = 0;
	struct item *ex_item[3] = {NULL, NULL, NULL};
	char block[TF_NAME_MAX];
	if (layer != TF_PREP_TOP)
		tf_names_block(c, layer, block);
	for (size_t i = 0; i < plan->ngroups; i++) {
		const struct tf_plan_group *g = &plan->groups[i];
		if (!in_layer(g->spec.layer, layer))
			continue;
		if (!is_expert(g->spec.proj)) {
			struct item *m = &it->v[it->n++];
			memset(m, 0, sizeof(*m));
			m->kind = IT_GROUP;
			m->g = g;
			snprintf(m->prefix, sizeof m->prefix, "%s", g->spec.name);
			continue;
		}
		int w = g->spec.proj - TF_PROJ_EXPERT_W1;
		if (!ex_item[w]) {
			/* count this projection's experts to reserve their slots */
			uint32_t count = 0;
			for (size_t j = i; j < plan->ngroups; j++)
				if (plan->groups[j].spec.proj == g->spec.proj &&
				    plan->groups[j].spec.layer == g->spec.layer)
					count++;
			struct item *m = &it->v[it->n++];
			memset(m, 0, sizeof(*m));
			m->kind = IT_EXPERTS;
			m->ex = it->pool + used;
			used += count;
			snprintf(m->prefix, sizeof m->prefix, "%s.ffn.experts.w%d",
				 layer == TF_PREP_TOP ? "top" : block, w == 0 ? 1 : w == 1 ? 2 : 3);
			ex_item[w] = m;
		}
		struct item *m = ex_item[w];
		if (g->spec.index != m->nex) {
			items_free(it);
			return tf_err(TF_ERR_INTERNAL, "expert '%s' out of order in the plan", g->spec.name);
		}
		m->ex[m->nex++] = g;
	}
	for (size_t i = 0; i < plan->nnatives; i++) {
		const struct tf_plan_native *n = &plan->natives[i];
		if (!in_layer(n->spec.layer, layer) || n->spec.store == TF_STORE_TABLE)
			continue;
		struct item *m = &it->v[it->n++];
		memset(m, 0, sizeof(*m));
		m->kind = IT_NATIVE;
		m->nat = n;
		snprintf(m->prefix, sizeof m->prefix, "%s", n->spec.name);
	}
	return TF_OK;
}

static enum tf_prep_dtype native_dtype(const struct tf_plan_native *n)
{
	return n->spec.store == TF_STORE_HALF ? TF_PREP_BF16 : TF_PREP_F32;
}

static tf_status add(struct tf_prep_writer *w, const char *prefix, const char *suffix,
		     enum tf_prep_dtype dt, uint32_t ndim, const uint64_t *shape, uint64_t *bytes)
{
	char name[TF_NAME_MAX + 64];
	snprintf(name, sizeof name, "%s%s", prefix, suffix);
	tf_status st = tf_prep_writer_add(w, name, dt, ndim, shape);
	if (!st) {
		uint64_t n = tf_prep_dtype_size(dt);
		for (uint32_t i = 0; i < ndim; i++)
			n *= shape[i];
		*bytes += n;
	}
	return st;
}

/* Declare the entries of the items of one image. */
static tf_status declare_items(const struct tf_plan *plan, const struct items *it,
			       struct tf_prep_writer *w, uint64_t *bytes)
{
	tf_status st = TF_OK;
	*bytes = 0;
	for (size_t i = 0; i < it->n && !st; i++) {
		const struct item *m = &it->v[i];
		struct tf_exl3_part part;
		uint64_t one = 1;
		if (m->kind == IT_GROUP) {
			if ((st = tf_plan_exl3_part(plan, m->g, &part)))
				break;
			uint64_t ts[3] = {part.g.k / 16, part.g.n / 16, 16ull * part.g.bits};
			uint64_t k = part.g.k, n = part.g.n;
			if (!(st = add(w, m->prefix, ".trellis", TF_PREP_I16, 3, ts, bytes)) &&
			    !(st = add(w, m->prefix, ".suh", TF_PREP_F16, 1, &k, bytes)) &&
			    !(st = add(w, m->prefix, ".svh", TF_PREP_F16, 1, &n, bytes)))
				st = add(w, m->prefix, ".cb", TF_PREP_I32, 1, &one, bytes);
		} else if (m->kind == IT_EXPERTS) {
			struct tf_exl3_geom *geo = tf_alloc_array(m->nex, sizeof(*geo));
			uint64_t *off = tf_alloc_array(m->nex, sizeof(*off)), total = 0;
			int ragged = 0;
			if (!geo || !off)
				st = tf_err(TF_ERR_NOMEM, "out of memory");
			for (uint32_t e = 0; e < m->nex && !st; e++)
				if (!(st = tf_plan_exl3_part(plan, m->ex[e], &part)))
					geo[e] = part.g;
			if (!st)
				st = tf_exl3_experts_layout(geo, m->nex, off, &total, &ragged);
			if (!st) {
				uint64_t E = m->nex, k = geo[0].k, n = geo[0].n;
				uint64_t stack[4] = {E, k / 16, n / 16, 16ull * geo[0].bits}, flat = total / 2;
				uint64_t sk[2] = {E, k}, sn[2] = {E, n};
				if (ragged) {
					if (!(st = add(w, m->prefix, ".data", TF_PREP_I16, 1, &flat, bytes)))
						st = add(w, m->prefix, ".offsets", TF_PREP_I64, 1, &E, bytes);
				} else {
					st = add(w, m->prefix, ".trellis", TF_PREP_I16, 4, stack, bytes);
				}
				if (!st && !(st = add(w, m->prefix, ".bits", TF_PREP_I32, 1, &E, bytes)) &&
				    !(st = add(w, m->prefix, ".suh", TF_PREP_F16, 2, sk, bytes)) &&
				    !(st = add(w, m->prefix, ".svh", TF_PREP_F16, 2, sn, bytes)))
					st = add(w, m->prefix, ".cb", TF_PREP_I32, 1, &one, bytes);
			}
			free(geo);
			free(off);
		} else {
			const struct tf_plan_native *n = m->nat;
			uint64_t shape[2] = {n->r1 - n->r0, n->spec.ndim > 1 ? n->spec.shape[1] : 0};
			st = add(w, m->prefix, "", native_dtype(n), (uint32_t)n->spec.ndim, shape, bytes);
		}
	}
	return st;
}

tf_status tf_prepare_declare(const struct tf_config *c, const struct tf_plan *plan, uint32_t layer,
			     struct tf_prep_writer *w, uint64_t *payload_bytes)
{
	struct items it;
	tf_status st = items_build(c, plan, layer, &it);
	if (st)
		return st;
	st = declare_items(plan, &it, w, payload_bytes);
	items_free(&it);
	return st;
}

/* ---- writing ---- */

struct wctx {
	const struct tf_pack *pack;
	const struct tf_plan *plan;
	struct tf_prep_writer *w;
	uint8_t *buf;                  /* TF_PREPARE_CHUNK: covering reads, natives */
	void (*progress)(void *ctx, uint64_t n);
	void *pctx;
	uint64_t read;
};

static tf_status pack_read(struct wctx *x, const struct tf_pack_tensor *t, uint64_t off, void *buf,
			   size_t len)
{
	tf_status st = tf_pack_read(x->pack, t, off, buf, len);
	if (st)
		return st;
	x->read += len;
	if (x->progress)
		x->progress(x->pctx, len);
	return TF_OK;
}

static tf_status put(struct wctx *x, const char *prefix, const char *suffix, const void *data,
		     size_t len)
{
	char name[TF_NAME_MAX + 64];
	snprintf(name, sizeof name, "%s%s", prefix, suffix);
	return tf_prep_writer_put(x->w, name, data, len);
}

/* Room in the image for the next len bytes of entry prefix+suffix. */
static tf_status room(struct wctx *x, const char *prefix, const char *suffix, size_t len, void **p)
{
	char name[TF_NAME_MAX + 64];
	snprintf(name, sizeof name, "%s%s", prefix, suffix);
	return tf_prep_writer_room(x->w, name, len, p);
}

/* Copy a tensor's bytes [off, off+len) into entry prefix+suffix: read
 * straight into the image's window, TF_PREPARE_CHUNK at a time (the digest
 * is then taken while the bytes are still in the cache). */
static tf_status put_range(struct wctx *x, const struct tf_pack_tensor *t, uint64_t off, uint64_t len,
			   const char *prefix, const char *suffix)
{
	for (uint64_t at = 0; at < len;) {
		size_t n = len - at < TF_PREPARE_CHUNK ? (size_t)(len - at) : TF_PREPARE_CHUNK;
		void *p;
		tf_status st = room(x, prefix, suffix, n, &p);
		if (st || (st = pack_read(x, t, off + at, p, n)) || (st = tf_prep_writer_filled(x->w)))
			return st;
		at += n;
	}
	return TF_OK;
}

/* Append a group part's trellis (its runs, in order) to an entry. */
static tf_status put_trellis(struct wctx *x, const struct tf_plan_group *g, const char *prefix,
			     const char *suffix)
{
	struct tf_exl3_part p;
	tf_status st = tf_plan_exl3_part(x->plan, g, &p);
	if (st)
		return st;
	if (p.stride == p.run_bytes || p.run_bytes >= RUN_ALONE) {
		if (p.stride == p.run_bytes) /* contiguous: one range */
			return put_range(x, g->trellis, p.off, p.run_bytes * p.nruns, prefix, suffix);
		for (uint32_t i = 0; i < p.nruns && !st; i++)
			st = put_range(x, g->trellis, p.off + (uint64_t)i * p.stride, p.run_bytes, prefix,
				       suffix);
		return st;
	}
	/* small runs: one covering read per batch, then a gather */
	for (uint32_t i = 0; i < p.nruns;) {
		uint32_t j = i + 1;
		while (j < p.nruns && (uint64_t)(j - i) * p.stride + p.run_bytes <= TF_PREPARE_CHUNK)
			j++;
		uint64_t span = (uint64_t)(j - 1 - i) * p.stride + p.run_bytes;
		uint8_t *o;
		if ((st = pack_read(x, g->trellis, p.off + (uint64_t)i * p.stride, x->buf, span)) ||
		    (st = room(x, prefix, suffix, (size_t)(j - i) * p.run_bytes, (void **)&o)))
			return st;
		for (uint32_t r = i; r < j; r++)
			memcpy(o + (size_t)(r - i) * p.run_bytes, x->buf + (size_t)(r - i) * p.stride,
			       p.run_bytes);
		if ((st = tf_prep_writer_filled(x->w)))
			return st;
		i = j;
	}
	return TF_OK;
}

static tf_status put_group_scales(struct wctx *x, const struct tf_plan_group *g, const char *prefix)
{
	tf_status st = put_range(x, g->suh, 2ull * g->k0, 2ull * (g->k1 - g->k0), prefix, ".suh");
	return st ? st : put_range(x, g->svh, 2ull * g->n0, 2ull * (g->n1 - g->n0), prefix, ".svh");
}

static tf_status put_i32(struct wctx *x, const char *prefix, const char *suffix, int32_t v)
{
	return put(x, prefix, suffix, &v, 4);
}

static tf_status write_experts(struct wctx *x, const struct item *m)
{
	tf_status st = TF_OK;
	struct tf_exl3_geom *geo = tf_alloc_array(m->nex, sizeof(*geo));
	uint64_t *off = tf_alloc_array(m->nex, sizeof(*off)), total, at = 0;
	int32_t *bits = tf_alloc_array(m->nex, sizeof(*bits));
	int ragged;
	if (!geo || !off || !bits) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (uint32_t e = 0; e < m->nex; e++) {
		struct tf_exl3_part p;
		if ((st = tf_plan_exl3_part(x->plan, m->ex[e], &p)))
			goto out;
		geo[e] = p.g;
		bits[e] = (int32_t)p.g.bits;
	}
	if ((st = tf_exl3_experts_layout(geo, m->nex, off, &total, &ragged)))
		goto out;
	const char *tname = ragged ? ".data" : ".trellis";
	static const uint8_t zeros[16];
	for (uint32_t e = 0; e < m->nex; e++) {
		if (off[e] > at && (st = put(x, m->prefix, tname, zeros, (size_t)(off[e] - at))))
			goto out;
		if ((st = put_trellis(x, m->ex[e], m->prefix, tname)))
			goto out;
		at = off[e] + tf_exl3_trellis_bytes(&geo[e]);
	}
	if (ragged) {
		for (uint32_t e = 0; e < m->nex; e++) {
			int64_t o = (int64_t)off[e];
			if ((st = put(x, m->prefix, ".offsets", &o, 8)))
				goto out;
		}
	}
	if ((st = put(x, m->prefix, ".bits", bits, 4ull * m->nex)))
		goto out;
	for (uint32_t e = 0; e < m->nex && !st; e++)
		st = put_range(x, m->ex[e]->suh, 2ull * m->ex[e]->k0, 2ull * (m->ex[e]->k1 - m->ex[e]->k0),
			       m->prefix, ".suh");
	for (uint32_t e = 0; e < m->nex && !st; e++)
		st = put_range(x, m->ex[e]->svh, 2ull * m->ex[e]->n0, 2ull * (m->ex[e]->n1 - m->ex[e]->n0),
			       m->prefix, ".svh");
	if (!st)
		st = put_i32(x, m->prefix, ".cb", (int32_t)m->ex[0]->codebook);
out:
	free(geo);
	free(off);
	free(bits);
	return st;
}

/* Rows [r0, r1) of a native, converted to F32 or BF16. */
static tf_status write_native(struct wctx *x, const struct item *m)
{
	const struct tf_plan_native *n = m->nat;
	const struct tf_st_tensor *t = n->t->t;
	enum tf_prep_dtype out = native_dtype(n);
	size_t es = tf_dtype_bits(t->dtype) / 8;
	if (t->dtype != TF_DTYPE_F32 && t->dtype != TF_DTYPE_BF16 && t->dtype != TF_DTYPE_F16)
		return tf_err(TF_ERR_UNSUPPORTED, "tensor '%s': dtype %s cannot be converted", t->name,
			      tf_dtype_name(t->dtype));
	uint64_t rows = n->spec.shape[0] ? n->spec.shape[0] : 1;
	uint64_t row_bytes = (t->end - t->begin) / rows;
	uint64_t start = n->r0 * row_bytes, count = (n->r1 - n->r0) * row_bytes / es;
	size_t step = TF_PREPARE_CHUNK / 4; /* elements: both sides fit the buffers */
	for (uint64_t done = 0; done < count;) {
		size_t k = count - done < step ? (size_t)(count - done) : step;
		tf_status st = pack_read(x, n->t, start + done * es, x->buf, k * es);
		if (st)
			return st;
		void *dst;
		if ((st = room(x, m->prefix, "", k * (out == TF_PREP_F32 ? 4 : 2), &dst)))
			return st;
		if (out == TF_PREP_F32) {
			float *o = dst;
			for (size_t i = 0; i < k; i++) {
				uint16_t h;
				if (t->dtype == TF_DTYPE_F32) {
					memcpy(&o[i], x->buf + 4 * i, 4);
					continue;
				}
				memcpy(&h, x->buf + 2 * i, 2);
				o[i] = t->dtype == TF_DTYPE_BF16 ? tf_bf16_to_f32(h) : tf_f16_to_f32(h);
			}
		} else {
			uint16_t *o = dst;
			for (size_t i = 0; i < k; i++) {
				float f;
				uint16_t h;
				if (t->dtype == TF_DTYPE_F32) {
					memcpy(&f, x->buf + 4 * i, 4);
					o[i] = tf_f32_to_bf16(f);
					continue;
				}
				memcpy(&h, x->buf + 2 * i, 2);
				o[i] = t->dtype == TF_DTYPE_BF16 ? h : tf_f32_to_bf16(tf_f16_to_f32(h));
			}
		}
		if ((st = tf_prep_writer_filled(x->w)))
			return st;
		done += k;
	}
	return TF_OK;
}

/* Ask the kernel to start reading every pack tensor the image needs, so
 * that a cold pack streams while the image is converted and hashed. */
static void hint(const struct tf_pack *pack, const struct tf_pack_tensor *t)
{
	const struct tf_st_file *f = tf_pack_shard(pack, t);
	if (f->fd >= 0)
		posix_fadvise(f->fd, (off_t)tf_st_file_offset(f, t->t), (off_t)(t->t->end - t->t->begin),
			      POSIX_FADV_WILLNEED);
}

static void prefetch(const struct tf_pack *pack, const struct items *it)
{
	for (size_t i = 0; i < it->n; i++) {
		const struct item *m = &it->v[i];
		if (m->kind == IT_NATIVE) {
			hint(pack, m->nat->t);
			continue;
		}
		uint32_t n = m->kind == IT_GROUP ? 1 : m->nex;
		for (uint32_t e = 0; e < n; e++) {
			const struct tf_plan_group *g = m->kind == IT_GROUP ? m->g : m->ex[e];
			hint(pack, g->trellis);
			hint(pack, g->suh);
			hint(pack, g->svh);
		}
	}
}

tf_status tf_prepare_write(const struct tf_config *c, const struct tf_pack *pack,
			   const struct tf_plan *plan, uint32_t layer,
			   const uint8_t key[TF_PREP_KEY_LEN], const char *path,
			   enum tf_prep_commit commit, void (*progress)(void *ctx, uint64_t n), void *ctx, uint64_t *read_bytes)
{
	struct items it = {0};
	struct tf_prep_writer w;
	struct wctx x = {.pack = pack, .plan = plan, .w = &w, .progress = progress, .pctx = ctx};
	uint64_t bytes;
	tf_status st = tf_prep_writer_init(&w, path, key, plan->rank, plan->world);
	if (st)
		goto out;
	w.commit = commit;
	if ((st = items_build(c, plan, layer, &it)) || (st = declare_items(plan, &it, &w, &bytes)) ||
	    (st = tf_prep_writer_begin(&w)))
		goto out;
	prefetch(pack, &it);
	x.buf = malloc(TF_PREPARE_CHUNK);
	if (!x.buf) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < it.n && !st; i++) {
		const struct item *m = &it.v[i];
		if (m->kind == IT_GROUP) {
			if (!(st = put_trellis(&x, m->g, m->prefix, ".trellis")) &&
			    !(st = put_group_scales(&x, m->g, m->prefix)))
				st = put_i32(&x, m->prefix, ".cb", (int32_t)m->g->codebook);
		} else if (m->kind == IT_EXPERTS) {
			st = write_experts(&x, m);
		} else {
			st = write_native(&x, m);
		}
	}
	if (!st)
		st = tf_prep_writer_commit(&w);
out:
	tf_prep_writer_release(&w);
	items_free(&it);
	free(x.buf);
	if (read_bytes)
		*read_bytes = x.read;
	return st;
}

tf_status tf_prepare_key(const struct tf_pack *pack, uint32_t rank, uint32_t world,
			 const char *options, uint8_t key[TF_PREP_KEY_LEN])
{
	struct tf_prep_key k;
	tf_status st = tf_prep_key_begin(&k, TF_PREPARE_CONVERTER);
	for (size_t i = 0; i < pack->nshards && !st; i++) {
		uint8_t dig[TF_SHA256_LEN];
		uint64_t size;
		if ((st = tf_prep_shard_digest(pack->shards[i].path, dig, &size)))
			tf_digest_release(&k.d);
		else
			st = tf_prep_key_shard(&k, pack->shard_names[i], size, dig);
	}
	return st ? st : tf_prep_key_finish(&k, rank, world, options, key);
}

enum tf_prepare_state tf_prepare_check(const char *path, const uint8_t key[TF_PREP_KEY_LEN],
				       uint32_t rank, uint32_t world, bool verify, char *msg,
				       size_t n)
{
	struct tf_prep_image im;
	struct tf_prep_expect ex = {key, rank, world};
	tf_status st = tf_prep_open(&im, path, &ex);
	if (st == TF_ERR_NOTFOUND)
		return TF_PREPARE_MISSING;
	if (!st) {
		if (verify)
			st = tf_prep_verify(&im);
		tf_prep_close(&im);
	}
	if (st) {
		snprintf(msg, n, "%s", tf_errmsg(st));
		return TF_PREPARE_DAMAGED;
	}
	return TF_PREPARE_OK;
}
