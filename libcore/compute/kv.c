/* kv.c: the paged KV cache, its window rings and carries, and the row
 * quantisers (kv.h). */
#include "compute/kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/f16.h"
#include "model/engram_rows.h"

struct seq {
	int open;
	int64_t len;       /* positions kept */
	int64_t reserved;  /* positions with pages */
	int32_t *pt;       /* page table: logical page -> physical page */
	uint8_t *ring;     /* [layers][TF_KV_RING][win_bytes] */
	float *carry;      /* [sources][TF_KV_CARRY][2 * dim] (ratio-2 sources only used) */
};

struct tf_kv {
	struct tf_kv_config cfg;
	size_t win_bytes, pool_bytes, ik_bytes;
	int64_t max_pages;           /* page-table entries per sequence */
	uint8_t *pool[TF_KV_MAX_SRC];/* [pages][TF_KV_PAGE / r][pool_bytes] */
	uint8_t *ik[TF_KV_MAX_SRC];  /* [pages][TF_KV_PAGE / r][ik_bytes] */
	int32_t *refs;               /* per physical page */
	int32_t *free_list;          /* stack of free pages */
	int64_t n_free;
	struct seq *seqs;
};

/* ---- the cache ---- */

static tf_status check_config(const struct tf_kv_config *c)
{
	if (c->layers < 0 || c->dim <= 0 || c->rope < 0 || c->rope > c->dim)
		return tf_err(TF_ERR_CONFIG, "kv: dim %d with rope %d", c->dim, c->rope);
	if (c->window < 1 || c->window > TF_KV_RING)
		return tf_err(TF_ERR_CONFIG, "kv: window %d (1..%d)", c->window, TF_KV_RING);
	if (c->sources < 0 || c->sources > TF_KV_MAX_SRC)
		return tf_err(TF_ERR_CONFIG, "kv: %d sources (0..%d)", c->sources, TF_KV_MAX_SRC);
	for (int s = 0; s < c->sources; s++)
		if (c->ratio[s] != 1 && c->ratio[s] != 2)
			return tf_err(TF_ERR_CONFIG, "kv: source %d has ratio %d (1 or 2)", s,
				      c->ratio[s]);
	if (c->window_fmt != TF_KV_FP8 && c->window_fmt != TF_KV_BF16)
		return tf_err(TF_ERR_CONFIG, "kv: window rows are FP8 or BF16");
	if (c->pool_fmt != TF_KV_FP8 && c->pool_fmt != TF_KV_FP4 && c->pool_fmt != TF_KV_BF16)
		return tf_err(TF_ERR_CONFIG, "kv: pool rows are FP8, FP4 or BF16");
	if (c->pool_fmt == TF_KV_FP4 && (c->dim - c->rope) % 2)
		return tf_err(TF_ERR_CONFIG, "kv: FP4 rows need an even number of values");
	if (c->index_fmt != TF_KV_FP8 && c->index_fmt != TF_KV_BF16)
		return tf_err(TF_ERR_CONFIG, "kv: index keys are FP8 or BF16");
	if (c->sources && (c->index_dim <= 0 || c->pages < 1))
		return tf_err(TF_ERR_CONFIG, "kv: index dim %d, %lld pages", c->index_dim,
			      (long long)c->pages);
	if (c->slots < 1 || c->max_positions < 1)
		return tf_err(TF_ERR_CONFIG, "kv: %d slots of %lld positions", c->slots,
			      (long long)c->max_positions);
	return TF_OK;
}

void tf_kv_free(struct tf_kv *kv)
{
	if (!kv)
		return;
	for (int s = 0; s < TF_KV_MAX_SRC; s++) {
		free(kv->pool[s]);
		free(kv->ik[s]);
	}
	if (kv->seqs)
		for (int i = 0; i < kv->cfg.slots; i++) {
			free(kv->seqs[i].pt);
			free(kv->seqs[i].ring);
			free(kv->seqs[i].carry);
		}
	free(kv->seqs);
	free(kv->refs);
	free(kv->free_list);
	free(kv);
}

tf_status tf_kv_new(const struct tf_kv_config *cfg, struct tf_kv **out)
{
	*out = NULL;
	tf_status st = check_config(cfg);
	if (st)
		return st;
	struct tf_kv *kv = calloc(1, sizeof *kv);
	if (!kv)
		return tf_err(TF_ERR_NOMEM, "kv: out of memory");
	kv->cfg = *cfg;
	if (!cfg->sources)
		kv->cfg.pages = 0;
	kv->win_bytes = tf_kv_row_bytes(cfg->window_fmt, cfg->dim, cfg->rope);
	kv->pool_bytes = tf_kv_row_bytes(cfg->pool_fmt, cfg->dim, cfg->rope);
	kv->ik_bytes = tf_kv_ik_bytes(cfg->index_fmt, cfg->index_dim);
	kv->max_pages = (cfg->max_positions + TF_KV_PAGE - 1) / TF_KV_PAGE;
	int64_t P = kv->cfg.pages;
	kv->refs = tf_calloc((size_t)(P ? P : 1), sizeof *kv->refs);
	kv->free_list = tf_alloc_array((size_t)(P ? P : 1), sizeof *kv->free_list);
	kv->seqs = tf_calloc((size_t)cfg->slots, sizeof *kv->seqs);
	if (!kv->refs || !kv->free_list || !kv->seqs)
		goto nomem;
	for (int s = 0; s < cfg->sources; s++) {
		size_t rows = (size_t)(TF_KV_PAGE / cfg->ratio[s]);
		kv->pool[s] = tf_calloc((size_t)P * rows, kv->pool_bytes);
		kv->ik[s] = tf_calloc((size_t)P * rows, kv->ik_bytes);
		if (!kv->pool[s] || !kv->ik[s])
			goto nomem;
	}
	for (int64_t p = 0; p < P; p++)
		kv->free_list[p] = (int32_t)(P - 1 - p); /* page 0 comes out first */
	kv->n_free = P;
	for (int i = 0; i < cfg->slots; i++) {
		struct seq *q = &kv->seqs[i];
		q->pt = tf_alloc_array((size_t)(kv->max_pages ? kv->max_pages : 1), sizeof *q->pt);
		q->ring = tf_calloc((size_t)cfg->layers * TF_KV_RING, kv->win_bytes ? kv->win_bytes : 1);
		q->carry = tf_calloc((size_t)cfg->sources * TF_KV_CARRY + 1,
				     2 * (size_t)cfg->dim * sizeof(float));
		if (!q->pt || !q->ring || !q->carry)
			goto nomem;
	}
	*out = kv;
	return TF_OK;
nomem:
	tf_kv_free(kv);
	return tf_err(TF_ERR_NOMEM, "kv: out of memory for %lld pages and %d slots",
		      (long long)cfg->pages, cfg->slots);
}

const struct tf_kv_config *tf_kv_config(const struct tf_kv *kv)
{
	return &kv->cfg;
}

int64_t tf_kv_free_pages(const struct tf_kv *kv)
{
	return kv->n_free;
}

static int32_t page_take(struct tf_kv *kv)
{
	if (!kv->n_free)
		return -1;
	int32_t p = kv->free_list[--kv->n_free];
	kv->refs[p] = 1;
	return p;
}

static void page_drop(struct tf_kv *kv, int32_t p)
{
	if (--kv->refs[p] == 0)
		kv->free_list[kv->n_free++] = p;
}

static void page_copy(struct tf_kv *kv, int32_t dst, int32_t src)
{
	for (int s = 0; s < kv->cfg.sources; s++) {
		size_t rows = (size_t)(TF_KV_PAGE / kv->cfg.ratio[s]);
		memcpy(kv->pool[s] + (size_t)dst * rows * kv->pool_bytes,
		       kv->pool[s] + (size_t)src * rows * kv->pool_bytes, rows * kv->pool_bytes);
		memcpy(kv->ik[s] + (size_t)dst * rows * kv->ik_bytes,
		       kv->ik[s] + (size_t)src * rows * kv->ik_bytes, rows * kv->ik_bytes);
	}
}

static struct seq *seq_of(const struct tf_kv *kv, int seq)
{
	return seq >= 0 && seq < kv->cfg.slots && kv->seqs[seq].open ? &kv->seqs[seq] : NULL;
}

tf_status tf_kv_open(struct tf_kv *kv, int *seq)
{
	for (int i = 0; i < kv->cfg.slots; i++)
		if (!kv->seqs[i].open) {
			kv->seqs[i].open = 1;
			kv->seqs[i].len = 0;
			kv->seqs[i].reserved = 0;
			*seq = i;
			return TF_OK;
		}
	return tf_err(TF_ERR_UNAVAILABLE, "kv: all %d sequence slots are taken", kv->cfg.slots);
}

static int64_t pages_for(const struct tf_kv *kv, int64_t n)
{
	return kv->cfg.sources ? (n + TF_KV_PAGE - 1) / TF_KV_PAGE : 0;
}

void tf_kv_close(struct tf_kv *kv, int seq)
{
	struct seq *q = seq_of(kv, seq);
	if (!q)
		return;
	for (int64_t i = 0; i < pages_for(kv, q->reserved); i++)
		page_drop(kv, q->pt[i]);
	q->open = 0;
	q->len = q->reserved = 0;
}

tf_status tf_kv_reserve(struct tf_kv *kv, int seq, int64_t n)
{
	struct seq *q = seq_of(kv, seq);
	if (!q)
		return tf_err(TF_ERR_ARG, "kv: sequence %d is not open", seq);
	if (n > kv->cfg.max_positions)
		return tf_err(TF_ERR_RANGE, "kv: %lld positions past the limit of %lld",
			      (long long)n, (long long)kv->cfg.max_positions);
	int64_t have = pages_for(kv, q->reserved), need = pages_for(kv, n);
	if (need - have > kv->n_free)
		return tf_err(TF_ERR_UNAVAILABLE, "kv: %lld pages needed, %lld free",
			      (long long)(need - have), (long long)kv->n_free);
	for (int64_t i = have; i < need; i++)
		q->pt[i] = page_take(kv);
	if (n > q->reserved)
		q->reserved = n;
	return TF_OK;
}

int64_t tf_kv_len(const struct tf_kv *kv, int seq)
{
	const struct seq *q = seq_of(kv, seq);
	return q ? q->len : 0;
}

tf_status tf_kv_commit(struct tf_kv *kv, int seq, int64_t n)
{
	struct seq *q = seq_of(kv, seq);
	if (!q || n < 0 || n > q->reserved)
		return tf_err(TF_ERR_ARG, "kv: commit %lld positions of sequence %d (reserved %lld)",
			      (long long)n, seq, q ? (long long)q->reserved : 0LL);
	q->len = n;
	return TF_OK;
}

tf_status tf_kv_rollback(struct tf_kv *kv, int seq, int64_t pos)
{
	struct seq *q = seq_of(kv, seq);
	if (!q || pos < 0 || pos > q->len)
		return tf_err(TF_ERR_ARG, "kv: roll sequence %d back to %lld (length %lld)", seq,
			      (long long)pos, q ? (long long)q->len : 0LL);
	int64_t depth = TF_KV_RING - kv->cfg.window;
	if (q->len - pos > depth && pos > 0)
		return tf_err(TF_ERR_RANGE,
			      "kv: rolling back %lld positions; the window ring keeps %lld",
			      (long long)(q->len - pos), (long long)depth);
	int64_t keep = pages_for(kv, pos);
	for (int64_t i = keep; i < pages_for(kv, q->reserved); i++)
		page_drop(kv, q->pt[i]);
	q->len = q->reserved = pos;
	return TF_OK;
}

tf_status tf_kv_fork(struct tf_kv *kv, int src, int *dst)
{
	struct seq *a = seq_of(kv, src);
	if (!a)
		return tf_err(TF_ERR_ARG, "kv: sequence %d is not open", src);
	int64_t n = pages_for(kv, a->len), full = kv->cfg.sources ? a->len / TF_KV_PAGE : 0;
	if (n > full && kv->n_free < 1)
		return tf_err(TF_ERR_UNAVAILABLE, "kv: no free page to fork sequence %d", src);
	int d;
	tf_status st = tf_kv_open(kv, &d);
	if (st)
		return st;
	a = &kv->seqs[src];
	struct seq *b = &kv->seqs[d];
	for (int64_t i = 0; i < full; i++) {
		b->pt[i] = a->pt[i];
		kv->refs[a->pt[i]]++;
	}
	if (n > full) {
		b->pt[full] = page_take(kv);
		page_copy(kv, b->pt[full], a->pt[full]);
	}
	b->len = b->reserved = a->len;
	memcpy(b->ring, a->ring, (size_t)kv->cfg.layers * TF_KV_RING * kv->win_bytes);
	memcpy(b->carry, a->carry,
	       (size_t)kv->cfg.sources * TF_KV_CARRY * 2 * (size_t)kv->cfg.dim * sizeof(float));
	*dst = d;
	return TF_OK;
}

void tf_kv_window_put(struct tf_kv *kv, int seq, int layer, int64_t pos, const float *row)
{
	struct seq *q = &kv->seqs[seq];
	uint8_t *r = q->ring + ((size_t)layer * TF_KV_RING + (size_t)(pos % TF_KV_RING)) * kv->win_bytes;
	tf_kv_row_encode(kv->cfg.window_fmt, row, kv->cfg.dim, kv->cfg.rope, r);
}

void tf_kv_window_get(const struct tf_kv *kv, int seq, int layer, int64_t pos, float *row)
{
	const struct seq *q = &kv->seqs[seq];
	const uint8_t *r =
		q->ring + ((size_t)layer * TF_KV_RING + (size_t)(pos % TF_KV_RING)) * kv->win_bytes;
	tf_kv_row_decode(kv->cfg.window_fmt, r, kv->cfg.dim, kv->cfg.rope, row);
}

/* The bytes of pool row w of src (ik selects the index-key region); on a
 * put, a shared page is copied first. NULL with a status in *st. */
static uint8_t *row_at(struct tf_kv *kv, int seq, int src, int64_t w, int ik, int put,
		       tf_status *st)
{
	struct seq *q = seq_of(kv, seq);
	*st = TF_OK;
	if (!q || src < 0 || src >= kv->cfg.sources || w < 0) {
		*st = tf_err(TF_ERR_ARG, "kv: sequence %d source %d row %lld", seq, src,
			     (long long)w);
		return NULL;
	}
	int r = kv->cfg.ratio[src];
	int64_t pos = w * r, page = pos / TF_KV_PAGE, rows = TF_KV_PAGE / r;
	if (pos >= q->reserved) {
		*st = tf_err(TF_ERR_RANGE, "kv: row %lld of source %d is past the reserved %lld positions",
			     (long long)w, src, (long long)q->reserved);
		return NULL;
	}
	int32_t p = q->pt[page];
	if (put && kv->refs[p] > 1) { /* copy on write */
		int32_t np = page_take(kv);
		if (np < 0) {
			*st = tf_err(TF_ERR_UNAVAILABLE, "kv: no free page to copy a shared one");
			return NULL;
		}
		page_copy(kv, np, p);
		page_drop(kv, p);
		q->pt[page] = p = np;
	}
	size_t bytes = ik ? kv->ik_bytes : kv->pool_bytes;
	uint8_t *base = ik ? kv->ik[src] : kv->pool[src];
	return base + ((size_t)p * (size_t)rows + (size_t)(w % rows)) * bytes;
}

tf_status tf_kv_pool_put(struct tf_kv *kv, int seq, int src, int64_t w, const float *row)
{
	tf_status st;
	uint8_t *r = row_at(kv, seq, src, w, 0, 1, &st);
	if (r)
		tf_kv_row_encode(kv->cfg.pool_fmt, row, kv->cfg.dim, kv->cfg.rope, r);
	return st;
}

tf_status tf_kv_pool_get(const struct tf_kv *kv, int seq, int src, int64_t w, float *row)
{
	tf_status st;
	uint8_t *r = row_at((struct tf_kv *)kv, seq, src, w, 0, 0, &st);
	if (r)
		tf_kv_row_decode(kv->cfg.pool_fmt, r, kv->cfg.dim, kv->cfg.rope, row);
	return st;
}

tf_status tf_kv_ik_put(struct tf_kv *kv, int seq, int src, int64_t w, const float *key)
{
	tf_status st;
	uint8_t *r = row_at(kv, seq, src, w, 1, 1, &st);
	if (r)
		tf_kv_ik_encode(kv->cfg.index_fmt, key, kv->cfg.index_dim, r);
	return st;
}

tf_status tf_kv_ik_get(const struct tf_kv *kv, int seq, int src, int64_t w, float *key)
{
	tf_status st;
	uint8_t *r = row_at((struct tf_kv *)kv, seq, src, w, 1, 0, &st);
	if (r)
		tf_kv_ik_decode(kv->cfg.index_fmt, r, kv->cfg.index_dim, key);
	return st;
}

float *tf_kv_carry(struct tf_kv *kv, int seq, int src, int64_t pos)
{
	struct seq *q = &kv->seqs[seq];
	size_t slot = (size_t)src * TF_KV_CARRY + (size_t)((pos / 2) % TF_KV_CARRY);
	return q->carry + slot * 2 * (size_t)kv->cfg.dim;
}
