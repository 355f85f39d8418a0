/* forward_attn.c: the forward's attention (dsv41-forward-spec.md §5-§9):
 * projections, the window rows, the compressor's pool rows and index keys,
 * the indexer's selections, the key tables and lists, sparse attention and
 * the output groups; and the DSpark draft rows' attention (§13). */
#include <stdlib.h>

#include "compute/forward_impl.h"

/* ---- attention (§5-§9) ---- */

/* §6: the compressor of KV source L: pool rows and index keys of the groups
 * this call completes; ratio-2 group starts are kept as carries. */
static tf_status compress(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	int R = f->R, src = fwd_src_index(c, L), r = (int)tf_config_ratio(c, L), mark = f->ntmp;
	int64_t hd = c->head_dim, Di = c->index_dim;
	struct tf_tensor *u, *g = NULL, *U, *G = NULL, *lat, *P, *k, *kn, *ik, *wp;
	int32_t *cu = fwd_i32s(R), *cg = fwd_i32s(R), *hx = fwd_i32s(R), *hy = fwd_i32s(R), *wpos = fwd_i32s(R);
	int32_t *prow = fwd_i32s(R);
	tf_status st = cu && cg && hx && hy && wpos && prow ? TF_OK : fwd_nomem();
	if (st || (st = fwd_tmp(f, &u, TF_DT_F32, 2, R, hd, 1)) || (st = fwd_lin(f, &lw->comp_wkv, x, u)))
		goto out;
	if (r == 2 && ((st = fwd_tmp(f, &g, TF_DT_F32, 2, R, hd, 1)) ||
		       (st = fwd_lin(f, &lw->comp_wgate, x, g))))
		goto out;
	int E = 0;
	for (int i = 0; i < R; i++) { /* a group start keeps [u|g] as the carry of p + 1 */
		int64_t p = f->pos[i];
		int64_t cr = r == 2 && p % 2 == 0 ? tf_kv_carry_row(f->kv, f->seq[i], src, p) : -1;
		cu[i] = (int32_t)cr;
		cg[i] = cr < 0 ? -1 : (int32_t)(cr + 1);
		E += (p + 1) % r == 0;
	}
	if (r == 2 && ((st = fwd_move(f, u, NULL, &kvs->carry, cu, R)) ||
		       (st = fwd_move(f, g, NULL, &kvs->carry, cg, R))))
		goto out;
	if (!E)
		goto out;
	if ((st = fwd_tmp(f, &U, TF_DT_F32, 3, E, r, hd)) ||
	    (r == 2 && (st = fwd_tmp(f, &G, TF_DT_F32, 3, E, r, hd))))
		goto out;
	/* U [E, r, hd], G likewise: the completed groups, oldest position first */
	struct tf_tensor U2 = fwd_view2(U, (int64_t)E * r, hd), G2 = G ? fwd_view2(G, (int64_t)E * r, hd) : U2;
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
	if ((st = fwd_move(f, u, hx, &U2, hy, E)))
		goto out;
	if (r == 2) {
		for (int e = 0; e < E; e++)
			hy[e] = e * 2; /* the carried group start: slot 0 */
		if ((st = fwd_move(f, &kvs->carry, cu, &U2, hy, E)) ||
		    (st = fwd_move(f, &kvs->carry, cg, &G2, hy, E)))
			goto out;
		for (int e = 0; e < E; e++)
			hy[e] = e * 2 + 1;
		if ((st = fwd_move(f, g, hx, &G2, hy, E)))
			goto out;
	}
	if ((st = fwd_host(f, &wp, TF_DT_I32, wpos, E)) ||
	    (st = fwd_tmp(f, &lat, TF_DT_BF16, 2, E, hd, 1)) ||
	    (st = be->ops->compressor(be, U, G, &lw->comp_norm, c->eps, lat)) ||
	    (st = fwd_tmp(f, &P, TF_DT_BF16, 2, E, hd, 1)) ||
	    (st = be->ops->rope(be, lat, wp, fwd_freqs(f, L), 0, P)) ||
	    (st = fwd_tmp(f, &k, TF_DT_BF16, 2, E, Di, 1)) || (st = fwd_lin(f, &lw->ix_wk, lat, k)) ||
	    (st = fwd_tmp(f, &kn, TF_DT_BF16, 2, E, Di, 1)) ||
	    (st = be->ops->rmsnorm(be, k, &lw->ix_k_norm, c->eps, kn)) ||
	    (st = fwd_tmp(f, &ik, TF_DT_BF16, 2, E, Di, 1)) ||
	    (st = be->ops->rope(be, kn, wp, fwd_freqs(f, L), 0, ik)) ||
	    (st = fwd_cache_put(f, &kvs->pool_row, P, prow, E, &kvs->pool[src])))
		goto out;
	st = fwd_cache_put(f, &kvs->ik_row, ik, prow, E, &kvs->ik[src]);
out:
	fwd_release(f, mark);
	free(cu);
	free(cg);
	free(hx);
	free(hy);
	free(wpos);
	free(prow);
	return st;
}

/* The physical rows of pool rows 0 .. N - 1 of a sequence's source src,
 * then -1 (skipped) up to n >= N (host bookkeeping; n int32s the caller
 * frees). */
static tf_status pool_rows(struct tf_fwd *f, int seq, int src, int64_t N, int64_t n,
			   int32_t **out)
{
	int32_t *rows = fwd_i32s(n);
	tf_status st = rows ? TF_OK : fwd_nomem();
	for (int64_t j = 0; j < n && !st; j++)
		if (j >= N)
			rows[j] = -1;
		else
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
	int32_t *nvis = fwd_i32s(s->n), *rows = NULL;
	struct tf_tensor *nv, *keys, *sc;
	tf_status st = nvis ? TF_OK : fwd_nomem();
	for (int i = 0; i < s->n && !st; i++)
		nvis[i] = (int32_t)((s->pos0 + i + 1) / r);
	if (st || N == 0) { /* nothing visible yet: no selections */
		for (int i = 0; i < s->n && !st; i++)
			nvis[i] = 0;
		if (!st)
			st = be->ops->upload(be, &ns, nvis);
		goto out;
	}
	int64_t Nb = fwd_bucket(N); /* keys and scores past N are skipped and masked */
	if ((st = fwd_host(f, &nv, TF_DT_I32, nvis, s->n)) ||
	    (st = fwd_tmp(f, &keys, TF_DT_F32, 2, Nb, Di, 1)) ||
	    (st = fwd_tmp(f, &sc, TF_DT_F32, 2, s->n, Nb, 1)) ||
	    (st = pool_rows(f, s->seq, src, N, Nb, &rows)) ||
	    (st = fwd_cache_get(f, &kvs->ik_row, &kvs->ik[src], rows, Nb, keys)))
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
	fwd_release(f, mark);
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
	int R = f->R, kvl = tf_config_kv_source(c, L), src = fwd_src_index(c, (uint32_t)kvl);
	int r = (int)tf_config_ratio(c, (uint32_t)kvl);
	int64_t Hi = c->index_heads, Di = c->index_dim;
	struct tf_tensor *iq, *iqr, *iw;
	tf_status st;
	if ((st = fwd_tmp(f, &iq, TF_DT_BF16, 2, R, Hi * Di, 1)) || (st = fwd_lin(f, &lw->ix_wq_b, qn, iq)) ||
	    (st = fwd_tmp(f, &iqr, TF_DT_BF16, 3, R, Hi, Di)))
		return st;
	struct tf_tensor iq3 = fwd_view3(iq, R, Hi, Di);
	if ((st = be->ops->rope(be, &iq3, pos, fwd_freqs(f, L), 0, iqr)) ||
	    (st = fwd_tmp(f, &iw, TF_DT_F32, 2, R, Hi, 1)) ||
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

/* §8: the rows attend to their selected pool rows, then their window rows
 * (as vLLM orders them), all sequences in one attention call over one key
 * table: every sequence's pool part, then every sequence's window part. A
 * sequence's pool part holds every pool row of the sequence when that is
 * no more than its rows' selections ("direct"), else each row's
 * selections in rows of their own (looked up through the page table on
 * the backend). The direct pool parts are read in one cache read, the
 * window parts in another. */

/* One segment's part of the call's key table and lists. */
struct keys_part {
	int64_t nJ, nwin, N, room; /* pool rows, window rows, visible pool rows, key room */
	int64_t pbase, wbase;      /* its pool and window parts' first table rows */
	int src, direct, pooled;
};

static void keys_plan(const struct tf_fwd *f, uint32_t L, const struct segment *s,
		      struct keys_part *kp)
{
	const struct tf_config *c = f->c;
	int64_t win = c->window, k = c->index_topk;
	int64_t plast = s->pos0 + s->n - 1, wlo = s->pos0 - win + 1 < 0 ? 0 : s->pos0 - win + 1;
	*kp = (struct keys_part){.nwin = plast - wlo + 1, .src = -1, .direct = 1,
				 .pooled = tf_config_mode(c, L) != TF_MODE_SWA};
	if (kp->pooled) {
		int kvl = tf_config_kv_source(c, L);
		kp->src = fwd_src_index(c, (uint32_t)kvl);
		kp->N = (plast + 1) / (int)tf_config_ratio(c, (uint32_t)kvl);
		kp->direct = kp->N <= s->n * k;
		kp->nJ = kp->direct ? fwd_bucket(kp->N) : s->n * k; /* direct: rows past N skipped */
	}
	kp->room = (kp->pooled ? s->n * k : 0) + s->n * win;
}

/* The cache rows of every segment's window part (wrows, in table order
 * from the first window row) and of the direct pool parts (prows, from
 * table row 0; -1 for the rest, read as zeros and overwritten by the
 * selected parts). */
static tf_status keys_rows(struct tf_fwd *f, uint32_t L, const struct keys_part *kp,
			   int32_t *prows, int32_t *wrows)
{
	int64_t win = f->c->window, w0 = kp[0].wbase;
	tf_status st = TF_OK;
	for (int si = 0; si < f->nsegs && !st; si++) {
		const struct segment *s = &f->segs[si];
		int64_t wlo = s->pos0 - win + 1 < 0 ? 0 : s->pos0 - win + 1;
		for (int64_t p = wlo; p < wlo + kp[si].nwin; p++)
			wrows[kp[si].wbase - w0 + p - wlo] =
				(int32_t)tf_kv_window_row(f->kv, s->seq, (int)L, p);
		if (!prows || !kp[si].pooled)
			continue;
		int32_t *pr = prows + kp[si].pbase;
		for (int64_t j = 0; j < kp[si].nJ && !st; j++)
			if (!kp[si].direct || j >= kp[si].N)
				pr[j] = -1;
			else
				st = tf_kv_pool_row(f->kv, s->seq, kp[si].src, j, 0, &pr[j]);
	}
	return st;
}

/* Segment s's selected pool part (not direct: its rows' selections through
 * the page table) and its key lists: key_off rows row0 .. row0 + n of off
 * [R + 1, 1], its keys in idx after the earlier segments' (append). */
static tf_status keys_fill(struct tf_fwd *f, uint32_t L, const struct segment *s,
			   const struct keys_part *kp, struct tf_tensor *tab, struct tf_tensor *off,
			   struct tf_tensor *idx, int append)
{
	struct tf_be *be = f->be;
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	int64_t win = f->c->window, k = f->c->index_topk;
	int mark = f->ntmp;
	struct tf_tensor *phys;
	tf_status st = TF_OK;
	struct tf_tensor sel = tf_tensor_rows_of(f->sel, s->row0, s->n);
	struct tf_tensor ns = tf_tensor_rows_of(f->n_sel, s->row0, s->n);
	if (kp->pooled && !kp->direct) {
		struct tf_tensor pool_part = tf_tensor_rows_of(tab, kp->pbase, kp->nJ);
		struct tf_tensor pt = tf_kv_page_table(f->kv, s->seq);
		struct tf_tensor lsel = tf_tensor_view(&sel, 1, s->n * k);
		if ((st = fwd_tmp(f, &phys, TF_DT_I32, 1, s->n * k, 1, 1)) ||
		    (st = be->ops->page_rows(be, &pt, tf_kv_page_rows(f->kv, kp->src), &lsel, phys)) ||
		    (st = be->ops->cache_read(be, &kvs->pool_row, &kvs->pool[kp->src], phys, &pool_part)))
			goto out;
	}
	/* Once a segment's first row sees a full window (pos0 >= win - 1), its
	 * key lists no longer depend on pos0: every row's window is win rows
	 * at table rows wbase + i .. wbase + i + win - 1. Passing win - 1 then
	 * makes the same keys and the same kernel arguments at every decode
	 * step, so a step's work repeats (ops->graph). */
	int64_t p0 = s->pos0 < win - 1 ? s->pos0 : win - 1;
	struct tf_tensor off_s = tf_tensor_rows_of(off, s->row0, s->n + 1);
	st = be->ops->attn_keys(be, kp->pooled ? &sel : NULL, &ns, kp->direct, p0, (int)win,
				kp->pbase, kp->wbase, append, &off_s, idx);
out:
	fwd_release(f, mark);
	return st;
}

/* Every segment's rows q [R, H, hd] attend; out [R, H, hd] f32. */
static tf_status attend(struct tf_fwd *f, uint32_t L, const struct tf_tensor *q,
			struct tf_tensor *out)
{
	const struct tf_config *c = f->c;
	struct tf_be *be = f->be;
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	int64_t hd = c->head_dim, prows_n = 0, wrows_n = 0, keys = 0;
	int mark = f->ntmp, direct = 0;
	struct keys_part *kp = calloc((size_t)f->nsegs, sizeof *kp);
	int32_t *prows = NULL, *wrows = NULL;
	struct tf_tensor *tab, *off, *idx;
	tf_status st = kp ? TF_OK : fwd_nomem();
	for (int si = 0; si < f->nsegs && !st; si++) {
		keys_plan(f, L, &f->segs[si], &kp[si]);
		kp[si].pbase = prows_n;
		prows_n += kp[si].nJ;
		wrows_n += kp[si].nwin;
		keys += kp[si].room;
		direct |= kp[si].pooled && kp[si].direct && kp[si].N;
	}
	for (int si = 0, w = 0; si < f->nsegs && !st; w += (int)kp[si].nwin, si++)
		kp[si].wbase = prows_n + w;
	if (st || !(wrows = fwd_i32s(wrows_n)) || (direct && !(prows = fwd_i32s(prows_n)))) {
		st = st ? st : fwd_nomem();
		goto out;
	}
	if ((st = keys_rows(f, L, kp, prows, wrows)) ||
	    (st = fwd_tmp(f, &tab, TF_DT_F32, 2, prows_n + wrows_n, hd, 1)) ||
	    (st = fwd_tmp(f, &off, TF_DT_I32, 2, f->R + 1, 1, 1)) ||
	    (st = fwd_tmp(f, &idx, TF_DT_I32, 1, keys, 1, 1)))
		goto out;
	struct tf_tensor pool_part = tf_tensor_rows_of(tab, 0, prows_n);
	struct tf_tensor win_part = tf_tensor_rows_of(tab, prows_n, wrows_n);
	if ((direct && (st = fwd_cache_get(f, &kvs->pool_row, &kvs->pool[kp[0].src], prows, prows_n,
					   &pool_part))) ||
	    (st = fwd_cache_get(f, &kvs->win, &kvs->ring, wrows, wrows_n, &win_part)))
		goto out;
	for (int si = 0; si < f->nsegs && !st; si++)
		st = keys_fill(f, L, &f->segs[si], &kp[si], tab, off, idx, si > 0);
	struct tf_tensor off1 = tf_tensor_view(off, 1, (int64_t)f->R + 1);
	if (!st)
		st = be->ops->attention(be, q, tab, &off1, idx, &f->w->layers[L].sink, out);
out:
	fwd_release(f, mark);
	free(kp);
	free(prows);
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
	int32_t *ctx = fwd_i32s(nctx), *ko = fwd_i32s(n + 1), *ki = fwd_i32s(nk), *self = fwd_i32s(n);
	tf_status st = ctx && ko && ki && self ? TF_OK : fwd_nomem();
	if (st)
		goto out;
	for (int64_t p = lo; p < P; p++)
		ctx[p - lo] = (int32_t)tf_kv_window_row(f->kv, s->seq, (int)L, p);
	for (int64_t i = 0; i < n; i++)
		self[i] = (int32_t)i;
	tf_fwd_draft_keys(P, (int)n, W, ko, ki);
	struct tf_tensor w_s = tf_tensor_rows_of(win, s->row0, n);
	if ((st = fwd_tmp(f, &tab, TF_DT_F32, 2, nctx + n, hd, 1)) ||
	    (st = fwd_host(f, &off, TF_DT_I32, ko, n + 1)) ||
	    (st = fwd_host(f, &idx, TF_DT_I32, ki, nk)) ||
	    (st = fwd_tmp(f, &enc, TF_DT_U8, 2, n, (int64_t)tf_rowfmt_bytes(&kvs->win), 1)) ||
	    (st = fwd_host(f, &ix, TF_DT_I32, self, n)))
		goto out;
	struct tf_tensor ctx_part = tf_tensor_rows_of(tab, 0, nctx), own = tf_tensor_rows_of(tab, nctx, n);
	if ((nctx && (st = fwd_cache_get(f, &kvs->win, &kvs->ring, ctx, nctx, &ctx_part))) ||
	    (st = be->ops->cache_write(be, &kvs->win, &w_s, ix, enc)) ||
	    (st = be->ops->cache_read(be, &kvs->win, enc, ix, &own)))
		goto out;
	struct tf_tensor q_s = tf_tensor_rows_of(q, s->row0, n), o_s = tf_tensor_rows_of(out, s->row0, n);
	st = be->ops->attention(be, &q_s, tab, off, idx, &f->w->layers[L].sink, &o_s);
out:
	fwd_release(f, mark);
	free(ctx);
	free(ko);
	free(ki);
	free(self);
	return st;
}

/* §9: the output groups of hg heads each through their wo_a, into z
 * [R, G * o_lora]: row i's group g (row i G + g of o and z as [R G, ...]
 * views) moved to row g R + i, the G groups through their weights in one
 * experts op (group g = rows g R .. g R + R - 1, expert g), and moved back;
 * groups of mixed codebooks (no experts op takes them) one at a time.
 * o [R, H, hd] bf16. */
static tf_status out_groups(struct tf_fwd *f, uint32_t L, const struct tf_tensor *o,
			    struct tf_tensor *z)
{
	struct tf_be *be = f->be;
	int R = f->R, mark = f->ntmp;
	int64_t G = f->Gl, hg = f->Hl / G, hd = f->c->head_dim, ol = f->c->o_lora;
	struct tf_tensor *og, *zg, *gi, *off;
	int32_t *at = fwd_i32s((int64_t)R * G), *go = fwd_i32s(G + 1);
	tf_status st = at && go ? TF_OK : fwd_nomem();
	for (int64_t g = 0; g < G && !st; g++) /* group g's rows of the [R * G, ...] views */
		for (int i = 0; i < R; i++)
			at[g * R + i] = (int32_t)(i * G + g);
	for (int64_t g = 0; g <= G && !st; g++)
		go[g] = (int32_t)(g * R);
	if (st || (st = fwd_host(f, &gi, TF_DT_I32, at, (int64_t)R * G)) ||
	    (st = fwd_host(f, &off, TF_DT_I32, go, G + 1)) ||
	    (st = fwd_tmp(f, &og, TF_DT_BF16, 2, (int64_t)R * G, hg * hd, 1)) ||
	    (st = fwd_tmp(f, &zg, TF_DT_BF16, 2, (int64_t)R * G, ol, 1)))
		goto out;
	struct tf_tensor ov = fwd_view2(o, (int64_t)R * G, hg * hd), zv = fwd_view2(z, (int64_t)R * G, ol);
	struct tf_tensor ids = tf_tensor_rows_of(&f->eids, 0, G);
	const struct experts *ex = &f->ex[L];
	if (!ex->q[FWD_EX_WO_A] && !ex->w[FWD_EX_WO_A]) {
		for (int64_t g = 0; g < G && !st; g++) {
			struct tf_tensor ix = tf_tensor_rows_of(gi, g * R, R);
			struct tf_tensor og1 = tf_tensor_rows_of(og, 0, R), zg1 = tf_tensor_rows_of(zg, 0, R);
			if (!(st = be->ops->rows_copy(be, &ov, &ix, &og1, NULL)) &&
			    !(st = fwd_lin(f, &f->w->layers[L].wo_a[g], &og1, &zg1)))
				st = be->ops->rows_copy(be, &zg1, NULL, &zv, &ix);
		}
		goto out;
	}
	if ((st = be->ops->rows_copy(be, &ov, gi, og, NULL)))
		goto out;
	st = ex->q[FWD_EX_WO_A]
		? be->ops->exl3_matmul_experts(be, ex->q[FWD_EX_WO_A], (int)G, &ids, off, og, zg)
		: be->ops->linear_experts(be, ex->w[FWD_EX_WO_A], (int)G, &ids, off, og, zg);
	if (!st)
		st = be->ops->rows_copy(be, zg, NULL, &zv, gi);
out:
	fwd_release(f, mark);
	free(at);
	free(go);
	return st;
}

/* §5-§9 for block L: x [R, D] bf16 in, branch [R, D] bf16 out. */
tf_status fwd_attention(struct tf_fwd *f, uint32_t L, const struct tf_tensor *x,
			   struct tf_tensor *branch)
{
	const struct tf_config *c = f->c;
	const struct tf_fwd_layer *lw = &f->w->layers[L];
	struct tf_be *be = f->be;
	struct tf_kv_store *kvs = tf_kv_store(f->kv);
	int R = f->R, mark = f->ntmp;
	int64_t hd = c->head_dim, H = f->Hl, G = f->Gl, ol = c->o_lora;
	struct tf_tensor *pos = f->pos32, *qa, *qn, *kv, *kvn, *win, *q, *qr, *o32, *o, *z;
	int32_t *wrows = fwd_i32s(R);
	tf_status st = wrows ? TF_OK : fwd_nomem();
	if (st || (st = fwd_tmp(f, &qa, TF_DT_BF16, 2, R, c->q_lora, 1)) ||
	    (st = fwd_lin(f, &lw->wq_a, x, qa)) ||
	    (st = fwd_tmp(f, &qn, TF_DT_BF16, 2, R, c->q_lora, 1)) ||
	    (st = be->ops->rmsnorm(be, qa, &lw->q_norm, c->eps, qn)) ||
	    (st = fwd_tmp(f, &kv, TF_DT_BF16, 2, R, hd, 1)) || (st = fwd_lin(f, &lw->wkv, x, kv)) ||
	    (st = fwd_tmp(f, &kvn, TF_DT_BF16, 2, R, hd, 1)) ||
	    (st = be->ops->rmsnorm(be, kv, &lw->kv_norm, c->eps, kvn)) ||
	    (st = fwd_tmp(f, &win, TF_DT_BF16, 2, R, hd, 1)) ||
	    (st = be->ops->rope(be, kvn, pos, fwd_freqs(f, L), 0, win)))
		goto out;
	for (int i = 0; i < R; i++)
		wrows[i] = (int32_t)tf_kv_window_row(f->kv, f->seq[i], (int)L, f->pos[i]);
	/* the window rows, before anything reads them */
	if ((!f->draft && (st = fwd_cache_put(f, &kvs->win, win, wrows, R, &kvs->ring))) ||
	    (st = fwd_tmp(f, &q, TF_DT_BF16, 2, R, H * hd, 1)) || (st = fwd_lin(f, &lw->wq_b, qn, q)) ||
	    (st = fwd_tmp(f, &qr, TF_DT_BF16, 3, R, H, hd)))
		goto out;
	struct tf_tensor q3 = fwd_view3(q, R, H, hd);
	if ((st = be->ops->rope(be, &q3, pos, fwd_freqs(f, L), 0, qr)))
		goto out;
	if (tf_config_is_kv_source(c, L) && (st = compress(f, L, x)))
		goto out;
	enum tf_layer_mode mode = tf_config_mode(c, L);
	if ((mode == TF_MODE_FULL || mode == TF_MODE_REINDEX) &&
	    (st = index_select(f, L, x, qn, pos)))
		goto out;
	if ((st = fwd_tmp(f, &o32, TF_DT_F32, 3, R, H, hd)))
		goto out;
	if (f->draft)
		for (int si = 0; si < f->nsegs && !st; si++)
			st = attend_draft(f, L, &f->segs[si], qr, win, o32);
	else
		st = attend(f, L, qr, o32);
	if (st || (st = fwd_tmp(f, &o, TF_DT_BF16, 3, R, H, hd)) ||
	    (st = be->ops->rope(be, o32, pos, fwd_freqs(f, L), 1, o)) ||
	    (st = fwd_tmp(f, &z, TF_DT_BF16, 2, R, G * ol, 1)) || (st = out_groups(f, L, o, z)))
		goto out;
	st = fwd_lin_sum(f, &lw->wo_b, z, branch);
out:
	fwd_release(f, mark);
	free(wrows);
	return st;
}

