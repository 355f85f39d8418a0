/* kv.c: the paged KV cache, its window rings and carries, and the row
 * quantisers (kv.h). */
#include "compute/kv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"

/* Host bookkeeping of one sequence slot. */
struct seq {
	int open;
	int64_t len;       /* positions kept */
	int64_t reserved;  /* positions with pages */
	int32_t *pt;       /* page table: logical page -> physical page (the
			    * store's pt row mirrors it) */
};

struct tf_kv {
	struct tf_kv_config cfg;
	struct tf_be *be;            /* where the store lives (borrowed) */
	struct tf_kv_store st;       /* backend tensors (kv.h) */
	int64_t max_pages;           /* page-table entries per sequence */
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
	int ring = c->ring ? c->ring : TF_KV_RING;
	if (c->ring < 0 || c->ring > (1 << 20))
		return tf_err(TF_ERR_CONFIG, "kv: ring of %d rows", c->ring);
	if (c->window < 1 || c->window > ring)
		return tf_err(TF_ERR_CONFIG, "kv: window %d (1..%d, the ring)", c->window, ring);
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

static void release(struct tf_kv *kv, struct tf_tensor *t)
{
	if (t->data)
		kv->be->ops->release(kv->be, t);
}

void tf_kv_free(struct tf_kv *kv)
{
	if (!kv)
		return;
	struct tf_kv_store *st = &kv->st;
	for (int s = 0; s < TF_KV_MAX_SRC; s++) {
		release(kv, &st->pool[s]);
		release(kv, &st->ik[s]);
	}
	release(kv, &st->ring);
	release(kv, &st->carry);
	release(kv, &st->pt);
	if (kv->seqs)
		for (int i = 0; i < kv->cfg.slots; i++)
			free(kv->seqs[i].pt);
	free(kv->seqs);
	free(kv->refs);
	free(kv->free_list);
	free(kv);
}

/* Carry groups kept per ratio-2 source: a pass's group starts (ring -
 * window positions at most) must not share a carry. */
static int64_t carry_groups(const struct tf_kv *kv)
{
	return kv->cfg.ring / 2 > TF_KV_CARRY ? kv->cfg.ring / 2 : TF_KV_CARRY;
}

/* The store's tensors, zeroed by the backend. */
static tf_status store_new(struct tf_kv *kv)
{
	const struct tf_kv_config *c = &kv->cfg;
	struct tf_kv_store *st = &kv->st;
	struct tf_be *be = kv->be;
	int64_t P = c->pages, slots = c->slots;
	tf_status rc;
	st->win = (struct tf_rowfmt){c->window_fmt, c->dim, c->rope, 0};
	st->pool_row = (struct tf_rowfmt){c->pool_fmt, c->dim, c->rope, 0};
	st->ik_row = (struct tf_rowfmt){c->index_fmt, c->index_dim, 0, 1};
	int64_t wb = (int64_t)tf_rowfmt_bytes(&st->win), ring = slots * (c->layers ? c->layers : 1);
	if ((rc = tf_be_tensor(be, &st->ring, TF_DT_U8, 2, ring * c->ring, wb)) ||
	    (rc = tf_be_tensor(be, &st->carry, TF_DT_F32, 2,
			       slots * (c->sources ? c->sources : 1) * carry_groups(kv) * 2,
			       (int64_t)c->dim)) ||
	    (rc = tf_be_tensor(be, &st->pt, TF_DT_I32, 2, slots, kv->max_pages ? kv->max_pages : 1)))
		return rc;
	for (int s = 0; s < c->sources; s++) {
		int64_t rows = P * (TF_KV_PAGE / c->ratio[s]);
		if ((rc = tf_be_tensor(be, &st->pool[s], TF_DT_U8, 2, rows,
				       (int64_t)tf_rowfmt_bytes(&st->pool_row))) ||
		    (rc = tf_be_tensor(be, &st->ik[s], TF_DT_U8, 2, rows,
				       (int64_t)tf_rowfmt_bytes(&st->ik_row))))
			return rc;
	}
	return TF_OK;
}

tf_status tf_kv_new(struct tf_be *be, const struct tf_kv_config *cfg, struct tf_kv **out)
{
	*out = NULL;
	tf_status st = check_config(cfg);
	if (st)
		return st;
	struct tf_kv *kv = calloc(1, sizeof *kv);
	if (!kv)
		return tf_err(TF_ERR_NOMEM, "kv: out of memory");
	kv->cfg = *cfg;
	if (!kv->cfg.ring)
		kv->cfg.ring = TF_KV_RING;
	kv->be = be;
	if (!cfg->sources)
		kv->cfg.pages = 0;
	kv->max_pages = (cfg->max_positions + TF_KV_PAGE - 1) / TF_KV_PAGE;
	int64_t P = kv->cfg.pages;
	kv->refs = tf_calloc((size_t)(P ? P : 1), sizeof *kv->refs);
	kv->free_list = tf_alloc_array((size_t)(P ? P : 1), sizeof *kv->free_list);
	kv->seqs = tf_calloc((size_t)cfg->slots, sizeof *kv->seqs);
	if (!kv->refs || !kv->free_list || !kv->seqs)
		goto nomem;
	for (int64_t p = 0; p < P; p++)
		kv->free_list[p] = (int32_t)(P - 1 - p); /* page 0 comes out first */
	kv->n_free = P;
	for (int i = 0; i < cfg->slots; i++) {
		struct seq *q = &kv->seqs[i];
		q->pt = tf_calloc((size_t)(kv->max_pages ? kv->max_pages : 1), sizeof *q->pt);
		if (!q->pt)
			goto nomem;
	}
	if ((st = store_new(kv))) {
		tf_kv_free(kv);
		return tf_err_wrap(st, "kv: %lld pages and %d slots: ", (long long)cfg->pages,
				   cfg->slots);
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

struct tf_kv_store *tf_kv_store(struct tf_kv *kv)
{
	return &kv->st;
}

struct tf_be *tf_kv_backend(const struct tf_kv *kv)
{
	return kv->be;
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

/* Rows [r0, r0 + n) of t onto rows [d0, d0 + n): a backend move. */
static tf_status move_rows(struct tf_kv *kv, struct tf_tensor *t, int64_t r0, int64_t d0, int64_t n)
{
	struct tf_tensor a = tf_tensor_rows_of(t, r0, n), b = tf_tensor_rows_of(t, d0, n);
	return kv->be->ops->rows_copy(kv->be, &a, NULL, &b, NULL);
}

static tf_status page_copy(struct tf_kv *kv, int32_t dst, int32_t src)
{
	tf_status st = TF_OK;
	for (int s = 0; s < kv->cfg.sources && !st; s++) {
		int64_t rows = TF_KV_PAGE / kv->cfg.ratio[s];
		if (!(st = move_rows(kv, &kv->st.pool[s], src * rows, dst * rows, rows)))
			st = move_rows(kv, &kv->st.ik[s], src * rows, dst * rows, rows);
	}
	return st;
}

/* Hand sequence seq's page table to the store's copy. */
static tf_status pt_sync(struct tf_kv *kv, int seq)
{
	struct tf_tensor row = tf_tensor_rows_of(&kv->st.pt, seq, 1);
	return kv->be->ops->upload(kv->be, &row, kv->seqs[seq].pt);
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
	return need > have ? pt_sync(kv, seq) : TF_OK;
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
	int64_t depth = kv->cfg.ring - kv->cfg.window;
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

/* The ring rows of one slot, and its carry rows. */
static int64_t ring_rows(const struct tf_kv *kv)
{
	return (int64_t)(kv->cfg.layers ? kv->cfg.layers : 1) * kv->cfg.ring;
}

static int64_t carry_rows(const struct tf_kv *kv)
{
	return (int64_t)(kv->cfg.sources ? kv->cfg.sources : 1) * carry_groups(kv) * 2;
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
	if (n > full)
		b->pt[full] = page_take(kv);
	b->len = b->reserved = a->len;
	if ((n > full && (st = page_copy(kv, b->pt[full], a->pt[full]))) ||
	    (st = move_rows(kv, &kv->st.ring, src * ring_rows(kv), d * ring_rows(kv), ring_rows(kv))) ||
	    (st = move_rows(kv, &kv->st.carry, src * carry_rows(kv), d * carry_rows(kv),
			    carry_rows(kv))) ||
	    (n && (st = pt_sync(kv, d)))) {
		tf_kv_close(kv, d);
		return st;
	}
	*dst = d;
	return TF_OK;
}

int64_t tf_kv_window_row(const struct tf_kv *kv, int seq, int layer, int64_t pos)
{
	return (int64_t)seq * ring_rows(kv) + (int64_t)layer * kv->cfg.ring + pos % kv->cfg.ring;
}

int64_t tf_kv_carry_row(const struct tf_kv *kv, int seq, int src, int64_t pos)
{
	int64_t g = carry_groups(kv);
	return (int64_t)seq * carry_rows(kv) + ((int64_t)src * g + (pos / 2) % g) * 2;
}

int tf_kv_page_rows(const struct tf_kv *kv, int src)
{
	return TF_KV_PAGE / kv->cfg.ratio[src];
}

struct tf_tensor tf_kv_page_table(struct tf_kv *kv, int seq)
{
	struct tf_tensor row = tf_tensor_rows_of(&kv->st.pt, seq, 1);
	return tf_tensor_view(&row, 1, kv->max_pages ? kv->max_pages : (int64_t)1);
}

tf_status tf_kv_pool_row(struct tf_kv *kv, int seq, int src, int64_t w, int put, int32_t *row)
{
	struct seq *q = seq_of(kv, seq);
	*row = -1;
	if (!q || src < 0 || src >= kv->cfg.sources || w < 0)
		return tf_err(TF_ERR_ARG, "kv: sequence %d source %d row %lld", seq, src,
			      (long long)w);
	int r = kv->cfg.ratio[src];
	int64_t pos = w * r, page = pos / TF_KV_PAGE, rows = TF_KV_PAGE / r;
	if (pos >= q->reserved)
		return tf_err(TF_ERR_RANGE, "kv: row %lld of source %d is past the reserved %lld positions",
			      (long long)w, src, (long long)q->reserved);
	int32_t p = q->pt[page];
	if (put && kv->refs[p] > 1) { /* copy on write */
		int32_t np = page_take(kv);
		if (np < 0)
			return tf_err(TF_ERR_UNAVAILABLE, "kv: no free page to copy a shared one");
		tf_status st = page_copy(kv, np, p);
		page_drop(kv, p);
		q->pt[page] = p = np;
		if (st || (st = pt_sync(kv, seq)))
			return st;
	}
	*row = (int32_t)((int64_t)p * rows + w % rows);
	return TF_OK;
}

/* ---- single rows from the host (tests and tools; each is a round trip) ---- */

/* Quantise one host row into row `at` of cache, or read it back. */
static tf_status row_io(struct tf_kv *kv, const struct tf_rowfmt *f, struct tf_tensor *cache,
			int64_t at, float *row, int put)
{
	struct tf_be *be = kv->be;
	struct tf_tensor x = {0}, idx = {0};
	int32_t i32 = (int32_t)at;
	tf_status st;
	if (!(st = tf_be_tensor(be, &x, TF_DT_F32, 2, (int64_t)1, (int64_t)f->dim)) &&
	    !(st = tf_be_tensor(be, &idx, TF_DT_I32, 1, (int64_t)1)) &&
	    !(st = be->ops->upload(be, &idx, &i32))) {
		if (put && !(st = be->ops->upload(be, &x, row)))
			st = be->ops->cache_write(be, f, &x, &idx, cache);
		else if (!put && !(st = be->ops->cache_read(be, f, cache, &idx, &x)))
			st = be->ops->download(be, &x, row);
	}
	be->ops->release(be, &x);
	be->ops->release(be, &idx);
	return st;
}

tf_status tf_kv_window_put(struct tf_kv *kv, int seq, int layer, int64_t pos, const float *row)
{
	return row_io(kv, &kv->st.win, &kv->st.ring, tf_kv_window_row(kv, seq, layer, pos),
		      (float *)row, 1);
}

tf_status tf_kv_window_get(struct tf_kv *kv, int seq, int layer, int64_t pos, float *row)
{
	return row_io(kv, &kv->st.win, &kv->st.ring, tf_kv_window_row(kv, seq, layer, pos), row, 0);
}

/* Pool rows (ik 0) or index keys (ik 1) from the host. */
static tf_status pool_io(struct tf_kv *kv, int seq, int src, int64_t w, float *row, int ik, int put)
{
	int32_t at;
	tf_status st = tf_kv_pool_row(kv, seq, src, w, put, &at);
	if (st)
		return st;
	return ik ? row_io(kv, &kv->st.ik_row, &kv->st.ik[src], at, row, put)
		  : row_io(kv, &kv->st.pool_row, &kv->st.pool[src], at, row, put);
}

tf_status tf_kv_pool_put(struct tf_kv *kv, int seq, int src, int64_t w, const float *row)
{
	return pool_io(kv, seq, src, w, (float *)row, 0, 1);
}

tf_status tf_kv_pool_get(struct tf_kv *kv, int seq, int src, int64_t w, float *row)
{
	return pool_io(kv, seq, src, w, row, 0, 0);
}

tf_status tf_kv_ik_put(struct tf_kv *kv, int seq, int src, int64_t w, const float *key)
{
	return pool_io(kv, seq, src, w, (float *)key, 1, 1);
}

tf_status tf_kv_ik_get(struct tf_kv *kv, int seq, int src, int64_t w, float *key)
{
	return pool_io(kv, seq, src, w, key, 1, 0);
}

/* The carry rows u, g of the group starting at pos, to or from the host. */
static tf_status carry_io(struct tf_kv *kv, int seq, int src, int64_t pos, float *ug, int put)
{
	struct tf_be *be = kv->be;
	struct tf_tensor rows = tf_tensor_rows_of(&kv->st.carry, tf_kv_carry_row(kv, seq, src, pos), 2);
	if (!seq_of(kv, seq) || src < 0 || src >= kv->cfg.sources)
		return tf_err(TF_ERR_ARG, "kv: carry of sequence %d source %d", seq, src);
	return put ? be->ops->upload(be, &rows, ug) : be->ops->download(be, &rows, ug);
}

tf_status tf_kv_carry_put(struct tf_kv *kv, int seq, int src, int64_t pos, const float *ug)
{
	return carry_io(kv, seq, src, pos, (float *)ug, 1);
}

tf_status tf_kv_carry_get(struct tf_kv *kv, int seq, int src, int64_t pos, float *ug)
{
	return carry_io(kv, seq, src, pos, ug, 0);
}
