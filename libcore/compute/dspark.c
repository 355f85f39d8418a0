/* dspark.c: DSpark context rows and drafts (dspark.h); section numbers are
 * dsv41-forward-spec.md's. */
#include "compute/dspark.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/f16.h"

struct tf_dspark {
	struct tf_be *be;
	const struct tf_config *c;
	const struct tf_fwd_weights *fw;
	const struct tf_dspark_weights *w;
	struct tf_kv *kv;
	struct tf_fwd *f;
	struct tf_rope_freqs plain; /* ratio 0: theta rope_theta, no YaRN */
};

static tf_status need(const struct tf_tensor *t, int64_t rows, int64_t cols, const char *name)
{
	if (!t->data || tf_tensor_numel(t) != rows * cols || tf_tensor_cols(t) != cols)
		return tf_err(TF_ERR_ARG, "dspark: %s is missing or not [%lld, %lld]", name,
			      (long long)rows, (long long)cols);
	return TF_OK;
}

tf_status tf_dspark_new(struct tf_be *be, const struct tf_config *c,
			const struct tf_fwd_weights *fw, const struct tf_dspark_weights *w,
			struct tf_kv *kv, struct tf_fwd *f, struct tf_dspark **out)
{
	*out = NULL;
	if (!c->mtp_layers || !c->dspark_block || !c->n_dspark_targets)
		return tf_err(TF_ERR_CONFIG, "dspark: the config has no DSpark blocks");
	if (tf_kv_config(kv)->layers < (int)tf_config_all_layers(c))
		return tf_err(TF_ERR_CONFIG, "dspark: the cache has no window rings for the blocks");
	int64_t D = c->hidden, V = c->vocab, rank = c->dspark_markov_rank;
	tf_status st;
	if (!fw->mtp_norm.data)
		return tf_err(TF_ERR_ARG, "dspark: the forward has no DSpark blocks");
	if (!w->main_proj.q &&
	    (st = need(&w->main_proj.w, D, (int64_t)c->n_dspark_targets * D, "main_proj")))
		return st;
	if ((st = need(&w->main_norm, 1, D, "main_norm")) ||
	    (st = need(&w->markov_embed, V, rank, "markov_head.embed")) ||
	    (st = need(&w->markov_head, V, rank, "markov_head.head")) ||
	    (w->confidence.data && (st = need(&w->confidence, 1, D + rank, "confidence_head"))))
		return st;
	if (w->markov_embed.dt != TF_DT_BF16 && w->markov_embed.dt != TF_DT_F16)
		return tf_err(TF_ERR_ARG, "dspark: markov_head.embed is %s, want bf16 or f16",
			      tf_dt_name(w->markov_embed.dt));
	struct tf_dspark *d = calloc(1, sizeof *d);
	if (!d)
		return tf_err(TF_ERR_NOMEM, "dspark: out of memory");
	*d = (struct tf_dspark){be, c, fw, w, kv, f, {0}};
	tf_rope_freqs_plain(&d->plain, (int)c->rope_dim, c->rope_theta);
	*out = d;
	return TF_OK;
}

void tf_dspark_free(struct tf_dspark *d)
{
	free(d);
}

int tf_dspark_block(const struct tf_dspark *d)
{
	return (int)d->c->dspark_block;
}

/* Backend tensors of one call, released together. */
struct scratch {
	struct tf_be *be;
	struct tf_tensor t[12];
	int n;
};

static tf_status scratch_new(struct scratch *s, struct tf_tensor **out, enum tf_dt dt,
			     int64_t rows, int64_t cols)
{
	if (s->n == (int)(sizeof s->t / sizeof s->t[0]))
		return tf_err(TF_ERR_INTERNAL, "dspark: scratch tensors");
	tf_status st = tf_be_tensor(s->be, &s->t[s->n], dt, 2, rows, cols);
	if (!st)
		*out = &s->t[s->n++];
	return st;
}

static void scratch_release(struct scratch *s)
{
	while (s->n)
		s->be->ops->release(s->be, &s->t[--s->n]);
}

tf_status tf_dspark_context(struct tf_dspark *d, int R, const uint16_t *taps,
			    const int64_t *pos, const int *seq)
{
	const struct tf_config *c = d->c;
	struct tf_be *be = d->be;
	struct tf_kv_store *kvs = tf_kv_store(d->kv);
	int64_t D = c->hidden, hd = c->head_dim, nt = c->n_dspark_targets;
	struct scratch s = {.be = be};
	struct tf_tensor *tp = NULL, *mp = NULL, *mx = NULL, *p32 = NULL, *kv = NULL, *kvn = NULL,
			 *row = NULL, *at = NULL;
	int32_t *p = malloc((size_t)R * sizeof *p), *wr = malloc((size_t)R * sizeof *wr);
	tf_status st = p && wr ? TF_OK : tf_err(TF_ERR_NOMEM, "dspark: out of memory");
	if (st)
		goto out;
	for (int i = 0; i < R; i++)
		p[i] = (int32_t)pos[i];
	/* main_x = RMS(Lin([T_1 || ... || T_nt]; main_proj); main_norm) */
	if ((st = scratch_new(&s, &tp, TF_DT_BF16, R, nt * D)) ||
	    (st = be->ops->upload(be, tp, taps)) ||
	    (st = scratch_new(&s, &mp, TF_DT_BF16, R, D)) ||
	    (st = tf_fwd_lin(be, &d->w->main_proj, tp, mp)) ||
	    (st = scratch_new(&s, &mx, TF_DT_BF16, R, D)) ||
	    (st = be->ops->rmsnorm(be, mp, &d->w->main_norm, c->eps, mx)) ||
	    (st = scratch_new(&s, &p32, TF_DT_I32, R, 1)) || (st = be->ops->upload(be, p32, p)) ||
	    (st = scratch_new(&s, &kv, TF_DT_BF16, R, hd)) ||
	    (st = scratch_new(&s, &kvn, TF_DT_BF16, R, hd)) ||
	    (st = scratch_new(&s, &row, TF_DT_BF16, R, hd)) ||
	    (st = scratch_new(&s, &at, TF_DT_I32, R, 1)))
		goto out;
	p32->ndim = 1; /* positions int32 [R] */
	for (uint32_t i = 0; i < c->mtp_layers && !st; i++) {
		/* block i's context row: bf(RoPE(RMS(Lin(main_x; wkv_i); kv_norm_i), t)),
		 * stored in its window ring */
		uint32_t L = c->layers + i;
		const struct tf_fwd_layer *lw = &d->fw->layers[L];
		for (int r = 0; r < R; r++)
			wr[r] = (int32_t)tf_kv_window_row(d->kv, seq[r], (int)L, pos[r]);
		if ((st = tf_fwd_lin(be, &lw->wkv, mx, kv)) ||
		    (st = be->ops->rmsnorm(be, kv, &lw->kv_norm, c->eps, kvn)) ||
		    (st = be->ops->rope(be, kvn, p32, &d->plain, 0, row)) ||
		    (st = be->ops->upload(be, at, wr)))
			break;
		st = be->ops->cache_write(be, &kvs->win, row, at, &kvs->ring);
	}
out:
	scratch_release(&s);
	free(p);
	free(wr);
	return st;
}

/* The Markov embedding rows of prev into x [n, rank] (host memory: the
 * stored half values, bf16 or f16 as the pack holds them), gathered on the
 * backend. */
static tf_status markov_rows(struct tf_dspark *d, int n, const int32_t *prev, uint16_t *x)
{
	const struct tf_tensor *e = &d->w->markov_embed;
	struct tf_be *be = d->be;
	for (int i = 0; i < n; i++)
		if (prev[i] < 0 || (uint32_t)prev[i] >= d->c->vocab)
			return tf_err(TF_ERR_ARG, "dspark: token %d outside the vocabulary of %u",
				      prev[i], d->c->vocab);
	struct scratch s = {.be = be};
	struct tf_tensor *ix = NULL, *rows = NULL;
	tf_status st;
	if (!(st = scratch_new(&s, &ix, TF_DT_I32, n, 1)) && !(st = be->ops->upload(be, ix, prev)) &&
	    !(st = scratch_new(&s, &rows, e->dt, n, d->c->dspark_markov_rank)) &&
	    !(st = be->ops->rows_copy(be, e, ix, rows, NULL)))
		st = be->ops->download(be, rows, x);
	scratch_release(&s);
	return st;
}

static float half_f32(enum tf_dt dt, uint16_t v)
{
	return dt == TF_DT_BF16 ? tf_bf16_to_f32(v) : tf_f16_to_f32(v);
}

/* UNCONFIRMED (spec §13): PC rounds the bf16 embedding row to fp16 before
 * the product; here the stored values enter exactly (bf16 -> fp16 is exact
 * but for values below fp16's normal range), with fp32 sums. */
tf_status tf_dspark_markov_bias(struct tf_dspark *d, int n, const int32_t *prev, float *bias)
{
	struct tf_be *be = d->be;
	struct scratch s = {.be = be};
	struct tf_tensor *x = NULL, *y = NULL;
	uint16_t *e = tf_alloc_array((size_t)n * d->c->dspark_markov_rank, sizeof *e);
	tf_status st = e ? TF_OK : tf_err(TF_ERR_NOMEM, "dspark: out of memory");
	if (!st && !(st = markov_rows(d, n, prev, e)) &&
	    !(st = scratch_new(&s, &x, d->w->markov_embed.dt, n, d->c->dspark_markov_rank)) &&
	    !(st = be->ops->upload(be, x, e)) &&
	    !(st = scratch_new(&s, &y, TF_DT_F32, n, d->c->vocab)) &&
	    !(st = be->ops->linear(be, x, &d->w->markov_head, y)))
		st = be->ops->download(be, y, bias);
	scratch_release(&s);
	free(e);
	return st;
}

/* Confidence of n rows: sigmoid(proj . [h || embed_M[prev]]), fp32.
 * UNCONFIRMED (spec §13): AR applies the sigmoid, MLX returns the raw dot;
 * the tokens do not depend on it. */
static tf_status confidence(struct tf_dspark *d, int n, const uint16_t *h, const int32_t *prev,
			    float *out)
{
	struct tf_be *be = d->be;
	const struct tf_config *c = d->c;
	int64_t D = c->hidden, rank = c->dspark_markov_rank;
	enum tf_dt edt = d->w->markov_embed.dt;
	struct scratch s = {.be = be};
	struct tf_tensor *x = NULL, *y = NULL;
	struct tf_tensor proj = tf_tensor_make(d->w->confidence.data, TF_DT_F32, 2, (int64_t)1,
					       D + rank);
	uint16_t *e = tf_alloc_array((size_t)(n * rank), sizeof *e);
	float *xv = tf_alloc_array((size_t)(n * (D + rank)), sizeof *xv);
	tf_status st = e && xv ? TF_OK : tf_err(TF_ERR_NOMEM, "dspark: out of memory");
	if (st || (st = markov_rows(d, n, prev, e)))
		goto out;
	for (int i = 0; i < n; i++) { /* [h_i || embed_M[prev_i]] in fp32 */
		for (int64_t k = 0; k < D; k++)
			xv[i * (D + rank) + k] = tf_bf16_to_f32(h[i * D + k]);
		for (int64_t k = 0; k < rank; k++)
			xv[i * (D + rank) + D + k] = half_f32(edt, e[i * rank + k]);
	}
	if ((st = scratch_new(&s, &x, TF_DT_F32, n, D + rank)) || (st = be->ops->upload(be, x, xv)) ||
	    (st = scratch_new(&s, &y, TF_DT_F32, n, 1)) ||
	    (st = be->ops->linear(be, x, &proj, y)) || (st = be->ops->download(be, y, out)))
		goto out;
	for (int i = 0; i < n; i++)
		out[i] = 1.0f / (1.0f + expf(-out[i]));
out:
	scratch_release(&s);
	free(e);
	free(xv);
	return st;
}

/* The Markov draws of n sequences (spec §13), one row after another:
 * logits_j = base_j + bias(prev) drawn at the position the token will
 * occupy (P + 1 + j), then prev = that token. base [n, B, V] f32 and h
 * [n, B, D] bf16 come from the draft pass, P [n] are the sequences'
 * lengths, sp [n] the draws' settings; prev [n] enters with the anchors. */
static tf_status draws(struct tf_dspark *d, int n, const float *base, const uint16_t *h,
		       const int64_t *P, const struct tf_sample_params *sp, int32_t *prev,
		       int32_t *draft, float *conf)
{
	const struct tf_config *c = d->c;
	struct tf_be *be = d->be;
	int B = (int)c->dspark_block;
	int64_t V = c->vocab, D = c->hidden;
	int want_conf = conf && d->w->confidence.data;
	float *lg = tf_alloc_array((size_t)n * V, sizeof *lg), *cf = tf_alloc_array((size_t)n, sizeof *cf);
	int64_t *at = tf_alloc_array((size_t)n, sizeof *at);
	uint16_t *hj = tf_alloc_array((size_t)n * D, sizeof *hj);
	struct scratch s = {.be = be};
	struct tf_tensor *lt = NULL;
	tf_status st = lg && cf && at && hj ? TF_OK : tf_err(TF_ERR_NOMEM, "dspark: out of memory");
	if (st || (st = scratch_new(&s, &lt, TF_DT_F32, n, V)))
		goto out;
	for (int j = 0; j < B; j++) {
		if ((st = tf_dspark_markov_bias(d, n, prev, lg)))
			goto out;
		for (int i = 0; i < n; i++) {
			const float *b = base + ((int64_t)i * B + j) * V;
			for (int64_t v = 0; v < V; v++)
				lg[i * V + v] += b[v];
			at[i] = P[i] + 1 + j;
			memcpy(hj + i * D, h + ((int64_t)i * B + j) * D, (size_t)D * sizeof *hj);
		}
		if (want_conf && (st = confidence(d, n, hj, prev, cf)))
			goto out;
		if ((st = be->ops->upload(be, lt, lg)) || (st = be->ops->sample(be, lt, sp, at, prev)))
			goto out;
		for (int i = 0; i < n; i++) {
			draft[i * B + j] = prev[i];
			if (conf)
				conf[i * B + j] = want_conf ? cf[i] : NAN;
		}
	}
out:
	scratch_release(&s);
	free(lg);
	free(cf);
	free(at);
	free(hj);
	return st;
}

tf_status tf_dspark_draft(struct tf_dspark *d, int n, const int *seq, const int32_t *anchor,
			  const struct tf_sample_params *params, int32_t *draft, float *conf)
{
	const struct tf_config *c = d->c;
	int B = (int)c->dspark_block;
	int64_t V = c->vocab, D = c->hidden, R = (int64_t)n * B;
	if (n < 1 || !seq || !anchor || !draft)
		return tf_err(TF_ERR_ARG, "dspark: %d sequences, or a missing array", n);
	int32_t *ids = tf_alloc_array((size_t)R, sizeof *ids), *prev = tf_alloc_array((size_t)n, sizeof *prev);
	int64_t *pos = tf_alloc_array((size_t)R, sizeof *pos), *P = tf_alloc_array((size_t)n, sizeof *P);
	int *sq = tf_alloc_array((size_t)R, sizeof *sq);
	float *base = tf_alloc_array((size_t)(R * V), sizeof *base);
	uint16_t *h = tf_alloc_array((size_t)(R * D), sizeof *h);
	struct tf_sample_params *sp = tf_alloc_array((size_t)n, sizeof *sp);
	tf_status st = ids && prev && pos && P && sq && base && h && sp
			       ? TF_OK
			       : tf_err(TF_ERR_NOMEM, "dspark: out of memory");
	for (int i = 0; i < n && !st; i++) {
		P[i] = tf_kv_len(d->kv, seq[i]);
		/* an open sequence (reserving the room it has changes nothing) */
		if ((st = tf_kv_reserve(d->kv, seq[i], P[i])))
			break;
		for (int j = 0; j < B; j++) { /* [anchor, noise x (B - 1)] at P .. P + B - 1 */
			ids[i * B + j] = j ? (int32_t)c->dspark_noise_token : anchor[i];
			pos[i * B + j] = P[i] + j;
			sq[i * B + j] = seq[i];
		}
		prev[i] = anchor[i];
		sp[i] = params ? params[i] : (struct tf_sample_params){0};
	}
	if (!st && !(st = tf_fwd_draft(d->f, (int)R, ids, pos, sq, base, h)))
		st = draws(d, n, base, h, P, sp, prev, draft, conf);
	free(ids);
	free(prev);
	free(pos);
	free(P);
	free(sq);
	free(base);
	free(h);
	free(sp);
	return st;
}
