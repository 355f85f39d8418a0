/* cpu_moe.c: the CPU MoE ops: routing (sqrt-softplus, bias-selected top-k,
 * normalised and scaled weights), the clamped SwiGLU and the combine of the
 * experts' outputs (dsv41-forward-spec.md §10). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "compute/cpu_impl.h"
#include "compute/ops_args.h"

/* softplus(x) = ln(1 + e^x), = x past 20 (where e^-x is below fp32's ulp). */
static inline float softplus(float x)
{
	return x > 20.0f ? x : log1pf(expf(x));
}

tf_status cpu_moe_route(struct tf_be *be, const struct tf_tensor *lg, const struct tf_tensor *bias,
			int k, float scale, struct tf_tensor *ids, struct tf_tensor *weights)
{
	tf_status st;
	int64_t R, E;
	if ((st = tf_args_moe_route(lg, bias, k, ids, weights, &R, &E)))
		return st;
	float *sc = tf_alloc_array((size_t)E, sizeof *sc);
	if (!sc)
		return tf_err(TF_ERR_NOMEM, "moe_route: out of memory");
	const float *b = bias->data;
	for (int64_t r = 0; r < R; r++) {
		const float *l = (const float *)lg->data + r * E;
		int32_t *id = (int32_t *)ids->data + r * k;
		float *w = (float *)weights->data + r * k;
		for (int64_t e = 0; e < E; e++)
			sc[e] = sqrtf(softplus(l[e]));
		/* k passes of a max search: k is small (6) and ties go to the
		 * smaller id because only a strictly larger score replaces. */
		for (int i = 0; i < k; i++) {
			int32_t best = -1;
			float bv = 0;
			for (int64_t e = 0; e < E; e++) {
				int taken = 0;
				for (int t = 0; t < i; t++)
					taken |= id[t] == e;
				float v = sc[e] + b[e];
				if (!taken && (best < 0 || v > bv || (bv != bv && v == v))) {
					best = (int32_t)e;
					bv = v;
				}
			}
			id[i] = best;
		}
		float sum = 0;
		for (int i = 0; i < k; i++)
			sum += sc[id[i]];
		for (int i = 0; i < k; i++)
			w[i] = scale * sc[id[i]] / sum;
	}
	free(sc);
	return TF_OK;
}

tf_status cpu_swiglu(struct tf_be *be, const struct tf_tensor *gate, const struct tf_tensor *up,
		     float limit, struct tf_tensor *a)
{
	tf_status st;
	int64_t n;
	if ((st = tf_args_swiglu(gate, up, a, &n)))
		return st;
	const float *g = gate->data, *u = up->data;
	float buf[256];
	for (int64_t i = 0; i < n; i += 256) {
		int64_t m = n - i < 256 ? n - i : 256;
		for (int64_t j = 0; j < m; j++) {
			float t = g[i + j] < limit ? g[i + j] : limit;
			float v = u[i + j] < -limit ? -limit : u[i + j] > limit ? limit : u[i + j];
			buf[j] = t / (1.0f + expf(-t)) * v;
		}
		cpu_store(a, i, m, buf);
	}
	return TF_OK;
}

tf_status cpu_moe_combine(struct tf_be *be, const struct tf_tensor *y, const struct tf_tensor *w,
			  const struct tf_tensor *shared, struct tf_tensor *branch)
{
	tf_status st;
	int64_t R, k, D;
	if ((st = tf_args_moe_combine(y, w, shared, branch, &R, &k, &D)))
		return st;
	float *acc = tf_alloc_array((size_t)D, sizeof *acc);
	if (!acc)
		return tf_err(TF_ERR_NOMEM, "moe_combine: out of memory");
	for (int64_t r = 0; r < R; r++) {
		const float *wr = (const float *)w->data + r * k;
		memset(acc, 0, (size_t)D * sizeof *acc);
		for (int64_t i = 0; i < k; i++) {
			const float *yi = (const float *)y->data + (r * k + i) * D;
			for (int64_t d = 0; d < D; d++)
				acc[d] += wr[i] * yi[d];
		}
		if (shared) {
			const float *s = (const float *)shared->data + r * D;
			for (int64_t d = 0; d < D; d++)
				acc[d] += s[d];
		}
		cpu_store(branch, r * D, D, acc);
	}
	free(acc);
	return TF_OK;
}

/* ---- grouping by expert (ops.h moe_group) ---- */

tf_status cpu_moe_group(struct tf_be *be, const struct tf_tensor *ids, int E,
			struct tf_tensor *offsets, struct tf_tensor *pair, struct tf_tensor *src)
{
	tf_status st;
	int64_t T, k;
	if ((st = tf_args_moe_group(ids, E, offsets, pair, src, &T, &k)))
		return st;
	const int32_t *id = cpu_i32(ids);
	int32_t *off = offsets->data, *pr = pair->data, *sr = src->data;
	memset(off, 0, ((size_t)E + 1) * sizeof *off);
	for (int64_t t = 0; t < T; t++) /* counts, one slot up */
		if (id[t] >= 0 && id[t] < E)
			off[id[t] + 1]++;
	for (int e = 0; e < E; e++)
		off[e + 1] += off[e];
	int32_t *fill = tf_alloc_array((size_t)E, sizeof *fill);
	if (!fill)
		return tf_err(TF_ERR_NOMEM, "moe_group: out of memory");
	memcpy(fill, off, (size_t)E * sizeof *fill);
	for (int64_t p = off[E]; p < T; p++)
		pr[p] = sr[p] = -1;
	for (int64_t t = 0; t < T; t++) /* stable: t in order within each expert */
		if (id[t] >= 0 && id[t] < E) {
			int32_t p = fill[id[t]]++;
			pr[p] = (int32_t)t;
			sr[p] = (int32_t)(t / k);
		}
	free(fill);
	return TF_OK;
}
