/* cpu_dense.c: the CPU backend's dense ops: convert, linear (and dense
 * experts), embed, rmsnorm, rope. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/cpu_impl.h"
#include "compute/ops_args.h"

/* ---- convert ---- */

tf_status cpu_convert(struct tf_be *be, const struct tf_tensor *x, struct tf_tensor *y)
{
	tf_status st;
	int64_t n;
	if ((st = tf_args_convert(x, y, &n)))
		return st;
	float buf[256];
	for (int64_t i = 0; i < n; i += 256) {
		int64_t m = n - i < 256 ? n - i : 256;
		cpu_load(x, i, m, buf);
		cpu_store(y, i, m, buf);
	}
	return TF_OK;
}

/* ---- linear: threads over blocks of output columns ---- */

struct linear_job {
	const struct tf_tensor *x, *w;
	struct tf_tensor *y;
	const float *xf;  /* x as f32 [R, K] */
	float *wbuf;      /* per worker [K] */
	float *ybuf;      /* per worker [R] */
	int64_t R, K, N;
};

static void linear_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct linear_job *j = ctx;
	float *wr = cpu_scratch(j->wbuf, worker, j->K);
	for (size_t n = begin; n < end; n++) {
		const float *wrow;
		if (j->w->dt == TF_DT_F32) {
			wrow = (const float *)j->w->data + (int64_t)n * j->K;
		} else {
			cpu_load(j->w, (int64_t)n * j->K, j->K, wr);
			wrow = wr;
		}
		for (int64_t r = 0; r < j->R; r++) {
			float v = cpu_dot(j->xf + r * j->K, wrow, j->K);
			cpu_store(j->y, r * j->N + (int64_t)n, 1, &v);
		}
	}
}

tf_status cpu_linear(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *w,
			    struct tf_tensor *y)
{
	tf_status st;
	int64_t R, K, N;
	if ((st = tf_args_linear(x, w, y, &R, &K, &N)))
		return st;
	int workers = tf_pool_size(cpu_pool(be));
	float *xf = tf_alloc_array((size_t)(R * K), sizeof *xf);
	float *wbuf = tf_alloc_array((size_t)(workers * K), sizeof *wbuf);
	if (!xf || !wbuf) {
		free(xf);
		free(wbuf);
		return tf_err(TF_ERR_NOMEM, "linear: out of memory");
	}
	cpu_load(x, 0, R * K, xf);
	struct linear_job j = {.x = x, .w = w, .y = y, .xf = xf, .wbuf = wbuf, .R = R, .K = K,
			       .N = N};
	tf_pool_for(cpu_pool(be), (size_t)N, 16, linear_part, &j);
	free(xf);
	free(wbuf);
	return TF_OK;
}

/* Dense experts (ops.h linear_experts): each group's rows through its
 * expert's linear. */
tf_status cpu_linear_experts(struct tf_be *be, const struct tf_tensor *w, int n_experts,
				    const struct tf_tensor *expert_ids,
				    const struct tf_tensor *offsets, const struct tf_tensor *x,
				    struct tf_tensor *y)
{
	tf_status st;
	int64_t R, N, G;
	if ((st = tf_args_experts("linear_experts", expert_ids, offsets, x, y, &R, &N, &G)))
		return st;
	const int32_t *ids = cpu_i32(expert_ids), *off = cpu_i32(offsets);
	if (off[0] != 0 || off[G] != R)
		return tf_err(TF_ERR_ARG, "linear_experts: offsets span %d..%d, x has %lld rows",
			      off[0], off[G], (long long)R);
	for (int64_t g = 0; g < G; g++) {
		if (off[g + 1] < off[g] || ids[g] < 0 || ids[g] >= n_experts)
			return tf_err(TF_ERR_ARG, "linear_experts: group %lld (expert %d of %d)",
				      (long long)g, ids[g], n_experts);
		if (off[g + 1] == off[g])
			continue;
		struct tf_tensor xg = tf_tensor_rows_of(x, off[g], off[g + 1] - off[g]);
		struct tf_tensor yg = tf_tensor_rows_of(y, off[g], off[g + 1] - off[g]);
		if ((st = cpu_linear(be, &xg, &w[ids[g]], &yg)))
			return st;
	}
	return TF_OK;
}

/* ---- embedding ---- */

tf_status cpu_embed(struct tf_be *be, const struct tf_tensor *table, int64_t vocab_lo,
			   const struct tf_tensor *ids, struct tf_tensor *out)
{
	tf_status st;
	int64_t R, C, D, V;
	if ((st = tf_args_embed(table, ids, out, &R, &C, &D, &V)))
		return st;
	const uint16_t *tab = table->data;
	uint16_t *o = out->data;
	for (int64_t r = 0; r < R; r++) {
		int64_t id = cpu_i32(ids)[r] - vocab_lo;
		for (int64_t c = 0; c < C; c++) {
			uint16_t *dst = o + (r * C + c) * D;
			if (id >= 0 && id < V)
				memcpy(dst, tab + id * D, (size_t)D * 2);
			else
				memset(dst, 0, (size_t)D * 2);
		}
	}
	return TF_OK;
}

/* ---- rmsnorm ---- */

struct norm_job {
	const struct tf_tensor *x;
	struct tf_tensor *y;
	const float *w;
	float *buf;
	int64_t n;
	float eps;
};

static void norm_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct norm_job *j = ctx;
	float *v = cpu_scratch(j->buf, worker, j->n);
	for (size_t r = begin; r < end; r++) {
		cpu_load(j->x, (int64_t)r * j->n, j->n, v);
		float s = cpu_wide_rms_scale(v, j->n, j->eps); /* kernels/dense.cu's order */
		for (int64_t i = 0; i < j->n; i++)
			v[i] = v[i] * s * j->w[i];
		cpu_store(j->y, (int64_t)r * j->n, j->n, v);
	}
}

tf_status cpu_rmsnorm(struct tf_be *be, const struct tf_tensor *x,
			     const struct tf_tensor *w, float eps, struct tf_tensor *y)
{
	tf_status st;
	int64_t R, n;
	if ((st = tf_args_rmsnorm(x, w, y, &R, &n)))
		return st;
	int workers = tf_pool_size(cpu_pool(be));
	float *wf = tf_alloc_array((size_t)n, sizeof *wf);
	float *buf = tf_alloc_array((size_t)(n * workers), sizeof *buf);
	if (!wf || !buf) {
		free(wf);
		free(buf);
		return tf_err(TF_ERR_NOMEM, "rmsnorm: out of memory");
	}
	cpu_load(w, 0, n, wf);
	struct norm_job j = {.x = x, .y = y, .w = wf, .buf = buf, .n = n, .eps = eps};
	tf_pool_for(cpu_pool(be), (size_t)R, 4, norm_part, &j);
	free(wf);
	free(buf);
	return TF_OK;
}

/* ---- rope ---- */

struct rope_job {
	const struct tf_tensor *x;
	struct tf_tensor *y;
	const int32_t *pos;
	const struct tf_rope_freqs *rf;
	float *buf;
	int64_t H, n;
	int inverse;
};

static void rope_part(void *ctx, size_t begin, size_t end, int worker)
{
	struct rope_job *j = ctx;
	int half = j->rf->dim / 2;
	float *v = cpu_scratch(j->buf, worker, j->n + 2 * half);
	float *cs = v + j->n, *sn = cs + half;
	for (size_t r = begin; r < end; r++) {
		double t = j->pos[r];
		for (int i = 0; i < half; i++) {
			double a = t * j->rf->f[i];
			cs[i] = (float)cos(a);
			sn[i] = j->inverse ? -(float)sin(a) : (float)sin(a);
		}
		for (int64_t h = 0; h < j->H; h++) {
			int64_t off = ((int64_t)r * j->H + h) * j->n;
			cpu_load(j->x, off, j->n, v);
			float *tail = v + j->n - j->rf->dim;
			for (int i = 0; i < half; i++) {
				float a = tail[2 * i], b = tail[2 * i + 1];
				tail[2 * i] = a * cs[i] - b * sn[i];
				tail[2 * i + 1] = a * sn[i] + b * cs[i];
			}
			cpu_store(j->y, off, j->n, v);
		}
	}
}

tf_status cpu_rope(struct tf_be *be, const struct tf_tensor *x, const struct tf_tensor *pos,
			  const struct tf_rope_freqs *rf, int inverse, struct tf_tensor *y)
{
	tf_status st;
	int64_t R, H, n;
	if ((st = tf_args_rope(x, pos, rf, y, &R, &H, &n)))
		return st;
	int workers = tf_pool_size(cpu_pool(be));
	float *buf = tf_alloc_array((size_t)workers, (size_t)(n + rf->dim) * sizeof(float));
	if (!buf)
		return tf_err(TF_ERR_NOMEM, "rope: out of memory");
	struct rope_job j = {.x = x, .y = y, .pos = cpu_i32(pos), .rf = rf, .buf = buf,
			     .H = tf_tensor_numel(x) / (R * n), .n = n, .inverse = inverse};
	tf_pool_for(cpu_pool(be), (size_t)R, 1, rope_part, &j);
	free(buf);
	return TF_OK;
}

