/* synth.c: synthetic pack writer. */
#include "model/synth.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/f16.h"
#include "base/file.h"
#include "base/hmap.h"
#include "base/json.h"
#include "base/rng.h"
#include "model/q28.h"
#include "pack/pack.h"
#include "pack/safetensors.h"
#include "text/tokenizer.h"
#include "text/toksynth.h"

#define CHUNK (1u << 20)

enum fill {
	FILL_TRELLIS, FILL_SUH, FILL_SVH, FILL_MARKER, FILL_ONE, FILL_ZERO, FILL_NORMAL,
	FILL_TABLE,
};

struct item {
	char name[TF_NAME_MAX + 16];
	enum tf_dtype dtype;
	int ndim;
	uint64_t shape[3];
	uint64_t bytes;
	enum fill fill;
	float scale;      /* NORMAL: standard deviation; SVH: magnitude */
	uint32_t marker;
	uint32_t shard;
};

struct list {
	struct item *v;
	size_t n, cap;
};

static struct item *push(struct list *l)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 1024;
		if (tf_realloc_array(&l->v, cap, sizeof *l->v))
			return NULL;
		l->cap = cap;
	}
	struct item *it = &l->v[l->n++];
	memset(it, 0, sizeof *it);
	return it;
}

static uint64_t mix(uint64_t seed, const char *s)
{
	return tf_hash_u64(seed ^ tf_hash_bytes(s, strlen(s)));
}

/* w3 shares its expert's w1 width: key both by the w1 name. */
static void width_key(const struct tf_group_spec *g, char *key, size_t n)
{
	snprintf(key, n, "%s", g->name);
	size_t len = strlen(key);
	if (g->proj == TF_PROJ_EXPERT_W3 || g->proj == TF_PROJ_SHARED_W3)
		key[len - 1] = '1';
}

uint32_t tf_synth_bits(const struct tf_synth_opts *o, const struct tf_group_spec *g)
{
	if (o->q28) {
		uint32_t b = tf_q28_bits(o->config, g);
		return b ? b : 4;
	}
	char key[TF_NAME_MAX];
	width_key(g, key, sizeof key);
	return o->bits[mix(o->seed, key) % (uint64_t)o->nbits];
}

enum tf_codebook tf_synth_codebook(const struct tf_synth_opts *o, const struct tf_group_spec *g)
{
	if (o->codebooks != TF_SYNTH_MIXED)
		return (enum tf_codebook)o->codebooks;
	char key[64];
	if (g->proj >= TF_PROJ_EXPERT_W1 && g->proj <= TF_PROJ_EXPERT_W3)
		snprintf(key, sizeof key, "%u/%d", g->layer, (int)g->proj); /* experts agree */
	else
		snprintf(key, sizeof key, "%s", g->name);
	return (enum tf_codebook)(mix(o->seed + 1, key) % 3);
}

static tf_status add_group(struct list *l, const struct tf_synth_opts *o,
			   const struct tf_group_spec *g)
{
	uint32_t bits = tf_synth_bits(o, g);
	if (!push(l) || !push(l) || !push(l))
		return tf_err(TF_ERR_NOMEM, "out of memory");
	struct item *t = &l->v[l->n - 3], *su = &l->v[l->n - 2], *sv = &l->v[l->n - 1];
	snprintf(t->name, sizeof t->name, "%s.trellis", g->name);
	t->dtype = TF_DTYPE_I16;
	t->ndim = 3;
	t->shape[0] = g->k / 16;
	t->shape[1] = g->n / 16;
	t->shape[2] = 16u * bits;
	t->fill = FILL_TRELLIS;
	snprintf(su->name, sizeof su->name, "%s.suh", g->name);
	su->dtype = TF_DTYPE_F16;
	su->ndim = 1;
	su->shape[0] = g->k;
	su->fill = FILL_SUH;
	snprintf(sv->name, sizeof sv->name, "%s.svh", g->name);
	sv->dtype = TF_DTYPE_F16;
	sv->ndim = 1;
	sv->shape[0] = g->n;
	sv->fill = FILL_SVH;
	sv->scale = 1.0f / sqrtf((float)g->k);
	enum tf_codebook cb = tf_synth_codebook(o, g);
	if (cb != TF_CODEBOOK_3INST) {
		struct item *m = push(l);
		if (!m)
			return tf_err(TF_ERR_NOMEM, "out of memory");
		snprintf(m->name, sizeof m->name, "%s.%s", g->name, tf_codebook_name(cb));
		m->dtype = TF_DTYPE_I32;
		m->ndim = 0;
		m->fill = FILL_MARKER;
		m->marker = cb == TF_CODEBOOK_MCG ? TF_CODEBOOK_MCG_MARKER : TF_CODEBOOK_MUL1_MARKER;
	}
	return TF_OK;
}

static tf_status add_native(struct list *l, const struct tf_config *c,
			    const struct tf_native_spec *s)
{
	struct item *it = push(l);
	if (!it)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	snprintf(it->name, sizeof it->name, "%s", s->name);
	it->ndim = s->ndim;
	it->shape[0] = s->shape[0];
	it->shape[1] = s->shape[1];
	const char *n = s->name;
	size_t len = strlen(n);
#define ENDS(x) (len >= strlen(x) && !strcmp(n + len - strlen(x), x))
	switch (s->store) {
	case TF_STORE_TABLE:
		it->dtype = TF_DTYPE_U8;
		it->fill = FILL_TABLE;
		break;
	case TF_STORE_NORM:
		/* Engram's q/k factors are F32 in the release; norms bf16. */
		it->dtype = ENDS("q_weight") || ENDS("k_weight") ? TF_DTYPE_F32 : TF_DTYPE_BF16;
		it->fill = FILL_ONE;
		break;
	case TF_STORE_HALF:
		it->dtype = TF_DTYPE_BF16;
		it->fill = FILL_NORMAL;
		it->scale = ENDS("embed.weight") ? 1.0f : 1.0f / sqrtf((float)s->shape[1]);
		break;
	case TF_STORE_F32:
		it->dtype = TF_DTYPE_F32;
		if (ENDS("_fn")) {
			it->fill = FILL_NORMAL;
			it->scale = 1.0f / sqrtf((float)s->shape[1]);
		} else if (ENDS("_scale")) {
			it->fill = FILL_ONE;
		} else if (ENDS("confidence_head.proj.weight")) {
			it->fill = FILL_NORMAL;
			it->scale = 0.01f;
		} else {
			it->fill = FILL_ZERO; /* hc bases, sinks, router biases */
		}
		break;
	}
#undef ENDS
	(void)c;
	return TF_OK;
}

static tf_status build_list(const struct tf_synth_opts *o, struct list *l)
{
	const struct tf_config *c = o->config;
	int cap = 0;
	for (uint32_t i = 0; i < tf_config_all_layers(c); i++) {
		int n = tf_names_block_groups(c, i, NULL, 0);
		cap = n > cap ? n : cap;
	}
	struct tf_group_spec *gs = tf_alloc_array((size_t)cap + 4, sizeof *gs);
	struct tf_native_spec ns[64];
	tf_status st = gs ? TF_OK : tf_err(TF_ERR_NOMEM, "out of memory");
	for (uint32_t i = 0; !st && i <= tf_config_all_layers(c); i++) {
		bool top = i == tf_config_all_layers(c);
		int ng = top ? tf_names_top_groups(c, gs, cap) : tf_names_block_groups(c, i, gs, cap);
		int nn = top ? tf_names_top_natives(c, ns, 64) : tf_names_block_natives(c, i, ns, 64);
		for (int j = 0; !st && j < ng; j++)
			st = add_group(l, o, &gs[j]);
		for (int j = 0; !st && j < nn; j++)
			st = add_native(l, c, &ns[j]);
	}
	free(gs);
	for (size_t i = 0; i < l->n; i++) {
		struct item *it = &l->v[i];
		uint64_t e = 1;
		for (int d = 0; d < it->ndim; d++)
			e *= it->shape[d];
		it->bytes = e * tf_dtype_bits(it->dtype) / 8;
	}
	return st;
}

/* Fill n bytes of a tensor starting at byte off. */
static void fill(const struct item *it, struct tf_rng *r, uint64_t off, uint8_t *buf, size_t n)
{
	switch (it->fill) {
	case FILL_TRELLIS:
		for (size_t i = 0; i < n; i += 8) {
			uint64_t v = tf_rng_u64(r);
			memcpy(buf + i, &v, n - i < 8 ? n - i : 8);
		}
		break;
	case FILL_SUH: case FILL_SVH:
		for (size_t i = 0; i + 1 < n; i += 2) {
			float m = it->fill == FILL_SUH ? 1.0f : it->scale;
			uint16_t h = tf_f32_to_f16(tf_rng_u64(r) & 1 ? m : -m);
			memcpy(buf + i, &h, 2);
		}
		break;
	case FILL_MARKER:
		memcpy(buf, &it->marker, n < 4 ? n : 4);
		break;
	case FILL_ZERO:
		memset(buf, 0, n);
		break;
	case FILL_ONE: case FILL_NORMAL:
		for (size_t i = 0; i < n;) {
			float v = it->fill == FILL_ONE ? 1.0f : tf_rng_normal(r) * it->scale;
			if (it->dtype == TF_DTYPE_F32) {
				memcpy(buf + i, &v, 4);
				i += 4;
			} else {
				uint16_t h = tf_f32_to_bf16(v);
				memcpy(buf + i, &h, 2);
				i += 2;
			}
		}
		break;
	case FILL_TABLE:
		for (size_t i = 0; i < n; i++) {
			uint64_t col = (off + i) % TF_ENGRAM_ROW_BYTES;
			uint8_t v = (uint8_t)tf_rng_u64(r);
			if (col >= 256)
				v = (uint8_t)(120 + v % 8); /* UE8M0 scale 2^-7 .. 2^0 */
			else if ((v & 0x7f) == 0x7f)
				v ^= 1; /* e4m3 NaN */
			buf[i] = v;
		}
		break;
	}
}

static tf_status write_shard(const struct tf_synth_opts *o, const char *path, struct list *l,
			     uint32_t shard, uint8_t *buf, struct tf_synth_stats *stats)
{
	struct tf_st_writer w;
	tf_status st = tf_st_writer_init(&w, path);
	if (st)
		return st;
	tf_st_writer_meta(&w, "format", "pt");
	tf_st_writer_meta(&w, "tf", "tf-pack-synth");
	for (size_t i = 0; !st && i < l->n; i++)
		if (l->v[i].shard == shard)
			st = tf_st_writer_add(&w, l->v[i].name, l->v[i].dtype, l->v[i].ndim,
					      l->v[i].shape);
	if (!st)
		st = tf_st_writer_begin(&w);
	for (size_t i = 0; !st && i < l->n; i++) {
		const struct item *it = &l->v[i];
		if (it->shard != shard)
			continue;
		stats->tensors++;
		if (o->sparse && it->fill != FILL_MARKER)
			continue;
		struct tf_rng r;
		tf_rng_seed(&r, mix(o->seed, it->name));
		for (uint64_t off = 0; !st && off < it->bytes; off += CHUNK) {
			size_t n = it->bytes - off < CHUNK ? (size_t)(it->bytes - off) : CHUNK;
			fill(it, &r, off, buf, n);
			st = tf_st_writer_put(&w, it->name, off, buf, n);
			stats->data_bytes += n;
			if (o->progress)
				tf_progress_add(o->progress, n);
		}
	}
	if (st) {
		tf_st_writer_release(&w);
		return st;
	}
	return tf_st_writer_commit(&w);
}

static tf_status write_text_files(const struct tf_synth_opts *o, const char *dir)
{
	char *path = tf_path_join(dir, "config.json");
	json_t *cfg = tf_config_to_json(o->config), *tok = NULL;
	char *text = NULL;
	tf_status st = path && cfg ? TF_OK : tf_err(TF_ERR_NOMEM, "out of memory");
	if (!st && !(text = json_dumps(cfg, JSON_INDENT(2) | JSON_REAL_PRECISION(9))))
		st = tf_err(TF_ERR_NOMEM, "out of memory");
	if (!st)
		st = tf_file_write_atomic(path, text, strlen(text));
	free(path);
	free(text);
	text = NULL;
	path = tf_path_join(dir, "tokenizer.json");
	if (!st && !path)
		st = tf_err(TF_ERR_NOMEM, "out of memory");
	if (!st && o->tokenizer) {
		/* The V4.1-style derivation: the markers a V3-family file lacks are
		 * added below the config's vocabulary. */
		struct tf_tok *t = NULL;
		struct tf_buf b = TF_BUF_INIT;
		if (!(st = tf_tok_load(o->tokenizer, &t)) &&
		    !(st = tf_tok_add_v41_markers(t, o->config->vocab)) && !(st = tf_tok_save(t, &b)))
			st = tf_file_write_atomic(path, b.data, b.len);
		tf_buf_release(&b);
		tf_tok_free(t);
	} else if (!st) {
		if (!(st = tf_toksynth_build(o->config->vocab, o->seed, &tok)) &&
		    !(text = json_dumps(tok, JSON_INDENT(2))))
			st = tf_err(TF_ERR_NOMEM, "out of memory");
		if (!st)
			st = tf_file_write_atomic(path, text, strlen(text));
	}
	free(text);
	free(path);
	json_decref(cfg);
	json_decref(tok);
	return st;
}

/* Remove *.safetensors files of an earlier pack that this one did not write. */
static tf_status remove_stale(const char *dir, uint64_t shards)
{
	DIR *d = opendir(dir);
	if (!d)
		return tf_err_errno(TF_ERR_IO, "cannot list '%s'", dir);
	char mine[64];
	snprintf(mine, sizeof mine, "-of-%05u.safetensors", (unsigned)shards);
	tf_status st = TF_OK;
	struct dirent *e;
	while (!st && (e = readdir(d))) {
		size_t n = strlen(e->d_name), m = strlen(".safetensors");
		if (n < m || strcmp(e->d_name + n - m, ".safetensors"))
			continue;
		unsigned a, b;
		if (sscanf(e->d_name, "model-%5u-of-%5u.safetensors", &a, &b) == 2 && b == shards &&
		    a >= 1 && a <= b && strstr(e->d_name, mine))
			continue;
		char *p = tf_path_join(dir, e->d_name);
		if (!p || remove(p))
			st = tf_err_errno(TF_ERR_IO, "cannot remove the stale shard '%s'", e->d_name);
		free(p);
	}
	closedir(d);
	return st;
}

tf_status tf_synth_write(const struct tf_synth_opts *o, const char *dir,
			 struct tf_synth_stats *stats)
{
	memset(stats, 0, sizeof *stats);
	struct list l = {0};
	uint8_t *buf = NULL;
	json_t *wm = NULL;
	char *path = NULL;
	tf_status st = tf_config_validate(o->config);
	if (st || (st = tf_file_mkdirs(dir)) || (st = write_text_files(o, dir)) ||
	    (st = build_list(o, &l)))
		goto out;
	/* shards: fill in order, start a new one past shard_bytes */
	uint64_t in = 0, total = 0;
	uint32_t shard = 0;
	for (size_t i = 0; i < l.n; i++) {
		if (in && in + l.v[i].bytes > o->shard_bytes) {
			shard++;
			in = 0;
		}
		l.v[i].shard = shard;
		in += l.v[i].bytes;
		total += l.v[i].bytes;
	}
	stats->shards = shard + 1;
	stats->bytes = total;
	if (o->progress) {
		o->progress->total = o->sparse ? 0 : total;
	}
	if (!(buf = malloc(CHUNK)) || !(wm = json_object())) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	for (uint32_t s = 0; s < stats->shards; s++) {
		char file[64];
		snprintf(file, sizeof file, "model-%05u-of-%05u.safetensors", s + 1,
			 (unsigned)stats->shards);
		free(path);
		if (!(path = tf_path_join(dir, file))) {
			st = tf_err(TF_ERR_NOMEM, "out of memory");
			goto out;
		}
		if ((st = write_shard(o, path, &l, s, buf, stats)))
			goto out;
		for (size_t i = 0; i < l.n; i++)
			if (l.v[i].shard == s)
				json_object_set_new(wm, l.v[i].name, json_string(file));
	}
	free(path);
	path = tf_path_join(dir, TF_PACK_INDEX);
	if (!path) {
		st = tf_err(TF_ERR_NOMEM, "out of memory");
		goto out;
	}
	if (o->index) {
		json_t *idx = json_pack("{s:{s:I},s:O}", "metadata", "total_size", (json_int_t)total,
					"weight_map", wm);
		char *text = idx ? json_dumps(idx, JSON_INDENT(2)) : NULL;
		st = text ? tf_file_write_atomic(path, text, strlen(text))
			  : tf_err(TF_ERR_NOMEM, "out of memory");
		free(text);
		json_decref(idx);
	} else if (tf_file_exists(path) && remove(path)) {
		st = tf_err_errno(TF_ERR_IO, "cannot remove the stale '%s'", path);
	}
	if (!st)
		st = remove_stale(dir, stats->shards);
out:
	free(path);
	free(buf);
	free(l.v);
	json_decref(wm);
	return st;
}

/* ---- a pack's data without the pack ---- */

struct tf_synth_src {
	struct tf_synth_opts o;
	struct list l;
	struct tf_hmap by_name; /* name -> item index + 1 */
};

tf_status tf_synth_src_new(const struct tf_synth_opts *o, struct tf_synth_src **out)
{
	*out = NULL;
	struct tf_synth_src *s = calloc(1, sizeof *s);
	if (!s)
		return tf_err(TF_ERR_NOMEM, "out of memory");
	s->o = *o;
	s->o.progress = NULL;
	tf_hmap_init(&s->by_name, TF_HMAP_STR);
	tf_status st = tf_config_validate(o->config);
	if (!st)
		st = build_list(&s->o, &s->l);
	for (size_t i = 0; !st && i < s->l.n; i++)
		st = tf_hmap_put_str(&s->by_name, s->l.v[i].name, strlen(s->l.v[i].name), i + 1);
	if (st) {
		tf_synth_src_free(s);
		return st;
	}
	*out = s;
	return TF_OK;
}

tf_status tf_synth_src_read(struct tf_synth_src *s, const char *name, uint64_t off, void *buf,
			    uint64_t n)
{
	uintptr_t at;
	if (!tf_hmap_get_str(&s->by_name, name, strlen(name), &at))
		return tf_err(TF_ERR_NOTFOUND, "synthetic pack: no tensor '%s'", name);
	const struct item *it = &s->l.v[at - 1];
	if (off > it->bytes || n > it->bytes - off)
		return tf_err(TF_ERR_RANGE, "synthetic pack: bytes %llu..%llu of '%s' (%llu bytes)",
			      (unsigned long long)off, (unsigned long long)(off + n), name,
			      (unsigned long long)it->bytes);
	struct tf_rng r;
	tf_rng_seed(&r, mix(s->o.seed, it->name));
	uint8_t chunk[4096];
	/* the generator runs from the tensor's start, as tf_synth_write's does,
	 * in CHUNK pieces (fill's state depends on the piece boundaries only
	 * through the byte offset, which it is given) */
	uint64_t at_byte = 0, end = off + n;
	uint8_t *dst = buf;
	while (at_byte < end) {
		uint64_t piece = it->bytes - at_byte < CHUNK ? it->bytes - at_byte : CHUNK;
		for (uint64_t p = 0; p < piece && at_byte + p < end; p += sizeof chunk) {
			size_t k = piece - p < sizeof chunk ? (size_t)(piece - p) : sizeof chunk;
			fill(it, &r, at_byte + p, chunk, k);
			uint64_t lo = at_byte + p, hi = lo + k;
			if (hi > off) {
				uint64_t a = lo > off ? lo : off, b = hi < end ? hi : end;
				memcpy(dst + (a - off), chunk + (a - lo), (size_t)(b - a));
			}
		}
		at_byte += piece;
	}
	return TF_OK;
}

void tf_synth_src_free(struct tf_synth_src *s)
{
	if (!s)
		return;
	tf_hmap_release(&s->by_name);
	free(s->l.v);
	free(s);
}
