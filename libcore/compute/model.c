/* model.c: a DeepSeek-V4.1 model of one tensor-parallel rank on the CPU or
 * the CUDA backend (model.h): open (the backend, the cache, the fit check;
 * the weights come from model_load.c), Engram rows of the rank's hash
 * columns, sequences and the forward. */
#include "compute/model.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/file.h"
#include "base/hmap.h"
#include "base/log.h"
#include "base/progress.h"
#include "compute/model_impl.h"
#include "compute/ops.h"
#include "compute/phases.h"
#include "fabric/comm.h"
#include "model/engram_map.h"
#include "model/engram_rows.h"
#include "model/engram_shard.h"
#include "model/prepare.h"
#include "model/prepared.h"
#include "model/synth.h"
#include "text/tokenizer.h"

void *tf_model_keep(struct tf_model *m, size_t bytes)
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
	tf_engram_rank_cols(m->hasher.cols, m->rank, m->world, &m->c0, &m->c1);
	for (uint32_t i = 0; i < m->c.n_engram; i++)
		if (!m->table[i] && !m->shard[i]) {
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
	struct tf_model_hist *h = &m->hist[seq];
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

/* A synthetic table row (opts.synthetic): random e4m3 codes (no NaN) and
 * UE8M0 scales 2^-7 .. 2^0, as tf-pack-synth's tables hold, drawn from
 * (seed, layer, row) so that any row costs the same. */
static void synth_row(uint64_t seed, uint32_t layer, uint64_t row, uint8_t *raw)
{
	uint64_t s = tf_hash_u64(seed ^ tf_hash_u64(((uint64_t)layer << 40) ^ row));
	for (size_t i = 0; i < TF_ENGRAM_ROW_BYTES; i += 8) {
		uint64_t w = tf_random_word(s, i / 8);
		for (size_t j = 0; j < 8 && i + j < TF_ENGRAM_ROW_BYTES; j++) {
			uint8_t v = (uint8_t)(w >> (8 * j));
			if (i + j >= TF_ENGRAM_ROW_VALUES)
				v = (uint8_t)(120 + v % 8);
			else if ((v & 0x7f) == 0x7f)
				v ^= 1;
			raw[i + j] = v;
		}
	}
}

/* The rows of the rank's columns [c0, c1) for R rows: from the pack's
 * table, from the rank's shard in one batch, or synthetic. */
static tf_status engram_rows(void *ctx, uint32_t layer, int R, const int32_t *ids,
			     const int64_t *pos, const int *seq, int64_t width, int64_t stride,
			     uint16_t *out, uint8_t *blocked)
{
	struct tf_model *m = ctx;
	const struct tf_config *c = &m->c;
	int li = tf_config_engram_index(c, layer);
	uint32_t n = m->c1 - m->c0, hd = c->engram_head_dim;
	if (li < 0 || hd > TF_ENGRAM_ROW_VALUES || width != (int64_t)n * hd || stride < width)
		return tf_err(TF_ERR_INTERNAL, "model: Engram rows for layer %u", layer);
	size_t nrow = (size_t)R * n;
	int64_t r64[TF_ENGRAM_MAX_LAYERS * TF_ENGRAM_MAX_COLS];
	uint64_t *want = malloc((nrow ? nrow : 1) * sizeof *want);
	uint8_t *raw = malloc((nrow ? nrow : 1) * TF_ENGRAM_ROW_BYTES);
	uint16_t vals[TF_ENGRAM_ROW_VALUES];
	const struct tf_pack_tensor *t = m->table[li];
	tf_status st = TF_OK;
	if (!want || !raw) {
		st = tf_err(TF_ERR_NOMEM, "model: Engram rows");
		goto out;
	}
	for (int r = 0; r < R; r++) {
		const struct tf_model_hist *h = &m->hist[seq[r]];
		int64_t nb = pos[r] < (int64_t)m->hasher.max_ngram - 1 ? pos[r]
								     : (int64_t)m->hasher.max_ngram - 1;
		uint32_t id = (uint32_t)ids[r];
		tf_engram_hash(&m->hasher, &id, 1, h->ids + pos[r] - nb, (size_t)nb, m->c0, m->c1, r64);
		blocked[r] = id >= m->hasher.vocab;
		for (uint32_t col = 0; col < n; col++)
			want[(size_t)r * n + col] = (uint64_t)r64[(uint32_t)li * n + col];
	}
	if (m->synth) {
		for (size_t i = 0; i < nrow; i++)
			synth_row(m->synth_seed, layer, want[i], raw + i * TF_ENGRAM_ROW_BYTES);
	} else if (m->shard[li]) {
		st = tf_engram_shard_fetch(m->shard[li], want, nrow, raw);
	} else {
		for (size_t i = 0; i < nrow && !st; i++) {
			if (want[i] >= t->t->shape[0])
				st = tf_err(TF_ERR_INTERNAL, "model: Engram row %llu of %llu",
					    (unsigned long long)want[i], (unsigned long long)t->t->shape[0]);
			else
				st = tf_pack_read(&m->pack, t, want[i] * TF_ENGRAM_ROW_BYTES,
						  raw + i * TF_ENGRAM_ROW_BYTES, TF_ENGRAM_ROW_BYTES);
		}
	}
	for (size_t i = 0; i < nrow && !st; i++) {
		tf_engram_rows_decode(raw + i * TF_ENGRAM_ROW_BYTES, 1, vals);
		memcpy(out + (int64_t)(i / n) * stride + (int64_t)(i % n) * hd, vals, hd * sizeof *vals);
	}
out:
	free(want);
	free(raw);
	return st;
}

/* The rank's folder of a prepared folder: dir itself when it holds
 * top.bin, else tf-prepare's DIR/<key>/rank<r>of<w> for the pack's key. */
static tf_status prep_dir(struct tf_model *m, const char *dir)
{
	char *top = tf_path_join(dir, "top.bin");
	bool here = top && tf_file_exists(top);
	free(top);
	if (here) {
		m->prep_dir = strdup(dir);
	} else {
		uint8_t key[TF_PREP_KEY_LEN];
		tf_status st = tf_prepare_key(&m->pack, m->rank, m->world, "", key);
		if (st)
			return st;
		m->prep_dir = tf_prep_rank_dir(dir, key, m->rank, m->world);
		if (m->prep_dir && !tf_file_exists(m->prep_dir)) {
			st = tf_err(TF_ERR_NOTFOUND, "'%s': no prepared images of rank %u of %u for "
				    "this pack (no '%s')", dir, m->rank, m->world, m->prep_dir);
			return st;
		}
	}
	return m->prep_dir ? TF_OK : tf_err(TF_ERR_NOMEM, "model: out of memory");
}

/* ---- open, run, free ---- */

static tf_status be_sync(void *ctx)
{
	struct tf_be *be = ctx;
	return be->ops->sync(be);
}

static uint64_t kv_bytes(struct tf_kv *kv)
{
	const struct tf_kv_store *s = tf_kv_store(kv);
	uint64_t n = tf_tensor_bytes(&s->ring) + tf_tensor_bytes(&s->carry) + tf_tensor_bytes(&s->pt);
	for (int i = 0; i < TF_KV_MAX_SRC; i++)
		n += tf_tensor_bytes(&s->pool[i]) + tf_tensor_bytes(&s->ik[i]);
	return n;
}

/* Room left on the device for the scratch of a forward call and the
 * backend's workspaces, beyond the weights and the cache. */
#define MODEL_DEVICE_SPARE ((uint64_t)3 << 30)
/* The window ring on a device (model.h opts.ring). */
#define MODEL_DEVICE_RING 1024

static double gib(uint64_t b)
{
	return (double)b / (double)(1ull << 30);
}

/* A device rank refuses weights its device has no room for (the cache
 * is allocated already, so its bytes are out of the free memory). */
static tf_status fits(struct tf_model *m, int device, uint64_t weights)
{
	uint64_t free_b, total_b;
	if (!m->device)
		return TF_OK;
	tf_status st = tf_cuda_be_memory(m->be, &free_b, &total_b);
	if (st)
		return st;
	tf_log(TF_LOG_INFO, "model: rank %u of %u on device %d: weights %.2f GiB, cache %.2f GiB, "
	       "%.2f GiB free of %.2f GiB", m->rank, m->world, device, gib(weights), gib(m->bytes.kv),
	       gib(free_b), gib(total_b));
	if (weights + MODEL_DEVICE_SPARE > free_b)
		return tf_err(TF_ERR_NOMEM, "model: the rank's weights (%.2f GiB) and cache (%.2f GiB) "
			      "do not fit device %d: %.2f GiB free of %.2f GiB with the cache in place, "
			      "and %.2f GiB more are kept for work space", gib(weights), gib(m->bytes.kv),
			      device, gib(free_b), gib(total_b), gib(MODEL_DEVICE_SPARE));
	return TF_OK;
}

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
	m->world = o.world ? (uint32_t)o.world : 1;
	m->rank = (uint32_t)o.rank;
	m->comm = m->world > 1 ? o.comm : NULL;
	if (o.rank < 0 || o.world < 0 || m->rank >= m->world ||
	    (m->world > 1 && (!o.comm || o.comm->world != (int)m->world ||
			      o.comm->rank != (int)m->rank))) {
		st = tf_err(TF_ERR_ARG, "model: rank %d of world %d needs a comm of that rank and world",
			    o.rank, o.world);
		goto fail;
	}
	if ((st = tf_plan_build(&m->plan, &m->c, &m->pack, m->rank, m->world)))
		goto fail;
	m->plan_built = true;
	const struct tf_config *c = &m->c;
	if (o.synthetic && o.prepared) {
		st = tf_err(TF_ERR_ARG, "model: synthetic weights come from a pack, not a prepared folder");
		goto fail;
	}
	if (o.prepared && (st = prep_dir(m, o.prepared)))
		goto fail;
	if (o.synthetic) {
		struct tf_synth_opts so = {.config = c, .seed = o.synth_seed, .bits = {4}, .nbits = 1};
		if ((st = tf_synth_src_new(&so, &m->synth)))
			goto fail;
		m->synth_seed = o.synth_seed;
	}
	/* the backend and the cache first: a device's room is checked before
	 * any weight goes up */
	if ((st = o.backend == TF_MODEL_CUDA ? tf_cuda_be_new(o.device, &m->be)
					     : tf_cpu_be_new(o.threads, &m->be)))
		goto fail;
	m->device = m->be->ops->device != 0;
	if (o.batch_invariant && (st = tf_cuda_be_set_invariant(m->be, 1))) {
		st = tf_err(TF_ERR_UNSUPPORTED, "model: the batch-invariant path is the cuda "
			    "backend's (the %s backend has none)", m->be->ops->name);
		goto fail;
	}
	struct tf_kv_config kc;
	tf_fwd_kv_config(c, o.pages, o.slots, o.max_positions, &kc);
	kc.window_fmt = o.window_fmt;
	kc.pool_fmt = o.pool_fmt;
	kc.index_fmt = o.index_fmt;
	kc.ring = o.ring ? o.ring : m->device ? MODEL_DEVICE_RING : TF_KV_RING;
	if ((st = tf_kv_new(m->be, &kc, &m->kv)))
		goto fail;
	m->bytes.kv = kv_bytes(m->kv);
	uint64_t exl3, native;
	if ((st = tf_model_plan_bytes(m, &exl3, &native)) || (st = fits(m, o.device, exl3 + native)))
		goto fail;
	m->progress = o.progress;
	if (m->progress)
		m->progress->total = exl3 + native;
	if ((st = m->prep_dir ? tf_model_load_prepared(m) : tf_model_load_pack(m)))
		goto fail;
	if (m->progress)
		tf_progress_end(m->progress);
	m->progress = NULL;
	if (c->n_engram && (st = engram_init(m)))
		goto fail;
	m->slots = o.slots;
	m->hist = calloc((size_t)o.slots, sizeof *m->hist);
	if (!m->hist) {
		st = tf_err(TF_ERR_NOMEM, "model: history");
		goto fail;
	}
	if ((st = tf_fwd_new_tp(m->be, c, &m->w, m->kv, c->n_engram ? engram_rows : NULL, m, m->comm,
				&m->fwd)) ||
	    (st = tf_phases_from_env(&m->phases)))
		goto fail;
	if (m->phases) {
		tf_phases_set_sync(m->phases, be_sync, m->be);
		tf_fwd_set_phases(m->fwd, m->phases);
	}
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
	if (m->be)
		(void)tf_cuda_be_use(m->be);
	tf_dspark_free(m->dspark);
	free(m->taps);
	tf_fwd_free(m->fwd);
	tf_phases_free(m->phases);
	tf_kv_free(m->kv);
	for (size_t i = 0; i < m->ndev; i++)
		m->be->ops->release(m->be, &m->dev[i]);
	free(m->dev);
	tf_be_free(m->be);
	free(m->hold[0]);
	free(m->hold[1]);
	tf_synth_src_free(m->synth);
	if (m->hist)
		for (int i = 0; i < m->slots; i++)
			free(m->hist[i].ids);
	free(m->hist);
	if (m->host_init)
		tf_engram_host_release(&m->host);
	for (uint32_t i = 0; i < TF_CONFIG_MAX_ENGRAM; i++)
		tf_engram_shard_close(m->shard[i]);
	free(m->prep_dir);
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

struct tf_be *tf_model_be(struct tf_model *m)
{
	return m->be;
}

void tf_model_bytes(const struct tf_model *m, struct tf_model_bytes *out)
{
	*out = m->bytes;
}

/* Sequence calls may run ops (a fork copies a partial page): the CUDA
 * context is made current on the calling thread first (the engine's
 * thread is not the one that opened the model). */
/* The mirror's after() of a sequence call (model.h). */
static tf_status mirrored(struct tf_model *m, enum tf_model_op op, int src, int dst, int64_t at,
			  tf_status st)
{
	if (m->mirror.after) {
		struct tf_model_call c = {.op = op, .src = src, .dst = dst, .at = at, .st = st};
		m->mirror.after(m->mirror.ctx, &c);
	}
	return st;
}

void tf_model_set_mirror(struct tf_model *m, const struct tf_model_mirror *mirror)
{
	m->mirror = mirror ? *mirror : (struct tf_model_mirror){0};
}

tf_status tf_model_seq_new(struct tf_model *m, int *seq)
{
	tf_status st = tf_cuda_be_use(m->be);
	if (!st)
		st = tf_kv_open(m->kv, seq);
	return mirrored(m, TF_MODEL_OP_SEQ_NEW, -1, st ? -1 : *seq, 0, st);
}

static tf_status seq_fork(struct tf_model *m, int src, int *dst);

tf_status tf_model_seq_fork(struct tf_model *m, int src, int *dst)
{
	tf_status st = seq_fork(m, src, dst);
	return mirrored(m, TF_MODEL_OP_SEQ_FORK, src, st ? -1 : *dst, 0, st);
}

static tf_status seq_fork(struct tf_model *m, int src, int *dst)
{
	tf_status st = tf_cuda_be_use(m->be);
	if (st)
		return st;
	st = tf_kv_fork(m->kv, src, dst);
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
	tf_status st = tf_cuda_be_use(m->be);
	if (!st)
		st = tf_kv_rollback(m->kv, seq, pos);
	return mirrored(m, TF_MODEL_OP_SEQ_ROLLBACK, seq, -1, pos, st);
}

int64_t tf_model_seq_len(const struct tf_model *m, int seq)
{
	return tf_kv_len(m->kv, seq);
}

void tf_model_seq_free(struct tf_model *m, int seq)
{
	(void)tf_cuda_be_use(m->be);
	tf_kv_close(m->kv, seq);
	mirrored(m, TF_MODEL_OP_SEQ_FREE, seq, -1, 0, TF_OK);
}

int64_t tf_model_free_pages(const struct tf_model *m)
{
	return tf_kv_config(m->kv)->sources ? tf_kv_free_pages(m->kv) : INT64_MAX;
}

tf_status tf_model_check_rows(const struct tf_model *m, int R, const int32_t *ids,
			      const int64_t *pos, const int *seq)
{
	if (R < 1 || !ids || !pos || !seq)
		return tf_err(TF_ERR_ARG, "model: %d rows, or a missing array", R);
	int64_t most = tf_kv_config(m->kv)->max_positions;
	for (int r = 0; r < R; r++) {
		if (ids[r] < 0 || (uint32_t)ids[r] >= m->c.vocab)
			return tf_err(TF_ERR_ARG, "model: token id %d of %u", ids[r], m->c.vocab);
		if (seq[r] < 0 || seq[r] >= m->slots)
			return tf_err(TF_ERR_ARG, "model: sequence %d of %d slots", seq[r], m->slots);
		bool first = r == 0 || seq[r] != seq[r - 1];
		int64_t want = first ? tf_kv_len(m->kv, seq[r]) : pos[r - 1] + 1;
		if (pos[r] != want || pos[r] >= most)
			return tf_err(TF_ERR_ARG, "model: row %d of sequence %d is at %lld, not %lld (or "
				      "past %lld positions)", r, seq[r], (long long)pos[r],
				      (long long)want, (long long)most);
		for (int q = 0; first && q < r; q++)
			if (seq[q] == seq[r])
				return tf_err(TF_ERR_ARG, "model: rows of sequence %d are not consecutive",
					      seq[r]);
	}
	return TF_OK;
}

/* tf_model_forward and tf_model_forward_sample: logits to the host, or
 * tokens drawn on the backend (tokens not NULL). */
static tf_status forward(struct tf_model *m, int R, const int32_t *ids, const int64_t *pos,
			 const int *seq, float *logits, const struct tf_sample_params *params,
			 const int64_t *draw_pos, int32_t *tokens, int n_out, const int *out)
{
	/* n_out < 0: every row's logits; else those of out[0..n_out) */
	tf_status st = tf_cuda_be_use(m->be);
	if (st)
		return st;
	for (int r = 0; r < R; r++) {
		if (ids[r] < 0 || (uint32_t)ids[r] >= m->c.vocab)
			return tf_err(TF_ERR_ARG, "model: token id %d of %u", ids[r], m->c.vocab);
		if ((st = hist_put(m, seq[r], pos[r], ids[r])))
			return st;
	}
	if (!m->dspark) {
		st = tokens ? tf_fwd_run_sample(m->fwd, R, ids, pos, seq, params, draw_pos, tokens, NULL)
		     : n_out >= 0 ? tf_fwd_run_rows(m->fwd, R, ids, pos, seq, n_out, out, logits, NULL)
			    : tf_fwd_run(m->fwd, R, ids, pos, seq, logits);
		return st ? st : tf_phases_round(m->phases, R);
	}
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
	st = tokens ? tf_fwd_run_sample(m->fwd, R, ids, pos, seq, params, draw_pos, tokens, m->taps)
	     : n_out >= 0 ? tf_fwd_run_rows(m->fwd, R, ids, pos, seq, n_out, out, logits, m->taps)
		    : tf_fwd_run_taps(m->fwd, R, ids, pos, seq, logits, m->taps);
	if (!st)
		st = tf_dspark_context(m->dspark, R, m->taps, pos, seq);
	return st ? st : tf_phases_round(m->phases, R);
}

/* A forward call through the mirror: before(), the call, after(). */
static tf_status mirror_run(struct tf_model *m, struct tf_model_call *c, float *logits,
			    int32_t *tokens)
{
	tf_status st = m->mirror.before ? m->mirror.before(m->mirror.ctx, c) : TF_OK;
	if (st)
		return st;
	st = forward(m, c->R, c->ids, c->pos, c->seq, logits, c->params, c->draw_pos, tokens, -1, NULL);
	if (m->mirror.after) {
		c->st = st;
		m->mirror.after(m->mirror.ctx, c);
	}
	return st;
}

uint64_t tf_model_collectives(const struct tf_model *m)
{
	return m->comm ? m->comm->calls : 0;
}

char *tf_model_phases(const struct tf_model *m)
{
	return tf_phases_json(m->phases);
}

tf_status tf_model_forward(struct tf_model *m, int R, const int32_t *ids, const int64_t *pos,
			   const int *seq, float *logits)
{
	if (!logits)
		return tf_err(TF_ERR_ARG, "model: no logits");
	struct tf_model_call c = {.op = TF_MODEL_OP_FORWARD, .R = R, .ids = ids, .pos = pos, .seq = seq};
	return mirror_run(m, &c, logits, NULL);
}

tf_status tf_model_forward_rows(struct tf_model *m, int R, const int32_t *ids, const int64_t *pos,
				const int *seq, int n_out, const int *out, float *logits)
{
	if (!m->mirror.before && !m->mirror.after)
		return forward(m, R, ids, pos, seq, logits, NULL, NULL, NULL, n_out, out);
	/* Mirrored ranks replay plain forward calls: the whole call, then
	 * the rows asked for. */
	bool every;
	tf_status st = tf_fwd_check_out(R, n_out, out, logits, &every);
	if (st)
		return st;
	float *all = tf_alloc_array((size_t)R * m->c.vocab, sizeof *all);
	if (!all)
		return tf_err(TF_ERR_NOMEM, "model: logits of %d rows", R);
	st = tf_model_forward(m, R, ids, pos, seq, all);
	for (int i = 0; i < n_out && !st; i++)
		memcpy(logits + (size_t)i * m->c.vocab, all + (size_t)out[i] * m->c.vocab,
		       sizeof *all * m->c.vocab);
	free(all);
	return st;
}

tf_status tf_model_forward_sample(struct tf_model *m, int R, const int32_t *ids,
				  const int64_t *pos, const int *seq,
				  const struct tf_sample_params *params, const int64_t *draw_pos,
				  int32_t *tokens)
{
	if (!params || !draw_pos || !tokens)
		return tf_err(TF_ERR_ARG, "model: sampling without params, positions or tokens");
	struct tf_model_call c = {.op = TF_MODEL_OP_FORWARD_SAMPLE, .R = R, .ids = ids, .pos = pos,
				  .seq = seq, .params = params, .draw_pos = draw_pos};
	return mirror_run(m, &c, NULL, tokens);
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
	struct tf_model_call c = {.op = TF_MODEL_OP_DRAFT, .R = n, .ids = anchor, .seq = seq,
				  .params = params};
	tf_status st = m->mirror.before ? m->mirror.before(m->mirror.ctx, &c) : TF_OK;
	if (!st)
		st = tf_cuda_be_use(m->be);
	if (!st)
		st = tf_dspark_draft(m->dspark, n, seq, anchor, params, draft, confidence);
	if (m->mirror.after) {
		c.st = st;
		m->mirror.after(m->mirror.ctx, &c);
	}
	return st;
}
