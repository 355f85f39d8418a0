/* cpu_attn.c: the CPU attention ops: sparse MQA with sinks, the compressor's
 * pooling and norm, indexer scores, top-k selection and candidate blocks
 * (dsv41-forward-spec.md §6-§8). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/cpu_impl.h"
#include "compute/ops_args.h"

/* ---- attention: threads over (row, head) ---- */

struct attn_job {
	const float *q;      /* [R, H, D] */
	const float *keys;   /* [NK, D] */
	const int32_t *off, *idx;
	const float *sink;   /* [H] */
	float *out;          /* [R, H, D] */
	float *zbuf;         /* per worker [maxk] */
	int64_t H, D, maxk;
};

static void attn_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct attn_job *j = ctx;
	float *z = cpu_scratch(j->zbuf, worker, j->maxk);
	float scale = 1.0f / sqrtf((float)j->D);
	for (size_t rh = begin; rh < end; rh++) {
		int64_t r = (int64_t)rh / j->H, h = (int64_t)rh % j->H;
		const float *q = j->q + (int64_t)rh * j->D;
		float *o = j->out + (int64_t)rh * j->D;
		int32_t k0 = j->off[r], nk = j->off[r + 1] - k0;
		memset(o, 0, (size_t)j->D * sizeof *o);
		if (nk <= 0)
			continue;
		float m = j->sink[h];
		for (int32_t k = 0; k < nk; k++) {
			z[k] = cpu_dot(q, j->keys + (int64_t)j->idx[k0 + k] * j->D, j->D) * scale;
			if (z[k] > m)
				m = z[k];
		}
		float sum = 0;
		for (int32_t k = 0; k < nk; k++) {
			z[k] = expf(z[k] - m);
			sum += z[k];
		}
		float denom = sum + expf(j->sink[h] - m);
		for (int32_t k = 0; k < nk; k++) {
			float w = z[k] / denom;
			const float *kv = j->keys + (int64_t)j->idx[k0 + k] * j->D;
			for (int64_t d = 0; d < j->D; d++)
				o[d] += w * kv[d];
		}
	}
}

tf_status cpu_attention(struct tf_be *be, const struct tf_tensor *q, const struct tf_tensor *keys,
			const struct tf_tensor *key_off, const struct tf_tensor *key_idx,
			const struct tf_tensor *sink, struct tf_tensor *out)
{
	tf_status st;
	int64_t R, H, D;
	if ((st = tf_args_attention(q, keys, key_off, key_idx, sink, out, &R, &H, &D)))
		return st;
	int64_t NK = tf_tensor_rows(keys), room = tf_tensor_numel(key_idx), total;
	const int32_t *off = cpu_i32(key_off), *idx = cpu_i32(key_idx);
	int64_t maxk = 1;
	total = off[R];
	if (off[0] != 0 || off[R] > room)
		return tf_err(TF_ERR_ARG, "attention: key_off spans %d..%d of %lld keys", off[0],
			      off[R], (long long)room);
	for (int64_t r = 0; r < R; r++) {
		if (off[r + 1] < off[r])
			return tf_err(TF_ERR_ARG, "attention: key_off decreases at row %lld",
				      (long long)r);
		if (off[r + 1] - off[r] > maxk)
			maxk = off[r + 1] - off[r];
	}
	for (int64_t i = 0; i < total; i++)
		if (idx[i] < 0 || idx[i] >= NK)
			return tf_err(TF_ERR_ARG, "attention: key %d outside %lld rows", idx[i],
				      (long long)NK);
	int workers = tf_pool_size(cpu_pool(be));
	float *qf = tf_alloc_array((size_t)(R * H * D), sizeof *qf);
	float *kf = keys->dt == TF_DT_F32 ? keys->data
					  : tf_alloc_array((size_t)(NK * D), sizeof *kf);
	float *zbuf = tf_alloc_array((size_t)(workers * maxk), sizeof *zbuf);
	if (!qf || !kf || !zbuf) {
		st = tf_err(TF_ERR_NOMEM, "attention: out of memory");
		goto out;
	}
	cpu_load(q, 0, R * H * D, qf);
	if (kf != keys->data)
		cpu_load(keys, 0, NK * D, kf);
	struct attn_job j = {.q = qf, .keys = kf, .off = off, .idx = idx, .sink = sink->data,
			     .out = out->data, .zbuf = zbuf, .H = H, .D = D, .maxk = maxk};
	tf_pool_for(cpu_pool(be), (size_t)(R * H), 1, attn_part, &j);
out:
	free(qf);
	if (kf != keys->data)
		free(kf);
	free(zbuf);
	return st;
}

/* ---- compressor ---- */

tf_status cpu_compressor(struct tf_be *be, const struct tf_tensor *u, const struct tf_tensor *g,
			 const struct tf_tensor *w, float eps, struct tf_tensor *lat)
{
	tf_status st;
	int64_t E, r, W;
	if ((st = tf_args_compressor(u, g, w, lat, &E, &r, &W)))
		return st;
	float *wf = tf_alloc_array((size_t)W, sizeof *wf);
	float *v = tf_alloc_array((size_t)W, sizeof *v);
	if (!wf || !v) {
		free(wf);
		free(v);
		return tf_err(TF_ERR_NOMEM, "compressor: out of memory");
	}
	cpu_load(w, 0, W, wf);
	const float *uf = u->data, *gf = r == 2 ? g->data : NULL;
	for (int64_t e = 0; e < E; e++) {
		const float *u0 = uf + e * r * W;
		if (r == 1) {
			memcpy(v, u0, (size_t)W * sizeof *v);
		} else {
			const float *u1 = u0 + W, *g0 = gf + e * 2 * W, *g1 = g0 + W;
			for (int64_t d = 0; d < W; d++) {
				float m = g0[d] > g1[d] ? g0[d] : g1[d];
				float e0 = expf(g0[d] - m), e1 = expf(g1[d] - m);
				float s = e0 + e1;
				v[d] = e0 / s * u0[d] + e1 / s * u1[d];
			}
		}
		float s = cpu_rms_scale(v, W, eps);
		for (int64_t d = 0; d < W; d++)
			v[d] = v[d] * s * wf[d];
		cpu_store(lat, e * W, W, v);
	}
	free(wf);
	free(v);
	return TF_OK;
}

/* ---- indexer ---- */

struct score_job {
	const float *iq;     /* [R, Hi, Di] */
	const float *iw;     /* [R, Hi] */
	const float *keys;   /* [N, Di] */
	const int32_t *n_vis;
	const uint8_t *blocks;
	float *scores;       /* [R, N] */
	int64_t R, N, Hi, Di, nblk, chunk;
	int bs;
};

static void score_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct score_job *j = ctx;
	int64_t per = (j->N + j->chunk - 1) / j->chunk;
	float hs = 1.0f / sqrtf((float)j->Hi), ds = 1.0f / sqrtf((float)j->Di);
	for (size_t t = begin; t < end; t++) {
		int64_t r = (int64_t)t / per, c0 = (int64_t)t % per * j->chunk;
		int64_t c1 = c0 + j->chunk < j->N ? c0 + j->chunk : j->N;
		float *s = j->scores + r * j->N;
		for (int64_t c = c0; c < c1; c++) {
			if (c >= j->n_vis[r] ||
			    (j->blocks && !j->blocks[r * j->nblk + c / j->bs])) {
				s[c] = -INFINITY;
				continue;
			}
			float acc = 0;
			for (int64_t h = 0; h < j->Hi; h++) {
				float d = cpu_dot(j->iq + (r * j->Hi + h) * j->Di,
						  j->keys + c * j->Di, j->Di) * ds;
				if (d > 0)
					acc += j->iw[r * j->Hi + h] * hs * d;
			}
			s[c] = acc;
		}
	}
}

tf_status cpu_index_score(struct tf_be *be, const struct tf_tensor *iq,
			  const struct tf_tensor *iw, const struct tf_tensor *keys,
			  const struct tf_tensor *n_vis, const struct tf_tensor *blocks, int bs,
			  struct tf_tensor *scores)
{
	tf_status st;
	int64_t R, Hi, Di, N, nblk;
	if ((st = tf_args_index_score(iq, iw, keys, n_vis, blocks, bs, scores, &R, &Hi, &Di, &N,
				      &nblk)))
		return st;
	if (N == 0 || R == 0)
		return TF_OK;
	float *qf = tf_alloc_array((size_t)(R * Hi * Di), sizeof *qf);
	float *kf = keys->dt == TF_DT_F32 ? keys->data
					  : tf_alloc_array((size_t)(N * Di), sizeof *kf);
	if (!qf || !kf) {
		free(qf);
		if (kf != keys->data)
			free(kf);
		return tf_err(TF_ERR_NOMEM, "index_score: out of memory");
	}
	cpu_load(iq, 0, R * Hi * Di, qf);
	if (kf != keys->data)
		cpu_load(keys, 0, N * Di, kf);
	struct score_job j = {.iq = qf, .iw = iw->data, .keys = kf, .n_vis = cpu_i32(n_vis),
			      .blocks = blocks ? blocks->data : NULL, .scores = scores->data,
			      .R = R, .N = N, .Hi = Hi, .Di = Di, .nblk = nblk, .chunk = 256,
			      .bs = bs};
	tf_pool_for(cpu_pool(be), (size_t)(R * ((N + 255) / 256)), 1, score_part, &j);
	free(qf);
	if (kf != keys->data)
		free(kf);
	return TF_OK;
}

/* A key that orders by value descending, then index ascending, as one
 * unsigned compare: the monotone bits of the float (-0 as +0), then the
 * complement of the index. NaN sorts below everything. */
static inline uint64_t rank_key(float v, uint32_t i)
{
	if (v != v)
		return 0xFFFFFFFFu - i;
	uint32_t b = tf_f32_bits(v + 0.0f);
	uint32_t mono = b & 0x80000000u ? ~b : b | 0x80000000u;
	return (uint64_t)mono << 32 | (0xFFFFFFFFu - i);
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? 1 : x > y ? -1 : 0;
}

static int cmp_i32(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
	return (x > y) - (x < y);
}

/* Move the k largest of a[0..n) (distinct keys) to a[0..k), in descending
 * order. A full sort: selections run only past 512 visible rows, and the
 * CPU backend is the reference, not the fast path. */
static void select_top(uint64_t *a, size_t n, size_t k)
{
	(void)k;
	qsort(a, n, sizeof *a, cmp_desc);
}

/* Row jobs of the selections: per-worker key buffers of `per` keys. */
struct sel_job {
	const float *scores;
	const int32_t *n_vis;
	int32_t *sel, *n_sel;
	uint8_t *blocks;
	uint64_t *keys;
	int64_t N, per, nblk;
	int k, bs, topb;
};

static void topk_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct sel_job *j = ctx;
	uint64_t *keys = j->keys + (int64_t)worker * j->per;
	for (size_t r = begin; r < end; r++) {
		const float *s = j->scores + (int64_t)r * j->N;
		int32_t *out = j->sel + (int64_t)r * j->k;
		int64_t n = j->n_vis[r];
		n = n < 0 ? 0 : n > j->N ? j->N : n;
		int32_t m = 0;
		if (n <= j->k) {
			for (int32_t i = 0; i < n; i++)
				out[m++] = i;
		} else {
			size_t f = 0;
			for (int64_t i = 0; i < n; i++)
				if (s[i] > -INFINITY)
					keys[f++] = rank_key(s[i], (uint32_t)i);
			size_t take = f < (size_t)j->k ? f : (size_t)j->k;
			select_top(keys, f, take);
			for (size_t i = 0; i < take; i++)
				out[m++] = (int32_t)(0xFFFFFFFFu - (uint32_t)keys[i]);
			qsort(out, (size_t)m, sizeof *out, cmp_i32);
		}
		for (int32_t i = m; i < j->k; i++)
			out[i] = -1;
		j->n_sel[r] = m;
	}
}

tf_status cpu_index_topk(struct tf_be *be, const struct tf_tensor *scores,
			 const struct tf_tensor *n_vis, int k, struct tf_tensor *sel,
			 struct tf_tensor *n_sel)
{
	tf_status st;
	int64_t R, N;
	if ((st = tf_args_index_topk(scores, n_vis, k, sel, n_sel, &R, &N)))
		return st;
	int workers = tf_pool_size(cpu_pool(be));
	int64_t per = N ? N : 1;
	uint64_t *keys = tf_alloc_array((size_t)(per * workers), sizeof *keys);
	if (!keys)
		return tf_err(TF_ERR_NOMEM, "index_topk: out of memory");
	struct sel_job j = {.scores = scores->data, .n_vis = cpu_i32(n_vis), .sel = sel->data,
			    .n_sel = n_sel->data, .keys = keys, .N = N, .per = per, .k = k};
	tf_pool_for(cpu_pool(be), (size_t)R, 1, topk_part, &j);
	free(keys);
	return TF_OK;
}

static void blocks_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct sel_job *j = ctx;
	uint64_t *keys = j->keys + (int64_t)worker * j->per;
	int bs = j->bs;
	for (size_t r = begin; r < end; r++) {
		const float *s = j->scores + (int64_t)r * j->N;
		uint8_t *mark = j->blocks + (int64_t)r * j->nblk;
		int64_t n = j->n_vis[r];
		n = n < 0 ? 0 : n > j->N ? j->N : n;
		int64_t vb = (n + bs - 1) / bs; /* blocks with a visible row */
		for (int64_t b = 0; b < vb; b++) {
			float m = -INFINITY;
			for (int64_t i = b * bs; i < (b + 1) * bs && i < n; i++)
				m = s[i] > m ? s[i] : m;
			if (b == vb - 1)
				m = INFINITY; /* the newest block is always kept */
			keys[b] = rank_key(m, (uint32_t)b);
		}
		size_t take = vb < j->topb ? (size_t)vb : (size_t)j->topb;
		select_top(keys, (size_t)vb, take);
		for (size_t i = 0; i < take; i++)
			mark[0xFFFFFFFFu - (uint32_t)keys[i]] = 1;
	}
}

tf_status cpu_candidate_blocks(struct tf_be *be, const struct tf_tensor *scores,
			       const struct tf_tensor *n_vis, int bs, int topb,
			       struct tf_tensor *blocks)
{
	tf_status st;
	int64_t R, N, nblk, need;
	if ((st = tf_args_candidate_blocks(scores, n_vis, bs, topb, blocks, &R, &N, &nblk, &need)))
		return st;
	int workers = tf_pool_size(cpu_pool(be));
	int64_t per = need ? need : 1;
	uint64_t *keys = tf_alloc_array((size_t)(per * workers), sizeof *keys);
	if (!keys)
		return tf_err(TF_ERR_NOMEM, "candidate_blocks: out of memory");
	memset(blocks->data, 0, (size_t)(R * nblk));
	struct sel_job j = {.scores = scores->data, .n_vis = cpu_i32(n_vis),
			    .blocks = blocks->data, .keys = keys, .N = N, .per = per,
			    .nblk = nblk, .bs = bs, .topb = topb};
	tf_pool_for(cpu_pool(be), (size_t)R, 1, blocks_part, &j);
	free(keys);
	return TF_OK;
}

/* ---- key lists (ops.h attn_keys) ---- */

tf_status cpu_attn_keys(struct tf_be *be, const struct tf_tensor *sel,
			const struct tf_tensor *n_sel, int direct, int64_t p0, int window,
			int64_t pbase, int64_t wbase, int append, struct tf_tensor *key_off,
			struct tf_tensor *key_idx)
{
	tf_status st;
	int64_t n, k;
	if ((st = tf_args_attn_keys(sel, n_sel, p0, window, pbase, wbase, key_off, key_idx, &n, &k)))
		return st;
	int64_t wlo = p0 - window + 1 < 0 ? 0 : p0 - window + 1, room = tf_tensor_numel(key_idx);
	const int32_t *sl = sel ? cpu_i32(sel) : NULL, *ns = sel ? cpu_i32(n_sel) : NULL;
	int32_t *off = key_off->data, *idx = key_idx->data;
	int64_t m = append ? off[0] : 0;
	if (m < 0 || m > room)
		return tf_err(TF_ERR_ARG, "attn_keys: appending at key %lld of %lld", (long long)m,
			      (long long)room);
	for (int64_t i = 0; i < n; i++) {
		int64_t p = p0 + i, lo = p - window + 1 < 0 ? 0 : p - window + 1;
		int64_t ni = ns ? (ns[i] < 0 ? 0 : ns[i] > k ? k : ns[i]) : 0;
		if (m + ni + (p - lo + 1) > room)
			return tf_err(TF_ERR_ARG, "attn_keys: %lld keys do not fit", (long long)room);
		off[i] = (int32_t)m;
		for (int64_t t = 0; t < ni; t++)
			idx[m++] = (int32_t)(pbase + (direct ? sl[i * k + t] : i * k + t));
		for (int64_t pp = lo; pp <= p; pp++)
			idx[m++] = (int32_t)(wbase + pp - wlo);
	}
	off[n] = (int32_t)m;
	return TF_OK;
}
