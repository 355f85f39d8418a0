/* cpu_mhc.c: the CPU mHC ops (the mix with its Sinkhorn passes, collapse,
 * post) and the Engram gate (dsv41-forward-spec.md §3, §11, §12). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/cpu_impl.h"
#include "compute/ops_args.h"

static inline float sigmoid(float x)
{
	return 1.0f / (1.0f + expf(-x));
}

struct mix_job {
	const struct tf_tensor *x;
	const float *fn, *base, *scale;
	float *pre, *post, *comb;
	float *buf;           /* per worker [S*D + M] */
	int64_t S, D, M;
	float eps, hc_eps, alpha;
	int iters;
};

/* Sinkhorn on an S x S matrix already softmaxed by rows (+hc_eps): a column
 * pass, then iters-1 x (row pass, column pass). */
static void sinkhorn(float *c, int64_t S, int iters, float hc_eps)
{
	for (int it = 0; it < iters; it++) {
		if (it > 0)
			for (int64_t i = 0; i < S; i++) {
				float s = 0;
				for (int64_t j = 0; j < S; j++)
					s += c[i * S + j];
				for (int64_t j = 0; j < S; j++)
					c[i * S + j] /= s + hc_eps;
			}
		for (int64_t j = 0; j < S; j++) {
			float s = 0;
			for (int64_t i = 0; i < S; i++)
				s += c[i * S + j];
			for (int64_t i = 0; i < S; i++)
				c[i * S + j] /= s + hc_eps;
		}
	}
}

static void mix_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct mix_job *j = ctx;
	int64_t S = j->S, n = S * j->D;
	float *f = cpu_scratch(j->buf, worker, n + j->M), *m = f + n;
	for (size_t r = begin; r < end; r++) {
		cpu_load(j->x, (int64_t)r * n, n, f);
		float rs = cpu_rms_scale(f, n, j->eps);
		for (int64_t t = 0; t < j->M; t++)
			m[t] = cpu_dot(f, j->fn + t * n, n) * rs;
		float *pre = j->pre + r * S, *post = j->post + r * S, *c = j->comb + r * S * S;
		for (int64_t k = 0; k < S; k++) {
			pre[k] = sigmoid(j->scale[0] * m[k] + j->base[k]) + j->hc_eps;
			post[k] = j->alpha * sigmoid(j->scale[1] * m[S + k] + j->base[S + k]);
		}
		for (int64_t i = 0; i < S; i++) {
			float *row = c + i * S, mx = -INFINITY, s = 0;
			for (int64_t q = 0; q < S; q++) {
				row[q] = j->scale[2] * m[2 * S + i * S + q] + j->base[2 * S + i * S + q];
				mx = row[q] > mx ? row[q] : mx;
			}
			for (int64_t q = 0; q < S; q++) {
				row[q] = expf(row[q] - mx);
				s += row[q];
			}
			for (int64_t q = 0; q < S; q++)
				row[q] = row[q] / s + j->hc_eps;
		}
		sinkhorn(c, S, j->iters, j->hc_eps);
	}
}

tf_status cpu_hc_mix(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *fn,
		     const struct tf_tensor *base, const struct tf_tensor *scale, float eps,
		     float hc_eps, int iters, float post_alpha, struct tf_tensor *pre,
		     struct tf_tensor *post, struct tf_tensor *comb)
{
	tf_status st;
	int64_t R, S, n, M;
	if ((st = tf_args_hc_mix(x, fn, base, scale, iters, pre, post, comb, &R, &S, &n, &M)))
		return st;
	int workers = tf_pool_size(cpu_pool(be));
	float *buf = tf_alloc_array((size_t)workers, (size_t)(n + M) * sizeof(float));
	if (!buf)
		return tf_err(TF_ERR_NOMEM, "hc_mix: out of memory");
	struct mix_job j = {.x = x, .fn = fn->data, .base = base->data, .scale = scale->data,
			    .pre = pre->data, .post = post->data, .comb = comb->data, .buf = buf,
			    .S = S, .D = n / S, .M = M, .eps = eps, .hc_eps = hc_eps,
			    .alpha = post_alpha, .iters = iters};
	tf_pool_for(cpu_pool(be), (size_t)R, 1, mix_part, &j);
	free(buf);
	return TF_OK;
}

/* Row jobs of collapse, post and the Engram gate: per-worker scratch of
 * `per` floats. */
struct rows_job {
	const struct tf_tensor *x, *b, *kv, *blocked;
	struct tf_tensor *out;
	const float *pre, *post, *comb, *qk;
	float *buf;
	int64_t S, D, per;
	float eps, clamp;
};

static void collapse_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct rows_job *j = ctx;
	int64_t S = j->S, D = j->D;
	float *v = cpu_scratch(j->buf, worker, j->per), *xs = v + D;
	for (size_t r = begin; r < end; r++) {
		const float *p = j->pre + (int64_t)r * S;
		memset(v, 0, (size_t)D * sizeof *v);
		for (int64_t s = 0; s < S; s++) {
			cpu_load(j->x, ((int64_t)r * S + s) * D, D, xs);
			for (int64_t d = 0; d < D; d++)
				v[d] += p[s] * xs[d];
		}
		cpu_store(j->out, (int64_t)r * D, D, v);
	}
}

tf_status cpu_hc_collapse(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pre,
			  struct tf_tensor *c)
{
	tf_status st;
	int64_t R, S, D;
	if ((st = tf_args_hc_collapse(x, pre, c, &R, &S, &D)))
		return st;
	int workers = tf_pool_size(cpu_pool(be));
	float *buf = tf_alloc_array((size_t)workers, (size_t)(2 * D) * sizeof(float));
	if (!buf)
		return tf_err(TF_ERR_NOMEM, "hc_collapse: out of memory");
	struct rows_job j = {.x = x, .out = c, .pre = pre->data, .buf = buf, .S = S, .D = D,
			     .per = 2 * D};
	tf_pool_for(cpu_pool(be), (size_t)R, 1, collapse_part, &j);
	free(buf);
	return TF_OK;
}

static void post_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct rows_job *j = ctx;
	int64_t S = j->S, D = j->D;
	float *v = cpu_scratch(j->buf, worker, j->per), *bf = v + S * D, *o = bf + D;
	for (size_t r = begin; r < end; r++) {
		const float *p = j->post + (int64_t)r * S, *c = j->comb + (int64_t)r * S * S;
		cpu_load(j->x, (int64_t)r * S * D, S * D, v);
		cpu_load(j->b, (int64_t)r * D, D, bf);
		for (int64_t t = 0; t < S; t++) {
			float *ot = o + t * D;
			for (int64_t d = 0; d < D; d++)
				ot[d] = p[t] * bf[d];
			for (int64_t i = 0; i < S; i++)
				for (int64_t d = 0; d < D; d++)
					ot[d] += c[i * S + t] * v[i * D + d];
		}
		cpu_store(j->out, (int64_t)r * S * D, S * D, o);
	}
}

tf_status cpu_hc_post(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *b,
		      const struct tf_tensor *post, const struct tf_tensor *comb,
		      struct tf_tensor *out)
{
	tf_status st;
	int64_t R, S, D;
	if ((st = tf_args_hc_post(x, b, post, comb, out, &R, &S, &D)))
		return st;
	/* a row reads its S streams and b before writing: out may alias x */
	int64_t per = (2 * S + 1) * D;
	int workers = tf_pool_size(cpu_pool(be));
	float *buf = tf_alloc_array((size_t)workers, (size_t)per * sizeof(float));
	if (!buf)
		return tf_err(TF_ERR_NOMEM, "hc_post: out of memory");
	struct rows_job j = {.x = x, .b = b, .out = out, .post = post->data, .comb = comb->data,
			     .buf = buf, .S = S, .D = D, .per = per};
	tf_pool_for(cpu_pool(be), (size_t)R, 1, post_part, &j);
	free(buf);
	return TF_OK;
}

static void engram_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct rows_job *j = ctx;
	int64_t S = j->S, D = j->D;
	float *h = cpu_scratch(j->buf, worker, j->per), *key = h + D, *val = key + D;
	float sd = sqrtf((float)D);
	for (size_t rr = begin; rr < end; rr++) {
		int64_t r = (int64_t)rr;
		int off = j->blocked && ((const uint8_t *)j->blocked->data)[r];
		cpu_load(j->kv, (r * (S + 1) + S) * D, D, val);
		for (int64_t s = 0; s < S; s++) {
			cpu_load(j->x, (r * S + s) * D, D, h);
			float gate = 0;
			if (!off) {
				cpu_load(j->kv, (r * (S + 1) + s) * D, D, key);
				const float *qs = j->qk + s * D;
				/* the wide order of tf_mhc_engram (cpu_impl.h) */
				float acc = cpu_wide_dot3(h, qs, key, D);
				float dot = acc * cpu_wide_rms_scale(h, D, j->eps) *
					    cpu_wide_rms_scale(key, D, j->eps) / sd;
				float mag = sqrtf(fabsf(dot) > j->clamp ? fabsf(dot) : j->clamp);
				gate = sigmoid(dot < 0 ? -mag : mag); /* sgn(0) = +1 */
			}
			for (int64_t d = 0; d < D; d++)
				h[d] = h[d] + gate * val[d];
			cpu_store(j->out, (r * S + s) * D, D, h);
		}
	}
}

tf_status cpu_engram_gate(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *kv,
			  const struct tf_tensor *qk, const struct tf_tensor *blocked, float eps,
			  float clamp, struct tf_tensor *out)
{
	tf_status st;
	int64_t R, S, D;
	if ((st = tf_args_engram_gate(x, kv, qk, blocked, out, &R, &S, &D)))
		return st;
	int workers = tf_pool_size(cpu_pool(be));
	float *buf = tf_alloc_array((size_t)workers, (size_t)(3 * D) * sizeof(float));
	if (!buf)
		return tf_err(TF_ERR_NOMEM, "engram_gate: out of memory");
	struct rows_job j = {.x = x, .kv = kv, .blocked = blocked, .out = out, .qk = qk->data,
			     .buf = buf, .S = S, .D = D, .per = 3 * D, .eps = eps, .clamp = clamp};
	tf_pool_for(cpu_pool(be), (size_t)R, 1, engram_part, &j);
	free(buf);
	return TF_OK;
}

/* ---- stream mean (ops.h stream_mean, spec §13 taps) ---- */

tf_status cpu_stream_mean(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *out)
{
	tf_status st;
	int64_t R, S, D;
	if ((st = tf_args_stream_mean(x, out, &R, &S, &D)))
		return st;
	const uint16_t *xs = x->data;
	uint16_t *o = out->data;
	for (int64_t i = 0; i < R; i++)
		for (int64_t d = 0; d < D; d++) {
			float s = 0;
			for (int64_t k = 0; k < S; k++)
				s += tf_bf16_to_f32(xs[(i * S + k) * D + d]);
			o[i * D + d] = tf_f32_to_bf16(s / (float)S);
		}
	return TF_OK;
}
