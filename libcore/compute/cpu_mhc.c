/* cpu_mhc.c: the CPU mHC ops (the mix with its Sinkhorn passes, collapse,
 * post) and the Engram gate (dsv41-forward-spec.md §3, §11, §12). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/cpu_impl.h"

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
	int64_t M = tf_tensor_numel(base);
	int64_t S = (int64_t)lround((sqrt(1.0 + (double)M) - 1)); /* M = 2S + S^2 */
	int64_t n = tf_tensor_cols(fn), R = n ? tf_tensor_numel(x) / n : 0;
	if ((st = tf_op_check("hc_mix", "x", x, TF_DTS_BF16 | TF_DTS_F32, R * n)) ||
	    (st = tf_op_check("hc_mix", "base", base, TF_DTS_F32, 2 * S + S * S)) ||
	    (st = tf_op_check("hc_mix", "fn", fn, TF_DTS_F32, M * n)) ||
	    (st = tf_op_check("hc_mix", "scale", scale, TF_DTS_F32, 3)) ||
	    (st = tf_op_check("hc_mix", "pre", pre, TF_DTS_F32, R * S)) ||
	    (st = tf_op_check("hc_mix", "post", post, TF_DTS_F32, R * S)) ||
	    (st = tf_op_check("hc_mix", "comb", comb, TF_DTS_F32, R * S * S)))
		return st;
	if (S < 1 || n % S || iters < 1)
		return tf_err(TF_ERR_ARG, "hc_mix: %lld streams over %lld values, %d iterations",
			      (long long)S, (long long)n, iters);
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
	int64_t D = tf_tensor_cols(c), R = tf_tensor_rows(c);
	int64_t S = R ? tf_tensor_numel(pre) / R : 0;
	if ((st = tf_op_check("hc_collapse", "c", c, TF_DTS_BF16 | TF_DTS_F32, -1)) ||
	    (st = tf_op_check("hc_collapse", "pre", pre, TF_DTS_F32, R * S)) ||
	    (st = tf_op_check("hc_collapse", "x", x, TF_DTS_BF16 | TF_DTS_F32, R * S * D)))
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
	int64_t D = tf_tensor_cols(b), R = tf_tensor_rows(b);
	int64_t S = R ? tf_tensor_numel(post) / R : 0;
	if ((st = tf_op_check("hc_post", "b", b, TF_DTS_BF16 | TF_DTS_F32, -1)) ||
	    (st = tf_op_check("hc_post", "post", post, TF_DTS_F32, R * S)) ||
	    (st = tf_op_check("hc_post", "comb", comb, TF_DTS_F32, R * S * S)) ||
	    (st = tf_op_check("hc_post", "x", x, TF_DTS_BF16 | TF_DTS_F32, R * S * D)) ||
	    (st = tf_op_check("hc_post", "out", out, TF_DTS_BF16 | TF_DTS_F32, R * S * D)))
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
				float acc = 0;
				for (int64_t d = 0; d < D; d++)
					acc += h[d] * qs[d] * key[d];
				float dot = acc * cpu_rms_scale(h, D, j->eps) *
					    cpu_rms_scale(key, D, j->eps) / sd;
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
	int64_t D = tf_tensor_cols(qk), S = tf_tensor_rows(qk);
	int64_t R = D > 0 ? tf_tensor_numel(kv) / ((S + 1) * D) : 0;
	if ((st = tf_op_check("engram_gate", "qk", qk, TF_DTS_F32, -1)) ||
	    (st = tf_op_check("engram_gate", "kv", kv, TF_DTS_BF16 | TF_DTS_F32, R * (S + 1) * D)) ||
	    (st = tf_op_check("engram_gate", "x", x, TF_DTS_BF16 | TF_DTS_F32, R * S * D)) ||
	    (st = tf_op_check("engram_gate", "out", out, TF_DTS_BF16 | TF_DTS_F32, R * S * D)) ||
	    (blocked && (st = tf_op_check("engram_gate", "blocked", blocked, TF_DTS_U8, R))))
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
	int64_t R = x->ndim == 3 ? x->shape[0] : 0, S = x->shape[1], D = x->shape[2];
	if ((st = tf_op_check("stream_mean", "x", x, TF_DTS_BF16, -1)) ||
	    (st = tf_op_check("stream_mean", "out", out, TF_DTS_BF16, R * D)))
		return st;
	if (x->ndim != 3 || R < 1 || S < 1)
		return tf_err(TF_ERR_ARG, "stream_mean: x is not [R, S, D]");
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
